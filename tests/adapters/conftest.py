"""Small SB3 / sb3-contrib models trained once per session (a few thousand steps, one CPU thread).

Every model is one row of ``MODELS`` (algorithm, environment, steps); a fixture of the same name
trains it on first use. sb3-contrib models skip when sb3-contrib is not installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch as th

th.set_num_threads(1)

CLIFF = "seals/CliffWorld7x4-v0"
LAKE = "FrozenLake-v1"

#: fixture name -> (algorithm, environment, training steps)
MODELS: dict[str, tuple[str, str, int]] = {
    "ppo_cliff": ("ppo", CLIFF, 2_048),
    "ppo_lake": ("ppo", LAKE, 2_048),
    "a2c_lake": ("a2c", LAKE, 400),
    "dqn_cliff": ("dqn", CLIFF, 2_000),
    "dqn_lake": ("dqn", LAKE, 2_000),
    "qrdqn_cliff": ("qrdqn", CLIFF, 500),
    "trpo_cliff": ("trpo", CLIFF, 512),
    "ars_cliff": ("ars", CLIFF, 1_000),
    "maskable_cliff": ("maskableppo", "masked-cliff", 512),
    "recurrent_cliff": ("recurrentppo", CLIFF, 256),
}


def cliff_mask(state: int) -> np.ndarray:
    """The test's action mask in seals CliffWorld7x4 state ``s``: action ``s % 4`` is forbidden."""
    mask = np.ones(4, dtype=bool)
    mask[state % 4] = False
    return mask


def masked_cliff_env() -> Any:
    """seals CliffWorld7x4 wrapped in sb3-contrib's ActionMasker with :func:`cliff_mask`."""
    import gymnasium as gym
    import seals  # noqa: F401 (registers the seals environment ids)
    from sb3_contrib.common.wrappers import ActionMasker

    return ActionMasker(gym.make(CLIFF), lambda env: cliff_mask(int(env.unwrapped.state)))


def _make(algo: str, env: Any) -> Any:
    import stable_baselines3 as sb3

    kw: dict[str, Any] = {"seed": 0, "device": "cpu", "policy_kwargs": {"net_arch": [32]}}
    if algo == "ppo":
        return sb3.PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, **kw)
    if algo == "a2c":
        return sb3.A2C("MlpPolicy", env, n_steps=8, **kw)
    off_policy = {"learning_starts": 200, "buffer_size": 2_000, "train_freq": 4}
    if algo == "dqn":
        return sb3.DQN("MlpPolicy", env, target_update_interval=200, **off_policy, **kw)
    import sb3_contrib as contrib

    if algo == "qrdqn":
        kw["policy_kwargs"]["n_quantiles"] = 5
        return contrib.QRDQN("MlpPolicy", env, target_update_interval=200, **off_policy, **kw)
    if algo == "trpo":
        return contrib.TRPO("MlpPolicy", env, n_steps=128, batch_size=64, **kw)
    if algo == "ars":
        return contrib.ARS("LinearPolicy", env, n_delta=2, n_eval_episodes=1, seed=0, device="cpu")
    if algo == "maskableppo":
        return contrib.MaskablePPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, **kw)
    if algo == "recurrentppo":
        kw["policy_kwargs"]["lstm_hidden_size"] = 8
        return contrib.RecurrentPPO("MlpLstmPolicy", env, n_steps=64, batch_size=64, **kw)
    raise ValueError(algo)


def train(algo: str, env_id: str, steps: int) -> Any:
    """A model of ``algo`` trained for ``steps`` steps on ``env_id`` (``"masked-cliff"`` for
    :func:`masked_cliff_env`)."""
    import seals  # noqa: F401 (registers the seals environment ids)

    if algo in ("qrdqn", "trpo", "ars", "maskableppo", "recurrentppo"):
        pytest.importorskip("sb3_contrib")
    env = masked_cliff_env() if env_id == "masked-cliff" else env_id
    model = _make(algo, env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(steps)
    return model


@pytest.fixture(scope="session")
def trained() -> Callable[[str], Any]:
    """``trained(name)``: the session's model of ``MODELS[name]``, trained on first use."""
    cache: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in cache:
            cache[name] = train(*MODELS[name])
        return cache[name]

    return get


def _model_fixture(name: str) -> Any:
    @pytest.fixture(scope="session", name=name)
    def fixture(trained: Callable[[str], Any]) -> Any:
        return trained(name)

    fixture.__doc__ = f"{MODELS[name][0]} trained {MODELS[name][2]} steps on {MODELS[name][1]}."
    return fixture


for _name in MODELS:
    globals()[_name] = _model_fixture(_name)
