"""Interventional MEG: one utility that explains behaviour on distribution and under shift.

MEG scores how well a utility predicts a policy *on distribution*; a spurious goal that coincides
with the true one there scores as high (the paper's Section 7, "Distributional shifts"). Under
interventions on the environment (``do()`` on the initial state, the layout or the dynamics) a
true goal keeps predicting behaviour and a spurious one does not. Given intervened MDPs
``k = 1 .. K`` that share the action space and the horizon, weights ``w_k`` (normalised to sum
to 1) and a policy defined on all of them (an agent acting on observations), the interventional
MEG of a utility is

    MEG_do(pi) = sup_{u, beta}  sum_k w_k L_k(u, beta) + H log|A|,
    L_k(u, beta) = E_{pi, MDP_k}[ sum_t log pi_{beta, u, t}(a_t | s_t) ],

the best *single* utility and rationality across all interventions (over a linear class or a
target's class, ``u`` ranges over the class). It is exact with the solvers that exist: the
weighted disjoint union of the intervened MDPs (:func:`union_mdp`: block-diagonal transitions,
initial distribution ``sum_k w_k p0_k``) is one MDP whose log-likelihood is ``sum_k w_k L_k``,
because a soft-optimal policy of the union acts in each copy as the soft-optimal policy of that
copy. Tying the utility across copies (the same ``beta``; the same class member, i.e. the same
feature weights or the same value per target label) makes :func:`imitation_meg.meg`,
:func:`imitation_meg.meg_unknown` and :func:`imitation_meg.meg_target` solve it, concave for
linear classes as before.

:func:`meg_interventional` reports it with each intervention's score of the joint model
(``L_k + H log|A|``, which may be negative: the joint model can predict one intervention worse
than the uniform policy does), its weighted share (the shares sum to the interventional MEG),
each intervention's own MEG (its best model alone) and the on-distribution MEG (that of the
reference intervention). Limits: the policy must be the same agent in every intervention (the
measure says nothing about an agent that is retrained); interventions must share the horizon and
the actions; the weights are a choice (uniform by default) that changes the value.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning, as_policy, as_tensor
from imitation_meg.core.beta.solver import BetaObjective
from imitation_meg.core.discounted import DiscountedMEGObjective
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import MEGObjective, MEGResult, meg, meg_upper_bound, sa_occupancy_of
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import soft_value_iteration
from imitation_meg.core.unknown import _reduce_features, meg_target, meg_unknown
from imitation_meg.results import to_jsonable
from imitation_meg.type_aliases import ArrayLike, PolicySource, UtilityLike

__all__ = [
    "InterventionalMEG",
    "ShareWarning",
    "meg_interventional",
    "union_mdp",
]

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
def _check_mdps(mdps: Sequence[TabularMDP]) -> list[TabularMDP]:
    if isinstance(mdps, TabularMDP) or not isinstance(mdps, Sequence) or not mdps:
        raise TypeError("pass the intervened MDPs as a non-empty list of TabularMDPs.")
    for k, m in enumerate(mdps):
        if not isinstance(m, TabularMDP):
            raise TypeError(f"intervention {k} is a {type(m).__name__}, not a TabularMDP.")
    first = mdps[0]
    for k, m in enumerate(mdps[1:], 1):
        for attr in ("n_actions", "horizon", "discount"):
            if getattr(m, attr) != getattr(first, attr):
                raise ValueError(
                    f"intervention {k} ({m.name}) has {attr}={getattr(m, attr)} but intervention "
                    f"0 ({first.name}) has {getattr(first, attr)}; interventions must share the "
                    "actions, the horizon and the discount (the same agent, the same episode "
                    "length)."
                )
    return list(mdps)


def _weights(weights: Any, K: int) -> np.ndarray:
    if weights is None:
        return np.full(K, 1.0 / K)
    w = np.asarray(as_tensor(weights, name="weights", dtype=th.float64).cpu())
    if w.ndim > 1:
        raise ValueError(
            f"weights must be a flat list of {K} positive numbers (one per intervention), got "
            f"an array of shape {w.shape}."
        )
    w = w.reshape(-1)
    if w.shape != (K,) or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(
            f"weights must be {K} positive finite numbers (one per intervention), got "
            f"{np.asarray(weights).tolist()!r}."
        )
    return w / w.sum()


def union_mdp(
    mdps: Sequence[TabularMDP],
    weights: Any = None,
    *,
    utilities: Sequence[Any] | None = None,
    name: str | None = None,
) -> TabularMDP:
    """The weighted disjoint union of intervened MDPs: one MDP whose log-likelihood is the
    weighted sum of theirs.

    Copy ``k`` occupies states ``offsets[k] .. offsets[k + 1] - 1`` (``metadata["offsets"]``);
    transitions stay inside each copy; the initial distribution is ``w_k p0_k`` on copy ``k``.

    Args:
        mdps: the intervened MDPs (same actions, horizon and discount).
        weights: ``(K,)`` positive weights (normalised to sum to 1); default uniform.
        utilities: one utility per MDP (``(S_k,)``, ``(S_k, A)`` or ``(S_k, A, S_k)``), reduced
            to ``(S_k, A)`` and stacked; default each MDP's own (none if one lacks it).
        name: the union's name.

    Returns:
        A :class:`TabularMDP` with ``sum_k S_k`` states; its ``observation_matrix`` stacks the
        copies' when they all have one of the same shape.

    Raises:
        ValueError: MDPs that differ in actions, horizon or discount; bad weights; a utility
            list of the wrong length.
    """
    mdps = _check_mdps(mdps)
    w = _weights(weights, len(mdps))
    sizes = [m.n_states for m in mdps]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    B = max(m.branching for m in mdps)
    A = mdps[0].n_actions
    ns, pr, p0 = [], [], []
    for k, m in enumerate(mdps):
        pad = B - m.branching
        n = m.next_state.cpu() + int(offsets[k])
        p = m.prob.cpu().to(th.float64)
        if pad:
            n = th.cat([n, n[..., :1].expand(-1, -1, pad)], -1)
            p = th.cat([p, p.new_zeros(m.n_states, A, pad)], -1)
        ns.append(n)
        pr.append(p)
        p0.append(float(w[k]) * m.initial_state_dist.cpu().to(th.float64))
    if utilities is not None:
        if len(utilities) != len(mdps):
            raise ValueError(
                f"utilities must give one utility per intervention ({len(mdps)}), got "
                f"{len(utilities)}."
            )
        u = th.cat(
            [m.reward_sa(x).cpu().to(th.float64) for m, x in zip(mdps, utilities, strict=True)]
        )
    elif all(m.utility is not None for m in mdps):
        u = th.cat([m.reward_sa().cpu().to(th.float64) for m in mdps])
    else:
        u = None
    obs = None
    mats = [m.observation_matrix for m in mdps]
    if all(x is not None for x in mats):
        shapes = {(tuple(x.shape[1:]), x.dtype) for x in mats}  # type: ignore[union-attr]
        if len(shapes) == 1:
            obs = th.cat([x.cpu() for x in mats])  # type: ignore[union-attr]
    return TabularMDP(
        (th.cat(ns), th.cat(pr)),
        u,
        mdps[0].horizon,
        th.cat(p0),
        mdps[0].discount,
        dtype=mdps[0].dtype,
        observation_matrix=obs,
        name=name or "do(" + ", ".join(m.name for m in mdps) + ")",
        metadata={"offsets": offsets.tolist(), "weights": w.tolist()},
    )


# ----------------------------------------------------------------------------- inputs
def _policies(policy: Any, mdps: list[TabularMDP]) -> list[th.Tensor]:
    """One table per intervention: given as a list, or read from one agent in each MDP."""
    K = len(mdps)
    if isinstance(policy, (list, tuple)) and all(
        isinstance(p, (np.ndarray, th.Tensor, list)) for p in policy
    ):
        if len(policy) != K:
            raise ValueError(
                f"pass one policy table per intervention ({K}), got {len(policy)}; or one agent "
                "(an SB3 model, a .zip, a callable on observations) that acts in all of them."
            )
        tables = [
            as_policy(p, m, name=f"policy of intervention {k}")
            for k, (p, m) in enumerate(zip(policy, mdps, strict=True))
        ]
    elif isinstance(policy, (np.ndarray, th.Tensor)):
        if K != 1:
            raise ValueError(
                f"one policy table fits one MDP; pass a list of {K} tables, or an agent that "
                "acts on observations (it is read in every intervention)."
            )
        tables = [as_policy(policy, mdps[0])]
    else:
        from imitation_meg.adapters import policy_table

        tables = [policy_table(policy, m) for m in mdps]
    if any(t.ndim == 3 for t in tables):
        H = mdps[0].steps
        tables = [t if t.ndim == 3 else t.unsqueeze(0).expand(H, *t.shape) for t in tables]
    return [t.to(m.dtype) for t, m in zip(tables, mdps, strict=True)]


_ENTRIES = {"target": "per-state label lists or callables", "names": "strings"}


def _per_copy(arg: Any, K: int, what: str) -> list[Any]:
    if isinstance(arg, (str, bytes)) or not isinstance(arg, Sequence) or len(arg) != K:
        raise ValueError(
            f"{what} must give one entry per intervention ({K}): a list of {K} "
            f"{_ENTRIES.get(what, 'arrays')}."
        )
    return list(arg)


def _features(features: Any, mdps: list[TabularMDP]) -> th.Tensor:
    """The interventions' features stacked for the union: ``(sum S_k, F)`` state features, or
    ``(sum S_k, A, F)`` per-step state-action features when one intervention has them
    (transition features reduced to their expectation over the next state)."""
    K = len(mdps)
    phis = []
    for k, (f, m) in enumerate(zip(_per_copy(features, K, "features"), mdps, strict=True)):
        phi = as_tensor(f, name=f"features of intervention {k}", dtype=m.dtype, device=m.device)
        S, A = m.n_states, m.n_actions
        shapes = {2: (S,), 3: (S, A), 4: (S, A, S)}
        if phi.ndim not in shapes or tuple(phi.shape[: phi.ndim - 1]) != shapes[phi.ndim]:
            raise ValueError(
                f"the features of intervention {k} ({m.name}) must have shape ({S}, F), "
                f"({S}, {A}, F) or ({S}, {A}, {S}, F), got {tuple(phi.shape)}."
            )
        try:
            phis.append(_reduce_features(m, phi))
        except ValueError as e:
            raise ValueError(f"the features of intervention {k} ({m.name}): {e}") from None
    n_cols = {int(phi.shape[-1]) for phi in phis}
    if len(n_cols) > 1:
        cols = [int(phi.shape[-1]) for phi in phis]
        raise ValueError(
            f"the interventions' features have {cols} columns; every intervention needs the "
            "same F columns, column j meaning the same thing in each (the utility is tied "
            "across interventions): pad the missing features with zeros."
        )
    if any(phi.ndim == 3 for phi in phis):
        phis = [
            phi if phi.ndim == 3 else phi.unsqueeze(1).expand(-1, mdps[0].n_actions, -1)
            for phi in phis
        ]
    return th.cat([phi.to(th.float64).cpu() for phi in phis])


def _target_labels(target: Sequence[Any], mdps: list[TabularMDP]) -> list[Any]:
    labels: list[Any] = []
    for k, (t, m) in enumerate(zip(target, mdps, strict=True)):
        vals = [t(s) for s in range(m.n_states)] if callable(t) else list(t)
        if len(vals) != m.n_states:
            raise ValueError(
                f"the target of intervention {k} gives {len(vals)} labels for {m.n_states} states."
            )
        labels.extend(v.item() if isinstance(v, np.generic) else v for v in vals)
    return labels


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


def _names(names: Any, K: int) -> tuple[str, ...]:
    out = tuple(_per_copy(names, K, "names"))
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise TypeError(f"names must be strings, got {bad[0]!r} ({type(bad[0]).__name__}).")
    return out


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
    if sum(x is not None for x in (utilities, features, target)) > 1:
        raise ValueError("pass at most one of utilities, features and target.")
    _check_options(reference, separate, tol, K)
    w = _weights(weights, K)
    names = tuple(m.name for m in mdps) if names is None else _names(names, K)
    tables = _policies(policy, mdps)
    if features is not None:
        mode = "features"
        phi_u = _features(features, mdps)
        offs = np.cumsum([0] + [m.n_states for m in mdps])
        union = union_mdp(mdps, w)
        res = meg_unknown(th.cat(tables, -2), union, features=phi_u, tol=tol)

        def own(k: int) -> MEGResult:
            return meg_unknown(tables[k], mdps[k], features=phi_u[offs[k] : offs[k + 1]], tol=tol)
    elif target is not None:
        mode = "target"
        labels = _target_labels(_per_copy(target, K, "target"), mdps)
        union = union_mdp(mdps, w)
        res = meg_target(th.cat(tables, -2), union, labels, tol=tol)
        offs = union.metadata["offsets"]

        def own(k: int) -> MEGResult:
            return meg_target(tables[k], mdps[k], labels[offs[k] : offs[k + 1]], tol=tol)
    else:
        mode = "known"
        us = None if utilities is None else _per_copy(utilities, K, "utilities")
        union = union_mdp(mdps, w, utilities=us)
        if union.utility is None:
            raise ValueError(
                "some interventions have no utility attached; pass utilities= (one per "
                "intervention), features= or target=."
            )
        res = meg(th.cat(tables, -2), union)
        # The shares are evaluated for the utility scaled to spread 1 (beta in those units).
        r = union.reward_sa()
        spread = float(r.max() - r.min())
        r_n = (r - 0.5 * (float(r.max()) + float(r.min()))) / spread if spread > 0 else r * 0
        beta = res.beta * spread if spread > 0 else 0.0

        def own(k: int) -> MEGResult:
            return meg(tables[k], mdps[k], None if us is None else us[k])

    offs = union.metadata["offsets"]
    if mode == "known":
        utils = [r_n[offs[k] : offs[k + 1]] for k in range(K)]
    else:
        beta = 1.0
        U = res.extra["utility"].to(th.float64)
        utils = [U[offs[k] : offs[k + 1]] for k in range(K)]
    bound = meg_upper_bound(mdps[0])
    Ls, exact = _shares(res, beta, mode, mdps, tables, utils, w)
    scores = tuple(L + bound for L in Ls)
    shares = tuple(float(wk) * s for wk, s in zip(w, scores, strict=True))
    own_results = tuple(own(k) for k in range(K)) if separate else None
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
