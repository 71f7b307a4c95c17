"""The paper's CliffWorld builder: seals' dynamics and rewards, goal regions, grid targets.

Expected entries are read off the seals source's rules by hand: action ``(drow + 1) + (dcol + 1)
// 2`` moves diagonally with probability 0.7, and with 0.3 the wind adds one more row up; moves
are clamped at the walls.
"""

from __future__ import annotations

import numpy as np
import pytest

from imitation_meg.envs import cliff_world, goal_region_cells, grid_target

UP_LEFT, UP_RIGHT, DOWN_LEFT, DOWN_RIGHT = 0, 1, 2, 3


@pytest.fixture(scope="module")
def grid():
    return cliff_world(width=10, height=4, horizon=5)


def test_sizes_rewards_and_start(grid):
    assert (grid.n_states, grid.n_actions, grid.horizon) == (40, 4, 5)
    u = grid.utility.numpy()
    assert u[0] == -1.0  # start
    assert (u[1:9] == -10.0).all()  # cliff along the top row
    assert u[9] == 10.0  # goal, top-right
    assert (u[10:] == -1.0).all()
    assert grid.initial_state_dist[0] == 1.0
    assert grid.metadata["grid_shape"] == (4, 10)
    assert grid.metadata["goal_cells"] == [(0, 9)]


def test_diagonal_moves_wind_and_clamping(grid):
    T = grid.dense_transition().numpy()
    np.testing.assert_allclose(T.sum(-1), 1.0, atol=1e-12)
    # (row 2, col 3) = state 23, down-right: (3, 4) = 34 w.p. 0.7, blown up to (2, 4) = 24 w.p. 0.3.
    assert T[23, DOWN_RIGHT, 34] == pytest.approx(0.7)
    assert T[23, DOWN_RIGHT, 24] == pytest.approx(0.3)
    # up-left from (2, 3): (1, 2) = 12 w.p. 0.7; wind: (0, 2) = 2 w.p. 0.3.
    assert T[23, UP_LEFT, 12] == pytest.approx(0.7)
    assert T[23, UP_LEFT, 2] == pytest.approx(0.3)
    # The start corner is clamped in both directions: up-left stays put.
    assert T[0, UP_LEFT, 0] == pytest.approx(1.0)
    # Bottom-right corner, down-right: clamped to itself; the wind's extra row up cancels the
    # clamped row down, so both outcomes stay put.
    assert T[39, DOWN_RIGHT, 39] == pytest.approx(1.0)
    # Bottom-right corner, up-left: (2, 8) = 28 w.p. 0.7, blown to (1, 8) = 18 w.p. 0.3.
    assert T[39, UP_LEFT, 28] == pytest.approx(0.7)
    assert T[39, UP_LEFT, 18] == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("k", "layout", "cells"),
    [
        (1, "column", [(0, 9)]),
        (3, "column", [(0, 9), (1, 9), (2, 9)]),
        (3, "row", [(0, 9), (0, 8), (0, 7)]),
    ],
)
def test_goal_regions(k, layout, cells):
    assert goal_region_cells(10, 4, k, layout) == cells
    mdp = cliff_world(horizon=3, goal_region=k, goal_layout=layout)
    u = mdp.utility.numpy()
    goal_states = [r * 10 + c for r, c in cells]
    assert (u[goal_states] == 10.0).all()
    assert (u == 10.0).sum() == k


def test_explicit_goal_cells_and_rewards():
    mdp = cliff_world(width=5, height=3, horizon=2, goal_region=[(2, 2)], rew_goal=3.0)
    u = mdp.utility.numpy()
    assert u[2 * 5 + 2] == 3.0
    assert u[4] == -10.0  # the top-right corner is a cliff square once the goal moved away
    assert (u == 3.0).sum() == 1
    np.testing.assert_array_equal(np.flatnonzero(grid_target(mdp, "goal")), [12])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"width": 2}, ValueError, "width must be >= 3"),
        ({"height": 1}, ValueError, "height must be >= 2"),
        ({"width": 4.0}, TypeError, "width must be an integer"),
        ({"goal_region": 5}, ValueError, "do not fit the back column"),
        ({"goal_region": 10, "goal_layout": "row"}, ValueError, "do not fit the top row"),
        ({"goal_region": 2, "goal_layout": "diagonal"}, ValueError, "goal_layout must be"),
        ({"goal_region": [(0, 0)]}, ValueError, "start square"),
        ({"goal_region": [(9, 9)]}, ValueError, "off the 4x10 grid"),
        ({"goal_region": []}, ValueError, "at least one cell"),
        ({"goal_region": "top"}, TypeError, "goal_region must be an int"),
        ({"fail_p": 1.5}, ValueError, "fail_p must lie in"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        cliff_world(**{"horizon": 2, **kwargs})


def test_grid_targets(grid):
    rows, cols = np.divmod(np.arange(40), 10)
    np.testing.assert_array_equal(grid_target(grid, "row"), rows)
    np.testing.assert_array_equal(grid_target(grid, "column"), cols)
    np.testing.assert_array_equal(grid_target(grid, "cell"), np.arange(40))
    goal = grid_target(grid, "goal")
    assert goal[9] == 1 and goal.sum() == 1
    # A callable's values are relabelled to integers; equal values share a label.
    parity = grid_target(grid, lambda r, c: "even" if (r + c) % 2 == 0 else "odd")
    assert set(np.unique(parity)) == {0, 1}
    assert (parity == parity[0]).sum() == 20
    assert parity[0] != parity[1]


def test_grid_target_errors(grid):
    from imitation_meg.envs import random_mdp

    with pytest.raises(ValueError, match="no grid_shape"):
        grid_target(random_mdp(4, 2, 3), "row")
    with pytest.raises(ValueError, match="kind must be"):
        grid_target(grid, "diagonal")
