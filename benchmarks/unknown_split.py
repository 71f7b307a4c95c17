"""Where the time of unknown-utility MEG over every state utility goes, and what a second core gives.

The benchmark's unknown-utility row (:func:`bench.row_meg_unknown_random`: a random sparse MDP,
4 actions, 4 successors, the softmax-lookahead policy) solved by :func:`imitation_meg.meg_unknown`
with the objective's three kinds of work timed (docs/benchmark.md, "Targets"):

- ``value``: ``L(theta)``, a backward pass (torch);
- ``grad``: the gradient, a forward pass (compiled where numba is installed);
- ``hvp``: a Hessian-vector product of the conjugate gradients, a backward and a forward pass.

``--threads`` times one Hessian-vector product at the solution's first Newton point on one
thread and on two, alternating (the library picks one thread below ``2**22`` stored transitions
per step, :data:`imitation_meg.core.kernels.threads.PARALLEL_MIN_WORK`; the script overrides that choice).

Usage::

    python benchmarks/unknown_split.py 1e5            # the split of one solve
    python benchmarks/unknown_split.py 1e5 --threads  # one product, one thread against two
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch as th

import imitation_meg
from imitation_meg.core import unknown
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.likelihood import ClassObjective
from imitation_meg.envs import random_mdp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench

__all__ = ["main", "split", "threads"]

_PARTS = ("value", "grad", "hvp")


@contextlib.contextmanager
def _timed_objective(record: dict[str, list[float]], made: list[ClassObjective]) -> Iterator[None]:
    """``meg_unknown`` builds its objective from a subclass that times each call into
    ``record`` and keeps the objective in ``made``; the library's class is put back afterwards."""

    class Timed(ClassObjective):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

        def value(self, theta: th.Tensor, *, commit: bool = True) -> float:
            t0 = time.perf_counter()
            out = super().value(theta, commit=commit)
            record["value"].append(time.perf_counter() - t0)
            return out

        def grad(self) -> th.Tensor:
            t0 = time.perf_counter()
            out = super().grad()
            record["grad"].append(time.perf_counter() - t0)
            return out

        def neg_hvp(self, v: th.Tensor) -> th.Tensor:
            t0 = time.perf_counter()
            out = super().neg_hvp(v)
            record["hvp"].append(time.perf_counter() - t0)
            return out

    saved = unknown.ClassObjective
    unknown.ClassObjective = Timed  # type: ignore[misc]
    try:
        yield
    finally:
        unknown.ClassObjective = saved  # type: ignore[misc]


def split(n_states: int, horizon: int = 100, *, max_iter: int = 200) -> dict[str, Any]:
    """One solve of the row: its time, MEG, convergence and counts, and per part the calls and
    their seconds."""
    mdp = random_mdp(n_states, 4, horizon, branching=4, seed=0)
    pi = bench.goal_directed_policy(mdp)
    record: dict[str, list[float]] = {k: [] for k in _PARTS}
    made: list[ClassObjective] = []
    t0 = time.perf_counter()
    with _timed_objective(record, made):
        res = imitation_meg.meg_unknown(pi, mdp, max_iter=max_iter)
    out: dict[str, Any] = {
        "seconds": time.perf_counter() - t0,
        "meg": res.meg,
        "converged": res.converged,
        "passes": made[-1].passes if made else 0,
    }
    for k in _PARTS:
        out[f"{k}_calls"] = len(record[k])
        out[f"{k}_s"] = sum(record[k])
    return out


def threads(n_states: int, horizon: int = 100, *, repeats: int = 3) -> dict[str, list[float]]:
    """Seconds of one Hessian-vector product (at the point after one Newton step) on one
    thread and on two, ``repeats`` times each, alternating; torch's thread count and the
    threshold are put back afterwards."""
    mdp = random_mdp(n_states, 4, horizon, branching=4, seed=0)
    pi = bench.goal_directed_policy(mdp)
    made: list[ClassObjective] = []
    with _timed_objective({k: [] for k in _PARTS}, made):
        imitation_meg.meg_unknown(pi, mdp, max_iter=1)
    obj = made[-1]
    v = th.randn(obj.features.n_features, dtype=th.float64, generator=th.Generator().manual_seed(0))
    times: dict[str, list[float]] = {"1": [], "2": []}
    floor, before = _threads.PARALLEL_MIN_WORK, th.get_num_threads()
    try:
        th.set_num_threads(2)
        for _ in range(repeats):
            for n in (1, 2):
                # the threshold decides: above every MDP's work for 1 thread, below it for 2
                _threads.PARALLEL_MIN_WORK = 1 if n == 2 else 2**62
                with _threads.limited(_threads.step_work(mdp)):
                    t0 = time.perf_counter()
                    obj.neg_hvp(v)
                    times[str(n)].append(time.perf_counter() - t0)
    finally:
        _threads.PARALLEL_MIN_WORK = floor
        th.set_num_threads(before)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("n_states", type=float, help="states of the random MDP, e.g. 1e5")
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--threads", action="store_true", help="one product, 1 thread vs 2")
    args = parser.parse_args(argv)
    n = int(args.n_states)
    out = threads(n, args.horizon) if args.threads else split(n, args.horizon)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
