"""The study of MEG over training (experiments/curve_training.py) runs end to end from its fast
config: the callback's history, its overhead split into the curve and the evaluations, and the
figure."""

from __future__ import annotations

import json
import pathlib

import pytest

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

pytest.importorskip("stable_baselines3")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _study(tmp_path: pathlib.Path, **over):
    data = load_yaml(ROOT / "configs" / "curve_training_fast.yaml")
    module = load_driver(data["experiment"], ROOT / "experiments")
    return module, load_config({**data, "results_dir": str(tmp_path), **over}, module.Config)


def test_curve_training_fast(tmp_path):
    module, cfg = _study(tmp_path)
    module.main(cfg)
    out = json.loads((tmp_path / "results.json").read_text())
    (row,) = out["summary"]
    assert row["env"] == "CartPole-v1" and row["algo"] == "ppo"
    assert row["evaluations"] == cfg.n_evals + 1  # and one at the start
    # the curve is computed before training (timed apart) and given to the callback; the
    # overheads are shares of the training alone (the wall time less the callback's), with
    # and without the curve
    training = row["wall_s"] - row["callback_s"]
    assert row["curve_s"] > 0 and row["curve_cpu_s"] > 0 and 0 < row["callback_s"] < row["wall_s"]
    assert row["overhead"] == pytest.approx(
        (row["callback_s"] + row["curve_s"]) / training, rel=1e-9
    )
    assert row["overhead_evaluations"] == pytest.approx(row["callback_s"] / training, rel=1e-9)
    assert row["cpu_s"] > 0 and row["peak_rss_mib"] > 0
    assert sum(row["timings"].values()) <= row["callback_s"]
    assert "policy episodes" in row["timings"]
    history = out["history"]
    assert [r["timesteps"] for r in history] == sorted(r["timesteps"] for r in history)
    assert len(history) == row["evaluations"]
    for r in history:
        assert r["low"] <= r["meg"] <= r["high"]
    assert history[-1]["meg"] == row["final_meg"]
    assert (tmp_path / "meg_over_training.png").stat().st_size > 0


def test_curve_training_refuses_a_budget_per_environment_that_does_not_match(tmp_path):
    with pytest.raises(ValueError, match=r"one budget per environment"):
        _study(tmp_path, timesteps=[512, 512])
    with pytest.raises(ValueError, match=r"unknown environments \['LunarLander-v9'\]"):
        _study(tmp_path, envs=["LunarLander-v9"], timesteps=[512])
