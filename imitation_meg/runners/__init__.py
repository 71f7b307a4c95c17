"""Running a study from its YAML config, on one machine or many.

A config's top-level key ``experiment`` names a driver file ``experiments/<experiment>.py`` beside
the ``configs/`` folder (the speed benchmark's lives in ``benchmarks/``); a config elsewhere finds
it in the checkout the package is installed from, or in the folder ``--experiments`` names. The
driver defines a
frozen dataclass ``Config`` (every other key of the YAML is a field; unknown keys raise
``ValueError``) and either the study-unit protocol (``units`` / ``run_unit`` / ``combine``, see
:mod:`imitation_meg.runners.study`), which runs on any backend and resumes, or only
``main(cfg) -> dict``, which runs serially.

- :func:`run_config`: load a config, apply ``--set key=value`` overrides and ``--seeds``, and
  run it on the ``serial``, ``process`` or ``ray`` backend (:mod:`imitation_meg.runners.backends`).
- :func:`~imitation_meg.runners.publish.publish`: copy a finished run's results into
  ``docs/results/`` (the explicit publishing step).

Example:
    >>> from imitation_meg.runners import run_config
    >>> results = run_config(
    ...     "configs/extended_table1_fast.yaml", backend="process", workers=2, seeds="0-1"
    ... )  # doctest: +SKIP

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``) only: the runners know nothing of MEG.
"""

from __future__ import annotations

import copy
import importlib.util
import pathlib
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from imitation_meg.runners._worker import DriverSpec
from imitation_meg.runners.config import load_config, load_yaml, parse_yaml_value
from imitation_meg.runners.publish import publish
from imitation_meg.runners.study import (
    RUN_LOG,
    ResultsFolderBusyError,
    RunOptions,
    StudyInterrupted,
    UnitsFailedError,
    is_unit_driver,
    run_serially,
    run_study,
)
from imitation_meg.type_aliases import JSONValue, PathLike

__all__ = [
    "RUN_LOG",
    "ResultsFolderBusyError",
    "StudyInterrupted",
    "UnitsFailedError",
    "apply_overrides",
    "load_driver",
    "parse_seeds",
    "publish",
    "run_config",
    "run_serially",
]


def load_driver(name: str, experiments_dir: PathLike) -> types.ModuleType:
    """Import ``experiments_dir/<name>.py`` and check it defines ``Config`` and either the
    study-unit protocol (``units`` / ``run_unit`` / ``combine``) or ``main``.

    Raises:
        ValueError: if the file is missing or lacks them.
    """
    path = pathlib.Path(experiments_dir) / f"{name}.py"
    if not path.is_file():
        raise ValueError(
            f"experiment {name!r} has no driver at {str(path)!r}; pass the folder that holds "
            f"{name}.py (--experiments DIR), or fix the config's 'experiment' key."
        )
    spec = importlib.util.spec_from_file_location(f"imitation_meg_experiment_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "Config"):
        raise ValueError(f"driver {str(path)!r} must define 'Config'.")
    if not is_unit_driver(module) and not hasattr(module, "main"):
        raise ValueError(
            f"driver {str(path)!r} must define 'units', 'run_unit' and 'combine' (or 'main')."
        )
    return module


def parse_seeds(text: str) -> tuple[int, ...]:
    """Seeds from a command-line list: ``"0-4"``, ``"0,2,7"`` or ``"0-2,7,9-10"``.

    Raises:
        ValueError: malformed text, a descending range, or a seed given twice.
    """
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ValueError(
                f"--seeds {text!r}: {part!r} is not a seed or a range; write e.g. 0-4 or 0,2,7."
            ) from None
        if first < 0 or last < first:
            raise ValueError(
                f"--seeds {text!r}: {part!r} must be a non-negative seed or an ascending range."
            )
        seeds.extend(range(first, last + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--seeds {text!r} names seeds {repeated} twice; each may count once.")
    return tuple(seeds)


def apply_overrides(
    data: Mapping[str, JSONValue], overrides: Sequence[str] | Mapping[str, JSONValue]
) -> dict[str, Any]:
    """A copy of a config mapping with ``key=value`` overrides applied.

    Values are read as YAML (``n_steps=2000``, ``agents=[Q,PPO]``, ``unknown=false``); a dotted
    key sets a field inside a mapping (``agent_kwargs.PPO.n_steps=128``).

    Raises:
        ValueError: an override without ``=``, malformed YAML, or a key below a non-mapping.
    """
    out = copy.deepcopy(dict(data))
    for key, value in _override_pairs(overrides):
        if key == "experiment" or key.startswith("experiment."):
            raise ValueError("--set cannot change 'experiment' (the driver); use another config.")
        *path, last = key.split(".")
        node = out
        for part in path:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(  # noqa: TRY004 - a bad command-line value
                    f"--set {key}: {part!r} is not a mapping, so it has no keys."
                )
            node = child
        node[last] = value
    return out


def _override_pairs(
    overrides: Sequence[str] | Mapping[str, JSONValue],
) -> list[tuple[str, Any]]:
    """``(key, value)`` of each override: a mapping's items, or ``KEY=VALUE`` strings with
    their values read as YAML.

    Raises:
        ValueError: a string without ``=`` or key, or malformed YAML.
    """
    if isinstance(overrides, Mapping):
        return [(str(k), v) for k, v in overrides.items()]
    pairs = []
    for text in overrides:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(
                f"--set {text!r} must be KEY=VALUE, e.g. --set n_steps=20000 or "
                "--set agents=[Q,PPO]."
            )
        pairs.append((key.strip(), parse_yaml_value(raw, where=f"--set {text!r}")))
    return pairs


def _experiments_dir(path: pathlib.Path, name: str) -> pathlib.Path:
    """The folder holding the driver ``<name>.py`` of the config at ``path``.

    Tried in order: ``experiments/`` then ``benchmarks/`` (the speed benchmark's, not shipped)
    beside the config's ``configs/`` folder, then the same two in the checkout this package is
    installed from (an editable install), so a config copied elsewhere still finds its driver.

    Raises:
        ValueError: no candidate holds the driver; the message lists them and names
            ``--experiments DIR``.
    """
    roots = [path.resolve().parent.parent, pathlib.Path(__file__).resolve().parents[2]]
    candidates = [
        root / sub for root in dict.fromkeys(roots) for sub in ("experiments", "benchmarks")
    ]
    for folder in candidates:
        if (folder / f"{name}.py").is_file():
            return folder
    raise ValueError(
        f"experiment {name!r} (the config's 'experiment' key) has no driver {name}.py in "
        f"{', '.join(repr(str(c)) for c in candidates)}; pass the folder that holds it with "
        "--experiments DIR (experiments_dir= from Python), or fix the config's 'experiment' key."
    )


def run_config(
    path: PathLike,
    *,
    experiments_dir: PathLike | None = None,
    backend: str = "serial",
    workers: int | None = None,
    address: str | None = None,
    overrides: Sequence[str] | Mapping[str, JSONValue] = (),
    seeds: str | Sequence[int] | None = None,
    retries: int = 1,
    resources: Mapping[str, float] | None = None,
    merge: Sequence[str] = (),
    fresh: bool = False,
    dry_run: bool = False,
    progress_bar: bool = True,
    log: Callable[[str], None] | None = None,
) -> Any:
    """Run the study a YAML config names and return what it produces.

    Args:
        path: YAML config with a top-level ``experiment`` key.
        experiments_dir: folder of the drivers; default: found beside the config's folder or in
            the checkout the package is installed from (see :func:`_experiments_dir`).
        backend: ``"serial"`` (default), ``"process"`` or ``"ray"``.
        workers: parallel units (process / ray).
        address: Ray cluster address (``"auto"``); default a local Ray.
        overrides: ``key=value`` strings (or a mapping) applied over the YAML.
        seeds: the ``seeds`` list, e.g. ``"0-4"``.
        retries: further attempts of a unit that failed.
        resources: Ray resources per unit (``num_cpus``, ``num_gpus``).
        merge: results folders of other runs of the same config to take finished units from
            (or their published folders, for a study with ``PUBLISHED_RESULTS``).
        fresh: rerun every unit instead of resuming.
        dry_run: only report finished and missing units.
        progress_bar: a progress bar over units.
        log: receives the runner's one-line notes (default stderr); pass ``lambda s: None`` to
            silence them.

    Returns:
        The driver's ``combine`` (or ``main``) payload; with ``dry_run`` the finished and missing
        units.

    Raises:
        ValueError: missing ``experiment`` key, unknown driver, invalid config values or options.
        UnitsFailedError: some units failed (the others are kept; rerun to resume).
    """
    path = pathlib.Path(path)
    data = load_yaml(path)
    name = _driver_name(path, data)
    exp_dir = pathlib.Path(experiments_dir) if experiments_dir else _experiments_dir(path, name)
    module = load_driver(name, exp_dir)
    data = apply_overrides(data, overrides)
    if seeds is not None:
        data["seeds"] = _seed_list(name, module, seeds, overrides)
    data.pop("experiment", None)
    cfg = load_config(data, module.Config, where=str(path))
    if not is_unit_driver(module):
        if backend != "serial" or workers not in (None, 1) or merge or dry_run or address:
            raise ValueError(
                f"driver {name!r} has no units (it runs serially through main(cfg)); run it "
                "without --backend / --workers / --address / --merge / --dry-run."
            )
        return module.main(cfg)
    source_path = exp_dir / f"{name}.py"
    spec = DriverSpec(name=name, path=str(source_path), source=source_path.read_text(), data=data)
    options = RunOptions(
        backend=backend,
        workers=workers,
        address=address,
        retries=retries,
        resources=resources,
        merge=merge,
        fresh=fresh,
        dry_run=dry_run,
        progress_bar=progress_bar,
    )
    kwargs: dict[str, Any] = {} if log is None else {"log": log}
    return run_study(module, cfg, spec=spec, options=options, config_path=str(path), **kwargs)


def _driver_name(path: pathlib.Path, data: Mapping[str, Any]) -> str:
    """The config's ``experiment`` key: the name of its driver.

    Raises:
        ValueError: the key is missing or not a string.
    """
    name = data.get("experiment")
    if not isinstance(name, str):
        raise ValueError(  # noqa: TRY004 - the file's content is a bad value
            f"config {str(path)!r} needs a top-level 'experiment: <driver name>' key "
            "naming a file under experiments/."
        )
    return name


def _seed_list(
    name: str,
    module: types.ModuleType,
    seeds: str | Sequence[int],
    overrides: Sequence[str] | Mapping[str, JSONValue],
) -> list[int]:
    """``--seeds`` as the config's ``seeds`` list.

    Raises:
        ValueError: the study has no ``seeds`` field, or the seeds are also given by ``--set``.
    """
    fields = set(getattr(module.Config, "__dataclass_fields__", {}))
    if "seeds" not in fields:
        raise ValueError(
            f"study {name!r} has no 'seeds' list (its fields: {sorted(fields)}); "
            "use --set to change its settings."
        )
    if any(o.partition("=")[0].strip() == "seeds" for o in overrides if isinstance(o, str)):
        raise ValueError("give the seeds once: --seeds or --set seeds=..., not both.")
    return list(parse_seeds(seeds) if isinstance(seeds, str) else seeds)
