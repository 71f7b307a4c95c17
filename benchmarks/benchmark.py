"""Speed and scale benchmark: batched / sparse soft VI and MEG against imitation's numpy functions.

Every row runs in a fresh process (clean peak RSS). Within a row ours and the incumbent are
interleaved and the best of ``repeats`` runs is kept, so ratios are measured under the same load.
Every row runs twice, quiet and then beside a fixed load (``load_procs`` processes doing torch
matrix products with torch's default threads, :mod:`load`; ``load_procs: 0`` turns it off), so
each ratio is measured both ways. Writes ``benchmark.md``, ``benchmark.csv`` and
``results.json`` into ``results_dir`` and prints the markdown tables.

Usage:
    .venv/bin/python benchmarks/benchmark.py configs/benchmark.yaml
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import torch as th

# The benchmark's helpers live beside this driver, outside the installed package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench
import load

from imitation_meg.results import library_versions, write_csv, write_json


@dataclasses.dataclass(frozen=True)
class Config:
    """Benchmark settings (sizes, repeats, which rows)."""

    # (width, height, horizon) triples. Typed tuple[int, ...]: the shared loader's fixed-length
    # tuple coercion swaps types and values (reported), so lengths are checked in main().
    cliff_grids: tuple[tuple[int, ...], ...] = ((10, 4, 30), (15, 6, 18), (100, 20, 110))
    sweep_betas: int = 32
    random_states: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    random_horizon: int = 100
    random_sweep_states: tuple[int, ...] = (10_000,)
    random_incumbent_states: tuple[int, ...] = (10_000,)
    float32_states: tuple[int, ...] = (100_000, 1_000_000)
    meg_grid: tuple[int, ...] = (10, 4, 30)
    meg_epsilon: float = 0.3
    # Further known-utility MEG rows on CliffWorld: (width, height, horizon, epsilon).
    meg_cliff_extra: tuple[tuple[float, ...], ...] = (
        (10, 4, 30, 0.1),
        (10, 4, 30, 0.4),
        (100, 20, 110, 0.1),
        (100, 20, 110, 0.4),
    )
    meg_cliff_repeats_large: int = 3
    meg_random_states: tuple[int, ...] = (1_000_000,)
    meg_random_policies: tuple[str, ...] = ("softmax", "epsilon_greedy")
    meg_random_float32_states: tuple[int, ...] = (1_000_000,)
    # The random-MDP MEG rows run once per entry with that many threads (the others: one).
    meg_random_threads: tuple[int, ...] = (1,)
    # One MEG pass, the compiled fused pass against the torch pass, on random sparse MDPs of
    # these sizes (once per entry of meg_random_threads; needs numba).
    meg_pass_states: tuple[int, ...] = ()
    # Long horizons: (states, horizon) of a small random MDP.
    meg_long: tuple[tuple[int, ...], ...] = ((3, 100_000),)
    unknown_steps: int = 500
    unknown_restarts: int = 4
    # Exact unknown-utility MEG (every state utility) on random sparse MDPs of these sizes; on
    # those also in unknown_alg2_states, Algorithm 2 (MLP) with these settings in the same process.
    unknown_random_states: tuple[int, ...] = (10_000, 100_000)
    unknown_alg2_states: tuple[int, ...] = (10_000,)
    unknown_alg2_steps: int = 50
    unknown_alg2_restarts: int = 1
    # The discounted infinite-horizon setting: known and every-state-utility MEG on random
    # sparse MDPs of these sizes (unknown-utility only up to discounted_unknown_max states).
    discounted_states: tuple[int, ...] = (150, 10_000, 100_000)
    discounted_gamma: float = 0.9
    discounted_unknown_max: int = 100_000
    repeats: int = 3
    repeats_large: int = 1
    # Best-of-N for CliffWorld sweeps whose incumbent side is slow (S >= slow_states): 32
    # incumbent calls of ~3 s each on 100x20.
    repeats_slow: int = 1
    slow_states: int = 1000
    row_timeout_s: float = 1200.0
    # Each row runs again beside this many processes doing load_size x load_size float32 matrix
    # products with torch's default threads (benchmarks/load.py); 0 runs the quiet rows only.
    load_procs: int = 2
    load_size: int = 1024
    # torch threads of each row's process: 0 keeps torch's default, as in a user's process (the
    # package then picks one thread for small problems); rows with n_threads set their own.
    threads: int = 0
    # Fresh process per row (clean peak RSS); the fast config runs rows in-process (no imports
    # per row), where the peak RSS is the process's so far.
    subprocess: bool = True
    bandwidth_bytes: int = 1 << 28
    gpu: bool = True
    results_dir: str = "results/benchmark"


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e4 or abs(v) < 1e-3:
            return f"{v:.{digits - 1}e}"
        return f"{v:.{digits}g}"
    return str(v)


def _run_row(cfg: Config, kind: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    if cfg.subprocess:
        return bench.run_row_in_subprocess(
            kind, timeout=cfg.row_timeout_s, threads=cfg.threads, **kwargs
        )
    row = bench.ROWS[kind](**kwargs)
    if row is not None:
        row["peak_rss_mib"] = bench.peak_rss_mib()
    return row


def _note(kind: str, kwargs: dict[str, Any], row: dict[str, Any]) -> str:
    """Why a row has no incumbent, how many repeats it took, and solver details."""
    parts = [f"best of {row['repeats']}"] if row.get("repeats", 1) > 1 else ["timed once"]
    if row.get("incumbent_s") is None and kind in ("svi_random", "meg_random"):
        S = row["S"]
        gib = S * 4 * S * 8 / 2**30
        if kind == "svi_random" and S <= 10_000:
            parts.append(f"incumbent not run for K = {row['K']} (K x ~the K = 1 incumbent time)")
        else:
            parts.append(f"incumbent cannot run (dense S x A x S = {gib:.3g} GiB)")
    if kind == "meg_cliff":
        parts.append(
            f"ours {row['evaluations']} betas in {row['passes']} passes; incumbent "
            f"{row['incumbent_calls']} calls; {row['speedup_vs_fit']:.1f}x a "
            f"{row['fit_evals']}-evaluation fit"
        )
    if kind in ("meg_random", "meg_long"):
        parts.append(
            f"{row['evaluations']} betas in {row['passes']} passes, beta = {row['beta']:.6g}, "
            f"converged {row['converged']}"
        )
        if row.get("fused") is not None:
            parts.append("fused passes (numba)" if row["fused"] else "torch passes")
        if row.get("dtype") == "float32" and row.get("timed_peak_rss_mib") is not None:
            parts.append(
                f"peak RSS of the float32 call itself {row['timed_peak_rss_mib']:.0f} MiB (the "
                "row's peak includes its untimed float64 reference)"
            )
    if kind in ("meg_random", "meg_pass") and row.get("threads", 1) != 1:
        parts.append(f"{row['threads']} threads")
    if kind == "svi_random" and row.get("gather_s"):
        parts.append(
            f"of one backup: streaming the CSR arrays {row['stream_s'] * 1e3:.3g} ms, gathering "
            f"the values at the column indices {row['gather_s'] * 1e3:.3g} ms, the product "
            f"{row['sparse_pass_s'] * 1e3:.3g} ms"
        )
    if kind == "meg_discounted":
        parts.append(f"Bellman residual {row['bellman_residual']:.1e}")
        if row.get("unknown_s") is not None:
            parts.append(
                f"every state utility: {row['unknown_s']:.3g} s, MEG {row['meg_unknown']:.6g}, "
                f"{row['iterations']} Newton / {row['cg_iterations']} CG steps, converged "
                f"{row['unknown_converged']}"
            )
    if kind in ("meg_unknown", "meg_unknown_random"):
        parts.append(
            f"exact: {row['iterations']} Newton steps, {row['cg_iterations']} CG steps, "
            f"{row['passes']} passes, converged {row['converged']}"
        )
        if row.get("exact_peak_rss_mib") is not None:
            parts.append(f"exact solver's peak RSS {row['exact_peak_rss_mib']:.0f} MiB")
        if row.get("ours_to_incumbent_value_s") is not None:
            parts.append(
                f"exact solver first at Algorithm 2's value after "
                f"{row['ours_to_incumbent_value_s']:.3g} s "
                f"({row['speedup_at_incumbent_value']:.0f}x)"
            )
    return "; ".join(parts)


# The columns that name a row, first in both tables.
_ROW_NAME = ("task", "env", "S", "H", "K", "dtype")


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    """A markdown table: the header ``_ROW_NAME + head``, then one line per row of cells."""
    lines = [
        "| " + " | ".join((*_ROW_NAME, *head)) + " |",
        "|" + "---|" * (len(_ROW_NAME) + len(head)),
    ]
    lines += ["| " + " | ".join(str(c) for c in cells) + " |" for cells in rows]
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]], bandwidth: float) -> str:
    """The benchmark table in markdown."""
    head = (
        "device",
        "ours (s)",
        "incumbent (s)",
        "speedup",
        "peak RSS (MiB)",
        "err vs incumbent",
        "float32 err",
        "bandwidth fraction",
        "note",
    )
    cells = []
    for r in rows:
        frac = None
        if r.get("sparse_pass_bytes"):
            frac = r["sparse_pass_bytes"] / r["sparse_pass_s"] / bandwidth
        cells.append(
            (
                *(r[k] for k in _ROW_NAME),
                r["device"],
                _fmt(r["ours_s"]),
                _fmt(r.get("incumbent_s")),
                (f"{r['speedup']:.1f}x" if r.get("speedup") else ""),
                _fmt(r.get("peak_rss_mib"), 4),
                _fmt(r.get("err_vs_incumbent")),
                _fmt(r.get("float32_err")),
                _fmt(frac),
                r.get("note", ""),
            )
        )
    return _table(head, cells)


def _run_once(
    cfg: Config, kind: str, kwargs: dict[str, Any], skipped: list[dict[str, Any]], label: str
) -> dict[str, Any] | None:
    """One run of a row (None if it failed, timed out or is not available: then in
    ``skipped``)."""
    t0 = time.perf_counter()
    try:
        row = _run_row(cfg, kind, kwargs)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        reason = f"{label}: failed or timed out after {time.perf_counter() - t0:.0f} s: "
        reason += str(e)[-300:]
        skipped.append({"kind": kind, **kwargs, "reason": reason})
        print(f"[skipped] {kind} {kwargs}: {reason}", flush=True)
        return None
    if row is None:
        skipped.append(
            {"kind": kind, **kwargs, "reason": "imitation_meg.meg_unknown not available"}
        )
        return None
    row["row_wall_s"] = time.perf_counter() - t0
    return row


def _run_both(
    cfg: Config, kind: str, kwargs: dict[str, Any], skipped: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """A row quiet, then beside the load: the quiet row with the loaded run's times (every
    ``*_s`` figure) as ``loaded_*``, its ratios and ``slowdown`` (loaded / quiet, ours)."""
    row = _run_once(cfg, kind, kwargs, skipped, "quiet")
    if row is None:
        return None
    row["repeats"] = kwargs.get("repeats", 1)
    row["note"] = _note(kind, kwargs, row)
    if cfg.load_procs == 0:
        return row
    with load.background_load(cfg.load_procs, cfg.load_size):
        loaded = _run_once(cfg, kind, kwargs, skipped, f"beside {cfg.load_procs} load processes")
    if loaded is None:
        return row
    for key, value in loaded.items():
        if key.endswith("_s") or key in ("speedup", "speedup_vs_fit", "peak_rss_mib"):
            row[f"loaded_{key}"] = value
    row["slowdown"] = loaded["ours_s"] / row["ours_s"]
    return row


def loaded_markdown(rows: list[dict[str, Any]], cfg: Config) -> str:
    """The table of every row quiet and beside the load."""
    head = (
        "ours quiet (s)",
        f"ours beside {cfg.load_procs} matmul processes (s)",
        "slowdown",
        "incumbent quiet (s)",
        "incumbent beside the load (s)",
        "speedup quiet",
        "speedup beside the load",
    )
    cells = []
    for r in rows:

        def ratio(key: str, r: dict[str, Any] = r) -> str:
            fit = r.get(key.replace("speedup", "speedup_vs_fit"))
            base = f"{r[key]:.1f}x" if r.get(key) else ""
            return base + (f" ({fit:.1f}x a {r['fit_evals']}-evaluation fit)" if fit else "")

        cells.append(
            (
                *(r[k] for k in _ROW_NAME),
                _fmt(r["ours_s"]),
                _fmt(r.get("loaded_ours_s")),
                f"{r['slowdown']:.2f}x" if r.get("slowdown") else "not run",
                _fmt(r.get("incumbent_s")),
                _fmt(r.get("loaded_incumbent_s")),
                ratio("speedup"),
                ratio("loaded_speedup"),
            )
        )
    return _table(head, cells)


def main(cfg: Config) -> dict:
    """Run every row (each in a fresh process), quiet and beside the load; returns ``{"rows",
    "bandwidth", "markdown", "skipped"}``."""
    if cfg.threads > 0:
        th.set_num_threads(cfg.threads)
    if cfg.load_procs < 0 or cfg.load_size < 1:
        raise ValueError(
            f"load_procs must be >= 0 and load_size >= 1, got {cfg.load_procs}, {cfg.load_size}."
        )
    for grid in (*cfg.cliff_grids, cfg.meg_grid):
        if len(grid) != 3:
            raise ValueError(f"grids are (width, height, horizon) triples, got {grid}.")
    for extra in cfg.meg_cliff_extra:
        if len(extra) != 4:
            raise ValueError(
                f"meg_cliff_extra rows are (width, height, horizon, epsilon), got {extra}."
            )
    for pair in cfg.meg_long:
        if len(pair) != 2:
            raise ValueError(f"meg_long rows are (states, horizon) pairs, got {pair}.")
    devices = ["cpu"] + (["cuda"] if cfg.gpu and th.cuda.is_available() else [])
    bandwidth = bench.copy_bandwidth(cfg.bandwidth_bytes)
    jobs: list[tuple[str, dict[str, Any]]] = []
    for w, h, H in cfg.cliff_grids:
        for K in (1, cfg.sweep_betas):
            reps = cfg.repeats_slow if (K > 1 and w * h >= cfg.slow_states) else cfg.repeats
            jobs.append(
                (
                    "svi_cliff",
                    {"width": w, "height": h, "horizon": H, "n_betas": K, "repeats": reps},
                )
            )
    for dev in devices:
        for S in cfg.random_states:
            Ks = (1, cfg.sweep_betas) if S in cfg.random_sweep_states else (1,)
            for K in Ks:
                inc = dev == "cpu" and K == 1 and S in cfg.random_incumbent_states
                jobs.append(
                    (
                        "svi_random",
                        {
                            "n_states": S,
                            "horizon": cfg.random_horizon,
                            "n_betas": K,
                            "repeats": cfg.repeats_large,
                            "incumbent": inc,
                            "device": dev,
                        },
                    )
                )
            if S in cfg.float32_states:
                jobs.append(
                    (
                        "svi_random",
                        {
                            "n_states": S,
                            "horizon": cfg.random_horizon,
                            "n_betas": 1,
                            "repeats": cfg.repeats_large,
                            "dtype": "float32",
                            "device": dev,
                        },
                    )
                )
    w, h, H = cfg.meg_grid
    jobs.append(
        (
            "meg_cliff",
            {
                "width": w,
                "height": h,
                "horizon": H,
                "epsilon": cfg.meg_epsilon,
                "repeats": cfg.repeats,
            },
        )
    )
    for cw, ch, cH, ceps in cfg.meg_cliff_extra:
        slow = cw * ch >= cfg.slow_states
        jobs.append(
            (
                "meg_cliff",
                {
                    "width": int(cw),
                    "height": int(ch),
                    "horizon": int(cH),
                    "epsilon": float(ceps),
                    "repeats": cfg.meg_cliff_repeats_large if slow else cfg.repeats,
                },
            )
        )
    for dev in devices:
        for n_threads in cfg.meg_random_threads:
            for S in cfg.meg_random_states:
                for policy in cfg.meg_random_policies:
                    jobs.append(
                        (
                            "meg_random",
                            {
                                "n_states": S,
                                "horizon": cfg.random_horizon,
                                "policy": policy,
                                "device": dev,
                                "n_threads": n_threads,
                            },
                        )
                    )
            for S in cfg.meg_random_float32_states:
                jobs.append(
                    (
                        "meg_random",
                        {
                            "n_states": S,
                            "horizon": cfg.random_horizon,
                            "dtype": "float32",
                            "device": dev,
                            "n_threads": n_threads,
                        },
                    )
                )
    for n_threads in cfg.meg_random_threads:
        for S in cfg.meg_pass_states:
            jobs.append(
                (
                    "meg_pass",
                    {"n_states": S, "horizon": cfg.random_horizon, "n_threads": n_threads},
                )
            )
    for n_long, h_long in cfg.meg_long:  # own names: w, h, H stay meg_grid's for the rows below
        jobs.append(("meg_long", {"n_states": int(n_long), "horizon": int(h_long)}))
    jobs.append(
        (
            "meg_unknown",
            {
                "width": w,
                "height": h,
                "horizon": H,
                "epsilon": cfg.meg_epsilon,
                "steps": cfg.unknown_steps,
                "restarts": cfg.unknown_restarts,
            },
        )
    )
    for S in cfg.unknown_random_states:
        alg2 = S in cfg.unknown_alg2_states
        jobs.append(
            (
                "meg_unknown_random",
                {
                    "n_states": S,
                    "horizon": cfg.random_horizon,
                    "alg2_steps": cfg.unknown_alg2_steps if alg2 else 0,
                    "alg2_restarts": cfg.unknown_alg2_restarts,
                },
            )
        )
    for S in cfg.discounted_states:
        jobs.append(
            (
                "meg_discounted",
                {
                    "n_states": S,
                    "gamma": cfg.discounted_gamma,
                    "unknown": cfg.discounted_unknown_max >= S,
                },
            )
        )
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    load_avg = [os.getloadavg()[0]]
    for kind, kwargs in jobs:
        row = _run_both(cfg, kind, kwargs, skipped)
        if row is not None:
            rows.append(row)
            loaded = (
                f", beside the load {row['loaded_ours_s']:.4g} s"
                if row.get("loaded_ours_s") is not None
                else ""
            )
            print(
                f"[{len(rows)}] {row['task']} | {row['env']} K={row['K']} {row['dtype']} "
                f"{row['device']}: {row['ours_s']:.4g} s{loaded}",
                flush=True,
            )
    load_avg.append(os.getloadavg()[0])
    table = markdown(rows, bandwidth)
    if cfg.load_procs > 0:
        table += "\n\n" + loaded_markdown(rows, cfg)
    if skipped:
        table += "\n\nRows not produced:\n" + "\n".join(
            f"- {s['kind']} { ({k: v for k, v in s.items() if k not in ('kind', 'reason')}) }: {s['reason']}"
            for s in skipped
        )
    out = pathlib.Path(cfg.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = (
        f"Memory bandwidth (copy of {cfg.bandwidth_bytes >> 20} MiB, best of 5): "
        f"{bandwidth / 1e9:.2f} GB/s. Threads: "
        f"{cfg.threads or 'torch default'} (unless a row's note says otherwise). "
        f"Devices: {', '.join(devices)}. Load average (1 min) at the start / end: "
        f"{load_avg[0]:.2f} / {load_avg[1]:.2f} on {os.cpu_count()} CPUs.\n\n"
    )
    (out / "benchmark.md").write_text(header + table + "\n")
    write_csv(out / "benchmark.csv", rows)
    write_json(
        out / "results.json",
        {
            "config": cfg,
            "versions": library_versions(),
            "bandwidth_bytes_per_s": bandwidth,
            "rows": rows,
            "skipped": skipped,
        },
    )
    print(header + table)
    return {"rows": rows, "bandwidth": bandwidth, "markdown": table, "skipped": skipped}


if __name__ == "__main__":
    import sys

    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
