"""The CliffWorld studies run end to end from their fast configs and show the paper's findings."""

from __future__ import annotations

import itertools
import json
import math
import pathlib

import pytest

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(name: str, tmp_path: pathlib.Path) -> dict:
    module = load_driver(name, ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / f"{name}_fast.yaml")
    cfg = load_config({**data, "results_dir": str(tmp_path)}, module.Config)
    return module.main(cfg)


def test_epsilon_study_fast(tmp_path):
    res = _run("cliffworld_epsilon", tmp_path)
    rows = res["results"]
    known = [r["known"] for r in rows]
    assert all(a > b for a, b in itertools.pairwise(known))  # strictly decreasing in epsilon
    unknown = [r["unknown_exact"] for r in rows]
    assert all(a > b for a, b in itertools.pairwise(unknown))
    for r in rows:
        assert r["unknown_exact"] >= r["known"] - 1e-9
        assert r["mlp_best"] <= r["unknown_exact"] + 1e-9
        assert r["mlp_mean"] <= r["unknown_exact"] + 1e-9
        assert r["unknown_exact"] <= r["certificate"] + 1e-9
        assert not math.isnan(r["paper_known"])
    for f in (
        "results.csv",
        "results.json",
        "horizon_sweep.csv",
        "meg_vs_epsilon.png",
        "horizon_sweep.png",
    ):
        assert (tmp_path / f).stat().st_size > 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["horizon"] == 8 and "torch" in saved["versions"]
    assert {r["horizon"] for r in res["horizon_sweep"]} == {4, 8}


def test_goal_region_study_fast(tmp_path):
    res = _run("cliffworld_goal_region", tmp_path)
    rows = {r["k"]: r for r in res["results"]}
    assert rows[4]["known"] < rows[1]["known"]  # easier goal: less evidence of optimisation
    assert rows[4]["unknown_exact"] >= rows[1]["unknown_exact"] - 1e-9  # stays high
    for r in rows.values():
        assert r["unknown_exact"] >= r["known"] - 1e-9
        assert r["mlp_best"] <= r["unknown_exact"] + 1e-9
    for f in ("occupancy_k1.png", "occupancy_k4.png", "meg_vs_goal_region.png", "results.csv"):
        assert (tmp_path / f).stat().st_size > 0


def test_unknown_config_keys_are_rejected(tmp_path):
    module = load_driver("cliffworld_epsilon", ROOT / "experiments")
    with pytest.raises(ValueError, match="unknown keys \\['epsilonz'\\]"):
        load_config({"epsilonz": [0.1]}, module.Config)


def test_sb3_training_fast(tmp_path, monkeypatch):
    module = load_driver("sb3_training", ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / "sb3_training_fast.yaml")
    monkeypatch.chdir(tmp_path)  # the config's own results/ folder would land here
    cfg = load_config({**data, "results_dir": str(tmp_path / "out")}, module.Config)
    res = module.main(cfg)
    rows = res["results"]
    assert len(rows) == 2 * 2 * 1 * 3  # envs x algos x seeds x (checkpoints + initial)
    for r in rows:
        assert 0 <= r["known"] <= r["unknown_exact"] + 1e-9
        assert r["expected_return"] <= res["references"][r["env"]]["optimal_return"] + 1e-9
    assert {r["steps"] for r in rows if r["algo"] == "ppo"} >= {0}
    # the checkpoints follow the results folder: nothing lands in the config's results/
    assert len(list((tmp_path / "out" / "checkpoints").glob("*.zip"))) == len(rows)
    assert not (tmp_path / "results").exists()
    for e in ("cliffworld", "frozenlake"):
        assert (tmp_path / "out" / f"meg_during_training_{e}.png").stat().st_size > 0
    with pytest.raises(ValueError, match="unknown algo"):
        module.main(load_config({**data, "algos": ["sac"]}, module.Config))
