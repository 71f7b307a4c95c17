"""The checks of the approximate estimators' settings, field by field: each raises a
``ValueError`` or ``TypeError`` that names the field and what it accepts
(:class:`~imitation_meg.approx.options.ApproxOptions` runs them when a record is made).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from imitation_meg.approx.defaults import METHODS
from imitation_meg.approx.soft_q import _check_int, check_average, check_device, check_lr

__all__ = ["checked_fields"]


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _check_open(name: str, v: Any, hi: float, what: str) -> None:
    """Raise ``ValueError`` unless ``v`` is a real number (not a bool) in ``(0, hi)``."""
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float, np.integer, np.floating))
        or not 0.0 < float(v) < hi
    ):
        raise ValueError(f"{name} must be {what}, got {v!r}.")


def checked_fields(o: Any) -> dict[str, Any]:
    """Check every field of the settings record ``o``; returns the fields whose value is
    normalised (``hidden`` a tuple of ints, ``refine`` an int where given, ``device`` as torch
    names it).

    Raises:
        ValueError / TypeError: the first field that is not what it accepts.
    """
    _check_counts(o)
    out: dict[str, Any] = {"hidden": _checked_hidden(o.hidden)}
    _check_steps(o)
    if o.refine is not None:
        out["refine"] = _checked_refine(o.refine)
    _check_run(o)
    out["device"] = check_device(o.device)
    _check_methods(o)
    return out


def _check_counts(o: Any) -> None:
    """The counts: data steps, episodes, replicates, fits."""
    for name, lo in (("n_data_steps", 3), ("n_eval_episodes", 2), ("n_boot", 0)):
        if getattr(o, name) is not None:
            _check_int(name, getattr(o, name), lo)
    _check_int("n_models", o.n_models, 1)


def _check_steps(o: Any) -> None:
    """Iterations, steps per iteration, environments, action grid points."""
    for name in ("iterations", "steps_per_iteration", "n_envs", "grid_points"):
        if getattr(o, name) is not None:
            _check_int(name, getattr(o, name), 1)


def _checked_hidden(hidden: Any) -> tuple[int, ...]:
    """The hidden layer sizes as a tuple of ints."""
    if not isinstance(hidden, (tuple, list)) or not all(_is_int(h) and h >= 1 for h in hidden):
        raise ValueError(
            f"hidden must be a sequence of positive layer sizes, e.g. (64, 64), got {hidden!r}."
        )
    return tuple(int(h) for h in hidden)


def _checked_refine(refine: Any) -> int:
    """``refine`` (True, False or a count of refits) as an int."""
    if not isinstance(refine, bool) and (not _is_int(refine) or int(refine) < 0):
        raise ValueError(f"refine must be True, False or an integer >= 0, got {refine!r}.")
    return int(refine)


def _check_run(o: Any) -> None:
    """The interval, the seed, the progress bar, the memory and the fits' steps."""
    _check_open("confidence", o.confidence, 1.0, "a number strictly between 0 and 1")
    if not _is_int(o.seed):
        raise TypeError(f"seed must be an integer, got {o.seed!r}.")
    if not isinstance(o.progress, bool):
        raise TypeError(f"progress must be True or False, got {o.progress!r}.")
    _check_open("data_memory_gib", o.data_memory_gib, math.inf, "a positive number")
    check_average(o.average)
    check_lr(o.lr)
    _check_int("last_steps", o.last_steps, 0)


def _check_methods(o: Any) -> None:
    """The method and the settings of the other methods."""
    if o.method is not None and o.method not in METHODS:
        raise ValueError(f"method must be None or one of {METHODS}, got {o.method!r}.")
    if o.n_particles is not None:
        _check_int("n_particles", o.n_particles, 4)
    if o.n_starts is not None:
        _check_int("n_starts", o.n_starts, 2)
    _check_int("max_states", o.max_states, 1)
    _check_int("n_features", o.n_features, 0)
