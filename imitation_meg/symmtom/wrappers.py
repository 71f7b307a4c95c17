"""Single-agent gymnasium view of SymmToM: one agent learns while the others follow given policies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from imitation_meg.symmtom.agents import Policy, RandomPolicy
from imitation_meg.symmtom.env import SymmToMEnv

__all__ = ["FrameBuffer", "SingleAgentEnv"]


class FrameBuffer:
    """Concatenation of the last ``k`` observations (zeros before the first), oldest first.

    Args:
        obs_size: length of one observation.
        k: number of frames (1 = no stacking).
    """

    def __init__(self, obs_size: int, k: int) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"frame_stack={k!r} must be a positive int (1 means no stacking).")
        self.obs_size, self.k = obs_size, k
        self.frames = np.zeros((k, obs_size), dtype=np.float32)

    def reset(self, obs: np.ndarray) -> np.ndarray:
        self.frames[:] = 0.0
        return self.push(obs)

    def push(self, obs: np.ndarray) -> np.ndarray:
        self.frames = np.roll(self.frames, -1, axis=0)
        self.frames[-1] = obs
        return self.frames.reshape(-1).copy()


class SingleAgentEnv(gymnasium.Env):
    """Agent ``learner`` of a :class:`SymmToMEnv` as a gymnasium env (for SB3), others scripted.

    Observations are the learner's last ``frame_stack`` observations concatenated
    (``(frame_stack * obs_size,)`` float32), so that a feed-forward policy can remember; actions
    are ``MultiDiscrete([5, c])``; the reward is the learner's.

    Args:
        env: the multi-agent env (its ``render_mode`` is reused).
        others: policies of the other agents: one shared policy, a list of ``n - 1`` (in agent
            order, learner skipped), or ``None`` for uniform random (seeded from the env seed).
            A frozen SB3 model is wrapped with :class:`imitation_meg.symmtom.sb3.SB3Policy`.
        learner: index of the learning agent.
        frame_stack: number of stacked observations.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"]}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        env: SymmToMEnv,
        others: Policy | Sequence[Policy] | None = None,
        *,
        learner: int = 0,
        frame_stack: int = 1,
    ) -> None:
        if not isinstance(env, SymmToMEnv):
            raise TypeError(
                f"env must be a SymmToMEnv, got {type(env).__name__}; build one with parallel_env()."
            )
        n = env.n_agents
        if not (0 <= learner < n):
            raise ValueError(f"learner={learner} is not an agent index in 0..{n - 1}.")
        self.env = env
        self.learner = learner
        self._random_others = others is None
        if others is None:
            others = RandomPolicy(None)
        if not isinstance(others, Sequence):
            others = [others] * (n - 1)
        if len(others) != n - 1:
            raise ValueError(f"got {len(others)} policies for the {n - 1} other agents.")
        self.others = list(others)
        self.other_idx = [j for j in range(n) if j != learner]
        self.buffer = FrameBuffer(env.obs_size, frame_stack)
        self.observation_space = gymnasium.spaces.Box(
            -1.0, 1.0, (frame_stack * env.obs_size,), np.float32
        )
        self.action_space = gymnasium.spaces.MultiDiscrete([5, env.n_pieces])
        self.render_mode = env.render_mode
        self._obs: dict[str, np.ndarray] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self._random_others and seed is not None:
            self.others = [RandomPolicy(seed + 1)] * (self.env.n_agents - 1)
        self._obs, infos = self.env.reset(seed=seed, options=options)
        for j, pol in zip(self.other_idx, self.others, strict=True):
            pol.reset(self.env, j)
        name = self.env.possible_agents[self.learner]
        return self.buffer.reset(self._obs[name]), infos[name]

    def step(self, action: np.ndarray):
        names = self.env.possible_agents
        actions = {names[self.learner]: np.asarray(action, dtype=np.int64)}
        for j, pol in zip(self.other_idx, self.others, strict=True):
            actions[names[j]] = pol(self._obs[names[j]], self.env, j)
        self._obs, rewards, terms, truncs, infos = self.env.step(actions)
        me = names[self.learner]
        return self.buffer.push(self._obs[me]), rewards[me], terms[me], truncs[me], infos[me]

    def render(self):
        return self.env.render()
