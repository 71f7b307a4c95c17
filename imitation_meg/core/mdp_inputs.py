"""The checks of a :class:`~imitation_meg.core.mdp.TabularMDP`'s inputs, each value in turn.

Each function takes what a user passed (a horizon, a discount, transitions dense or sparse,
an initial distribution, observations) and returns it validated, as tensors of the MDP's dtype
and device, or raises a ``ValueError`` / ``TypeError`` that names the value and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import as_tensor, check_finite
from imitation_meg.type_aliases import ArrayLike

__all__ = [
    "DISCOUNT_MAX",
    "ROW_SUM_TOL",
    "check_discount",
    "check_horizon",
    "dense_to_sparse",
    "initial_distribution",
    "observations",
    "transitions",
]

ROW_SUM_TOL = 1e-6
#: The largest discount of the discounted infinite-horizon setting (``horizon=None``). Its
#: values grow like ``max |r| / (1 - gamma)`` while the choices turn on differences of the size
#: of one step's reward, which float64 resolves to about ``2e-16 / (1 - gamma)`` of the values:
#: up to this discount the solvers agree with an extended-precision solve to about 1e-7
#: relative; beyond it tied actions and MEG drift (at ``1 - 1e-13`` the optimal policy comes
#: out uniform).
DISCOUNT_MAX = 1.0 - 1e-8


@dataclasses.dataclass(frozen=True, eq=False)
class Transitions:
    """Checked fixed-branching transitions."""

    next_state: th.Tensor  # (S, A, B) int64
    prob: th.Tensor  # (S, A, B) float


def check_horizon(horizon: Any) -> int | None:
    """A number of decisions ``>= 1``, or None for the discounted infinite-horizon setting."""
    if horizon is None:
        return None
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)):
        raise TypeError(
            f"horizon must be an integer number of decisions (or None for an infinite horizon "
            f"with a discount below 1), got {horizon!r} ({type(horizon).__name__})."
        )
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}; pass the number of decisions.")
    return int(horizon)


def check_discount(discount: Any, horizon: int | None) -> float:
    """A discount in ``[0, 1]``; for an infinite horizon (``horizon`` None) below 1 and at most
    :data:`DISCOUNT_MAX`."""
    if isinstance(discount, bool) or not isinstance(discount, (int, float, np.floating)):
        raise TypeError(f"discount must be a float in [0, 1], got {discount!r}.")
    if not (0.0 <= float(discount) <= 1.0) or math.isnan(float(discount)):
        raise ValueError(f"discount must lie in [0, 1], got {discount}.")
    if horizon is None and not float(discount) < 1.0:
        raise ValueError(
            f"an infinite horizon (horizon=None) needs a discount below 1, got {discount}; "
            "pass e.g. discount=0.9, or a finite horizon."
        )
    # (A relative slack of 1e-6 on 1 - gamma admits the literal 0.99999999.)
    if horizon is None and 1.0 - float(discount) < (1.0 - DISCOUNT_MAX) * (1 - 1e-6):
        raise ValueError(
            f"discount {discount} is too close to 1 for the discounted infinite-horizon "
            f"setting (horizon=None): the largest discount solved reliably in float64 is "
            f"{DISCOUNT_MAX!r} (1 - 1e-8); pass discount <= {DISCOUNT_MAX!r} (the "
            "normalized MEG, (1 - gamma) * MEG, changes by O(1 - gamma) as gamma nears 1) "
            "or a finite horizon (horizon=H, discount=1)."
        )
    return float(discount)


def _check_not_empty(shape: th.Size) -> None:
    """An MDP needs a state, an action and (sparse form) a successor slot per pair."""
    if 0 in tuple(shape):
        raise ValueError(
            f"an MDP needs at least one state and one action (and a successor per state-action "
            f"pair), got a transition of shape {tuple(shape)}; pass T[s, a, s'] of shape "
            "(S, A, S) with S, A >= 1."
        )


def transitions(transition: Any, *, dtype: th.dtype, device: th.device) -> Transitions:
    """Checked fixed-branching transitions from a pair ``(next_state, prob)`` of shape
    ``(S, A, B)`` or a dense ``T[s, a, s'] (S, A, S)``: finite, non-negative, rows summing to 1."""
    if isinstance(transition, (tuple, list)) and len(transition) == 2:
        ns, pr = _sparse_pair(transition, dtype=dtype, device=device)
    else:
        T = as_tensor(transition, name="transition", dtype=dtype, device=device)
        if T.ndim != 3 or T.shape[0] != T.shape[2]:
            raise ValueError(
                f"dense transition must have shape (S, A, S), got {tuple(T.shape)}; "
                "or pass a pair (next_state, prob) of shape (S, A, B)."
            )
        check_finite(T, "transition")
        _check_not_empty(T.shape)
        ns, pr = dense_to_sparse(T)
    _check_rows(pr)
    return Transitions(next_state=ns.contiguous(), prob=pr.contiguous())


def _sparse_pair(
    transition: Any, *, dtype: th.dtype, device: th.device
) -> tuple[th.Tensor, th.Tensor]:
    """``(next_state (S, A, B) int64, prob (S, A, B))`` of a sparse pair, shapes and indices
    checked."""
    ns = as_tensor(transition[0], name="transition next_state", device=device)
    pr = as_tensor(transition[1], name="transition prob", dtype=dtype, device=device)
    if ns.is_floating_point() and not bool((ns == ns.round()).all()):
        raise TypeError("transition next_state must hold integer state indices.")
    ns = ns.to(th.int64)
    if ns.ndim != 3 or pr.shape != ns.shape:
        raise ValueError(
            "sparse transition must be a pair (next_state, prob) of equal shape "
            f"(S, A, B); got {tuple(ns.shape)} and {tuple(pr.shape)}."
        )
    _check_not_empty(ns.shape)
    S = ns.shape[0]
    check_finite(pr, "transition prob")
    if bool(((ns < 0) | (ns >= S)).any()):
        outside = ns[(ns < 0) | (ns >= S)][:5].tolist()
        raise ValueError(
            f"transition next_state has indices outside [0, {S}): {outside}; "
            "every successor must be a valid state index."
        )
    return ns, pr


def _check_rows(pr: th.Tensor) -> None:
    """Every ``prob[s, a] (B,)`` is a probability distribution."""
    if bool((pr < 0).any()):
        neg = (pr < 0).nonzero()[:5].tolist()
        raise ValueError(
            f"transition has negative probabilities at (s, a, k) {neg}; probabilities must be >= 0."
        )
    sums = pr.sum(-1)
    bad = (sums - 1).abs() > ROW_SUM_TOL
    if bool(bad.any()):
        idx = bad.nonzero()[:5].tolist()
        vals = [float(sums[s, a]) for s, a in idx]
        raise ValueError(
            f"transition rows (s, a) {idx} sum to {vals}, not 1 (tolerance {ROW_SUM_TOL}); "
            "each T[s, a, :] must be a probability distribution."
        )


def dense_to_sparse(T: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """Convert a dense ``(S, A, S)`` transition tensor to fixed-branching form.

    Returns:
        ``(next_state, prob)`` each ``(S, A, B)`` with ``B`` the largest number of
        successors; padding points at state 0 with probability 0.
    """
    nz = T != 0
    B = max(int(nz.sum(-1).max()), 1)
    # Sort so that non-zero entries come first, keep the first B.
    order = th.argsort(nz.to(th.int8), dim=-1, descending=True, stable=True)[..., :B]
    prob = th.gather(T, -1, order)
    next_state = th.where(prob != 0, order, th.zeros_like(order))
    return next_state, prob


def initial_distribution(
    initial_state_dist: ArrayLike | None, S: int, *, dtype: th.dtype, device: th.device
) -> th.Tensor:
    """The checked ``(S,)`` initial distribution; state 0 with certainty when None."""
    if initial_state_dist is None:
        p0 = th.zeros(S, dtype=dtype, device=device)
        p0[0] = 1.0
        return p0
    p0 = as_tensor(initial_state_dist, name="initial_state_dist", dtype=dtype, device=device)
    if p0.shape != (S,):
        raise ValueError(
            f"initial_state_dist must have shape ({S},) to match the {S} states, "
            f"got {tuple(p0.shape)}."
        )
    check_finite(p0, "initial_state_dist")
    if bool((p0 < 0).any()):
        raise ValueError(
            "initial_state_dist has negative entries at states "
            f"{(p0 < 0).nonzero().flatten()[:5].tolist()}; probabilities must be >= 0."
        )
    total = float(p0.sum())
    if abs(total - 1.0) > ROW_SUM_TOL:
        raise ValueError(
            f"initial_state_dist sums to {total:.8g}, not 1 (tolerance {ROW_SUM_TOL}); "
            "normalise it (p0 / p0.sum())."
        )
    return p0


def observations(
    observation_matrix: ArrayLike | None, S: int, *, device: th.device
) -> th.Tensor | None:
    """The checked observation matrix, one row per state, or None."""
    if observation_matrix is None:
        return None
    obs = as_tensor(observation_matrix, name="observation_matrix", device=device)
    if obs.ndim < 1 or obs.shape[0] != S:
        raise ValueError(
            f"observation_matrix must have one row per state ({S}), got shape {tuple(obs.shape)}."
        )
    return obs
