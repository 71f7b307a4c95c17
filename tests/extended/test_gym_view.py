"""Gymnasium ids and the gym combination of Definition 12."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from imitation_meg import extended
from imitation_meg.extended import agents, envs
from imitation_meg.extended.gym_view import combine, gym_id, register_gym_ids


def test_gym_make_for_every_environment():
    ids = register_gym_ids()
    assert len(ids) == 28 and ids == register_gym_ids()
    push = functools.partial(agents.Constant, action=1)
    env = gym.make(gym_id(envs.TemptingButton), agent_factory=push)
    obs, _ = env.reset(seed=3)
    assert obs == 0
    total = 0.0
    for _ in range(200):
        obs, r, term, trunc, _ = env.step(1)
        total += r
        assert not term and not trunc
    push = functools.partial(agents.Constant, action=1)
    ref = extended.run(envs.TemptingButton, push, 200, seed=3)
    assert total == ref.total_reward
    with pytest.raises(TypeError, match="agent factory"):
        gym.make(gym_id("IgnoreRewards")).reset()
    with pytest.raises(ValueError, match="outside"):
        e = gym.make(gym_id("IgnoreRewards"), agent_factory=agents.Random)
        e.reset()
        e.step(7)


def test_cartpole_ignore_rewards_combination_rewards():
    combo = combine("CartPole-v0", envs.IgnoreRewards)
    assert combo.n_actions == 4 and combo.obs_shape == (5,)
    # Joystick always 1: the sim (same constant agent) matches; reward is CartPole's +1.
    res = extended.run(combo, functools.partial(agents.Constant, action=3), 300, seed=0)
    assert res.total_reward == 300.0
    rets, lens = res.env.episode_returns, res.env.episode_lengths
    assert rets and all(r == n for r, n in zip(rets, lens, strict=True))
    # A joystick-mismatching agent: alternate joysticks vs a sim trained the same (reward 0) ...
    rnd = extended.run(combo, agents.Random, 300, seed=0)
    assert set(np.unique(rnd.rewards)) <= {1.0, -1.0}
    # for Random the sim sees the same history except rewards: it acts identically -> no penalties
    assert rnd.total_reward == 300.0


def test_combination_penalty_and_sim_training_reward():
    combo = combine("CartPole-v0", envs.IncentivizeLearningRate)
    res = extended.run(combo, agents.Random, 50, seed=0)  # no learning rate: penalised every step
    assert res.total_reward == -50.0  # min(1 - 1, -1) = -1
    q = extended.run(combo, agents.QLearner, 200, seed=0)
    assert q.env.inner.sim.real.learning_rate == pytest.approx(0.05)
    assert q.env.inner.sim.real.n_trainings == 200


def test_combination_validation():
    with pytest.raises(TypeError, match="not adaptable"):
        combine("CartPole-v0", envs.TemptingButton)
    with pytest.raises(ValueError, match="Discrete action space"):
        combine("Pendulum-v1", envs.IgnoreRewards)
