"""Baseline table for SymmToM: reward per agent per episode of scripted agents on the paper's 12 configurations.

Units: one per configuration, agent and seed. Run: ``imitation-meg reproduce
configs/symmtom_baselines.yaml --backend process --workers 2``. Writes
``baselines.csv`` (one row per configuration and agent), ``baselines.json`` (config, library versions,
rows) , ``baselines.md`` (the README table) and ``baselines.png`` into ``results_dir``.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys
from typing import Any

import numpy as np

from imitation_meg.results import markdown_table, write_table
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values
from imitation_meg.symmtom import parallel_env
from imitation_meg.symmtom.agents import HeuristicPolicy, RandomPolicy, run_episodes


@dataclasses.dataclass(frozen=True)
class Config:
    """Baseline-table settings.

    Attributes:
        results_dir: output folder.
        configurations: ``(n, w, c)`` triples; default the paper's 12.
        agents: scripted agents to evaluate (``random``, ``heuristic``).
        seeds: environment seeds; each seed runs ``episodes_per_seed`` episodes.
        episodes_per_seed: episodes per seed.
    """

    results_dir: str = "results/symmtom_baselines"
    configurations: tuple[tuple[int, ...], ...] = tuple(
        (n, w, c) for n in (3, 4) for w in (6, 12) for c in (n, 2 * n, 3 * n)
    )
    agents: tuple[str, ...] = ("random", "heuristic")
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    episodes_per_seed: int = 200

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(self, positive=("episodes_per_seed",), non_negative=("seeds",))


def make_policy(name: str, seed: int):
    if name == "random":
        return RandomPolicy(seed + 10_000)
    if name == "heuristic":
        return HeuristicPolicy()
    raise ValueError(f"unknown agent {name!r}; use 'random' or 'heuristic'.")


def reward_table(rows: list[dict]) -> str:
    """Mean reward ± its standard error: a row per configuration, a column per agent."""
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    by_cfg: dict[tuple, dict] = {}
    for r in rows:
        by_cfg.setdefault((r["n"], r["w"], r["c"]), {})[r["agent"]] = r
    cells = [
        [
            *conf,
            *(
                f"{per[a]['reward_mean']:.2f} ± {per[a]['reward_se']:.2f}" if a in per else ""
                for a in agents
            ),
        ]
        for conf, per in by_cfg.items()
    ]
    return markdown_table(["n", "w", "c", *agents], cells)


# Units name their configuration, agent and seed.
SWEEP_FIELDS = ("configurations", "agents", "seeds")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per configuration, agent and seed (``episodes_per_seed`` episodes)."""
    for name in cfg.agents:
        make_policy(name, 0)  # an unknown agent fails here, before any work
    return [
        {"n": n, "w": w, "c": c, "agent": name, "seed": seed}
        for (n, w, c), name, seed in itertools.product(cfg.configurations, cfg.agents, cfg.seeds)
    ]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Play one seed's episodes: the per-episode reward per agent and the means of the logs."""
    env = parallel_env(n_agents=unit["n"], width=unit["w"], n_pieces=unit["c"])
    seed = unit["seed"]
    out = run_episodes(env, make_policy(unit["agent"], seed), cfg.episodes_per_seed, seed=seed)
    return {
        "reward": out["reward"].mean(axis=1).tolist(),
        "logs": {k: float(v.mean()) for k, v in out.items()},
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``baselines.csv`` (one row per configuration and agent), ``baselines.json``,
    ``baselines.md`` and ``baselines.png``."""
    out_dir = pathlib.Path(cfg.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # keyed by the unit's values: (n, w, c, agent, seed)
    by_unit = {tuple(u.values()): r for u, r in zip(units(cfg), results, strict=True)}
    rows = []
    for n, w, c in cfg.configurations:
        for name in cfg.agents:
            per_episode = []
            logs: dict[str, list[float]] = {}
            for seed in cfg.seeds:
                res = by_unit[(n, w, c, name, seed)]
                per_episode.append(np.asarray(res["reward"], dtype=float))
                for k, v in res["logs"].items():
                    logs.setdefault(k, []).append(v)
            rewards = np.concatenate(per_episode)
            seed_means = np.array([r.mean() for r in per_episode])
            row = {
                "n": n,
                "w": w,
                "c": c,
                "agent": name,
                "episodes": len(rewards),
                "seeds": len(cfg.seeds),
                "reward_mean": float(rewards.mean()),
                "reward_se": float(rewards.std(ddof=1) / np.sqrt(len(rewards)))
                if len(rewards) > 1
                else float("nan"),
                "reward_seed_std": float(seed_means.std(ddof=1))
                if len(seed_means) > 1
                else float("nan"),
            }
            for k, v in logs.items():
                if k != "reward":
                    row[f"{k}_per_agent"] = float(np.mean(v))
            rows.append(row)
    table = reward_table(rows)
    _plot(rows, out_dir / "baselines.png")
    return write_table(out_dir, "baselines", cfg, rows, table)


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


def _plot(rows: list[dict], path: pathlib.Path) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()

    labels = list(dict.fromkeys(f"n{r['n']} w{r['w']} c{r['c']}" for r in rows))
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, len(labels)), 3.5))
    width = 0.8 / len(agents)
    for k, a in enumerate(agents):
        sel = [r for r in rows if r["agent"] == a]
        x = np.array([labels.index(f"n{r['n']} w{r['w']} c{r['c']}") for r in sel]) + k * width
        ax.bar(
            x, [r["reward_mean"] for r in sel], width, yerr=[r["reward_se"] for r in sel], label=a
        )
    ax.set_xticks(
        np.arange(len(labels)) + width * (len(agents) - 1) / 2, labels, rotation=45, ha="right"
    )
    ax.set_ylabel("reward per agent per episode")
    ax.legend()
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
