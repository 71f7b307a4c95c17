"""MCE-IRL integration: reward nets on tabular MDPs, scores of a trained MCEIRL."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import seals  # noqa: F401 (registers the seals environment ids)
import torch as th

pytest.importorskip("imitation")

from imitation.algorithms.mce_irl import MCEIRL, mce_occupancy_measures, mce_partition_fh
from imitation.rewards.reward_nets import BasicRewardNet

import imitation_meg as im
from imitation_meg.adapters.mce_irl import linear_features, reward_net_sa, score_mce_irl


@pytest.fixture(scope="module")
def env():
    return gym.make("seals/CliffWorld7x4-v0").unwrapped


def test_reward_net_sa_matches_per_transition_loop(env):
    th.manual_seed(0)
    net = BasicRewardNet(env.observation_space, env.action_space, hid_sizes=[8])
    mdp = im.TabularMDP.from_env(env)
    r = reward_net_sa(net, mdp)
    T = env.transition_matrix
    obs = env.observation_matrix
    s, a = 5, 2
    expected = 0.0
    for s2 in np.flatnonzero(T[s, a]):
        st, ac, ns, dn = net.preprocess(obs[[s]], np.array([a]), obs[[s2]], np.zeros(1, bool))
        expected += T[s, a, s2] * float(net(st, ac, ns, dn))
    assert float(r[s, a]) == pytest.approx(expected, rel=1e-6)
    assert r.requires_grad


def test_linear_features_reproduce_the_net(env):
    net = BasicRewardNet(env.observation_space, env.action_space, hid_sizes=[])
    mdp = im.TabularMDP.from_env(env)
    phi = linear_features(net, mdp)
    lin = next(m for m in net.modules() if isinstance(m, th.nn.Linear))
    theta = th.cat([lin.weight[0], lin.bias]).detach().double()
    th.testing.assert_close(phi @ theta, reward_net_sa(net, mdp).detach(), rtol=1e-5, atol=1e-6)
    assert (
        linear_features(BasicRewardNet(env.observation_space, env.action_space, hid_sizes=[4]), mdp)
        is None
    )


def test_score_trained_mce_irl(env):
    th.manual_seed(0)
    _, _, expert_pi = mce_partition_fh(env)
    om, _ = mce_occupancy_measures(env, pi=expert_pi)
    net = BasicRewardNet(
        env.observation_space,
        env.action_space,
        hid_sizes=[],
        use_action=False,
        use_done=False,
        use_next_state=False,
    )
    mce = MCEIRL(om.sum(0), env, net, rng=np.random.default_rng(0), log_interval=None)
    mce.train(max_iter=50)
    score = score_mce_irl(mce, expert_policy=expert_pi)
    assert score.exact
    # Rarely visited states make the Hessian badly conditioned here: the solve must still finish.
    assert score.unknown.converged and score.all_state_utilities.converged
    # The class optimum is at least MCE-IRL's own fit and the known-utility score of its reward.
    assert score.unknown.meg >= score.mce_irl_fit - 1e-9
    assert score.unknown.meg >= score.known.meg - 1e-9
    assert score.gap == pytest.approx(score.unknown.meg - score.mce_irl_fit)
    # One-hot observations: the linear class is every state utility.
    assert score.unknown.meg == pytest.approx(score.all_state_utilities.meg, rel=1e-6)
    # The expert is soft-optimal for the true reward: its log-likelihood under it is the optimum.
    true = im.meg(expert_pi, im.TabularMDP.from_env(env))
    assert score.all_state_utilities.meg >= true.meg - 1e-9
    d = score.to_dict()
    assert set(d) >= {"known", "unknown", "gap"}
    with pytest.raises(ValueError, match="expert_policy"):
        score_mce_irl(mce)
    with pytest.raises(TypeError, match="MCEIRL"):
        score_mce_irl(object(), expert_policy=expert_pi)
