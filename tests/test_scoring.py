"""Many checkpoints in one call: `imitation-meg score` over a glob, CSV / JSON lines, `plot`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import warnings

import pytest

import imitation_meg as im
from imitation_meg.cli import main
from imitation_meg.results import read_rows

pytest.importorskip("stable_baselines3")

CLIFF = "seals/CliffWorld7x4-v0"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Eight checkpoints of one small PPO run (CheckpointCallback every 64 steps)."""
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import CheckpointCallback

    d = tmp_path_factory.mktemp("ckpt")
    tiny = {"seed": 0, "device": "cpu", "policy_kwargs": {"net_arch": [16]}}
    model = sb3.PPO("MlpPolicy", CLIFF, n_steps=32, batch_size=32, n_epochs=1, **tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.learn(512, callback=CheckpointCallback(64, str(d)))
    files = sorted(d.glob("rl_model_*_steps.zip"))
    assert len(files) == 8
    return d


def _exact(path, mdp):
    from imitation_meg.adapters import policy_table

    return im.meg(policy_table(path, mdp), mdp)


def test_one_call_over_a_glob_writes_one_row_per_checkpoint(checkpoints, tmp_path, capsys):
    pattern = str(checkpoints / "rl_model_*_steps.zip")
    argv = ["score", "--env", CLIFF, "--policy", pattern, "--csv", str(tmp_path / "r.csv")]
    assert main([*argv, "--jsonl", str(tmp_path / "r.jsonl")]) == 0
    assert "MEG of 8 policies" in capsys.readouterr().out
    rows = read_rows(tmp_path / "r.csv")
    lines = read_rows(tmp_path / "r.jsonl")
    assert len(rows) == len(lines) == 8
    assert [r["timesteps"] for r in rows] == [64 * k for k in range(1, 9)]  # natural order
    mdp = im.TabularMDP.from_env(CLIFF)
    for row, line in zip(rows, lines, strict=True):
        exact = _exact(row["source"], mdp)
        assert row["meg"] == pytest.approx(exact.meg, rel=1e-9, abs=1e-12)
        assert line["meg"] == pytest.approx(row["meg"], rel=1e-12, abs=1e-15)
        assert row["expected_return"] == pytest.approx(exact.expected_utility, rel=1e-9)
        assert row["algo"] == "ppo" and row["converged"] is True
    # Several explicit paths, a built-in policy among them, in the given order.
    files = [str(checkpoints / "rl_model_512_steps.zip"), "uniform"]
    argv = ["score", "--env", CLIFF, "--policy", *files, "--jsonl", str(tmp_path / "two.jsonl")]
    assert main(argv) == 0
    two = read_rows(tmp_path / "two.jsonl")
    assert [r["policy"] for r in two] == ["PPO rl_model_512_steps.zip", "uniform"]
    assert two[1]["meg"] == 0.0 and two[1]["timesteps"] is None


@pytest.mark.expensive  # about 13 s here: two worker processes import torch and SB3
def test_jobs_give_the_same_rows(checkpoints):
    from imitation_meg.scoring import ScoreOptions, expand_sources, score_policies

    sources = expand_sources([str(checkpoints / "rl_model_*_steps.zip")])[:2]
    mdp = im.TabularMDP.from_env(CLIFF)
    serial = score_policies(sources, mdp, ScoreOptions())
    parallel = score_policies(sources, mdp, ScoreOptions(), jobs=2)
    assert [r["meg"] for r in parallel] == [r["meg"] for r in serial]
    assert [r["source"] for r in parallel] == sources


def test_source_and_jobs_errors(checkpoints, tmp_path):
    from imitation_meg.scoring import expand_sources, score_policies

    sources = expand_sources([str(checkpoints / "rl_model_*_steps.zip")])
    mdp = im.TabularMDP.from_env(CLIFF)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        expand_sources([str(tmp_path / "nothing_*.zip")])
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        score_policies(sources, mdp, jobs=0)


def test_plot_writes_a_png_from_score_rows_and_a_callback_history(checkpoints, tmp_path, capsys):
    argv = ["score", "--env", CLIFF, "--policy", str(checkpoints / "rl_model_*_steps.zip")]
    assert main([*argv, "--mode", "unknown", "--csv", str(tmp_path / "r.csv")]) == 0
    history = tmp_path / "h.jsonl"
    history.write_text(
        "\n".join(
            json.dumps({"timesteps": 100 * k, "meg": 0.1 * k, "unknown": 0.5}) for k in (1, 2)
        )
    )
    out = tmp_path / "figs" / "meg.png"
    assert main(["plot", str(tmp_path / "r.csv"), str(history), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert "10 points from 2 file(s): r, h)" in capsys.readouterr().out
    # Histories of the same file name in different folders are named by their folders.
    for run in ("ppo", "dqn"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "meg.jsonl").write_text(history.read_text())
    same = [str(tmp_path / "runs" / run / "meg.jsonl") for run in ("ppo", "dqn")]
    assert main(["plot", *same, "--out", str(out)]) == 0
    assert "4 points from 2 file(s): ppo/meg, dqn/meg)" in capsys.readouterr().out
    for argv, message in [
        (["plot", str(history), "--out", str(tmp_path / "x.pdf")], r"should end in \.png"),
        (["plot", str(history), "--out", str(tmp_path)], "is a folder"),
        (["plot", str(tmp_path / "none.csv"), "--out", str(out)], "no file at"),
        (["plot", str(history), "--metric", "beta", "--out", str(out)], "no row has a number"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("imitation-meg plot: error: "), err
        assert re.search(message, err), err


def test_zoo_folders_without_env_and_mixed_environments(tmp_path, capsys):
    pytest.importorskip("yaml")
    with pytest.raises(SystemExit):
        main(["score", "--policy"])
    assert main(["score", "--policy", "uniform"]) == 2
    assert "needs an environment: pass --env" in capsys.readouterr().err


@pytest.mark.expensive
def test_one_call_is_at_least_5x_faster_than_8_calls(checkpoints, tmp_path):
    """The figure in docs/cli.md: 8 checkpoints, one `score` call against 8 separate calls."""
    base = [sys.executable, "-m", "imitation_meg.cli", "score", "--env", CLIFF, "--policy"]
    files = [str(p) for p in sorted(checkpoints.glob("rl_model_*_steps.zip"))]
    t0 = time.perf_counter()
    for f in files:
        subprocess.run([*base, f], check=True, capture_output=True, timeout=300)
    separate = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run(
        [*base, *files, "--csv", str(tmp_path / "r.csv")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    one = time.perf_counter() - t0
    assert len(read_rows(tmp_path / "r.csv")) == 8
    print(f"8 separate calls {separate:.1f} s, one call {one:.1f} s, ratio {separate / one:.1f}")
    assert separate / one >= 5
