"""Small stable-baselines3 agents for tabular grids, as the demo and the training study train them.

One place for their settings, so that the demo's PPO and the study's PPO / A2C / DQN are the same
agents. Imports stable-baselines3 and seals lazily (extra ``sb3``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

from imitation_meg.type_aliases import PathLike

__all__ = [
    "ALGOS",
    "ZOO_DQN",
    "make_minigrid_ppo",
    "make_model",
    "train_cliff_ppo",
    "train_in_stages",
]

#: Algorithms :func:`make_model` builds.
ALGOS = ("ppo", "dqn", "a2c")

#: The RL Zoo's DQN hyperparameters (rl-zoo3 2.2.1) for the classic-control tasks, by id.
ZOO_DQN: dict[str, dict[str, Any]] = {
    "CartPole-v1": {
        "learning_rate": 2.3e-3,
        "batch_size": 64,
        "buffer_size": 100_000,
        "learning_starts": 1000,
        "gamma": 0.99,
        "target_update_interval": 10,
        "train_freq": 256,
        "gradient_steps": 128,
        "exploration_fraction": 0.16,
        "exploration_final_eps": 0.04,
    },
    "Acrobot-v1": {
        "learning_rate": 6.3e-4,
        "batch_size": 128,
        "buffer_size": 50_000,
        "learning_starts": 0,
        "gamma": 0.99,
        "target_update_interval": 250,
        "train_freq": 4,
        "gradient_steps": -1,
        "exploration_fraction": 0.12,
        "exploration_final_eps": 0.1,
    },
    "MountainCar-v0": {
        "learning_rate": 4e-3,
        "batch_size": 128,
        "buffer_size": 10_000,
        "learning_starts": 1000,
        "gamma": 0.98,
        "target_update_interval": 600,
        "train_freq": 16,
        "gradient_steps": 8,
        "exploration_fraction": 0.2,
        "exploration_final_eps": 0.07,
    },
}


def train_in_stages(
    model: Any, total_timesteps: int, n_checkpoints: int, folder: PathLike, stem: str
) -> Iterator[tuple[int, pathlib.Path]]:
    """Train an SB3 ``model`` to ``total_timesteps`` in ``n_checkpoints`` equal stages, saving it
    before the first stage and after each one.

    Args:
        model: an SB3 model (``learn``, ``save``, ``num_timesteps``).
        total_timesteps: the training budget.
        n_checkpoints: the number of stages.
        folder: where the checkpoints go (created if missing).
        stem: the checkpoints' file names are ``<stem>_<steps>.zip``.

    Yields:
        ``(steps trained, checkpoint path)``, from the untrained model on; the caller scores the
        model at each one before the next stage trains it further.
    """
    import numpy as np

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    done = 0
    for target in np.linspace(0, total_timesteps, n_checkpoints + 1).astype(int):
        if target > done:
            model.learn(int(target - done), reset_num_timesteps=False)
            done = int(model.num_timesteps)
        path = folder / f"{stem}_{done}.zip"
        model.save(path)
        yield done, path


def make_model(
    algo: str, venv: Any, seed: int, *, dqn_epsilon: float = 0.05, timesteps: int = 60_000
) -> Any:
    """An untrained SB3 model with the project's settings for small grids (CPU, 64-unit MLP).

    PPO: ``n_steps=64``, ``batch_size=128``, 4 epochs, learning rate 3e-3, ``gamma=0.99``.
    A2C: ``n_steps=8``, learning rate 3e-3. DQN: learning rate 1e-3, buffer 50k, learning starts
    ``min(1000, timesteps // 4)``, batch 64, ``train_freq=4``, target update every 500 steps,
    exploration decaying over 30% of training to ``dqn_epsilon``.

    Args:
        algo: ``"ppo"``, ``"a2c"`` or ``"dqn"``.
        venv: the (vectorised) training environment.
        seed: the model's seed.
        dqn_epsilon: DQN's final exploration rate.
        timesteps: planned training steps (sets DQN's ``learning_starts``).

    Raises:
        ValueError: an unknown ``algo``.
    """
    import stable_baselines3 as sb3

    common: dict[str, Any] = {
        "seed": seed,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [64]},
        "verbose": 0,
    }
    if algo == "ppo":
        return sb3.PPO(
            "MlpPolicy",
            venv,
            n_steps=64,
            batch_size=128,
            n_epochs=4,
            learning_rate=3e-3,
            gamma=0.99,
            **common,
        )
    if algo == "a2c":
        return sb3.A2C("MlpPolicy", venv, n_steps=8, learning_rate=3e-3, gamma=0.99, **common)
    if algo == "dqn":
        return sb3.DQN(
            "MlpPolicy",
            venv,
            learning_rate=1e-3,
            buffer_size=50_000,
            learning_starts=min(1_000, timesteps // 4),
            batch_size=64,
            gamma=0.99,
            train_freq=4,
            target_update_interval=500,
            exploration_fraction=0.3,
            exploration_final_eps=dqn_epsilon,
            **common,
        )
    raise ValueError(f"unknown algo {algo!r}; choose from {ALGOS}.")


def train_cliff_ppo(
    *,
    width: int = 10,
    height: int = 4,
    horizon: int = 30,
    total_timesteps: int = 16_384,
    seed: int = 0,
    progress: bool = False,
) -> Any:
    """A small PPO on seals' ``CliffWorldEnv`` (one-hot observations), as the demo trains it.

    Eight environments and the PPO settings of :func:`make_model`. About 6 s for 16k steps on
    one core.

    Raises:
        ValueError: ``total_timesteps`` below 1.
    """
    if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, int):
        raise TypeError(f"total_timesteps must be an integer, got {total_timesteps!r}.")
    if total_timesteps < 1:
        raise ValueError(f"total_timesteps must be >= 1, got {total_timesteps}.")
    from seals.diagnostics.cliff_world import CliffWorldEnv
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(
        lambda: CliffWorldEnv(width=width, height=height, horizon=horizon, use_xy_obs=False),
        n_envs=8,
        seed=seed,
    )
    model = make_model("ppo", venv, seed, timesteps=total_timesteps)
    try:
        model.learn(total_timesteps, progress_bar=progress)
    except ImportError:  # progress bars need tqdm and rich
        model.learn(total_timesteps)
    return model


def make_minigrid_ppo(
    venv: Any, seed: int, *, policy: str = "cnn", n_steps: int = 128, **kwargs: Any
) -> Any:
    """An untrained PPO for MiniGrid observations with the project's settings.

    ``policy="cnn"``: ``CnnPolicy`` with :class:`imitation_meg.adapters.minigrid.MiniGridCNN`
    (64 features) on image observations (``ImgObsWrapper``, ``FullyObsWrapper``); ``"mlp"``:
    ``MlpPolicy`` (64, 64) on flat ones (``FlatObsWrapper``, or images, which SB3 flattens).
    MiniGrid's images hold small codes, not pixels: neither divides them by 255.
    ``n_steps`` per environment, batch 64, 4 epochs, learning rate 1e-3, ``gamma=0.99``,
    entropy coefficient 0.01; ``kwargs`` override any of them.

    Raises:
        ValueError: an unknown ``policy``.
    """
    import stable_baselines3 as sb3

    if policy == "cnn":
        from imitation_meg.adapters.minigrid import minigrid_cnn_kwargs

        name, policy_kwargs = "CnnPolicy", minigrid_cnn_kwargs()
    elif policy == "mlp":
        name, policy_kwargs = "MlpPolicy", {"net_arch": [64, 64], "normalize_images": False}
    else:
        raise ValueError(f"policy must be 'cnn' or 'mlp', got {policy!r}.")
    settings: dict[str, Any] = {
        "n_steps": n_steps,
        "batch_size": 64,
        "n_epochs": 4,
        "learning_rate": 1e-3,
        "gamma": 0.99,
        "ent_coef": 0.01,
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
        "policy_kwargs": policy_kwargs,
    }
    settings.update(kwargs)
    return sb3.PPO(name, venv, **settings)
