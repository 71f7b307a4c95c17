"""The continuous-action studies run end to end from their fast configs."""

from __future__ import annotations

import pathlib

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _cfg(name: str, tmp_path: pathlib.Path, **over):
    module = load_driver(name, ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / f"{name}_fast.yaml")
    over = {"results_dir": str(tmp_path), **over}
    return module, load_config({**data, **over}, module.Config)


def test_continuous_validation_fast(tmp_path):
    module, cfg = _cfg("continuous_validation", tmp_path)
    assert len(module.units(cfg)) == 2
    res = module.main(cfg)
    rows = {r["policy"]: r for r in res["results"]}
    assert rows["uniform"]["exact"] == 0.0 and rows["uniform"]["approx"] == 0.0
    assert rows["squashed"]["exact"] > 0.0
    for r in rows.values():
        assert r["low"] <= r["approx"] <= r["high"] <= r["certificate"]
        assert r["covered"] == (r["low"] <= r["exact"] <= r["high"])
    assert [s["n_seeds"] for s in res["summary"]] == [1, 1]
    assert (tmp_path / "continuous_vs_exact.png").stat().st_size > 0


def test_continuous_training_fast(tmp_path):
    module, cfg = _cfg("continuous_training", tmp_path, checkpoint_dir=str(tmp_path / "ckpt"))
    res = module.main(cfg)
    rows = res["results"]
    assert [(r["algo"], r["steps"]) for r in rows] == [
        ("sac", 0),
        ("sac", 200),
        ("ppo", 0),
        ("ppo", 256),
    ]
    for r in rows:
        assert 0.0 <= r["low"] <= r["meg"] <= r["high"] and r["horizon"] == 10
    assert all(r["certificate"] == float("inf") for r in rows if r["algo"] == "ppo")
    assert (tmp_path / "meg_vs_steps.png").stat().st_size > 0


def test_published_training_study_supports_the_pages_claims():
    """docs/reports/continuous.md and the README read the published table; these are their claims."""
    import csv

    path = ROOT / "docs" / "results" / "continuous_training" / "results.csv"
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 16
    key = lambda r: (r["env"], r["algo"], int(r["steps"]))  # noqa: E731
    flagged = [key(r) for r in rows if r["above_certificate"] == "True"]
    assert flagged == [("MountainCarContinuous-v0", "sac", 0)]
    for r in rows:
        meg, low, high, cert = (float(r[k]) for k in ("meg", "low", "high", "certificate"))
        assert 0.0 <= low <= meg <= high <= cert
        if r["above_certificate"] == "True":
            assert meg == cert  # clipped, not estimated
    pendulum = [r for r in rows if r["env"] == "Pendulum-v1"]
    untrained = [float(r["meg"]) for r in pendulum if r["steps"] == "0"]
    trained = [float(r["meg"]) for r in pendulum if r["steps"] != "0"]
    assert max(untrained) < 2.0 and min(trained) >= 30.0 and max(trained) <= 71.0
    mcc = {key(r): float(r["meg"]) for r in rows if r["env"] == "MountainCarContinuous-v0"}
    # the untrained agents score highest on MountainCarContinuous
    for algo in ("sac", "ppo"):
        own = {k: v for k, v in mcc.items() if k[1] == algo}
        assert max(own, key=own.__getitem__)[2] == 0
    page = (ROOT / "docs" / "reports" / "continuous.md").read_text()
    for r in rows:
        value = float(r["meg"])
        assert (f"{value:.1f}" if value >= 10 else f"{value:.2f}") in page, key(r)
