"""MEG on SymmToM (n = 2, w = 4, c = 2, the other agent's policy fixed).

Run: ``imitation-meg reproduce configs/symmtom_meg.yaml``. One unit per partner and policy: for every partner policy and
every scored policy of agent 0 (Markov heuristic, uniform random) reports known-utility MEG w.r.t.
agent 0's reward and target MEG w.r.t. its own knowledge, the other's knowledge and recharging.
Writes ``meg.csv``, ``meg.json`` and ``meg.md`` into ``results_dir``.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys
from typing import Any

import imitation_meg as im
from imitation_meg.results import markdown_table, write_table
from imitation_meg.runners import run_serially
from imitation_meg.symmtom.tabular import build_tabular, markov_heuristic, uniform_policy


@dataclasses.dataclass(frozen=True)
class Config:
    """MEG-on-SymmToM settings."""

    results_dir: str = "results/symmtom_meg"
    partners: tuple[str, ...] = ("heuristic", "random")
    agents: tuple[str, ...] = ("heuristic", "random")
    targets: tuple[str, ...] = ("own_knowledge", "other_knowledge", "recharged")


# Units name their partner and agent.
SWEEP_FIELDS = ("partners", "agents")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per partner policy and scored policy of agent 0."""
    return [{"partner": p, "agent": a} for p, a in itertools.product(cfg.partners, cfg.agents)]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Known-utility and target MEG of one policy against one partner: a row of ``meg.csv``."""
    partner, agent = unit["partner"], unit["agent"]
    tab = build_tabular(partner)
    mdp = tab.to_mdp()
    pi = (
        markov_heuristic(tab.states, 0, tab.width, tab.bases)
        if agent == "heuristic"
        else uniform_policy(tab.states)
    )
    res = im.meg(pi, mdp)
    row = {
        "partner": partner,
        "agent": agent,
        "S": len(tab.states),
        "A": 10,
        "H": tab.horizon,
        "meg_reward": float(res.meg),
        "beta_reward": float(res.beta),
    }
    for name in cfg.targets:
        row[f"meg_{name}"] = float(im.meg_target(pi, mdp, tab.targets[name]).meg)
    return row


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``meg.csv``, ``meg.json`` and ``meg.md``."""
    rows = list(results)
    cols = ["meg_reward", *[f"meg_{t}" for t in cfg.targets]]
    cells = ([r["partner"], r["agent"], *(f"{r[c]:.3f}" for c in cols)] for r in rows)
    table = markdown_table(["partner", "agent", *cols], cells)
    out_dir = pathlib.Path(cfg.results_dir)
    return write_table(out_dir, "meg", cfg, rows, table)


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
