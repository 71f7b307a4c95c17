"""End-to-end runs of the fast SymmToM experiment configs."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(name, tmp_path):
    module = load_driver(name, ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / f"{name}_fast.yaml")
    assert data["experiment"] == name
    cfg = load_config({**data, "results_dir": str(tmp_path)}, module.Config)
    return module.main(cfg)


def test_baselines_fast(tmp_path):
    out = run("symmtom_baselines", tmp_path)
    rows = {(r["n"], r["w"], r["c"], r["agent"]): r for r in out["rows"]}
    assert len(rows) == 4
    for n, w, c in [(3, 6, 3), (4, 12, 8)]:
        assert (
            rows[(n, w, c, "heuristic")]["reward_mean"] > rows[(n, w, c, "random")]["reward_mean"]
        )
    for f in ("baselines.csv", "baselines.json", "baselines.md", "baselines.png"):
        assert (tmp_path / f).is_file()
    assert "versions" in json.loads((tmp_path / "baselines.json").read_text())


def test_tom_fast(tmp_path):
    out = run("symmtom_tom", tmp_path)
    by = {(r["test"], r["agent"]): r for r in out["rows"]}
    for test in ("zeroth_order", "first_order", "second_order", "probabilistic"):
        assert by[(test, "scripted_correct")]["SR"] == 1.0
        assert by[(test, "scripted_wrong")]["SR"] < 1.0
    assert (tmp_path / "tom.md").is_file()


@pytest.mark.parametrize("name", ["symmtom_baselines", "symmtom_tom"])
def test_unknown_config_key_rejected(name, tmp_path):
    module = load_driver(name, ROOT / "experiments")
    with pytest.raises(ValueError, match="unknown keys"):
        load_config({"results_dir": str(tmp_path), "bogus": 1}, module.Config)


def test_ppo_fast(tmp_path):
    pytest.importorskip("stable_baselines3")
    out = run("symmtom_ppo", tmp_path)
    assert [r["agent"] for r in out["rows"]] == ["ppo-fs2", "ppo-oracle-fs2"]
    assert all(np.isfinite(r["reward_mean"]) for r in out["rows"])
    assert (tmp_path / "ppo.csv").is_file()
