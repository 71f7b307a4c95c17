"""Exact known-utility maximum entropy goal-directedness (MEG).

For a policy ``pi`` and utility ``U`` (paper Definition 3.1 / 4.1)

    MEG_U(pi) = sup_{beta in R u {+-inf}}  L(beta) + H log|A|,
    L(beta)   = E_pi[ sum_t log pi_beta,t(a_t | s_t) ],

with the expectation over ``pi``'s own state occupancy. ``L`` is concave in ``beta`` and

    dL/dbeta = sum_t E_{(s,a) ~ pi_t}[ G_t(s, a) - E_{a' ~ pi_beta,t}[G_t(s, a')] ],

where ``G_t`` is the (discounted) utility-to-go of ``pi_beta``; with ``discount = 1`` this is
``E_pi[sum_t U] - E_{pi_beta}[sum_t U]``. :func:`objective_reference` computes ``L`` and its
first two derivatives by a plain loop over time (the reference); :class:`MEGObjective` computes
them for a batch of betas in one fused pass (:mod:`imitation_meg.core.kernels.known_passes`, tested against
the reference), and :func:`meg` maximises ``L`` with the 1-D solver of
:mod:`imitation_meg.core.beta.solver`, which also compares the interior optimum with the exact limits
at ``beta = +-inf``. :func:`meg` solves for the normalised utility ``(r - shift) / unit`` (spread 1
across actions) and maps ``beta`` and the expected utilities back, so the result does not depend
on the utility's scale or offset (Proposition 3.1; tested for scales 1e-200 .. 1e200). The result
is deterministic; ``beta`` is accurate to about 1e-11 relative at an interior optimum, and the
limits at ``+-inf`` (including the limit of ``L(beta)`` where hard Q-values tie) are exact to
rounding.

Reusing the solver. Any objective of the same form (a concave ``L(beta)`` with exact first and
second derivatives and exact limits at ``+-inf``; e.g. MEG of a decision in a causal influence
diagram) gets the same exact 1-D solve by implementing
:class:`~imitation_meg.core.beta.solver.BetaObjective` and calling
:func:`~imitation_meg.core.beta.solver.solve_beta`::

    class OneDecision:                      # U(d) for a decision with D options, policy p(d)
        scale = U.max() - U.min()           # natural unit of 1 / beta
        utility_scale = scale               # natural size of expected utilities
        expected_utility = p @ U
        L0 = -log(D)                        # L at beta = 0
        betas_per_pass = 8                  # a batched evaluation costs about one

        def evaluate_batch(self, betas, *, second=True):   # -> BetaEvaluation of (K,) tensors
            logits = betas[:, None] * U;  q = softmax(logits)
            L = (p * log_softmax(logits)).sum(-1)
            dL = p @ U - q @ U;  d2L = -(q * U**2).sum(-1) + (q @ U) ** 2
            return BetaEvaluation(L, dL, d2L, q @ U)

        def evaluate_zero(self):
            return self.evaluate_batch(th.zeros(1))

        def evaluate_limit(self, sign):     # -> LimitValue(L, model_eu) at beta = sign * inf
            ...                             # the uniform policy over the argmax of sign * U

        def limit_upper_bound(self):
            return math.inf                 # or a bound that lets the solver skip the limits

    sol = solve_beta(OneDecision())         # BetaSolution(beta, L, grad, model_eu, ...)

``tests/core/beta/test_solver.py`` runs this objective (in closed form) against the solver.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import torch as th

from imitation_meg._validation import BetaRangeWarning, as_policy, as_sa_occupancy, as_tensor
from imitation_meg.core.beta.solver import (
    BetaEvaluation,
    BetaObjective,
    BetaSolution,
    LimitValue,
    solve_beta,
)
from imitation_meg.core.discounted import CONVERGED_RESIDUAL, DiscountedMEGObjective
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.kernels.known_passes import (
    Behaviour,
    derivative_pass,
    limit_pass,
    zero_pass,
)
from imitation_meg.core.kernels.limits import tie_set
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import occupancy_measures
from imitation_meg.results import to_jsonable
from imitation_meg.type_aliases import ArrayLike, PolicyLike, UtilityLike

__all__ = [
    "BetaEvaluation",
    "BetaObjective",
    "BetaSolution",
    "LimitValue",
    "MEGObjective",
    "MEGResult",
    "as_sa_occupancy",
    "clipped_meg",
    "meg",
    "meg_one_step",
    "meg_upper_bound",
    "objective_reference",
    "sa_occupancy_of",
    "signed_meg",
    "solve_beta",
]

_BETAS_PER_PASS = 8
# Up to this many state-action pairs a pass over 8 betas costs about as much as one (per-step
# call overhead dominates: 10x4 CliffWorld 1.2 ms against 0.7 ms), and the solver batches; above
# it a pass costs about K times one (100x20: 115 ms against 24 ms for 8 betas) and the solver
# takes one Newton step per pass.
_BATCH_MAX_SA = 1 << 11
# Temporary-memory budget of one batched pass (about 16 (S, A) temporaries per beta).
_BATCH_BYTES = 1 << 28


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
        passes: passes over the MDP (known-utility MEG): the behaviour's occupancy, the
            ``beta = 0`` pass, each batched pass over betas (counted once) and the limit pass.
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
    passes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (NaN becomes ``None``, infinite floats ``"inf"`` / ``"-inf"``)."""
        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


def meg_upper_bound(mdp: TabularMDP) -> float:
    """The largest MEG in ``mdp``: ``H log|A|``, or ``log|A| / (1 - gamma)`` for a discounted
    infinite-horizon MDP (minus ``L`` of the uniform model)."""
    if mdp.horizon is None:
        return math.log(mdp.n_actions) / (1.0 - mdp.discount)
    return mdp.horizon * math.log(mdp.n_actions)


def clipped_meg(log_likelihood: float, bound: float) -> float:
    """``L + H log|A|`` clipped to ``[0, bound]``, values within rounding of 0 (``1e-12 *
    max(1, bound)``) reported as 0: the MEG of a class's best model."""
    value = min(max(log_likelihood + bound, 0.0), bound)
    return 0.0 if value <= 1e-12 * max(1.0, bound) else value


def signed_meg(value: float, expected_utility: float, uniform_expected_utility: float) -> float:
    """``value`` with the sign of ``E_pi[U] - E_uniform[U]`` (paper footnote 4; 0 when they agree
    to ``1e-12`` relative)."""
    diff = expected_utility - uniform_expected_utility
    tol = 1e-12 * max(1.0, abs(expected_utility))
    return value if diff > tol else (-value if diff < -tol else 0.0)


class MEGObjective:
    """``L(beta)``, its derivatives and the model's expected utility for a fixed behaviour and
    utility: the known-utility :class:`~imitation_meg.core.beta.solver.BetaObjective`.

    The behaviour enters only through its state-action occupancy ``w[t, s, a] = P(s_t = s,
    a_t = a)``: either computed from a policy in the MDP's dynamics, or given directly (for
    example as empirical frequencies of trajectories).

    Args:
        mdp: the MDP.
        policy: ``(S, A)`` or ``(H, S, A)`` policy (validated); ignored if ``sa_occupancy`` is given.
        utility: utility (default the MDP's); reduced to ``r (S, A)``.
        sa_occupancy: optional ``(H, S, A)`` non-negative occupancy, each ``w[t]`` summing to 1.

    Attributes:
        behaviour: the behaviour's occupancy record (state occupancy ``D (H, S)`` and the policy
            or the state-action occupancy).
        expected_utility: ``E[sum_t gamma^t r(s_t, a_t)]`` under that occupancy.
        scale: the spread of ``r`` across actions (the natural unit of ``1 / beta``).
        utility_scale: ``H * scale``.
        L0: ``L(0) = -H log|A|``.
        eps: the relative precision of the passes (the MDP's dtype); the solver's tolerances
            are no finer than 10 of it.
        batch: the largest number of betas one pass evaluates (memory budget).
        evaluations: betas evaluated so far; passes: calls so far.
    """

    def __init__(
        self,
        mdp: TabularMDP,
        policy: PolicyLike | None = None,
        utility: UtilityLike | None = None,
        *,
        sa_occupancy: ArrayLike | None = None,
    ) -> None:
        self.mdp = mdp
        self.r = mdp.reward_sa(utility).detach()
        H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
        if sa_occupancy is not None:
            sa = as_sa_occupancy(sa_occupancy, mdp)
            self.behaviour = Behaviour(D=sa.sum(-1), sa=sa)  # (H, S) state marginals
        elif policy is not None:
            # Memory-lean form: state occupancy (H, S) and the policy, not (H, S, A).
            pi = as_policy(policy, mdp).to(mdp.dtype)
            self.behaviour = Behaviour(D=occupancy_measures(mdp, pi, validate=False)[:-1], pi=pi)
        else:
            raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
        beh = self.behaviour
        gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
        if beh.sa is not None:
            eu = (gam.view(H, 1, 1) * beh.sa * self.r).sum()
        elif beh.pi is not None and beh.pi.ndim == 2:
            eu = ((gam.view(H, 1) * beh.D).sum(0) * (beh.pi * self.r).sum(-1)).sum()
        else:
            assert beh.pi is not None
            eu = (gam.view(H, 1) * beh.D * (beh.pi * self.r).sum(-1)).sum()
        self.expected_utility = float(eu)
        self.scale = _scale(self.r)
        self.utility_scale = H * self.scale
        self.L0 = -H * math.log(A)
        self.eps = float(th.finfo(mdp.dtype).eps)  # the passes' precision (float32: 1.2e-7)
        self.evaluations = 0
        self.passes = 0
        self._limits: dict[float, tuple[float, float, float]] = {}
        self._limit_bound: float | None = None
        per_beta = 16 * S * A * self.r.element_size()
        self.batch = int(max(1, min(64, _BATCH_BYTES // max(per_beta, 1))))

    @property
    def betas_per_pass(self) -> int:
        """Betas per solver pass: at small ``S * A`` a pass costs about the same for 1 or 8
        betas (per-step overhead dominates); above ``_BATCH_MAX_SA`` one (a pass over K betas
        costs about K times one), and the memory budget ``batch`` may cap it further."""
        if self.mdp.n_states * self.mdp.n_actions > _BATCH_MAX_SA:
            return 1
        return max(1, min(self.batch, _BETAS_PER_PASS))

    @property
    def sa_occupancy(self) -> th.Tensor:
        """``(H, S, A)`` state-action occupancy ``w[t, s, a]`` (materialised on request)."""
        return self.behaviour.sa_occupancy()

    def evaluate(self, betas: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Evaluate finite betas ``(K,)`` in batches.

        Returns:
            ``(L (K,), dL (K,), model_expected_utility (K,))``.
        """
        L, dL, _, eu, _ = self.evaluate_batch(betas)
        return L, dL, eu

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """Like :meth:`evaluate`, with the exact second derivative (NaN with ``second=False``,
        a cheaper pass: 9 instead of 12 calls per step).

        Returns:
            :class:`~imitation_meg.core.beta.solver.BetaEvaluation` ``(L, dL, d2L, model_eu,
            dmodel_eu)``, each ``(K,)``.
        """
        betas = betas.to(dtype=self.mdp.dtype, device=self.mdp.device).reshape(-1)
        outs = []
        for i in range(0, betas.numel(), self.batch):
            chunk = betas[i : i + self.batch]
            self.evaluations += chunk.numel()
            self.passes += 1
            outs.append(derivative_pass(self.mdp, self.r, self.behaviour, chunk, second=second))
        if len(outs) == 1:
            return BetaEvaluation(*outs[0])
        return BetaEvaluation(*(th.cat([o[j] for o in outs]) for j in range(5)))

    def evaluate2(
        self, betas: th.Tensor, *, second: bool = True
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """The former form of :meth:`evaluate_batch`: ``(L, dL, d2L, model_expected_utility)``."""
        ev = self.evaluate_batch(betas, second=second)
        return ev.L, ev.dL, ev.d2L, ev.model_eu

    def evaluate_zero(self) -> BetaEvaluation:
        """The pass at ``beta = 0`` (the uniform policy; cheaper than :meth:`evaluate_batch`)."""
        self.evaluations += 1
        self.passes += 1
        return BetaEvaluation(*zero_pass(self.mdp, self.r, self.behaviour))

    def limit_upper_bound(self) -> float:
        """An upper bound on ``L`` at ``beta = +inf`` and ``-inf``, from the behaviour alone.

        By Gibbs' inequality no model's ``L`` exceeds ``sum_t E_w[log pi_t]`` (minus the
        behaviour's causal entropy). The limits are ``-inf`` unless the behaviour stays on each
        limit's tie sets; at the last two steps those cost one product, not a pass
        (``Q*_{H-1} = +-u``, one hard backup for ``H - 2``): a behaviour that puts mass off the
        best actions and off the worst ones there has ``L = -inf`` at both limits (e.g. a
        softmax policy, or an epsilon-greedy one), and the solver skips the limit pass.
        """
        if self._limit_bound is None:
            bound = self.behaviour.entropy_bound()
            # Only where the bound would ask for a hard pass (it beats L(0) = -H log A).
            if bound > self.L0 + 1e-12 * abs(self.L0) and self._leaves_the_last_ties():
                bound = -math.inf
            self._limit_bound = bound
        return self._limit_bound

    def _leaves_the_last_ties(self) -> bool:
        """Whether the behaviour's last two steps put mass off the ties of ``u`` and (maybe at
        another step) off the ties of ``-u``: the tie sets of
        :func:`~imitation_meg.core.kernels.known_passes.limit_pass` at ``t = H - 1`` (``Q* = +-u``) and
        ``t = H - 2`` (one hard backup of both signs: one product, not a pass)."""
        mdp, H = self.mdp, self.mdp.steps
        u = th.stack([self.r, -self.r])  # (2, S, A)
        off = [False, False]
        V: th.Tensor | None = None  # hard values of step t + 1, (2, S)
        for t in range(H - 1, max(H - 3, -1), -1):
            Q = u if V is None else u + mdp.discount * mdp.expect_next(V)
            w, _ = self.behaviour.w(t)
            ties, best = tie_set(Q)
            leaves = ((w > 0) & ~ties).flatten(1).any(-1)  # (2,)
            off = [off[0] or bool(leaves[0]), off[1] or bool(leaves[1])]
            if all(off):
                return True
            V = best.squeeze(-1)
        return False

    def evaluate_limit(self, sign: float) -> LimitValue:
        """The limits of ``L(beta)``, of the model's expected utility and of ``dL/dbeta`` as
        ``beta -> sign * inf``, exact (see :func:`imitation_meg.core.kernels.known_passes.limit_pass`: ties
        weighted by the causal entropy after them, as the soft policies do in the limit).

        Small MDPs compute both signs in one hard backward pass and cache them; large ones
        (bandwidth-bound passes) the requested sign.
        """
        sign = 1.0 if sign > 0 else -1.0
        if sign not in self._limits:
            self.passes += 1
            mdp = self.mdp
            both = mdp.n_states * mdp.n_actions <= _BATCH_MAX_SA
            self._limits.update(
                limit_pass(mdp, self.r, self.behaviour, (1.0, -1.0) if both else (sign,))
            )
        return LimitValue(*self._limits[sign])


def objective_reference(
    mdp: TabularMDP, sa_occupancy: th.Tensor, beta: float, utility: UtilityLike | None = None
) -> tuple[float, float, float, float]:
    """``L``, ``dL/dbeta``, ``d2L/dbeta2`` and the model's expected utility at one finite beta,
    as a plain loop over time: the reference the fast passes are tested against.

    With ``V_H = g_H = h_H = 0``, for ``t = H - 1 .. 0``::

        Q_t   = beta r + gamma E[V_{t+1}]        V_t = logsumexp_a Q_t,   pi_t = softmax_a Q_t
        G_t   = r + gamma E[g_{t+1}]             g_t = E_pi_t[G_t]                 (dQ, dV)
        d2Q_t = gamma E[h_{t+1}]                 h_t = Var_pi_t(G_t) + E_pi_t[d2Q_t]  (d2Q, d2V)
        L    += E_w[Q_t - V_t],   dL += E_w[G_t - g_t],   d2L += E_w[d2Q_t - h_t]

    and the model's expected utility is ``E_p0[g_0]``.

    Args:
        mdp: the MDP.
        sa_occupancy: the behaviour's ``(H, S, A)`` occupancy ``w``.
        beta: a finite rationality.
        utility: utility (default the MDP's).

    Returns:
        ``(L, dL, d2L, model_eu)`` as floats.
    """
    r = mdp.reward_sa(utility)
    S = mdp.n_states
    gamma = mdp.discount
    V, g, h = (r.new_zeros(S) for _ in range(3))
    L = dL = d2L = 0.0
    for t in reversed(range(mdp.steps)):
        Q = beta * r + gamma * mdp.expect_next(V)
        G = r + gamma * mdp.expect_next(g)
        d2Q = gamma * mdp.expect_next(h)
        log_pi = th.log_softmax(Q, -1)
        pi = log_pi.exp()
        V = th.logsumexp(Q, -1)
        g = (pi * G).sum(-1)
        dev = G - g.unsqueeze(-1)
        h = (pi * dev**2).sum(-1) + (pi * d2Q).sum(-1)
        w = sa_occupancy[t]
        L += float((w * log_pi).sum())
        dL += float((w * dev).sum())
        d2L += float((w * d2Q).sum() - (w.sum(-1) * h).sum())
    return L, dL, d2L, float(mdp.initial_state_dist @ g)


def sa_occupancy_of(mdp: TabularMDP, policy: PolicyLike) -> th.Tensor:
    """State-action occupancy ``w[t, s, a] = P(s_t = s) pi_t(a | s)`` of a policy, ``(H, S, A)``."""
    pi = as_policy(policy, mdp)
    D = occupancy_measures(mdp, pi)[:-1]  # (H, S)
    pi_t = pi if pi.ndim == 3 else pi.unsqueeze(0)
    return D.unsqueeze(-1) * pi_t


def _normalisation(r: th.Tensor) -> tuple[float, float]:
    """``(shift, unit)``: the midpoint of ``r`` and its spread across actions (:func:`_scale`),
    so that ``(r - shift) / unit`` has spread 1 whatever the utility's scale and offset (``unit``
    is 0 for a constant utility)."""
    unit = _scale(r)
    shift = 0.5 * float(r.max()) + 0.5 * float(r.min())  # no overflow near the float limits
    return shift, unit


def _scale(r: th.Tensor) -> float:
    """Spread of the per-step reward across actions, the natural unit of 1/beta."""
    spread = float((r.amax(-1) - r.amin(-1)).max())
    total = float(r.max() - r.min())
    # A spread at rounding level (a state utility evaluated per transition) is no unit.
    return spread if spread > 1e-9 * total else total


@_threads.entry_point
def meg(
    policy: PolicyLike | None,
    mdp: TabularMDP,
    utility: UtilityLike | None = None,
    *,
    signed: bool = False,
    sa_occupancy: ArrayLike | None = None,
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
    # MEG depends on the utility only through its direction (Proposition 3.1): solve for the
    # normalised utility (r - shift) / unit, whose spread across actions is 1, and map back.
    r = mdp.reward_sa(utility).detach()
    shift, unit = _normalisation(r)
    r_n = (r - shift) / unit if unit > 0 else th.zeros_like(r)
    extra: dict[str, Any] = {}
    if mdp.horizon is None:
        if sa_occupancy is not None:
            as_sa_occupancy(sa_occupancy, mdp)  # refused with the reason
        if policy is None:
            raise ValueError("pass the stationary policy (S, A) to score.")
        pi = as_policy(policy, mdp).double().cpu().numpy()
        dobj = DiscountedMEGObjective(mdp, pi, r_n.double().cpu().numpy())
        sol = solve_beta(dobj)
        bound = meg_upper_bound(mdp)
        # Every policy puts discounted mass 1 / (1 - gamma) on the steps.
        steps = own = 1.0 / (1.0 - mdp.discount)
        passes = sol.passes + 1
        extra["bellman_residual"] = dobj.dyn.residual
        sol = sol._replace(converged=sol.converged and dobj.dyn.residual <= CONVERGED_RESIDUAL)
    else:
        obj = MEGObjective(mdp, policy, r_n, sa_occupancy=sa_occupancy)
        sol = solve_beta(obj)
        H = mdp.steps
        bound = meg_upper_bound(mdp)
        # Every soft-optimal model puts mass 1 on each step, the behaviour its occupancy's.
        gam = mdp.discount ** th.arange(H, dtype=th.float64)
        steps = float(gam.sum())
        own = float((gam * obj.behaviour.D.sum(-1).double().cpu()).sum())
        passes = sol.passes + (1 if sa_occupancy is None else 0)
    value = min(max(sol.L + bound, 0.0), bound)
    if signed:
        value = signed_meg(value, sol.expected_utility, sol.uniform_eu)
    # Expected utilities in the caller's units: unit * E[r_n] + shift * (discounted step mass).
    beta = float(sol.beta) / unit if unit > 0 else 0.0
    if math.isinf(beta) and math.isfinite(sol.beta):  # a finite beta beyond float64's range
        extra.update(beta_normalized=float(sol.beta), utility_unit=unit)
        beta = math.nan
        warnings.warn(
            f"beta = {sol.beta:.6g} / {unit:.3g} (the utility's spread) exceeds float64's range "
            "and is reported as NaN; extra['beta_normalized'] holds it for the utility scaled to "
            "spread 1 (the MEG is unaffected); rescale the utility to read beta in its units.",
            BetaRangeWarning,
            stacklevel=2,
        )
    return MEGResult(
        meg=float(value),
        beta=beta,
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=unit * sol.expected_utility + shift * own,
        model_expected_utility=unit * sol.model_eu + shift * steps,
        uniform_expected_utility=unit * sol.uniform_eu + shift * steps,
        log_likelihood=float(sol.L),
        grad=float(sol.grad) * unit,
        converged=bool(sol.converged),
        at_boundary=bool(sol.at_boundary),
        signed=signed,
        evaluations=sol.evaluations,
        extra=extra,
        passes=passes,
    )


@_threads.entry_point
def meg_one_step(
    policy: ArrayLike,
    expected_utility: ArrayLike,
    state_dist: ArrayLike | None = None,
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
