"""The paper's CliffWorld (section 6) with an extendable goal region, and grid targets.

The dynamics are seals' ``CliffWorldEnv``: four *diagonal* moves (up-left, up-right, down-left,
down-right) clamped at the walls, and wind that blows the agent one extra row up with
probability 0.3. State ``s = row * width + col``; the agent starts top-left (state 0); the top
row between start and goal is the cliff (-10); the goal square (top-right) gives +10; every
other square -1. The goal-region study extends the goal to ``k`` squares running down the back
(rightmost) column from the top-right corner; ``goal_layout="row"`` runs them along the top
row instead (replacing cliff squares), and an explicit list of cells is also accepted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch as th

from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.targets import grid_target

__all__ = ["DEFAULT_HORIZON", "cliff_world", "goal_region_cells", "grid_target"]

#: Default horizon for the paper's 10x4 grid (the paper does not state one; see the README's
#: horizon sweep for how the numbers move with H).
DEFAULT_HORIZON = 30


def goal_region_cells(
    width: int,
    height: int,
    goal_region: int | Sequence[tuple[int, int]],
    goal_layout: str = "column",
) -> list[tuple[int, int]]:
    """The ``(row, col)`` cells of a goal region.

    Args:
        width: grid width (columns).
        height: grid height (rows).
        goal_region: number of squares ``k >= 1``, or an explicit list of ``(row, col)`` cells.
        goal_layout: ``"column"`` (down the back column from the top-right corner; the default)
            or ``"row"`` (leftwards along the top row from the top-right corner).

    Raises:
        ValueError: if ``k`` does not fit the chosen layout, a cell is off the grid, or the
            layout is unknown.
    """
    if isinstance(goal_region, (int, np.integer)) and not isinstance(goal_region, bool):
        k = int(goal_region)
        if goal_layout == "column":
            if not 1 <= k <= height:
                raise ValueError(
                    f"goal_region={k} squares do not fit the back column of a grid of height "
                    f"{height}; use 1 <= goal_region <= {height} or goal_layout='row'."
                )
            return [(r, width - 1) for r in range(k)]
        if goal_layout == "row":
            if not 1 <= k <= width - 1:
                raise ValueError(
                    f"goal_region={k} squares do not fit the top row of width {width} beside the "
                    f"start; use 1 <= goal_region <= {width - 1}."
                )
            return [(0, width - 1 - c) for c in range(k)]
        raise ValueError(f"goal_layout must be 'column' or 'row', got {goal_layout!r}.")
    if isinstance(goal_region, (str, bytes)) or not isinstance(goal_region, Sequence):
        raise TypeError(
            f"goal_region must be an int k or a list of (row, col) cells, got {goal_region!r}."
        )
    cells = []
    for cell in goal_region:
        if len(cell) != 2:
            raise ValueError(f"goal cell {cell!r} must be a (row, col) pair.")
        r, c = int(cell[0]), int(cell[1])
        if not (0 <= r < height and 0 <= c < width):
            raise ValueError(f"goal cell {(r, c)} lies off the {height}x{width} grid.")
        if (r, c) == (0, 0):
            raise ValueError("the start square (0, 0) cannot be a goal cell.")
        cells.append((r, c))
    if not cells:
        raise ValueError("goal_region must contain at least one cell.")
    return cells


def cliff_world(
    width: int = 10,
    height: int = 4,
    horizon: int = DEFAULT_HORIZON,
    goal_region: int | Sequence[tuple[int, int]] = 1,
    *,
    goal_layout: str = "column",
    fail_p: float = 0.3,
    rew_default: float = -1.0,
    rew_goal: float = 10.0,
    rew_cliff: float = -10.0,
    dtype: th.dtype = th.float64,
    device: th.device | str | None = None,
) -> TabularMDP:
    """The paper's CliffWorld as a :class:`TabularMDP` (seals dynamics, extendable goal region).

    Args:
        width: columns (paper: 10).
        height: rows (paper: 4).
        horizon: number of decisions ``H``.
        goal_region: ``k`` goal squares, or explicit ``(row, col)`` cells (see
            :func:`goal_region_cells`). Goal cells get ``rew_goal``; a goal cell on the top row
            replaces a cliff square. Explicit cells are the whole goal region: if they leave out
            seals' goal corner ``(0, width - 1)``, that square becomes a cliff square.
        goal_layout: ``"column"`` or ``"row"``, for an integer ``goal_region``.
        fail_p: wind probability of being blown one extra row up.
        rew_default, rew_goal, rew_cliff: state utilities.
        dtype, device: tensor options.

    Returns:
        A TabularMDP with state utility ``(S,)``, ``S = width * height``, the identity observation
        matrix (as seals with ``use_xy_obs=False``), and ``metadata`` holding ``grid_shape``
        ``(height, width)`` and ``goal_cells``.

    Raises:
        ValueError: on a degenerate grid, a bad goal region or ``fail_p`` outside [0, 1].
    """
    for nm, v, lo in (("width", width, 3), ("height", height, 2)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{nm} must be an integer, got {v!r}.")
        if v < lo:
            raise ValueError(f"{nm} must be >= {lo} for a non-degenerate CliffWorld, got {v}.")
    if not 0.0 <= fail_p <= 1.0:
        raise ValueError(f"fail_p must lie in [0, 1], got {fail_p}.")
    from seals.diagnostics.cliff_world import CliffWorldEnv

    env = CliffWorldEnv(
        width=int(width),
        height=int(height),
        horizon=int(horizon) if isinstance(horizon, (int, np.integer)) else 1,
        use_xy_obs=False,
        rew_default=rew_default,  # type: ignore[arg-type]  # seals annotates int, uses floats
        rew_goal=rew_goal,  # type: ignore[arg-type]
        rew_cliff=rew_cliff,  # type: ignore[arg-type]
        fail_p=fail_p,
    )
    cells = goal_region_cells(int(width), int(height), goal_region, goal_layout)
    reward = np.asarray(env.reward_matrix, dtype=np.float64).copy()
    if (0, int(width) - 1) not in cells:
        # Explicit cells define the whole goal region: seals' goal corner becomes the end of the
        # cliff row (so that the utility and the "goal" grid target agree).
        reward[int(width) - 1] = rew_cliff
    for r, c in cells:
        reward[r * width + c] = rew_goal
    k = len(cells)
    return TabularMDP(
        np.asarray(env.transition_matrix, dtype=np.float64),
        reward,
        horizon,
        np.asarray(env.initial_state_dist, dtype=np.float64),
        1.0,
        dtype=dtype,
        device=device,
        observation_matrix=np.asarray(env.observation_matrix),
        name=f"CliffWorld{width}x{height}(H={horizon}, goal={k})",
        metadata={"grid_shape": (int(height), int(width)), "goal_cells": cells},
    )
