"""Whether the empirical MDP applies to a held-out family, seed by seed.

``meg_approx(..., method="auto")`` scores through the empirical MDP only when its data, within the
default budget, have tried every action in every observation from which the empirical MDP can
decide before the horizon (docs/approx.md). This script runs ``method="empirical"`` on the units
of a study config (the scored policy of each unit, trained as the study trains it, and the unit's
seed) and prints, per unit, either the estimate or why the method does not apply (the
``ValueError``), which is where ``"auto"`` fits soft Q-networks instead.

Usage (from the repository root; about a minute a unit, plus training the agent once)::

    python benchmarks/empirical_applies.py configs/approx_heldout.yaml taxi_onehot
    python benchmarks/empirical_applies.py configs/approx_heldout.yaml cliffwalking_coords
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any

import torch as th

from imitation_meg.approx import meg_approx
from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def applies(config: str, case: str) -> list[dict[str, Any]]:
    """One row per unit of ``case`` in ``config``: seed, and the estimate or the reason."""
    th.set_num_threads(1)
    study = load_driver("approx_validation", ROOT / "experiments")
    data = dict(load_yaml(config))
    data.pop("experiment", None)
    cfg = load_config(data, study.Config, where=config)
    rows = []
    for unit in (u for u in study.units(cfg) if u["case"] == case):
        t0 = time.perf_counter()
        case_, policy, exact = study.scored_policy(cfg, unit)
        eps = study.scored_epsilon(cfg, unit["policy"])
        row: dict[str, Any] = {"seed": unit["seed"], "exact": exact.meg}
        try:
            res = meg_approx(policy, case_.make, epsilon=eps, seed=unit["seed"], method="empirical")
            row.update(meg=res.meg, settled=res.settled)
        except ValueError as e:
            row["reason"] = (
                str(e)
                .split(". Use method=")[0]
                .removeprefix("method='empirical' needs an empirical MDP, but ")
            )
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        raise SystemExit(2)
    applies(sys.argv[1], sys.argv[2])
