"""The soft Q-fits with Box actions (the action space a parameter of one estimator): rollouts,
models, options, results and the command line (tiny budgets; the validation against exact
answers is the continuous_validation study)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from imitation_meg.approx import (
    ApproxMEGResult,
    ApproxOptions,
    BoxSoftQModel,
    ContinuousApproxResult,
    EnvSource,
    collect,
    meg_approx,
    meg_approx_continuous,
)
from imitation_meg.approx.core import policy_behaviour
from imitation_meg.approx.evaluate import exceeds_certificate
from imitation_meg.approx.options import BOX_FIT_DEFAULTS, FIT_DEFAULTS
from imitation_meg.approx.rollouts import Laws, Rollouts
from imitation_meg.approx.soft_q import action_grid, fit_soft_q_ensemble, new_model
from imitation_meg.continuous import (
    ContinuousTabularEnv,
    GaussianPolicy,
    meg_continuous,
    random_continuous_mdp,
)
from imitation_meg.continuous.envs import table_policy

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
    make = lambda: ContinuousTabularEnv(mdp)  # noqa: E731
    res = meg_approx(table_policy(pol, mdp), make, method="soft_q", refine=1, seed=4, **TINY)
    exact = meg_continuous(pol, mdp)
    assert isinstance(res, ApproxMEGResult) and ContinuousApproxResult is ApproxMEGResult
    assert 0.0 <= res.low <= res.meg <= res.high <= res.certificate
    assert res.certificate == pytest.approx(exact.certificate, rel=0.2)  # 10 episodes
    assert len(res.stages) == 2 and len(res.models) == 2 and res.n_env_steps > 0
    # a density has no log|A|: the bounds are infinite, normalized is MEG over the certificate
    assert res.upper_bound == math.inf and res.length_bound == math.inf
    assert res.normalized == pytest.approx(res.meg / res.certificate)
    assert res.length_normalized == res.normalized and math.isnan(res.ensemble)
    assert res.grid == "gauss-legendre, 16 points" and res.method == "soft_q"
    assert not res.above_certificate and res.stages[-1] <= res.certificate
    # the alias is the same call: the same numbers for the same seed
    again = meg_approx_continuous(table_policy(pol, mdp), make, refine=1, seed=4, **TINY)
    assert (again.meg, again.low, again.high, again.stages) == (
        res.meg,
        res.low,
        res.high,
        res.stages,
    )
    json.dumps(res.to_dict())


def test_a_value_above_the_certificate_is_flagged():
    """No normalised model beats the certificate (Gibbs): a stage mean above it is the action
    grid's failure, flagged; at or within rounding of it, not."""
    assert exceeds_certificate(2569.6, 562.3) and exceeds_certificate(1.01, 1.0)
    assert not exceeds_certificate(562.3, 562.3) and not exceeds_certificate(1.0 + 1e-7, 1.0)
    assert not exceeds_certificate(1e9, math.inf) and exceeds_certificate(1e-5, 0.0)


def test_uniform_scores_zero_and_clipped_has_no_certificate(mdp):
    make = lambda: ContinuousTabularEnv(mdp)  # noqa: E731
    res = meg_approx_continuous(table_policy("uniform", mdp), make, refine=0, **TINY)
    assert res.meg == 0.0 and res.certificate == 0.0 and res.normalized == 0.0
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
    with pytest.raises(ValueError, match="at least 2 points per dimension"):
        action_grid(1, 1)


def test_box_rollouts_store_the_scored_laws(mdp):
    source = EnvSource(lambda: ContinuousTabularEnv(mdp), horizon=2)
    pol = table_policy(GaussianPolicy(np.zeros((3, 1)), np.full((3, 1), 0.5)), mdp)
    ev = collect(source, policy_behaviour(pol), 5, np.random.default_rng(0), scored=pol, n_envs=2)
    assert ev.a.shape == (ev.n_steps, 1) and ev.a.dtype == np.float64 and ev.probs is None
    assert ev.laws is not None and ev.laws.kind == "squashed" and ev.laws.mean.shape == (10, 1)
    assert np.all((mdp.low <= ev.a) & (ev.a <= mdp.high))
    again = collect(source, policy_behaviour(pol), 5, np.random.default_rng(0), n_envs=2)
    assert np.array_equal(again.a, ev.a) and again.laws is None  # the same draws, unscored
    both = Rollouts.concat([ev, ev])
    assert both.laws is not None and both.laws.mean.shape == (20, 1) and both.n_episodes == 10
    assert Rollouts.concat([ev, again]).laws is None  # laws only where every part has them
    other = Laws("clipped", ev.laws.mean, ev.laws.std, ev.laws.low, ev.laws.high)
    with pytest.raises(ValueError, match="different kinds"):
        Laws.concat([ev.laws, other])
    with pytest.raises(ValueError, match="features= reads a Discrete agent"):
        collect(source, policy_behaviour(pol), 2, np.random.default_rng(0), features=True)


def test_one_fitting_loop_refuses_models_of_both_kinds(mdp):
    source = EnvSource(lambda: ContinuousTabularEnv(mdp), horizon=2)
    pol = table_policy("uniform", mdp)
    data = collect(source, policy_behaviour(pol), 20, np.random.default_rng(0))
    box = new_model(data, source.actions, 2, hidden=(8,), seed=0, last_steps=3)
    assert isinstance(box, BoxSoftQModel) and box.grid.kind == "gauss-legendre"
    flat = Rollouts(**{**data.__dict__, "a": np.zeros(data.n_steps, dtype=np.int64)})
    discrete = new_model(flat, 2, 2, hidden=(8,), seed=0)
    with pytest.raises(ValueError, match="one kind of action"):
        fit_soft_q_ensemble([box, discrete], [data, flat], iterations=1, steps_per_iteration=2)
    with pytest.raises(ValueError, match="reward_fn= replaces the reward of Discrete"):
        new_model(data, source.actions, 2, hidden=(8,), seed=0, reward_fn=lambda x: x[:, 0])
    losses = fit_soft_q_ensemble([box], [data], iterations=2, steps_per_iteration=3)
    assert len(losses[0]) == 2 and all(math.isfinite(v) for v in losses[0])


def test_box_fits_have_defaults_of_their_own(mdp):
    """The Box fits' defaults (their validated setting) fill only what is not given; every
    other method keeps the others'."""
    box = EnvSource(lambda: ContinuousTabularEnv(mdp), horizon=2)
    fits = ApproxOptions(method="soft_q").resolved(box)
    assert {k: getattr(fits, k) for k in BOX_FIT_DEFAULTS} == BOX_FIT_DEFAULTS
    assert (fits.iterations, fits.steps_per_iteration, fits.n_data_steps) == (12, 1000, 30_000)
    assert ApproxOptions().resolved(box).method == "soft_q"  # no simulator: the fits
    assert ApproxOptions(method="auto").resolved(box).method == "soft_q"
    given = ApproxOptions(method="soft_q", n_eval_episodes=1000, refine=3).resolved(box)
    assert (given.n_eval_episodes, given.refine, given.n_boot) == (1000, 3, 300)
    cartpole = ApproxOptions(method="soft_q").resolved(EnvSource("CartPole-v1", horizon=10))
    assert {k: getattr(cartpole, k) for k in FIT_DEFAULTS} == FIT_DEFAULTS
    assert (cartpole.iterations, cartpole.steps_per_iteration) == (30, 1600)
    assert ApproxOptions().for_curve().n_eval_episodes == FIT_DEFAULTS["n_eval_episodes"]


def test_box_fit_defaults_are_frozen():
    """The Box fits' defaults and constants are those configs/continuous_validation.yaml
    validates (docs/continuous.md); a change is a new estimator for that table."""
    from imitation_meg.approx import ensemble, options, soft_q, soft_q_batches, soft_q_models

    assert options.BOX_FIT_DEFAULTS == {
        "n_eval_episodes": 100,
        "refine": 1,
        "n_boot": 300,
        "n_envs": 8,
    }
    assert (options.BOX_DATA_STEPS, options.BOX_STEP_BUDGET) == (30_000, 12_000)
    assert ApproxOptions().schedule(20, box=True) == (30, 400)
    assert (ensemble._BOX_GRID_DECADES, ensemble._BOX_GRID_STEP) == ((-2.0, 5.0), 0.5)
    assert (ensemble._BOX_FINE_HALF, ensemble._BOX_FINE_STEP) == (0.3, 0.1)
    assert (soft_q_batches._POOL_LONG, soft_q_batches._POOL_SHORT) == (2048, 8192)
    assert soft_q_models._RESAMPLE == 32
    assert soft_q.target_pool(99) == 8192 and soft_q.target_pool(100) == 2048


def test_environments_policies_and_settings_that_do_not_fit_are_refused(mdp):
    make = lambda: ContinuousTabularEnv(mdp)  # noqa: E731
    uniform = table_policy("uniform", mdp)
    with pytest.raises(TypeError, match="needs an environment with a Box action space"):
        meg_approx_continuous("unused.zip", "CartPole-v1")
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        EnvSource("Pendulum-v1", horizon=0)
    with pytest.raises(ValueError, match="steps_per_iteration must be an integer >= 1"):
        meg_approx_continuous("unused.zip", "Pendulum-v1", steps_per_iteration=0)
    with pytest.raises(ValueError, match="n_models must be an integer >= 1"):
        meg_approx_continuous("unused.zip", "Pendulum-v1", n_models=0)
    with pytest.raises(ValueError, match="is the Box soft Q-fits"):
        meg_approx_continuous(uniform, make, method="paths")
    with pytest.raises(ValueError, match="has no Box-action form"):
        meg_approx(uniform, make, method="linear")
    with pytest.raises(ValueError, match=r"\['device'\] do not apply to method='soft_q' with Box"):
        meg_approx(uniform, make, method="soft_q", device="cpu", **TINY)
    lean = lambda obs: np.tile([0.7, 0.3], (len(obs), 1))  # noqa: E731
    with pytest.raises(ValueError, match=r"\['grid_points'\] do not apply to method='soft_q'"):
        meg_approx(lean, "CartPole-v1", horizon=5, method="soft_q", grid_points=8)
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
        "approx_options": ["method=soft_q"],
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
    from imitation_meg.cli.approx import score_approx

    assert score_approx(_args(policy=[str(sac_zip)], json=str(tmp_path / "o.json"))) == 0
    out = capsys.readouterr().out
    assert "MEG estimate" in out and "interval" in out and "wall time" in out
    assert "SAC (squashed Gaussian)" in out and "action grid         gauss-legendre" in out
    assert "Box of 1 dimension(s)" in out and "bound H log|A|" not in out
    result = json.loads((tmp_path / "o.json").read_text())["result"]
    assert result["meg"] >= 0.0 and result["upper_bound"] == "inf"
    td3 = sb3.TD3("MlpPolicy", "Pendulum-v1", learning_starts=10, seed=0)
    td3.save(tmp_path / "td3.zip")
    rc = main(["score", "--env", "Pendulum-v1", "--policy", str(tmp_path / "td3.zip")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "TD3 acts deterministically" in err and "--noise-std SIGMA" in err
    with pytest.raises(ValueError, match="--mode unknown is not available for Box actions"):
        score_approx(_args(policy=[str(sac_zip)], mode="unknown"))
    with pytest.raises(ValueError, match="--epsilon applies to Discrete actions"):
        score_approx(_args(policy=[str(sac_zip)], epsilon=0.1))
    assert main(["score", "--env", "CartPole-v1", "--policy", "uniform", "--noise-std", "0.1"]) == 2
    assert "--noise-std applies to deterministic agents" in capsys.readouterr().err
    csv = str(tmp_path / "rows.csv")
    assert main(["score", "--env", "Pendulum-v1", "--policy", "uniform", "--csv", csv]) == 2
    assert "--csv is not available with the approximate estimator" in capsys.readouterr().err


def test_noise_std_reaches_the_estimator(tmp_path, capsys):
    """``--noise-std`` smooths a deterministic agent: the score is of the smoothed policy (a
    clipped Gaussian, whose certificate is infinite)."""
    from imitation_meg.cli.approx import score_approx

    td3 = sb3.TD3("MlpPolicy", "Pendulum-v1", learning_starts=10, seed=0)
    td3.save(tmp_path / "td3.zip")
    args = _args(policy=[str(tmp_path / "td3.zip")], noise_std=0.2, json=str(tmp_path / "o.json"))
    assert score_approx(args) == 0
    out = capsys.readouterr().out
    assert "(noise std 0.2)" in out and "certificate         inf" in out
    result = json.loads((tmp_path / "o.json").read_text())["result"]
    assert "smoothed by N(0, 0.2^2)" in result["policy"] and result["certificate"] == "inf"


def test_approx_options_reach_the_box_estimator(tmp_path, capsys):
    from imitation_meg.cli import main

    out = tmp_path / "o.json"
    argv = ["score", "--env", "Pendulum-v1", "--policy", "uniform", "--horizon", "5"]
    opts = ["method=soft_q", "n_models=2", "n_data_steps=300", "n_eval_episodes=6"]
    opts += ["iterations=2", "steps_per_iteration=5", "refine=0", "grid_points=8"]
    assert (
        main([*argv, *(a for o in opts for a in ("--approx-option", o)), "--json", str(out)]) == 0
    )
    res = json.loads(out.read_text())["result"]
    assert len(res["models"]) == 2 and len(res["stages"]) == 1
    assert res["grid"] == "gauss-legendre, 8 points"
    capsys.readouterr()
    assert main([*argv, "--approx-option", "lrr=0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'lrr' is not a setting of this estimator" in err and "'steps_per_iteration'" in err
    assert main([*argv, "--approx-option", "n_models=0"]) == 2
    assert "n_models must be an integer >= 1, got 0" in capsys.readouterr().err


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


@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
def test_several_policies_share_one_curve_on_the_command_line(env, tmp_path, capsys):
    """Several policies of one environment, Box or Discrete actions: its curve once, then each
    policy from its episodes (the curve checks that it is scored in its own environment)."""
    import csv
    import warnings

    from imitation_meg.approx.evaluate import ApproxMEGWarning
    from imitation_meg.cli import main

    rows = tmp_path / "rows.csv"
    argv = ["score", "--env", env, "--policy", "uniform", "uniform", "--horizon", "10"]
    argv += ["--approx-option", "n_starts=4", "--approx-option", "n_eval_episodes=20"]
    with warnings.catch_warnings():  # a curve this small may be flagged; only the rows matter
        warnings.simplefilter("ignore", ApproxMEGWarning)
        assert main([*argv, "--csv", str(rows)]) == 0, capsys.readouterr().err
    table = list(csv.DictReader(rows.open()))
    assert [r["policy"] for r in table] == ["uniform", "uniform"]
    assert all(float(r["meg"]) == 0.0 for r in table)


def test_the_unknown_utility_bound_refuses_a_box(mdp):
    from imitation_meg.approx import meg_approx_unknown

    for utility in ("mlp", "observation"):
        with pytest.raises(ValueError, match=r"scores Discrete actions; .* acts in a Box"):
            meg_approx_unknown("uniform", lambda: ContinuousTabularEnv(mdp), utility=utility)
