"""Exact known-utility MEG on a :class:`~imitation_meg.continuous.ContinuousMDP`.

With ``u = 1 / vol`` the uniform density on the action box (it replaces ``1 / |A|``), the
soft-optimal models are ``pi_beta,t(a | s) = u exp(beta (Q_t(s, a) - V_t(s)))`` with

    Q_t(s, a) = r(s, a) + E_{s' ~ T(s, a)}[ V_{t+1}(s') ],   V_H = 0,
    V_t(s)    = (1 / beta) log int u(a) exp(beta Q_t(s, a)) da     (the mean at beta = 0),

and known-utility MEG is

    MEG_U(pi) = sup_{beta in R u {+-inf}} L(beta),
    L(beta)   = E_pi[ sum_t log( pi_beta,t(a_t | s_t) / u(a_t) ) ] = E_pi[ sum_t beta (Q_t - V_t) ].

``L(0) = 0`` (the uniform model), so ``MEG >= 0``. As in the discrete case, ``L`` is concave with
``dL/dbeta = E_pi[sum_t r] - E_{pi_beta}[sum_t r]`` and
``d2L/dbeta2 = -sum_t E_{pi_beta}[ Var_{a ~ pi_beta,t}(G_t(s, a)) ]`` (``G_t`` the utility-to-go
of ``pi_beta``), and the 1-D solver :func:`imitation_meg.core.beta.solver.solve_beta` maximises it
through :class:`ContinuousMEGObjective`.

**The limits.** As ``beta -> +inf`` the models concentrate on the argmax of the hard ``Q_t``
(a point, or a set of measure zero), and their densities there grow without bound. For a
behaviour that keeps probability away from the argmax set (every policy with a density does;
so does a clipped Gaussian, whose inside has a density), ``L(beta) -> -inf``: by Laplace's
method ``beta V_t(s) = beta max_a Q_t(s, a) - O(log beta)``, so ``log pi_beta / u`` at an action
with ``Q_t < max Q_t`` tends to ``-inf`` linearly in ``beta``, with slope ``E_pi[sum r] -
max E[sum r] < 0`` (the limit of ``dL/dbeta``). The same holds at ``-inf`` with the argmin. So the
supremum is attained at a finite ``beta`` (the solver is told: both limits are ``-inf``). Only a
behaviour that itself concentrates on the argmax (a deterministic optimal policy) has
``L(beta) -> +inf`` (about ``(d / 2) log beta`` per decision at an interior maximum): its MEG
is infinite, which is why deterministic policies are refused rather than scored.

**No ``H log|A|`` ceiling.** ``MEG`` is unbounded above: a policy concentrating on the optimum
scores ever more. By Gibbs' inequality it is at most the policy's own log-likelihood ratio
``C = E_pi[sum_t KL(pi_t(. | s_t) || u)]`` (``certificate``), finite for densities and ``+inf``
for laws with point masses (clipped Gaussians). ``normalized = MEG / C`` in ``[0, 1]`` is the
share of the policy's departure from uniform that the best soft-optimal model accounts for; like
MEG it does not change when the box is rescaled or shifted (both are ratios of densities).

**Quadrature.** Integrals over the box use composite Gauss-Legendre (:func:`~imitation_meg.
continuous.soft_vi.model_rule`), expectations under the policy its own rule. With a fixed rule
the problem is a discrete one and ``L``, ``dL`` and ``d2L`` are its exact derivatives. The
accuracy is measured by solving again with the panels doubled (:func:`meg_continuous`): it stops
when two successive rules give MEG within ``tol`` (relative to ``max(1, MEG)``), reports the
finer one, and that difference as ``quadrature_error``.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.continuous.mdp import BoxUtility, ContinuousMDP
from imitation_meg.continuous.policies import (
    ContinuousPolicy,
    TabularRule,
    require_continuous_mdp,
)
from imitation_meg.continuous.soft_vi import model_tables, soft_mean, soft_values
from imitation_meg.core.beta.solver import BetaEvaluation, LimitValue, solve_beta
from imitation_meg.results import fields_dict

__all__ = [
    "ContinuousMEGObjective",
    "ContinuousMEGResult",
    "ContinuousMEGWarning",
    "meg_continuous",
    "soft_mean",
    "soft_values",
]

_BETAS_PER_PASS = 8
#: Refinement levels tried at most (each doubles the panels per dimension).
MAX_LEVEL = 3


class ContinuousMEGWarning(ImitationMEGWarning):
    """A continuous-action MEG whose quadrature did not reach its stated accuracy."""


def check_problem(policy: object, mdp: object, what: str, tabular: str) -> None:
    """A :class:`ContinuousPolicy` on a :class:`ContinuousMDP`, or a ``TypeError`` that says
    what ``what`` takes (and that a ``TabularMDP`` is scored with ``tabular``).

    Raises:
        TypeError: another MDP, or a policy that is no :class:`ContinuousPolicy`.
    """
    require_continuous_mdp(mdp, what, f"a TabularMDP is scored with {tabular}")
    if not isinstance(policy, ContinuousPolicy):
        hint = (
            f" (an array is a table of a TabularMDP's policy, scored with {tabular}; on the box, "
            "per-state Gaussians are GaussianPolicy(mean, std))"
            if isinstance(policy, (th.Tensor, np.ndarray, list, tuple))
            else ""
        )
        raise TypeError(
            "policy must be a ContinuousPolicy (DensityPolicy, GaussianPolicy, uniform, "
            f"soft_optimal), got {type(policy).__name__}{hint}."
        )


def check_accuracy(tol: object, max_level: object) -> None:
    """``tol > 0`` (a number) and ``max_level >= 1`` (an integer), or a ``ValueError``."""
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
        raise ValueError(f"tol must be a positive number, got {tol!r}.")
    if isinstance(max_level, bool) or not isinstance(max_level, int) or max_level < 1:
        raise ValueError(f"max_level must be an integer >= 1, got {max_level!r}.")


@dataclasses.dataclass
class _Tables:
    """The MDP and the behaviour at the points of one rule, in normalised utility units."""

    rm: th.Tensor  # (S, N) utility at the model points
    Tm: th.Tensor  # (S, N, S) transitions there
    log_w: th.Tensor  # (N,) log probability weights of the uniform law on the box
    points: th.Tensor  # (N, d)
    pb: th.Tensor  # (T', S, M) behaviour weights
    rb: th.Tensor  # (T'', S, M) utility at the behaviour's points
    Tb: th.Tensor  # (T'', S, M, S) transitions there
    D: th.Tensor  # (H, S) the behaviour's state occupancy
    kl: float  # E_pi[sum_t KL(pi_t || u)]
    expected_utility: float  # E_pi[sum_t r_n]


def _behaviour_tables(
    mdp: ContinuousMDP, rule: TabularRule, utility: BoxUtility | None
) -> tuple[th.Tensor, th.Tensor]:
    """Utility ``(T'', S, M)`` and transitions ``(T'', S, M, S)`` at the behaviour's points
    (``T'' = 1`` when the points are the same at every decision)."""
    pts = rule.points
    if pts.shape[0] > 1 and pts.stride(0) == 0:  # one set of points for every decision
        pts = pts[:1]
    Tn, S, M, d = pts.shape
    states = th.arange(S).repeat_interleave(M).repeat(Tn)
    acts = pts.reshape(-1, d)
    rb = mdp.reward(states, acts, utility).view(Tn, S, M)
    Tb = mdp.transition(states, acts).view(Tn, S, M, S)
    return rb, Tb


def _occupancy(mdp: ContinuousMDP, pb: th.Tensor, Tb: th.Tensor) -> th.Tensor:
    """``D (H, S)``: the behaviour's state distribution at each decision."""
    D = [mdp.initial_state_dist]
    for t in range(mdp.horizon - 1):
        w = pb[min(t, pb.shape[0] - 1)]
        T = Tb[min(t, Tb.shape[0] - 1)]
        D.append(th.einsum("s,sm,smu->u", D[-1], w, T))
    return th.stack(D)


def _at(x: th.Tensor, t: int) -> th.Tensor:
    return x[t if x.shape[0] > 1 else 0]


class ContinuousMEGObjective:
    """``L(beta)`` of a behaviour on a :class:`ContinuousMDP`, with exact derivatives (of the
    problem at one quadrature rule): the :class:`~imitation_meg.core.beta.solver.BetaObjective` of
    continuous-action MEG, in normalised utility units (spread 1; ``unit`` and ``shift`` map
    back).

    Args:
        mdp: the MDP.
        policy: a :class:`ContinuousPolicy` with densities.
        utility: default the MDP's.
        level: the quadrature refinement (panels doubled ``level`` times).

    Attributes:
        unit: the scale of the utility's normalisation ``r_n = (r - shift) / unit``
            (``unit = 0``: a constant utility).
        shift: its offset.
        certificate: ``E_pi[sum_t KL(pi_t(. | s_t) || u)]``.
        n_model_points: the model's rule's size (per state).
        n_behaviour_points: the behaviour's rule's size (per state).
    """

    def __init__(
        self,
        mdp: ContinuousMDP,
        policy: ContinuousPolicy,
        utility: BoxUtility | None = None,
        *,
        level: int = 0,
    ) -> None:
        check_problem(policy, mdp, "ContinuousMEGObjective", "imitation_meg.meg")
        self.mdp = mdp
        rm, Tm, log_w, points = model_tables(mdp, utility, level)
        rule = policy.rule(mdp, level)
        if not rule.has_density:
            raise ValueError(f"{policy.name} has no density on the box; MEG is not defined for it.")
        rule = TabularRule(
            rule.points.to(th.float64), rule.weights.to(th.float64), rule.kl.to(th.float64), True
        )
        rb, Tb = _behaviour_tables(mdp, rule, utility)
        spread = float((rm.amax(-1) - rm.amin(-1)).max())
        total = float(rm.max() - rm.min())
        self.unit = spread if spread > 1e-9 * total else total
        self.shift = 0.5 * float(rm.max()) + 0.5 * float(rm.min())
        u = self.unit if self.unit > 0 else 1.0
        D = _occupancy(mdp, rule.weights, Tb)
        pb = rule.weights
        eu = sum(
            float(D[t] @ (_at(pb, t) * (_at(rb, t) - self.shift) / u).sum(-1))
            for t in range(mdp.horizon)
        )
        kl = sum(float(D[t] @ _at(rule.kl, t)) for t in range(mdp.horizon))
        self.tab = _Tables(
            (rm - self.shift) / u, Tm, log_w, points, pb, (rb - self.shift) / u, Tb, D, kl, eu
        )
        self.certificate = kl
        self.n_model_points = int(points.shape[0])
        self.n_behaviour_points = int(pb.shape[-1])
        self.scale = 1.0 if self.unit > 0 else 0.0
        self.utility_scale = float(mdp.horizon)
        self.expected_utility = eu
        self.L0 = 0.0
        self.betas_per_pass = _BETAS_PER_PASS
        self.evaluations = 0
        self.passes = 0

    def evaluate_zero(self) -> BetaEvaluation:
        """The pass at ``beta = 0`` (the uniform model; ``L = 0``)."""
        return self.evaluate_batch(th.zeros(1, dtype=th.float64))

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """``L``, ``dL``, ``d2L`` (NaN with ``second=False``), the model's expected utility and
        its derivative at ``betas (K,)`` (normalised units), each ``(K,)``."""
        tab = self.tab
        betas = betas.to(th.float64).reshape(-1)
        K = betas.numel()
        self.evaluations += K
        self.passes += 1
        S = self.mdp.n_states
        V = th.zeros(K, S, dtype=th.float64)
        G = th.zeros(K, S, dtype=th.float64)
        Kv = th.zeros(K, S, dtype=th.float64)
        L = th.zeros(K, dtype=th.float64)
        for t in reversed(range(self.mdp.horizon)):
            Qm = tab.rm + th.einsum("snu,ku->ksn", tab.Tm, V)
            Vt, logp = soft_mean(Qm, tab.log_w, betas)
            p = logp.exp()
            Qb = _at(tab.rb, t) + th.einsum("smu,ku->ksm", _at(tab.Tb, t), V)
            gap = (_at(tab.pb, t) * (Qb - Vt.unsqueeze(-1))).sum(-1)  # (K, S)
            L = L + betas * (gap @ tab.D[t])
            Gm = tab.rm + th.einsum("snu,ku->ksn", tab.Tm, G)
            Gt = (p * Gm).sum(-1)
            if second:
                Km = th.einsum("snu,ku->ksn", tab.Tm, Kv)
                Kv = (p * ((Gm - Gt.unsqueeze(-1)) ** 2 + Km)).sum(-1)
            G, V = Gt, Vt
        p0 = self.mdp.initial_state_dist
        model_eu = G @ p0
        d2L = -(Kv @ p0) if second else th.full((K,), math.nan, dtype=th.float64)
        return BetaEvaluation(L, self.expected_utility - model_eu, d2L, model_eu, -d2L)

    def evaluate_limit(self, sign: float) -> LimitValue:
        """The limit at ``beta = sign * inf``: ``L = -inf`` (the behaviour has a density; see
        the module docstring), the model's expected utility is the best (``sign = -1``: worst)
        total utility over the rule's points, and ``dL`` tends to the behaviour's expected
        utility less that (negative times ``sign``: ``L`` turns down)."""
        self.passes += 1
        tab = self.tab
        V = th.zeros(self.mdp.n_states, dtype=th.float64)
        for _ in range(self.mdp.horizon):
            Q = sign * (tab.rm + tab.Tm @ V)
            V = sign * Q.amax(-1)
        best = float(V @ self.mdp.initial_state_dist)
        return LimitValue(-math.inf, best, self.expected_utility - best)

    def limit_upper_bound(self) -> float:
        """``-inf``: both limits are ``-inf`` for a behaviour with a density."""
        return -math.inf


@dataclasses.dataclass(frozen=True)
class ContinuousMEGResult:
    """Known-utility MEG of a policy with a density on a :class:`ContinuousMDP`.

    Attributes:
        meg: ``sup_beta L(beta)`` in nats (``>= 0``; signed with ``signed=True``).
        beta: the maximising rationality (utility units; finite for a policy with a density).
        log_likelihood: ``L(beta)`` at the optimum (= ``meg`` unsigned).
        certificate: ``E_pi[sum_t KL(pi_t(. | s_t) || u)]``, the policy's own log-likelihood
            ratio against the uniform density: an upper bound on MEG (``inf`` for laws with
            point masses).
        normalized: ``meg / certificate`` in ``[0, 1]`` (0 when the certificate is 0, NaN when
            it is infinite).
        expected_utility: ``E[sum_t r]`` of the policy.
        model_expected_utility: the same of the fitted model.
        uniform_expected_utility: the same of the uniform policy.
        grad: ``dL/dbeta`` at ``beta`` (utility units).
        converged: the 1-D solve met its tolerance and the quadrature its accuracy.
        at_boundary: the solver found the supremum at a limit (never for a density).
        quadrature_error: ``|MEG|`` difference between the last two rules (the accuracy).
        level: the refinement level of the rule reported.
        n_model_points: points of the box rule; n_behaviour_points: of the policy's rule (per
            state).
        signed: ``meg`` carries the sign of ``E_pi[U] - E_uniform[U]``.
        evaluations: betas evaluated over all levels.
    """

    meg: float
    beta: float
    log_likelihood: float
    certificate: float
    normalized: float
    expected_utility: float
    model_expected_utility: float
    uniform_expected_utility: float
    grad: float
    converged: bool
    at_boundary: bool
    quadrature_error: float
    level: int
    n_model_points: int
    n_behaviour_points: int
    signed: bool
    evaluations: int

    to_dict = fields_dict


def _solve(
    mdp: ContinuousMDP, policy: ContinuousPolicy, utility: BoxUtility | None, level: int
) -> tuple[Any, ContinuousMEGObjective]:
    obj = ContinuousMEGObjective(mdp, policy, utility, level=level)
    return solve_beta(obj), obj


def meg_continuous(
    policy: ContinuousPolicy,
    mdp: ContinuousMDP,
    utility: BoxUtility | None = None,
    *,
    signed: bool = False,
    tol: float = 1e-10,
    max_level: int = MAX_LEVEL,
) -> ContinuousMEGResult:
    """Known-utility MEG of ``policy`` on ``mdp``, exact up to a measured quadrature error.

    Solves at quadrature level 0 and 1, then doubles the panels until two successive levels
    agree on MEG to ``tol * max(1, MEG)``; reports the finer level.

    Args:
        policy: a :class:`ContinuousPolicy` (a density or a squashed / clipped Gaussian).
        mdp: the MDP.
        utility: ``(states, actions) -> (M,)`` or a state utility ``(S,)``; default the MDP's.
        signed: multiply by the sign of ``E_pi[U] - E_uniform[U]``.
        tol: the accuracy asked of the quadrature (relative to ``max(1, MEG)``).
        max_level: the most refinements (each doubles the panels per dimension).

    Returns:
        :class:`ContinuousMEGResult`.

    Raises:
        TypeError: an MDP that is no :class:`ContinuousMDP` (a ``TabularMDP`` is scored with
            :func:`imitation_meg.meg`), a policy that is no :class:`ContinuousPolicy`.
        ValueError: a non-positive ``tol``, ``max_level < 1``; a policy or utility that does
            not fit the MDP.

    Warns:
        ContinuousMEGWarning: the levels did not agree to ``tol`` by ``max_level``
            (``converged=False``; ``quadrature_error`` says by how much they differ).

    Example:
        >>> from imitation_meg.continuous import meg_continuous, policies, random_continuous_mdp
        >>> mdp = random_continuous_mdp(4, 1, 3, seed=0)
        >>> res = meg_continuous(policies.soft_optimal(mdp, 1.5), mdp)
        >>> round(res.beta, 6), abs(res.meg - res.certificate) < 1e-9  # its own log-ratio
        (1.5, True)
    """
    check_problem(policy, mdp, "meg_continuous", "imitation_meg.meg")
    check_accuracy(tol, max_level)
    prev = None
    evaluations = 0
    err = math.inf
    for level in range(max_level + 1):
        sol, obj = _solve(mdp, policy, utility, level)
        evaluations += obj.evaluations
        if prev is not None:
            err = abs(sol.L - prev.L)
            if err <= tol * max(1.0, abs(sol.L)):
                break
        prev = sol
    quad_ok = err <= tol * max(1.0, abs(sol.L))
    if not quad_ok:
        warnings.warn(
            f"continuous MEG of {policy.name}: the last two quadrature rules differ by {err:.3g} "
            f"nats (asked: {tol:g} relative); the policy or the soft-optimal model at the "
            f"optimum (beta = {sol.beta / obj.unit if obj.unit else 0.0:.4g}) is too narrow "
            f"for {obj.n_model_points} points. Raise max_level= or loosen tol=.",
            ContinuousMEGWarning,
            stacklevel=2,
        )
    unit, shift, H = obj.unit, obj.shift, mdp.horizon
    u = unit if unit > 0 else 1.0
    value = float(sol.L)
    eu = u * sol.expected_utility + shift * H
    ueu = u * sol.uniform_eu + shift * H
    if signed and eu < ueu:
        value = -value
    cert = obj.certificate
    finite = math.isfinite(cert) and cert > 0
    return ContinuousMEGResult(
        meg=value,
        beta=float(sol.beta) / unit if unit > 0 else 0.0,
        log_likelihood=float(sol.L),
        certificate=cert,
        normalized=float(sol.L) / cert if finite else (math.nan if cert == math.inf else 0.0),
        expected_utility=eu,
        model_expected_utility=u * sol.model_eu + shift * H,
        uniform_expected_utility=ueu,
        grad=float(sol.grad) * u,
        converged=bool(sol.converged and quad_ok),
        at_boundary=bool(sol.at_boundary),
        quadrature_error=float(err),
        level=level,
        n_model_points=obj.n_model_points,
        n_behaviour_points=obj.n_behaviour_points,
        signed=bool(signed),
        evaluations=evaluations,
    )
