"""Paper Table 1: mean reward per step on TemptingButton (Example 2) for Q, DQN, A2C and PPO.

Units: one per agent and seed. Writes ``runs.csv`` (one row per agent and seed), ``table1.csv``
(ours beside the paper's), ``results.json`` (config, library versions, results) and
``table1.png`` into ``results_dir``; each run's wall seconds are in the runner's ``run.json``.
The paper's error is "StdErr" = population standard deviation over seeds divided by 5 (the
number of seeds); we report that convention and the sample standard deviation.

Run: ``imitation-meg reproduce configs/extended_table1.yaml --backend process --workers 2``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

import numpy as np

from imitation_meg.extended import envs, run
from imitation_meg.extended.registry import agent_factory
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values

PAPER = {
    "Q": (-0.44858, 0.00044),
    "DQN": (-0.46687, 0.00137),
    "A2C": (-0.49820, 0.00045),
    "PPO": (-0.24217, 0.00793),
}
# "PPO-upstream" is our PPO fed the way the paper's library fed it (see
# imitation_meg.extended.sb3_agents): compared with the paper's PPO value.
PAPER["PPO-upstream"] = PAPER["PPO"]


@dataclasses.dataclass(frozen=True)
class Config:
    """Table 1 settings (paper: 100k steps, 5 seeds)."""

    env: str = "TemptingButton"
    agents: tuple[str, ...] = ("Q", "DQN", "A2C", "PPO")
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    n_steps: int = 100_000
    results_dir: str = "results/extended_table1"

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(self, positive=("n_steps",), non_negative=("seeds",))


# Units carry their agent and seed: changing these lists keeps the finished runs.
SWEEP_FIELDS = ("agents", "seeds")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per agent and seed (agent-major, the order of ``runs.csv``)."""
    return [{"agent": name, "seed": seed} for name in cfg.agents for seed in cfg.seeds]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train and run one agent for ``n_steps`` on one seed; its mean reward per step."""
    name, seed = unit["agent"], unit["seed"]
    sb3 = name in ("DQN", "A2C", "PPO", "PPO-upstream")
    kwargs = {"total_timesteps": cfg.n_steps} if sb3 else None
    res = run(envs.get_env(cfg.env), agent_factory(name, kwargs), cfg.n_steps, seed=seed)
    return {"agent": name, "seed": seed, "n_steps": cfg.n_steps, "mean_reward": res.mean_reward}


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``runs.csv`` (one row per agent and seed), ``table1.csv``, ``results.json``, the figure."""
    out = pathlib.Path(cfg.results_dir)
    runs = list(results)
    summary = summarize(runs)
    write_results(out, cfg, {"runs": runs, "table1": summary})
    _figure(summary, out / "table1.png", cfg)
    return {"summary": summary, "runs": runs}


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


def summarize(runs: list[dict]) -> list[dict]:
    """Table rows (mean, the paper's error convention, sample sd, paper values) per agent."""
    summary = []
    for name in dict.fromkeys(r["agent"] for r in runs):
        m = np.asarray([float(r["mean_reward"]) for r in runs if r["agent"] == name])
        paper = PAPER.get(name, (float("nan"), float("nan")))
        summary.append(
            {
                "agent": name,
                "mean": float(m.mean()),
                "paper_stderr_convention": float(m.std(ddof=0) / len(m)),
                "sample_std": float(m.std(ddof=1)) if len(m) > 1 else 0.0,
                "n_seeds": len(m),
                "paper_mean": paper[0],
                "paper_stderr": paper[1],
            }
        )
    return summary


def _figure(summary: list[dict], path: pathlib.Path, cfg: Config) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()

    x = np.arange(len(summary))
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(
        x - 0.2,
        [s["mean"] for s in summary],
        0.4,
        yerr=[s["paper_stderr_convention"] for s in summary],
        label=f"ours ({cfg.n_steps} steps, {len(cfg.seeds)} seeds)",
    )
    ax.bar(x + 0.2, [s["paper_mean"] for s in summary], 0.4, label="paper (100k steps, 5 seeds)")
    ax.set_xticks(x, [s["agent"] for s in summary])
    ax.set_ylabel("mean reward per step")
    ax.set_title(cfg.env)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
