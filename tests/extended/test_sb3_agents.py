"""SB3 agents: semi-determinism, buffers + train(), replayed-action log-probabilities."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch as th

from imitation_meg import extended
from imitation_meg.extended import agents, envs
from imitation_meg.extended.core import make_agent

sb3_agents = pytest.importorskip("imitation_meg.extended.sb3_agents")

SMALL = {
    "PPO": functools.partial(sb3_agents.PPO, n_steps=16, batch_size=8, n_epochs=2),
    "A2C": functools.partial(sb3_agents.A2C, n_steps=5),
    "DQN": functools.partial(
        sb3_agents.DQN,
        learning_starts=10,
        train_freq=2,
        target_update_interval=8,
        total_timesteps=200,
    ),
}
ALL_AGENTS = {
    "Constant": functools.partial(agents.Constant, action=1),
    "Random": agents.Random,
    "ObservationMap": functools.partial(agents.ObservationMap, actions=(1, 0, 1)),
    "QLearner": agents.QLearner,
    "RC(QLearner)": extended.reality_check(agents.QLearner),
    **SMALL,
    "RC(PPO)": extended.reality_check(SMALL["PPO"]),
    "PPO(upstream_rollouts)": functools.partial(SMALL["PPO"], upstream_rollouts=True),
}


@pytest.mark.parametrize("name", list(ALL_AGENTS))
def test_identically_trained_instances_act_identically(name, rng):
    f = ALL_AGENTS[name]
    a = make_agent(f, n_actions=2, n_obs=3, seed=11)
    b = make_agent(f, n_actions=2, n_obs=3, seed=11)
    th.manual_seed(123)  # global RNG state must not matter
    np.random.seed(5)
    for t in range(60):
        o = int(rng.integers(3))
        acts_a = [a.act(x) for x in range(3)]
        th.rand(3)  # disturb global streams between the two instances
        np.random.rand()
        acts_b = [b.act(x) for x in range(3)]
        assert acts_a == acts_b, (name, t)
        act = acts_a[o] if rng.random() < 0.8 else int(rng.integers(2))
        r, o2 = float(rng.integers(-1, 2)), int(rng.integers(3))
        a.train(o, act, r, o2)
        b.train(o, act, r, o2)


def test_act_is_pure():
    agent = make_agent(SMALL["PPO"], n_actions=2, n_obs=2, seed=0)
    first = [agent.act(0) for _ in range(5)]
    assert len(set(first)) == 1
    before = [p.clone() for p in agent.model.policy.parameters()]
    agent.act(1)
    assert all(th.equal(p, q) for p, q in zip(before, agent.model.policy.parameters(), strict=True))


@pytest.mark.parametrize("algo", ["PPO", "A2C"])
def test_buffer_holds_log_prob_of_replayed_action_and_train_runs(algo):
    agent = make_agent(SMALL[algo], n_actions=2, n_obs=2, seed=0)
    obs_t, _ = agent.model.policy.obs_to_tensor(np.asarray(1))
    with th.no_grad():
        probs = agent.model.policy.get_distribution(obs_t).distribution.probs[0].numpy()
    replayed = 1 - agent.act(1)  # a transition whose action the policy did not pick
    agent.train(1, replayed, 1.0, 0)
    stored = agent.model.rollout_buffer.log_probs[0, 0]
    assert stored == pytest.approx(np.log(probs[replayed]), abs=1e-5)
    params = [p.clone() for p in agent.model.policy.parameters()]
    n = agent.model.rollout_buffer.buffer_size
    for _ in range(n - 1):
        agent.train(0, 0, 1.0, 1)
    assert agent.model._n_updates > 0
    assert not all(
        th.equal(p, q) for p, q in zip(params, agent.model.policy.parameters(), strict=True)
    )
    assert agent.model.rollout_buffer.pos == 0  # buffer reset after train()


def test_ppo_survives_a_replayed_action_its_policy_gives_almost_no_probability():
    # A sim trained on another agent's actions (IgnoreRewards on CartPole, seeds 4 and 5 of the
    # paper-sized run) stores log-probabilities near -400; when an update then moves such a
    # log-probability by more than 88, PPO's ratio exp(new - old) overflows float32 and the
    # policy's logits turn NaN. Here the move is made by hand between storing and training.
    agent = make_agent(
        functools.partial(sb3_agents.PPO, n_steps=64, batch_size=64, n_epochs=2),
        n_actions=2,
        n_obs=1,
        seed=0,
    )
    bias = agent.model.policy.action_net.bias
    with th.no_grad():
        bias[:] = th.tensor([0.0, -400.0])
    for t in range(63):
        agent.train(0, 1, float(t % 2), 0)
    stored = agent.model.rollout_buffer.log_probs[:63].copy()
    with th.no_grad():
        bias[:] = th.tensor([0.0, -200.0])
    agent.train(0, 1, 1.0, 0)  # fills the buffer: PPO trains on the stored log-probabilities
    assert agent.model._n_updates > 0
    for p in agent.model.policy.parameters():
        assert th.isfinite(p).all()
    assert agent.act(0) in (0, 1)
    assert stored.min() == sb3_agents.LOG_PROB_FLOOR
    # above the floor, the stored value is the replayed action's log-probability (unchanged)
    fresh = make_agent(SMALL["PPO"], n_actions=2, n_obs=1, seed=0)
    fresh.train(0, 1, 0.0, 0)
    assert fresh.model.rollout_buffer.log_probs[0, 0] > sb3_agents.LOG_PROB_FLOOR


def test_upstream_rollouts_store_a_sampled_actions_log_prob_and_restart_at_the_first_obs():
    # The paper's library: each rollout starts from the run's first observation, and the stored
    # log-prob belongs to an action sampled afresh, not to the replayed one.
    agent = make_agent(
        functools.partial(SMALL["PPO"], upstream_rollouts=True), n_actions=2, n_obs=3, seed=0
    )
    n = agent.model.rollout_buffer.buffer_size
    policy = agent.model.policy
    mismatched = 0
    for t in range(n + 3):
        o = 2 if t == 0 else t % 2
        obs_t, _ = policy.obs_to_tensor(np.asarray(o))
        with th.no_grad():
            logp = policy.get_distribution(obs_t).distribution.probs[0].log().numpy()
        replayed = t % 2
        pos = agent.model.rollout_buffer.pos
        agent.train(o, replayed, 1.0, (t + 1) % 2)
        buf = agent.model.rollout_buffer
        if t < n - 1:  # the first rollout (the buffer trains and resets when it fills)
            stored = buf.log_probs[pos, 0]
            assert stored == pytest.approx(logp[0], abs=1e-5) or stored == pytest.approx(
                logp[1], abs=1e-5
            )
            mismatched += abs(stored - logp[replayed]) > 1e-5
        if t == n:  # first transition of the second rollout: observation 2, episode start
            assert buf.observations[0, 0, 0] == 2 and buf.episode_starts[0, 0] == 1.0
    assert mismatched > 0  # some stored log-probs are not the replayed action's
    correct = make_agent(SMALL["PPO"], n_actions=2, n_obs=3, seed=0)
    correct.train(2, 0, 1.0, 1)
    correct.train(1, 1, 1.0, 0)
    assert correct.model.rollout_buffer.observations[1, 0, 0] == 1
    with pytest.raises(TypeError, match="upstream_rollouts"):
        sb3_agents.PPO(upstream_rollouts=1)


def test_dqn_trains_through_replay_buffer():
    agent = make_agent(SMALL["DQN"], n_actions=2, n_obs=2, seed=0)
    params = [p.clone() for p in agent.model.q_net.parameters()]
    for t in range(40):
        agent.train(t % 2, 0, 1.0, (t + 1) % 2)
    assert agent.model.replay_buffer.pos == 40
    assert agent.model._n_updates > 0
    assert not all(
        th.equal(p, q) for p, q in zip(params, agent.model.q_net.parameters(), strict=True)
    )


@pytest.mark.parametrize("algo", ["PPO", "A2C", "DQN"])
def test_sb3_runs_reproducible_and_semi_deterministic(algo):
    r1 = extended.run(envs.TemptingButton, SMALL[algo], 120, seed=3)
    r2 = extended.run(envs.TemptingButton, SMALL[algo], 120, seed=3)
    np.testing.assert_array_equal(r1.actions, r2.actions)
    res = extended.run(envs.PunishNondeterministicAgent, SMALL[algo], 80, seed=1)
    assert res.total_reward == 80.0


def test_learning_rate_passes_through_factory_and_reality_check():
    ppo = functools.partial(SMALL["PPO"], learning_rate=0.01)
    env = envs.IncentivizeLearningRate(extended.reality_check(ppo))
    assert env.sim.learning_rate == pytest.approx(0.005)
    assert env.sim.inner.model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(0.005)


def test_sb3_validation():
    with pytest.raises(ValueError, match="learning_rate must be a positive float"):
        sb3_agents.PPO(learning_rate=-1.0)
    with pytest.raises(ValueError, match="n_actions must be a positive int"):
        sb3_agents.DQN(n_actions=0)
    with pytest.raises(ValueError, match="total_timesteps"):
        sb3_agents.A2C(total_timesteps=0)
