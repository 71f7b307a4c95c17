"""Running a study from its YAML config.

A config's top-level key ``experiment`` names a driver file ``experiments/<experiment>.py``
beside the ``configs/`` folder (the speed benchmark's lives in ``benchmarks/``). The driver defines
a frozen dataclass ``Config`` and a function ``main(cfg: Config) -> dict``; every other key of the
YAML becomes a field of ``Config`` (unknown keys raise ``ValueError``).

Example:
    >>> from imitation_meg.runners import run_config
    >>> results = run_config("configs/cliffworld_epsilon_fast.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types
from typing import Any

from imitation_meg.config import load_config, load_yaml
from imitation_meg.type_aliases import PathLike

__all__ = ["load_driver", "run_config"]


def load_driver(name: str, experiments_dir: PathLike) -> types.ModuleType:
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


def run_config(path: PathLike, *, experiments_dir: PathLike | None = None) -> Any:
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
        raise ValueError(  # noqa: TRY004 - the file's content is a bad value
            f"config {str(path)!r} needs a top-level 'experiment: <driver name>' key "
            "naming a file under experiments/."
        )
    if experiments_dir is None:
        root = path.resolve().parent.parent
        # Studies live in experiments/; the speed benchmark in benchmarks/ (not shipped).
        experiments_dir = root / "experiments"
        if (
            not (experiments_dir / f"{name}.py").is_file()
            and (root / "benchmarks" / f"{name}.py").is_file()
        ):
            experiments_dir = root / "benchmarks"
    module = load_driver(name, experiments_dir)
    cfg = load_config(data, module.Config, where=str(path))
    return module.main(cfg)
