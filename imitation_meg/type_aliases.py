"""Named type aliases used in signatures across the package (as SB3's ``type_aliases``).

They say what an argument may be where ``Any`` would say nothing; shapes are in the docstrings
of the functions that take them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Protocol, TypeAlias, Union, runtime_checkable

import numpy as np
import torch as th

__all__ = [
    "AnyTensor",
    "ArrayLike",
    "Device",
    "EnvKwargs",
    "EnvLike",
    "GymEnv",
    "JSONDict",
    "JSONValue",
    "ModelLike",
    "PathLike",
    "PolicyLike",
    "PolicySource",
    "Seed",
    "TargetLike",
    "TransitionLike",
    "UtilityLike",
    "VecNormalizeLike",
    "VecStats",
]

#: A numpy array or a torch tensor.
AnyTensor: TypeAlias = np.ndarray | th.Tensor
#: Anything :func:`imitation_meg._validation.as_tensor` reads as a numeric array.
ArrayLike: TypeAlias = (
    np.ndarray | th.Tensor | Sequence[float] | Sequence[Sequence[float]] | float | int
)
#: Policy probabilities ``(S, A)`` or ``(H, S, A)``.
PolicyLike: TypeAlias = ArrayLike
#: A utility ``(S,)``, ``(S, A)`` or ``(S, A, S)``.
UtilityLike: TypeAlias = ArrayLike
#: A torch device or its name.
Device: TypeAlias = th.device | str
#: A seed or a generator for the functions that sample.
Seed: TypeAlias = int | np.random.Generator | None
#: A file-system path.
PathLike: TypeAlias = str | os.PathLike[str]
#: A value that :mod:`json` writes (after :func:`imitation_meg.results.to_jsonable`).
# A recursive alias needs the string form (and so ``Union``) to be valid at run time.
JSONValue: TypeAlias = Union[bool, int, float, str, list["JSONValue"], dict[str, "JSONValue"], None]  # noqa: UP007

#: Transitions: dense ``T[s, a, s']`` ``(S, A, S)``, or a pair ``(next_state, prob)`` of
#: ``(S, A, B)`` arrays.
#: A JSON object (what files and records store).
JSONDict: TypeAlias = dict[str, JSONValue]
#: Keyword arguments of ``gymnasium.make``.
EnvKwargs: TypeAlias = Mapping[str, object]
TransitionLike: TypeAlias = ArrayLike | tuple[ArrayLike, ArrayLike]
#: A target variable: per-state labels, a callable on state indices, a grid helper's name, a
#: ``(S, K)`` probability matrix, or a tuple of several of them.
TargetLike: TypeAlias = Union[  # noqa: UP007 (a tuple of targets refers to the alias)
    str,
    Callable[[int], Hashable],
    Sequence[Hashable],
    np.ndarray,
    th.Tensor,
    tuple["TargetLike", ...],
]


@runtime_checkable
class GymEnv(Protocol):
    """What the package needs of a gymnasium environment: ``reset`` and ``step``."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, object] | None = None
    ) -> object: ...

    def step(self, action: object) -> object: ...


#: An environment or its registered id (``"seals/CliffWorld7x4-v0"``, ``"CartPole-v1"``).
EnvLike: TypeAlias = str | GymEnv


@runtime_checkable
class ModelLike(Protocol):
    """A trained model as SB3 and sb3-contrib make them: a ``policy`` and ``predict``."""

    policy: object

    def predict(self, observation: object, *args: object, **kwargs: object) -> object: ...


#: Anything a policy can be read from: a table ``(S, A)`` / ``(H, S, A)``, an SB3-like model or
#: policy, a saved ``.zip`` or RL Zoo run folder, a callable on observations, or another object
#: an adapter knows (an imitation policy, a name such as ``"uniform"``).
PolicySource: TypeAlias = PolicyLike | ModelLike | PathLike | Callable[..., object] | object


@runtime_checkable
class VecStats(Protocol):
    """Observation statistics as SB3's ``VecNormalize`` keeps them."""

    def normalize_obs(self, obs: object) -> object: ...


#: ``VecNormalize`` statistics: the object, the path of its pickle, ``"auto"`` (beside a saved
#: model), False (none) or None (the default rule of the function that takes them).
VecNormalizeLike: TypeAlias = VecStats | PathLike | bool | None
