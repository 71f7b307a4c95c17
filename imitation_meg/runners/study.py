"""Running a study from its config: units, per-unit files, a backend, then the combined results.

The study-unit protocol: a driver ``experiments/<name>.py`` defines a frozen dataclass ``Config``
(every YAML key is a field) and

- ``units(cfg) -> list[dict]``: the study's independent work units (seed x configuration x
  checkpoint x agent ...), each a small dict of plain JSON values;
- ``run_unit(cfg, unit) -> dict``: one unit's work, a pure function of ``(cfg, unit)``;
- ``combine(cfg, results) -> dict``: the tables and figures from the unit results (given in the
  order of ``units(cfg)``), written under ``cfg.results_dir``;
- optionally ``UNIT_RESOURCES`` (Ray resources per unit, e.g. ``{"num_cpus": 1}``),
  ``UNIT_THREADS`` (torch threads per unit, default 1: part of what makes a result exact, since
  torch's parallel reductions round differently with another thread count) and ``SWEEP_FIELDS``
  (the config fields that only choose units, such as ``seeds``: changing them keeps the finished
  units) and ``PUBLISHED_RESULTS`` (the list in the published ``results.json`` that holds every
  unit's own result, one row per unit: then ``--merge`` rebuilds unit files from a published
  folder) and ``ADDED_FIELDS`` (config fields added after some runs were made, each with the value
  those runs used: ``--merge`` takes their units as made with it).

:func:`run_study` keys every unit by study, config and unit, skips the units whose files exist
(an interrupted run resumes), runs the others on the chosen backend, writes each result as it
arrives, and combines them all. One run at a time writes a results folder (a second is refused,
naming the first); Ctrl-C stops a run with one line saying how many units are saved. A driver
with only ``main(cfg)`` (the timing-sensitive speed benchmark) runs serially through ``main``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from imitation_meg.runners._lock import ResultsFolderBusyError, results_lock
from imitation_meg.runners._run_log import RUN_LOG, _merged_runs, _write_run_log
from imitation_meg.runners._store import (
    PublishedRows,
    UnitStore,
    canonical,
    config_fingerprint,
)
from imitation_meg.runners._worker import DriverSpec, UnitOutcome, loads_result, unit_threads
from imitation_meg.runners.backends import BACKENDS, import_ray, run_process, run_ray, run_serial

__all__ = [
    "RUN_LOG",
    "ResultsFolderBusyError",
    "RunOptions",
    "StudyInterrupted",
    "UnitsFailedError",
    "is_unit_driver",
    "run_serially",
    "run_study",
]

_PROTOCOL = ("units", "run_unit", "combine")


class UnitsFailedError(RuntimeError):
    """Some units raised on every attempt; the others' results are kept for the next run."""


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run; its message says how many units are saved and how to resume."""


def is_unit_driver(module: types.ModuleType) -> bool:
    """Whether a driver follows the study-unit protocol (``units`` / ``run_unit`` / ``combine``)."""
    return all(callable(getattr(module, name, None)) for name in _PROTOCOL)


def _check_units(name: str, units: Any, module: types.ModuleType, cfg: Any) -> list[dict[str, Any]]:
    if not isinstance(units, list) or not all(isinstance(u, dict) for u in units):
        raise TypeError(f"driver {name!r}: units(cfg) must return a list of dicts.")
    if not units:
        raise ValueError(_no_units(name, module, cfg))
    for u in units:
        if canonical(u) != canonical(loads_result(canonical(u))) or not all(
            isinstance(k, str) for k in u
        ):
            raise TypeError(f"driver {name!r}: unit {u!r} must hold plain JSON values.")
    return units


def _no_units(name: str, module: types.ModuleType, cfg: Any) -> str:
    """The one-line refusal of a config that gives no units, naming its empty lists."""
    lists = [
        f.name
        for f in dataclasses.fields(cfg)
        if isinstance(getattr(cfg, f.name), (tuple, list)) and not getattr(cfg, f.name)
    ]
    sweep = set(getattr(module, "SWEEP_FIELDS", ()))
    empty = [f for f in lists if f in sweep] or lists
    if not empty:
        return (
            f"study {name!r} has no units to run with this config (its driver's units(cfg) "
            "returned none); check its settings."
        )
    return _empty_lists_text(name, empty)


def _empty_lists_text(name: str, empty: list[str]) -> str:
    """The refusal naming the config's empty lists and how to fill them."""
    named = " and ".join(f"{f} = []" for f in empty)
    fix = ", ".join(f"--set {f}=[...]" for f in empty)
    return (
        f"study {name!r} has no units to run: {named}; give {'each' if len(empty) > 1 else 'it'} "
        f"at least one value in the config file or with {fix}."
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _failure_text(e: BaseException) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How :func:`run_study` runs a study's units: the options of
    :func:`~imitation_meg.runners.run_config` (``imitation-meg reproduce``) that reach the
    backend, checked by :func:`run_study` before any work.

    Attributes:
        backend: ``"serial"``, ``"process"`` or ``"ray"``.
        workers: parallel units (process: default the machine's CPUs; ray: see
            :func:`~imitation_meg.runners.backends.run_ray`); serial takes none.
        address: Ray cluster address (``"auto"``, ``"ray://host:10001"``); ray only.
        retries: further attempts of a unit that raised (and, on Ray, whose worker died).
        resources: Ray resources per unit; default the driver's ``UNIT_RESOURCES`` or one CPU.
        merge: results folders of other runs of the same config whose units to take first, or
            their published folders (with the driver's ``PUBLISHED_RESULTS``).
        fresh: run every unit again (overwriting its file) instead of resuming.
        dry_run: only count the finished and missing units (the units ``merge`` would bring
            count as finished); nothing is written.
        progress_bar: a progress bar over units on stderr (tqdm).
    """

    backend: str
    workers: int | None
    address: str | None
    retries: int
    resources: Mapping[str, float] | None
    merge: Sequence[str]
    fresh: bool
    dry_run: bool
    progress_bar: bool

    def check(self) -> None:
        """The options, before any work.

        Raises:
            ValueError: an unknown backend, a worker count below 1 or given to the serial
                backend, an address without Ray, negative retries.
        """
        backend, workers = self.backend, self.workers
        if backend not in BACKENDS:
            raise ValueError(f"--backend {backend!r} is not one of {list(BACKENDS)}.")
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}.")
        if backend == "serial" and workers not in (None, 1):
            raise ValueError("--workers applies to --backend process or ray; serial runs one unit.")
        if self.address is not None and backend != "ray":
            raise ValueError("--address applies to --backend ray only.")
        if self.retries < 0:
            raise ValueError(f"--retries must be >= 0, got {self.retries}.")


def run_study(
    module: types.ModuleType,
    cfg: Any,
    *,
    spec: DriverSpec,
    options: RunOptions,
    log: Callable[[str], None] | None = _stderr,
    config_path: str | None = None,
) -> Any:
    """Run a protocol driver's units on a backend and combine them.

    Args:
        module: the driver module (``units`` / ``run_unit`` / ``combine``).
        cfg: its ``Config`` instance.
        spec: the same driver and config as shipped to workers.
        options: the backend and how to run on it (workers, retries, resuming, a dry run).
        log: receives one-line notes (default: stderr); ``None`` for silence.
        config_path: the config file, recorded in the run log.

    Returns:
        What ``combine`` returns; with ``dry_run`` a dict of the finished and missing units.

    Raises:
        ValueError: bad options, duplicate units, a unit merged twice with different results,
            Ray missing.
        UnitsFailedError: some units failed every attempt (the others' results are kept).
        ResultsFolderBusyError: another run is writing the same results folder (one run at a
            time holds it: an OS lock on ``<results_dir>/.lock``).
        StudyInterrupted: Ctrl-C while units ran (a ``KeyboardInterrupt``: the finished units
            are saved, process workers stopped at once; the message gives the count).
    """
    name = spec.name
    options.check()
    merge, fresh = options.merge, options.fresh
    if options.backend == "ray" and not options.dry_run:
        import_ray()  # a clear error before any work when Ray is missing
    say = _sayer(log)
    unit_threads(module)  # a bad UNIT_THREADS fails before any work
    plan = _plan(name, module, cfg)
    key_list = getattr(module, "PUBLISHED_RESULTS", None)
    free = tuple(getattr(module, "SWEEP_FIELDS", ()))
    published = PublishedRows(key_list, free) if isinstance(key_list, str) else None
    if options.dry_run:
        return _dry_run(plan, merge, published, fresh=fresh, say=say)
    options = dataclasses.replace(options, workers=_default_workers(options))
    backend, workers, address = options.backend, options.workers, options.address
    store, units, keys = plan.store, plan.units, plan.keys
    with results_lock(store.results_dir, name):
        merged, done, todo = _take_finished(plan, merge, published, fresh=fresh, say=say)
        say(
            f"{name}: {len(units)} units, {len(done)} already done in {store.folder}, "
            f"running {len(todo)} ({_where(backend, workers)})."
        )
        t0 = time.perf_counter()
        seconds = {k: s for k, (_, s) in done.items()}
        if todo:
            finished = _outcomes(module, cfg, spec, todo, options, log=log)
            plan.collect(
                finished, len(todo), seconds, progress_bar=options.progress_bar, fresh=fresh
            )
        wall = time.perf_counter() - t0
        results = [plan.stored(key, unit)[0] for key, unit in zip(keys, units, strict=True)]
        payload = module.combine(cfg, results)
        _write_run_log(
            store,
            cfg,
            units=units,
            keys=keys,
            seconds=seconds,
            info={
                "study": name,
                "config_file": config_path,
                "backend": backend,
                "workers": workers if backend != "serial" else 1,
                "torch_threads_per_unit": unit_threads(module),
                "address": address,
                "units": len(units),
                "units_run": len(todo),
                "units_reused": len(done),
                "units_merged": len(merged),
                "merged_runs": _merged_runs(merge),
                "wall_seconds": round(wall, 2),
            },
        )
    say(
        f"{name}: done in {wall:.1f} s ({len(todo)} units run, {len(done)} reused); results in "
        f"{store.results_dir}/."
    )
    return payload


def _sayer(log: Callable[[str], None] | None) -> Callable[[str], None]:
    """Where one-line notes go: ``log``, or nowhere."""
    return log or (lambda _line: None)


def _default_workers(options: RunOptions) -> int | None:
    """The process backend runs as many units at once as the machine has CPUs by default."""
    if options.backend == "process" and options.workers is None:
        import os

        return os.cpu_count() or 1
    return options.workers


def _where(backend: str, workers: int | None) -> str:
    """``serial``, ``process x4``, ``ray x cluster``: how the units run, for the log."""
    return backend if backend == "serial" else f"{backend} x{workers or 'cluster'}"


def _take_finished(
    plan: _Plan,
    merge: Sequence[str],
    published: PublishedRows | None,
    *,
    fresh: bool,
    say: Callable[[str], None],
) -> tuple[list[pathlib.Path], dict[str, tuple[Any, float]], list[tuple[str, dict[str, Any]]]]:
    """The units other runs bring (``merge``), the finished units (none with ``fresh``) and the
    ``(key, unit)`` pairs still to run."""
    merged = plan.store.merge(merge, published) if merge else []
    if merged:
        say(f"merged {len(merged)} unit files from {', '.join(map(str, merge))}.")
    done = {} if fresh else plan.load_done()
    todo = [(k, u) for k, u in zip(plan.keys, plan.units, strict=True) if k not in done]
    return merged, done, todo


def _plan(name: str, module: types.ModuleType, cfg: Any) -> _Plan:
    """The driver's units with their keys in the config's unit store.

    Raises:
        ValueError: no units, or a unit listed twice.
    """
    units = _check_units(name, module.units(cfg), module, cfg)
    free = tuple(getattr(module, "SWEEP_FIELDS", ()))
    store = UnitStore(
        pathlib.Path(cfg.results_dir),
        name,
        config_fingerprint(cfg, free_fields=free),
        added=dict(getattr(module, "ADDED_FIELDS", {})),
    )
    keys = [store.key(u) for u in units]
    seen: dict[str, dict[str, Any]] = {}
    for key, unit in zip(keys, units, strict=True):
        if key in seen:
            raise ValueError(
                f"study {name!r} lists unit {canonical(unit)} twice (a value repeated in the "
                "config, e.g. a seed in 'seeds' or --seeds); each unit may count once."
            )
        seen[key] = unit
    return _Plan(name, units, keys, seen, store)


def _dry_run(
    plan: _Plan,
    merge: Sequence[str],
    published: PublishedRows | None,
    *,
    fresh: bool,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """The finished and missing units, the sources checked as a run would but nothing written;
    with ``fresh`` a run reruns every unit, merged ones too (and nothing is ready)."""
    store = plan.store
    merged = store.merge(merge, published, write=False) if merge else []
    if merged:
        say(f"would merge {len(merged)} unit files from {', '.join(map(str, merge))}.")
    ready = set() if fresh else set(plan.load_done()) | {p.stem for p in merged}
    pairs = list(zip(plan.keys, plan.units, strict=True))
    return {
        "study": plan.name,
        "units": len(plan.units),
        "done": [u for k, u in pairs if k in ready],
        "missing": [u for k, u in pairs if k not in ready],
        "units_dir": str(store.folder),
    }


def _outcomes(
    module: types.ModuleType,
    cfg: Any,
    spec: DriverSpec,
    todo: list[tuple[str, dict[str, Any]]],
    options: RunOptions,
    *,
    log: Callable[[str], None] | None,
) -> Iterator[tuple[str, UnitOutcome | BaseException]]:
    """The chosen backend's ``(key, outcome)`` pairs, in the order units finish."""
    workers, retries = options.workers, options.retries
    if options.backend == "serial":
        return run_serial(module, cfg, todo, retries=retries)
    if options.backend == "process":
        assert workers is not None
        return run_process(spec, todo, workers=workers, retries=retries)
    unit = getattr(module, "UNIT_RESOURCES", None) or {"num_cpus": unit_threads(module)}
    res = dict(options.resources or unit)
    return run_ray(
        spec,
        todo,
        workers=workers,
        address=options.address,
        resources=res,
        retries=retries,
        log=log,
    )


@dataclasses.dataclass
class _Plan:
    """A run's units, their keys and store: what is done, and collecting what finishes."""

    name: str
    units: list[dict[str, Any]]
    keys: list[str]
    seen: dict[str, dict[str, Any]]
    store: UnitStore

    def load_done(self) -> dict[str, tuple[Any, float]]:
        """The finished units' results and seconds, by key."""
        done = {}
        for key, unit in zip(self.keys, self.units, strict=True):
            found = self.store.load(key, unit)
            if found is not None:
                done[key] = found
        return done

    def stored(self, key: str, unit: dict[str, Any]) -> tuple[Any, float]:
        """A finished unit's result and seconds (its file must exist)."""
        found = self.store.load(key, unit)
        assert found is not None, key
        return found

    def collect(
        self,
        finished: Any,
        n_todo: int,
        seconds: dict[str, float],
        *,
        progress_bar: bool,
        fresh: bool,
    ) -> None:
        """Save each unit as it finishes (its failure report when it failed).

        Raises:
            UnitsFailedError: some units failed every attempt (after all others finished).
            StudyInterrupted: Ctrl-C (``KeyboardInterrupt``) while units ran; the finished ones
                are saved and the message says how many.
        """
        from imitation_meg.progress import progress

        store, failures = self.store, {}
        saved: set[str] = set()
        bar: Any = progress(None, progress_bar, f"{self.name} units", total=n_todo)  # type: ignore[arg-type]
        try:
            for key, outcome in finished:
                path = store.results_dir / "failed" / f"{key}.txt"
                if isinstance(outcome, UnitOutcome):
                    store.save(key, self.seen[key], outcome)
                    saved.add(key)
                    seconds[key] = outcome.seconds
                    path.unlink(missing_ok=True)
                else:
                    failures[key] = outcome
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(f"unit {canonical(self.seen[key])}\n\n{_failure_text(outcome)}")
                if bar is not None:
                    bar.update(1)
        except KeyboardInterrupt:
            raise self._interrupted(saved, fresh=fresh) from None
        finally:
            if bar is not None:
                bar.close()
        if failures:
            first = next(iter(failures))
            err = failures[first]
            raise UnitsFailedError(
                f"{len(failures)} of {n_todo} units of {self.name!r} failed (first: unit "
                f"{canonical(self.seen[first])}: {type(err).__name__}: {err}); tracebacks in "
                f"{store.results_dir / 'failed'}; the {n_todo - len(failures)} others are saved: "
                "rerun the same command to run only the missing units."
            )

    def _interrupted(self, saved: set[str], *, fresh: bool) -> StudyInterrupted:
        """The one-line report of a run stopped by Ctrl-C: units saved of all, how to resume."""
        if fresh:  # a rerun with --fresh would run them all again
            n, how = len(saved), "rerun without --fresh to resume"
        else:
            n = sum(self.store.path(k).is_file() for k in self.keys)
            how = "rerun the same command to resume"
        return StudyInterrupted(f"interrupted: {n} of {len(self.units)} units saved; {how}")


def run_serially(module: types.ModuleType, cfg: Any) -> Any:
    """Run every unit of a protocol driver in this process and combine, without unit files.

    Units run exactly as on the serial backend (global generators seeded from each unit's key,
    torch on one thread), so a driver's ``main(cfg)`` built on this gives the same results as
    ``imitation-meg reproduce``; it neither resumes nor writes ``units/``.
    """
    from imitation_meg.runners._worker import execute_unit

    name = pathlib.Path(module.__file__ or module.__name__).stem  # the config's 'experiment'
    units = _check_units(name, module.units(cfg), module, cfg)
    free = tuple(getattr(module, "SWEEP_FIELDS", ()))
    store = UnitStore(
        pathlib.Path(cfg.results_dir), name, config_fingerprint(cfg, free_fields=free)
    )
    results = [
        loads_result(execute_unit(module, cfg, unit, store.key(unit)).result_json) for unit in units
    ]
    return module.combine(cfg, results)
