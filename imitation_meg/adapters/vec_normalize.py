"""``VecNormalize`` statistics of SB3 models: found beside a saved model, loaded, checked.

A policy trained on normalised observations acts differently on raw ones, so its MEG without the
statistics is another policy's. :func:`stats_beside` finds the statistics saved next to a model
(RL Zoo and ``CheckpointCallback`` layouts); :func:`vec_normalize_for_file` turns a model scored
without the statistics beside it into an :class:`UnusedStatisticsWarning`, never silence.

stable_baselines3 is imported only inside functions.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import re
import warnings
from typing import Any

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.type_aliases import PathLike

__all__ = [
    "UnusedStatisticsWarning",
    "resolve_vec_normalize",
    "stats_beside",
    "vec_normalize_for_file",
    "vec_normalize_of",
]


class UnusedStatisticsWarning(ImitationMEGWarning):
    """``VecNormalize`` statistics lie beside the model but were not used.

    A policy trained on normalised observations acts differently on raw ones, so its MEG without
    the statistics is another policy's. Pass ``vec_normalize=`` (``"auto"`` takes the file
    found beside the model; ``--vec-normalize auto`` on the command line), or
    ``vec_normalize=False`` if the model was trained without them.
    """


_CHECKPOINT = re.compile(r"^(?P<prefix>.*)_(?P<steps>\d+)_steps$")


def stats_beside(model_path: PathLike) -> pathlib.Path | None:
    """``VecNormalize`` statistics saved next to a model, in the layouts SB3 and RL Zoo write.

    - ``<dir>/<name>/vecnormalize.pkl`` beside ``<dir>/<name>.zip`` (RL Zoo's final model);
    - ``<dir>/<prefix>_vecnormalize_<n>_steps.pkl`` beside ``<dir>/<prefix>_<n>_steps.zip``
      (``CheckpointCallback(save_vecnormalize=True)``);
    - ``<dir>/vecnormalize.pkl`` or ``<dir>/<env>/vecnormalize.pkl`` for any other zip of an
      RL Zoo run folder (``best_model.zip``: RL Zoo saves the statistics there with it).

    Returns:
        The path, or None when there is none.
    """
    p = pathlib.Path(model_path)
    if p.is_dir():
        p = p / "model.zip"
    folder, stem = p.parent, p.stem
    options = [folder / stem / "vecnormalize.pkl"]
    m = _CHECKPOINT.match(stem)
    if m:
        options.append(folder / f"{m['prefix']}_vecnormalize_{m['steps']}_steps.pkl")
    options.append(folder / "vecnormalize.pkl")
    subdirs = [d for d in folder.iterdir() if d.is_dir() and (d / "vecnormalize.pkl").is_file()]
    if len(subdirs) == 1 and (subdirs[0] / "config.yml").is_file():  # an RL Zoo run folder
        options.append(subdirs[0] / "vecnormalize.pkl")
    return next((o for o in options if o.is_file()), None)


def vec_normalize_of(model: Any) -> Any:
    """The ``VecNormalize`` wrapping a live model's environment, or None."""
    from stable_baselines3.common.vec_env import unwrap_vec_normalize

    env = model.get_env() if hasattr(model, "get_env") else None
    return None if env is None else unwrap_vec_normalize(env)


def resolve_vec_normalize(vec_normalize: Any) -> Any:
    """A ``VecNormalize`` (object or saved path) with observation statistics, or None.

    Raises:
        FileNotFoundError: a path that does not exist.
        TypeError: an object (or pickle) that is not a ``VecNormalize``.
        ValueError: a ``VecNormalize`` that never saw an observation.
    """
    if vec_normalize is None or vec_normalize is False:
        return None
    if isinstance(vec_normalize, (str, os.PathLike)):
        p = pathlib.Path(vec_normalize)
        if not p.is_file():
            raise FileNotFoundError(
                f"no VecNormalize statistics at {str(p)!r}; pass the file written by "
                "VecNormalize.save()."
            )
        with p.open("rb") as f:
            vec_normalize = pickle.load(f)
    if not hasattr(vec_normalize, "normalize_obs") or not hasattr(vec_normalize, "obs_rms"):
        raise TypeError(
            f"vec_normalize must be a VecNormalize or the path of one saved with "
            f"VecNormalize.save(), got {type(vec_normalize).__name__}."
        )
    if not getattr(vec_normalize, "norm_obs", True):
        return None  # reward-only normalisation: observations reach the policy unchanged
    rms = vec_normalize.obs_rms
    counts = [r.count for r in rms.values()] if isinstance(rms, dict) else [rms.count]
    if max(counts) <= 1e-4 + 1e-12:
        raise ValueError(
            "the VecNormalize has no observation statistics (obs_rms was never updated); the "
            "policy was trained on normalised observations, so scoring needs the training "
            "statistics: load them with VecNormalize.load(path, venv) and pass vec_normalize=."
        )
    return vec_normalize


def vec_normalize_for_file(model_path: PathLike, vec_normalize: Any) -> Any:
    """The statistics to use for a model loaded from ``model_path``.

    ``"auto"`` takes the file :func:`stats_beside` finds (an error if there is none); None
    uses none but warns when statistics lie beside the model; False uses none silently; a path
    or a ``VecNormalize`` is used as given.

    Raises:
        ValueError: ``"auto"`` with no statistics beside the model.

    Warns:
        UnusedStatisticsWarning: statistics beside the model, left unused.
    """
    if isinstance(vec_normalize, str) and vec_normalize == "auto":
        found = stats_beside(model_path)
        if found is None:
            raise ValueError(
                f"vec_normalize='auto' found no VecNormalize statistics beside "
                f"{str(model_path)!r} (looked for <name>/vecnormalize.pkl, "
                "<prefix>_vecnormalize_<n>_steps.pkl and vecnormalize.pkl); pass the file."
            )
        return found
    if vec_normalize is None:
        found = stats_beside(model_path)
        if found is not None:
            warnings.warn(
                f"VecNormalize statistics lie beside {str(model_path)!r} ({str(found)!r}) but "
                "are not used: a policy trained on normalised observations is then scored on "
                "raw ones. Pass vec_normalize='auto' (CLI: --vec-normalize auto) to use them, "
                "or vec_normalize=False if the model was trained without normalisation.",
                UnusedStatisticsWarning,
                stacklevel=3,
            )
    return vec_normalize
