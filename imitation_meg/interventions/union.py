"""The weighted disjoint union of intervened MDPs, and the per-intervention inputs tied across it.

:func:`union_mdp` builds one :class:`~imitation_meg.core.mdp.TabularMDP` from ``K`` intervened
MDPs (block-diagonal transitions, initial distribution ``sum_k w_k p0_k``) whose log-likelihood
is the weighted sum of theirs; the helpers check and stack what a caller gives per intervention
(policy tables, features, target labels, names) so that the union's solvers see one input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import as_policy, as_tensor
from imitation_meg.core.class_features import _reduce_features
from imitation_meg.core.mdp import TabularMDP

__all__ = ["union_mdp"]


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
    ns, pr, p0 = _stacked_transitions(mdps, offsets, w)
    u = _stacked_utilities(mdps, utilities)
    obs = _stacked_observations(mdps)
    return TabularMDP(
        (ns, pr),
        u,
        mdps[0].horizon,
        p0,
        mdps[0].discount,
        dtype=mdps[0].dtype,
        observation_matrix=obs,
        name=name or "do(" + ", ".join(m.name for m in mdps) + ")",
        metadata={"offsets": offsets.tolist(), "weights": w.tolist()},
    )


def _stacked_transitions(
    mdps: list[TabularMDP], offsets: np.ndarray, w: np.ndarray
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """The union's ``next_state, prob (sum S_k, A, B)`` (each copy's successors shifted by its
    offset, padded to the largest branching ``B``) and ``p0 (sum S_k,)`` (``w_k p0_k``)."""
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
    return th.cat(ns), th.cat(pr), th.cat(p0)


def _stacked_utilities(mdps: list[TabularMDP], utilities: Sequence[Any] | None) -> th.Tensor | None:
    """The copies' utilities reduced to ``(S_k, A)`` and stacked ``(sum S_k, A)``: the given
    ones, else the MDPs' own (None when one lacks it)."""
    if utilities is not None:
        if len(utilities) != len(mdps):
            raise ValueError(
                f"utilities must give one utility per intervention ({len(mdps)}), got "
                f"{len(utilities)}."
            )
        return th.cat(
            [m.reward_sa(x).cpu().to(th.float64) for m, x in zip(mdps, utilities, strict=True)]
        )
    if all(m.utility is not None for m in mdps):
        return th.cat([m.reward_sa().cpu().to(th.float64) for m in mdps])
    return None


def _stacked_observations(mdps: list[TabularMDP]) -> th.Tensor | None:
    """The copies' observation matrices stacked, when they all have one of the same shape."""
    mats = [m.observation_matrix for m in mdps]
    if not all(x is not None for x in mats):
        return None
    shapes = {(tuple(x.shape[1:]), x.dtype) for x in mats}  # type: ignore[union-attr]
    if len(shapes) != 1:
        return None
    return th.cat([x.cpu() for x in mats])  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- inputs
def _policies(policy: Any, mdps: list[TabularMDP]) -> list[th.Tensor]:
    """One table per intervention: given as a list, or read from one agent in each MDP."""
    tables = _tables(policy, mdps)
    if any(t.ndim == 3 for t in tables):
        H = mdps[0].steps
        tables = [t if t.ndim == 3 else t.unsqueeze(0).expand(H, *t.shape) for t in tables]
    return [t.to(m.dtype) for t, m in zip(tables, mdps, strict=True)]


def _tables(policy: Any, mdps: list[TabularMDP]) -> list[th.Tensor]:
    """The checked policy tables ``(S_k, A)`` / ``(H, S_k, A)`` of :func:`_policies`."""
    K = len(mdps)
    if isinstance(policy, (list, tuple)) and all(
        isinstance(p, (np.ndarray, th.Tensor, list)) for p in policy
    ):
        if len(policy) != K:
            raise ValueError(
                f"pass one policy table per intervention ({K}), got {len(policy)}; or one agent "
                "(an SB3 model, a .zip, a callable on observations) that acts in all of them."
            )
        return [
            as_policy(p, m, name=f"policy of intervention {k}")
            for k, (p, m) in enumerate(zip(policy, mdps, strict=True))
        ]
    if isinstance(policy, (np.ndarray, th.Tensor)):
        if K != 1:
            raise ValueError(
                f"one policy table fits one MDP; pass a list of {K} tables, or an agent that "
                "acts on observations (it is read in every intervention)."
            )
        return [as_policy(policy, mdps[0])]
    from imitation_meg.adapters import policy_table

    return [policy_table(policy, m) for m in mdps]


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
        phis.append(_copy_features(f, m, k))
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


def _copy_features(f: Any, m: TabularMDP, k: int) -> th.Tensor:
    """Intervention ``k``'s features, shape checked against its MDP ``m`` and reduced to
    ``(S_k, F)`` or ``(S_k, A, F)``."""
    phi = as_tensor(f, name=f"features of intervention {k}", dtype=m.dtype, device=m.device)
    S, A = m.n_states, m.n_actions
    shapes = {2: (S,), 3: (S, A), 4: (S, A, S)}
    if phi.ndim not in shapes or tuple(phi.shape[: phi.ndim - 1]) != shapes[phi.ndim]:
        raise ValueError(
            f"the features of intervention {k} ({m.name}) must have shape ({S}, F), "
            f"({S}, {A}, F) or ({S}, {A}, {S}, F), got {tuple(phi.shape)}."
        )
    try:
        return _reduce_features(m, phi)
    except ValueError as e:
        raise ValueError(f"the features of intervention {k} ({m.name}): {e}") from None


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
