"""MEG in causal influence diagrams: known utility (Definition 3.2), a class of utilities over
chosen variables (Definition 4.3) and target variables of a CBN (Definition 4.4).

Known-utility MEG maximises the concave ``L(beta)`` of :class:`~imitation_meg.cid.objective.
CIDObjective` with the project's exact 1-D solver (the one :func:`imitation_meg.meg` uses for
MDPs), including the limits at ``beta = +-inf``.

For the class of *all* utility functions of some variables ``V`` (one-hot features of their joint
value), ``beta`` is absorbed into the utility table ``theta (|dom V|,)`` and
``L(theta) = E_pi[sum_D log pi_theta,D]`` is concave (``L = E_pi[U_theta] - G(theta)`` with ``G``
convex), with gradient ``P_pi(V) - P_{pi_theta}(V)`` and Hessian
``-sum_D E_{pi_theta}[Cov_{pi_theta,D}(W_D)]`` (``W_D`` the conditional expectations of the
one-hot features). :func:`meg_cid_unknown` maximises it by damped Newton steps on the exact
Hessian, then runs the known-utility solve along the fitted utility (which adds its ``+-inf``
limits) and, when the diagram's own utility lies in the class, compares with it too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from imitation_meg.cid.backward import Engine
from imitation_meg.cid.model import CBN, CID, Chance, Policy, Utility, log_card
from imitation_meg.cid.objective import CIDObjective, own_log_likelihood
from imitation_meg.core.beta.solver import BetaSolution, solve_beta
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import MEGResult, clipped_meg, signed_meg

__all__ = ["maxent_policy", "meg_cid", "meg_cid_target", "meg_cid_unknown"]


# Relative gain of a Newton step below which L(theta) counts as flat (rounding in L is ~1e-15
# relative, more where theta is large); stops the ascent towards a supremum at infinity.
_GAIN_FLOOR = 1e-13
# Hessian eigenvalues below this fraction of the largest are treated as flat directions.
_EIG_CUTOFF = 1e-12


def _result(sol: BetaSolution, bound: float, evaluations: int, signed: bool) -> MEGResult:
    value = clipped_meg(sol.L, bound)
    if signed:
        value = signed_meg(value, sol.expected_utility, sol.uniform_eu)
    return MEGResult(
        meg=float(value),
        beta=float(sol.beta),
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=float(sol.expected_utility),
        model_expected_utility=float(sol.model_eu),
        uniform_expected_utility=float(sol.uniform_eu),
        log_likelihood=float(sol.L),
        grad=float(sol.grad),
        converged=bool(sol.converged),
        at_boundary=bool(sol.at_boundary),
        signed=signed,
        evaluations=evaluations,
    )


def _check_cid(cid: object) -> CID:
    if not isinstance(cid, CID):
        raise TypeError(
            f"expected an imitation_meg.cid.CID, got {type(cid).__name__}; build one with "
            "CID([...]) or convert with from_pycid(...) / from_mdp(...)."
        )
    if not cid.decisions:
        raise ValueError(
            f"{cid.name} has no decision variables; MEG measures decisions (for a CBN use "
            "meg_cid_target(cbn, targets, decisions=[...]))."
        )
    return cid


@_threads.entry_point
def meg_cid(cid: CID, policy: Policy, *, signed: bool = False) -> MEGResult:
    """Known-utility MEG of a policy in a CID (paper Definition 3.2), solved exactly.

    Args:
        cid: the diagram; the utility function is the sum of its utility variables.
        policy: ``{decision name: (*parent sizes, |D|) decision rule}`` for every decision
            (arrays or callables as for chance tables; validated and renormalised).
        signed: multiply by the sign of ``E_pi[U] - E_uniform[U]`` (paper footnote 4).

    Returns:
        :class:`~imitation_meg.MEGResult`; ``upper_bound`` is ``sum_D log |dom D|``.

    Raises:
        TypeError: ``cid`` is not a :class:`CID`; bad policy types.
        ValueError: no decisions; an invalid policy.
        InsufficientRecallError: (a ValueError) the decisions cannot be solved by backward
            induction (see :mod:`imitation_meg.cid.backward`).

    Example:
        >>> from imitation_meg.cid import examples, meg_cid
        >>> cid = examples.mouse()
        >>> round(meg_cid(cid, {"D": [[0.8, 0.2], [0.2, 0.8]]}).meg, 6)
        0.192745
    """
    cid = _check_cid(cid)
    obj = CIDObjective(cid, policy)
    sol = solve_beta(obj)
    return _result(sol, obj.upper_bound, obj.evaluations, signed)


def maxent_policy(cid: CID, beta: float) -> dict[str, np.ndarray]:
    """The maximum entropy policy of rationality ``beta`` (soft backward induction).

    ``beta = 0`` is the uniform policy; ``beta = +inf`` (``-inf``) the limit of these policies,
    MEG's member there: over the tied best (worst) decisions of the hard backward induction,
    weighted by the causal entropy of the later limit rules after each (not evenly).

    Args:
        cid: the diagram (its utility variables define ``U``).
        beta: the rationality, finite or infinite.

    Returns:
        ``{decision: (*parent sizes, |D|) rule}``.

    Raises:
        InsufficientRecallError: see :func:`meg_cid`.
    """
    cid = _check_cid(cid)
    beta = float(beta)
    if math.isnan(beta):
        raise ValueError("beta must be a number or +-inf, got nan.")
    obj = CIDObjective(cid, cid.uniform_policy())
    if math.isinf(beta):
        return obj.hard_rules(1.0 if beta > 0 else -1.0)[1]
    return obj.soft_rules(beta)[1]


# --------------------------------------------------------------------------- utility classes
def _fresh_name(cid: CID, base: str) -> str:
    name = base
    while name in cid.parents:
        name += "_"
    return name


class _TabularClass:
    """``L(theta)`` and its exact gradient and Hessian for utilities ``theta`` over ``V``."""

    def __init__(self, cid: CID, policy: dict[str, np.ndarray], variables: tuple[str, ...]):
        self.cid, self.policy, self.variables = cid, policy, variables
        self.engine = Engine(cid, [variables])
        eng = self.engine
        self.shape = tuple(cid.card(v) for v in variables)
        self.F = int(np.prod(self.shape))
        self.keep = tuple(eng.ids[v] for v in variables)
        self.onehot = np.eye(self.F).reshape((*self.shape, self.F))
        self.family = {
            d: eng.marginal(policy, eng.fam[d], key=("fam", d))[0] for d in cid.decisions
        }
        self.p_pi = eng.marginal(policy, self.keep, key="V")[0].reshape(-1)
        self.evaluations = 0

    def value(self, theta: np.ndarray, *, derivatives: bool = True) -> tuple[float, Any, Any]:
        self.evaluations += 1
        eng, cid = self.engine, self.cid
        # Centred (the class is translation invariant): halves the magnitudes that reach the
        # conditional expectations when the supremum lies far out.
        centred = theta - 0.5 * (theta.max() + theta.min())
        table = np.concatenate([centred.reshape((*self.shape, 1)), self.onehot], -1)
        log_rules, rules, cond = eng.backward([table], soft=True)
        L = 0.0
        for d in cid.decisions:
            w = self.family[d]
            L += float(np.sum(np.where(w > 0, w * log_rules[d], 0.0)))
        if not derivatives:
            return L, None, None
        p_model = eng.marginal(rules, self.keep, key="V")[0].reshape(-1)
        grad = self.p_pi - p_model
        hess = np.zeros((self.F, self.F))
        for d in cid.decisions:
            W = cond[d][..., 1:]  # (*pa, |D|, F)
            pi = rules[d]
            m = np.einsum("...d,...df->...f", pi, W)
            C = W - m[..., None, :]
            cov = np.einsum("...d,...df,...dg->...fg", pi, C, C)
            pa = eng.fam[d][:-1]
            P = eng.marginal(rules, pa, key=("pa", d))[0]
            hess -= (P.reshape(-1) @ cov.reshape(-1, self.F * self.F)).reshape(self.F, self.F)
        return L, grad, hess


def _newton(
    cls: _TabularClass, *, tol: float, max_iter: int
) -> tuple[np.ndarray, float, float, bool]:
    """Damped Newton ascent of the concave ``L(theta)``; ``(theta, L, |grad|, converged)``."""
    theta = np.zeros(cls.F)
    L, g, Hm = cls.value(theta)
    n_dec = max(len(cls.cid.decisions), 1)
    gtol = tol * n_dec
    lam = 1e-12
    converged = False
    for _ in range(max_iter):
        gn = float(np.abs(g).max())
        if gn <= gtol:
            converged = True
            break
        # Newton step on the curved directions only: the Hessian is singular along the gauge
        # (adding a constant) and values that no decision reaches, where a tiny rounding
        # gradient would otherwise send the step far out.
        evals, vecs = np.linalg.eigh(-0.5 * (Hm + Hm.T))
        top = max(float(evals.max()), 1e-300)
        keep = evals > _EIG_CUTOFF * top
        gv = vecs.T @ g
        # Trust region: at most doubling |theta| (plus a few units) per step.
        radius = 2.0 * float(np.abs(theta).max()) + 8.0
        improved = False
        for _ls in range(40):
            coef = np.where(keep, gv / (np.where(keep, evals, 1.0) + lam * top), 0.0)
            step = vecs @ coef
            big = float(np.abs(step).max())
            if big > radius:
                step *= radius / big
            cand = theta + step
            Lc, gc, Hc = cls.value(cand)
            if Lc >= L - 1e-15 * max(1.0, abs(L)) and np.all(np.isfinite(gc)):
                gain = Lc - L
                theta, L, g, Hm = cand, Lc, gc, Hc
                lam = max(lam / 10, 1e-12)
                improved = True
                break
            lam = max(lam * 100, 1e-10)
        if not improved:
            break
        if gain <= _GAIN_FLOOR * max(1.0, abs(L)):
            # Improvements at the level of rounding in L (the supremum lies far out, where the
            # gains shrink geometrically): further steps would only follow evaluation noise.
            converged = float(np.abs(g).max()) <= 1e3 * gtol
            break
    return theta, L, float(np.abs(g).max()), converged


def _class_variables(cid: CID, variables: Any) -> tuple[str, ...]:
    """The variables a utility of the class may depend on: at least one, each a chance or
    decision variable of ``cid``."""
    variables = (variables,) if isinstance(variables, str) else tuple(variables)
    if not variables:
        raise ValueError("variables must name at least one variable of the diagram.")
    for v in variables:
        if v not in cid.domains:
            raise ValueError(
                f"{v!r} is not a chance or decision variable of {cid.name}; known: "
                f"{list(cid.variables)}."
            )
    return variables


def _best_candidate(
    cid: CID, base: CID, pol: Any, variables: tuple[str, ...]
) -> tuple[str, MEGResult]:
    """The better of the known-utility solve along the fitted utility (``base``) and, when every
    utility of the diagram depends only on ``variables``, along the diagram's own utility."""
    candidates = [("fitted", meg_cid(base, pol))]
    own = [u for u in cid.utilities if set(cid.parents[u]) <= set(variables)]
    if cid.utilities and len(own) == len(cid.utilities):
        candidates.append(("diagram utility", meg_cid(cid, pol)))
    return max(candidates, key=lambda c: c[1].meg)


def _hypothesised_decisions(model: Any, decisions: Any, policy: Any) -> tuple[CID, Any]:
    """A CBN (or a CID without decisions) as a CID whose ``decisions`` are the named variables,
    and its policy: their tables."""
    if decisions is None:
        raise ValueError(
            "the model has no decision variables: pass decisions=[...] naming the variables "
            "hypothesised to be decisions (their tables are the scored policy)."
        )
    if policy is not None:
        raise ValueError("policy= is for CIDs; a CBN's decision rules are its own tables.")
    base = (
        model
        if isinstance(model, CBN)
        else CBN([n for n in model.nodes if isinstance(n, Chance)], name=model.name)
    )
    return base.as_cid(decisions)


@_threads.entry_point
def meg_cid_unknown(
    cid: CID,
    policy: Policy,
    variables: str | Sequence[str],
    *,
    tol: float = 1e-10,
    max_iter: int = 200,
) -> MEGResult:
    """Unknown-utility MEG over every utility function of ``variables`` (Definition 4.3).

    The class is ``U_theta(v) = theta[v]`` for the joint value ``v`` of ``variables`` (one-hot
    features), which contains every utility of those variables. The diagram's own utility
    variables are ignored, except that when they are functions of ``variables`` their utility
    (in the class) is compared as well.

    Args:
        cid: the diagram (its decisions and chance variables).
        policy: decision rules for every decision.
        variables: the variables the utility may depend on (chance or decision variables).
        tol: gradient tolerance of the Newton solve (relative to the number of decisions).
        max_iter: Newton iteration budget.

    Returns:
        :class:`~imitation_meg.MEGResult`; ``beta`` is the spread (max - min) of the fitted
        utility table (the rationality absorbed), ``extra`` holds ``utility`` (the fitted table
        over ``variables``, shape of their domains), ``variables``, ``certificate`` (the Gibbs
        upper bound ``sum_D E_pi[log|dom D| - H(pi_D)]``) and ``iterations`` (evaluations).

    Raises:
        ValueError: unknown variables, no decisions, an invalid policy, insufficient recall of
            the diagram with a utility on ``variables``.

    Example:
        >>> from imitation_meg.cid import examples, meg_cid_unknown
        >>> cid = examples.mouse()
        >>> round(meg_cid_unknown(cid, {"D": [[1.0, 0.0], [0.0, 1.0]]}, ["T"]).meg, 6)
        0.693147
    """
    cid = _check_cid(cid)
    variables = _class_variables(cid, variables)
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}.")
    pol = cid.validate_policy(policy)
    cls = _TabularClass(cid, pol, variables)
    bound = log_card(cid)
    cert = bound + own_log_likelihood(cid, cls.family, pol)
    theta, L, gnorm, converged = _newton(cls, tol=tol, max_iter=max_iter)
    # The known-utility solve along the fitted utility (beta = 1 is one of its candidates) adds
    # the limits at beta = +-inf along that direction (where the class's supremum may lie).
    base = cid.with_utilities(
        Utility(_fresh_name(cid, "U_theta"), variables, theta.reshape(cls.shape))
    )
    name, pick = _best_candidate(cid, base, pol, variables)
    value_newton = min(max(L + bound, 0.0), bound)
    value = max(pick.meg, value_newton)
    spread = float(theta.max() - theta.min())
    return dataclasses.replace(
        pick,
        meg=value,
        normalized=value / bound if bound > 0 else 0.0,
        beta=spread,
        grad=gnorm,
        converged=bool(converged or pick.at_boundary),
        evaluations=cls.evaluations + pick.evaluations,
        extra={
            "utility": theta.reshape(cls.shape),
            "variables": variables,
            "certificate": cert,
            "newton_value": value_newton,
            "attained_by": name,
            "iterations": cls.evaluations,
        },
    )


@_threads.entry_point
def meg_cid_target(
    model: CID,
    targets: str | Sequence[str],
    *,
    decisions: str | Sequence[str] | None = None,
    policy: Policy | None = None,
    tol: float = 1e-10,
) -> MEGResult:
    """MEG of decision variables with respect to target variables (paper Definition 4.4).

    Args:
        model: a :class:`CBN` (then ``decisions`` names the hypothesised decisions, whose tables
            ``P(D | Pa_D)`` are the scored policy) or a :class:`CID` with its own decisions (then
            ``policy`` gives their rules).
        targets: the target variables ``T``; the class is every utility function of ``T``.
        decisions: hypothesised decision variables of a CBN.
        policy: decision rules for a CID's decisions.
        tol: Newton tolerance (see :func:`meg_cid_unknown`).

    Returns:
        :class:`~imitation_meg.MEGResult` as from :func:`meg_cid_unknown`.

    Raises:
        ValueError: missing ``decisions`` for a CBN or ``policy`` for a CID, unknown names.
    """
    if isinstance(model, CID) and not model.decisions:
        cid, pol = _hypothesised_decisions(model, decisions, policy)
        return meg_cid_unknown(cid, pol, targets, tol=tol)
    cid = _check_cid(model)
    if decisions is not None and set(
        (decisions,) if isinstance(decisions, str) else decisions
    ) != set(cid.decisions):
        raise ValueError(
            f"decisions={decisions!r} differ from the CID's decisions {list(cid.decisions)}; "
            "to hypothesise other decisions, start from a CBN."
        )
    if policy is None:
        raise ValueError(f"pass policy= with decision rules for {list(cid.decisions)}.")
    return meg_cid_unknown(cid, policy, targets, tol=tol)
