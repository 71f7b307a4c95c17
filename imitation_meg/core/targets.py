"""Target variables of target MEG as one-hot state features: labels, callables, grid names.

:func:`target_features` turns a target (per-state labels, a callable on states, a grid-helper
name, a probability matrix, or a tuple of these) into the ``(S, K)`` features of the utility
class "every function of the target"; :func:`grid_target` gives the grid helpers' labels of an
MDP whose ``metadata`` records its ``grid_shape``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import as_tensor
from imitation_meg.core.mdp import TabularMDP

__all__ = ["grid_target", "target_features"]


def _labels(values: list[Any]) -> np.ndarray:
    """Integer labels ``(S,)`` of hashable values, equal values (``==``) sharing a label."""
    index: dict[Hashable, int] = {}
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and math.isnan(v):
            raise ValueError(f"target value of state {i} is NaN; NaN is no label.")
        if not isinstance(v, Hashable):
            raise TypeError(
                f"target value of state {i} is a {type(v).__name__}, which is not hashable; "
                "return str, int, float, bool or tuples of them."
            )
        try:
            out[i] = index.setdefault(v, len(index))
        except TypeError as e:  # a tuple holding an unhashable item
            raise TypeError(
                f"target value of state {i} ({v!r}) is not hashable ({e}); return str, int, "
                "float, bool or tuples of them."
            ) from e
    return out


def _is_label_list(target: Any) -> bool:
    """A list or 1-D array of labels (not a matrix of probabilities, not a numeric array)."""
    if isinstance(target, np.ndarray):
        return target.ndim == 1 and target.dtype.kind in "OUS"
    if isinstance(target, list):
        return all(not isinstance(v, (list, np.ndarray, th.Tensor)) for v in target)
    return False


def target_features(mdp: TabularMDP, target: Any) -> th.Tensor:
    """One-hot state features ``(S, K)`` of a target variable.

    Args:
        mdp: the MDP.
        target: an array ``(S,)`` of target values per state (numbers, strings or other
            hashable labels: equal values share a label); a callable on state indices returning
            hashable values; a grid-helper name (``"row"``, ``"column"``, ``"cell"``,
            ``"goal"``) for MDPs built by :func:`imitation_meg.envs.cliff_world`; or a ``(S, K)``
            matrix of probabilities ``P(T = k | s)`` for a target that depends on the state only
            stochastically (rows summing to 1); or a tuple of any of the deterministic kinds, for
            several target variables jointly (e.g. an instruction and the position, for a
            goal-conditioned agent).

    Raises:
        ValueError: wrong length, NaN labels, or a probability matrix whose rows do not sum to 1.
        TypeError: a target of unsupported kind, or unhashable target values.
    """
    S = mdp.n_states
    t = as_tensor(_target_values(mdp, target), name="target", device=mdp.device)
    if t.ndim == 2:
        return _probabilistic_target(mdp, t)
    if t.ndim != 1 or t.shape[0] != S:
        raise ValueError(
            f"target must give one value per state: shape ({S},), got {tuple(t.shape)}."
        )
    inv = th.as_tensor(_labels(t.cpu().tolist()), device=mdp.device)
    K = int(inv.max()) + 1
    return th.nn.functional.one_hot(inv, K).to(mdp.dtype)


def _target_values(mdp: TabularMDP, target: Any) -> Any:
    """The target as per-state values: a tuple of targets as their joint value, a grid-helper
    name, a callable or a list of labels as integers; arrays as given."""
    S = mdp.n_states
    if isinstance(target, tuple):
        # Several target variables: the class is every function of their joint value.
        if not target:
            raise ValueError("a tuple of targets must name at least one variable.")
        parts = [target_features(mdp, t).argmax(1).cpu().numpy() for t in target]
        _, joint = np.unique(np.stack(parts, 1), axis=0, return_inverse=True)
        target = joint.reshape(-1)
    if isinstance(target, str):
        return grid_target(mdp, target)
    if callable(target):
        return _labels([target(s) for s in range(S)])
    if _is_label_list(target):
        if len(target) != S:
            raise ValueError(
                f"target must give one value per state: shape ({S},), got ({len(target)},)."
            )
        return _labels(list(target))
    return target


def _probabilistic_target(mdp: TabularMDP, t: th.Tensor) -> th.Tensor:
    """A ``(S, K)`` matrix of ``P(T = k | s)``, checked, in the MDP's dtype."""
    S = mdp.n_states
    if t.shape[0] != S:
        raise ValueError(f"a probabilistic target must have shape ({S}, K), got {tuple(t.shape)}.")
    t = t.to(mdp.dtype)
    if bool((t < 0).any()) or bool(((t.sum(1) - 1).abs() > 1e-6).any()):
        raise ValueError("a probabilistic target's rows must be distributions P(T = k | s).")
    return t


def grid_target(mdp: TabularMDP, kind: str | Callable[[int, int], Hashable] = "cell") -> np.ndarray:
    """Integer target values ``(S,)`` for a grid MDP built by :func:`cliff_world`.

    Args:
        mdp: an MDP whose ``metadata`` has ``grid_shape`` (and ``goal_cells`` for ``"goal"``).
        kind: ``"row"``, ``"column"``, ``"cell"`` (the state itself), ``"goal"`` (1 inside the
            goal region, 0 elsewhere), or a callable ``f(row, col)`` whose values are relabelled
            to integers.

    Returns:
        ``(S,)`` int64 array of target values.

    Raises:
        ValueError: if the MDP carries no grid shape or ``kind`` is unknown.
    """
    shape = mdp.metadata.get("grid_shape")
    if shape is None:
        raise ValueError(
            f"{mdp.name} has no grid_shape in its metadata; grid targets need an MDP built by "
            "imitation_meg.envs.cliff_world (or pass an integer target array)."
        )
    _height, width = shape
    rows, cols = np.divmod(np.arange(mdp.n_states), width)
    if kind == "row":
        return rows.astype(np.int64)
    if kind in ("column", "col"):
        return cols.astype(np.int64)
    if kind == "cell":
        return np.arange(mdp.n_states, dtype=np.int64)
    if kind == "goal":
        goal = {(int(r), int(c)) for r, c in mdp.metadata.get("goal_cells", [])}
        return np.array(
            [int((r, c) in goal) for r, c in zip(rows, cols, strict=True)], dtype=np.int64
        )
    if callable(kind):
        values = [kind(int(r), int(c)) for r, c in zip(rows, cols, strict=True)]
        _, inverse = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
        return inverse.astype(np.int64)
    raise ValueError(f"kind must be 'row', 'column', 'cell', 'goal' or a callable, got {kind!r}.")
