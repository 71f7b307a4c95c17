"""What a policy source may be: the checks that refuse anything else, naming the value.

:func:`check_source` is the first step of
:func:`~imitation_meg.adapters.dispatch.resolve_policy`: a path or name, an array of
probabilities, a callable or an SB3 algorithm passes; anything else is refused with a message
that names the value (and the usual mix-up behind it) and lists what is accepted.
"""

from __future__ import annotations

import os

import numpy as np
import torch as th

from imitation_meg._validation import as_tensor
from imitation_meg.adapters import sb3
from imitation_meg.core.mdp import TabularMDP

__all__ = ["check_source"]


#: What :func:`~imitation_meg.adapters.dispatch.resolve_policy` reads, for the messages that refuse anything else.
_ACCEPTED_SOURCES = (
    "an SB3 / sb3-contrib model or policy, the path of a saved .zip (str or pathlib.Path), an "
    "RL Zoo run folder, an imitation load_policy name or TabularPolicy, a callable obs -> "
    "probabilities, or an (S, A) / (H, S, A) array of probabilities"
)


def check_source(obj: object) -> None:
    """Refuse what :func:`~imitation_meg.adapters.dispatch.resolve_policy` cannot read, naming the value and what it accepts.

    Raises:
        TypeError: None, a number, bytes, a list or tuple, a class, or another object that is
            neither a path, a name, an array nor callable.
        ValueError: an empty name; an array that cannot hold probabilities ``(S, A)`` /
            ``(H, S, A)`` (NaN, infinite or negative entries, another number of dimensions,
            no entries).
    """
    if isinstance(obj, str):
        if not obj.strip():
            raise ValueError(
                f"the policy source is the empty name {obj!r}; pass {_ACCEPTED_SOURCES}."
            )
        return
    if isinstance(obj, os.PathLike):
        return
    if isinstance(obj, (th.Tensor, np.ndarray)):
        _check_policy_array(obj)
        return
    if callable(obj) and not isinstance(obj, type):
        return  # SB3 / imitation policies (torch modules), PolicyFn and plain callables
    if sb3.is_sb3_algorithm(obj):
        return
    raise TypeError(f"cannot read a policy from {_describe(obj)}; pass {_ACCEPTED_SOURCES}.")


def _describe(obj: object) -> str:
    """``obj`` named for a refusal: its value when short, and a hint for the usual mix-ups."""
    if obj is None:
        return "None (no policy given)"
    if isinstance(obj, (bytes, bytearray)):
        return f"bytes {bytes(obj)[:60]!r} (a path must be a str or pathlib.Path: decode it)"
    if isinstance(obj, type):
        return (
            f"the class {obj.__name__} itself (pass a trained instance, or the path of the .zip "
            "its save() wrote)"
        )
    if isinstance(obj, (bool, int, float, complex, np.number, np.bool_)):
        return f"{type(obj).__name__} {obj!r}"
    if isinstance(obj, (list, tuple)):
        return (
            f"a {type(obj).__name__} ({len(obj)} items; a probability table must be a numpy "
            "array or torch tensor: wrap it in np.asarray)"
        )
    if isinstance(obj, TabularMDP) or hasattr(obj, "action_space"):
        name = (
            obj.name
            if isinstance(obj, TabularMDP)
            else getattr(getattr(obj, "spec", None), "id", "")
        )
        return (
            f"{type(obj).__name__} {name}".rstrip()
            + " (an MDP or environment: the policy comes first, then where to score it)"
        )
    return f"{type(obj).__name__} {_short_repr(obj)}"


def _short_repr(obj: object) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_policy_array(arr: th.Tensor | np.ndarray) -> None:
    """An array source: real numbers, ``(S, A)`` or ``(H, S, A)``, finite and non-negative."""
    pi = as_tensor(arr, name="the policy array", dtype=th.float64)
    shape = tuple(pi.shape)
    if pi.ndim not in (2, 3) or pi.numel() == 0:
        raise ValueError(
            f"the policy array has shape {shape}; an array policy is (S, A) (stationary) or "
            "(H, S, A) (time-dependent) probabilities with at least one state and action."
        )
    finite = th.isfinite(pi)
    if not bool(finite.all()):
        bad = (~finite).nonzero()
        first = tuple(bad[0].tolist())
        raise ValueError(
            f"the policy array {shape} has {len(bad)} NaN or infinite entries (the first at "
            f"{first}: {float(pi[first])}); pass probabilities."
        )
    if bool((pi < 0).any()):
        first = tuple((pi < 0).nonzero()[0].tolist())
        raise ValueError(
            f"the policy array {shape} has negative entries (the first at {first}: "
            f"{float(pi[first])}); pass probabilities (entries >= 0, rows summing to 1)."
        )
