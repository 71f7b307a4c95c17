"""Writing results: one JSON layer (valid JSON for NaN and inf everywhere), CSV tables, and the
``results.json`` + ``<table>.csv`` layout every study writes.

Nothing here imports another module of the package, so results of any layer can be written.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import pathlib
import platform
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg.type_aliases import JSONValue, PathLike

__all__ = [
    "check_output_path",
    "fields_dict",
    "format_table",
    "library_versions",
    "markdown_table",
    "meg_record",
    "read_rows",
    "to_jsonable",
    "write_csv",
    "write_json",
    "write_jsonl",
    "write_results",
    "write_table",
]


def library_versions() -> dict[str, str]:
    """Versions of Python and of the libraries a result depends on (absent ones omitted)."""
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for dist in (
        "imitation-meg",
        "torch",
        "numpy",
        "gymnasium",
        "seals",
        "stable-baselines3",
        "imitation",
        "pettingzoo",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[dist] = metadata.version(dist)
    return versions


def meg_record(
    result: Any, *, expected_return: float, upper_bound: float | None, converged: bool, **more: Any
) -> dict[str, Any]:
    """The record of one MEG evaluation that the callback logs and writes.

    Args:
        result: a MEG result with ``meg``, ``normalized`` and ``beta`` attributes.
        expected_return, upper_bound, converged: the record's fields of those names.
        **more: fields placed right after ``meg`` (an estimate's ``low`` and ``high``).

    Returns:
        ``meg``, ``more``, ``normalized``, ``beta``, ``expected_return``, ``upper_bound`` and
        ``converged`` (a bool), in that order.
    """
    return {
        "meg": result.meg,
        **more,
        "normalized": result.normalized,
        "beta": result.beta,
        "expected_return": expected_return,
        "upper_bound": upper_bound,
        "converged": bool(converged),
    }


def fields_dict(obj: Any) -> dict[str, Any]:
    """JSON-ready dict of a dataclass instance's fields (each read as it is, then converted by
    :func:`to_jsonable`); result classes take it as their ``to_dict``."""
    return to_jsonable(  # type: ignore[return-value]
        {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    )


def to_jsonable(obj: Any) -> JSONValue:
    """Convert results to plain JSON values: dataclasses and mappings to dicts, sequences, arrays
    and tensors to lists, numpy scalars to Python numbers, paths to strings, NaN to ``None`` and
    infinite floats to the strings ``"inf"`` / ``"-inf"`` (so that the JSON stays valid)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, th.Tensor, np.ndarray, np.generic)):
        return _json_sequence(obj)
    if isinstance(obj, float):
        return _json_float(obj)
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def _json_sequence(obj: Any) -> JSONValue:
    """A list, tuple, tensor, array or numpy scalar as plain JSON values."""
    if isinstance(obj, th.Tensor):
        return to_jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, (np.ndarray, np.generic)):
        return to_jsonable(obj.tolist())
    return [to_jsonable(v) for v in obj]


def _json_float(x: float) -> JSONValue:
    """NaN as ``None``, an infinity as ``"inf"`` / ``"-inf"``, any other float as it is."""
    if math.isnan(x):
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def write_json(path: PathLike, payload: Any) -> pathlib.Path:
    """Write ``payload`` (dataclasses, tensors, arrays allowed) as indented JSON; returns the path.

    Infinite floats become the strings ``"inf"`` / ``"-inf"`` and NaN becomes ``null`` so the
    file stays valid JSON.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(payload), indent=2, allow_nan=False) + "\n")
    return path


def write_csv(path: PathLike, rows: Sequence[Mapping[str, Any]]) -> pathlib.Path:
    """Write a list of flat mappings as CSV with the union of their keys as header; returns the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header: list[str] = []
    for row in rows:
        for key in row:
            if key not in header:
                header.append(key)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: to_jsonable(v) for k, v in row.items()})
    return path


def write_results(
    out_dir: PathLike,
    cfg: Any,
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
    **extra: Any,
) -> dict[str, Any]:
    """Write an experiment's tables as ``<name>.csv`` and everything as ``results.json``.

    Args:
        out_dir: the results folder (created if missing).
        cfg: the run's config dataclass (stored under ``"config"``).
        tables: table name -> rows; each becomes ``<out_dir>/<name>.csv`` and a JSON entry.
        **extra: further JSON entries (figures, timings, references).

    Returns:
        The JSON payload: ``config``, ``versions`` (:func:`library_versions`), the tables and
        ``extra``.
    """
    out = pathlib.Path(out_dir)
    payload: dict[str, Any] = {"config": cfg, "versions": library_versions()}
    for name, rows in tables.items():
        write_csv(out / f"{name}.csv", rows)
        payload[name] = list(rows)
    payload.update(extra)
    write_json(out / "results.json", payload)
    is_instance = dataclasses.is_dataclass(cfg) and not isinstance(cfg, type)
    payload["config"] = dataclasses.asdict(cfg) if is_instance else cfg
    return payload


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table: the ``header`` row, the separator and a row per sequence of cells (each
    cell written with ``str``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_table(
    folder: PathLike, stem: str, config: Any, rows: Sequence[Mapping[str, Any]], table: str
) -> dict[str, Any]:
    """Write a study's rows as ``<stem>.csv``, ``<stem>.json`` (with the config and the library
    versions) and its Markdown ``table`` as ``<stem>.md`` in ``folder``.

    Returns:
        ``{"rows": rows, "table": table}``, what the study's ``combine`` returns.
    """
    out = pathlib.Path(folder)
    write_csv(out / f"{stem}.csv", rows)
    write_json(
        out / f"{stem}.json", {"config": config, "versions": library_versions(), "rows": rows}
    )
    (out / f"{stem}.md").write_text(table + "\n")
    return {"rows": rows, "table": table}


def write_jsonl(path: PathLike, rows: Sequence[Mapping[str, Any]]) -> pathlib.Path:
    """Write one JSON object per line (JSON lines); returns the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(to_jsonable(row), allow_nan=False) + "\n")
    return path


def check_output_path(path: PathLike, *, what: str = "output") -> tuple[pathlib.Path, bool]:
    """Check that a file can be written at ``path`` before any work is done.

    Returns:
        The path and whether its parent folder is missing (the writers create it).

    Raises:
        ValueError: ``path`` is an existing folder, its parent is a file, or no file can be
            created in the nearest existing ancestor (tried with an empty temporary file).
    """
    p = pathlib.Path(path)
    if p.is_dir():
        raise ValueError(
            f"{what} {str(p)!r} is a folder; name a file inside it (e.g. {str(p / 'results')!r} "
            "with the right extension)."
        )
    ancestor = p.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{what} {str(p)!r}: {str(ancestor)!r} is a file, not a folder.")
    import os

    if not os.access(ancestor, os.W_OK) or not _can_create_in(ancestor):
        raise ValueError(
            f"{what} {str(p)!r}: no file can be created in the folder {str(ancestor)!r}; name "
            f"a writable place for {what}."
        )
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{what} {str(p)!r} exists and is not writable.")
    return p, not p.parent.exists()


def _can_create_in(folder: pathlib.Path) -> bool:
    """Whether a file can be created in ``folder``: creates and removes a hidden empty one
    (``os.access`` says yes to root everywhere, even under ``/proc``)."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".imitation-meg-check-"):
            return True
    except OSError:
        return False


def read_rows(path: PathLike) -> list[dict[str, Any]]:
    """Rows of a CSV (numbers parsed) or JSON-lines file (``.jsonl`` / ``.json``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not a JSON object, or an empty file.
    """
    p = pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no file at {str(p)!r}.")
    rows: list[dict[str, Any]] = []
    if p.suffix.lower() == ".csv":
        with p.open(newline="") as f:
            for row in csv.DictReader(f):
                rows.append({k: _parse_cell(v) for k, v in row.items()})
    else:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"{str(p)!r} line {i} is not JSON ({e.msg}); pass a .csv or a JSON-lines "
                    "file (one object per line)."
                ) from e
            if not isinstance(obj, dict):
                raise ValueError(f"{str(p)!r} line {i} is not a JSON object.")  # noqa: TRY004
            rows.append(obj)
    if not rows:
        raise ValueError(f"{str(p)!r} holds no rows.")
    return rows


def _parse_cell(text: str | None) -> Any:
    if text is None or text == "":
        return None
    if text in ("True", "False", "true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Render rows of a table as aligned plain text (floats with 4 decimals).

    Args:
        rows: mappings from column name to value.
        columns: column order; default the keys of the first row.
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[_cell_text(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [_aligned(columns, widths), "  ".join("-" * w for w in widths)]
    return "\n".join(lines + [_aligned(row, widths) for row in cells])


def _aligned(texts: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(t.rjust(w) for t, w in zip(texts, widths, strict=True))


def _cell_text(v: Any) -> str:
    """A table cell: yes / no, floats with 4 decimals (``+inf``, ``-inf``, ``nan``), else ``str``."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isinf(v):
            return "+inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return f"{v:.4f}"
    return str(v)
