"""RL Baselines3 Zoo run folders: a real ``rl_zoo3.train`` run (when rl-zoo3 is installed) with
VecNormalize and the MEG callback, and hand-built folders in RL Zoo's layout."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.adapters.sb3 import UnusedStatisticsWarning
from imitation_meg.adapters.zoo import ZooWrapperWarning, is_zoo_run, read_zoo_run
from tests.zoo_train import train_zoo

from .conftest import CLIFF

ENV_NAME = "seals-CliffWorld7x4-v0"  # RL Zoo's folder name for the id (slash -> dash)

HYPERPARAMS = """\
seals/CliffWorld7x4-v0:
  n_timesteps: 512
  policy: MlpPolicy
  n_envs: 2
  normalize: "dict(norm_obs=True, norm_reward=False)"
  n_steps: 64
  batch_size: 64
  n_epochs: 2
  policy_kwargs: "dict(net_arch=[16])"
  callback:
    - imitation_meg.callbacks.MEGCallback:
        env: seals/CliffWorld7x4-v0
        eval_freq: 64
        history: {history}
"""


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    """A real RL Zoo run: ``python -m rl_zoo3.train`` with normalize and the MEG callback."""
    pytest.importorskip("rl_zoo3")
    d = tmp_path_factory.mktemp("zoo")
    (d / "hyper.yml").write_text(HYPERPARAMS.format(history=d / "meg.jsonl"))
    train_zoo(
        "ppo", CLIFF, d, "-conf", str(d / "hyper.yml"), "--gym-packages", "seals", timeout=300
    )
    return d


@pytest.mark.expensive  # about 25 s: rl_zoo3.train in a subprocess
def test_a_real_zoo_run_is_scored_as_a_folder(zoo_run):
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    folder = zoo_run / "logs" / "ppo" / f"{ENV_NAME}_1"
    run = read_zoo_run(folder)
    assert is_zoo_run(folder) and run.env_id == CLIFF and run.algo == "ppo"
    assert run.model == folder / f"{ENV_NAME}.zip"
    assert run.vec_normalize == folder / ENV_NAME / "vecnormalize.pkl"

    mdp = im.TabularMDP.from_env(CLIFF)
    by_folder = policy_table(folder)  # model, statistics and environment from the folder
    # By hand: load the model and its statistics with SB3, normalise, query the policy.
    model = PPO.load(run.model, device="cpu")
    import seals  # noqa: F401 (registers the seals environment ids)

    stats = VecNormalize.load(str(run.vec_normalize), DummyVecEnv([lambda: gym.make(CLIFF)]))
    obs = stats.normalize_obs(np.asarray(mdp.observation_matrix, dtype=np.float32))
    with th.no_grad():
        dist = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0])
    th.testing.assert_close(by_folder, dist.distribution.probs.double(), atol=1e-6, rtol=0)
    assert im.meg(by_folder, mdp).meg == pytest.approx(
        im.meg(dist.distribution.probs.double(), mdp).meg, abs=1e-6
    )
    # The zip alone, statistics left out: a warning, and another number.
    with pytest.warns(UnusedStatisticsWarning, match="vecnormalize.pkl"):
        raw = policy_table(run.model, CLIFF)
    assert not th.allclose(raw, by_folder)
    th.testing.assert_close(policy_table(run.model, CLIFF, vec_normalize="auto"), by_folder)

    # The MEG callback ran inside RL Zoo (its hyperparameter-file import path).
    records = [json.loads(x) for x in (zoo_run / "meg.jsonl").read_text().splitlines()]
    assert [r["timesteps"] for r in records] == [128, 256, 384, 512]
    assert all(0 <= r["meg"] <= r["upper_bound"] for r in records)


def test_zoo_builds_the_callback_from_its_hyperparameter_file(tmp_path):
    """RL Zoo's own parser of the ``callback:`` entry builds a working MEGCallback."""
    pytest.importorskip("rl_zoo3")
    import yaml
    from rl_zoo3.utils import get_callback_list

    from imitation_meg.callbacks import MEGCallback

    hyperparams = yaml.safe_load(HYPERPARAMS.format(history=tmp_path / "h.jsonl"))[CLIFF]
    (callback,) = get_callback_list(hyperparams)
    assert isinstance(callback, MEGCallback) and callback.eval_freq == 64
    assert callback.mdp is not None and callback.mdp.n_states == 28


def _save_model_with_stats(folder, name):
    """A PPO trained on normalised observations, saved in RL Zoo's layout under ``folder``."""
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(make_vec_env(CLIFF, n_envs=2, seed=0), norm_reward=False)
    model = sb3.PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.learn(128)
        (folder / name).mkdir(parents=True)
        model.save(folder / f"{name}.zip")
        model.save(folder / "rl_model_64_steps.zip")
        venv.save(str(folder / name / "vecnormalize.pkl"))
    return model


def test_hand_built_zoo_folder(tmp_path):
    folder = tmp_path / "logs" / "ppo" / f"{ENV_NAME}_3"
    model = _save_model_with_stats(folder, ENV_NAME)
    params = folder / ENV_NAME
    # RL Zoo writes OrderedDicts (python tags) and normalize as a string.
    (params / "config.yml").write_text(
        "!!python/object/apply:collections.OrderedDict\n"
        "- - - normalize\n    - dict(norm_obs=True, norm_reward=False)\n"
        "  - - n_envs\n    - 2\n  - - policy_kwargs\n    - !!python/name:builtins.dict ''\n"
    )
    (params / "args.yml").write_text(
        "!!python/object/apply:collections.OrderedDict\n"
        f"- - - algo\n    - ppo\n  - - env\n    - {CLIFF}\n  - - env_kwargs\n    - null\n"
    )
    run = read_zoo_run(folder)
    assert run.env_id == CLIFF and run.config["n_envs"] == 2
    assert run.config["policy_kwargs"] == "<python object: name:builtins.dict>"
    mdp = im.TabularMDP.from_env(CLIFF)
    expected = policy_table(model, mdp)  # the live model carries its VecNormalize
    th.testing.assert_close(policy_table(folder, mdp), expected)
    th.testing.assert_close(policy_table(str(folder)), expected)
    # A checkpoint of the run: its statistics are the run's (none saved with the checkpoint).
    assert read_zoo_run(folder, model=64).model.name == "rl_model_64_steps.zip"
    with pytest.raises(FileNotFoundError, match=r"has no best_model\.zip .*rl_model_64_steps"):
        read_zoo_run(folder, model="best")

    # Statistics missing although the run normalised: an error, never a silent raw score.
    (params / "vecnormalize.pkl").rename(tmp_path / "stats.pkl")
    with pytest.raises(
        ValueError, match=r"normalised observations .*/vecnormalize\.pkl' is missing"
    ):
        policy_table(folder, mdp)
    (tmp_path / "stats.pkl").rename(params / "vecnormalize.pkl")

    # A wrapper in the config: a warning that the observations may differ.
    text = (params / "config.yml").read_text()
    (params / "config.yml").write_text(text + "  - - env_wrapper\n    - my.Wrapper\n")
    with pytest.warns(ZooWrapperWarning, match="env_wrapper='my.Wrapper'"):
        read_zoo_run(folder)

    (params / "config.yml").write_text("normalize: [unclosed\n")
    with pytest.raises(ValueError, match=r"config\.yml' is not valid YAML"):
        read_zoo_run(folder)
    with pytest.raises(ValueError, match="is not an RL Zoo run folder"):
        read_zoo_run(tmp_path)
    with pytest.raises(ValueError, match="neither an RL Zoo run folder"):
        policy_table(tmp_path, mdp)
