"""Learned SymmToM baseline: PPO with frame stacking, with and without the oracle observation.

Run: ``imitation-meg reproduce configs/symmtom_ppo.yaml``. One unit per (configuration, oracle,
seed): trains one shared-parameter
PPO model per (configuration, oracle, seed), evaluates it with every agent played by the model,
and writes ``ppo.csv``, ``ppo.json`` and ``ppo.md`` into ``results_dir``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

import numpy as np

from imitation_meg.results import markdown_table, write_table
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values
from imitation_meg.symmtom import parallel_env
from imitation_meg.symmtom.agents import run_episodes


@dataclasses.dataclass(frozen=True)
class Config:
    """PPO-baseline settings (see :func:`imitation_meg.symmtom.sb3.train_ppo`)."""

    results_dir: str = "results/symmtom_ppo"
    configurations: tuple[tuple[int, ...], ...] = ((3, 6, 3),)
    oracle: tuple[bool, ...] = (False, True)
    frame_stack: int = 4
    mode: str = "shared"
    others: str = "heuristic"
    total_timesteps: int = 50_000
    seeds: tuple[int, ...] = (0,)
    eval_episodes: int = 200

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=("frame_stack", "total_timesteps", "eval_episodes"),
            non_negative=("seeds",),
        )


# Units name their configuration, oracle switch and seed.
SWEEP_FIELDS = ("configurations", "oracle", "seeds")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per configuration, oracle switch and seed (a training run and its evaluation)."""
    return [
        {"n": n, "w": w, "c": c, "oracle": oracle, "seed": seed}
        for n, w, c in cfg.configurations
        for oracle in cfg.oracle
        for seed in cfg.seeds
    ]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train one shared-parameter PPO model and evaluate it: per-episode rewards per agent."""
    from imitation_meg.symmtom.sb3 import SB3Policy, train_ppo

    n, w, c, oracle, seed = (unit[k] for k in ("n", "w", "c", "oracle", "seed"))
    model = train_ppo(
        n_agents=n,
        width=w,
        n_pieces=c,
        oracle=oracle,
        frame_stack=cfg.frame_stack,
        total_timesteps=cfg.total_timesteps,
        mode=cfg.mode,
        others=cfg.others,
        seed=seed,
    )
    env = parallel_env(n_agents=n, width=w, n_pieces=c, oracle=oracle)
    out = run_episodes(
        env, SB3Policy(model, frame_stack=cfg.frame_stack), cfg.eval_episodes, seed=1000 + seed
    )
    return {"reward": out["reward"].mean(axis=1).tolist()}


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``ppo.csv``, ``ppo.json`` and ``ppo.md``: one row per configuration and oracle switch."""
    out_dir = pathlib.Path(cfg.results_dir)
    # keyed by the unit's values: (n, w, c, oracle, seed)
    by_unit = {tuple(u.values()): r for u, r in zip(units(cfg), results, strict=True)}
    rows = []
    for n, w, c in cfg.configurations:
        for oracle in cfg.oracle:
            per_seed = [
                np.asarray(by_unit[(n, w, c, oracle, seed)]["reward"], dtype=float)
                for seed in cfg.seeds
            ]
            rewards = np.concatenate(per_seed)
            rows.append(
                {
                    "n": n,
                    "w": w,
                    "c": c,
                    "agent": f"ppo{'-oracle' if oracle else ''}-fs{cfg.frame_stack}",
                    "mode": cfg.mode,
                    "timesteps": cfg.total_timesteps,
                    "seeds": len(cfg.seeds),
                    "episodes": len(rewards),
                    "reward_mean": float(rewards.mean()),
                    "reward_se": float(rewards.std(ddof=1) / np.sqrt(len(rewards)))
                    if len(rewards) > 1
                    else float("nan"),
                }
            )
    header = ["n", "w", "c", "agent", "timesteps", "seeds", "reward"]
    table = markdown_table(
        header,
        (
            [*(r[k] for k in header[:-1]), f"{r['reward_mean']:.2f} ± {r['reward_se']:.2f}"]
            for r in rows
        ),
    )
    return write_table(out_dir, "ppo", cfg, rows, table)


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
