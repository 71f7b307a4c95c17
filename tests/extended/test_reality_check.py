"""Reality Check properties (paper Def. 8, Thm 9)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from imitation_meg import extended
from imitation_meg.extended import agents, envs
from imitation_meg.extended.core import make_agent


def _transitions(rng, n, n_obs=3, n_actions=2):
    return [
        (
            int(rng.integers(n_obs)),
            int(rng.integers(n_actions)),
            float(rng.integers(-1, 2)),
            int(rng.integers(n_obs)),
        )
        for _ in range(n)
    ]


def test_freezes_on_first_contradicting_transition():
    rc = make_agent(extended.reality_check(agents.QLearner), n_actions=2, seed=0)
    first = rc.inner.act(0)
    rc.train(0, first, 1.0, 0)  # consistent: trained
    assert not rc.frozen and rc.inner.n_trainings == 1
    would = rc.act(0)
    rc.train(0, 1 - would, 1.0, 0)  # contradicts: freezes, not trained
    assert rc.frozen and rc.inner.n_trainings == 1
    assert rc.first_action == first
    for o in range(3):
        assert rc.act(o) == first
    rc.train(0, first, 1.0, 0)
    assert rc.inner.n_trainings == 1  # ignores further training


def test_contradiction_at_first_step_repeats_pi_of_first_observation():
    rc = make_agent(extended.reality_check(agents.Constant), action=1, n_actions=2)
    rc.train(0, 0, 1.0, 0)
    assert rc.frozen and rc.act(0) == 1


def test_idempotence(rng):
    rc1 = make_agent(extended.reality_check(agents.QLearner), n_actions=2, seed=1)
    rc_rc = extended.reality_check(extended.reality_check(agents.QLearner))
    rc2 = make_agent(rc_rc, n_actions=2, seed=1)
    for o_prev, a, r, o_next in _transitions(rng, 300):
        if rng.random() < 0.97:
            a = rc1.act(o_prev)  # mostly consistent histories, occasionally contradicting
        for o in range(3):
            assert rc1.act(o) == rc2.act(o)
        rc1.train(o_prev, a, r, o_next)
        rc2.train(o_prev, a, r, o_next)
    assert rc1.frozen and rc2.frozen


def test_traditional_equivalence_on_possible_histories(rng):
    pi = make_agent(agents.QLearner, n_actions=2, seed=2)
    rc = make_agent(extended.reality_check(agents.QLearner), n_actions=2, seed=2)
    o = 0
    for _ in range(500):
        a = pi.act(o)
        assert rc.act(o) == a
        r, o2 = float(rng.integers(-1, 2)), int(rng.integers(3))
        pi.train(o, a, r, o2)
        rc.train(o, a, r, o2)
        o = o2
    assert not rc.frozen


def test_identical_trajectories_in_an_ordinary_gymnasium_env():
    from imitation_meg.extended.gym_view import run_gym

    a = run_gym("FrozenLake-v1", agents.QLearner, 2000, seed=0)
    b = run_gym("FrozenLake-v1", extended.reality_check(agents.QLearner), 2000, seed=0)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert a.observations == b.observations
    assert not b.agent.frozen


def test_attributes_and_learning_rate_pass_through():
    f = extended.reality_check(functools.partial(agents.QLearner, learning_rate=0.3))
    rc = make_agent(f, n_actions=2, learning_rate=0.2)
    assert rc.learning_rate == 0.2 and rc.n_actions == 2
    with pytest.raises(TypeError, match="agent factory"):
        extended.reality_check(5)


def test_reality_check_improves_q_on_ignore_rewards():
    rc_q = extended.reality_check(agents.QLearner)
    q = [
        extended.run(envs.IgnoreRewards, agents.QLearner, 1000, seed=s).mean_reward
        for s in range(3)
    ]
    rc = [extended.run(envs.IgnoreRewards, rc_q, 1000, seed=s).mean_reward for s in range(3)]
    assert min(rc) > max(q) + 0.3


def test_reality_check_does_not_change_tempting_button():
    q = extended.run(envs.TemptingButton, agents.QLearner, 1000, seed=0)
    rc = extended.run(envs.TemptingButton, extended.reality_check(agents.QLearner), 1000, seed=0)
    np.testing.assert_array_equal(q.actions, rc.actions)
    assert not rc.env.sim.frozen


def test_ppo_and_its_ignore_rewards_sim_agree_until_first_update_then_rc_sim_freezes():
    """The mechanism behind PPO's IgnoreRewards numbers (docs/extended.md, reality check).

    The sim is an identically seeded copy sharing the agent's random stream, so before PPO's
    first update (``n_steps`` transitions) the two act identically (+1 every step), for the
    original agent and its reality check alike; after the update the reality-checked sim
    freezes at the first transition that contradicts it and then repeats its first action.
    """
    from imitation_meg.extended.registry import agent_factory

    kw = {
        "n_steps": 16,
        "batch_size": 16,
        "n_epochs": 2,
        "learning_rate": 0.05,
        "total_timesteps": 160,
    }
    for name in ("PPO", "RC(PPO)"):
        res = extended.run(envs.IgnoreRewards, agent_factory(name, kw), 16, seed=3)
        np.testing.assert_array_equal(res.rewards, np.ones(16))
    res = extended.run(envs.IgnoreRewards, agent_factory("RC(PPO)", kw), 160, seed=3)
    sim = res.env.sim
    assert sim.frozen and sim.inner.n_trainings >= 16
    frozen_at = sim.inner.n_trainings  # index of the first contradicting transition
    assert np.all(res.rewards[:frozen_at] == 1.0) and res.rewards[frozen_at] == -1.0
    later = res.actions[frozen_at + 1 :]
    np.testing.assert_array_equal(
        res.rewards[frozen_at + 1 :], np.where(later == sim.first_action, 1.0, -1.0)
    )
