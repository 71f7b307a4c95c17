"""The continuous-action estimator, the command line, the callback and batch scoring on Box
actions (tiny budgets; the validation against exact answers is the continuous_validation study)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from imitation_meg.continuous import (
    ContinuousTabularEnv,
    GaussianPolicy,
    meg_continuous,
    random_continuous_mdp,
)
from imitation_meg.continuous.approx import meg_approx_continuous
from imitation_meg.continuous.densities import tabular_policy as tabular_policy_of
from imitation_meg.continuous.envs import table_policy
from imitation_meg.continuous.rollouts import BoxEnvSource
from imitation_meg.continuous.soft_q import action_grid

sb3 = pytest.importorskip("stable_baselines3")

TINY = {
    "n_data_steps": 150,
    "n_eval_episodes": 10,
    "n_models": 2,
    "hidden": (16,),
    "iterations": 2,
    "steps_per_iteration": 5,
    "n_boot": 30,
}


@pytest.fixture(scope="module")
def mdp():
    return random_continuous_mdp(3, 1, 2, seed=3)


def test_estimate_is_bounded_reproducible_and_staged(mdp):
    pol = GaussianPolicy(np.arctanh(mdp.utility.m.numpy()), np.full((3, 1), 0.3))
    run = lambda: meg_approx_continuous(  # noqa: E731
        table_policy(pol, mdp), lambda: ContinuousTabularEnv(mdp), refine=1, seed=4, **TINY
    )
    res = run()
    exact = meg_continuous(pol, mdp)
    assert 0.0 <= res.low <= res.meg <= res.high <= res.certificate
    assert res.certificate == pytest.approx(exact.certificate, rel=0.2)  # 10 episodes
    assert len(res.stages) == 2 and len(res.models) == 2 and res.n_env_steps > 0
    assert res.normalized == pytest.approx(res.meg / res.certificate)
    assert res.grid == "gauss-legendre, 16 points"
    assert not res.above_certificate and res.stages[-1] <= res.certificate
    assert run().meg == res.meg  # same seed, same result
    json.dumps(res.to_dict())


def test_a_value_above_the_certificate_is_flagged():
    """No normalised model beats the certificate (Gibbs): a stage mean above it is the action
    grid's failure, flagged; at or within rounding of it, not."""
    from imitation_meg.continuous.approx import exceeds_certificate

    assert exceeds_certificate(2569.6, 562.3) and exceeds_certificate(1.01, 1.0)
    assert not exceeds_certificate(562.3, 562.3) and not exceeds_certificate(1.0 + 1e-7, 1.0)
    assert not exceeds_certificate(1e9, math.inf) and exceeds_certificate(1e-5, 0.0)


def test_uniform_scores_zero_and_clipped_has_no_certificate(mdp):
    make = lambda: ContinuousTabularEnv(mdp)  # noqa: E731
    res = meg_approx_continuous(table_policy("uniform", mdp), make, refine=0, **TINY)
    assert res.meg == 0.0 and res.certificate == 0.0
    half = 0.5 * (mdp.high - mdp.low)
    clipped = GaussianPolicy(np.zeros((3, 1)), np.full((3, 1), 0.8) * half, kind="clipped")
    res = meg_approx_continuous(table_policy(clipped, mdp), make, refine=0, **TINY)
    assert res.certificate == math.inf and math.isnan(res.normalized) and res.meg >= 0.0


def test_three_dimensions_use_quasi_random_points():
    grid = action_grid(3)
    assert grid.kind == "sobol" and grid.points.shape == (256, 3)
    assert float(grid.log_w.exp().sum()) == pytest.approx(1.0)
    mdp3 = random_continuous_mdp(2, 3, 2, seed=0)
    pol = GaussianPolicy(np.zeros((2, 3)), np.full((2, 3), 0.5))
    tiny = {**TINY, "n_models": 1, "n_eval_episodes": 4}
    res = meg_approx_continuous(
        table_policy(pol, mdp3),
        lambda: ContinuousTabularEnv(mdp3),
        refine=0,
        grid_points=64,
        **tiny,
    )
    assert res.grid == "sobol, 64 points" and 0.0 <= res.meg <= res.certificate


def test_environments_and_policies_that_do_not_fit_are_refused(mdp):
    with pytest.raises(TypeError, match="needs a Box"):
        BoxEnvSource("CartPole-v1")
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        BoxEnvSource("Pendulum-v1", horizon=0)
    with pytest.raises(ValueError, match="steps_per_iteration must be None or an integer"):
        meg_approx_continuous("unused.zip", "Pendulum-v1", steps_per_iteration=0)
    with pytest.raises(ValueError, match="n_models must be an integer >= 1"):
        meg_approx_continuous("unused.zip", "Pendulum-v1", n_models=0)
    td3 = sb3.TD3("MlpPolicy", "Pendulum-v1", learning_starts=10, seed=0)
    with pytest.raises(ValueError, match="noise_std=SIGMA"):
        meg_approx_continuous(td3, "Pendulum-v1", **TINY)
    sac = sb3.SAC("MlpPolicy", "MountainCarContinuous-v0", seed=0)
    with pytest.raises(ValueError, match="score it in the environment it was trained on"):
        meg_approx_continuous(sac, "Pendulum-v1", **TINY)


@pytest.fixture(scope="module")
def sac_zip(tmp_path_factory):
    model = sb3.SAC(
        "MlpPolicy", "Pendulum-v1", learning_starts=50, seed=0, policy_kwargs={"net_arch": [32, 32]}
    )
    model.learn(100)
    path = tmp_path_factory.mktemp("zips") / "sac.zip"
    model.save(path)
    return path


def _args(**kw):
    base = {
        "env": "Pendulum-v1",
        "policy": ["x"],
        "algo": None,
        "epsilon": None,
        "noise_std": None,
        "horizon": 20,
        "seed": 0,
        "mode": "known",
        "json": None,
        "signed": False,
        "rollouts": None,
        "target": None,
        "vec_normalize": None,
        "action_masks": None,
        "approx_models": 2,
        "approx_episodes": 6,
        "approx_iterations": 2,
        "approx_steps": 5,
        "approx_data": 300,
    }
    base.update(kw)
    return argparse.Namespace(**base)


def test_command_line_scores_a_sac_zip_and_refuses_td3(sac_zip, tmp_path, capsys):
    from imitation_meg.cli import main
    from imitation_meg.continuous.score import score_continuous

    assert score_continuous(_args(policy=[str(sac_zip)], json=str(tmp_path / "o.json"))) == 0
    out = capsys.readouterr().out
    assert "MEG estimate" in out and "interval" in out and "wall time" in out
    assert "SAC (squashed Gaussian)" in out
    assert json.loads((tmp_path / "o.json").read_text())["result"]["meg"] >= 0.0
    td3 = sb3.TD3("MlpPolicy", "Pendulum-v1", learning_starts=10, seed=0)
    td3.save(tmp_path / "td3.zip")
    rc = main(["score", "--env", "Pendulum-v1", "--policy", str(tmp_path / "td3.zip")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "TD3 acts deterministically" in err and "--noise-std SIGMA" in err
    with pytest.raises(ValueError, match="--mode unknown is not available"):
        score_continuous(_args(policy=[str(sac_zip)], mode="unknown"))
    assert main(["score", "--env", "CartPole-v1", "--policy", "uniform", "--noise-std", "0.1"]) == 2
    assert "--noise-std applies to deterministic agents" in capsys.readouterr().err
    csv = str(tmp_path / "rows.csv")
    assert main(["score", "--env", "Pendulum-v1", "--policy", "uniform", "--csv", csv]) == 2
    assert "--csv is not available with the approximate estimator" in capsys.readouterr().err


def test_approx_options_reach_the_box_estimator(tmp_path, capsys):
    from imitation_meg.cli import main

    out = tmp_path / "o.json"
    argv = ["score", "--env", "Pendulum-v1", "--policy", "uniform", "--horizon", "5"]
    opts = ["n_models=2", "n_data_steps=300", "n_eval_episodes=6", "iterations=2"]
    opts += ["steps_per_iteration=5", "refine=0"]
    assert (
        main([*argv, *(a for o in opts for a in ("--approx-option", o)), "--json", str(out)]) == 0
    )
    res = json.loads(out.read_text())["result"]
    assert len(res["models"]) == 2 and len(res["stages"]) == 1
    capsys.readouterr()
    assert main([*argv, "--approx-option", "lrr=0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'lrr' is not a setting of this estimator" in err and "'steps_per_iteration'" in err
    assert main([*argv, "--approx-option", "n_models=0"]) == 2
    assert "n_models must be an integer >= 1, got 0" in capsys.readouterr().err


def test_callback_and_batch_scoring_accept_box_agents(mdp, tmp_path):
    from imitation_meg.callbacks import MEGCallback
    from imitation_meg.scoring import ScoreOptions, score_policies

    env = ContinuousTabularEnv(mdp)
    cb = MEGCallback(env, eval_freq=60, history=tmp_path / "h.jsonl")
    model = sb3.SAC("MlpPolicy", env, learning_starts=30, seed=0, policy_kwargs={"net_arch": [16]})
    model.learn(120, callback=cb)
    assert [r["timesteps"] for r in cb.records] == [60, 120]
    for r in cb.records:
        assert 0.0 <= r["meg"] <= r["certificate"] and r["converged"]
        assert r["normalized"] == pytest.approx(r["meg"] / r["certificate"])
        # a density has no H log|A|: upper_bound (that bound, in discrete records) stays empty
        assert r["upper_bound"] is None
    assert len((tmp_path / "h.jsonl").read_text().splitlines()) == 2
    # the training environment itself, when none is given; TD3 with its smoothing
    td3 = sb3.TD3("MlpPolicy", env, learning_starts=20, seed=0, policy_kwargs={"net_arch": [16]})
    cb2 = MEGCallback(eval_freq=40, noise_std=0.2, unknown=True)
    td3.learn(40, callback=cb2)
    # every utility of the state: a class without the MDP's own (action-dependent) utility
    assert cb2.records[0]["unknown"] >= 0.0 and cb2.records[0]["certificate"] == math.inf
    model.save(tmp_path / "sac.zip")
    rows = score_policies([str(tmp_path / "sac.zip"), "uniform"], mdp, ScoreOptions())
    assert rows[0]["algo"] == "sac" and rows[0]["timesteps"] == 120
    # (the callback's last record saw the policy before the step's gradient update)
    direct = meg_continuous(tabular_policy_of(str(tmp_path / "sac.zip"), mdp), mdp)
    assert rows[0]["meg"] == pytest.approx(direct.meg, rel=1e-12)
    assert rows[1]["meg"] == 0.0 and rows[1]["policy"] == "uniform"
    unk = score_policies([str(tmp_path / "sac.zip")], mdp, ScoreOptions(mode="unknown"))
    assert 0.0 <= unk[0]["meg"] <= unk[0]["certificate"] and unk[0]["known_meg"] == rows[0]["meg"]
    assert rows[0]["upper_bound"] is None and unk[0]["upper_bound"] is None
    with pytest.raises(ValueError, match="no density on a continuous box"):
        score_policies(["optimal"], mdp)


@pytest.mark.expensive
def test_cli_scores_a_pendulum_sac_zip_with_the_defaults(tmp_path, capsys):
    """The issue's acceptance command end to end, with the defaults (time stated in the output)."""
    from imitation_meg.cli import main

    model = sb3.SAC("MlpPolicy", "Pendulum-v1", seed=0, device="cpu")
    model.learn(3_000)
    path = tmp_path / "sac.zip"
    model.save(path)
    assert main(["score", "--env", "Pendulum-v1", "--policy", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MEG estimate" in out and "wall time" in out
