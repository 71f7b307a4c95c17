"""The MiniGrid studies run end to end from their fast configs."""

from __future__ import annotations

import pathlib

import pytest

from imitation_meg.config import load_config, load_yaml
from imitation_meg.runners import load_driver

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
    res = _run("goal_misgeneralization", tmp_path, checkpoint_dir=str(tmp_path / "agents"))
    rows = {r["condition"]: r for r in res["agents"]}
    assert set(rows) == {"corner", "random"}
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
        "meg_on_vs_under_intervention.png",
        "scores_by_goal_cell.png",
    ):
        assert (tmp_path / f).stat().st_size > 0
