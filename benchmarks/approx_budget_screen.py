"""A cheaper fitting budget against the published validation units, unit by unit.

The approximate estimator spends four fifths of a score fitting, and its cost is set by a fixed
budget (``STEP_BUDGET`` Adam steps per stage, ``DATA_STEPS`` environment steps per fit). This
script judges a run of the validation study made with a smaller budget against the published
units of the same cases, policies and seeds (made at the defaults): per row, the seeds whose
interval holds the exact value, whose error is within 5% of ``H log|A|`` and within the stricter
yardstick (5% of the exact value or 1% of ``H log|A|``), the mean error, and the mean seconds of
one core per unit (from each run's ``run.json``; the published units' seconds were measured on
other days, so compare them as orders of magnitude).

Usage (from the repository root; the first command is the reduced run, about half an hour on
2 cores for 20 units at a third of the budget)::

    imitation-meg reproduce configs/approx_validation.yaml --backend process --workers 2 \\
        --set results_dir=results/screen_third_budget \\
        --set "cases=[cliffworld_xy, frozenlake_onehot]" --set "horizons=[15, 15]" \\
        --set "epsilons=[0.1]" --set steps_per_iteration=457 --set n_data_steps=60000 \\
        --seeds 0-4
    python benchmarks/approx_budget_screen.py results/screen_third_budget
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

import numpy as np

from imitation_meg.runners import load_driver

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: the validation study: its stricter yardstick
STUDY = load_driver("approx_validation", ROOT / "experiments")
PUBLISHED = ROOT / "docs" / "results" / "approx_validation"

Key = tuple[str, str, int]


def load(folder: pathlib.Path) -> tuple[dict[Key, dict[str, Any]], dict[Key, float]]:
    """A run's unit rows and seconds by ``(case, policy, seed)``."""
    rows = json.loads((folder / "results.json").read_text())["results"]
    log = json.loads((folder / "run.json").read_text())
    seconds = {
        (u["unit"]["case"], u["unit"]["policy"], int(u["unit"]["seed"])): float(u["seconds"])
        for u in log["unit_seconds"]
    }
    return {(r["case"], r["policy"], int(r["seed"])): r for r in rows}, seconds


def judge(rows: list[dict[str, Any]], seconds: list[float]) -> str:
    """``covered / within 5% / strict (of n), mean error % of the bound, mean seconds``."""
    n = len(rows)
    covered = sum(bool(r["covered"]) for r in rows)
    within = sum(abs(r["error_rel"]) <= STUDY.Config().tolerance for r in rows)
    strict = sum(STUDY.within_strict(r) for r in rows)
    err = 100 * float(np.mean([r["error_rel"] for r in rows]))
    return f"{covered}/{within}/{strict} of {n}, {err:+.2f}%, {np.mean(seconds):.0f} s"


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python benchmarks/approx_budget_screen.py RESULTS_FOLDER")
    new, new_s = load(pathlib.Path(argv[0]))
    old, old_s = load(PUBLISHED)
    missing = sorted(set(new) - set(old))
    if missing:
        raise SystemExit(f"units {missing} are not in the published run; screen its units only.")
    print("row: covered / within 5% / strict of n, mean error (% of H log|A|), s per unit")
    for case, pol in sorted({(k[0], k[1]) for k in new}):
        keys = sorted(k for k in new if k[:2] == (case, pol))
        cheap = judge([new[k] for k in keys], [new_s[k] for k in keys])
        full = judge([old[k] for k in keys], [old_s[k] for k in keys])
        print(f"{case} {pol} (seeds {[k[2] for k in keys]})")
        print(f"  defaults:       {full}")
        print(f"  reduced budget: {cheap}")


if __name__ == "__main__":
    main(sys.argv[1:])
