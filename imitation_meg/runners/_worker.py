"""Running one study unit anywhere: in the main process, a worker process or a Ray worker.

Everything a worker needs travels in a :class:`DriverSpec` (the driver's name, path and source
text, and the config mapping), so a remote worker needs only ``imitation_meg`` installed, not the
experiments folder. A unit runs with the global random generators seeded from its key and torch
on one thread, and its result leaves the worker as JSON text: the same bytes on every backend.

This module stays light at import (no numpy / torch at module level): process workers import it
first, before they set their thread counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import sys
import threading
import time
import types
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DriverSpec",
    "UnitOutcome",
    "dumps_result",
    "execute_unit",
    "load_spec",
    "loads_result",
    "ray_worker_setup",
]

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclasses.dataclass(frozen=True)
class DriverSpec:
    """What a worker needs to run units of a study.

    Attributes:
        name: the driver's name (the config's ``experiment`` key).
        path: the driver file, for tracebacks.
        source: the driver's source text (executed in the worker).
        data: the config mapping (overrides applied, without ``experiment``).
    """

    name: str
    path: str
    source: str
    data: Mapping[str, Any]

    @property
    def digest(self) -> str:
        """A hash of the driver's source and config (the worker-side cache key)."""
        text = json.dumps([self.name, self.source, self.data], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class UnitOutcome:
    """A finished unit: its result as JSON text and the wall seconds it took."""

    result_json: str
    seconds: float


def module_from_source(name: str, path: str, source: str) -> types.ModuleType:
    """Execute a driver's source as the module ``imitation_meg_experiment_<name>``."""
    module = types.ModuleType(f"imitation_meg_experiment_{name}")
    module.__file__ = path
    # Registered before execution: dataclasses resolve their annotations through sys.modules.
    sys.modules[module.__name__] = module
    code = compile(source, path, "exec")
    exec(code, module.__dict__)  # noqa: S102 - the study driver's own source, shipped to workers
    return module


_LOADED: dict[str, tuple[types.ModuleType, Any]] = {}


def load_spec(spec: DriverSpec) -> tuple[types.ModuleType, Any]:
    """The driver module and its ``Config`` instance for ``spec`` (cached per process)."""
    digest = spec.digest
    if digest not in _LOADED:
        from imitation_meg.runners.config import load_config

        module = module_from_source(spec.name, spec.path, spec.source)
        cfg = load_config(dict(spec.data), module.Config, where=spec.path)
        _LOADED[digest] = (module, cfg)
    return _LOADED[digest]


def _default(obj: Any) -> Any:
    """JSON for what ``json`` does not know: numpy / torch numbers and arrays, paths."""
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return obj.detach().cpu().tolist() if hasattr(obj, "detach") else obj.tolist()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    raise TypeError(
        f"a unit result holds {type(obj).__name__} ({obj!r:.60}), which is not JSON; "
        "run_unit must return plain numbers, strings, lists and dicts."
    )


def dumps_result(result: Any) -> str:
    """A unit result as JSON text, losslessly: floats round-trip exactly, NaN and infinities
    stay numbers (Python's ``NaN`` / ``Infinity`` tokens), key order is kept."""
    return json.dumps(result, allow_nan=True, default=_default)


def loads_result(text: str) -> Any:
    """Inverse of :func:`dumps_result`."""
    return json.loads(text)


def unit_seed(key: str) -> int:
    """The seed of the global generators for the unit whose key (a hex digest) is ``key``."""
    return int(key[:8], 16)


def unit_threads(module: types.ModuleType) -> int:
    """Torch threads per unit: the driver's ``UNIT_THREADS`` (default 1).

    Raises:
        ValueError: if ``UNIT_THREADS`` is not a positive integer.
    """
    threads = getattr(module, "UNIT_THREADS", 1)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"UNIT_THREADS must be a positive integer, got {threads!r}.")
    return threads


def execute_unit(
    module: types.ModuleType, cfg: Any, unit: Mapping[str, Any], key: str
) -> UnitOutcome:
    """Run ``module.run_unit(cfg, unit)`` as a pure function of its inputs.

    The global generators (``random``, numpy, torch) are seeded from the unit's key and torch runs
    on ``unit_threads(module)`` threads (one unless the driver's ``UNIT_THREADS`` says otherwise:
    torch's parallel reductions round differently with another thread count), whichever process
    runs the unit and whatever ran before; both are restored afterwards, so running units in the
    caller's process leaves its state as it was.

    Returns:
        The result as JSON text (:func:`dumps_result`) and the wall seconds.
    """
    import random

    import numpy as np
    import torch as th

    saved = (random.getstate(), np.random.get_state(), th.get_rng_state(), th.get_num_threads())
    seed = unit_seed(key)
    random.seed(seed)
    np.random.seed(seed)
    th.manual_seed(seed)
    th.set_num_threads(unit_threads(module))
    t0 = time.perf_counter()
    try:
        result = module.run_unit(cfg, dict(unit))
        text = dumps_result(result)
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        th.set_rng_state(saved[2])
        th.set_num_threads(saved[3])
    return UnitOutcome(result_json=text, seconds=time.perf_counter() - t0)


# ---------------------------------------------------------------------- process workers
_PROCESS_SPEC: DriverSpec | None = None


#: Seconds between a worker's checks that the runner that started it is still alive.
_PARENT_POLL_S = 0.5


def init_process(spec: DriverSpec, runner: int | None = None) -> None:
    """Initializer of a process-pool worker: ignore Ctrl-C (the runner handles it and stops the
    workers), exit with the runner, one thread per library, then load the driver.

    Args:
        spec: the driver and config.
        runner: the runner's process id (default this worker's parent now). A worker whose
            runner is already gone when it gets here (stopped while the worker was starting:
            seconds on a loaded machine) exits at once.
    """
    global _PROCESS_SPEC
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch = threading.Thread(
        target=_exit_with_parent,
        args=(os.getppid() if runner is None else runner,),
        name="exit-with-runner",
        daemon=True,
    )
    watch.start()
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    _PROCESS_SPEC = spec
    load_spec(spec)


def _exit_with_parent(parent: int) -> None:
    """Exit this worker as soon as the runner process ``parent`` is gone.

    A runner stopped by ``SIGTERM`` (``kill``, a batch system's time limit) or ``SIGKILL`` runs no
    clean-up, and a pool worker would otherwise compute its unit to the end for nobody (its result
    goes to the runner, which saves it). Its unit is simply missing and reruns on resume.
    """
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_S)
    os._exit(1)


def run_in_process(unit: Mapping[str, Any], key: str) -> UnitOutcome:
    """Run one unit in a process-pool worker set up by :func:`init_process`."""
    if _PROCESS_SPEC is None:  # pragma: no cover - the pool always runs the initializer
        raise RuntimeError("init_process did not run in this worker.")
    module, cfg = load_spec(_PROCESS_SPEC)
    return execute_unit(module, cfg, unit, key)


# -------------------------------------------------------------------------- Ray workers
def ray_worker_setup() -> None:
    """Ray's ``worker_process_setup_hook`` (also run in the driver before ``ray.init``).

    Ray registers serializers for pyarrow whenever ``import pyarrow`` does not raise
    ``ModuleNotFoundError``; an installed pyarrow built for another numpy raises ``ImportError``
    instead and breaks every task. Such a pyarrow cannot be used at all, so it is marked absent.
    """
    try:
        import pyarrow  # noqa: F401
    except ModuleNotFoundError:
        pass
    except ImportError:
        sys.modules["pyarrow"] = None  # type: ignore[assignment]


def run_remote(spec: DriverSpec, unit: Mapping[str, Any], key: str) -> UnitOutcome:
    """The body of a Ray task: load the driver (cached per worker) and run one unit."""
    module, cfg = load_spec(spec)
    return execute_unit(module, cfg, unit, key)
