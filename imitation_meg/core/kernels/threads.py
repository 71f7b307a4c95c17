"""Threads for the package's passes: one where a parallel region is small, the caller's where it
is large, and the caller's settings put back afterwards.

A pass over a ``T`` runs one parallel region (or several) per step: torch's sparse products and
elementwise kernels, or a compiled loop over chunks of states. Each region ends at a barrier, so
it is only as fast as its slowest thread. On a quiet machine a second thread pays off only where
a step's work is large; beside other multi-threaded programs (a training job) a thread that the
kernel has descheduled holds every region up by a scheduler slice (milliseconds), and the many
small regions of a pass then cost more than the whole pass on one thread: beside such a load
one pass over a 250-state MDP takes about 180 times longer on two threads than on one, while
on a quiet machine a second thread pays only from millions of stored transitions per step (the
measurements and their command are in docs/reports/benchmark.md, "One thread for small work").
Hence :data:`PARALLEL_MIN_WORK`: below ``2**22`` stored transitions per step a computation runs
on one thread whatever the caller's setting; at or above it, on the caller's threads.

Results do not depend on the number of threads (every long sum in the package has a fixed
order), so this choice changes only speed.

Independent tasks of many large operations (the approximate estimator's linear fits, each a
backward induction of hundreds of matrix products) run side by side instead
(:func:`parallel_map`): each task on its own Python thread with one torch thread, so the only
barrier is the end of the tasks, and the result is the one-thread result to the last bit
(docs/reports/approx_linear.md, "Threads", measures it beside a load).

The public entry points run under :func:`entry_point`: torch's thread count
(``torch.get_num_threads()``) and numba's (``numba.get_num_threads()``, of the calling thread)
are the same after the call as before it, also where numba's first parallel loop launched its
thread pool (with numba's OpenMP layer that launch resets OpenMP's thread count, which torch
reads: 1 -> 2 under ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch as th

__all__ = [
    "PARALLEL_MIN_WORK",
    "entry_point",
    "has_numba",
    "limited",
    "numba_threads",
    "parallel_map",
    "step_work",
    "threads_for",
]

# Stored transitions per step (S x A x B) from which a computation uses the caller's threads;
# below it one thread (see the module docstring for the measurements).
PARALLEL_MIN_WORK = 1 << 22

_HAS_NUMBA = importlib.util.find_spec("numba") is not None

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
R = TypeVar("R")


def has_numba() -> bool:
    """Whether numba is installed (the ``fast`` extra)."""
    return _HAS_NUMBA


def step_work(obj: Any) -> int | None:
    """Stored transitions per step (``S x A x B``) of a :class:`~imitation_meg.TabularMDP`
    (anything with an ``operator`` holding ``n_states``, ``n_actions`` and ``branching``), the
    sum over a non-empty list or tuple of them (interventional MEG solves their union), or
    None for anything else."""
    if isinstance(obj, (list, tuple)) and obj:
        parts = [step_work(o) for o in obj]
        known = [p for p in parts if p is not None]
        return sum(known) if len(known) == len(parts) else None
    op = getattr(obj, "operator", None)
    try:
        return int(op.n_states) * int(op.n_actions) * int(op.branching)  # type: ignore[union-attr]
    except AttributeError:
        return None


def threads_for(work: int | None) -> int:
    """The threads for a computation of ``work`` stored transitions per step: 1 below
    :data:`PARALLEL_MIN_WORK`, else torch's current count (None: torch's current count)."""
    current = th.get_num_threads()
    if work is None or work >= PARALLEL_MIN_WORK:
        return current
    return 1


def _numba_pool() -> Any:
    """The imported ``numba`` module if its thread pool is running (then its thread count can
    be read without launching it), else None."""
    nb = sys.modules.get("numba")
    if nb is None:
        return None
    par = sys.modules.get("numba.np.ufunc.parallel")
    return nb if par is not None and getattr(par, "_is_initialized", False) else None


@contextlib.contextmanager
def limited(work: int | None) -> Iterator[int]:
    """Run the block on :func:`threads_for` ``(work)`` torch threads; yields that count.

    Afterwards torch's thread count and (where numba's pool runs) this thread's numba thread
    count are what they were before, whatever the block did.
    """
    torch_before = th.get_num_threads()
    nb = _numba_pool()
    numba_before = nb.get_num_threads() if nb is not None else None
    n = threads_for(work)
    if n != torch_before:
        th.set_num_threads(n)
    try:
        yield n
    finally:
        nb = _numba_pool()
        if nb is not None:
            want = numba_before if numba_before is not None else nb.config.NUMBA_NUM_THREADS
            if nb.get_num_threads() != want:
                nb.set_num_threads(want)
        if th.get_num_threads() != torch_before:
            th.set_num_threads(torch_before)


@contextlib.contextmanager
def numba_threads() -> Iterator[int]:
    """Numba's threads for a compiled parallel loop in the block: torch's current count (the
    enclosing :func:`limited`'s choice), at most numba's pool; yields it. Torch's count and
    this thread's numba count are put back afterwards (numba's first parallel loop launches its
    pool, which can reset the OpenMP thread count torch reads)."""
    import numba

    n = th.get_num_threads()
    before = numba.get_num_threads()  # launches the pool on first use
    want = max(1, min(n, int(getattr(numba.config, "NUMBA_NUM_THREADS"))))  # noqa: B009
    if want != before:
        numba.set_num_threads(want)
    if th.get_num_threads() != n:
        th.set_num_threads(n)
    try:
        yield want
    finally:
        if numba.get_num_threads() != before:
            numba.set_num_threads(before)
        if th.get_num_threads() != n:
            th.set_num_threads(n)


def parallel_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(x) for x in items]``, the items spread over ``min(torch's threads, len(items))``
    Python threads, each running its torch operations on one thread (torch's count is 1 during
    the call and put back afterwards).

    For independent tasks of many large operations (the approximate estimator's fits): a task's
    operations run inline on its own thread, so there is no barrier per operation, only one at
    the end. Beside other multi-threaded programs a descheduled thread then delays its own task,
    not every operation of every task (torch's own threads wait at each operation's barrier;
    docs/reports/approx_linear.md, "Threads"). Each task computes on one thread
    whatever the caller's count, so the results are those of the loop on one thread, to the
    last bit.
    """
    items = list(items)
    workers = min(th.get_num_threads(), len(items))

    def on_one_thread(x: T) -> R:
        # A new thread starts with OpenMP's default count, which matrix products (MKL) read
        # until torch first initialises the thread; set it before any operation.
        th.set_num_threads(1)
        return fn(x)

    with limited(0):  # no stored transitions: one torch thread
        if workers <= 1:
            return [fn(x) for x in items]
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(on_one_thread, items))


def entry_point(fn: F) -> F:
    """Decorate a public function: it runs under :func:`limited` with the :func:`step_work` of
    the first MDP among its arguments (none: the caller's threads), so it uses one thread on
    small MDPs and leaves the caller's thread settings as they were."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        work = None
        for a in (*args, *kwargs.values()):
            work = step_work(a)
            if work is not None:
                break
        with limited(work):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
