"""Paper study 2 (Figure 3c, Table D.1, Figure 5): optimal policies for goal regions of k squares.

For each k: known-utility MEG (environment reward with the extended goal region), exact
unknown-utility MEG over every utility of the state, the paper's MLP estimate (mean and 2 sigma
over seeds), and the occupancy-measure heatmaps for the smallest and largest regions.

The optimal policy breaks ties between equally good actions deterministically (the lowest action
index, as an argmax-based planner does): the paper's finding that unknown-utility MEG stays high
rests on the optimal policy committing to the nearest goal squares. ``tie_break: uniform`` gives
the maximum-entropy optimal policy instead (then both kinds of MEG fall with k).

Units: one per goal region k (all three kinds of MEG, the occupancy), one per (horizon, k) of
the sweep. Run: ``imitation-meg reproduce configs/cliffworld_goal_region.yaml``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

import numpy as np

from imitation_meg import envs, occupancy_measures, policies
from imitation_meg.plotting import plot_grid_values, plot_meg_bars
from imitation_meg.report import SUMMARY_COLUMNS, SUMMARY_SETTINGS, meg_summary
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values

# Appendix D.1 of the paper (k = 1 .. 4): known utility, unknown utility (MLP) mean and spread.
PAPER_KNOWN = {1: 37.8, 2: 21.4, 3: 16.8, 4: 18.9}
PAPER_UNKNOWN = {1: 34.3, 2: 32.1, 3: 33.6, 4: 35.4}
PAPER_UNKNOWN_SPREAD = {1: 2.6, 2: 0.5, 3: 0.5, 4: 0.6}


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the goal-region study (YAML keys of the same names)."""

    results_dir: str = "results/cliffworld_goal_region"
    width: int = 10
    height: int = 4
    horizon: int = 30
    goal_regions: tuple[int, ...] = (1, 2, 3, 4)
    goal_layout: str = "column"
    tie_break: str = "first"
    mlp_steps: int = 300
    mlp_lr: float = 0.01
    mlp_seeds: int = 5
    seed: int = 0
    horizon_sweep: tuple[int, ...] = (10, 20, 30, 40)
    heatmaps: tuple[int, ...] = (1, 4)
    progress: bool = True

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=("width", "height", "horizon", "mlp_lr", "mlp_seeds", "horizon_sweep"),
            non_negative=("mlp_steps", "seed"),
            choices={"tie_break": ("uniform", "first"), "goal_layout": ("column", "row")},
        )
        for k in self.goal_regions:  # the grid's own checks of each region (a small build)
            _mdp(self, k, self.horizon)


# Every unit names its k (and horizon); heatmaps only choose figures.
SWEEP_FIELDS = ("goal_regions", "horizon_sweep", "heatmaps")


def _mdp(cfg: Config, k: int, horizon: int) -> Any:
    return envs.cliff_world(
        width=cfg.width,
        height=cfg.height,
        horizon=horizon,
        goal_region=k,
        goal_layout=cfg.goal_layout,
    )


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per goal region k at ``cfg.horizon`` (all three kinds of MEG and the occupancy),
    then one per horizon of the sweep and k (known and exact unknown MEG)."""
    main_units = [{"part": "goal_region", "k": k} for k in cfg.goal_regions]
    sweep = [
        {"part": "horizon_sweep", "horizon": H, "k": k}
        for H in cfg.horizon_sweep
        for k in cfg.goal_regions
    ]
    return main_units + sweep


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Score the optimal policy for one goal region (see :func:`units`)."""
    k = unit["k"]
    if unit["part"] == "horizon_sweep":
        m = _mdp(cfg, k, unit["horizon"])
        s = meg_summary(policies.optimal(m, tie_break=cfg.tie_break), m)
        return {
            "horizon": unit["horizon"],
            "k": k,
            "known": s["known"],
            "unknown_exact": s["unknown_exact"],
        }
    mdp = _mdp(cfg, k, cfg.horizon)
    pi = policies.optimal(mdp, tie_break=cfg.tie_break)
    s = meg_summary(pi, mdp, **{k: getattr(cfg, k) for k in SUMMARY_SETTINGS})
    occ = occupancy_measures(mdp, pi)[:-1].sum(0) / cfg.horizon
    return {
        "row": {
            "k": k,
            **{c: s[c] for c in SUMMARY_COLUMNS},
            "paper_known": PAPER_KNOWN.get(k, float("nan")),
            "paper_unknown_mlp": PAPER_UNKNOWN.get(k, float("nan")),
            "paper_unknown_spread": PAPER_UNKNOWN_SPREAD.get(k, float("nan")),
        },
        "occupancy": occ.tolist(),
        "grid_shape": list(mdp.metadata["grid_shape"]),
        "goal_cells": [list(c) for c in mdp.metadata["goal_cells"]],
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``results.csv``, ``horizon_sweep.csv``, ``results.json``, the bar chart and the
    occupancy heatmaps of the goal regions in ``cfg.heatmaps``."""
    out = pathlib.Path(cfg.results_dir)
    n = len(cfg.goal_regions)
    rows = [r["row"] for r in results[:n]]
    sweep = results[n:]
    figures = [
        plot_grid_values(
            out / f"occupancy_k{r['row']['k']}.png",
            np.asarray(r["occupancy"]),
            tuple(r["grid_shape"]),
            marks=[tuple(c) for c in r["goal_cells"]],
            title=(
                f"Occupancy of the optimal policy, goal region k={r['row']['k']} (H={cfg.horizon})"
            ),
        )
        for r in results[:n]
        if r["row"]["k"] in cfg.heatmaps
    ]
    labels = [f"k={r['k']}" for r in rows]
    mlp_name = f"unknown (MLP, mean of {cfg.mlp_seeds})"
    figures.insert(
        0,
        plot_meg_bars(
            out / "meg_vs_goal_region.png",
            labels,
            {
                "known utility (exact)": [r["known"] for r in rows],
                "unknown utility (exact)": [r["unknown_exact"] for r in rows],
                mlp_name: [r["mlp_mean"] for r in rows],
            },
            errors={mlp_name: [r["mlp_2sigma"] for r in rows]},
            reference={
                "paper: known": [r["paper_known"] for r in rows],
                "paper: unknown (MLP)": [r["paper_unknown_mlp"] for r in rows],
            },
            title=f"Optimal policies, CliffWorld {cfg.width}x{cfg.height}, H={cfg.horizon}",
        ),
    )
    return write_results(
        out,
        cfg,
        {"results": rows, "horizon_sweep": sweep},
        figures=[str(f) for f in figures],
    )


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
