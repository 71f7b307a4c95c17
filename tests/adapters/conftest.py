"""Small SB3 models trained once per session (a few thousand steps each, single-threaded CPU)."""

from __future__ import annotations

import warnings

import pytest
import torch as th

th.set_num_threads(1)

CLIFF = "seals/CliffWorld7x4-v0"
LAKE = "FrozenLake-v1"


def _train(algo: str, env_id: str, steps: int):
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3

    kw = {"seed": 0, "device": "cpu", "policy_kwargs": {"net_arch": [32]}}
    if algo == "ppo":
        model = sb3.PPO("MlpPolicy", env_id, n_steps=128, batch_size=64, n_epochs=2, **kw)
    elif algo == "a2c":
        model = sb3.A2C("MlpPolicy", env_id, n_steps=8, **kw)
    else:
        model = sb3.DQN(
            "MlpPolicy",
            env_id,
            learning_starts=200,
            buffer_size=2_000,
            train_freq=4,
            target_update_interval=200,
            **kw,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(steps)
    return model


@pytest.fixture(scope="session")
def ppo_cliff():
    return _train("ppo", CLIFF, 2_048)


@pytest.fixture(scope="session")
def ppo_lake():
    return _train("ppo", LAKE, 2_048)


@pytest.fixture(scope="session")
def dqn_cliff():
    return _train("dqn", CLIFF, 2_000)


@pytest.fixture(scope="session")
def dqn_lake():
    return _train("dqn", LAKE, 2_000)


@pytest.fixture(scope="session")
def a2c_lake():
    return _train("a2c", LAKE, 400)
