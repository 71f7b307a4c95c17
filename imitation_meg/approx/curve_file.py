"""A soft-value curve's data: its provenance (:class:`CurveInfo`: what it was computed for, and
how), the checks of its arrays (the grid, the units' values and slopes, the allowances, the
starts), and its file: the ``.npz`` format that
:meth:`~imitation_meg.approx.curve.SoftValueCurve.save` writes and
:meth:`~imitation_meg.approx.curve.SoftValueCurve.load` reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import zipfile
from typing import Any

import numpy as np

from imitation_meg.type_aliases import ArrayLike, JSONDict

__all__ = ["FORMAT", "CurveInfo", "read_curve", "write_curve"]

#: The file format's version (``SoftValueCurve.save``).
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class CurveInfo:
    """What a curve was computed for, and how (recorded in its file).

    Attributes:
        env: the environment's gymnasium id, or a name for an MDP or a factory.
        env_kwargs: keyword arguments the environment was made with.
        horizon: decisions per episode ``H``.
        actions: the action space (:meth:`~imitation_meg.approx.spaces.ActionSpace.to_dict`).
        method: how it was computed (``"exact"``, ``"paths"``, ...).
        settings: the estimator's settings.
        seed: the seed of its random draws (None for an exact curve).
        version: the library version that computed it.
        reward: what the utility is.
        starts: where episodes start.
    """

    env: str
    env_kwargs: JSONDict
    horizon: int
    actions: JSONDict
    method: str
    settings: JSONDict = dataclasses.field(default_factory=dict)
    seed: int | None = None
    version: str = ""
    reward: str = "the environment's reward"
    starts: str = "the environment's reset distribution"

    def __post_init__(self) -> None:
        if not self.version:
            object.__setattr__(self, "version", _library_version())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    def differences(
        self, *, env: str, horizon: int, actions: dict[str, Any], env_kwargs: Any
    ) -> str:
        """What differs between this curve's problem and the one given ("" when none)."""
        diffs = []
        if env != self.env:
            diffs.append(f"environment {env!r} (the curve's: {self.env!r})")
        kwargs = _jsonable(dict(env_kwargs or {}))
        if kwargs != self.env_kwargs:
            diffs.append(f"env_kwargs {kwargs} (the curve's: {self.env_kwargs})")
        if int(horizon) != int(self.horizon):
            diffs.append(f"horizon {horizon} (the curve's: {self.horizon})")
        if actions != self.actions:
            diffs.append(f"actions {actions} (the curve's: {self.actions})")
        return "; ".join(diffs)


def _library_version() -> str:
    """This library's version (``imitation_meg.__version__``, read from the package already
    imported: it sits above this module, which does not import it)."""
    import sys

    return str(sys.modules["imitation_meg"].__version__)


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (the form a file stores and compares)."""
    from imitation_meg.results import to_jsonable

    return json.loads(json.dumps(to_jsonable(value)))


def write_curve(
    path: str | os.PathLike[str], arrays: dict[str, np.ndarray], meta: JSONDict
) -> pathlib.Path:
    """Write a curve's arrays and its metadata (``meta``, with :data:`FORMAT` added) to
    ``path`` (an ``.npz`` file; the suffix is added when missing). Non-finite effective sample
    sizes (``arrays["ess"]``) are stored as -1. Returns the path written."""
    p = pathlib.Path(path)
    if p.suffix != ".npz":
        p = p.with_name(p.name + ".npz")
    meta = {"format": FORMAT, **meta}
    ess = arrays["ess"]
    with open(p, "wb") as fh:
        np.savez_compressed(
            fh,
            **{**arrays, "ess": np.where(np.isfinite(ess), ess, -1.0)},
            meta=np.array(json.dumps(meta)),
        )
    return p


def read_curve(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The constructor arguments of a curve in a file written by :func:`write_curve`:
    ``betas``, ``log_z``, ``slopes``, ``info`` and the keyword arguments.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a file that is not a curve of this format.
    """
    p = pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no soft-value curve file at {str(p)!r}.")
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as e:
        raise ValueError(
            f"{str(p)!r} is not a soft-value curve file written by SoftValueCurve.save "
            f"({type(e).__name__}: {e})."
        ) from None
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{str(p)!r} has curve format {meta.get('format')!r}; this library reads "
            f"format {FORMAT}: compute the curve again."
        )
    ess = arrays["ess"]
    starts = arrays.get("starts")
    return {
        "betas": arrays["betas"],
        "log_z": arrays["log_z"],
        "slopes": arrays["slopes"],
        "info": CurveInfo(**meta["info"]),
        "bias": arrays["bias"],
        "ess": np.where(ess < 0, np.inf, ess),
        "trusted": (float(meta["trusted"][0]), float(meta["trusted"][1])),
        "returns_found": (float(meta["returns_found"][0]), float(meta["returns_found"][1])),
        "min_ess": float(meta["min_ess"]),
        "problems": tuple(meta.get("problems", ())),
        "starts": None if starts is None or starts.size == 0 else starts,
    }


def _checked_grid(
    betas: ArrayLike, log_z: ArrayLike, slopes: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid ``(G,)`` and the units' values and slopes ``(K, G)`` as float64, checked.

    Raises:
        ValueError: an unsorted grid, one without 0, mismatched shapes, non-finite values.
    """
    b = np.asarray(betas, dtype=np.float64)
    lz = np.atleast_2d(np.asarray(log_z, dtype=np.float64))
    sl = np.atleast_2d(np.asarray(slopes, dtype=np.float64))
    G = b.size
    if b.ndim != 1 or G < 3 or np.any(np.diff(b) <= 0) or 0.0 not in b:
        raise ValueError(
            f"a curve needs an ascending grid of at least 3 rationalities that includes 0, "
            f"got {G} values."
        )
    if lz.shape != sl.shape or lz.shape[1] != G:
        raise ValueError(f"log_z and slopes must both be (K, {G}), got {lz.shape} and {sl.shape}.")
    if not (np.all(np.isfinite(lz)) and np.all(np.isfinite(sl))):
        raise ValueError("a curve's values and slopes must be finite.")
    return b, lz, sl


def _trusted_run(betas: np.ndarray, ess: np.ndarray, min_ess: float) -> tuple[float, float]:
    """The rationalities at the ends of the run of grid points around 0 with at least
    ``min_ess`` effective samples."""
    bad = ess < min_ess
    zero = int(np.searchsorted(betas, 0.0))
    below = np.flatnonzero(bad[:zero])
    above = np.flatnonzero(bad[zero + 1 :])
    lo = int(below[-1]) + 1 if below.size else 0
    hi = zero + int(above[0]) if above.size else len(betas) - 1
    return float(betas[lo]), float(betas[hi])


def _checked_allowances(
    G: int, bias: np.ndarray | None, ess: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The bias allowance and effective sample sizes ``(G,)`` (0 and inf by default).

    Raises:
        ValueError: either of another shape.
    """
    bias = np.zeros(G) if bias is None else np.asarray(bias, dtype=np.float64)
    ess = np.full(G, np.inf) if ess is None else np.asarray(ess, dtype=np.float64)
    if bias.shape != (G,) or ess.shape != (G,):
        raise ValueError(f"bias and ess must be ({G},), got {bias.shape}, {ess.shape}.")
    return bias, ess


def _checked_starts(starts: np.ndarray | None, K: int) -> np.ndarray | None:
    """The units' starts ``(K, d)`` as float64 (None stays None).

    Raises:
        ValueError: not one start per unit.
    """
    if starts is None:
        return None
    out = np.asarray(starts, dtype=np.float64)
    if len(out) != K:
        raise ValueError(f"starts must give one state per unit ({K}), got {len(out)}.")
    return out
