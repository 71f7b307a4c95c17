"""Tabular MDPs read from gymnasium toy-text and seals environments.

FrozenLake's expected entries follow its documented rules: on the slippery lake an action moves
in the intended direction or in either perpendicular one with probability 1/3 each, clamped at
the edges; reaching the goal pays 1; holes and the goal end the episode (absorbing here, with no
further utility).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import imitation_meg as im
from imitation_meg.envs import mdp_from_env

LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3


@pytest.fixture(scope="module")
def lake():
    return im.TabularMDP.from_env("FrozenLake-v1")


def test_frozen_lake_sizes_and_horizon(lake):
    assert (lake.n_states, lake.n_actions, lake.horizon) == (16, 4, 100)  # max_episode_steps
    assert lake.initial_state_dist[0] == 1.0
    assert lake.metadata["terminal_states"] == [5, 7, 11, 12, 15]


def test_frozen_lake_slippery_rows_and_expected_reward(lake):
    T = lake.dense_transition().numpy()
    r = lake.reward_sa().numpy()
    # State 14 (row 3, col 2), RIGHT: goal 15 (pays 1), or UP to 10, or DOWN clamped to 14.
    np.testing.assert_allclose(T[14, RIGHT, [15, 10, 14]], [1 / 3] * 3, atol=1e-12)
    assert r[14, RIGHT] == pytest.approx(1 / 3)
    assert r[14, LEFT] == 0.0  # LEFT: 13, or UP 10, or DOWN 14: no goal
    # State 0, LEFT: left and the perpendicular UP are both clamped to 0; DOWN reaches 4.
    np.testing.assert_allclose(T[0, LEFT, [0, 4]], [2 / 3, 1 / 3], atol=1e-12)


def test_terminal_states_are_absorbing_without_utility(lake):
    T = lake.dense_transition().numpy()
    r = lake.reward_sa().numpy()
    for s in (5, 7, 11, 12, 15):
        np.testing.assert_allclose(T[s, :, s], 1.0)
        assert (r[s] == 0).all()


def test_seals_env_keeps_its_matrices_and_observations():
    import seals  # noqa: F401 (registers the seals environment ids)

    env = gym.make("seals/CliffWorld7x4-v0")
    mdp = im.TabularMDP.from_env(env)
    u = env.unwrapped
    np.testing.assert_array_equal(mdp.dense_transition().numpy(), u.transition_matrix)
    np.testing.assert_array_equal(mdp.utility.numpy(), u.reward_matrix)
    assert mdp.horizon == u.horizon
    assert tuple(mdp.observation_matrix.shape) == tuple(u.observation_matrix.shape)
    assert mdp.name == "seals/CliffWorld7x4-v0"
    # The envs-module entry point is the same conversion.
    assert mdp_from_env("seals/CliffWorld7x4-v0", horizon=3).horizon == 3


def test_conversion_errors():
    with pytest.raises(ValueError, match="is not tabular"):
        im.TabularMDP.from_env("CartPole-v1")
    with pytest.raises(TypeError, match="Box action space"):
        im.TabularMDP.from_env("Pendulum-v1")
    with pytest.raises(TypeError, match="only apply to an environment id"):
        im.TabularMDP.from_env(gym.make("FrozenLake-v1"), is_slippery=False)
    with pytest.raises(TypeError, match="expected a gymnasium environment"):
        im.TabularMDP.from_env(42)
    with pytest.raises(ValueError, match="could not make environment"):
        im.TabularMDP.from_env("NoSuchEnv-v9")


def test_make_kwargs_reach_gymnasium():
    mdp = im.TabularMDP.from_env("FrozenLake-v1", is_slippery=False)
    T = mdp.dense_transition().numpy()
    assert T[14, RIGHT, 15] == 1.0  # deterministic once not slippery
