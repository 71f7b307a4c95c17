"""Reading the tables of tabular environments: seals' matrices and gymnasium toy-text's ``P``.

Below :mod:`imitation_meg.core.mdp`: the readers return plain arrays (:class:`EnvTables`) that
:meth:`imitation_meg.TabularMDP.from_env` validates into an MDP.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import numpy as np

__all__ = ["EnvTables", "is_tabular", "make_env", "read_env_tables"]


class EnvTables(NamedTuple):
    """The arrays of a tabular environment, as :class:`~imitation_meg.TabularMDP` takes them."""

    transition: np.ndarray | tuple[np.ndarray, np.ndarray]  # (S, A, S) or (next_state, prob)
    utility: np.ndarray  # (S,) or (S, A)
    horizon: int
    initial_state_dist: np.ndarray | None  # (S,)
    observation_matrix: np.ndarray | None  # (S, O)
    name: str
    metadata: dict[str, Any]


def make_env(env_or_id: Any, make_kwargs: dict[str, Any]) -> Any:
    """A gymnasium environment from an id (``gymnasium.make``; seals ids register seals first)
    or the environment given.

    Raises:
        ValueError: an id gymnasium cannot make (unregistered, a bad version or keyword), with
            gymnasium's reason and where to find the registered ids.
        TypeError: keyword arguments with an environment instance, or an object that is not
            an environment.
    """
    import gymnasium as gym

    if isinstance(env_or_id, str):
        if env_or_id.startswith("seals/"):
            import seals  # noqa: F401 (registers the seals environment ids)

        try:
            return gym.make(env_or_id, **make_kwargs)
        except gym.error.Error as e:
            raise ValueError(
                f"could not make environment {env_or_id!r}: {e} Check the id "
                "(gymnasium.pprint_registry() lists the registered ones; seals ids start with "
                "'seals/') and its keyword arguments."
            ) from e
    if make_kwargs:
        raise TypeError(
            f"make keyword arguments {sorted(make_kwargs)} only apply to an environment id; "
            "pass them to gymnasium.make yourself or pass the id."
        )
    if not hasattr(env_or_id, "unwrapped"):
        raise TypeError(
            f"expected a gymnasium environment or an environment id, got {type(env_or_id).__name__}."
        )
    return env_or_id


def _discrete_n(space: Any, what: str, env_name: str) -> int:
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Discrete):
        raise TypeError(
            f"{env_name} has a {type(space).__name__} {what} space; MEG needs a tabular "
            f"environment with Discrete {what}s."
        )
    return int(space.n)


def read_env_tables(env_or_id: Any, *, horizon: int | None = None, **make_kwargs: Any) -> EnvTables:
    """Read the tables of a seals tabular or gymnasium toy-text environment (see
    :meth:`imitation_meg.TabularMDP.from_env`)."""
    env = make_env(env_or_id, make_kwargs)
    u = env.unwrapped
    name = getattr(getattr(env, "spec", None), "id", None) or type(u).__name__
    n_actions = _discrete_n(u.action_space, "action", name)

    horizon = _horizon(env, horizon, name)
    if hasattr(u, "transition_matrix") and hasattr(u, "reward_matrix"):
        return _from_seals(u, n_actions, horizon, name)

    if hasattr(u, "P") and isinstance(u.P, dict):
        return _from_toy_text(u, n_actions, int(horizon), name)

    raise ValueError(
        f"{name} ({type(u).__name__}) is not tabular: it exposes neither seals' "
        "transition_matrix / reward_matrix nor gymnasium toy-text's P table. Build a "
        "TabularMDP from arrays instead."
    )


def _horizon(env: Any, horizon: int | None, name: str) -> int:
    """The given horizon, else the environment's ``horizon``, else its spec's
    ``max_episode_steps``."""
    u = env.unwrapped
    if horizon is None:
        horizon = getattr(u, "horizon", None)
    if horizon is None:
        spec = getattr(env, "spec", None) or getattr(u, "spec", None)
        horizon = getattr(spec, "max_episode_steps", None)
    if horizon is None:
        raise ValueError(
            f"{name} has no horizon (env.horizon and spec.max_episode_steps are both None); "
            "pass horizon=<number of decisions>."
        )
    return int(horizon)


def _from_seals(u: Any, n_actions: int, horizon: int, name: str) -> EnvTables:
    """The tables of a seals environment: ``transition_matrix (S, A, S)``, ``reward_matrix``,
    the initial distribution and observations when it has them."""
    T = np.asarray(u.transition_matrix, dtype=np.float64)
    if T.ndim != 3 or T.shape[1] != n_actions:
        raise ValueError(
            f"{name}: transition_matrix has shape {T.shape}, expected (S, {n_actions}, S)."
        )
    p0 = getattr(u, "initial_state_dist", None)
    obs = getattr(u, "observation_matrix", None)
    return EnvTables(
        transition=T,
        utility=np.asarray(u.reward_matrix, dtype=np.float64),
        horizon=horizon,
        initial_state_dist=None if p0 is None else np.asarray(p0, dtype=np.float64),
        observation_matrix=None if obs is None else np.asarray(obs),
        name=name,
        metadata={},
    )


def _terminal_states(P: Any, n_states: int, n_actions: int) -> np.ndarray:
    """``(S,)`` bool: the states entered on a terminating transition of toy-text's ``P``."""
    terminal = np.zeros(n_states, dtype=bool)
    for s in range(n_states):
        for a in range(n_actions):
            for p, s2, _r, done in P[s][a]:
                if done and p > 0:
                    terminal[s2] = True
    return terminal


def _from_toy_text(u: Any, n_actions: int, horizon: int, name: str) -> EnvTables:
    n_states = _discrete_n(u.observation_space, "observation", name)
    P = u.P
    terminal = _terminal_states(P, n_states, n_actions)
    successors: list[list[dict[int, float]]] = []
    reward = np.zeros((n_states, n_actions))
    for s in range(n_states):
        row = []
        for a in range(n_actions):
            d: dict[int, float] = {}
            if terminal[s]:
                d[s] = 1.0  # absorbing, no further utility
            else:
                for p, s2, r, _done in P[s][a]:
                    d[int(s2)] = d.get(int(s2), 0.0) + float(p)
                    reward[s, a] += float(p) * float(r)
            row.append(d)
        successors.append(row)
    next_state, prob = _fixed_branching(successors, n_states, n_actions)
    p0 = getattr(u, "initial_state_distrib", None)
    return EnvTables(
        transition=(next_state, prob),
        utility=reward,
        horizon=horizon,
        initial_state_dist=None if p0 is None else np.asarray(p0, dtype=np.float64),
        observation_matrix=None,
        name=name,
        metadata={"terminal_states": np.flatnonzero(terminal).tolist()},
    )


def _fixed_branching(
    successors: list[list[dict[int, float]]], n_states: int, n_actions: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(next_state, prob)`` ``(S, A, B)`` of per-pair successor maps, successors sorted."""
    B = max(len(d) for row in successors for d in row)
    next_state = np.zeros((n_states, n_actions, B), dtype=np.int64)
    prob = np.zeros((n_states, n_actions, B))
    for s, row in enumerate(successors):
        for a, d in enumerate(row):
            for k, (s2, p) in enumerate(sorted(d.items())):
                next_state[s, a, k] = s2
                prob[s, a, k] = p
    return next_state, prob


def is_tabular(env_id: str) -> bool:
    """Whether ``env_id`` exposes tables (seals' matrices or toy-text's ``P``) for exact MEG.

    Raises:
        ValueError: an id gymnasium cannot make.
    """
    import gymnasium as gym

    if env_id.startswith("seals/"):
        with contextlib.suppress(ImportError):
            import seals  # noqa: F401  (registers the seals/ ids)
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:
        raise ValueError(f"could not make environment {env_id!r}: {e}") from e
    try:
        u = env.unwrapped
        return (hasattr(u, "transition_matrix") and hasattr(u, "reward_matrix")) or (
            isinstance(getattr(u, "P", None), dict)
        )
    finally:
        env.close()
