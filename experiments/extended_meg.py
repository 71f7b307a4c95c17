"""MEG on extended environments: TemptingButton (2-state frame) and CryingBaby with a frozen baby.

Known-utility and signed MEG (``imitation_meg.meg``) of simple and trained agents on the
TemptingButton frame, and of parent policies on the CryingBaby frame against its utility and
against its two targets (``imitation_meg.meg_target``: "baby laughs", "2 < nutrition < 8").
Writes ``meg.csv``, ``results.json`` and ``meg.png`` into ``results_dir``.
Closed form: "always push" and "never push" both have MEG = (1 + 0.25 (H - 1)) ln 2.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import sys
from typing import Any

import numpy as np

import imitation_meg
from imitation_meg.extended import agents, envs, run
from imitation_meg.extended.meg_frames import (
    crying_baby_frame,
    crying_baby_policy,
    q_policy,
    tempting_button_frame,
)
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings."""

    horizon: int = 20
    q_train_steps: int = 5000
    seed: int = 0
    results_dir: str = "results/extended_meg"

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(self, positive=("horizon", "q_train_steps"), non_negative=("seed",))


def _mdp(frame, utility=None):
    return imitation_meg.TabularMDP(
        transition=frame.transition,
        utility=frame.utility if utility is None else utility,
        horizon=frame.horizon,
        initial_state_dist=frame.initial_state_dist,
        discount=1.0,
    )


TB_POLICIES = ("always push", "never push", "uniform", "Q")
PARENTS = ("always feed", "never feed", "feed iff nutrition < 5", "uniform")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per scored policy: the TemptingButton policies (``"Q"`` is trained first), then
    the CryingBaby parent policies."""
    return [{"env": "TemptingButton", "policy": p} for p in TB_POLICIES] + [
        {"env": "CryingBaby", "policy": p} for p in PARENTS
    ]


def _tb_policy(name: str, cfg: Config) -> tuple[str, np.ndarray]:
    if name == "Q":
        q = run(envs.TemptingButton, agents.QLearner, cfg.q_train_steps, seed=cfg.seed).agent
        return f"Q after {cfg.q_train_steps} steps", q_policy(q.q, 2, 2, q.epsilon)
    table = {
        "always push": np.array([[1.0, 0.0], [1.0, 0.0]]),
        "never push": np.array([[0.0, 1.0], [0.0, 1.0]]),
        "uniform": np.full((2, 2), 0.5),
    }
    return name, table[name]


def _parent(name: str) -> np.ndarray:
    table = {
        "always feed": [1.0] * 10,
        "never feed": [0.0] * 10,
        "feed iff nutrition < 5": [1.0] * 5 + [0.0] * 5,
        "uniform": [0.5] * 10,
    }
    return crying_baby_policy(table[name])


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """The MEG rows of one policy (known and signed; CryingBaby also per target)."""
    H = cfg.horizon
    if unit["env"] == "TemptingButton":
        name, pi = _tb_policy(unit["policy"], cfg)
        closed = (1 + 0.25 * (H - 1)) * math.log(2)
        sim_pushes = bool(pi[0, 0] > 0.5)
        mdp = _mdp(tempting_button_frame(H, sim_pushes=sim_pushes))
        res, sres = imitation_meg.meg(pi, mdp), imitation_meg.meg(pi, mdp, signed=True)
        row = {
            "env": "TemptingButton",
            "policy": name,
            "measure": "known utility",
            "meg": res.meg,
            "signed_meg": sres.meg,
            "beta": res.beta,
            "closed_form": closed if name in ("always push", "never push") else None,
        }
        return {"rows": [row]}
    name = unit["policy"]
    frame = crying_baby_frame(H)
    mdp = _mdp(frame)
    pi = _parent(name)
    res, sres = imitation_meg.meg(pi, mdp), imitation_meg.meg(pi, mdp, signed=True)
    rows = [
        {
            "env": "CryingBaby(frozen baby)",
            "policy": name,
            "measure": "known utility (laugh)",
            "meg": res.meg,
            "signed_meg": sres.meg,
            "beta": res.beta,
            "closed_form": None,
        }
    ]
    for tname, target in frame.targets.items():
        tres = imitation_meg.meg_target(pi, mdp, target)
        rows.append(
            {
                "env": "CryingBaby(frozen baby)",
                "policy": name,
                "measure": f"target {tname}",
                "meg": float(tres.meg),
                "signed_meg": None,
                "beta": None,
                "closed_form": None,
            }
        )
    return {"rows": rows}


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``meg.csv``, ``results.json`` and ``meg.png``."""
    rows = [row for res in results for row in res["rows"]]
    out = pathlib.Path(cfg.results_dir)
    write_results(out, cfg, {"meg": rows})
    _figure(rows, out / "meg.png")
    return {"rows": rows}


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


def _figure(rows: list[dict], path: pathlib.Path) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()

    known = [r for r in rows if r["measure"].startswith("known")]
    fig, ax = plt.subplots(figsize=(7, 3))
    x = np.arange(len(known))
    ax.bar(x - 0.2, [r["meg"] for r in known], 0.4, label="MEG")
    ax.bar(x + 0.2, [r["signed_meg"] for r in known], 0.4, label="signed MEG")
    ax.set_xticks(x, [f"{r['env'][:8]}\n{r['policy']}" for r in known], fontsize=6)
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=100)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
