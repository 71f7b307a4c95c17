"""The MiniGrid studies run end to end from their fast configs."""

from __future__ import annotations

import pathlib

import pytest

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

pytest.importorskip("minigrid")
pytest.importorskip("stable_baselines3")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(name: str, tmp_path: pathlib.Path, **over: object) -> dict:
    """A study's fast config run end to end, everything it writes under ``tmp_path``."""
    fast = load_yaml(ROOT / "configs" / f"{name}_fast.yaml")
    module = load_driver(name, ROOT / "experiments")
    return module.main(load_config({**fast, "results_dir": str(tmp_path), **over}, module.Config))


def test_minigrid_exact_fast(tmp_path: pathlib.Path) -> None:
    res = _run("minigrid_exact", tmp_path)
    rows = {r["env"]: r for r in res["layouts"]}
    assert rows["MiniGrid-Empty-5x5-v0"]["states"] == 34
    for r in rows.values():
        assert 0 <= r["known_meg"] <= r["cell_meg"] + 1e-9 <= r["bound"] + 1e-9
        assert r["optimal_known_meg"] > r["known_meg"]
        assert r["build_s"] > 0 and r["table_s"] > 0
    assert (tmp_path / "layouts.csv").stat().st_size > 0


@pytest.mark.expensive  # two PPO agents and 5 x 2 interventional solves: about 20 s on 2 cores
def test_goal_misgeneralization_fast(tmp_path: pathlib.Path) -> None:
    res = _run("goal_misgeneralization", tmp_path)
    rows = {r["condition"]: r for r in res["agents"]}
    assert set(rows) == {"corner", "random"}
    # the agents follow the results folder
    assert sorted(p.name for p in (tmp_path / "agents").iterdir()) == [
        "corner_seed0.zip",
        "random_seed0.zip",
    ]
    assert [c["seeds"] for c in res["contrasts"]] == [1, 1]
    corner = rows["corner"]
    # On the corner layout the goal square and the corner are the same utility.
    assert corner["goal square: on distribution"] == pytest.approx(
        corner["corner: on distribution"], rel=1e-9, abs=1e-12
    )
    for r in rows.values():
        for key, value in r.items():
            if key.endswith(("on distribution", "under intervention")):
                assert 0.0 <= value <= res["bound"] + 1e-9
        # Every utility of the agent's cell includes the corner; of the offset, the goal square.
        assert r["agent cell: under intervention"] >= r["corner: under intervention"] - 1e-9
        assert (
            r["offset from goal: under intervention"] >= r["goal square: under intervention"] - 1e-9
        )
    for f in (
        "agents.csv",
        "summary.csv",
        "contrasts.csv",
        "meg_on_vs_under_intervention.png",
        "scores_by_goal_cell.png",
    ):
        assert (tmp_path / f).stat().st_size > 0


def test_goal_misgeneralization_contrasts_are_paired_over_seeds() -> None:
    """The claimed effects: paired differences per seed, with a Student-t interval."""
    module = load_driver("goal_misgeneralization", ROOT / "experiments")
    cfg = module.Config(results_dir="unused")

    def row(condition: str, seed: int, goal: float, corner: float) -> dict:
        return {
            "condition": condition,
            "seed": seed,
            "goal square: under intervention": goal,
            "corner: under intervention": corner,
        }

    rows = [
        row("corner", 0, 0.1, 0.4),  # corner - goal square: 0.3, 0.5, 0.1
        row("corner", 1, 0.1, 0.6),
        row("corner", 2, 0.2, 0.3),
        row("random", 0, 1.0, 0.5),  # goal square - corner: 0.5, -0.5
        row("random", 1, 0.5, 1.0),
    ]
    corner, random_ = module._contrasts(cfg, rows)
    assert corner["contrast"] == "corner - goal square (under intervention)"
    assert corner["seeds"] == 3 and corner["seeds with first > second"] == 3
    assert corner["mean"] == pytest.approx(0.3)
    assert corner["std"] == pytest.approx(0.2)  # sample std (ddof 1)
    half = 4.302652729911275 * 0.2 / 3**0.5  # t(0.975, 2 degrees of freedom)
    assert corner["ci95 low"] == pytest.approx(0.3 - half)
    assert corner["ci95 high"] == pytest.approx(0.3 + half)
    assert (corner["min"], corner["max"]) == pytest.approx((0.1, 0.5))
    assert (corner["ratio min"], corner["ratio median"], corner["ratio max"]) == pytest.approx(
        (1.5, 4.0, 6.0)
    )
    assert random_["mean"] == pytest.approx(0.0) and random_["seeds with first > second"] == 1
    assert random_["ci95 low"] < 0 < random_["ci95 high"]  # this interval would not exclude 0
