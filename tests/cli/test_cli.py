"""The imitation-meg command line."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import warnings

import pytest
import torch as th

import imitation_meg as im
from imitation_meg.cli import format_table, main


def test_demo_prints_the_table(capsys):
    assert main(["demo", "--no-ppo", "--horizon", "30"]) == 0
    out = capsys.readouterr().out
    for name in ("uniform", "epsilon-greedy 0.1", "epsilon-greedy 0.5", "optimal"):
        assert name in out
    rows = {}
    for line in out.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 7 and cells[1][0].isdigit():
            rows[cells[0]] = float(cells[1])
    assert rows["uniform"] == 0.0
    assert rows["optimal"] > rows["epsilon-greedy 0.1"] > rows["epsilon-greedy 0.5"] > 0


def test_format_table_aligns_and_formats():
    text = format_table([{"a": 1.0, "b": float("inf")}, {"a": 22.5, "b": "x"}])
    lines = text.splitlines()
    assert lines[0].split() == ["a", "b"]
    assert "+inf" in lines[2] and "22.5000" in lines[3]
    assert len({len(line) for line in lines}) == 1


# ---------------------------------------------------------------------------------- score

CLIFF = "seals/CliffWorld7x4-v0"


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """A PPO and a DQN trained briefly with plain SB3 and saved with model.save()."""
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3

    th.set_num_threads(1)
    d = tmp_path_factory.mktemp("models")
    kw = {"seed": 0, "device": "cpu", "policy_kwargs": {"net_arch": [32]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ppo = sb3.PPO("MlpPolicy", CLIFF, n_steps=128, batch_size=64, n_epochs=2, **kw)
        ppo.learn(512)
        dqn = sb3.DQN("MlpPolicy", CLIFF, learning_starts=100, buffer_size=1_000, **kw)
        dqn.learn(400)
    ppo.save(d / "ppo.zip")
    dqn.save(d / "dqn.zip")
    return d, ppo, dqn


def test_score_saved_ppo_end_to_end_in_a_subprocess(saved_models, tmp_path):
    from imitation_meg.adapters import policy_table

    d, ppo, _ = saved_models
    out = tmp_path / "ppo.json"
    cmd = [
        sys.executable,
        "-m",
        "imitation_meg.cli",
        "score",
        "--env",
        CLIFF,
        "--algo",
        "ppo",
        "--policy",
        str(d / "ppo.zip"),
        "--json",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(out.read_text())
    mdp = im.TabularMDP.from_env(CLIFF)
    exact = im.meg(policy_table(ppo, mdp), mdp)
    assert payload["meg"] == pytest.approx(exact.meg, abs=1e-9)
    assert payload["mode"] == "known" and payload["result"]["meg"] == payload["meg"]
    assert payload["result"]["expected_utility"] == pytest.approx(exact.expected_utility, abs=1e-9)
    assert payload["config"]["env"] == CLIFF and payload["config"]["algo"] == "ppo"
    assert {"torch", "stable-baselines3", "gymnasium", "seals"} <= set(payload["library_versions"])
    assert payload["mdp"] == {
        "name": CLIFF,
        "n_states": 28,
        "n_actions": 4,
        "horizon": 9,
        "discount": 1.0,
        "upper_bound": pytest.approx(9 * math.log(4)),
    }
    assert "PPO ppo.zip" in proc.stdout and f"{exact.meg:.4f}" in proc.stdout


def test_score_dqn_with_epsilon_and_rollouts(saved_models, tmp_path, capsys):
    from imitation_meg.adapters import policy_table

    d, _, dqn = saved_models
    out = tmp_path / "dqn.json"
    argv = [
        "score",
        "--env",
        CLIFF,
        "--algo",
        "dqn",
        "--policy",
        str(d / "dqn.zip"),
        "--epsilon",
        "0.2",
        "--rollouts",
        "200",
        "--n-boot",
        "20",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    payload = json.loads(out.read_text())
    mdp = im.TabularMDP.from_env(CLIFF)
    assert payload["meg"] == pytest.approx(
        im.meg(policy_table(dqn, mdp, epsilon=0.2), mdp).meg, abs=1e-9
    )
    est = payload["trajectory_estimate"]
    assert est["n_trajectories"] == 200 and est["n_boot"] == 20 and est["low"] <= est["high"]
    assert "95% interval" in capsys.readouterr().out


@pytest.mark.parametrize("mode, target", [("unknown", None), ("target", "goal")])
def test_score_builtin_policy_modes(mode, target, tmp_path):
    out = tmp_path / "r.json"
    argv = [
        "score",
        "--cliff-world",
        "--width",
        "4",
        "--height",
        "2",
        "--horizon",
        "4",
        "--policy",
        "epsilon-greedy",
        "--epsilon",
        "0.3",
        "--mode",
        mode,
        "--json",
        str(out),
    ]
    if target:
        argv += ["--target", target]
    assert main(argv) == 0
    payload = json.loads(out.read_text())
    mdp = im.envs.cliff_world(width=4, height=2, horizon=4)
    pi = im.policies.epsilon_greedy(mdp, 0.3)
    expected = im.meg_unknown(pi, mdp) if mode == "unknown" else im.meg_target(pi, mdp, target)
    assert payload["meg"] == pytest.approx(expected.meg, abs=1e-8)
    assert payload["known"]["meg"] == pytest.approx(im.meg(pi, mdp).meg, abs=1e-9)
    if mode == "unknown":  # the env reward is one of the utilities of the state
        assert payload["meg"] >= payload["known"]["meg"] - 1e-9
    assert payload["target"] == target


def test_score_builtins_known(capsys):
    assert main(["score", "--cliff-world", "--horizon", "10", "--policy", "uniform"]) == 0
    assert (
        main(["score", "--cliff-world", "--horizon", "10", "--policy", "optimal", "--signed"]) == 0
    )
    out = capsys.readouterr().out
    assert "uniform" in out and "optimal" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", CLIFF, "--policy", "model.zip"], "no SB3 model file at 'model.zip'"),
        (["--env", CLIFF, "--policy", "nonsense"], "neither a saved model"),
        (["--env", CLIFF, "--policy", "missing.zip", "--algo", "ppo"], "no SB3 model file"),
        (["--cliff-world", "--policy", "epsilon-greedy"], "needs --epsilon"),
        (
            ["--cliff-world", "--policy", "epsilon-greedy", "--epsilon", "2"],
            r"epsilon must lie in \[0, 1\]",
        ),
        (["--cliff-world", "--policy", "optimal", "--epsilon", "0.1"], "--epsilon applies to"),
        (
            ["--cliff-world", "--policy", "optimal", "--algo", "ppo"],
            "--algo applies to a saved model",
        ),
        (
            ["--env", CLIFF, "--width", "5", "--policy", "uniform"],
            "--width only apply to --cliff-world",
        ),
        # not tabular: the approximate path (issue 14), whose unsupported options exit 2
        (
            ["--env", "CartPole-v1", "--policy", "uniform", "--mode", "unknown"],
            "add --approx-option method=empirical",
        ),
        (
            ["--env", "CartPole-v1", "--policy", "uniform", "--mode", "target", "--target", "row"],
            "not available with the approximate estimator",
        ),
        (["--env", "NoSuchEnv-v0", "--policy", "uniform"], "could not make environment"),
        (
            ["--cliff-world", "--policy", "uniform", "--target", "row"],
            "--target applies to --mode target",
        ),
        (
            ["--cliff-world", "--policy", "uniform", "--mode", "unknown", "--signed"],
            "--signed applies to --mode known",
        ),
        (
            ["--cliff-world", "--policy", "uniform", "--rollouts", "0"],
            "--rollouts must be a positive",
        ),
        (["--env", "FrozenLake-v1", "--policy", "uniform", "--mode", "target"], "no grid_shape"),
        (["--cliff-world", "--goal-region", "9", "--policy", "uniform"], "goal_region=9"),
    ],
)
def test_score_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(["score", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("imitation-meg score: error: ") and "\n" not in err
    assert re.search(message, err), err


def test_score_dqn_zip_without_epsilon(saved_models, capsys):
    d, _, _ = saved_models
    assert main(["score", "--env", CLIFF, "--algo", "dqn", "--policy", str(d / "dqn.zip")]) == 2
    assert "pass epsilon=" in capsys.readouterr().err


def test_score_argparse_errors():
    with pytest.raises(SystemExit) as e:
        main(["score", "--cliff-world"])  # no --policy
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main(["score", "--cliff-world", "--env", CLIFF, "--policy", "uniform"])  # both envs
    with pytest.raises(SystemExit):
        main(["score", "--cliff-world", "--policy", "uniform", "--mode", "nope"])


def test_failures_of_issue_12_exit_2_with_one_line(saved_models, tmp_path, capsys):
    import zipfile

    d, _, _ = saved_models
    with zipfile.ZipFile(tmp_path / "nomodel.zip", "w") as z:
        z.writestr("notes.txt", "a valid zip, no model")
    cases = [
        (
            ["score", "--env", CLIFF, "--policy", str(tmp_path / "nomodel.zip")],
            r"nomodel\.zip' is a zip file but holds no SB3 model .*notes\.txt.*model\.save\(\)",
        ),
        (
            ["score", "--env", CLIFF, "--policy", str(d / "dqn.zip"), "--algo", "ppo"],
            r"saved by DQN \(policy DQNPolicy\), not PPO: drop algo= / --algo",
        ),
        (
            ["score", "--env", CLIFF, "--policy", str(d / "ppo.zip"), "--algo", "a2c"],
            r"saved by PPO \(policy ActorCriticPolicy\), not A2C",
        ),
        # Output paths are checked before any work: the missing model is never reached.
        (
            ["score", "--env", CLIFF, "--policy", "missing.zip", "--json", str(tmp_path)],
            r"--json '.*' is a folder; name a file inside it",
        ),
        (
            ["score", "--env", CLIFF, "--policy", "missing.zip", "--csv", str(tmp_path / "a.txt")],
            r"--csv '.*a\.txt' should end in \.csv",
        ),
        (["demo", "--ppo-steps", "-5"], r"--ppo-steps must be a positive number of steps, got -5"),
        (["demo", "--no-ppo", "--horizon", "0"], r"--horizon must be a positive number"),
        (["score", "--cliff-world", "--policy", "uniform", "--jobs", "0"], "--jobs must be"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith(f"imitation-meg {argv[0]}: error: "), err
        assert re.search(message, err), (message, err)


def test_missing_output_folder_is_announced_and_created(saved_models, tmp_path, capsys):
    d, ppo, _ = saved_models
    out = tmp_path / "new" / "deeper" / "r.json"
    assert main(["score", "--env", CLIFF, "--policy", str(d / "ppo.zip"), "--json", str(out)]) == 0
    assert "does not exist: it will be created" in capsys.readouterr().err
    payload = json.loads(out.read_text())
    assert payload["algo"] == "ppo" and payload["timesteps"] == ppo.num_timesteps


def test_demo_with_a_small_ppo(capsys):
    assert main(["demo", "--horizon", "10", "--ppo-steps", "512"]) == 0
    out = capsys.readouterr().out
    assert "PPO (512 steps)" in out and "Done in" in out


def test_score_in_the_discounted_infinite_horizon_setting(tmp_path, capsys):
    out = tmp_path / "d.json"
    argv = ["score", "--cliff-world", "--width", "4", "--height", "2", "--horizon", "inf"]
    argv += ["--discount", "0.9", "--policy", "epsilon-greedy", "--epsilon", "0.3"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "H=inf, gamma=0.9" in printed
    payload = json.loads(out.read_text())
    mdp = im.envs.cliff_world(width=4, height=2).with_horizon(None, 0.9)
    expected = im.meg(im.policies.epsilon_greedy(mdp, 0.3), mdp)
    assert payload["meg"] == pytest.approx(expected.meg, abs=1e-9)
    assert payload["mdp"]["upper_bound"] == pytest.approx(math.log(4) / 0.1, rel=1e-12)
    # An infinite horizon without a discount below 1: exit 2 with one line naming the fix.
    assert main(["score", "--cliff-world", "--horizon", "inf", "--policy", "uniform"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--discount" in err[0]
    bad = ["score", "--cliff-world", "--horizon", "inf", "--discount", "1", "--policy", "uniform"]
    assert main(bad) == 2


def test_an_output_path_no_file_can_be_created_in_fails_before_any_work(capsys):
    """``--json /proc/nope.json`` used to print the whole table, then ``[Errno 2]``: root may
    "access" /proc, but no file can be created there."""
    argv = ["score", "--cliff-world", "--policy", "uniform", "--json", "/proc/nope.json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no table: nothing was computed
    err = captured.err.strip()
    assert "\n" not in err and err.startswith("imitation-meg score: error: --json '/proc/nope")
    assert "no file can be created in the folder '/proc'" in err
    # the approximate path (an environment that is not tabular) checks its output first too
    assert main(["score", "--env", "CartPole-v1", "--policy", "uniform", *argv[-2:]]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--json '/proc/nope.json'" in captured.err
    approx_csv = ["score", "--env", "CartPole-v1", "--policy", "uniform", "--csv", "m.csv"]
    assert main(approx_csv) == 2  # it used to be ignored without a word
    assert "--csv is not available with the approximate estimator" in capsys.readouterr().err


def test_a_new_output_folder_is_announced_on_stderr_before_the_results(tmp_path, capsys):
    """stdout carries the table (and may be redirected to a file); the note goes to stderr."""
    out = tmp_path / "newdir" / "sub" / "x.csv"
    argv = ["score", "--cliff-world", "--horizon", "5", "--policy", "uniform", "--csv", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    note = f"imitation-meg: the folder '{out.parent}' for --csv does not exist: it will be created"
    assert note in captured.err.splitlines() and "will be created" not in captured.out
    assert out.is_file() and "uniform" in out.read_text()


def test_a_folder_that_is_no_rl_zoo_run_says_what_one_holds(tmp_path, capsys):
    folder = tmp_path / "some" / "folder"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"")
    assert main(["score", "--policy", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"'{folder}' is not an RL Zoo run folder" in err
    assert "no subfolder with config.yml or args.yml" in err and "<EnvName>.zip" in err
    assert "--env ENV_ID or --cliff-world" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "--env", "MiniGrid-Empty-5x5-v0", "--policy", "uniform", "--seed", "-1"],
        ["demo", "--no-ppo", "--seed", "-1"],
        ["score", "--cliff-world", "--policy", "uniform", "--seed", "1.5"],
    ],
)
def test_negative_or_fractional_seeds_are_refused_by_the_parser(argv, capsys):
    # A negative seed reached numpy's SeedSequence (a 32-line traceback) on MiniGrid and demo.
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(
        r"imitation-meg (score|demo): error: argument --seed: expected a non-negative integer, "
        r"got '(-1|1\.5)'",
        err[-1],
    )
    assert not any("Traceback" in line for line in err)
