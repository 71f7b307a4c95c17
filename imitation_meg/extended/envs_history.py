"""The history environments: each step rebuilds or traces a sim from the run so far.

:class:`DejaVu`, :class:`ReverseHistory` and :class:`PunishSlowAgent` are slow (``slow = True``):
the first two retrain a fresh sim on the whole history at every step, the last traces the sim's
interpreter steps. :class:`LimitedMemory` retrains on a window of five turns, with a cache.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

from imitation_meg.extended.core import Agent, ExtendedEnv
from imitation_meg.extended.envs_match import match

__all__ = [
    "DejaVu",
    "LimitedMemory",
    "PunishSlowAgent",
    "ReverseHistory",
]


class DejaVu(ExtendedEnv):
    """Match against a sim that lived the whole history twice (slow; actions 2, obs 1).

    At step n > 1 (history h, agent action a) a fresh sim is trained on h, then on the loop
    transition ``(last obs, a, 0, first obs)`` ("taking a made everything start again"), then on h
    again, and asked ``sim.act(0)``; reward is the match. The first step gives reward 0.
    Cost O(n) trainings per step, O(n^2) per run.
    """

    n_actions, n_obs = 2, 1
    slow = True

    def _setup(self) -> None:
        self.transitions: list[tuple[int, int, float, int]] = []

    def step(self, action: int) -> tuple[float, int]:
        if not self.transitions:
            self.transitions.append((0, action, 0, 0))
            return 0, 0
        sim = self.make_sim()
        for t in self.transitions:
            sim.train(*t)
        sim.train(self.transitions[-1][3], action, 0, self.transitions[0][0])
        for t in self.transitions:
            sim.train(*t)
        reward = match(action, sim.act(0))
        self.transitions.append((0, action, reward, 0))
        return reward, 0


class LimitedMemory(ExtendedEnv):
    """Match against a fresh sim trained on only the 5 most recent turns ``(0, a, r, 0)``.

    Sims are cached by the content of the 5-turn window (a bounded cache of 64 windows), so
    the cost per step is at most 5 trainings. Actions 2, observations 1.
    """

    n_actions, n_obs = 2, 1
    MEMORY = 5
    CACHE = 64

    def _setup(self) -> None:
        self.window: tuple[tuple[int, float], ...] = ()
        self._cache: OrderedDict[tuple[tuple[int, float], ...], Agent] = OrderedDict()

    def _sim_for(self, window: tuple[tuple[int, float], ...]) -> Agent:
        if window in self._cache:
            self._cache.move_to_end(window)
            return self._cache[window]
        sim = self.make_sim()
        for a, r in window:
            sim.train(0, a, r, 0)
        self._cache[window] = sim
        if len(self._cache) > self.CACHE:
            self._cache.popitem(last=False)
        return sim

    def step(self, action: int) -> tuple[float, int]:
        reward = match(action, self._sim_for(self.window).act(0))
        self.window = ((*self.window, (action, reward)))[-self.MEMORY :]
        return reward, 0


class ReverseHistory(ExtendedEnv):
    """Paper Example 3 (slow): match against a sim that lived the history in reverse order.

    Observations are random bits. With percepts ``x_k = (r_k, o_k)`` (``r_1 = 0``) and actions
    ``y_k``, after the agent plays ``y_n`` a fresh sim is trained on the reversed history
    ``x_n y_{n-1} x_{n-1} ... y_1 x_1``, i.e. on ``(o_k, y_{k-1}, r_{k-1}, o_{k-1})`` for
    k = n..2, and asked ``sim.act(o_1)``; reward is the match. O(n) trainings per step.
    Actions 2, observations 2. (The original library also rebuilds its sim every step, but gives
    reward 0 on the first step, pairs each action with its *own* reward in the reversed history
    (here with the previous action's reward, the paper's percept order) and has one observation,
    always 0, where we draw random bits.)
    """

    n_actions, n_obs = 2, 2
    slow = True

    def _setup(self) -> None:
        self.obs: list[int] = []
        self.rewards: list[float] = []
        self.actions: list[int] = []

    def reset(self) -> int:
        self.obs = [int(self.rng.integers(2))]
        self.rewards = [0]
        return self.obs[0]

    def step(self, action: int) -> tuple[float, int]:
        sim = self.make_sim()
        n = len(self.obs)
        for k in range(n - 1, 0, -1):  # 0-based percept index k, from the newest down
            sim.train(self.obs[k], self.actions[k - 1], self.rewards[k - 1], self.obs[k - 1])
        reward = match(action, sim.act(self.obs[0]))
        obs = int(self.rng.integers(2))
        self.actions.append(action)
        self.obs.append(obs)
        self.rewards.append(reward)
        return reward, obs


def _count_line_events(fn: Any) -> tuple[Any, int]:
    """Call ``fn()`` counting the Python line events it executes (a deterministic step count)."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = fn()
    finally:
        sys.settrace(old)
    return out, count


class PunishSlowAgent(ExtendedEnv):
    """Punishes agents that take many interpreter steps to act (slow; actions 2, obs 1).

    At turn n the environment runs ``sim.act(0)`` on an identically trained sim under a tracer
    counting Python line events; reward +1 if fewer than ``15 * n`` lines ran, else -1. The sim
    is trained like the agent, as in the original library, which counts pdb steps instead of line
    events. Tracing makes it slow.
    """

    n_actions, n_obs = 2, 1
    slow = True
    STEPS_PER_TURN = 15

    def _setup(self) -> None:
        self.sim = self.make_sim()
        self.turn = 1

    def step(self, action: int) -> tuple[float, int]:
        _, lines = _count_line_events(lambda: self.sim.act(0))
        reward = 1 if lines < self.STEPS_PER_TURN * self.turn else -1
        self.turn += 1
        self.sim.train(0, action, reward, 0)
        return reward, 0
