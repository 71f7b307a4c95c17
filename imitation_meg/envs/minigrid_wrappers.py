"""Which MiniGrid environments and wrappers :func:`~imitation_meg.envs.minigrid.minigrid_mdp`
enumerates, and the standard observation stacks.

An environment is refused when its state is not the grid's alone (moving obstacles, BabyAI
levels), when it rewards otherwise than MiniGrid's success reward, or when its ``step`` is not
among :data:`VERIFIED_STEPS`; a wrapper is refused when it changes the dynamics or its effect on
observations is unknown. :data:`OBSERVATIONS` names the observation stacks an agent is trained
on, and :func:`wrap_observation` puts one around an environment.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["OBSERVATIONS", "VERIFIED_STEPS", "wrap_observation"]

#: Standard observation stacks: name -> wrapper class names, innermost first.
OBSERVATIONS: dict[str, tuple[str, ...]] = {
    "image": ("ImgObsWrapper",),
    "flat": ("FlatObsWrapper",),
    "full": ("FullyObsWrapper", "ImgObsWrapper"),
    "rgb": ("RGBImgPartialObsWrapper", "ImgObsWrapper"),
    "rgb-full": ("RGBImgObsWrapper", "ImgObsWrapper"),
}

#: ``module:Class`` of the ``step`` implementations whose use of state the lockstep tests check:
#: each reads only the grid, the agent, what it carries and attributes fixed at reset.
VERIFIED_STEPS = (
    "minigrid.minigrid_env:MiniGridEnv",
    "minigrid.envs.unlock:UnlockEnv",
    "minigrid.envs.keycorridor:KeyCorridorEnv",
)

# Wrappers that neither change observations nor dynamics (bookkeeping, checks, time limits).
_PASSTHROUGH = frozenset(
    {"TimeLimit", "OrderEnforcing", "PassiveEnvChecker", "RecordEpisodeStatistics", "Monitor"}
)
# Observation wrappers whose ``observation`` keeps state of its own, or wrappers that change
# the dynamics: refused with the reason.
_REFUSED_WRAPPERS = {
    "NoDeath": "it changes what lava does (the MDP would not be the wrapped environment's)",
    "StochasticActionWrapper": "it replaces actions at random",
    "ActionBonus": "it adds a count-based bonus that depends on the episode's history",
    "PositionBonus": "it adds a count-based bonus that depends on the episode's history",
    "ReseedWrapper": "it chooses the layout at each reset; pass seed= instead",
}


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _check_env(u: Any, allow_unverified: bool) -> None:
    """Refuse what cannot be enumerated exactly (see the module docstring)."""
    from minigrid.minigrid_env import MiniGridEnv

    if not isinstance(u, MiniGridEnv):
        raise TypeError(
            f"minigrid_mdp needs a MiniGrid environment, got {type(u).__name__}; for seals and "
            "toy-text environments use TabularMDP.from_env."
        )
    _refuse_hidden_state(u)
    if type(u)._reward is not MiniGridEnv._reward:
        raise ValueError(
            f"{type(u).__name__} overrides _reward; the exact utility assumes MiniGrid's "
            "1 - 0.9 * step_count / max_steps."
        )
    owner = next(c for c in type(u).__mro__ if "step" in vars(c))
    if _class_path(owner) not in VERIFIED_STEPS and not allow_unverified:
        raise ValueError(
            f"{type(u).__name__}'s step ({_class_path(owner)}) is not among the verified ones "
            f"{list(VERIFIED_STEPS)}; if it reads only the grid, the agent, what it carries and "
            "attributes fixed at reset, pass allow_unverified=True (and check the MDP against "
            "the environment, as tests/envs/test_minigrid.py does)."
        )


def _refuse_hidden_state(u: Any) -> None:
    """Refuse random obstacles and BabyAI levels: their state is not the grid's alone."""
    names = {c.__name__ for c in type(u).__mro__}
    if "DynamicObstaclesEnv" in names:
        raise ValueError(
            f"{type(u).__name__} moves its obstacles at random at every step (random dynamics "
            "over obstacle positions that this enumeration does not express); it cannot be "
            "scored exactly."
        )
    if "RoomGridLevel" in names or type(u).__module__.startswith("minigrid.envs.babyai"):
        raise ValueError(
            f"{type(u).__name__} is a BabyAI level: its instructions keep their progress outside "
            "the grid, so its states cannot be enumerated from the grid alone."
        )


def _wrapper_chain(env: Any) -> list[Any]:
    """The wrappers of ``env``, innermost first, checked for what they do to observations."""
    import gymnasium as gym

    chain = []
    w = env
    while isinstance(w, gym.Wrapper):
        chain.append(w)
        w = w.env
    chain.reverse()
    for w in chain:
        name = type(w).__name__
        if name in _REFUSED_WRAPPERS:
            raise ValueError(f"cannot enumerate through {name}: {_REFUSED_WRAPPERS[name]}.")
        if not isinstance(w, gym.ObservationWrapper) and name not in _PASSTHROUGH:
            raise TypeError(
                f"the environment is wrapped in {name}, which is not an observation wrapper; "
                "its effect on observations and dynamics is unknown. Pass the environment "
                f"without it (known pass-through wrappers: {sorted(_PASSTHROUGH)})."
            )
    return [w for w in chain if isinstance(w, gym.ObservationWrapper)]


def wrap_observation(env: Any, observation: str) -> Any:
    """``env`` wrapped in the observation stack named ``observation`` (:data:`OBSERVATIONS`).

    Raises:
        ValueError: an unknown name.
    """
    import minigrid.wrappers as mw

    if observation not in OBSERVATIONS:
        raise ValueError(
            f"unknown observation {observation!r}; choose from {sorted(OBSERVATIONS)} or 'auto' "
            "with observation_space=, or wrap the environment yourself."
        )
    with _quiet_forwarding():
        for name in OBSERVATIONS[observation]:
            env = getattr(mw, name)(env)
    return env


@contextlib.contextmanager
def _quiet_forwarding() -> Iterator[None]:
    """Silence gymnasium 0.29's warning that a wrapper forwards an attribute (``env.width``,
    ``env.get_frame``): minigrid 2.3's own wrappers read them so, not the caller's code."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=".*to get variables from other wrappers is deprecated",
            category=UserWarning,
            module="gymnasium.core",
        )
        yield


def _auto_observation(env: Any, space: Any) -> str:
    """The stack of :data:`OBSERVATIONS` whose observation space equals ``space``."""
    if space is None:
        raise ValueError("observation='auto' needs observation_space= (the agent's space).")
    found = [name for name in OBSERVATIONS if _observes(wrap_observation(env, name), space)]
    if len(found) != 1:
        options = {n: tuple(wrap_observation(env, n).observation_space.shape) for n in OBSERVATIONS}
        raise ValueError(
            f"the agent observes {space}; {'several' if found else 'none'} of the standard "
            f"observation stacks match ({options}); pass observation=<name> or the wrapped "
            "environment."
        )
    return found[0]


def _observes(wrapped: Any, space: Any) -> bool:
    """Whether an agent with observation space ``space`` reads what ``wrapped`` emits."""
    s = wrapped.observation_space
    shape = tuple(s.shape or ())
    # SB3 CNN policies observe images channel-first (VecTransposeImage).
    shapes = {shape} | ({(shape[2], *shape[:2])} if len(shape) == 3 else set())
    return tuple(space.shape or ()) in shapes and s.dtype == space.dtype
