"""Publishing a finished run: copy its results from ``results/<study>`` into ``docs/results/``.

Full runs write under ``results/`` (ignored by git); what the docs show is copied from there by
this explicit step, so that a run never overwrites tracked files by itself. Only a finished run
is published: its folder must hold the runner's ``run.json`` marked complete (or, for a driver
without units, its ``results.json``). The per-unit files (``units/``), failure reports and
checkpoints stay behind; the files at the top of the folder (tables, JSON, figures, the run log)
are copied, except files larger than ``max_bytes`` (a long study's per-episode tables), which
stay in ``results/`` and are reported as left out.
"""

from __future__ import annotations

import filecmp
import json
import pathlib
import shutil
from typing import Any

from imitation_meg.type_aliases import PathLike

__all__ = ["DEFAULT_MAX_BYTES", "publish"]

#: Largest file copied into the docs by default (2 MiB): the repository keeps summaries and
#: figures, not raw per-episode logs.
DEFAULT_MAX_BYTES = 2 * 1024 * 1024


def publish(
    results_dir: PathLike,
    *,
    to: PathLike | None = None,
    docs_root: PathLike = "docs/results",
    max_bytes: int | None = DEFAULT_MAX_BYTES,
) -> dict[str, list[str]]:
    """Copy a finished run's result files into the docs.

    Args:
        results_dir: the run's results folder, e.g. ``results/extended_table1``.
        to: the destination folder; default ``<docs_root>/<name of results_dir>``.
        docs_root: where published results live (relative to the working directory).
        max_bytes: files larger than this are not copied (None: no limit).

    Returns:
        ``{"new": [...], "updated": [...], "unchanged": [...], "left_out": [...]}``:
        destination paths by status (``left_out``: the source paths of files over
        ``max_bytes``).

    Raises:
        ValueError: the folder is missing, holds no finished run, or the destination's parent
            does not exist (run from the repository root or pass ``to``).
    """
    src = pathlib.Path(results_dir)
    _check_finished(src)
    _check_max_bytes(max_bytes)
    dest = _destination(src, to, docs_root)
    files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        raise ValueError(f"{str(src)!r} has no result files to publish.")
    dest.mkdir(exist_ok=True)
    status: dict[str, list[str]] = {"new": [], "updated": [], "unchanged": [], "left_out": []}
    for f in files:
        if max_bytes is not None and f.stat().st_size > max_bytes:
            status["left_out"].append(str(f))
            continue
        target = dest / f.name
        kind = _copy(f, target)
        status[kind].append(str(target))
    return status


def _check_finished(src: pathlib.Path) -> None:
    """A results folder holding a complete run (its ``run.json`` says so; a study without the
    unit protocol leaves a ``results.json`` only).

    Raises:
        ValueError: the folder is missing, or holds no complete run.
    """
    if not src.is_dir():
        raise ValueError(f"results folder {str(src)!r} does not exist; run the study first.")
    log = src / "run.json"
    if log.is_file():
        try:
            complete = bool(json.loads(log.read_text()).get("complete"))
        except ValueError:
            complete = False
        if not complete:
            raise ValueError(
                f"{str(log)!r} does not mark a complete run; finish it with imitation-meg "
                "reproduce (it resumes) before publishing."
            )
    elif not (src / "results.json").is_file():
        raise ValueError(
            f"{str(src)!r} holds no finished run (no run.json); run imitation-meg reproduce "
            "CONFIG first, then publish its results folder."
        )


def _check_max_bytes(max_bytes: Any) -> None:
    """``max_bytes``: a non-negative integer or None.

    Raises:
        ValueError: anything else (booleans included).
    """
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0
    ):
        raise ValueError(f"max_bytes must be a non-negative integer or None, got {max_bytes!r}.")


def _destination(src: pathlib.Path, to: PathLike | None, docs_root: PathLike) -> pathlib.Path:
    """The published folder: ``to``, or ``<docs_root>/<name of src>``.

    Raises:
        ValueError: its parent does not exist, or it is the results folder itself.
    """
    dest = pathlib.Path(to) if to is not None else pathlib.Path(docs_root) / src.name
    if not dest.parent.is_dir():
        raise ValueError(
            f"the destination's folder {str(dest.parent)!r} does not exist; run from the "
            "repository root or pass --to."
        )
    if dest.resolve() == src.resolve():
        raise ValueError(f"{str(src)!r} is already the destination; pass --to.")
    return dest


def _copy(f: pathlib.Path, target: pathlib.Path) -> str:
    """Copy ``f`` to ``target`` unless it holds the same bytes: ``new``, ``updated`` or
    ``unchanged``."""
    if not target.exists():
        kind = "new"
    elif filecmp.cmp(f, target, shallow=False):
        kind = "unchanged"
    else:
        kind = "updated"
    if kind != "unchanged":
        shutil.copyfile(f, target)
    return kind
