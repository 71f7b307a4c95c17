"""imitation_meg.adapters.policy_table on PPO / A2C / DQN trained in the tests."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.adapters.sb3 import (
    ObservationAliasingWarning,
    UnusedStatisticsWarning,
    read_model_info,
    state_observations,
)

from .conftest import CLIFF, LAKE


def _one_state_probs(model, obs) -> np.ndarray:
    """The model's own action distribution for a single observation."""
    obs_t, _ = model.policy.obs_to_tensor(np.asarray(obs))
    with th.no_grad():
        return model.policy.get_distribution(obs_t).distribution.probs[0].double().numpy()


def _cliff_obs(s: int) -> np.ndarray:
    """What seals' CliffWorld emits in state s, read from the environment itself."""
    import seals  # noqa: F401 (registers the seals environment ids)

    return gym.make(CLIFF).unwrapped.obs_from_state(s)


def test_import_is_light():
    code = (
        "import sys, imitation_meg, imitation_meg.adapters, imitation_meg.core.trajectories, "
        "imitation_meg.adapters.sb3, imitation_meg.adapters.imitation, imitation_meg.cli, "
        "imitation_meg.adapters.zoo, imitation_meg.adapters.contrib, imitation_meg.scoring\n"
        "bad = [m for m in ('stable_baselines3', 'imitation', 'sb3_contrib', 'yaml', 'matplotlib', 'numba')"
        " if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("fixture", ["ppo_cliff", "ppo_lake", "a2c_lake"])
def test_actor_critic_table_matches_distribution_state_by_state(fixture, request):
    model = request.getfixturevalue(fixture)
    env_id = CLIFF if "cliff" in fixture else LAKE
    mdp = im.TabularMDP.from_env(env_id)
    pi = policy_table(model, mdp)
    assert pi.shape == (mdp.n_states, mdp.n_actions) and pi.dtype == th.float64
    for s in range(mdp.n_states):
        obs = _cliff_obs(s) if env_id == CLIFF else np.int64(s)
        np.testing.assert_allclose(pi[s].numpy(), _one_state_probs(model, obs), rtol=0, atol=1e-6)
    # The same through the policy object, the env id and the saved file.
    th.testing.assert_close(policy_table(model.policy, mdp), pi)
    th.testing.assert_close(policy_table(model, env_id), pi)
    assert im.meg(pi, mdp).meg >= 0


@pytest.mark.parametrize("fixture", ["dqn_cliff", "dqn_lake"])
@pytest.mark.parametrize("epsilon", [0.0, 0.3])
def test_dqn_epsilon_greedy_matches_q_values_state_by_state(fixture, epsilon, request):
    model = request.getfixturevalue(fixture)
    env_id = CLIFF if "cliff" in fixture else LAKE
    mdp = im.TabularMDP.from_env(env_id)
    pi = policy_table(model, mdp, epsilon=epsilon)
    A = mdp.n_actions
    for s in range(mdp.n_states):
        obs = _cliff_obs(s) if env_id == CLIFF else np.int64(s)
        obs_t, _ = model.policy.obs_to_tensor(np.asarray(obs))
        with th.no_grad():
            q = model.q_net(obs_t)[0].double().numpy()
        best = np.flatnonzero(q == q.max())
        expected = np.full(A, epsilon / A)
        expected[best] += (1 - epsilon) / best.size
        np.testing.assert_allclose(pi[s].numpy(), expected, atol=1e-12)
        # The greedy action is the one the model itself predicts.
        if best.size == 1:
            assert model.predict(obs, deterministic=True)[0] == best[0]


def test_dqn_ties_are_split_evenly(dqn_lake):
    import copy

    model = copy.deepcopy(dqn_lake)
    last = model.q_net.q_net[-1]
    with th.no_grad():
        last.weight.zero_()
        last.bias.copy_(th.tensor([1.0, 3.0, 3.0, 0.0]))
    pi = policy_table(model, LAKE, epsilon=0.2)
    np.testing.assert_allclose(pi.numpy(), np.tile([0.05, 0.45, 0.45, 0.05], (16, 1)), atol=1e-12)


def test_saved_zip_reads_the_algorithm_from_the_zip(ppo_lake, dqn_lake, a2c_lake, tmp_path):
    for name, model in (("ppo", ppo_lake), ("dqn", dqn_lake), ("a2c", a2c_lake)):
        model.save(tmp_path / f"{name}.zip")
        assert read_model_info(tmp_path / f"{name}.zip").algo == name
    th.testing.assert_close(
        policy_table(str(tmp_path / "ppo.zip"), LAKE), policy_table(ppo_lake, LAKE)
    )
    th.testing.assert_close(
        policy_table(str(tmp_path / "ppo.zip"), LAKE, algo="PPO"), policy_table(ppo_lake, LAKE)
    )
    th.testing.assert_close(
        policy_table(tmp_path / "dqn.zip", LAKE, epsilon=0.1),
        policy_table(dqn_lake, LAKE, epsilon=0.1),
    )
    th.testing.assert_close(policy_table(tmp_path / "a2c.zip", LAKE), policy_table(a2c_lake, LAKE))
    info = read_model_info(tmp_path / "ppo.zip")
    assert info.num_timesteps == ppo_lake.num_timesteps and info.policy_class.__name__ == (
        "ActorCriticPolicy"
    )
    assert {"ppo", "a2c"} <= set(info.candidates)  # A2C's stored arguments are a subset of PPO's


def test_saved_zip_contradicting_algo_is_an_error(ppo_lake, dqn_lake, a2c_lake, tmp_path):
    ppo_lake.save(tmp_path / "ppo.zip")
    dqn_lake.save(tmp_path / "dqn.zip")
    a2c_lake.save(tmp_path / "a2c.zip")
    with pytest.raises(ValueError, match=r"saved by DQN \(policy DQNPolicy\), not PPO"):
        policy_table(tmp_path / "dqn.zip", LAKE, algo="ppo", epsilon=0.1)
    with pytest.raises(ValueError, match=r"saved by PPO .*not A2C: drop algo="):
        policy_table(tmp_path / "ppo.zip", LAKE, algo="a2c")
    with pytest.raises(ValueError, match=r"saved by A2C .*not PPO"):
        policy_table(tmp_path / "a2c.zip", LAKE, algo="ppo")
    with pytest.raises(ValueError, match="unknown algorithm 'sac2'"):
        policy_table(str(tmp_path / "ppo.zip"), LAKE, algo="sac2")
    with pytest.raises(FileNotFoundError, match="no SB3 model file"):
        policy_table(str(tmp_path / "missing.zip"), LAKE, algo="ppo")
    with pytest.raises(FileNotFoundError, match="no SB3 model file"):
        policy_table(str(tmp_path / "missing.zip"), LAKE)
    with pytest.raises(ValueError, match=r"algo= only applies to a \.zip path"):
        policy_table(ppo_lake, LAKE, algo="ppo")


def test_files_that_hold_no_model(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as z:
        z.writestr("readme.txt", "not a model")
    with pytest.raises(ValueError, match=r"zip file but holds no SB3 model .*readme\.txt"):
        policy_table(tmp_path / "empty.zip", LAKE)
    (tmp_path / "text.zip").write_text("hello")
    with pytest.raises(ValueError, match="is not a zip file"):
        policy_table(tmp_path / "text.zip", LAKE)
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as z:
        z.writestr("data", "{not json")
    with pytest.raises(ValueError, match="corrupt SB3 'data' entry"):
        policy_table(tmp_path / "bad.zip", LAKE)


def test_dqn_needs_epsilon(dqn_lake):
    with pytest.raises(ValueError, match=r"DQN has no action distribution.*pass epsilon="):
        policy_table(dqn_lake, LAKE)
    with pytest.raises(ValueError, match=r"epsilon must lie in \[0, 1\]"):
        policy_table(dqn_lake, LAKE, epsilon=1.5)
    with pytest.raises(TypeError, match="epsilon must be a float"):
        policy_table(dqn_lake, LAKE, epsilon="0.1")


def test_epsilon_is_refused_for_actor_critic(ppo_lake):
    with pytest.raises(ValueError, match="epsilon= applies only to argmax policies"):
        policy_table(ppo_lake, LAKE, epsilon=0.1)


def test_continuous_actions_are_refused():
    import stable_baselines3 as sb3

    model = sb3.PPO("MlpPolicy", "Pendulum-v1", device="cpu", seed=0)
    with pytest.raises(TypeError, match=r"Box action space.*continuous actions"):
        policy_table(model, im.TabularMDP.from_env(LAKE))


def test_mismatched_observation_and_action_spaces(ppo_lake, ppo_cliff):
    cliff = im.TabularMDP.from_env(CLIFF)
    with pytest.raises(ValueError, match=r"observes Discrete\(16\) but .* has 28 states"):
        policy_table(ppo_lake, cliff)
    with pytest.raises(ValueError, match="has no observation_matrix"):
        policy_table(ppo_cliff, LAKE)
    with pytest.raises(ValueError, match=r"shape \(28,\).*observations of shape \(2,\)"):
        policy_table(ppo_cliff, "seals/CliffWorld7x4XY-v0")
    taxi = im.envs.registered_id("Taxi")  # Taxi-v3 in gymnasium 0.29, Taxi-v4 in 1.x
    with pytest.raises(ValueError, match=f"chooses among 4 actions but {taxi} has 6"):
        policy_table(ppo_lake, taxi)


def test_observation_aliasing_warns(ppo_cliff):
    mdp = im.TabularMDP.from_env(CLIFF)
    obs = mdp.observation_matrix.clone()
    obs[1] = obs[0]
    with pytest.warns(ObservationAliasingWarning, match=r"state groups \[\[0, 1\]\]"):
        pi = policy_table(ppo_cliff, mdp, observations=obs)
    th.testing.assert_close(pi[0], pi[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy_table(ppo_cliff, mdp)  # distinct one-hot observations: no warning


def test_vec_normalize_statistics(tmp_path):
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(make_vec_env(CLIFF, n_envs=2, seed=0), norm_reward=False)
    model = sb3.PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    venv.training = False
    mdp = im.TabularMDP.from_env(CLIFF)
    pi = policy_table(model, mdp)  # statistics taken from the model's own VecNormalize
    for s in (0, 5, 27):
        obs = venv.normalize_obs(_cliff_obs(s)[None].astype(np.float32))[0]
        np.testing.assert_allclose(pi[s].numpy(), _one_state_probs(model, obs), atol=1e-6)
    venv.save(tmp_path / "vn.pkl")
    th.testing.assert_close(policy_table(model.policy, mdp, vec_normalize=tmp_path / "vn.pkl"), pi)
    # Without normalisation the table differs: the statistics matter.
    assert not th.allclose(policy_table(model.policy, mdp), pi)

    # Statistics saved beside a saved model: unused is a warning, "auto" takes them.
    model.save(tmp_path / "run" / "m.zip")
    (tmp_path / "run" / "m").mkdir()
    venv.save(tmp_path / "run" / "m" / "vecnormalize.pkl")
    with pytest.warns(UnusedStatisticsWarning, match=r"m/vecnormalize\.pkl.*not used"):
        raw = policy_table(tmp_path / "run" / "m.zip", mdp)
    th.testing.assert_close(raw, policy_table(model.policy, mdp))
    th.testing.assert_close(policy_table(tmp_path / "run" / "m.zip", mdp, vec_normalize="auto"), pi)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy_table(tmp_path / "run" / "m.zip", mdp, vec_normalize=False)
    # CheckpointCallback's layout: rl_model_<n>_steps.zip beside rl_model_vecnormalize_<n>_steps.pkl
    model.save(tmp_path / "ckpt" / "rl_model_128_steps.zip")
    venv.save(tmp_path / "ckpt" / "rl_model_vecnormalize_128_steps.pkl")
    with pytest.warns(UnusedStatisticsWarning, match="rl_model_vecnormalize_128_steps.pkl"):
        policy_table(tmp_path / "ckpt" / "rl_model_128_steps.zip", mdp)
    th.testing.assert_close(
        policy_table(tmp_path / "ckpt" / "rl_model_128_steps.zip", mdp, vec_normalize="auto"), pi
    )
    with pytest.raises(ValueError, match="'auto' found no VecNormalize statistics"):
        policy_table(tmp_path / "vn.pkl", mdp, vec_normalize="auto")
    with pytest.raises(ValueError, match="'auto' looks for statistics beside a saved model"):
        policy_table(model, mdp, vec_normalize="auto")

    fresh = VecNormalize(make_vec_env(CLIFF, n_envs=1), norm_reward=False)
    with pytest.raises(ValueError, match="VecNormalize has no observation statistics"):
        policy_table(model.policy, mdp, vec_normalize=fresh)
    with pytest.raises(FileNotFoundError, match="no VecNormalize statistics"):
        policy_table(model.policy, mdp, vec_normalize=tmp_path / "nope.pkl")
    with open(tmp_path / "junk.pkl", "wb") as f:
        pickle.dump({"a": 1}, f)
    with pytest.raises(TypeError, match="vec_normalize must be a VecNormalize"):
        policy_table(model.policy, mdp, vec_normalize=tmp_path / "junk.pkl")


def test_callables_and_arrays():
    mdp = im.envs.cliff_world(width=4, height=2, horizon=3)
    seen = []

    def fn(obs):
        seen.append(obs.shape)
        logits = th.as_tensor(obs[:, :4], dtype=th.float64)
        return th.softmax(logits, -1)

    pi = policy_table(fn, mdp)
    assert seen == [(8, 8)]  # one batched call on the one-hot observation matrix
    th.testing.assert_close(pi[0], th.softmax(th.tensor([1.0, 0, 0, 0], dtype=th.float64), -1))
    th.testing.assert_close(policy_table(pi.numpy(), mdp), pi)
    with pytest.raises(ValueError, match=r"probabilities \(8, 4\), got \(8, 3\)"):
        policy_table(lambda o: np.full((len(o), 3), 1 / 3), mdp)
    with pytest.raises(ValueError, match="sum to"):
        policy_table(lambda o: np.full((len(o), 4), 0.3), mdp)
    with pytest.raises(TypeError, match="cannot read a policy from int"):
        policy_table(3, mdp)
    with pytest.raises(ValueError, match="epsilon= applies only to argmax policies"):
        policy_table(fn, mdp, epsilon=0.1)


def test_state_observations_mapping():
    lake = im.TabularMDP.from_env(LAKE)
    np.testing.assert_array_equal(state_observations(lake, gym.spaces.Discrete(16)), np.arange(16))
    cliff = im.TabularMDP.from_env(CLIFF)
    obs = state_observations(cliff, gym.spaces.Box(-np.inf, np.inf, (28,), np.float32))
    assert obs.dtype == np.float32 and obs.shape == (28, 28)
    np.testing.assert_array_equal(obs, np.eye(28, dtype=np.float32))
    with pytest.raises(TypeError, match="MultiDiscrete space"):
        state_observations(lake, gym.spaces.MultiDiscrete([4, 4]))
    with pytest.raises(ValueError, match="start=1"):
        state_observations(lake, gym.spaces.Discrete(16, start=1))


def test_reading_leaves_the_policys_mode_and_a_loaded_copy_evaluates(ppo_lake, tmp_path):
    """Scoring reads a policy in evaluation mode and leaves the caller's mode as it was; a model
    loaded for scoring is put into evaluation mode once."""
    from imitation_meg.adapters.saved_models import load_model
    from imitation_meg.adapters.sb3 import SB3ActionProbs

    reader = SB3ActionProbs(ppo_lake.policy)
    obs = np.array([0, 5, 9])  # FrozenLake states
    for mode in (True, False):
        ppo_lake.policy.set_training_mode(mode)
        p = reader(obs)
        assert ppo_lake.policy.training is mode
        assert all(m.training is mode for m in ppo_lake.policy.modules())
        assert p.shape == (3, 4) and th.allclose(p.sum(1), th.ones(3, dtype=th.float64))
    ppo_lake.save(tmp_path / "ppo.zip")
    assert load_model(tmp_path / "ppo.zip").policy.training is False
    assert load_model(tmp_path / "ppo.zip", for_training=True).policy.training is True
