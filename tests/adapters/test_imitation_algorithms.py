"""imitation's BC, DAgger, GAIL and AIRL on seals CliffWorld (tiny runs): their policies through
policy_table and their reward nets as utilities (the examples of docs/imitation.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.core.algorithm2 import reward_net_sa

from .conftest import CLIFF

pytest.importorskip("imitation")


@pytest.fixture(scope="module")
def setup():
    """The MDP, a vectorised env and demonstrations of a goal-directed expert: the optimal
    first-decision policy (ties split evenly), used in every step."""
    import gymnasium as gym
    import seals  # noqa: F401 (registers the seals environment ids)
    from imitation.data import rollout
    from imitation.data.wrappers import RolloutInfoWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv

    th.set_num_threads(1)
    mdp = im.TabularMDP.from_env(CLIFF)
    optimal = im.policies.optimal(mdp).numpy()
    if optimal.ndim == 3:  # (H, S, A): the expert acts as at the first decision, in every step
        optimal = optimal[0]
    venv = DummyVecEnv([lambda: RolloutInfoWrapper(gym.make(CLIFF))] * 2)
    venv.seed(0)
    rng = np.random.default_rng(0)

    def expert(obs, state, episode_start):
        s = np.asarray(obs).argmax(axis=-1)  # CliffWorld's observations are one-hot
        actions = np.array([rng.choice(4, p=optimal[i]) for i in s])
        return actions, state

    trajs = rollout.rollout(
        expert, venv, rollout.make_sample_until(min_episodes=30), rng=np.random.default_rng(0)
    )
    return mdp, venv, rollout.flatten_trajectories(trajs), trajs, optimal


def _bc(setup, epochs=30):
    from imitation.algorithms import bc

    _, venv, transitions, _, _ = setup
    trainer = bc.BC(
        observation_space=venv.observation_space,
        action_space=venv.action_space,
        demonstrations=transitions,
        rng=np.random.default_rng(0),
        batch_size=32,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(n_epochs=epochs, progress_bar=False)
    return trainer


def test_bc_policy_is_scored_through_its_distribution(setup):
    mdp, _, _, _, optimal = setup
    trainer = _bc(setup)
    pi = policy_table(trainer.policy, mdp)  # an SB3 ActorCriticPolicy
    obs_t, _ = trainer.policy.obs_to_tensor(np.asarray(mdp.observation_matrix, dtype=np.float32))
    with th.no_grad():
        probs = trainer.policy.get_distribution(obs_t).distribution.probs.double()
    th.testing.assert_close(pi, probs, atol=1e-6, rtol=0)
    # Cloning the optimal expert: the start state's most likely action is an optimal one, and the
    # clone is far more goal-directed than the uniform policy (MEG 0).
    start = int(mdp.initial_state_dist.argmax())
    assert optimal[start, int(pi[start].argmax())] > 0
    assert im.meg(pi, mdp).meg > 0.3 * im.meg(optimal, mdp).meg


def test_dagger_policy(setup, tmp_path):
    # DAgger saves its demonstrations with imitation.data.serialize (datasets / pyarrow), which
    # works on the pinned stack (pyarrow 21.0.0, see constraints.txt); without imitation, skip.
    dagger_module = pytest.importorskip("imitation.algorithms.dagger", exc_type=ImportError)
    SimpleDAggerTrainer = dagger_module.SimpleDAggerTrainer

    mdp, venv, _, _, _ = setup
    expert = _bc(setup, epochs=10)
    learner = _bc(setup, epochs=1)
    dagger = SimpleDAggerTrainer(
        venv=venv,
        scratch_dir=tmp_path,
        expert_policy=expert.policy,
        bc_trainer=learner,
        rng=np.random.default_rng(0),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dagger.train(200, rollout_round_min_episodes=2, rollout_round_min_timesteps=50)
    pi = policy_table(dagger.policy, mdp)
    assert dagger.policy is learner.policy  # DAgger trains its BC trainer's policy
    assert pi.shape == (mdp.n_states, mdp.n_actions)
    assert 0 < im.meg(pi, mdp).meg <= mdp.horizon * np.log(4)


@pytest.mark.parametrize("algo", ["gail", "airl"])
def test_adversarial_policy_and_reward_net(setup, algo):
    from imitation.algorithms.adversarial.airl import AIRL
    from imitation.algorithms.adversarial.gail import GAIL
    from imitation.rewards.reward_nets import BasicRewardNet, BasicShapedRewardNet
    from stable_baselines3 import PPO

    mdp, venv, transitions, _, optimal = setup
    gen = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    if algo == "gail":
        net = BasicRewardNet(venv.observation_space, venv.action_space)
        trainer = GAIL(
            demonstrations=transitions, demo_batch_size=64, venv=venv, gen_algo=gen, reward_net=net
        )
    else:
        net = BasicShapedRewardNet(venv.observation_space, venv.action_space)
        trainer = AIRL(
            demonstrations=transitions, demo_batch_size=64, venv=venv, gen_algo=gen, reward_net=net
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train(256)
    # The generator is an SB3 PPO: its policy table is read as any PPO's.
    pi = policy_table(trainer.gen_algo, mdp)
    th.testing.assert_close(pi, policy_table(trainer.policy, mdp))
    # The learned reward as a utility r(s, a): the expert's MEG with respect to it.
    reward = reward_net_sa(trainer.reward_test, mdp).detach()
    assert reward.shape == (mdp.n_states, mdp.n_actions)
    res = im.meg(optimal, mdp, reward)
    assert 0 <= res.meg <= mdp.horizon * np.log(4) + 1e-9
    # MEG is invariant to the reward's scale and offset (paper Proposition 3.1).
    assert im.meg(optimal, mdp, 3.0 * reward + 1.0).meg == pytest.approx(res.meg, rel=1e-6)
