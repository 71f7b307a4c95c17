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
import sys
from typing import Any

import numpy as np

from imitation_meg.extended import envs, run, self_reflection_measure
from imitation_meg.extended.registry import agent_factory
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values


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

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=("ignore_rewards_steps", "tail_steps"),
            non_negative=("seeds", "battery_steps", "battery_seeds"),
        )


def _factory(name: str, cfg: Config, n_steps: int):
    """The factory of ``name`` (``"X"`` or ``"RC(X)"``); ``RC(X)`` wraps X built with X's
    keywords, so the original and the reality-checked agent differ only by the wrapper."""
    base = name[3:-1] if name.startswith("RC(") and name.endswith(")") else name
    kwargs = dict(cfg.agent_kwargs.get(base, {}))
    if base in ("DQN", "A2C", "PPO"):
        kwargs.setdefault("total_timesteps", n_steps)
    return agent_factory(name, kwargs)


# Units name their agent and seed.
SWEEP_FIELDS = ("agents", "seeds", "battery_seeds")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """Per agent X, for X and RC(X): one IgnoreRewards run per seed, then (``battery_steps >
    0``) one battery measurement per battery seed (the order of ``runs.csv``)."""
    out: list[dict[str, Any]] = []
    for name in cfg.agents:
        for label in ("original", "reality_check"):
            out += [
                {"agent": name, "case": label, "env": "IgnoreRewards", "seed": seed}
                for seed in cfg.seeds
            ]
            if cfg.battery_steps > 0:
                out += [
                    {"agent": name, "case": label, "env": "battery(50)", "seed": seed}
                    for seed in cfg.battery_seeds
                ]
    return out


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """One IgnoreRewards run or one battery measurement: a row of ``runs.csv``."""
    name, seed = unit["agent"], unit["seed"]
    wrap = name if unit["case"] == "original" else f"RC({name})"
    if unit["env"] == "IgnoreRewards":
        res = run(
            envs.IgnoreRewards,
            _factory(wrap, cfg, cfg.ignore_rewards_steps),
            cfg.ignore_rewards_steps,
            seed=seed,
        )
        sim = res.env.sim
        return {
            "agent": wrap,
            "env": "IgnoreRewards",
            "seed": seed,
            "n_steps": cfg.ignore_rewards_steps,
            "mean_reward": res.mean_reward,
            "tail_mean_reward": float(res.rewards[-cfg.tail_steps :].mean()),
            "sim_frozen_at": sim.inner.n_trainings if getattr(sim, "frozen", False) else None,
        }
    m = self_reflection_measure(
        _factory(wrap, cfg, cfg.battery_steps), cfg.battery_steps, seed=seed
    )
    return {
        "agent": wrap,
        "env": "battery(50)",
        "seed": seed,
        "n_steps": cfg.battery_steps,
        "mean_reward": m,
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``runs.csv``, ``summary.csv`` (per agent: means over seeds of the original and the
    reality-checked agent), ``results.json`` and the figure."""
    out = pathlib.Path(cfg.results_dir)
    runs = list(results)
    summary = []
    for name in cfg.agents:
        row: dict[str, Any] = {"agent": name}
        for label, wrap in (("original", name), ("reality_check", f"RC({name})")):
            ir = [r for r in runs if r["agent"] == wrap and r["env"] == "IgnoreRewards"]
            row[f"ignore_rewards_{label}"] = float(np.mean([r["mean_reward"] for r in ir]))
            row[f"ignore_rewards_{label}_tail"] = float(
                np.mean([r["tail_mean_reward"] for r in ir])
            )
            if cfg.battery_steps > 0:
                bat = [
                    r["mean_reward"]
                    for r in runs
                    if r["agent"] == wrap and r["env"] != "IgnoreRewards"
                ]
                row[f"battery_{label}"] = float(np.mean(bat))
        summary.append(row)
    write_results(out, cfg, {"runs": runs, "summary": summary})
    _figure(summary, out / "reality_check.png", cfg)
    return {"summary": summary, "runs": runs}


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


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
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
