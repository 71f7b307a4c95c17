"""Environments given only through reset / step: :class:`EnvSource` makes fresh copies of an
environment (a gymnasium id, an instance, or a factory), reads its action space (``Discrete``,
or a bounded ``Box``: its uniform reference, :mod:`imitation_meg.approx.spaces`) and its
horizon: ``horizon=`` if given, else the ``TimeLimit`` of the registration
(``env.spec.max_episode_steps``), else a seals-style ``env.unwrapped.horizon``. Rollouts are
collected from it by :mod:`imitation_meg.approx.rollouts`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg.type_aliases import EnvKwargs, EnvLike, GymEnv

__all__ = ["MAX_HORIZON", "EnvSource"]

#: The longest horizon the approximate estimators take.
MAX_HORIZON = 100_000


class EnvSource:
    """Fresh copies of an environment with ``Discrete`` or bounded ``Box`` actions, and its
    horizon.

    Args:
        env: a registered gymnasium id, a ``gymnasium.Env`` (copied with ``copy.deepcopy``),
            or a zero-argument factory returning one.
        horizon: number of decisions ``H`` per episode; default the environment's time limit.
        env_kwargs: keyword arguments of ``gymnasium.make`` (with an id only).

    Attributes:
        observation_space: the environment's observation space.
        actions: the action space with its uniform reference
            (:class:`~imitation_meg.approx.spaces.ActionSpace`).
        n_actions: ``|A|`` (0 for a box; then ``low``, ``high``, ``action_dim`` and
            ``action_shape`` describe it).
        horizon: ``H``.
        name: the environment's id (or its class name).
        obs_dim: the flat observation size ``d``.
        env_kwargs: the keyword arguments the environment is made with.

    Raises:
        TypeError: an action space that is neither Discrete nor a Box, an argument that is not
            an environment, or ``env_kwargs`` with something other than an id.
        ValueError: no horizon can be found (pass ``horizon=``), a non-positive horizon, or an
            unbounded box.
    """

    def __init__(
        self,
        env: EnvLike | Callable[[], GymEnv],
        *,
        horizon: int | None = None,
        env_kwargs: EnvKwargs | None = None,
    ) -> None:
        import gymnasium as gym

        self.env_kwargs = dict(env_kwargs or {})
        self._factory, self.name = self._factory_of(env)
        probe = self._probe()
        self._read_actions(probe)
        self.observation_space = probe.observation_space
        self.env_limit = _time_limit(probe)
        self.horizon = self._checked_horizon(self.env_limit if horizon is None else horizon)
        self.obs_dim = _flat_size(self.observation_space, self.name)
        self._box = isinstance(self.observation_space, gym.spaces.Box)
        probe.close()

    def _factory_of(self, env: EnvLike | Callable[[], GymEnv]) -> tuple[Callable[[], Any], str]:
        """A factory of fresh copies of ``env`` and its name.

        Raises:
            TypeError: ``env_kwargs`` with something other than an id, or an argument that is
                not an environment.
            ValueError: an id gymnasium does not know.
        """
        import gymnasium as gym

        if self.env_kwargs and not isinstance(env, str):
            raise TypeError(
                f"env_kwargs {sorted(self.env_kwargs)} apply to an environment id, not to a "
                f"{type(env).__name__}; pass the id, or make the environment yourself."
            )
        if isinstance(env, str):
            return self._id_factory(env), env
        if isinstance(env, gym.Env):
            proto = env
            name = proto.spec.id if proto.spec is not None else type(proto.unwrapped).__name__
            return lambda: copy.deepcopy(proto), name
        if callable(env):
            return env, getattr(env, "__name__", "env")
        raise TypeError(
            f"env must be a gymnasium id, a gymnasium.Env or a factory, got {type(env).__name__}."
        )

    def _id_factory(self, env_id: str) -> Callable[[], Any]:
        """``gymnasium.make`` of a registered id with the ``env_kwargs``.

        Raises:
            ValueError: an id gymnasium does not know.
        """
        import gymnasium as gym

        kwargs = self.env_kwargs
        if env_id.startswith("seals/"):
            import seals  # noqa: F401 (registers the seals environment ids)
        try:
            gym.spec(env_id)
        except gym.error.Error as e:
            from imitation_meg.approx.ale import register_games

            if not register_games(env_id):  # an Atari id before ale_py registered it
                raise ValueError(f"could not make environment {env_id!r}: {e}") from e
        return lambda: gym.make(env_id, **kwargs)  # type: ignore[arg-type]

    def _probe(self) -> Any:
        """A first copy of the environment, checked to be one.

        Raises:
            ValueError: the ``env_kwargs`` do not make it.
            TypeError: the factory returned something else.
        """
        import gymnasium as gym

        try:
            probe = self._factory()
        except (TypeError, gym.error.Error) as e:
            if not self.env_kwargs:
                raise
            raise ValueError(
                f"could not make {self.name} with env_kwargs {self.env_kwargs}: {e}"
            ) from None
        if not isinstance(probe, gym.Env):
            raise TypeError(
                f"the env factory returned {type(probe).__name__}, not a gymnasium.Env."
            )
        return probe

    def _checked_horizon(self, horizon: Any) -> int:
        """``horizon`` (``None``: none was found) as a positive int at most
        :data:`MAX_HORIZON`.

        Raises:
            ValueError: no horizon, a non-positive one, or one too long.
        """
        if horizon is None:
            raise ValueError(
                f"{self.name} has no time limit (spec.max_episode_steps or a horizon attribute); "
                "pass horizon=H, the number of decisions per episode to score."
            )
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}.")
        if horizon > MAX_HORIZON:
            raise ValueError(
                f"horizon={horizon} decisions: the approximate estimators step through every "
                f"decision of every episode, and hold a value per decision; at most "
                f"{MAX_HORIZON} are supported. Pass a shorter horizon= (the episodes' own length "
                "is usually far less)."
            )
        return int(horizon)

    def _read_actions(self, probe: Any) -> None:
        """Check the action space of a fresh copy and keep what the estimator needs of it: its
        uniform reference (``actions``), and ``n_actions`` (0 for a box) or the box's bounds."""
        from imitation_meg.approx.spaces import action_space_of

        self.actions = action_space_of(probe.action_space, name=self.name)
        if self.actions.is_box:
            box = self.actions
            self.n_actions = 0  # no finite action set
            self.low, self.high = box.low, box.high  # type: ignore[attr-defined]
            self.action_dim = box.dim  # type: ignore[attr-defined]
            self.action_shape = tuple(probe.action_space.shape)
        else:
            self.n_actions = int(probe.action_space.n)

    def make(self) -> Any:
        """A fresh copy of the environment."""
        return self._factory()

    def flatten(self, obs: list[Any]) -> np.ndarray:
        """Flat float32 observations ``(n, obs_dim)`` for a list of raw observations."""
        if self._box:
            return np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        import gymnasium as gym

        space = self.observation_space
        rows: list[Any] = [gym.spaces.flatten(space, o) for o in obs]
        return np.stack(rows).astype(np.float32)

    def stack(self, obs: list[Any]) -> Any:
        """Raw observations as one batch (an array, or a dict of arrays for ``Dict`` spaces)."""
        if isinstance(obs[0], dict):
            return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
        return np.stack([np.asarray(o) for o in obs])


def _flat_size(space: Any, name: str) -> int:
    """The size of ``space``'s observations flattened for the estimators' networks.

    Raises:
        ValueError: a space gymnasium cannot flatten to a vector (a ``Text`` mission, a
            ``Graph``), with what to do.
    """
    import gymnasium as gym

    try:
        flat = bool(space.is_np_flattenable)
    except NotImplementedError:  # a Text or Graph part, inside a Dict or Tuple
        flat = False
    if not flat:
        raise ValueError(
            f"{name}'s observations ({space}) cannot be flattened to a vector for the "
            "approximate estimators (a Text or Graph part, such as MiniGrid's mission). Wrap the "
            "environment to keep the numeric parts (MiniGrid: its ImgObsWrapper or "
            "FlatObsWrapper), or score a fixed-layout MiniGrid exactly (imitation-meg score "
            "--env MiniGrid-... without --approx)."
        )
    return int(gym.spaces.flatdim(space))


def _time_limit(env: Any) -> int | None:
    """The environment's own limit on decisions: its ``TimeLimit`` (``spec.max_episode_steps``),
    a seals-style ``horizon``, or a MiniGrid-style ``max_steps``."""
    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None) if spec is not None else None
    for attr in ("horizon", "max_steps"):
        if limit is None:
            limit = getattr(env.unwrapped, attr, None)
    return int(limit) if isinstance(limit, (int, np.integer)) and limit > 0 else None
