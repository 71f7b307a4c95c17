"""Stable-baselines3 integration for SymmToM (imports stable_baselines3; load lazily).

* :class:`SB3Policy` turns a trained model into a SymmToM policy (for evaluation, the ToM tests, or
  as a frozen partner inside :class:`~imitation_meg.symmtom.wrappers.SingleAgentEnv`).
* :class:`SharedParameterVecEnv` exposes every agent of one SymmToM env as one slot of an SB3
  ``VecEnv``, so that a single PPO model (shared parameters) is trained on all agents' experience.
* :func:`train_ppo` trains PPO in either mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from imitation_meg.symmtom.agents import HeuristicPolicy, Policy, RandomPolicy
from imitation_meg.symmtom.env import SymmToMEnv
from imitation_meg.symmtom.wrappers import FrameBuffer, SingleAgentEnv

__all__ = ["SB3Policy", "SharedParameterVecEnv", "make_others", "train_ppo"]


class SB3Policy:
    """A trained SB3 model as a SymmToM policy, with its own frame buffer per agent.

    Args:
        model: an SB3 model with ``predict``.
        frame_stack: frames the model was trained with.
        deterministic: greedy actions (default) or samples.
    """

    def __init__(self, model: Any, *, frame_stack: int = 1, deterministic: bool = True) -> None:
        self.model = model
        self.frame_stack = frame_stack
        self.deterministic = deterministic
        self.buffers: dict[int, FrameBuffer] = {}

    def reset(self, env: SymmToMEnv, i: int) -> None:
        self.buffers[i] = FrameBuffer(env.obs_size, self.frame_stack)
        self.buffers[i].frames[:] = 0.0
        self._fresh = getattr(self, "_fresh", set()) | {i}

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        if i not in self.buffers:
            self.reset(env, i)
        # the first observation of an episode enters the stack at the first call
        stacked = self.buffers[i].push(np.asarray(obs, dtype=np.float32))
        action, _ = self.model.predict(stacked, deterministic=self.deterministic)
        return np.asarray(action, dtype=np.int64).reshape(2)


class SharedParameterVecEnv(VecEnv):
    """All ``n`` agents of one SymmToM env as ``n`` slots of an SB3 ``VecEnv`` (parameter sharing).

    Observations ``(n, frame_stack * obs_size)``; actions ``(n, 2)``; auto-resets at truncation
    (the final observation is in ``infos[i]["terminal_observation"]``).
    """

    def __init__(self, env: SymmToMEnv, *, frame_stack: int = 1, seed: int | None = None) -> None:
        self.env = env
        self.frame_stack = frame_stack
        self.buffers = [FrameBuffer(env.obs_size, frame_stack) for _ in range(env.n_agents)]
        obs_space = gymnasium.spaces.Box(-1.0, 1.0, (frame_stack * env.obs_size,), np.float32)
        super().__init__(env.n_agents, obs_space, gymnasium.spaces.MultiDiscrete([5, env.n_pieces]))
        self._seed = seed
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None
        return np.stack(
            [b.reset(obs[a]) for b, a in zip(self.buffers, self.env.possible_agents, strict=True)]
        )

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs, 2)

    def step_wait(self):
        assert self._actions is not None
        names = self.env.possible_agents
        obs, rew, _, truncs, infos = self.env.step(
            {a: self._actions[k] for k, a in enumerate(names)}
        )
        stacked = np.stack([b.push(obs[a]) for b, a in zip(self.buffers, names, strict=True)])
        dones = np.array([truncs[a] for a in names])
        out_infos = [dict(infos[a]) for a in names]
        if dones.all():
            for k in range(self.num_envs):
                out_infos[k]["terminal_observation"] = stacked[k]
                out_infos[k]["TimeLimit.truncated"] = True
            stacked = self.reset()
        return stacked, np.array([rew[a] for a in names], dtype=np.float32), dones, out_infos

    def close(self) -> None:
        self.env.close()

    def seed(self, seed: int | None = None) -> list:
        self._seed = seed
        return [seed] * self.num_envs

    def get_attr(self, attr_name: str, indices=None) -> list:
        return [getattr(self.env, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list:
        return [getattr(self.env, method_name)(*args, **kwargs)] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class, indices=None) -> list:
        return [False] * len(self._indices(indices))

    def _indices(self, indices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else indices


def make_others(kind: str, seed: int) -> Policy:
    """Partner policy by name: ``random`` or ``heuristic``."""
    if kind == "random":
        return RandomPolicy(seed)
    if kind == "heuristic":
        return HeuristicPolicy()
    raise ValueError(
        f"others={kind!r}; use 'random' or 'heuristic' (or pass policies to SingleAgentEnv)."
    )


def train_ppo(
    *,
    n_agents: int,
    width: int,
    n_pieces: int,
    oracle: bool = False,
    frame_stack: int = 4,
    total_timesteps: int = 100_000,
    mode: str = "shared",
    others: str = "heuristic",
    seed: int = 0,
    ppo_kwargs: dict[str, Any] | None = None,
):
    """Train PPO (two 64-unit layers, as the paper's MLPs) on SymmToM.

    Args:
        n_agents, width, n_pieces, oracle: environment.
        frame_stack: stacked observations (memory).
        total_timesteps: PPO steps (per slot: ``shared`` counts every agent's step).
        mode: ``"shared"`` (one model plays every agent) or ``"single"`` (agent 0 learns, the others
            follow ``others``).
        others: partner policy for ``single`` mode (``random`` or ``heuristic``).
        seed: seeds PPO and the environment.
        ppo_kwargs: extra keyword arguments of ``PPO``.

    Returns:
        The trained ``PPO`` model.
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = SymmToMEnv(n_agents, width, n_pieces, oracle=oracle)
    if mode == "shared":
        venv: VecEnv = SharedParameterVecEnv(env, frame_stack=frame_stack, seed=seed)
    elif mode == "single":
        single = SingleAgentEnv(env, make_others(others, seed), frame_stack=frame_stack)
        single.reset(seed=seed)
        venv = DummyVecEnv([lambda: single])
    else:
        raise ValueError(f"mode={mode!r}; use 'shared' or 'single'.")
    kwargs: dict[str, Any] = {
        "n_steps": 5 * width * 8,
        "batch_size": 10 * width,
        "policy_kwargs": {"net_arch": [64, 64]},
        "verbose": 0,
    }
    kwargs.update(ppo_kwargs or {})
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", **kwargs)
    model.learn(total_timesteps=total_timesteps)
    return model
