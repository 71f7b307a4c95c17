"""Paper Table 1: mean reward per step on TemptingButton (Example 2) for Q, DQN, A2C and PPO.

Writes ``runs.csv`` (one row per agent and seed), ``table1.csv`` (ours beside the paper's),
``results.json`` (config, library versions, results) and ``table1.png`` into ``results_dir``.
The paper's error is "StdErr" = population standard deviation over seeds divided by 5 (the
number of seeds); we report that convention and the sample standard deviation.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

import numpy as np
import torch as th

from imitation_meg.config import library_versions, write_csv, write_json
from imitation_meg.extended import envs, run
from imitation_meg.extended.registry import agent_factory

PAPER = {"Q": (-0.44858, 0.00044), "DQN": (-0.46687, 0.00137), "A2C": (-0.49820, 0.00045),
         "PPO": (-0.24217, 0.00793)}


@dataclasses.dataclass(frozen=True)
class Config:
    """Table 1 settings (paper: 100k steps, 5 seeds)."""

    env: str = "TemptingButton"
    agents: tuple[str, ...] = ("Q", "DQN", "A2C", "PPO")
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    n_steps: int = 100_000
    results_dir: str = "results/extended_table1"


def main(cfg: Config) -> dict:
    """Run every agent on every seed; returns the summary rows."""
    th.set_num_threads(1)
    env_cls = envs.get_env(cfg.env)
    out = pathlib.Path(cfg.results_dir)
    runs, summary = [], []
    for name in cfg.agents:
        means = []
        for seed in cfg.seeds:
            t0 = time.perf_counter()
            res = run(env_cls, agent_factory(name, {"total_timesteps": cfg.n_steps} if name in ("DQN", "A2C", "PPO") else None),
                      cfg.n_steps, seed=seed)
            means.append(res.mean_reward)
            runs.append({"agent": name, "seed": seed, "n_steps": cfg.n_steps, "mean_reward": res.mean_reward,
                         "seconds": round(time.perf_counter() - t0, 2)})
            write_csv(out / "runs.csv", runs)  # progress survives an interrupted run
            print(runs[-1], flush=True)
        m = np.asarray(means)
        paper = PAPER.get(name, (float("nan"), float("nan")))
        summary.append({"agent": name, "mean": float(m.mean()),
                        "paper_stderr_convention": float(m.std(ddof=0) / len(m)),
                        "sample_std": float(m.std(ddof=1)) if len(m) > 1 else 0.0, "n_seeds": len(m),
                        "paper_mean": paper[0], "paper_stderr": paper[1]})
    write_csv(out / "runs.csv", runs)
    write_csv(out / "table1.csv", summary)
    write_json(out / "results.json", {"config": cfg, "versions": library_versions(), "runs": runs,
                                      "summary": summary})
    _figure(summary, out / "table1.png", cfg)
    return {"summary": summary, "runs": runs}


def _figure(summary: list[dict], path: pathlib.Path, cfg: Config) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(summary))
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(x - 0.2, [s["mean"] for s in summary], 0.4, yerr=[s["paper_stderr_convention"] for s in summary],
           label=f"ours ({cfg.n_steps} steps, {len(cfg.seeds)} seeds)")
    ax.bar(x + 0.2, [s["paper_mean"] for s in summary], 0.4, label="paper (100k steps, 5 seeds)")
    ax.set_xticks(x, [s["agent"] for s in summary])
    ax.set_ylabel("mean reward per step")
    ax.set_title(cfg.env)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    import sys

    from imitation_meg.config import run_config

    run_config(sys.argv[1])
