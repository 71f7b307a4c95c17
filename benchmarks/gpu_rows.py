"""The exact solvers' large rows and the approximate estimator's fitting step on a CUDA device.

Prints one JSON object per measurement as it finishes (docs/benchmark.md, "On a GPU", holds
the figures of an H200). Every row builds its MDP on the device and times the solver call
alone, synchronising the device before reading the clock.

Usage (from a checkout's root, on a machine where ``torch.cuda.is_available()``)::

    python benchmarks/gpu_rows.py known        # known utility: 1e6 float64 / float32, 1e7 float32
    python benchmarks/gpu_rows.py unknown 1e5  # unknown utility over every state utility
    python benchmarks/gpu_rows.py unknown 1e6
    python benchmarks/gpu_rows.py fitstep      # one batched soft Q-fit step, CPU and GPU
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import sys
import time
from typing import Any

import numpy as np
import torch as th

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench

__all__ = ["fit_step", "known_rows", "main", "unknown_row"]


def _gib(n_bytes: float) -> float:
    return n_bytes / 2**30


def _sync() -> None:
    bench._sync("cuda")


def unknown_row(n_states: int) -> dict[str, Any]:
    """Unknown-utility MEG over every state utility on the random sparse MDP of the CPU table
    (:func:`bench.row_meg_unknown_random` at ``H = 100`` on the GPU), with the GPU's peak
    memory."""
    th.cuda.reset_peak_memory_stats()
    row = bench.row_meg_unknown_random(n_states, 100, device="cuda")
    return {
        "row": f"unknown utility, S = {n_states:.0e}, float64",
        "seconds": row["ours_s"],
        "meg": row["meg"],
        "converged": row["converged"],
        "newton": row["iterations"],
        "cg": row["cg_iterations"],
        "passes": row["passes"],
        "gpu_peak_gib": _gib(th.cuda.max_memory_allocated()),
    }


def known_rows() -> list[dict[str, Any]]:
    """Known-utility MEG on the CPU table's random sparse MDPs (:func:`bench.row_meg_random` at
    ``H = 100`` on the GPU, softmax-lookahead policy): 1e6 states in float64 and float32, 1e7
    states in float32 (building the MDP and the policy timed apart; no float64 reference for
    the float32 rows, which at 1e7 would need some 32 GiB more GPU memory)."""
    rows = []
    for n_states, dtype in ((10**6, "float64"), (10**6, "float32"), (10**7, "float32")):
        th.cuda.reset_peak_memory_stats()
        row = bench.row_meg_random(
            n_states,
            100,
            dtype=dtype,
            device="cuda",
            n_threads=th.get_num_threads(),
            float64_reference=False,
        )
        rows.append(
            {
                "row": f"known utility, S = {n_states:.0e}, {dtype}",
                "build_seconds": row["build_s"],
                "seconds": row["ours_s"],
                "meg": row["meg"],
                "converged": row["converged"],
                "passes": row["passes"],
                "gpu_peak_gib": _gib(th.cuda.max_memory_allocated()),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        th.cuda.empty_cache()
    return rows


def fit_step() -> dict[str, Any]:
    """Milliseconds per Adam step of the approximate estimator's batched fit at CartPole's
    shapes (3 models, 4 observation floats, 2 actions, H = 500, 92 steps per iteration, batch
    256, 180 000 rows each; the per-iteration targets included), on the CPU with one thread and
    with all of them, and on the GPU."""
    from imitation_meg.approx.rollouts import Rollouts
    from imitation_meg.approx.soft_q import fit_soft_q_ensemble, new_model

    rng = np.random.default_rng(0)
    n, horizon = 180_000, 500
    n_ep = n // horizon
    t = np.tile(np.arange(horizon), n_ep)
    data = Rollouts(
        x=rng.standard_normal((n, 4)).astype(np.float32),
        t=t,
        a=rng.integers(0, 2, n),
        r=rng.random(n),
        x_next=rng.standard_normal((n, 4)).astype(np.float32),
        done=t == horizon - 1,
        episode=np.repeat(np.arange(n_ep), horizon),
        lengths=np.full(n_ep, horizon),
        returns=np.full(n_ep, float(horizon)),
    )
    out: dict[str, Any] = {"row": "one batched soft Q-fit step (ms), CartPole's shapes"}
    threads = th.get_num_threads()
    try:
        for device, n_threads in (("cpu", 1), ("cpu", threads), ("cuda", 1)):
            th.set_num_threads(n_threads)
            models = [
                new_model(data, 2, horizon, hidden=(64, 64), seed=s, last_steps=3) for s in range(3)
            ]
            kw: dict[str, Any] = {"average": 0.5, "device": device}
            fit_soft_q_ensemble(models, [data] * 3, iterations=2, steps_per_iteration=20, **kw)
            t0 = time.perf_counter()
            fit_soft_q_ensemble(models, [data] * 3, iterations=10, steps_per_iteration=92, **kw)
            if device == "cuda":
                _sync()
            out[f"{device}, {n_threads} thread(s)"] = 1000 * (time.perf_counter() - t0) / 920
    finally:
        th.set_num_threads(threads)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("known", "unknown", "fitstep"))
    parser.add_argument("n_states", nargs="?", default="1e5", help="unknown: states (1e5)")
    args = parser.parse_args(argv)
    if not th.cuda.is_available():
        parser.exit(2, "gpu_rows.py: torch sees no CUDA device; run it on a machine with one\n")
    head = {"gpu": th.cuda.get_device_name(0), "torch": th.__version__}
    print(json.dumps(head), flush=True)
    if args.what == "known":
        known_rows()
    elif args.what == "unknown":
        print(json.dumps(unknown_row(int(float(args.n_states)))), flush=True)
    else:
        print(json.dumps(fit_step()), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"peak_rss_gib": rss}), flush=True)


if __name__ == "__main__":
    main()
