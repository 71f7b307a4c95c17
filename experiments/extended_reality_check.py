"""Reality Check (paper Def. 8, Sec. 5-6): original versus reality-checked agents.

Two measurements per agent: mean reward per step on IgnoreRewards (paper Example 1), and the
self-reflection measure over the 50-environment battery. Writes ``runs.csv``, ``summary.csv``,
``results.json`` and ``reality_check.png`` into ``results_dir``. The paper reports no number for
these; its claim (Sec. 6 and the library's table) is that the reality check improves learning
agents on IgnoreRewards and leaves TemptingButton unchanged.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

import numpy as np
import torch as th

from imitation_meg.extended import envs, run, self_reflection_measure
from imitation_meg.extended.registry import agent_factory
from imitation_meg.results import write_results


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings; ``battery_steps = 0`` skips the battery; ``tail_steps``: the last steps of each
    IgnoreRewards run over which the late mean reward is also reported."""

    agents: tuple[str, ...] = ("Q", "DQN", "A2C", "PPO")
    seeds: tuple[int, ...] = (0, 1, 2)
    ignore_rewards_steps: int = 5000
    battery_steps: int = 100
    battery_seeds: tuple[int, ...] = (0,)
    tail_steps: int = 1000
    agent_kwargs: dict = dataclasses.field(default_factory=dict)
    results_dir: str = "results/extended_reality_check"


def _factory(name: str, cfg: Config, n_steps: int):
    """The factory of ``name`` (``"X"`` or ``"RC(X)"``); ``RC(X)`` wraps X built with X's
    keywords, so the original and the reality-checked agent differ only by the wrapper."""
    base = name[3:-1] if name.startswith("RC(") and name.endswith(")") else name
    kwargs = dict(cfg.agent_kwargs.get(base, {}))
    if base in ("DQN", "A2C", "PPO"):
        kwargs.setdefault("total_timesteps", n_steps)
    return agent_factory(name, kwargs)


def main(cfg: Config) -> dict:
    """Run original and reality-checked agents; returns summary rows."""
    th.set_num_threads(1)
    out = pathlib.Path(cfg.results_dir)
    runs, summary = [], []
    for name in cfg.agents:
        row = {"agent": name}
        for label, wrap in (("original", name), ("reality_check", f"RC({name})")):
            vals, tails = [], []
            for seed in cfg.seeds:
                t0 = time.perf_counter()
                res = run(
                    envs.IgnoreRewards,
                    _factory(wrap, cfg, cfg.ignore_rewards_steps),
                    cfg.ignore_rewards_steps,
                    seed=seed,
                )
                vals.append(res.mean_reward)
                tails.append(float(res.rewards[-cfg.tail_steps :].mean()))
                sim = res.env.sim
                runs.append(
                    {
                        "agent": wrap,
                        "env": "IgnoreRewards",
                        "seed": seed,
                        "n_steps": cfg.ignore_rewards_steps,
                        "mean_reward": res.mean_reward,
                        "tail_mean_reward": tails[-1],
                        "sim_frozen_at": sim.inner.n_trainings
                        if getattr(sim, "frozen", False)
                        else None,
                        "seconds": round(time.perf_counter() - t0, 2),
                    }
                )
                print(runs[-1], flush=True)
            row[f"ignore_rewards_{label}"] = float(np.mean(vals))
            row[f"ignore_rewards_{label}_tail"] = float(np.mean(tails))
            if cfg.battery_steps > 0:
                bvals = []
                for seed in cfg.battery_seeds:
                    t0 = time.perf_counter()
                    m = self_reflection_measure(
                        _factory(wrap, cfg, cfg.battery_steps), cfg.battery_steps, seed=seed
                    )
                    bvals.append(m)
                    runs.append(
                        {
                            "agent": wrap,
                            "env": "battery(50)",
                            "seed": seed,
                            "n_steps": cfg.battery_steps,
                            "mean_reward": m,
                            "seconds": round(time.perf_counter() - t0, 2),
                        }
                    )
                row[f"battery_{label}"] = float(np.mean(bvals))
        summary.append(row)
    write_results(out, cfg, {"runs": runs, "summary": summary})
    _figure(summary, out / "reality_check.png", cfg)
    return {"summary": summary, "runs": runs}


def _figure(summary: list[dict], path: pathlib.Path, cfg: Config) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()

    keys = ["ignore_rewards"] + (["battery"] if cfg.battery_steps > 0 else [])
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3), squeeze=False)
    x = np.arange(len(summary))
    for ax, key in zip(axes[0], keys, strict=True):
        ax.bar(x - 0.2, [s[f"{key}_original"] for s in summary], 0.4, label="original")
        ax.bar(x + 0.2, [s[f"{key}_reality_check"] for s in summary], 0.4, label="reality check")
        ax.set_xticks(x, [s["agent"] for s in summary])
        ax.set_title(key.replace("_", " "))
        ax.set_ylabel("mean reward per step")
        ax.axhline(0, color="k", lw=0.5)
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    import sys

    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
