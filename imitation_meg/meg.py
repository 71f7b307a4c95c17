"""Exact known-utility maximum entropy goal-directedness (MEG).

For a policy ``pi`` and utility ``U`` (paper Definition 3.1 / 4.1)

    MEG_U(pi) = sup_{beta in R u {+-inf}}  L(beta) + H log|A|,
    L(beta)   = E_pi[ sum_t log pi_beta,t(a_t | s_t) ],

with the expectation over ``pi``'s own state occupancy. ``L`` is concave in ``beta`` and

    dL/dbeta = sum_t E_{(s,a) ~ pi_t}[ G_t(s, a) - E_{a' ~ pi_beta,t}[G_t(s, a')] ],

where ``G_t`` is the (discounted) utility-to-go of ``pi_beta``; with ``discount = 1`` this is
``E_pi[sum_t U] - E_{pi_beta}[sum_t U]``. The solver brackets the root of ``dL/dbeta`` on a
logarithmic grid of ``beta`` evaluated in one batched backward pass, narrows the bracket by
batched grid refinement (or a safeguarded secant step for very large MDPs), and compares the
interior optimum with the exact limits at ``beta = +-inf``. The result is deterministic and
accurate to about 1e-10 relative.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch as th

from imitation_meg.mdp import TabularMDP, as_tensor
from imitation_meg.policies import as_policy
from imitation_meg.soft_vi import TIE_TOL, _tie_log_policy, occupancy_measures

__all__ = [
    "MEGResult",
    "meg",
    "meg_one_step",
    "MEGObjective",
    "sa_occupancy_of",
    "as_sa_occupancy",
]

# Grid and stopping settings of the 1-D solver.
_GRID_DECADES = (-4.0, 4.0)  # beta * scale from 1e-4 to 1e4 on the first grid
_MAX_DECADES = 15.0  # extend the grid up to beta * scale = 1e15
_BRACKET_RTOL = 1e-11
# Temporary-memory budget (entries of S * A * B per beta) that sets the batch size.
_BATCH_ENTRIES = 1 << 24


@dataclasses.dataclass(frozen=True)
class MEGResult:
    """Result of a MEG computation.

    Attributes:
        meg: the maximum entropy goal-directedness (nats); signed if ``signed=True``.
        beta: the maximising rationality (``+inf`` / ``-inf`` when the supremum is a limit).
        upper_bound: ``H log|A|``.
        normalized: ``meg / upper_bound``.
        expected_utility: ``E_pi[sum_t gamma^t U]`` of the scored policy.
        model_expected_utility: the same for the fitted soft-optimal policy ``pi_beta``.
        uniform_expected_utility: the same for the uniform policy.
        log_likelihood: ``L(beta) = E_pi[sum_t log pi_beta,t]`` at the optimum.
        grad: ``dL/dbeta`` at the reported beta (0 at an interior optimum; ``nan`` at +-inf).
        converged: the 1-D solve met its tolerance (or the supremum is an exact limit).
        at_boundary: the supremum lies at ``beta = +-inf``.
        signed: whether ``meg`` carries the sign of ``E_pi[U] - E_uniform[U]``.
        evaluations: number of beta values evaluated.
        extra: additional fields of specialised solvers (unknown-utility MEG and friends).
    """

    meg: float
    beta: float
    upper_bound: float
    normalized: float
    expected_utility: float
    model_expected_utility: float
    uniform_expected_utility: float
    log_likelihood: float
    grad: float
    converged: bool
    at_boundary: bool
    signed: bool = False
    evaluations: int = 0
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (infinite floats become ``"inf"`` / ``"-inf"``)."""

        def clean(v: Any) -> Any:
            if isinstance(v, float):
                if math.isnan(v):
                    return None
                if math.isinf(v):
                    return "inf" if v > 0 else "-inf"
                return v
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            if isinstance(v, (th.Tensor, np.ndarray)):
                return clean(np.asarray(v.detach().cpu() if isinstance(v, th.Tensor) else v).tolist())
            if isinstance(v, (np.floating, np.integer)):
                return clean(v.item())
            return v

        return {f.name: clean(getattr(self, f.name)) for f in dataclasses.fields(self)}


class MEGObjective:
    """``L(beta)``, ``dL/dbeta`` and the model's expected utility for a fixed behaviour and utility.

    The behaviour enters only through its state-action occupancy ``w[t, s, a] = P(s_t = s,
    a_t = a)``: either computed from a policy in the MDP's dynamics, or given directly (for
    example as empirical frequencies of trajectories).

    Args:
        mdp: the MDP.
        policy: ``(S, A)`` or ``(H, S, A)`` policy (validated); ignored if ``sa_occupancy`` is given.
        utility: utility (default the MDP's); reduced to ``r (S, A)``.
        sa_occupancy: optional ``(H, S, A)`` non-negative occupancy, each ``w[t]`` summing to 1.

    Attributes:
        sa_occupancy: ``(H, S, A)`` state-action occupancy at decision times.
        expected_utility: ``E[sum_t gamma^t r(s_t, a_t)]`` under that occupancy.
    """

    def __init__(
        self, mdp: TabularMDP, policy: Any = None, utility: Any = None, *, sa_occupancy: Any = None
    ) -> None:
        self.mdp = mdp
        self.r = mdp.reward_sa(utility).detach()
        if sa_occupancy is not None:
            self.sa_occupancy = as_sa_occupancy(sa_occupancy, mdp)
        elif policy is not None:
            self.sa_occupancy = sa_occupancy_of(mdp, policy)
        else:
            raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
        H = mdp.horizon
        gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
        self.expected_utility = float((gam.view(H, 1, 1) * self.sa_occupancy * self.r).sum())
        self.evaluations = 0
        sab = mdp.n_states * mdp.n_actions * mdp.branching
        self.batch = int(max(1, min(64, _BATCH_ENTRIES // max(sab, 1))))

    def _w(self, t: int) -> th.Tensor:
        return self.sa_occupancy[t]  # (S, A)

    def evaluate(self, betas: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Evaluate finite betas ``(K,)`` in batches.

        Returns:
            ``(L (K,), dL (K,), model_expected_utility (K,))``.
        """
        outs = [self._evaluate(betas[i : i + self.batch]) for i in range(0, betas.numel(), self.batch)]
        return tuple(th.cat([o[j] for o in outs]) for j in range(3))  # type: ignore[return-value]

    def _evaluate(self, betas: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        mdp, r = self.mdp, self.r
        K = betas.numel()
        self.evaluations += K
        S = mdp.n_states
        scaled = betas.view(K, 1, 1) * r
        carry = r.new_zeros(2 * K, S)  # [soft V_{t+1}; g_{t+1}] stacked for one gather
        L = r.new_zeros(K)
        dL = r.new_zeros(K)
        gamma = mdp.discount
        for t in range(mdp.horizon - 1, -1, -1):
            nxt = mdp.expect_next(carry) if t < mdp.horizon - 1 else None
            if nxt is None:
                q = scaled
                G = r.expand(K, -1, -1)
            else:
                q = scaled + gamma * nxt[:K]
                G = r + gamma * nxt[K:]
            logp = th.log_softmax(q, -1)
            p = logp.exp()
            g = (p * G).sum(-1)
            w = self._w(t)
            L += (w * logp).sum((-1, -2))
            dL += (w * (G - g.unsqueeze(-1))).sum((-1, -2))
            carry = th.cat([th.logsumexp(q, -1), g], 0)
        model_eu = carry[K:] @ mdp.initial_state_dist
        return L, dL, model_eu

    def evaluate_limit(self, sign: float) -> tuple[float, float]:
        """``L`` and the model's expected utility at ``beta = sign * inf``."""
        mdp, r = self.mdp, self.r
        V_next = r.new_zeros(mdp.n_states)
        L = 0.0
        for t in range(mdp.horizon - 1, -1, -1):
            Q = r + mdp.discount * mdp.expect_next(V_next) if t < mdp.horizon - 1 else r
            logp = _tie_log_policy(Q, sign, TIE_TOL)
            w = self._w(t)
            term = th.where(w > 0, w * logp, th.zeros_like(w)).sum()
            L += float(term)
            V_next = Q.amax(-1) if sign > 0 else Q.amin(-1)
        return L, float(V_next @ mdp.initial_state_dist)


def sa_occupancy_of(mdp: TabularMDP, policy: Any) -> th.Tensor:
    """State-action occupancy ``w[t, s, a] = P(s_t = s) pi_t(a | s)`` of a policy, ``(H, S, A)``."""
    pi = as_policy(policy, mdp)
    D = occupancy_measures(mdp, pi)[:-1]  # (H, S)
    pi_t = pi if pi.ndim == 3 else pi.unsqueeze(0)
    return D.unsqueeze(-1) * pi_t


def as_sa_occupancy(w: Any, mdp: TabularMDP, *, name: str = "sa_occupancy") -> th.Tensor:
    """Validate an ``(H, S, A)`` state-action occupancy (non-negative, each step summing to 1).

    Raises:
        ValueError: wrong shape, negative or non-finite entries, or a step not summing to 1
            (tolerance 1e-6).
    """
    w = as_tensor(w, name=name, dtype=mdp.dtype, device=mdp.device)
    shape = (mdp.horizon, mdp.n_states, mdp.n_actions)
    if tuple(w.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(w.shape)}.")
    if not bool(th.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError(f"{name} must be finite and non-negative.")
    sums = w.sum((-1, -2))
    bad = (sums - 1).abs() > 1e-6
    if bool(bad.any()):
        raise ValueError(
            f"{name} steps {bad.nonzero().flatten()[:5].tolist()} sum to "
            f"{sums[bad][:5].tolist()}, not 1; each w[t] must be a distribution over (s, a)."
        )
    return w


def _scale(r: th.Tensor) -> float:
    """Spread of the per-step reward across actions, the natural unit of 1/beta."""
    spread = (r.amax(-1) - r.amin(-1)).max()
    total = r.max() - r.min()
    return float(spread if spread > 0 else total)


def _solve(obj: MEGObjective) -> dict[str, Any]:
    """Maximise the concave L(beta); returns the fields of MEGResult (unsigned)."""
    mdp = obj.mdp
    dt, dev = mdp.dtype, mdp.device
    H, A = mdp.horizon, mdp.n_actions
    L0 = -H * math.log(A)
    zero = th.zeros(1, dtype=dt, device=dev)
    scale = _scale(obj.r)
    _, dL0_t, eu0_t = obj.evaluate(zero)
    dL0, eu_uniform = float(dL0_t[0]), float(eu0_t[0])
    base = dict(uniform_expected_utility=eu_uniform, expected_utility=obj.expected_utility)
    # Tolerance on the derivative below which beta = 0 is optimal (utility gives no signal).
    d_tol = 1e-12 * max(1.0, abs(obj.expected_utility), abs(eu_uniform), H * scale)
    if scale == 0.0 or abs(dL0) <= d_tol:
        return dict(base, beta=0.0, L=L0, grad=dL0, model_eu=eu_uniform, converged=True,
                    at_boundary=False)
    sign = 1.0 if dL0 > 0 else -1.0
    L_inf, eu_inf = obj.evaluate_limit(sign)

    # 1. Bracket the root of dL on a log grid of |beta| * scale.
    K = min(obj.batch, 16)
    lo_dec, hi_dec = _GRID_DECADES
    best: tuple[float, float, float, float] = (0.0, L0, dL0, eu_uniform)  # beta, L, dL, eu
    lo_beta, lo_d = 0.0, dL0
    hi_beta = None
    while True:
        n = K if K > 1 else int(hi_dec - lo_dec) + 1
        grid = sign * th.logspace(lo_dec, hi_dec, n, dtype=dt, device=dev) / scale
        if K == 1:
            Ls, dLs, eus = [], [], []
            for b in grid:  # sequential: stop at the first sign change
                l, d, e = obj.evaluate(b.view(1))
                Ls.append(l), dLs.append(d), eus.append(e)
                if float(d[0]) * sign <= 0:
                    break
            Lg, dLg, eug = th.cat(Ls), th.cat(dLs), th.cat(eus)
            grid = grid[: Lg.numel()]
        else:
            Lg, dLg, eug = obj.evaluate(grid)
        for j in range(grid.numel()):
            bj, dj = float(grid[j]), float(dLg[j])
            if float(Lg[j]) > best[1]:
                best = (bj, float(Lg[j]), dj, float(eug[j]))
            if dj * sign <= 0:
                hi_beta, hi_d = bj, dj
                break
            lo_beta, lo_d = bj, dj
        if hi_beta is not None:
            break
        # dL keeps the sign of dL0 over the whole grid: L still increases.
        if math.isfinite(L_inf) and best[1] >= L_inf - 1e-12 * max(1.0, abs(L_inf)):
            return dict(base, beta=sign * math.inf, L=max(L_inf, best[1]), grad=math.nan,
                        model_eu=eu_inf, converged=True, at_boundary=True)
        if hi_dec >= _MAX_DECADES:
            if math.isfinite(L_inf) and L_inf >= best[1]:
                return dict(base, beta=sign * math.inf, L=L_inf, grad=math.nan, model_eu=eu_inf,
                            converged=True, at_boundary=True)
            return dict(base, beta=best[0], L=best[1], grad=best[2], model_eu=best[3],
                        converged=False, at_boundary=False)
        lo_dec, hi_dec = hi_dec, min(hi_dec + 4.0, _MAX_DECADES)

    # 2. Narrow the bracket [a, b] (dL changes sign inside) with secant-centred probes: each
    # round evaluates the secant estimate and two points a small step either side of it, so a
    # good estimate shrinks the bracket to twice that step (superlinear, like Illinois).
    a, da, b, db = lo_beta, lo_d, hi_beta, hi_d
    converged = False
    step_frac = 0.05
    for _ in range(100):
        width = abs(b - a)
        if width <= _BRACKET_RTOL * max(abs(a), abs(b)) or db == 0.0:
            converged = True
            break
        x = a - da * (b - a) / (db - da)
        lo_x, hi_x = min(a, b), max(a, b)
        h = step_frac * width
        x = min(max(x, lo_x + h), hi_x - h)
        probes = [x - h, x, x + h] if obj.batch >= 3 else [x]
        pts = th.tensor(sorted(probes, key=lambda v: sign * v), dtype=dt, device=dev)
        Lp, dLp, eup = obj.evaluate(pts)
        for j in range(pts.numel()):
            if float(Lp[j]) > best[1]:
                best = (float(pts[j]), float(Lp[j]), float(dLp[j]), float(eup[j]))
        old_width = width
        for j in range(pts.numel()):  # ordered from a towards b
            dj = float(dLp[j])
            if dj * sign > 0:
                a, da = float(pts[j]), dj
            else:
                b, db = float(pts[j]), dj
                break
        # Tighten the probe step when the secant lands well; widen it when it does not.
        step_frac = max(step_frac * 0.01, 1e-14) if abs(b - a) < 0.1 * old_width else 0.05
    if db != 0.0:
        x = a - da * (b - a) / (db - da)
        Lx, dLx, eux = obj.evaluate(th.tensor([x], dtype=dt, device=dev))
        if float(Lx[0]) >= best[1]:
            best = (x, float(Lx[0]), float(dLx[0]), float(eux[0]))
    elif float(b) != best[0]:
        Lb, dLb, eub = obj.evaluate(th.tensor([b], dtype=dt, device=dev))
        if float(Lb[0]) >= best[1]:
            best = (b, float(Lb[0]), float(dLb[0]), float(eub[0]))
    # The limit wins when it is at least as good: a finite beta whose soft policy has
    # saturated to the hard one (dL exactly 0) is reported as the exact limit.
    if math.isfinite(L_inf) and L_inf >= best[1] - 1e-12 * max(1.0, abs(best[1])):
        return dict(base, beta=sign * math.inf, L=max(L_inf, best[1]), grad=math.nan,
                    model_eu=eu_inf, converged=True, at_boundary=True)
    return dict(base, beta=best[0], L=best[1], grad=best[2], model_eu=best[3],
                converged=converged, at_boundary=False)


def meg(
    policy: Any,
    mdp: TabularMDP,
    utility: Any = None,
    *,
    signed: bool = False,
    sa_occupancy: Any = None,
) -> MEGResult:
    """Known-utility MEG of a policy, solved exactly.

    Args:
        policy: ``(S, A)`` stationary or ``(H, S, A)`` time-dependent probabilities
            (numpy or torch); validated and renormalised.
        mdp: the MDP (dynamics, horizon ``H``, initial distribution, discount).
        utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)``; default ``mdp.utility``.
        signed: multiply by the sign of ``E_pi[U] - E_uniform[U]`` (paper footnote 4), so that
            policies that pursue ``-U`` get negative scores.
        sa_occupancy: optional ``(H, S, A)`` state-action occupancy that replaces the policy's
            own (e.g. empirical frequencies from trajectories); ``policy`` may then be None.

    Returns:
        :class:`MEGResult`. ``0 <= meg <= H log|A|`` when unsigned.

    Raises:
        ValueError / TypeError: on invalid policies or utilities (see :func:`as_policy`).

    Example:
        >>> from imitation_meg import envs, policies
        >>> mdp = envs.cliff_world(horizon=10)
        >>> round(meg(policies.uniform(mdp), mdp).meg, 12)
        0.0
    """
    if not isinstance(mdp, TabularMDP):
        raise TypeError(
            f"mdp must be an imitation_meg.TabularMDP, got {type(mdp).__name__}; build one with "
            "TabularMDP(...) or TabularMDP.from_env(env)."
        )
    obj = MEGObjective(mdp, policy, utility, sa_occupancy=sa_occupancy)
    sol = _solve(obj)
    H, A = mdp.horizon, mdp.n_actions
    bound = H * math.log(A)
    value = max(sol["L"] + bound, 0.0)
    value = min(value, bound)
    diff = sol["expected_utility"] - sol["uniform_expected_utility"]
    tol = 1e-12 * max(1.0, abs(sol["expected_utility"]))
    if signed:
        value = value if diff > tol else (-value if diff < -tol else 0.0)
    return MEGResult(
        meg=float(value),
        beta=float(sol["beta"]),
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=float(sol["expected_utility"]),
        model_expected_utility=float(sol["model_eu"]),
        uniform_expected_utility=float(sol["uniform_expected_utility"]),
        log_likelihood=float(sol["L"]),
        grad=float(sol["grad"]),
        converged=bool(sol["converged"]),
        at_boundary=bool(sol["at_boundary"]),
        signed=signed,
        evaluations=obj.evaluations,
    )


def meg_one_step(
    policy: Any,
    expected_utility: Any,
    state_dist: Any = None,
    *,
    signed: bool = False,
) -> MEGResult:
    """MEG of a single decision given the expected utilities ``E[U | d, s]``.

    This is the paper's setting for one-shot problems such as the mouse of Example 1: the
    decision ``d`` is taken once, in a state ``s`` drawn from ``state_dist``, and
    ``expected_utility[s, d]`` already averages over whatever follows.

    Args:
        policy: ``(S, D)`` or ``(D,)`` decision probabilities.
        expected_utility: ``(S, D)`` or ``(D,)`` values ``E[U | d, s]``.
        state_dist: ``(S,)``; default uniform over the ``S`` states.
        signed: as in :func:`meg`.

    Returns:
        :class:`MEGResult` with ``upper_bound = log D``.

    Example:
        >>> round(meg_one_step([0.8, 0.2], [1.0, -1.0]).meg, 4)
        0.1927
    """
    u = as_tensor(expected_utility, name="expected_utility", dtype=th.float64)
    pi = as_tensor(policy, name="policy", dtype=th.float64)
    if u.ndim == 1:
        u = u.unsqueeze(0)
    if pi.ndim == 1:
        pi = pi.unsqueeze(0)
    if u.ndim != 2:
        raise ValueError(f"expected_utility must be (D,) or (S, D), got shape {tuple(u.shape)}.")
    S, D = u.shape
    if pi.shape != (S, D):
        raise ValueError(
            f"policy must have the shape of expected_utility {(S, D)}, got {tuple(pi.shape)}."
        )
    p0 = th.full((S,), 1.0 / S, dtype=th.float64) if state_dist is None else state_dist
    # One decision; the next state is irrelevant (self-loops).
    nxt = th.arange(S).view(S, 1, 1).expand(S, D, 1)
    mdp = TabularMDP((nxt, th.ones(S, D, 1, dtype=th.float64)), u, 1, p0, name="one-step")
    return meg(pi, mdp, signed=signed)
