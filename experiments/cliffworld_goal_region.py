"""Paper study 2 (Figure 3c, Table D.1, Figure 5): optimal policies for goal regions of k squares.

For each k: known-utility MEG (environment reward with the extended goal region), exact
unknown-utility MEG over every utility of the state, the paper's MLP estimate (mean and 2 sigma
over seeds), and the occupancy-measure heatmaps for the smallest and largest regions.

The optimal policy breaks ties between equally good actions deterministically (the lowest action
index, as an argmax-based planner does): the paper's finding that unknown-utility MEG stays high
rests on the optimal policy committing to the nearest goal squares. ``tie_break: uniform`` gives
the maximum-entropy optimal policy instead (then both kinds of MEG fall with k).

Run: ``imitation-meg reproduce configs/cliffworld_goal_region.yaml``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

from imitation_meg import envs, occupancy_measures, policies
from imitation_meg.plotting import plot_grid_values, plot_meg_bars
from imitation_meg.progress import progress
from imitation_meg.report import SUMMARY_COLUMNS, meg_summary
from imitation_meg.results import write_results

# Appendix D.1 of the paper (k = 1 .. 4): known utility, unknown utility (MLP) mean and spread.
PAPER_KNOWN = {1: 37.8, 2: 21.4, 3: 16.8, 4: 18.9}
PAPER_UNKNOWN = {1: 34.3, 2: 32.1, 3: 33.6, 4: 35.4}
PAPER_UNKNOWN_SPREAD = {1: 2.6, 2: 0.5, 3: 0.5, 4: 0.6}


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the goal-region study (YAML keys of the same names)."""

    results_dir: str = "docs/results/cliffworld_goal_region"
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


def main(cfg: Config) -> dict:
    """Run the study, write CSV / JSON / PNG under ``cfg.results_dir``; return the results."""
    t0 = time.perf_counter()
    out = pathlib.Path(cfg.results_dir)
    rows, figures = [], []
    for k in progress(cfg.goal_regions, cfg.progress, "goal region"):
        mdp = envs.cliff_world(
            width=cfg.width,
            height=cfg.height,
            horizon=cfg.horizon,
            goal_region=k,
            goal_layout=cfg.goal_layout,
        )
        pi = policies.optimal(mdp, tie_break=cfg.tie_break)
        s = meg_summary(
            pi,
            mdp,
            mlp_steps=cfg.mlp_steps,
            mlp_lr=cfg.mlp_lr,
            mlp_seeds=cfg.mlp_seeds,
            seed=cfg.seed,
        )
        rows.append(
            {
                "k": k,
                **{c: s[c] for c in SUMMARY_COLUMNS},
                "paper_known": PAPER_KNOWN.get(k, float("nan")),
                "paper_unknown_mlp": PAPER_UNKNOWN.get(k, float("nan")),
                "paper_unknown_spread": PAPER_UNKNOWN_SPREAD.get(k, float("nan")),
            }
        )
        if k in cfg.heatmaps:
            occ = occupancy_measures(mdp, pi)[:-1].sum(0) / cfg.horizon
            figures.append(
                plot_grid_values(
                    out / f"occupancy_k{k}.png",
                    occ.numpy(),
                    mdp.metadata["grid_shape"],
                    marks=mdp.metadata["goal_cells"],
                    title=f"Occupancy of the optimal policy, goal region k={k} (H={cfg.horizon})",
                )
            )
    sweep = []
    for H in progress(cfg.horizon_sweep, cfg.progress, "horizon sweep"):
        for k in cfg.goal_regions:
            m = envs.cliff_world(
                width=cfg.width,
                height=cfg.height,
                horizon=H,
                goal_region=k,
                goal_layout=cfg.goal_layout,
            )
            s = meg_summary(policies.optimal(m, tie_break=cfg.tie_break), m)
            sweep.append(
                {"horizon": H, "k": k, "known": s["known"], "unknown_exact": s["unknown_exact"]}
            )
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
        seconds=time.perf_counter() - t0,
        figures=[str(f) for f in figures],
    )


if __name__ == "__main__":
    import sys

    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
