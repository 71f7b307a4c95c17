"""Where units run: ``serial`` (this process), ``process`` (local worker processes) or ``ray``
(Ray tasks on a local Ray or an existing cluster).

Each backend is a generator over ``(key, outcome)`` pairs in the order units finish, where the
outcome is a :class:`~imitation_meg.runners._worker.UnitOutcome` or the exception a unit raised
after its retries. The order does not matter: every unit is a pure function of the config and the
unit (see :mod:`imitation_meg.runners._worker`), and the study combines results in the order of
its ``units(cfg)``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from imitation_meg.runners._worker import (
    DriverSpec,
    UnitOutcome,
    execute_unit,
    init_process,
    ray_worker_setup,
    run_in_process,
    run_remote,
)

__all__ = ["BACKENDS", "Todo", "import_ray", "run_process", "run_ray", "run_serial"]

BACKENDS = ("serial", "process", "ray")
#: The units still to run: ``(key, unit)`` pairs.
Todo = Sequence[tuple[str, Mapping[str, Any]]]
Finished = Iterator[tuple[str, UnitOutcome | BaseException]]

_RAY_INSTALL = (
    "--backend ray needs Ray, an optional extra: pip install 'imitation-meg[ray]' (the tested "
    "version is pinned in constraints.txt); the serial and process backends need nothing more."
)


def run_serial(module: types.ModuleType, cfg: Any, todo: Todo, *, retries: int) -> Finished:
    """Run the units one after the other in this process."""
    for key, unit in todo:
        for attempt in range(retries + 1):
            try:
                outcome: UnitOutcome | BaseException = execute_unit(module, cfg, unit, key)
                break
            except Exception as e:  # noqa: BLE001 - any failure of user code is reported per unit
                outcome = e
                if attempt == retries:
                    break
        yield key, outcome


def run_process(spec: DriverSpec, todo: Todo, *, workers: int, retries: int) -> Finished:
    """Run the units in ``workers`` fresh local processes (``spawn``; one thread each).

    A unit that raises is retried ``retries`` times; a worker that dies (killed, out of memory)
    breaks the pool, which is rebuilt, and the units that were in flight count one attempt each.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")
    attempts: collections.Counter[str] = collections.Counter()
    queue = list(todo)
    while queue:
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=init_process,
            initargs=(spec, os.getpid()),
        )
        broken = stopped = False
        try:
            # the workers start during the first submits: they inherit SIGINT ignored
            with _sigint_ignored():
                futures: dict[Future[UnitOutcome], tuple[str, Mapping[str, Any]]] = {
                    pool.submit(run_in_process, unit, key): (key, unit) for key, unit in queue
                }
            queue = []
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for fut in done:
                    key, unit = futures.pop(fut)
                    try:
                        outcome = fut.result()
                    except BrokenProcessPool as e:
                        broken = True
                        attempts[key] += 1
                        if attempts[key] > retries:
                            yield key, e
                        else:
                            queue.append((key, unit))
                        continue
                    except Exception as e:  # noqa: BLE001 - reported per unit
                        attempts[key] += 1
                        if attempts[key] > retries:
                            yield key, e
                        elif not broken:
                            futures[pool.submit(run_in_process, unit, key)] = (key, unit)
                        else:
                            queue.append((key, unit))
                        continue
                    yield key, outcome
        except BaseException:  # Ctrl-C, or the caller stopped early: stop the units at once
            stopped = True
            _stop_workers(pool)
            raise
        finally:
            # stopped: the workers are gone, so waiting only joins the pool's own thread, which
            # lets its queues (and their semaphores) be released at once
            pool.shutdown(wait=stopped or not broken, cancel_futures=True)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT in this process for the body (main thread only; elsewhere a no-op).

    Process workers started meanwhile inherit the ignored signal from their first instruction, so
    Ctrl-C, which the terminal sends to every process of the group, reaches only the runner:
    it stops the workers and reports what is saved, with no traceback from each worker.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop_workers(pool: Any) -> None:
    """Terminate a process pool's workers now (their units are lost; a rerun runs them).

    ``ProcessPoolExecutor`` has no public way to stop running tasks: ``shutdown`` waits for
    them (minutes for a training unit), so the workers are terminated through the pool's table
    of its processes.
    """
    workers = list(dict(getattr(pool, "_processes", None) or {}).values())
    for proc in workers:
        if proc.is_alive():
            proc.terminate()
    for proc in workers:
        proc.join(timeout=1.0)


def import_ray() -> types.ModuleType:
    """``ray``, or a ``ValueError`` that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ValueError(_RAY_INSTALL) from e
    return ray


def run_ray(
    spec: DriverSpec,
    todo: Todo,
    *,
    workers: int | None,
    address: str | None,
    resources: Mapping[str, float],
    retries: int,
    log: Any = None,
) -> Finished:
    """Run the units as Ray tasks.

    Args:
        spec: the driver and config (shipped once to the object store).
        todo: the units to run.
        workers: at most this many units in flight (default: as many as the cluster schedules);
            a local Ray is started with this many CPUs (default: all of this machine's).
        address: an existing cluster (``"auto"`` after ``ray start --head``, or
            ``"ray://host:10001"``); ``None`` starts a local Ray for this run.
        resources: per unit: ``num_cpus`` (default 1) and ``num_gpus`` (used only when the
            cluster has GPUs).
        retries: Ray retries a unit whose task raised or whose worker died this many times.
        log: a callable taking one line of text (notes about the cluster), or ``None``.
    """
    ray = import_ray()
    started = _start_ray(ray, workers, address)
    try:
        num_cpus, num_gpus = _unit_resources(ray.cluster_resources(), resources, retries, log)
        task = ray.remote(run_remote).options(
            num_cpus=num_cpus, num_gpus=num_gpus, max_retries=retries, retry_exceptions=True
        )
        spec_ref = ray.put(spec)
        queue = collections.deque(todo)
        limit = workers or len(queue) or 1
        pending: dict[Any, str] = {}
        while queue or pending:
            while queue and len(pending) < limit:
                key, unit = queue.popleft()
                pending[task.remote(spec_ref, dict(unit), key)] = key
            ready, _ = ray.wait(list(pending), num_returns=1)
            key = pending.pop(ready[0])
            try:
                yield key, ray.get(ready[0])
            except ray.exceptions.RayError as e:
                cause = getattr(e, "cause", None)
                yield key, cause if isinstance(cause, BaseException) else e
    finally:
        if started:
            ray.shutdown()


def _start_ray(ray: Any, workers: int | None, address: str | None) -> bool:
    """Join ``address`` or start a local Ray with ``workers`` CPUs (default all of this
    machine's), unless Ray runs already; whether this run started it."""
    if ray.is_initialized():
        return False
    ray_worker_setup()
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "runtime_env": {
            "worker_process_setup_hook": "imitation_meg.runners._worker.ray_worker_setup"
        },
    }
    if address is None:
        ray.init(
            address="local",
            num_cpus=workers or os.cpu_count() or 1,
            object_store_memory=128 * 1024**2,
            **kwargs,
        )
    else:
        ray.init(address=address, **kwargs)
    return True


def _unit_resources(
    cluster: Mapping[str, float], resources: Mapping[str, float], retries: int, log: Any
) -> tuple[float, float]:
    """CPUs and GPUs per unit: the GPUs asked for only where the cluster has GPUs (a note
    says so otherwise); a note describes the cluster."""
    num_cpus = float(resources.get("num_cpus", 1))
    num_gpus = float(resources.get("num_gpus", 0))
    if num_gpus and not cluster.get("GPU"):
        if log is not None:
            log(f"the Ray cluster has no GPU: units run on CPUs (asked for {num_gpus:g} GPU).")
        num_gpus = 0.0
    if log is not None:
        log(
            f"Ray cluster: {cluster.get('CPU', 0):g} CPUs, {cluster.get('GPU', 0):g} GPUs; "
            f"{num_cpus:g} CPU{'' if num_cpus == 1 else 's'}"
            f"{f', {num_gpus:g} GPU' if num_gpus else ''} per unit, {retries} retries."
        )
    return num_cpus, num_gpus
