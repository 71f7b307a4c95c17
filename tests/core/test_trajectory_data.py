"""Trajectories as data: impossible steps refused or counted, and imitation's serialize round trip."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import imitation_meg as im
from imitation_meg.core.trajectories import (
    empirical_occupancy,
    meg_from_trajectories,
    sample_trajectories,
)
from imitation_meg.core.trajectory_data import check_transitions, trajectory_state_actions


def _chain():
    # 3 states on a line, actions 0 = stay, 1 = step right (the last state stays), start at 0.
    T = np.zeros((3, 2, 3))
    for s in range(3):
        T[s, 0, s] = 1.0
        T[s, 1, min(s + 1, 2)] = 1.0
    return im.TabularMDP(T, np.array([0.0, 0.0, 1.0]), 2)


def test_impossible_steps_are_counted_by_hand():
    mdp = _chain()
    states = np.array([[0, 1, 2], [0, 2, 2], [1, 1, 2], [0, 0, 0]])
    actions = np.array([[1, 1], [1, 0], [0, 1], [0, 0]])
    items = trajectory_state_actions((states, actions), mdp)
    found = check_transitions(items, mdp)
    # Trajectory 1 jumps 0 -> 2 with a single step right; trajectory 2 starts at 1 (p0 = 0).
    assert (found.n_starts, found.n_transitions, found.n_trajectories) == (1, 1, 2)
    assert "trajectory 1 moves from state 0 with action 1 to state 2 at step 0" in found.first
    with pytest.raises(ValueError, match=r"2 steps of 2 trajectories are impossible"):
        meg_from_trajectories((states, actions), mdp, n_boot=0)
    with pytest.raises(ValueError, match="impossible='count'"):
        empirical_occupancy((states, actions), mdp)
    est = meg_from_trajectories((states, actions), mdp, n_boot=0, impossible="count")
    assert est.n_impossible == 2 and est.to_dict()["n_impossible"] == 2
    with pytest.raises(ValueError, match="impossible must be one of"):
        meg_from_trajectories((states, actions), mdp, impossible="ignore")


def test_the_last_step_to_the_final_state_is_checked():
    mdp = _chain()
    ok = meg_from_trajectories((np.array([[0, 1, 2]]), np.array([[1, 1]])), mdp, n_boot=0)
    assert ok.n_impossible == 0
    with pytest.raises(ValueError, match="to state 0 at step 1"):
        meg_from_trajectories((np.array([[0, 1, 0]]), np.array([[1, 1]])), mdp, n_boot=0)
    # Without a final state the last step cannot be checked (and is not counted).
    est = meg_from_trajectories((np.array([[0, 1]]), np.array([[1, 1]])), mdp, n_boot=0)
    assert est.n_impossible == 0


def test_sampled_trajectories_are_all_possible():
    mdp = im.envs.cliff_world(width=5, height=3, horizon=8)
    pi = im.policies.epsilon_greedy(mdp, 0.3)
    data = sample_trajectories(mdp, pi, 400, rng=3)
    items = trajectory_state_actions(data, mdp)
    assert check_transitions(items, mdp).total == 0
    # Shifting every state by one column makes most transitions impossible.
    states, actions = data
    shifted = (states + 1) % mdp.n_states
    assert check_transitions(trajectory_state_actions((shifted, actions), mdp), mdp).total > 100


def test_imitation_serialize_round_trip_then_score(tmp_path):
    """imitation trajectories saved and loaded with imitation.data.serialize score the same."""
    pytest.importorskip("imitation")
    import gymnasium as gym
    from imitation.algorithms.mce_irl import TabularPolicy
    from imitation.data import rollout, serialize  # fails (not skips) on a broken pyarrow
    from imitation.data.wrappers import RolloutInfoWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv

    H = 12
    mdp = im.TabularMDP.from_env("FrozenLake-v1", horizon=H)
    pi = im.policies.epsilon_greedy(mdp, 0.3)
    venv = DummyVecEnv(
        [lambda: RolloutInfoWrapper(gym.make("FrozenLake-v1", max_episode_steps=H))] * 4
    )
    venv.seed(0)  # slippery moves: unseeded, the 200 episodes (and the estimate) vary by run
    policy = TabularPolicy(
        venv.observation_space, venv.action_space, pi.numpy(), np.random.default_rng(0)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trajs = rollout.generate_trajectories(
            policy, venv, rollout.make_sample_until(min_episodes=200), rng=np.random.default_rng(1)
        )
    path = tmp_path / "frozen_lake_trajectories"
    serialize.save(path, trajs)
    loaded = serialize.load(path)
    assert len(loaded) == len(trajs)
    for a, b in zip(trajs, loaded, strict=True):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.acts, b.acts)
    before = meg_from_trajectories(trajs, mdp, n_boot=20, rng=0)
    after = meg_from_trajectories(loaded, mdp, n_boot=20, rng=0)
    assert after.n_trajectories == before.n_trajectories == len(trajs)
    assert after.n_impossible == 0 and after.n_padded == before.n_padded > 0
    assert after.meg == before.meg and after.low == before.low and after.high == before.high
    exact = im.meg(pi, mdp).meg
    assert abs(after.meg - exact) < 0.5 * exact + 0.2  # 200 episodes: a rough estimate
