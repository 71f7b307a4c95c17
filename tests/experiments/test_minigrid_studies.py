"""The MiniGrid studies run end to end from their fast configs."""

from __future__ import annotations

import pathlib

import pytest

from imitation_meg.config import load_config, load_yaml
from imitation_meg.runners import load_driver

pytest.importorskip("minigrid")
pytest.importorskip("stable_baselines3")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(name: str, tmp_path: pathlib.Path) -> dict:
    module = load_driver(name, ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / f"{name}_fast.yaml")
    cfg = load_config({**data, "results_dir": str(tmp_path)}, module.Config)
    return module.main(cfg)


def test_minigrid_exact_fast(tmp_path: pathlib.Path) -> None:
    res = _run("minigrid_exact", tmp_path)
    rows = {r["env"]: r for r in res["layouts"]}
    assert rows["MiniGrid-Empty-5x5-v0"]["states"] == 34
    for r in rows.values():
        assert 0 <= r["known_meg"] <= r["cell_meg"] + 1e-9 <= r["bound"] + 1e-9
        assert r["optimal_known_meg"] > r["known_meg"]
        assert r["build_s"] > 0 and r["table_s"] > 0
    assert (tmp_path / "layouts.csv").stat().st_size > 0
