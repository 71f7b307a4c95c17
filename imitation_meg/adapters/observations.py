"""What a policy sees in each state of a tabular MDP, and tables of plain callables.

Every adapter turns a state ``s`` into what the policy observes: the index ``s`` for a
``Discrete`` observation space (SB3 one-hot encodes it itself, so the integer is passed, exactly
as the environment emits it: gymnasium toy-text and seals ``TabularModelMDP``); the row
``observation_matrix[s]`` for ``Box`` observation spaces (seals ``CliffWorld*`` and ``Random``,
and :func:`imitation_meg.envs.cliff_world`, whose observation matrix is seals' one-hot). When
several states share one observation the policy cannot tell them apart, and
:class:`ObservationAliasingWarning` says which.

Imports gymnasium only to read observation spaces; nothing of SB3 or imitation.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning, as_policy, as_tensor
from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "ObservationAliasingWarning",
    "callable_table",
    "check_actions",
    "no_epsilon",
    "resolve_mdp",
    "state_observations",
]

#: States per forward pass (one pass for every tabular environment of practical size).
DEFAULT_BATCH = 1 << 16


class ObservationAliasingWarning(ImitationMEGWarning):
    """Several states give the same observation, so the policy must act alike in them.

    The policy table is still exact (it is what the policy does in each state); the warning is
    a reminder that goal-directedness is then measured for a policy that cannot distinguish
    those states. Build the environment with distinguishing observations (e.g. seals'
    ``use_xy_obs=False``) or silence the warning with ``warnings.simplefilter``.
    """


def resolve_mdp(mdp_or_env: Any, *, horizon: int | None = None) -> tuple[TabularMDP, Any]:
    """The MDP to score in, and the environment (or id) it came from (None for a TabularMDP).

    Args:
        mdp_or_env: a :class:`TabularMDP`, a gymnasium environment, or a registered id.
        horizon: horizon for an MDP built from an environment (default the environment's).

    Raises:
        ValueError: a horizon given together with a ready MDP (use ``mdp.with_horizon``).
        TypeError / ValueError: from :meth:`TabularMDP.from_env`.
    """
    if isinstance(mdp_or_env, TabularMDP):
        if horizon is not None and horizon != mdp_or_env.horizon:
            raise ValueError(
                f"horizon={horizon} conflicts with the MDP's horizon {mdp_or_env.horizon}; "
                "pass mdp.with_horizon(H) instead."
            )
        return mdp_or_env, None
    return TabularMDP.from_env(mdp_or_env, horizon=horizon), mdp_or_env


def state_observations(
    mdp: TabularMDP, observation_space: Any = None, *, observations: Any = None, warn: bool = True
) -> np.ndarray:
    """What a policy observes in each state, as a batch ``(S, ...)`` ready for a forward pass.

    Args:
        mdp: the MDP.
        observation_space: the policy's gymnasium observation space, or None (then the
            MDP's ``observation_matrix`` if it has one, else the state indices).
        observations: explicit ``(S, ...)`` observations that override the MDP's.
        warn: emit :class:`ObservationAliasingWarning` when states share an observation.

    Returns:
        ``(S,)`` int64 state indices for a ``Discrete`` space; ``(S, *space.shape)`` float32
        rows otherwise.

    Raises:
        ValueError: the space does not match the MDP (``Discrete(n)`` with ``n != S``, a ``Box``
            whose shape differs from the observation rows, or a ``Box`` and no observations).
        TypeError: an observation space other than ``Discrete`` or ``Box``.
    """
    obs = _given_observations(mdp, observation_space, observations)
    if observation_space is None:
        assert obs is not None
        if warn and obs.ndim > 1:
            _warn_aliasing(obs, mdp)
        return obs

    import gymnasium as gym

    space = observation_space
    if isinstance(space, gym.spaces.Discrete):
        return _discrete_observations(mdp, space, obs)
    if isinstance(space, gym.spaces.Box):
        obs = _box_observations(mdp, space, obs)
        if warn:
            _warn_aliasing(obs, mdp)
        return obs
    raise TypeError(
        f"the policy observes a {type(space).__name__} space ({space}); policy_table supports "
        "Discrete (state index) and Box (observation vector) observation spaces."
    )


def _given_observations(
    mdp: TabularMDP, observation_space: Any, observations: Any
) -> np.ndarray | None:
    """``observations`` checked to have a row per state; without them and without a space the
    MDP's ``observation_matrix`` or the state indices; else None (the space decides)."""
    S = mdp.n_states
    if observations is not None:
        obs = np.asarray(as_tensor(observations, name="observations").cpu())
        if obs.ndim < 1 or obs.shape[0] != S:
            raise ValueError(
                f"observations must have one row per state ({S}), got shape {obs.shape}."
            )
        return obs
    if observation_space is not None:
        return None
    if mdp.observation_matrix is None:
        return np.arange(S, dtype=np.int64)
    return np.asarray(mdp.observation_matrix.cpu())


def _discrete_observations(mdp: TabularMDP, space: Any, obs: np.ndarray | None) -> np.ndarray:
    """The ``(S,)`` state indices a ``Discrete(S)`` space observes (starting at 0)."""
    S = mdp.n_states
    n, start = int(space.n), int(space.start)
    if start != 0:
        raise ValueError(
            f"the policy observes {space} (start={start}); only Discrete spaces starting at 0 "
            "map to state indices."
        )
    if n != S:
        raise ValueError(
            f"the policy observes Discrete({n}) but {mdp.name} has {S} states; score the "
            "policy in the environment it was trained on (observation spaces mismatch)."
        )
    if obs is not None and obs.ndim != 1:
        raise ValueError(
            f"the policy observes Discrete({n}) state indices, but observations of shape "
            f"{obs.shape} were given; pass (S,) integers or none."
        )
    return np.arange(S, dtype=np.int64) if obs is None else obs.astype(np.int64)


def _box_observations(mdp: TabularMDP, space: Any, obs: np.ndarray | None) -> np.ndarray:
    """The ``(S, *space.shape)`` observation rows a ``Box`` space observes, in its float dtype
    (float32 for other dtypes), channel-first where the space is."""
    if obs is None:
        if mdp.observation_matrix is None:
            raise ValueError(
                f"the policy observes {space} vectors but {mdp.name} has no "
                "observation_matrix (its states are plain indices); build the MDP from the "
                "environment the policy was trained on (TabularMDP.from_env) or pass "
                "observations=(S, ...) explicitly."
            )
        obs = np.asarray(mdp.observation_matrix.cpu())
    obs = _channel_first(obs, space)
    if tuple(obs.shape[1:]) != tuple(space.shape):
        raise ValueError(
            f"the policy observes {space} (shape {tuple(space.shape)}) but {mdp.name} gives "
            f"observations of shape {tuple(obs.shape[1:])} per state; the observation spaces "
            "mismatch (e.g. seals' use_xy_obs differs between training and scoring)."
        )
    return obs.astype(space.dtype if np.issubdtype(space.dtype, np.floating) else np.float32)


def _channel_first(obs: np.ndarray, space: Any) -> np.ndarray:
    """Channel-last images ``(S, H, W, C)`` as ``(S, C, H, W)`` when the policy observes the
    channel-first space (SB3's ``VecTransposeImage`` transposes images before a CNN policy,
    e.g. MiniGrid's); anything else unchanged."""
    shape = tuple(space.shape or ())
    if obs.ndim == 4 and len(shape) == 3 and tuple(obs.shape[1:]) == (*shape[1:], shape[0]):
        return np.ascontiguousarray(obs.transpose(0, 3, 1, 2))
    return obs


def _warn_aliasing(obs: np.ndarray, mdp: TabularMDP) -> None:
    flat = obs.reshape(obs.shape[0], -1)
    _, inverse, counts = np.unique(flat, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    shared = np.flatnonzero(counts > 1)
    if shared.size == 0:
        return
    groups = [np.flatnonzero(inverse == g).tolist() for g in shared[:5]]
    warnings.warn(
        f"{int(counts[shared].sum())} states of {mdp.name} share {shared.size} observations "
        f"(state groups {groups}{' ...' if shared.size > 5 else ''}); the policy cannot tell "
        "them apart, so its table repeats the same row there. Use an environment whose "
        "observations distinguish the states if that is not intended.",
        ObservationAliasingWarning,
        stacklevel=3,
    )


def check_actions(space: Any, mdp: TabularMDP, what: str) -> None:
    """Raise unless ``space`` is ``Discrete`` with the MDP's number of actions.

    Raises:
        TypeError: a non-``Discrete`` (e.g. continuous) action space.
        ValueError: another number of actions.
    """
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Discrete):
        raise TypeError(
            f"{what} has a {type(space).__name__} action space ({space}); MEG needs Discrete "
            "actions matching the tabular MDP (continuous actions have no policy table)."
        )
    if int(space.n) != mdp.n_actions:
        raise ValueError(
            f"{what} chooses among {int(space.n)} actions but {mdp.name} has {mdp.n_actions}; "
            "score it in the environment it was trained on."
        )


def no_epsilon(epsilon: float | None, what: str) -> None:
    """Raise if ``epsilon`` is given for a policy that has its own action probabilities."""
    if epsilon is not None:
        raise ValueError(
            f"epsilon= applies only to argmax policies (DQN, QR-DQN, ARS: epsilon-greedy over "
            f"their action values); {what} already defines its action probabilities. Drop "
            "epsilon=."
        )


def callable_table(
    fn: Callable[[Any], Any], mdp: TabularMDP, *, observations: Any, batch_size: int
) -> th.Tensor:
    """``(S, A)`` table of a callable from a batch of observations ``(S, ...)`` to probabilities.

    Raises:
        ValueError: output of another shape, or rows that are not probabilities.
    """
    obs = state_observations(mdp, None, observations=observations)
    rows = []
    for i in range(0, obs.shape[0], batch_size):
        out = fn(obs[i : i + batch_size])
        rows.append(as_tensor(out, name="callable output", dtype=th.float64).cpu())
    pi = th.cat(rows)
    if tuple(pi.shape) != (mdp.n_states, mdp.n_actions):
        raise ValueError(
            f"the callable must map a batch of {obs.shape[0]} observations (shape {obs.shape}) to "
            f"probabilities ({mdp.n_states}, {mdp.n_actions}), got {tuple(pi.shape)}."
        )
    return as_policy(pi, mdp, name="callable output")
