"""A fixed background load for the benchmark: processes doing torch matrix products.

What a training job beside MEG does to the machine: each load process multiplies two
``size x size`` float32 matrices in a loop with torch's default number of threads (its OpenMP /
MKL workers compete for every core). The benchmark driver starts the load before a row and
stops it after (:func:`background_load`); by hand:

    python benchmarks/load.py --procs 2 --size 1024     # until Ctrl-C

Each process stops by itself when its parent exits (it polls its parent's id), so a killed
benchmark leaves no load behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

__all__ = ["background_load", "main", "work"]

# Seconds between checks that the parent is still alive.
_POLL_S = 0.5


def work(size: int, parent: int) -> None:
    """Multiply two ``size x size`` float32 matrices in a loop until ``parent`` exits."""
    import torch as th

    gen = th.Generator().manual_seed(0)
    a = th.randn(size, size, generator=gen)
    b = th.randn(size, size, generator=gen)
    out = th.empty(size, size)
    last = time.monotonic()
    while True:
        th.mm(a, b, out=out)
        now = time.monotonic()
        if now - last > _POLL_S:
            last = now
            if os.getppid() != parent:  # the parent is gone (re-parented to init)
                return


@contextlib.contextmanager
def background_load(procs: int = 2, size: int = 1024) -> Iterator[list[int]]:
    """Run ``procs`` load processes for the duration of the block; yields their process ids.

    The processes inherit this process's environment minus any thread-count variables
    (``OMP_NUM_THREADS`` and friends), so each uses torch's default threads. They are started
    and warmed up (0.5 s) before the block and terminated (then killed, if need be) after it.
    """
    if procs < 0 or size < 1:
        raise ValueError(f"procs must be >= 0 and size >= 1, got procs={procs}, size={size}.")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    }
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
        f"import load; load.work({int(size)}, {os.getpid()})"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
        for _ in range(procs)
    ]
    try:
        time.sleep(0.5 if procs else 0.0)
        yield [c.pid for c in children]
    finally:
        for c in children:
            c.terminate()
        for c in children:
            try:
                c.wait(timeout=5)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()


def main(argv: list[str] | None = None) -> None:
    """Run the load until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=2, help="load processes (default 2)")
    parser.add_argument("--size", type=int, default=1024, help="matrix size (default 1024)")
    args = parser.parse_args(argv)
    with background_load(args.procs, args.size) as pids:
        print(f"load processes {pids}; Ctrl-C stops them", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
