"""Theory-of-mind test table for SymmToM: SR / FR / RATSO of scripted and baseline agents.

Run: ``imitation-meg reproduce configs/symmtom_tom.yaml``. One unit per test and agent. Writes ``tom.csv``,
``tom.json`` and ``tom.md`` into ``results_dir``. A trial of the probabilistic test is two episodes (one
per piece blue may have told green), so its cost per trial is twice the others'.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
from typing import Any

from imitation_meg.results import markdown_table, write_table
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values
from imitation_meg.symmtom.agents import HeuristicPolicy, RandomPolicy
from imitation_meg.symmtom.tom import (
    BeliefGreedyPolicy,
    MeetPredictedPolicy,
    ProbabilisticSpeakerPolicy,
    run_tom_test,
    tom_tests,
)

SCRIPTED = {
    "zeroth_order": (lambda: BeliefGreedyPolicy("true"), lambda: BeliefGreedyPolicy("no_memory")),
    "first_order": (lambda: BeliefGreedyPolicy("true"), lambda: BeliefGreedyPolicy("no_others")),
    "second_order": (
        lambda: MeetPredictedPolicy(second_order=True),
        lambda: MeetPredictedPolicy(second_order=False),
    ),
    "probabilistic": (
        lambda: ProbabilisticSpeakerPolicy(belief="uncertain"),
        lambda: ProbabilisticSpeakerPolicy(belief="certain"),
    ),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """ToM-table settings: output folder, trials per test, seed, agents to test."""

    results_dir: str = "results/symmtom_tom"
    trials: int = 200
    seed: int = 0
    agents: tuple[str, ...] = ("scripted_correct", "scripted_wrong", "heuristic", "random")

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(self, positive=("trials",), non_negative=("seed",))


def _policy(agent: str, test: str, seed: int):
    if agent == "scripted_correct":
        return SCRIPTED[test][0]()
    if agent == "scripted_wrong":
        return SCRIPTED[test][1]()
    if agent == "heuristic":
        return HeuristicPolicy()
    if agent == "random":
        return RandomPolicy(seed)
    raise ValueError(
        f"unknown agent {agent!r}; use scripted_correct, scripted_wrong, heuristic or random."
    )


# Units name their test and agent.
SWEEP_FIELDS = ("agents",)
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per ToM test and agent."""
    for agent in cfg.agents:
        _policy(agent, "zeroth_order", cfg.seed)  # an unknown agent fails here, before any work
    return [{"test": name, "agent": agent} for name in tom_tests() for agent in cfg.agents]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Run one ToM test with one agent: a row of ``tom.csv``."""
    test = tom_tests()[unit["test"]]
    res = run_tom_test(
        test, _policy(unit["agent"], unit["test"], cfg.seed), cfg.trials, seed=cfg.seed
    )
    return {"agent": unit["agent"], **res.to_dict()}


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``tom.csv``, ``tom.json`` and ``tom.md``."""
    out_dir = pathlib.Path(cfg.results_dir)
    rows = list(results)

    def fmt(v: float | None) -> str:
        return "–" if v is None else ("nan" if math.isnan(v) else f"{v:.2f}")

    header = ["test", "agent", "SR", "FR", "RATSO", "optimum", "pass"]
    cells = (
        [r["test"], r["agent"], *(fmt(r[k]) for k in header[2:6]), "yes" if r["pass"] else "no"]
        for r in rows
    )
    table = markdown_table(header, cells)
    return write_table(out_dir, "tom", cfg, rows, table)


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
