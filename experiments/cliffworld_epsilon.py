"""Paper study 1 (Figure 3b, Table D.1): MEG of epsilon-greedy policies on the 10x4 CliffWorld.

For each epsilon: known-utility MEG (environment reward), exact unknown-utility MEG over every
utility of the state, and the paper's MLP estimate (mean and 2 sigma over seeds); plus a horizon
sweep of the first two, since the paper does not state its horizon.

Units: one per epsilon (all three kinds of MEG), one per (horizon, epsilon) of the sweep.
Run: ``imitation-meg reproduce configs/cliffworld_epsilon.yaml [--backend process --workers 2]``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

from imitation_meg import envs, policies
from imitation_meg.plotting import plot_meg_series
from imitation_meg.report import SUMMARY_COLUMNS, SUMMARY_SETTINGS, meg_summary
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values

# Appendix D.1 of the paper (epsilon = 0.1 .. 0.9).
PAPER_KNOWN = {
    0.1: 2.4,
    0.2: 1.5,
    0.3: 0.95,
    0.4: 0.50,
    0.5: 0.20,
    0.6: 0.04,
    0.7: 0.003,
    0.8: 0.001,
    0.9: 0.008,
}
PAPER_UNKNOWN = {
    0.1: 26.1,
    0.2: 17.4,
    0.3: 11.0,
    0.4: 6.2,
    0.5: 2.9,
    0.6: 1.0,
    0.7: 0.10,
    0.8: 0.10,
    0.9: 0.091,
}


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the epsilon-greedy study (YAML keys of the same names)."""

    results_dir: str = "results/cliffworld_epsilon"
    width: int = 10
    height: int = 4
    horizon: int = 30
    epsilons: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    tie_break: str = "uniform"
    mlp_steps: int = 300
    mlp_lr: float = 0.01
    mlp_seeds: int = 5
    seed: int = 0
    horizon_sweep: tuple[int, ...] = (10, 20, 30, 40)
    progress: bool = True

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=("width", "height", "horizon", "mlp_lr", "mlp_seeds", "horizon_sweep"),
            non_negative=("mlp_steps", "seed"),
            probabilities=("epsilons",),
            choices={"tie_break": ("uniform", "first")},
        )
        # the grid's own checks (a small build)
        envs.cliff_world(width=self.width, height=self.height, horizon=self.horizon)


# Every unit names its epsilon (and horizon): changing the lists keeps the finished units.
SWEEP_FIELDS = ("epsilons", "horizon_sweep")


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per epsilon (known, exact unknown and MLP MEG at ``cfg.horizon``), then one per
    horizon of the sweep and epsilon (known and exact unknown MEG)."""
    main_units = [{"part": "epsilon", "epsilon": eps} for eps in cfg.epsilons]
    sweep = [
        {"part": "horizon_sweep", "horizon": H, "epsilon": eps}
        for H in cfg.horizon_sweep
        for eps in cfg.epsilons
    ]
    return main_units + sweep


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Score one epsilon-greedy policy (see :func:`units`)."""
    eps = unit["epsilon"]
    if unit["part"] == "epsilon":
        mdp = envs.cliff_world(width=cfg.width, height=cfg.height, horizon=cfg.horizon)
        pi = policies.epsilon_greedy(mdp, eps, tie_break=cfg.tie_break)
        s = meg_summary(pi, mdp, **{k: getattr(cfg, k) for k in SUMMARY_SETTINGS})
        return {
            "epsilon": eps,
            **{c: s[c] for c in SUMMARY_COLUMNS},
            "paper_known": PAPER_KNOWN.get(round(eps, 3), float("nan")),
            "paper_unknown_mlp": PAPER_UNKNOWN.get(round(eps, 3), float("nan")),
        }
    H = unit["horizon"]
    m = envs.cliff_world(width=cfg.width, height=cfg.height, horizon=H)
    s = meg_summary(policies.epsilon_greedy(m, eps, tie_break=cfg.tie_break), m)
    return {"horizon": H, "epsilon": eps, "known": s["known"], "unknown_exact": s["unknown_exact"]}


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``results.csv``, ``horizon_sweep.csv``, ``results.json`` and the two figures."""
    out = pathlib.Path(cfg.results_dir)
    n = len(cfg.epsilons)
    rows, sweep = results[:n], results[n:]
    eps_list = [r["epsilon"] for r in rows]
    figures = [
        plot_meg_series(
            out / "meg_vs_epsilon.png",
            eps_list,
            {
                "known utility (exact)": [r["known"] for r in rows],
                "unknown utility (exact)": [r["unknown_exact"] for r in rows],
                f"unknown utility (MLP, mean of {cfg.mlp_seeds})": [r["mlp_mean"] for r in rows],
            },
            errors={
                f"unknown utility (MLP, mean of {cfg.mlp_seeds})": [r["mlp_2sigma"] for r in rows]
            },
            reference={
                "paper: known": [r["paper_known"] for r in rows],
                "paper: unknown (MLP)": [r["paper_unknown_mlp"] for r in rows],
            },
            title=f"CliffWorld {cfg.width}x{cfg.height}, H={cfg.horizon}: epsilon-greedy policies",
        ),
        plot_meg_series(
            out / "horizon_sweep.png",
            eps_list,
            {
                f"known, H={H}": [r["known"] for r in sweep if r["horizon"] == H]
                for H in cfg.horizon_sweep
            },
            title="Known-utility MEG of epsilon-greedy policies by horizon",
        ),
    ]
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
