"""The Zoo coverage study: its parts on hand-written inputs, and its fast config end to end."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _driver():
    return load_driver("zoo_coverage", ROOT / "experiments")


def _cfg(tmp_path: pathlib.Path, name: str = "zoo_coverage_fast", **over):
    module = _driver()
    data = load_yaml(ROOT / "configs" / f"{name}.yaml")
    return module, load_config({**data, "results_dir": str(tmp_path), **over}, module.Config)


def test_the_full_config_loads_with_a_unit_per_row_in_its_order(tmp_path):
    module, cfg = _cfg(tmp_path, "zoo_coverage")
    units = module.units(cfg)
    assert [u["env"] for u in units][:4] == [
        "CartPole-v1",
        "LunarLander-v2",
        "LunarLanderContinuous-v2",
        "BipedalWalker-v3",
    ]
    assert {u["family"] for u in units} == {"classic control", "Box2D", "Atari", "MuJoCo"}
    sticky = [u for u in units if "repeat_action_probability:0.25" in u["zoo_args"]]
    assert len(sticky) == 1 and sticky[0]["env"] == "PongNoFrameskip-v4"


def test_rows_with_the_same_name_are_refused(tmp_path):
    module = _driver()
    row = module.Row(name="a", family="f", env="CartPole-v1", algo="ppo", timesteps=8)
    cfg = module.Config(results_dir=str(tmp_path), rows=(row, row))
    with pytest.raises(ValueError, match=r"distinct names.*\['a', 'a'\]"):
        module.units(cfg)


def test_commands_name_the_zoo_folder_the_horizon_and_the_atari_package(tmp_path):
    module = _driver()
    cfg = module.Config(results_dir=str(tmp_path))
    pong = module.Row(
        name="Pong", family="Atari", env="PongNoFrameskip-v4", algo="ppo", timesteps=64,
        horizon=20, score_args=("--approx-option", "n_starts=2"),
    )  # fmt: skip
    assert module.train_command(cfg, pong)[-2:] == ["--gym-packages", "ale_py"]
    assert module.score_command(pong, "logs/ppo/PongNoFrameskip-v4_1") == [
        "imitation-meg", "score", "--policy", "logs/ppo/PongNoFrameskip-v4_1",
        "--horizon", "20", "--approx-option", "n_starts=2",
    ]  # fmt: skip
    assert module.run_folder(cfg, pong) == tmp_path / "agents" / "Pong" / "ppo" / (
        "PongNoFrameskip-v4_1"
    )


@pytest.mark.skipif(shutil.which("/usr/bin/time") is None, reason="needs GNU /usr/bin/time")
def test_timed_reads_the_exit_code_cpu_time_memory_and_the_last_error_line():
    module = _driver()
    code = "import sys; x = bytearray(64 * 2**20); sys.exit('first\\nthe one line')"
    out = module.timed(["python3", "-c", code])
    assert out["rc"] == 1
    assert out["stderr"].strip().splitlines()[-1] == "the one line"
    assert "Command" not in out["stderr"]  # time's own report and exit line are cut off
    assert out["peak_mib"] > 64 and out["cpu_s"] >= 0 and out["wall_s"] >= 0


def test_training_returns_are_the_last_episodes_of_the_monitor_files_by_end_time(tmp_path):
    module = _driver()
    header = '#{"t_start": 0, "env_id": "x"}\nr,l,t\n'
    (tmp_path / "0.monitor.csv").write_text(header + "1.0,5,0.1\n3.0,5,0.9\n")
    (tmp_path / "1.monitor.csv").write_text(header + "10.0,5,0.5\n")
    assert module.training_returns(tmp_path, 2) == {
        "train_episodes": 3,
        "mean_return": 6.5,  # 10 (t 0.5) and 3 (t 0.9)
        "return_episodes": 2,
    }
    empty = tmp_path / "none"
    empty.mkdir()
    assert module.training_returns(empty, 2)["mean_return"] is None


def test_the_table_shows_estimates_and_refusals_as_measured():
    module = _driver()
    base = {
        "family": "Box2D", "env": "E", "algo": "sac", "timesteps": 500, "mean_return": -100.0,
        "return_episodes": 3, "score_cpu_s": 2.4, "peak_rss_mib": 400.0, "validated": "no",
        "train_cpu_s": 7.2, "score_command": "imitation-meg score --policy f --horizon 50",
    }  # fmt: skip
    scored = {**base, "exit_code": 0, "method": "soft_q", "meg": 0.5, "low": 0.25,
              "high": 0.75, "width": 0.5, "settled": False, "refusal": None, "horizon_scored": 40}  # fmt: skip
    refused = {**base, "exit_code": 2, "method": None, "meg": None, "low": None, "high": None,
               "width": None, "refusal": "imitation-meg score: error: no.", "mean_return": None,
               "train_command": "python -m rl_zoo3.train --env-kwargs sticky:1 -f logs"}  # fmt: skip
    lines = module.table([scored, refused]).splitlines()
    assert len(lines) == 4
    assert "| soft_q | 0.5000 [0.2500, 0.7500] (not settled) | 0.5000 | 2 | 400 |" in lines[2]
    assert "| 2 | - | refused: imitation-meg score: error: no. | - |" in lines[3]
    assert "no episode finished" in lines[3]
    assert "| Box2D | E (sticky:1) |" in lines[3] and "| Box2D | E |" in lines[2]
    assert "| SAC (500) | 7 | -100.0 (3) | 40 | 0 |" in lines[2]  # the horizon scored
    assert "| SAC (500) | 7 | no episode finished | 50 | 2 |" in lines[3]  # the one asked for


@pytest.mark.expensive  # two Zoo trainings and two scores in subprocesses: about 30 s
def test_zoo_coverage_fast_end_to_end(tmp_path):
    pytest.importorskip("rl_zoo3")
    pytest.importorskip("Box2D")
    if shutil.which("/usr/bin/time") is None:
        pytest.skip("needs GNU /usr/bin/time")
    module, cfg = _cfg(tmp_path)
    stale = tmp_path / "agents" / "CartPole_PPO" / "ppo" / "CartPole-v1_1"
    stale.mkdir(parents=True)  # an unfinished training's folder, without a model
    res = module.main(cfg)
    assert (stale / "CartPole-v1.zip").is_file() and not stale.with_name("CartPole-v1_2").exists()
    rows = {r["env"]: r for r in res["rows"]}
    cart, walker = rows["CartPole-v1"], rows["BipedalWalker-v3"]
    assert cart["exit_code"] == 0 and cart["method"] == "paths"
    assert 0.0 <= cart["low"] <= cart["meg"] <= cart["high"]
    assert cart["width"] == pytest.approx(cart["high"] - cart["low"])
    assert cart["horizon_scored"] == 10 and cart["refusal"] is None
    assert cart["train_episodes"] > 0 and cart["mean_return"] > 0  # CartPole pays 1 a step
    assert walker["exit_code"] == 2 and walker["method"] is None
    assert walker["refusal"].startswith("imitation-meg score: error: BipedalWalker-v3 acts")
    assert "Box of 4 dimensions" in walker["refusal"]
    for r in rows.values():
        assert r["score_cpu_s"] > 0 and r["peak_rss_mib"] > 100 and r["train_cpu_s"] > 0
        assert r["train_command"].startswith(f"python -m rl_zoo3.train --algo {r['algo']}")
        assert r["score_command"].startswith(f"imitation-meg score --policy logs/{r['algo']}/")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r["env"] for r in saved["rows"]] == ["CartPole-v1", "BipedalWalker-v3"]
    assert (tmp_path / "rows.csv").stat().st_size > 0
    # A second run reuses the agents and their training measurements.
    again = module.main(cfg)
    assert [r["train_cpu_s"] for r in again["rows"]] == [r["train_cpu_s"] for r in res["rows"]]
