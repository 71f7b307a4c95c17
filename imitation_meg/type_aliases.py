"""Named type aliases used in signatures across the package (as SB3's ``type_aliases``).

They say what an argument may be where ``Any`` would say nothing; shapes are in the docstrings
of the functions that take them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeAlias, Union

import numpy as np
import torch as th

__all__ = [
    "AnyTensor",
    "ArrayLike",
    "Device",
    "JSONValue",
    "PathLike",
    "PolicyLike",
    "Seed",
    "UtilityLike",
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
