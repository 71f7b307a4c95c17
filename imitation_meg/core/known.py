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
from imitation_meg.core.discounted import CONVERGED_RESIDUAL
from imitation_meg.core.discounted_known import DiscountedMEGObjective
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known_objective import (
    MEGObjective,
    _scale,
    objective_reference,
    sa_occupancy_of,
)
from imitation_meg.core.mdp import TabularMDP
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


def _normalisation(r: th.Tensor) -> tuple[float, float]:
    """``(shift, unit)``: the midpoint of ``r`` and its spread across actions (:func:`_scale`),
    so that ``(r - shift) / unit`` has spread 1 whatever the utility's scale and offset (``unit``
    is 0 for a constant utility)."""
    unit = _scale(r)
    shift = 0.5 * float(r.max()) + 0.5 * float(r.min())  # no overflow near the float limits
    return shift, unit


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
        sol, steps, own, passes = _solve_discounted(policy, mdp, r_n, sa_occupancy, extra)
    else:
        sol, steps, own, passes = _solve_finite(policy, mdp, r_n, sa_occupancy)
    bound = meg_upper_bound(mdp)
    value = min(max(sol.L + bound, 0.0), bound)
    if signed:
        value = signed_meg(value, sol.expected_utility, sol.uniform_eu)
    # Expected utilities in the caller's units: unit * E[r_n] + shift * (discounted step mass).
    beta = _beta_in_units(sol.beta, unit, extra)
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


def _solve_discounted(
    policy: PolicyLike | None,
    mdp: TabularMDP,
    r_n: th.Tensor,
    sa_occupancy: ArrayLike | None,
    extra: dict[str, Any],
) -> tuple[BetaSolution, float, float, int]:
    """:func:`meg`'s solve on a discounted infinite-horizon MDP for the normalised reward
    ``r_n (S, A)``: ``(solution, the models' discounted step mass, the behaviour's, passes)``;
    the Bellman residual goes into ``extra``."""
    if sa_occupancy is not None:
        as_sa_occupancy(sa_occupancy, mdp)  # refused with the reason
    if policy is None:
        raise ValueError("pass the stationary policy (S, A) to score.")
    pi = as_policy(policy, mdp).double().cpu().numpy()
    dobj = DiscountedMEGObjective(mdp, pi, r_n.double().cpu().numpy())
    sol = solve_beta(dobj)
    # Every policy puts discounted mass 1 / (1 - gamma) on the steps.
    steps = 1.0 / (1.0 - mdp.discount)
    extra["bellman_residual"] = dobj.dyn.residual
    sol = sol._replace(converged=sol.converged and dobj.dyn.residual <= CONVERGED_RESIDUAL)
    return sol, steps, steps, sol.passes + 1


def _solve_finite(
    policy: PolicyLike | None, mdp: TabularMDP, r_n: th.Tensor, sa_occupancy: ArrayLike | None
) -> tuple[BetaSolution, float, float, int]:
    """:func:`meg`'s solve over a finite horizon for the normalised reward ``r_n (S, A)``:
    ``(solution, the models' discounted step mass, the behaviour's, passes)``."""
    obj = MEGObjective(mdp, policy, r_n, sa_occupancy=sa_occupancy)
    sol = solve_beta(obj)
    # Every soft-optimal model puts mass 1 on each step, the behaviour its occupancy's.
    gam = mdp.discount ** th.arange(mdp.steps, dtype=th.float64)
    steps = float(gam.sum())
    own = float((gam * obj.behaviour.D.sum(-1).double().cpu()).sum())
    return sol, steps, own, sol.passes + (1 if sa_occupancy is None else 0)


def _beta_in_units(beta_n: float, unit: float, extra: dict[str, Any]) -> float:
    """The rationality ``beta_n`` of the normalised utility in the utility's own units (0 for a
    constant utility); NaN, with a :class:`BetaRangeWarning` and ``beta_normalized`` in
    ``extra``, where it exceeds float64's range."""
    beta = float(beta_n) / unit if unit > 0 else 0.0
    if math.isinf(beta) and math.isfinite(beta_n):  # a finite beta beyond float64's range
        extra.update(beta_normalized=float(beta_n), utility_unit=unit)
        warnings.warn(
            f"beta = {beta_n:.6g} / {unit:.3g} (the utility's spread) exceeds float64's range "
            "and is reported as NaN; extra['beta_normalized'] holds it for the utility scaled to "
            "spread 1 (the MEG is unaffected); rescale the utility to read beta in its units.",
            BetaRangeWarning,
            stacklevel=3,
        )
        return math.nan
    return beta


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
