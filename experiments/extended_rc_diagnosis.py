"""Diagnosis of the reality check on IgnoreRewards: where the reward is won or lost over a run.

For each variant (an agent name, constructor keywords and a label) and seed, runs the original
agent and its reality check on IgnoreRewards and records the mean reward per step, the mean in
consecutive windows, the number of model updates, and for the reality check the step at which
the environment's sim froze. ``decouple_sim: true`` also runs the original agent against a sim
with a different seed (so the sim does not share the agent's random stream) to measure how much
of the original agent's score comes from the common random numbers of identically seeded
copies. Writes ``runs.csv`` and ``results.json`` into ``results_dir``.
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


@dataclasses.dataclass(frozen=True)
class Variant:
    """One agent setting: registry name, constructor keywords, label."""

    label: str
    agent: str = "PPO"
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Config:
    """Diagnosis settings."""

    variants: tuple[Variant, ...] = (Variant("PPO default"),)
    seeds: tuple[int, ...] = (0, 1, 2)
    n_steps: int = 5000
    window: int = 1000
    decouple_sim: bool = False
    results_dir: str = "results/extended_rc_diagnosis"

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(self, positive=("n_steps", "window"), non_negative=("seeds",))


class _DecoupledIgnoreRewards(envs.IgnoreRewards):
    """IgnoreRewards whose sim has a different seed from the true agent (diagnosis only)."""

    def make_sim(self, **overrides: Any) -> Any:
        return super().make_sim(**{"seed": self.seed + 10_007, **overrides})


def _updates(agent: Any) -> int:
    model = getattr(getattr(agent, "inner", agent), "model", None)
    return int(getattr(model, "_n_updates", -1)) if model is not None else -1


# Units name their seed; a variant's settings stay in the config (so they are part of the key).
SWEEP_FIELDS = ("seeds",)
UNIT_RESOURCES = {"num_cpus": 1}


def _cases(cfg: Config) -> list[tuple[str, type, bool]]:
    cases = [("original", envs.IgnoreRewards, False), ("reality_check", envs.IgnoreRewards, True)]
    if cfg.decouple_sim:
        cases.append(("original, decoupled sim", _DecoupledIgnoreRewards, False))
    return cases


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per variant, case (original / reality check / decoupled sim) and seed.

    Raises:
        ValueError: if two variants share a label (units are named by label).
    """
    labels = [v.label for v in cfg.variants]
    if len(set(labels)) != len(labels):
        raise ValueError(f"variant labels must differ, got {labels}.")
    return [
        {"variant": var.label, "case": label, "seed": seed}
        for var in cfg.variants
        for label, _, _ in _cases(cfg)
        for seed in cfg.seeds
    ]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """One run on IgnoreRewards: a row of ``runs.csv``."""
    var = next(v for v in cfg.variants if v.label == unit["variant"])
    _, env_cls, rc = next(c for c in _cases(cfg) if c[0] == unit["case"])
    kwargs = {"total_timesteps": cfg.n_steps, **var.kwargs}
    if var.agent == "Q":
        kwargs = dict(var.kwargs)
    name = f"RC({var.agent})" if rc else var.agent
    res = run(env_cls, agent_factory(name, kwargs), cfg.n_steps, seed=unit["seed"])
    sim = res.env.sim
    frozen_at = (sim.inner.n_trainings + 1) if getattr(sim, "frozen", False) else None
    n_win = cfg.n_steps // cfg.window
    wins = res.rewards[: n_win * cfg.window].reshape(n_win, cfg.window).mean(axis=1)
    return {
        "variant": var.label,
        "case": unit["case"],
        "seed": unit["seed"],
        "mean_reward": res.mean_reward,
        "updates": _updates(res.agent),
        "sim_frozen_at": frozen_at,
        "windows": " ".join(f"{w:.3f}" for w in wins),
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``runs.csv``, ``summary.csv`` (mean reward per variant and case) and ``results.json``."""
    rows = list(results)
    means: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        means.setdefault((r["variant"], r["case"]), []).append(r["mean_reward"])
    summary = [
        {"variant": v, "case": c, "mean_reward": float(np.mean(m)), "n_seeds": len(m)}
        for (v, c), m in means.items()
    ]
    write_results(pathlib.Path(cfg.results_dir), cfg, {"runs": rows, "summary": summary})
    return {"runs": rows, "summary": summary}


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
