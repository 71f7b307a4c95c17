"""Interventional MEG's measure: the joint solve over the union, the shares, the own scores.

:func:`meg_interventional` scores a policy across intervened MDPs through the weighted disjoint
union of :mod:`imitation_meg.interventions.union` (see :mod:`imitation_meg.interventions` for
the definition), splits the joint log-likelihood into each intervention's share and solves each
intervention alone; :class:`InterventionalMEG` holds the result.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.core.beta.solver import BetaObjective
from imitation_meg.core.discounted_known import DiscountedMEGObjective
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import MEGObjective, MEGResult, meg, meg_upper_bound, sa_occupancy_of
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import soft_value_iteration
from imitation_meg.core.unknown import meg_target, meg_unknown
from imitation_meg.interventions.union import (
    _check_mdps,
    _features,
    _per_copy,
    _policies,
    _target_labels,
    _weights,
    union_mdp,
)
from imitation_meg.results import to_jsonable
from imitation_meg.type_aliases import ArrayLike, PolicySource, UtilityLike

__all__ = ["InterventionalMEG", "ShareWarning", "meg_interventional"]

# Relative tolerance of the check that the shares add up to the joint log-likelihood.
_SHARE_RTOL = 1e-7


class ShareWarning(ImitationMEGWarning):
    """The per-intervention shares do not add up to the joint solution; they are approximate."""


@dataclasses.dataclass(frozen=True)
class InterventionalMEG:
    """Interventional MEG and how it splits over the interventions.

    Attributes:
        meg: the interventional MEG (nats), ``0 <= meg <= H log|A|``.
        result: the solve in the union MDP (beta, the fitted utility, convergence, ...).
        names: the interventions' names.
        weights: their weights, summing to 1.
        scores: per intervention ``L_k + H log|A|`` of the joint model (may be negative).
        shares: ``w_k * scores_k``; they sum to ``meg`` (unless ``meg`` was clipped at 0).
        separate: each intervention's own MEG (its best model alone), or None if not computed.
        reference: the index of the on-distribution intervention.
        on_distribution: ``separate[reference].meg`` (NaN if not computed).
        mode: ``"known"``, ``"features"`` or ``"target"``.
        shares_exact: whether the shares add up to the joint log-likelihood to ``1e-7``.
    """

    meg: float
    result: MEGResult
    names: tuple[str, ...]
    weights: tuple[float, ...]
    scores: tuple[float, ...]
    shares: tuple[float, ...]
    separate: tuple[MEGResult, ...] | None
    reference: int
    on_distribution: float
    mode: str
    shares_exact: bool = True

    def rows(self) -> list[dict[str, Any]]:
        """One row per intervention: name, weight, the joint model's score and share, and the
        intervention's own MEG."""
        return [
            {
                "intervention": name,
                "weight": w,
                "joint model score": score,
                "share": share,
                "own MEG": math.nan if self.separate is None else self.separate[k].meg,
            }
            for k, (name, w, score, share) in enumerate(
                zip(self.names, self.weights, self.scores, self.shares, strict=True)
            )
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        out = {
            f.name: to_jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name not in ("result", "separate")
        }
        out["result"] = self.result.to_dict()
        out["separate"] = None if self.separate is None else [r.to_dict() for r in self.separate]
        return out


# ----------------------------------------------------------------------------- the union
# ----------------------------------------------------------------------------- the shares
def _objective(m: TabularMDP, pi: th.Tensor, u: th.Tensor) -> BetaObjective:
    """A copy's ``L(beta)`` for the utility ``u (S_k, A)`` (finite horizon or discounted)."""
    if m.horizon is None:
        r = m.reward_sa(u).double().cpu().numpy()
        return DiscountedMEGObjective(m, pi.double().cpu().numpy(), r)
    return MEGObjective(m, pi, u)


def _limit_L(obj: BetaObjective, sign: float) -> float:
    """A copy's ``L`` at the joint model's ``beta = sign * inf``: the limit of ``L(beta)``."""
    return float(obj.evaluate_limit(sign).L)


def _copy_log_likelihoods(
    res: MEGResult,
    beta: float,
    mode: str,
    copies: list[tuple[TabularMDP, th.Tensor]],
    utils: list[th.Tensor],
) -> list[list[float]]:
    """Candidate values of each copy's ``L_k`` at the joint model (one list per candidate);
    ``beta`` is the joint rationality in the units of ``utils``."""
    if mode != "known":
        # The class's fitted utility attains the joint value (at a limit too, to the solver's
        # tolerance: meg_unknown's extra["utility"]).
        return [[_finite_L(m, pi, u, 1.0) for (m, pi), u in zip(copies, utils, strict=True)]]
    if math.isfinite(beta):
        return [[_finite_L(m, pi, u, beta) for (m, pi), u in zip(copies, utils, strict=True)]]
    sign = 1.0 if beta > 0 else -1.0
    return [
        [_limit_L(_objective(m, pi, u), sign) for (m, pi), u in zip(copies, utils, strict=True)]
    ]


def _finite_L(m: TabularMDP, pi: th.Tensor, u: th.Tensor, beta: float) -> float:
    if m.horizon is None:
        ev = _objective(m, pi, u).evaluate_batch(th.tensor([float(beta)]), second=False)
        return float(ev.L[0])
    log_pi = soft_value_iteration(m, beta, utility=u).log_pi[0]
    w = sa_occupancy_of(m, pi)
    return float(th.where(w > 0, w * log_pi, th.zeros_like(w)).sum())


def _shares(
    res: MEGResult,
    beta: float,
    mode: str,
    mdps: list[TabularMDP],
    tables: list[th.Tensor],
    utils: list[th.Tensor],
    w: np.ndarray,
) -> tuple[list[float], bool]:
    """Each copy's ``L_k`` at the joint model, checked against the joint log-likelihood."""
    copies = list(zip(mdps, tables, strict=True))
    cands = _copy_log_likelihoods(res, beta, mode, copies, utils)
    L = res.log_likelihood
    tol = _SHARE_RTOL * max(1.0, abs(L))
    best = min(
        cands,
        key=lambda c: abs(float(np.dot(w, c)) - L) if all(map(math.isfinite, c)) else math.inf,
    )
    exact = abs(float(np.dot(w, best)) - L) <= tol
    if not exact:
        warnings.warn(
            f"the interventions' log-likelihoods at the joint model add up to "
            f"{float(np.dot(w, best)):.10g}, not the joint {L:.10g}; the shares are approximate "
            "(shares_exact=False).",
            ShareWarning,
            stacklevel=3,
        )
    return best, exact


def _check_options(reference: Any, separate: Any, tol: Any, K: int) -> None:
    if isinstance(reference, bool) or not isinstance(reference, (int, np.integer)):
        raise TypeError(
            f"reference must be the integer index of the on-distribution intervention (0 .. "
            f"{K - 1}), got {reference!r} ({type(reference).__name__})."
        )
    if not 0 <= reference < K:
        raise ValueError(f"reference must index one of the {K} interventions, got {reference!r}.")
    if not isinstance(separate, (bool, np.bool_)):
        raise TypeError(f"separate must be True or False, got {separate!r}.")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1:
        raise ValueError(f"tol must be a relative tolerance in (0, 1), got {tol!r}.")


def _check_one_kind(utilities: Any, features: Any, target: Any) -> None:
    """At most one kind of utility: known utilities, a linear class or a target."""
    if sum(x is not None for x in (utilities, features, target)) > 1:
        raise ValueError("pass at most one of utilities, features and target.")


def _names(names: Any, mdps: list[TabularMDP]) -> tuple[str, ...]:
    """The interventions' names: the given strings, one per MDP, or the MDPs' own."""
    if names is None:
        return tuple(m.name for m in mdps)
    out = tuple(_per_copy(names, len(mdps), "names"))
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise TypeError(f"names must be strings, got {bad[0]!r} ({type(bad[0]).__name__}).")
    return out


@dataclasses.dataclass(frozen=True)
class _Joint:
    """The joint solve over the union: its mode and result, the joint rationality in the units
    of ``utils`` (each copy's ``(S_k, A)`` utility at the joint model) and each intervention's
    own solve, ``own(k)``."""

    mode: str
    result: MEGResult
    beta: float
    utils: list[th.Tensor]
    own: Callable[[int], MEGResult]


def _class_utils(res: MEGResult, union: TabularMDP) -> list[th.Tensor]:
    """The class's fitted utility ``(S_k, A)`` on each copy of the union (rationality 1)."""
    offs = union.metadata["offsets"]
    U = res.extra["utility"].to(th.float64)
    return [U[offs[k] : offs[k + 1]] for k in range(len(offs) - 1)]


def _joint_features(
    tables: list[th.Tensor], mdps: list[TabularMDP], w: np.ndarray, features: Any, tol: float
) -> _Joint:
    """Unknown-utility MEG over the linear class tied across the interventions."""
    phi_u = _features(features, mdps)
    union = union_mdp(mdps, w)
    offs = union.metadata["offsets"]
    res = meg_unknown(th.cat(tables, -2), union, features=phi_u, tol=tol)

    def own(k: int) -> MEGResult:
        return meg_unknown(tables[k], mdps[k], features=phi_u[offs[k] : offs[k + 1]], tol=tol)

    return _Joint("features", res, 1.0, _class_utils(res, union), own)


def _joint_target(
    tables: list[th.Tensor], mdps: list[TabularMDP], w: np.ndarray, target: Any, tol: float
) -> _Joint:
    """Target MEG, the labels shared across the interventions."""
    labels = _target_labels(_per_copy(target, len(mdps), "target"), mdps)
    union = union_mdp(mdps, w)
    offs = union.metadata["offsets"]
    res = meg_target(th.cat(tables, -2), union, labels, tol=tol)

    def own(k: int) -> MEGResult:
        return meg_target(tables[k], mdps[k], labels[offs[k] : offs[k + 1]], tol=tol)

    return _Joint("target", res, 1.0, _class_utils(res, union), own)


def _joint_known(
    tables: list[th.Tensor], mdps: list[TabularMDP], w: np.ndarray, utilities: Any
) -> _Joint:
    """Known-utility MEG of the union; the shares are evaluated for the utility scaled to
    spread 1 (the joint beta in those units)."""
    us = None if utilities is None else _per_copy(utilities, len(mdps), "utilities")
    union = union_mdp(mdps, w, utilities=us)
    if union.utility is None:
        raise ValueError(
            "some interventions have no utility attached; pass utilities= (one per "
            "intervention), features= or target=."
        )
    res = meg(th.cat(tables, -2), union)
    r = union.reward_sa()
    spread = float(r.max() - r.min())
    r_n = (r - 0.5 * (float(r.max()) + float(r.min()))) / spread if spread > 0 else r * 0
    beta = res.beta * spread if spread > 0 else 0.0
    offs = union.metadata["offsets"]

    def own(k: int) -> MEGResult:
        return meg(tables[k], mdps[k], None if us is None else us[k])

    return _Joint("known", res, beta, [r_n[offs[k] : offs[k + 1]] for k in range(len(mdps))], own)


# ----------------------------------------------------------------------------- the measure
@_threads.entry_point
def meg_interventional(
    policy: PolicySource,
    mdps: Sequence[TabularMDP],
    utilities: Sequence[UtilityLike] | None = None,
    *,
    features: Sequence[ArrayLike] | None = None,
    target: Sequence[Sequence[Hashable] | Callable[[int], Hashable]] | None = None,
    weights: ArrayLike | None = None,
    names: Sequence[str] | None = None,
    reference: int = 0,
    separate: bool = True,
    tol: float = 1e-10,
) -> InterventionalMEG:
    """Interventional MEG of a policy across intervened MDPs (see the module docstring).

    Exactly one kind of utility: known ``utilities`` (default each MDP's own), a linear class
    ``features`` (one ``(S_k, F)`` / ``(S_k, A, F)`` array per intervention, the same ``F``
    columns meaning the same thing), or a ``target`` (one list of per-state labels, or a callable
    on state indices, per intervention: states with equal labels share the utility's value
    across interventions, e.g. the agent's cell).

    Args:
        policy: one table per intervention (``(S_k, A)`` or ``(H, S_k, A)``), or one agent
            read in every intervention by :func:`imitation_meg.adapters.policy_table` (an SB3
            model or ``.zip``, a callable on observations).
        mdps: the intervened MDPs (same actions, horizon and discount).
        utilities: one known utility per intervention; default each MDP's own.
        features: one feature array per intervention (an exact linear class).
        target: one per-state labelling per intervention (every utility of the label).
        weights: ``(K,)`` positive weights, normalised; default uniform.
        names: the interventions' names (default the MDPs' names).
        reference: the on-distribution intervention (its own MEG is ``on_distribution``).
        separate: also compute each intervention's own MEG (K more solves).
        tol: tolerance of the class solver.

    Returns:
        :class:`InterventionalMEG`.

    Raises:
        ValueError / TypeError: MDPs that do not fit together, bad weights, several kinds of
            utility, per-intervention inputs of the wrong length, features whose shapes do not
            fit their MDP or whose numbers of columns differ, a ``reference`` that is not an
            integer index (a bool is refused), a non-bool ``separate``, a ``tol`` outside
            ``(0, 1)``, bad policies.

    Warns:
        ShareWarning: the shares do not add up to the joint solution (then approximate).

    Example:
        >>> import imitation_meg as im
        >>> mdps = [im.envs.cliff_world(horizon=8), im.envs.cliff_world(horizon=8, goal_region=2)]
        >>> pis = [im.policies.optimal(m) for m in mdps]
        >>> res = meg_interventional(pis, mdps, [mdps[0].utility, mdps[0].utility])
        >>> res.meg <= max(r.meg for r in res.separate) + 1e-9
        True
    """
    mdps = _check_mdps(mdps)
    K = len(mdps)
    _check_one_kind(utilities, features, target)
    _check_options(reference, separate, tol, K)
    w = _weights(weights, K)
    names = _names(names, mdps)
    tables = _policies(policy, mdps)
    if features is not None:
        joint = _joint_features(tables, mdps, w, features, tol)
    elif target is not None:
        joint = _joint_target(tables, mdps, w, target, tol)
    else:
        joint = _joint_known(tables, mdps, w, utilities)
    res, mode = joint.result, joint.mode
    bound = meg_upper_bound(mdps[0])
    Ls, exact = _shares(res, joint.beta, mode, mdps, tables, joint.utils, w)
    scores = tuple(L + bound for L in Ls)
    shares = tuple(float(wk) * s for wk, s in zip(w, scores, strict=True))
    own_results = tuple(joint.own(k) for k in range(K)) if separate else None
    return InterventionalMEG(
        meg=res.meg,
        result=res,
        names=names,
        weights=tuple(float(x) for x in w),
        scores=scores,
        shares=shares,
        separate=own_results,
        reference=reference,
        on_distribution=math.nan if own_results is None else own_results[reference].meg,
        mode=mode,
        shares_exact=exact,
    )
