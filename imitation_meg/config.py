"""Typed experiment configs and result writers shared by every study under ``experiments/``.

A config is a YAML mapping whose top-level key ``experiment`` names a driver file
``experiments/<experiment>.py`` beside the ``configs/`` folder. The driver defines a frozen
dataclass ``Config`` and a function ``main(cfg: Config) -> dict``. Every other key of the YAML
becomes a field of ``Config``; unknown keys raise ``ValueError`` so that typos never pass silently.

Example:
    >>> from imitation_meg.config import run_config
    >>> results = run_config("configs/cliffworld_epsilon_fast.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import pathlib
import platform
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "load_config",
    "load_yaml",
    "load_driver",
    "run_config",
    "library_versions",
    "write_json",
    "write_csv",
    "write_results",
    "progress",
]

C = TypeVar("C")


def load_yaml(path: str | pathlib.Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path``.

    Raises:
        ValueError: if the file does not exist or does not hold a mapping.
    """
    import yaml  # optional dependency (extra "experiments")

    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist; pass the path of a YAML file.")
    with path.open() as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise ValueError(
            f"config file {str(path)!r} must hold a YAML mapping, got {type(data).__name__}."
        )
    return data


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML value to the annotated type ``tp`` (dataclasses, tuples, optionals)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        raise TypeError(f"{where}: {value!r} matches none of {tp}: {'; '.join(errors)}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected a mapping for {tp.__name__}, got {value!r}.")
        return load_config(value, tp, where=where)
    if origin in (tuple, Sequence, list) or tp in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{where}: expected a list, got {value!r}.")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if origin is tuple and args:
            if len(args) != len(value):
                raise ValueError(f"{where}: expected {len(args)} entries, got {len(value)}.")
            return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected a mapping, got {value!r}.")
        return dict(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "-inf", "nan"):
                return float(value)
            raise TypeError(f"{where}: expected a number, got {value!r}.")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: expected an integer, got {value!r}.")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{where}: expected true or false, got {value!r}.")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"{where}: expected a string, got {value!r}.")
        return value
    if typing.get_origin(tp) is typing.Literal:
        if value not in args:
            raise ValueError(f"{where}: {value!r} is not one of {args}.")
        return value
    return value


def load_config(data: Mapping[str, Any] | str | pathlib.Path, cls: type[C], *, where: str = "config") -> C:
    """Build the frozen dataclass ``cls`` from a mapping or a YAML file.

    Args:
        data: a mapping of field names to values, or the path of a YAML file holding one.
            The key ``experiment`` is ignored (it names the driver, see :func:`run_config`).
        cls: a dataclass type; nested dataclass fields are built recursively and list
            values become tuples.
        where: prefix for error messages.

    Returns:
        An instance of ``cls``.

    Raises:
        ValueError: unknown keys, missing required keys, or values of the wrong shape.
        TypeError: ``cls`` is not a dataclass, or a value has the wrong type.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"load_config needs a dataclass type, got {cls!r}.")
    if isinstance(data, (str, pathlib.Path)):
        data = load_yaml(data)
    data = {k: v for k, v in data.items() if k != "experiment"}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(
            f"{where}: unknown keys {unknown} for {cls.__name__}; valid keys are {sorted(fields)}."
        )
    missing = [
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    ]
    if missing:
        raise ValueError(f"{where}: missing required keys {missing} for {cls.__name__}.")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    return cls(**kwargs)


def load_driver(name: str, experiments_dir: str | pathlib.Path) -> types.ModuleType:
    """Import ``experiments_dir/<name>.py`` and check it defines ``Config`` and ``main``.

    Raises:
        ValueError: if the file is missing or lacks ``Config`` / ``main``.
    """
    path = pathlib.Path(experiments_dir) / f"{name}.py"
    if not path.is_file():
        raise ValueError(
            f"experiment {name!r} has no driver at {str(path)!r}; the config's 'experiment' key "
            "must name a file under experiments/."
        )
    spec = importlib.util.spec_from_file_location(f"imitation_meg_experiment_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for attr in ("Config", "main"):
        if not hasattr(module, attr):
            raise ValueError(f"driver {str(path)!r} must define {attr!r}.")
    return module


def run_config(path: str | pathlib.Path, *, experiments_dir: str | pathlib.Path | None = None) -> Any:
    """Run the experiment a YAML config names and return what its ``main`` returns.

    Args:
        path: YAML config with a top-level ``experiment`` key.
        experiments_dir: folder of the drivers; default ``<config folder>/../experiments``.

    Raises:
        ValueError: missing ``experiment`` key, unknown driver, or invalid config values.
    """
    path = pathlib.Path(path)
    data = load_yaml(path)
    name = data.get("experiment")
    if not isinstance(name, str):
        raise ValueError(
            f"config {str(path)!r} needs a top-level 'experiment: <driver name>' key "
            "naming a file under experiments/."
        )
    if experiments_dir is None:
        experiments_dir = path.resolve().parent.parent / "experiments"
    module = load_driver(name, experiments_dir)
    cfg = load_config(data, module.Config, where=str(path))
    return module.main(cfg)


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
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, pathlib.Path):
        return str(obj)
    return obj


def write_json(path: str | pathlib.Path, payload: Any) -> pathlib.Path:
    """Write ``payload`` (dataclasses, tensors, arrays allowed) as indented JSON; returns the path.

    Infinite floats become the strings ``"inf"`` / ``"-inf"`` and NaN becomes ``null`` so the
    file stays valid JSON.
    """
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n")
    return path


def write_csv(path: str | pathlib.Path, rows: Sequence[Mapping[str, Any]]) -> pathlib.Path:
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
            writer.writerow({k: _jsonable(v) for k, v in row.items()})
    return path


def write_results(
    out_dir: str | pathlib.Path,
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
    payload["config"] = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else cfg
    return payload


def progress(items: Any, enabled: bool = True, desc: str = "", total: int | None = None) -> Any:
    """Wrap an iterable in a tqdm progress bar when ``enabled`` and tqdm is installed."""
    if not enabled:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is in the experiments extra
        return items
    return tqdm(items, desc=desc, leave=False, total=total)
