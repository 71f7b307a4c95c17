"""The slippery grid of the MEG authors' notebook, a discounted infinite-horizon MDP."""

from __future__ import annotations

import numpy as np
import torch as th

from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import UtilityLike

__all__ = ["notebook_grid"]

# (row, column) steps of the actions up, down, left, right.
_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


def notebook_grid(
    size: int = 5,
    *,
    slip: float = 0.1,
    discount: float = 0.9,
    utility: UtilityLike | None = None,
    dtype: th.dtype = th.float64,
) -> TabularMDP:
    """The grid of the example in the MEG authors' notebook (the paper's footnote link).

    ``size x size`` cells, state ``row * size + column``; actions up, down, left, right; a move
    goes the intended way with probability ``1 - slip`` and the opposite way with ``slip``, and
    a move off the grid leaves the agent in place. The agent starts in the corner (state 0), and
    the MDP is discounted with an infinite horizon (``horizon=None``). The notebook draws a
    random utility; the default here is 1 in the opposite corner (state ``size * size - 1``) and
    0 elsewhere, received at every step.

    Args:
        size: cells per side (``>= 2``).
        slip: probability of moving the opposite way, in ``[0, 1]``.
        discount: ``gamma`` in ``[0, 1)``.
        utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)``; default the corner goal.
        dtype: float dtype.

    Raises:
        ValueError: a size below 2, or a slip outside ``[0, 1]`` (the MDP checks the discount).

    Example:
        >>> mdp = notebook_grid()
        >>> mdp.n_states, mdp.n_actions, mdp.horizon, mdp.discount
        (25, 4, None, 0.9)
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2:
        raise ValueError(f"size must be an integer >= 2, got {size!r}.")
    if not 0.0 <= float(slip) <= 1.0:
        raise ValueError(f"slip must lie in [0, 1], got {slip}.")
    S = size * size
    T = np.zeros((S, len(_MOVES), S))
    for row in range(size):
        for col in range(size):
            s = row * size + col
            for a, (dr, dc) in enumerate(_MOVES):
                for sign, p in ((1, 1.0 - slip), (-1, float(slip))):
                    r2, c2 = row + sign * dr, col + sign * dc
                    inside = 0 <= r2 < size and 0 <= c2 < size
                    T[s, a, r2 * size + c2 if inside else s] += p
    if utility is None:
        goal = np.zeros(S)
        goal[-1] = 1.0
        utility = goal
    return TabularMDP(
        T,
        utility,
        None,
        discount=discount,
        dtype=dtype,
        name=f"notebook grid {size}x{size}",
        metadata={"grid": (size, size), "slip": float(slip)},
    )
