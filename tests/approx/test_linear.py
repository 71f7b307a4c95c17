"""Linear soft Q-functions by backward induction (``meg_approx(..., method="linear")``)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg.approx import linear, meg_approx, meg_approx_unknown
from imitation_meg.approx.envs import TablePolicy, TabularGymEnv
from imitation_meg.approx.evaluate import ApproxMEGWarning
from imitation_meg.approx.linear import action_soft_mean, rounds
from imitation_meg.approx.options import ApproxOptions

th.set_num_threads(1)

#: First-round data per fit in these tests (the default's 30 000 would make them slow); the
#: rounds and their rule are the same.
FIRST = 1_500


@pytest.fixture(autouse=True)
def _small_rounds(monkeypatch):
    monkeypatch.setattr(linear, "FIRST_STEPS", FIRST)


def _case(seed: int, *, branching: int) -> tuple[im.TabularMDP, np.ndarray, th.Tensor]:
    """A random MDP (10 states, 3 actions, H = 6, a start among 4 states, the expected utility
    of each state and action as its reward), one-hot observations, a softmax policy."""
    base = im.envs.random_mdp(10, 3, 6, branching=branching, seed=seed)
    p0 = np.zeros(10)
    p0[:4] = 0.25
    mdp = im.TabularMDP(
        (base.next_state, base.prob), utility=base.reward_sa(), horizon=6, initial_state_dist=p0
    )
    logits = th.as_tensor(np.random.default_rng(seed).normal(size=(10, 3)) * 2)
    return mdp, np.eye(10, dtype=np.float32), th.softmax(logits, -1)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_actions=st.integers(2, 5),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
)
def test_soft_mean_is_the_scaled_log_mean_exp(seed, n_actions, scale):
    """``m_b(q) = (1/b) log((1/A) sum_a exp(b q_a))`` for every rationality row, the mean at
    ``b = 0``, within float32 rounding; and it lies between the smallest and largest value."""
    gen = np.random.default_rng(seed)
    q = gen.normal(size=(n_actions, 5, 7)) * scale
    b = np.concatenate([[0.0], gen.normal(size=4) * 3 / scale]).reshape(-1, 1)
    got = action_soft_mean([th.as_tensor(v, dtype=th.float32) for v in q], th.as_tensor(b).float())
    z = b[None] * q
    top = z.max(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = (np.log(np.exp(z - top).mean(0)) + top) / b
    want[0] = q[:, 0].mean(0)
    tol = 1e-5 * (1 + np.abs(q).max())
    np.testing.assert_allclose(got.double().numpy(), want, atol=tol)
    assert np.all(got.double().numpy() >= q.min(0) - tol)
    assert np.all(got.double().numpy() <= q.max(0) + tol)


def test_rounds_double_up_to_the_budget():
    assert rounds(30, 200) == [30, 60, 120, 200]
    assert rounds(30, 30) == [30]
    assert rounds(30, 10) == [10]


@pytest.mark.parametrize(("seed", "n_features"), [(0, 100), (1, 100), (0, 0)])
def test_one_hot_observations_give_the_exact_meg(seed, n_features):
    """One-hot observations make the linear model tabular (with or without random features:
    ``n_features=0`` leaves ``[1, x]``): with deterministic dynamics the backward induction is
    exact soft value iteration on the reached states, so the three fits, each on its own data,
    give the same value on the same episodes (up to the ridge), the estimate is the exact MEG up
    to those episodes' noise, and its interval holds it."""
    mdp, obs, table = _case(seed, branching=1)
    exact = im.meg(table, mdp).meg
    res = meg_approx(
        TablePolicy(table, obs),
        lambda: TabularGymEnv(mdp, obs),
        seed=3,
        method="linear",
        n_features=n_features,
        n_data_steps=12_000,
        n_eval_episodes=2_000,
    )
    assert res.method == "linear" and res.n_states == 0
    values = [m["meg"] for m in res.models]
    assert max(values) - min(values) < 1e-4
    assert res.meg == pytest.approx(exact, abs=0.03 * mdp.horizon * math.log(3))
    assert res.low <= exact <= res.high
    assert res.certificate >= res.meg
    assert len(res.models) == 3 and all(math.isfinite(m["residual_rms"]) for m in res.models)


def test_stochastic_case_is_covered_and_repeats_itself():
    """Stochastic dynamics: the interval holds the exact MEG; the same seed gives the same
    result, another seed another; the stages are the rounds of data."""
    mdp, obs, table = _case(4, branching=3)
    exact = im.meg(table, mdp).meg
    kw = {"method": "linear", "n_data_steps": 12_000, "n_eval_episodes": 1_000}
    pol, make = TablePolicy(table, obs), lambda: TabularGymEnv(mdp, obs)
    with warnings.catch_warnings():  # whether the rounds settle is not this test's question
        warnings.simplefilter("ignore", ApproxMEGWarning)
        a = meg_approx(pol, make, seed=5, **kw)
        b = meg_approx(pol, make, seed=5, **kw)
        c = meg_approx(pol, make, seed=6, **kw)
    assert a.low <= exact <= a.high
    assert (a.meg, a.low, a.high, a.stages) == (b.meg, b.low, b.high, b.stages)
    assert a.meg != c.meg
    assert 1 <= len(a.stages) <= len(rounds(FIRST, 12_000))
    assert a.stages[-1] == pytest.approx(a.meg) or a.meg in (0.0, a.certificate)


def test_the_fits_on_two_threads_give_the_one_thread_result_to_the_last_bit():
    """The fits run side by side on the caller's threads (one torch thread each), so the thread
    count changes the time only: the same estimate, interval, stages and residuals, and the
    caller's count afterwards."""
    mdp, obs, table = _case(5, branching=3)
    kw = {"method": "linear", "n_data_steps": 6_000, "n_eval_episodes": 200, "n_models": 3}
    out = {}
    try:
        for n in (1, 2):
            th.set_num_threads(n)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ApproxMEGWarning)
                r = meg_approx(TablePolicy(table, obs), lambda: TabularGymEnv(mdp, obs), **kw)
            assert th.get_num_threads() == n
            out[n] = (r.meg, r.low, r.high, r.stages, [m["residual_rms"] for m in r.models])
    finally:
        th.set_num_threads(1)
    assert out[1] == out[2]
    assert out[1][0] > 0.0


def test_a_budget_of_one_round_is_unsettled_and_says_so():
    """One round of data leaves nothing to compare: ``settled`` is False, with a warning that
    names the budget."""
    mdp, obs, table = _case(2, branching=3)
    with pytest.warns(ApproxMEGWarning, match="n_data_steps=1500"):
        res = meg_approx(
            TablePolicy(table, obs),
            lambda: TabularGymEnv(mdp, obs),
            method="linear",
            n_data_steps=FIRST,
            n_eval_episodes=50,
        )
    assert res.settled is False and len(res.stages) == 1


def test_uniform_policy_scores_zero_on_continuous_observations():
    """The uniform policy is the beta = 0 model: exactly 0 on CartPole, whatever the fits."""
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproxMEGWarning)
        res = meg_approx(
            uniform,
            "CartPole-v1",
            horizon=30,
            method="linear",
            n_data_steps=900,
            n_eval_episodes=20,
        )
    assert (res.meg, res.certificate) == (0.0, 0.0)
    assert res.method == "linear"


def test_settings_are_checked():
    with pytest.raises(ValueError, match="n_features"):
        ApproxOptions(n_features=-1)
    with pytest.raises(ValueError, match="method"):
        ApproxOptions(method="lsq")
    with pytest.raises(ValueError, match="method='linear' is not available"):
        meg_approx_unknown(lambda o: np.full((len(o), 2), 0.5), "CartPole-v1", method="linear")


def test_command_line_prints_the_rounds(tmp_path, capsys):
    """``imitation-meg score ... --approx-option method=linear`` scores with the linear method and
    prints its own lines (the rounds of data, not refits)."""
    import json

    from imitation_meg.cli import main

    out = tmp_path / "o.json"
    argv = ["score", "--env", "CartPole-v1", "--policy", "uniform", "--horizon", "10"]
    for opt in ("method=linear", "n_data_steps=3000", "n_eval_episodes=20"):
        argv += ["--approx-option", opt]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 linear soft Q-functions" in printed and "rounds of data" in printed
    assert "refits moved it" not in printed
    res = json.loads(out.read_text())["result"]
    assert res["method"] == "linear" and res["meg"] == 0.0 and len(res["stages"]) == 2


def test_without_replicates_the_rounds_run_to_the_budget():
    """``n_boot=0``: no sampling half-width, so nothing says the rounds settled: all of them
    run and ``settled`` is None (no warning)."""
    mdp, obs, table = _case(3, branching=1)
    res = meg_approx(
        TablePolicy(table, obs),
        lambda: TabularGymEnv(mdp, obs),
        method="linear",
        n_data_steps=6_000,
        n_eval_episodes=50,
        n_boot=0,
    )
    assert res.settled is None and len(res.stages) == len(rounds(FIRST, 6_000))


def test_a_scan_started_where_every_model_is_worse_than_uniform_scans_the_grid():
    """A later round starts its scan at the earlier round's best rationality; when every value
    of that window is below the uniform model's 0 (here a start 1e4 times the optimum, with its
    sign flipped), the scan falls back to the whole coarse grid and finds the same optimum as a
    scan from scratch."""
    from imitation_meg.approx import EnvSource, as_policy_fn, collect
    from imitation_meg.approx.core import collect_data, policy_behaviour

    mdp, obs, table = _case(4, branching=3)
    source = EnvSource(lambda: TabularGymEnv(mdp, obs))
    pol = as_policy_fn(TablePolicy(table, obs), n_actions=3)
    ev = collect(source, policy_behaviour(pol), 300, np.random.default_rng(0), scored=pol)
    models = [
        linear.LinearSoftQ(
            collect_data(source, pol, 3_000, np.random.default_rng(k), n_envs=16),
            3,
            source.horizon,
            n_features=20,
            bandwidth=1.0,
            ridge=1e-4,
            seed=k,
        )
        for k in range(2)
    ]
    q_ref = float(np.median([m.q_scale for m in models]))
    betas, mats = linear.scan(models, ev, q_ref)
    best = betas[linear._best(betas, mats)]
    assert best > 0
    far_b, far = linear.scan(models, ev, q_ref, around=-1e4 * best)
    assert far_b[linear._best(far_b, far)] == best
    assert far_b.size > betas.size  # the window, then the whole grid
