"""Tabular environments seen through observations that are not state indices: gymnasium
environments and ``ObservationWrapper`` s whose observations are feature rows, one-hot vectors,
grid coordinates, Taxi's decoded state, or one of many jittered variants of a state's
observation. The validation cases built from them are in :mod:`imitation_meg.approx.envs`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from imitation_meg.continuous.envs import ObservedStatesEnv
from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "JITTER_SHARE",
    "JITTER_VARIANTS",
    "CoordinateObservation",
    "JitteredObservation",
    "OneHotObservation",
    "TabularGymEnv",
    "TaxiObservation",
    "jitter_variants",
]

#: Observation variants per state of the jittered families.
JITTER_VARIANTS = 4096
#: Their offsets: uniform per entry within this share of the grid's spacing (of the nearest
#: other observation's distance over ``sqrt(F)`` off a grid), so that the nearest state's
#: observation is still the state's own.
JITTER_SHARE = 0.45


class TabularGymEnv(ObservedStatesEnv):
    """A :class:`TabularMDP` as a gymnasium environment with feature observations.

    ``reset`` draws ``s_0`` from the MDP's initial distribution; ``step(a)`` pays the expected
    utility ``r(s, a)`` of :meth:`TabularMDP.reward_sa` (for a state utility, ``U(s)``), draws
    ``s'`` from ``T[s, a, :]`` and truncates after ``H`` decisions.

    Args:
        mdp: the MDP (its utility is the reward).
        observations: ``(S, F)`` feature rows, one per state.
    """

    def __init__(self, mdp: TabularMDP, observations: np.ndarray) -> None:
        self.metadata = {"render_modes": []}
        obs = np.asarray(observations, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[0] != mdp.n_states:
            raise ValueError(
                f"observations must be (S, F) with S={mdp.n_states}, got shape {obs.shape}."
            )
        self.mdp = mdp
        self.obs_matrix = obs
        self.horizon = mdp.steps
        self._next = mdp.next_state.cpu().numpy()
        self._prob = mdp.prob.cpu().numpy().astype(np.float64)
        self._r = mdp.reward_sa().cpu().numpy().astype(np.float64)
        self._p0 = mdp.initial_state_dist.cpu().numpy().astype(np.float64)
        self.observation_space = gym.spaces.Box(
            low=obs.min(0) - 1.0, high=obs.max(0) + 1.0, dtype=np.float32
        )
        self.action_space = gym.spaces.Discrete(mdp.n_actions)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        s, a = self._s, int(action)
        r = float(self._r[s, a])
        p = self._prob[s, a]
        self._s = int(self._next[s, a, self.np_random.choice(p.size, p=p / p.sum())])
        self._t += 1
        return self.obs_matrix[self._s].copy(), r, False, self._t >= self.horizon, {"state": s}


class OneHotObservation(gym.ObservationWrapper):
    """``Discrete(n)`` observations as one-hot ``float32`` vectors of length ``n``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not isinstance(env.observation_space, gym.spaces.Discrete):
            raise TypeError(
                f"OneHotObservation needs a Discrete space, got {env.observation_space}."
            )
        self.n = int(env.observation_space.n)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float32)
        out[int(observation)] = 1.0
        return out

    def matrix(self) -> np.ndarray:
        """The ``(S, n)`` observation of every state."""
        return np.eye(self.n, dtype=np.float32)


class CoordinateObservation(gym.ObservationWrapper):
    """A grid world's ``Discrete`` cell index as ``(row, column)`` scaled to ``[0, 1]``.

    The grid's shape is read from ``env.unwrapped.desc`` (FrozenLake) or given as ``shape``.
    """

    def __init__(self, env: gym.Env, shape: tuple[int, int] | None = None) -> None:
        super().__init__(env)
        if shape is None:
            desc = getattr(env.unwrapped, "desc", None)
            if desc is None:
                raise ValueError("pass shape=(rows, columns): the environment has no desc.")
            shape = (int(desc.shape[0]), int(desc.shape[1]))
        self.rows, self.cols = shape
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return self.matrix()[int(observation)]

    def matrix(self) -> np.ndarray:
        """The ``(S, 2)`` observation of every state."""
        s = np.arange(self.rows * self.cols)
        return np.stack(
            [s // self.cols / max(self.rows - 1, 1), s % self.cols / max(self.cols - 1, 1)], 1
        ).astype(np.float32)


class TaxiObservation(gym.ObservationWrapper):
    """Taxi's ``Discrete(500)`` state as the one-hot taxi row (5), taxi column (5), passenger
    location (5: the four stands or in the taxi) and destination (4), concatenated: ``(19,)``."""

    SIZES = (5, 5, 5, 4)

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if getattr(env.observation_space, "n", None) != 500 or not hasattr(env.unwrapped, "decode"):
            raise TypeError(f"TaxiObservation needs gymnasium's Taxi, got {env.unwrapped}.")
        self.observation_space = gym.spaces.Box(0.0, 1.0, (sum(self.SIZES),), dtype=np.float32)
        self._matrix = self._decoded(env.unwrapped)

    def _decoded(self, taxi: Any) -> np.ndarray:
        out = np.zeros((500, sum(self.SIZES)), dtype=np.float32)
        offsets = np.cumsum((0, *self.SIZES[:-1]))
        for s in range(500):
            for part, (value, start) in enumerate(zip(taxi.decode(s), offsets, strict=True)):
                assert 0 <= value < self.SIZES[part]
                out[s, start + int(value)] = 1.0
        return out

    def observation(self, observation: Any) -> np.ndarray:
        return self._matrix[int(observation)].copy()

    def matrix(self) -> np.ndarray:
        """The ``(500, 19)`` observation of every state."""
        return self._matrix.copy()


def jitter_variants(
    observations: np.ndarray, spread: np.ndarray | float, *, n_variants: int, seed: int
) -> np.ndarray:
    """``(S, K, F)`` variants of each state's observation ``(S, F)``: the observation plus an
    offset drawn uniformly within ``+- spread`` per entry (``spread`` a number or ``(F,)``).

    Raises:
        ValueError: observations that are not ``(S, F)``, a ``spread`` of another length or
            negative, or ``n_variants`` below 1.
    """
    obs = np.asarray(observations, dtype=np.float64)
    if obs.ndim != 2:
        raise ValueError(f"observations must be (S, F), got shape {obs.shape}.")
    if not isinstance(n_variants, (int, np.integer)) or n_variants < 1:
        raise ValueError(f"n_variants must be an integer >= 1, got {n_variants!r}.")
    raw = np.asarray(spread, dtype=np.float64)
    if raw.ndim > 1 or (raw.ndim == 1 and raw.shape[0] != obs.shape[1]) or (raw < 0).any():
        raise ValueError(
            f"spread must be a number >= 0 or {obs.shape[1]} of them (one per entry), got "
            f"{spread!r}."
        )
    width = np.broadcast_to(raw, obs.shape[1:])
    gen = np.random.default_rng([seed, 3])
    offsets = gen.uniform(-1.0, 1.0, (obs.shape[0], n_variants, obs.shape[1])) * width
    return (obs[:, None, :] + offsets).astype(np.float32)


def _grid_spread(observations: np.ndarray) -> np.ndarray:
    """``(F,)``: :data:`JITTER_SHARE` of each entry's spacing on a grid of observations."""
    spacing = []
    for col in np.asarray(observations, dtype=np.float64).T:
        steps = np.diff(np.unique(col))
        spacing.append(float(steps.min()) if steps.size else 1.0)
    return JITTER_SHARE * np.asarray(spacing)


def _point_spread(observations: np.ndarray) -> float:
    """:data:`JITTER_SHARE` of the nearest two observations' distance over ``sqrt(F)``: no
    offset then takes an observation nearer to another state's."""
    obs = np.asarray(observations, dtype=np.float64)
    d = np.sqrt(((obs[:, None, :] - obs[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    return JITTER_SHARE * float(d.min()) / math.sqrt(obs.shape[1])


class JitteredObservation(gym.ObservationWrapper):
    """A tabular environment's state ``s`` seen as ``variants[s, k]``, ``k`` drawn uniformly at
    every step (from the wrapper's own generator, seeded by ``reset(seed=...)``, so the
    environment's dynamics draw what they would without it).

    A policy of the observation then acts in state ``s`` with the mean of its probabilities over
    ``s``'s variants (:func:`state_policy`), and the soft-optimal models, whose values depend on
    the state alone, are the tabular ones: the exact MEG of that mean table in the tabular MDP
    is the MEG of the policy here.

    Args:
        env: an environment whose observation identifies the state: a ``Discrete`` index, or
            anything ``state_of`` maps to one.
        variants: ``(S, K, F)`` observations (:func:`jitter_variants`).
        state_of: the state index of ``env``'s observation (default ``int(observation)``).
    """

    def __init__(
        self,
        env: gym.Env,
        variants: np.ndarray,
        state_of: Callable[[Any], int] | None = None,
    ) -> None:
        super().__init__(env)
        self.variants = np.asarray(variants, dtype=np.float32)
        if self.variants.ndim != 3:
            raise ValueError(f"variants must be (S, K, F), got shape {self.variants.shape}.")
        self._state_of = state_of if state_of is not None else int
        self._rng = np.random.default_rng(0)
        flat = self.variants.reshape(-1, self.variants.shape[2])
        self.observation_space = gym.spaces.Box(
            flat.min(0), flat.max(0), (self.variants.shape[2],), dtype=np.float32
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng([seed, 5])
        return super().reset(seed=seed, options=options)

    def observation(self, observation: Any) -> np.ndarray:
        s = self._state_of(observation)
        return self.variants[s, int(self._rng.integers(self.variants.shape[1]))].copy()
