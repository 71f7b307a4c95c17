"""Simple semi-deterministic agents: constant, random, observation lookup and tabular Q-learning.

All randomness comes from :func:`~imitation_meg.extended.core.stream_uniform` keyed by
``(seed, number of trainings so far, observation)``, so two instances with the same seed that
have been trained identically act identically (paper Def. 7), and ``act`` is pure.
Every constructor takes the metadata keywords ``n_actions``, ``n_obs`` and ``seed`` that
environments and the runner pass through the factory (see
:func:`~imitation_meg.extended.core.make_agent`).
The SB3 agents live in :mod:`imitation_meg.extended.sb3_agents`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from imitation_meg.extended.core import obs_key, stream_uniform

__all__ = ["Constant", "ObservationMap", "QLearner", "Random"]


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}.")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}.")
    return int(value)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}; pass seed=0 for example.")
    return int(seed)


class Constant:
    """Always plays ``action``.

    Args:
        action: the action to play.
        n_actions: number of actions of the environment (metadata); ``action`` must be below it.
        n_obs: unused metadata.
        seed: unused metadata.

    Raises:
        ValueError: if ``action`` is negative or not below ``n_actions``.
    """

    def __init__(
        self,
        action: int = 0,
        *,
        n_actions: int | None = None,
        n_obs: int | None = None,
        seed: int = 0,
    ) -> None:
        self.action = _check_int("action", action, 0)
        if n_actions is not None and self.action >= _check_int("n_actions", n_actions, 1):
            raise ValueError(
                f"Constant(action={self.action}) is not a valid action of an environment with "
                f"n_actions={n_actions}; choose an action in [0, {n_actions})."
            )

    def act(self, obs: Any) -> int:
        """Return ``self.action``."""
        return self.action

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Ignore the transition."""


class Random:
    """Plays uniformly at random from a stream keyed by (seed, trainings, observation).

    Args:
        n_actions: number of actions.
        n_obs: unused metadata.
        seed: seed of the agent's stream.
    """

    def __init__(self, *, n_actions: int = 2, n_obs: int | None = None, seed: int = 0) -> None:
        self.n_actions = _check_int("n_actions", n_actions, 1)
        self.seed = _check_seed(seed)
        self.n_trainings = 0

    def act(self, obs: Any) -> int:
        """Return a uniform action determined by (seed, number of trainings, obs)."""
        u = stream_uniform(self.seed, self.n_trainings, obs_key(obs), 1)
        return int(u * self.n_actions)

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Count the training (this advances the random stream)."""
        self.n_trainings += 1


class ObservationMap:
    """Deterministic memoryless agent: plays ``actions[obs]`` on integer observations.

    Example: ``ObservationMap(actions=(1, 0))`` on TemptingButton skips real buttons and pushes
    only where there is none.

    Args:
        actions: one action per observation, shape ``(n_obs,)``.
        n_actions: number of actions (metadata), used for validation.
        n_obs: number of observations (metadata), used for validation.
        seed: unused metadata.

    Raises:
        ValueError: if ``actions`` has the wrong length or holds an invalid action.
    """

    def __init__(
        self,
        actions: Sequence[int],
        *,
        n_actions: int | None = None,
        n_obs: int | None = None,
        seed: int = 0,
    ) -> None:
        self.actions = tuple(_check_int("actions[i]", a, 0) for a in actions)
        if n_obs is not None and len(self.actions) != n_obs:
            raise ValueError(
                f"ObservationMap needs one action per observation: got {len(self.actions)} "
                f"actions for n_obs={n_obs}."
            )
        if n_actions is not None and any(a >= n_actions for a in self.actions):
            raise ValueError(f"actions {self.actions} must lie in [0, {n_actions}).")

    def act(self, obs: Any) -> int:
        """Return ``actions[obs]``."""
        return self.actions[int(obs)]

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Ignore the transition."""


class QLearner:
    """Tabular Q-learning with epsilon-greedy acting (the library's Q agent).

    ``Q[o, a] += learning_rate * (r + gamma * max_a' Q[o', a'] - Q[o, a])``. Acting: with
    probability ``1 - epsilon`` the greedy action, otherwise a uniform action; both draws come from
    the seeded stream. Observations may be any hashable or array value (keyed by
    :func:`~imitation_meg.extended.core.obs_key`). Upstream defaults: greedy with probability 0.9,
    learning rate 0.1, gamma 0.9.

    Greedy ties (``tie_break``): ``"uniform"`` (default) draws uniformly among the tied actions;
    ``"lowest"`` is the original library's rule: a uniform action while the row is all zeros,
    otherwise the lowest-indexed greedy action (Python's ``max``). They differ where ties persist,
    e.g. on ThirdActionForbidden, whose 3-action sim ties the never-trained forbidden action with an
    action whose value is 0: uniform tie-breaking lets the sim pick the forbidden action and lock
    onto it (seeds then end near +0.9 or -0.9), the lowest-index rule never picks it (+0.9).

    Args:
        n_actions: number of actions.
        n_obs: unused metadata (the table grows on demand).
        seed: seed of the agent's stream.
        learning_rate: step size in ``(0, 1]``.
        gamma: discount in ``[0, 1]``.
        epsilon: exploration probability in ``[0, 1]``.
        tie_break: ``"uniform"`` or ``"lowest"`` (see above).

    Raises:
        ValueError: for out-of-range hyperparameters or an unknown ``tie_break``.
    """

    def __init__(
        self,
        *,
        n_actions: int = 2,
        n_obs: int | None = None,
        seed: int = 0,
        learning_rate: float = 0.1,
        gamma: float = 0.9,
        epsilon: float = 0.1,
        tie_break: str = "uniform",
    ) -> None:
        if tie_break not in ("uniform", "lowest"):
            raise ValueError(
                f"tie_break={tie_break!r}; use 'uniform' (ours) or 'lowest' (the original library's)."
            )
        self.tie_break = tie_break
        self.n_actions = _check_int("n_actions", n_actions, 1)
        self.seed = _check_seed(seed)
        for name, v, lo, hi in (
            ("learning_rate", learning_rate, 0.0, 1.0),
            ("gamma", gamma, 0.0, 1.0),
            ("epsilon", epsilon, 0.0, 1.0),
        ):
            in_range = isinstance(v, (int, float)) and lo <= v <= hi
            if not in_range or (name == "learning_rate" and v == 0):
                raise ValueError(f"{name} must lie in [{lo}, {hi}] (learning_rate > 0), got {v!r}.")
        self.learning_rate = float(learning_rate)
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.q: dict[Hashable, np.ndarray] = {}
        self.n_trainings = 0

    def _row(self, key: int) -> np.ndarray:
        row = self.q.get(key)
        return np.zeros(self.n_actions) if row is None else row

    def act(self, obs: Any) -> int:
        """Epsilon-greedy action on the current table (pure)."""
        key = obs_key(obs)
        u_explore = stream_uniform(self.seed, self.n_trainings, key, 2)
        u_pick = stream_uniform(self.seed, self.n_trainings, key, 3)
        if u_explore < self.epsilon:
            return int(u_pick * self.n_actions)
        row = self._row(key)
        if self.tie_break == "lowest":
            if not row.any():
                return int(u_pick * self.n_actions)
            return int(np.argmax(row))
        best = np.flatnonzero(row == row.max())
        return int(best[int(u_pick * len(best))])

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """One Q-learning update."""
        k_prev, k_next = obs_key(o_prev), obs_key(o_next)
        row = self.q.setdefault(k_prev, np.zeros(self.n_actions))
        target = reward + self.gamma * self._row(k_next).max()
        row[action] += self.learning_rate * (target - row[action])
        self.n_trainings += 1
