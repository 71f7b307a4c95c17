"""TabularMDP construction, conversion and validation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.envs import cliff_world, random_mdp


def _chain_dense() -> np.ndarray:
    # 3 states, 2 actions: action 0 stays, action 1 moves right (last state absorbing).
    T = np.zeros((3, 2, 3))
    for s in range(3):
        T[s, 0, s] = 1.0
        T[s, 1, min(s + 1, 2)] = 1.0
    return T


def test_dense_and_sparse_forms_agree(rng):
    T = rng.dirichlet(np.ones(5), size=(5, 3))
    T[T < 0.15] = 0.0
    T /= T.sum(-1, keepdims=True)
    mdp = im.TabularMDP(T, rng.standard_normal(5), 4)
    np.testing.assert_allclose(mdp.dense_transition().numpy(), T, atol=1e-15)
    sparse = im.TabularMDP((mdp.next_state, mdp.prob), mdp.utility, 4)
    np.testing.assert_allclose(sparse.dense_transition().numpy(), T, atol=1e-15)
    assert mdp.branching == int((T > 0).sum(-1).max())


def test_sparse_backup_matches_dense(rng):
    # Large enough to take the CSR path rather than the cached dense matrix.
    mdp = random_mdp(1100, 3, 2, branching=3, seed=1)
    assert not mdp.operator.has_dense(th.float64)
    V = th.as_tensor(rng.standard_normal((2, 1100)))
    T = mdp.dense_transition()
    expected = th.einsum("sat,kt->ksa", T, V)
    th.testing.assert_close(mdp.expect_next(V), expected, rtol=1e-12, atol=1e-12)
    m = th.as_tensor(rng.random((2, 1100, 3)))
    th.testing.assert_close(
        mdp.push_forward(m), th.einsum("ksa,sat->kt", m, T), rtol=1e-12, atol=1e-12
    )


def test_defaults_and_dtype():
    mdp = im.TabularMDP(_chain_dense(), [0.0, 0.0, 1.0], 3)
    assert mdp.dtype == th.float64
    assert mdp.initial_state_dist.tolist() == [1.0, 0.0, 0.0]
    m32 = mdp.to(dtype=th.float32)
    assert m32.prob.dtype == th.float32 and m32.utility.dtype == th.float32
    assert mdp.prob.dtype == th.float64


def test_reward_reductions():
    T = _chain_dense()
    mdp = im.TabularMDP(T, None, 2)
    U3 = np.arange(18, dtype=float).reshape(3, 2, 3)
    expected = (T * U3).sum(-1)
    np.testing.assert_allclose(mdp.reward_sa(U3).numpy(), expected)
    np.testing.assert_allclose(mdp.reward_sa([1.0, 2.0, 3.0]).numpy(), [[1, 1], [2, 2], [3, 3]])


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"transition": np.ones((3, 2))}, ValueError, r"shape \(S, A, S\)"),
        ({"transition": np.full((3, 2, 3), np.nan)}, ValueError, "NaN or infinite"),
        ({"transition": -_chain_dense()}, ValueError, "negative probabilities"),
        ({"transition": _chain_dense() * 0.5}, ValueError, "sum to .* not 1"),
        ({"transition": "abc"}, TypeError, "numeric"),
        ({"horizon": 0}, ValueError, "horizon must be >= 1"),
        ({"horizon": 2.5}, TypeError, "horizon must be an integer"),
        ({"discount": 1.5}, ValueError, r"discount must lie in \[0, 1\]"),
        ({"discount": -0.1}, ValueError, r"discount must lie in \[0, 1\]"),
        ({"initial_state_dist": [0.5, 0.2, 0.2]}, ValueError, "sums to 0.9"),
        ({"initial_state_dist": [1.5, -0.5, 0.0]}, ValueError, "negative entries"),
        ({"initial_state_dist": [1.0, 0.0]}, ValueError, r"shape \(3,\)"),
        ({"initial_state_dist": [np.inf, 0, 0]}, ValueError, "NaN or infinite"),
        ({"utility": np.ones(4)}, ValueError, "utility must have shape"),
        ({"utility": [0.0, np.nan, 1.0]}, ValueError, "NaN or infinite"),
        (
            {"transition": (np.zeros((3, 2, 1), int) + 5, np.ones((3, 2, 1)))},
            ValueError,
            "outside",
        ),
        (
            {"transition": (np.zeros((3, 2, 1), int), np.ones((3, 2, 2)))},
            ValueError,
            "equal shape",
        ),
    ],
)
def test_validation_errors(kwargs, exc, match):
    args = {"transition": _chain_dense(), "utility": [0.0, 0.0, 1.0], "horizon": 3}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        im.TabularMDP(**args)


def test_dense_transition_refused_when_huge():
    mdp = random_mdp(40_000, 1, 1, branching=1, seed=0)
    with pytest.raises(ValueError, match="sparse next_state / prob"):
        mdp.dense_transition()


def test_from_seals_env_matches_env_arrays():
    mdp = im.TabularMDP.from_env("seals/CliffWorld7x4-v0")
    env = gym.make("seals/CliffWorld7x4-v0").unwrapped
    np.testing.assert_allclose(mdp.dense_transition().numpy(), env.transition_matrix)
    np.testing.assert_allclose(mdp.utility.numpy(), env.reward_matrix)
    np.testing.assert_allclose(mdp.initial_state_dist.numpy(), env.initial_state_dist)
    assert mdp.horizon == env.horizon
    assert mdp.observation_matrix.shape == env.observation_matrix.shape
    assert im.TabularMDP.from_env(gym.make("seals/Random-v0"), horizon=7).horizon == 7


def test_from_toy_text_frozen_lake_terminal_states_absorb():
    mdp = im.TabularMDP.from_env("FrozenLake-v1")
    assert (mdp.n_states, mdp.n_actions, mdp.horizon) == (16, 4, 100)
    T = mdp.dense_transition()
    for s in mdp.metadata["terminal_states"]:  # holes and the goal
        assert th.all(T[s, :, s] == 1.0)
        assert th.all(mdp.utility[s] == 0.0)
    assert set(mdp.metadata["terminal_states"]) == {5, 7, 11, 12, 15}
    # Entering the goal (15) from 14 pays 1/3 per slippery action that reaches it.
    assert float(mdp.utility[14, 2]) == pytest.approx(1 / 3)


def test_from_toy_text_needs_horizon_for_cliff_walking():
    cliff_walking = im.envs.registered_id("CliffWalking")  # -v0 in gymnasium 0.29, -v1 in 1.x
    with pytest.raises(ValueError, match="pass horizon="):
        im.TabularMDP.from_env(cliff_walking)
    mdp = im.TabularMDP.from_env(cliff_walking, horizon=20)
    assert mdp.metadata["terminal_states"] == [47]
    assert float(mdp.utility[36, 1]) == -100.0  # stepping right from the start into the cliff


def test_from_env_rejects_non_tabular_and_continuous():
    with pytest.raises(ValueError, match="not tabular"):
        im.TabularMDP.from_env("CartPole-v1")
    with pytest.raises(TypeError, match="Discrete action"):
        im.TabularMDP.from_env("Pendulum-v1")
    with pytest.raises(TypeError, match="gymnasium environment"):
        im.TabularMDP.from_env(42)
    with pytest.raises(ValueError, match="could not make"):
        im.TabularMDP.from_env("NoSuchEnv-v0")


def test_cliff_world_matches_seals_and_goal_region():
    import seals.diagnostics.cliff_world as cw

    mdp = cliff_world(horizon=12)
    env = cw.CliffWorldEnv(width=10, height=4, horizon=12, use_xy_obs=False)
    np.testing.assert_allclose(mdp.dense_transition().numpy(), env.transition_matrix)
    np.testing.assert_allclose(mdp.utility.numpy(), env.reward_matrix)
    k4 = cliff_world(goal_region=4)
    goal = k4.utility.view(4, 10)[:, 9]
    assert goal.tolist() == [10.0] * 4
    assert k4.metadata["goal_cells"] == [(0, 9), (1, 9), (2, 9), (3, 9)]
    row = cliff_world(goal_region=3, goal_layout="row")
    assert row.utility.view(4, 10)[0, 7:].tolist() == [10.0] * 3
    with pytest.raises(ValueError, match="do not fit the back column"):
        cliff_world(goal_region=5)
    with pytest.raises(ValueError, match="goal_layout must be"):
        cliff_world(goal_region=2, goal_layout="diagonal")
    with pytest.raises(ValueError, match="width must be >= 3"):
        cliff_world(width=2)
    with pytest.raises(ValueError, match="off the"):
        cliff_world(goal_region=[(9, 9)])


def test_grid_targets():
    mdp = cliff_world(goal_region=2)
    from imitation_meg.envs import grid_target

    assert grid_target(mdp, "row")[15] == 1 and grid_target(mdp, "column")[15] == 5
    assert grid_target(mdp, "goal").sum() == 2
    assert grid_target(mdp, lambda r, c: r + c > 5).max() == 1
    with pytest.raises(ValueError, match="kind must be"):
        grid_target(mdp, "diagonal")
    with pytest.raises(ValueError, match="no grid_shape"):
        grid_target(random_mdp(4, 2, 2), "row")
