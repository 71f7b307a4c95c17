"""The approximate estimators: soft backup, environments, rollouts, policies, MEG against exact."""

from __future__ import annotations

import argparse
import json
import math
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg.approx import EnvSource, as_policy_fn, collect, meg_approx, soft_mean
from imitation_meg.approx.core import uniform_behaviour
from imitation_meg.approx.envs import (
    FROZENLAKE6_MAP,
    CoordinateObservation,
    OneHotObservation,
    TablePolicy,
    TabularGymEnv,
    stationary_epsilon_greedy,
    validation_case,
)
from imitation_meg.approx.evaluate import ApproxMEGWarning
from imitation_meg.approx.options import (
    DATA_STEPS,
    ApproxOptions,
    data_bytes,
    default_data_steps,
)
from imitation_meg.approx.soft_q import beta_features

th.set_num_threads(1)

# Small settings for the default run (seconds, not minutes).
FAST = {
    "n_data_steps": 2400,
    "n_eval_episodes": 150,
    "n_models": 2,
    "hidden": (64, 64),
    "iterations": 12,
    "steps_per_iteration": 60,
    "n_boot": 100,
    "method": "soft_q",  # these tests exercise the soft Q-fits (the empirical MDP: test_empirical)
}


# ------------------------------------------------------------------------------ soft backup
def test_soft_mean_limits_and_closed_form():
    y = th.tensor([[0.0, math.log(3.0)], [1.0, -2.0], [1.0, -2.0], [1.0, -2.0]])
    b = th.tensor([1.0, 0.0, math.inf, -math.inf])
    out = soft_mean(y, b)
    # (1/1) log((e^0 + e^log3) / 2) = log 2; mean; max; min
    assert out.tolist() == pytest.approx([math.log(2.0), -0.5, 1.0, -2.0], abs=1e-6)


def test_soft_mean_small_beta_has_no_cancellation():
    # mean 0, population variance 1/32, third central moment 1/256 (exact in binary)
    y = th.tensor([[0.25, -0.125, -0.125]], dtype=th.float32)
    b = 1e-3
    # cumulant expansion: m_b = mean + b var / 2 + b^2 k3 / 6 + O(b^3)
    expected = b / 2 / 32 + b**2 / 6 / 256
    # the naive (logsumexp(b y) - log 3) / b loses ~1e-4 to cancellation in float32
    assert float(soft_mean(y, th.tensor([b]))) == pytest.approx(expected, rel=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-50, 50), min_size=2, max_size=5),
    st.floats(-100, 100),
    st.floats(-100, 100),
)
def test_soft_mean_is_monotone_in_beta_and_bounded(vals, b1, b2):
    y = th.tensor([vals], dtype=th.float64)
    lo, hi = sorted((b1, b2))
    m_lo = float(soft_mean(y, th.tensor([lo], dtype=th.float64)))
    m_hi = float(soft_mean(y, th.tensor([hi], dtype=th.float64)))
    assert min(vals) - 1e-9 <= m_lo <= m_hi + 1e-9 <= max(vals) + 2e-9


def test_beta_features_are_bounded_monotone_and_saturate_at_infinity():
    b = th.tensor([-math.inf, -1e9, -1.0, 0.0, 1.0, 1e9, math.inf])
    f = beta_features(b)
    assert f.abs().max() <= 1.0
    assert th.all(f[1:] >= f[:-1])
    assert f[0].tolist() == [-1.0] * f.shape[1] and f[-1].tolist() == [1.0] * f.shape[1]
    assert f[3].abs().max() == 0.0


# ------------------------------------------------------------------------------ environments
def test_tabular_gym_env_follows_the_mdp():
    mdp = im.envs.random_mdp(5, 2, 3, seed=0)
    feats = np.arange(10, dtype=np.float32).reshape(5, 2)
    env = TabularGymEnv(mdp, feats)
    T = mdp.dense_transition().numpy()
    p0 = mdp.initial_state_dist.numpy()
    r = mdp.reward_sa().numpy()
    counts = np.zeros(5)
    nxt = np.zeros(5)
    for i in range(4000):
        obs, info = env.reset(seed=i)
        s = info["state"]
        counts[s] += 1
        assert np.array_equal(obs, feats[s])
        obs2, rew, term, trunc, _step_info = env.step(1)
        assert rew == pytest.approx(r[s, 1]) and not term and not trunc
        if s == int(np.argmax(p0)):
            nxt[int(obs2[0]) // 2] += 1
    assert np.abs(counts / 4000 - p0).max() < 0.03
    s_max = int(np.argmax(p0))
    assert np.abs(nxt / nxt.sum() - T[s_max, 1]).max() < 0.05
    env.reset(seed=0)
    flags = [env.step(0)[3] for _ in range(3)]
    assert flags == [False, False, True]  # truncated after H = 3 decisions


def test_observation_wrappers_for_frozenlake():
    onehot = OneHotObservation(gym.make("FrozenLake-v1"))
    obs, _ = onehot.reset(seed=0)
    assert obs.shape == (16,) and obs[0] == 1.0 and obs.sum() == 1.0
    coords = CoordinateObservation(gym.make("FrozenLake-v1"))
    m = coords.matrix()
    assert m.shape == (16, 2)
    assert m[5].tolist() == pytest.approx([1 / 3, 1 / 3])  # row 1, column 1 of the 4x4 grid
    assert m[15].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="Discrete"):
        OneHotObservation(gym.make("CartPole-v1"))


def test_table_policy_finds_states_by_observation():
    obs = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    table = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    pol = TablePolicy(table, obs)
    out = pol(np.array([[1.0, 0.0], [0.0, 0.0]]))
    assert out.tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_table_policy_states_in_blocks_are_the_nearest_rows(monkeypatch):
    """Blocks of rows (here 7 at a time) give each row its nearest state, the first at a tie."""
    import imitation_meg.approx.envs as envs_mod

    gen = np.random.default_rng(0)
    obs = gen.normal(size=(5, 3))
    pol = TablePolicy(np.full((5, 2), 0.5), obs)
    rows = np.concatenate([gen.normal(size=(40, 3)), obs[[4, 2]], (obs[[0]] + obs[[1]]) / 2])
    whole = ((rows[:, None] - obs[None]) ** 2).sum(-1).argmin(1)
    monkeypatch.setattr(envs_mod, "_DISTANCE_BLOCK", 7 * 5 * 3)
    got = pol.states(rows)
    assert got.tolist() == whole.tolist()
    assert got[40:42].tolist() == [4, 2] and got[42] == 0  # halfway between 0 and 1: the first
    assert len(set(got.tolist())) > 1


# ------------------------------------------------------------------------------ rollouts
def test_env_source_checks_spaces_and_horizon():
    pend = EnvSource("Pendulum-v1")  # a bounded box: its uniform density is the reference
    assert (
        pend.n_actions == 0
        and pend.actions.is_box
        and pend.actions.log_measure == pytest.approx(math.log(4.0))
    )

    class Unbounded(gym.Env):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,))

    with pytest.raises(ValueError, match="needs a bounded box"):
        EnvSource(Unbounded, horizon=3)

    class Multi(gym.Env):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.MultiBinary(2)

    with pytest.raises(TypeError, match="MultiBinary action space"):
        EnvSource(Multi, horizon=3)
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        EnvSource("CartPole-v1", horizon=0)
    src = EnvSource("CartPole-v1")
    assert src.horizon == 500 and src.n_actions == 2 and src.obs_dim == 4

    class NoLimit(gym.Env):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

    with pytest.raises(ValueError, match="pass horizon=H"):
        EnvSource(NoLimit)


def test_collect_respects_horizon_and_is_reproducible():
    src = EnvSource("CartPole-v1", horizon=15)
    a = collect(src, uniform_behaviour(2), 12, np.random.default_rng(3), n_envs=4)
    b = collect(src, uniform_behaviour(2), 12, np.random.default_rng(3), n_envs=4)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.a, b.a)
    assert a.lengths.max() <= 15 and a.n_steps == a.lengths.sum()
    ends = np.cumsum(a.lengths) - 1
    assert a.done[ends].all() and not a.done[np.setdiff1d(np.arange(a.n_steps), ends)].any()
    assert (a.t[ends] == a.lengths - 1).all()


# ------------------------------------------------------------------------------ policies
def test_policy_fn_checks_callables():
    bad = as_policy_fn(lambda obs: np.full((len(obs), 2), 0.7), n_actions=2)
    with pytest.raises(ValueError, match="not 1"):
        bad.probs(np.zeros((3, 4)))
    wrong = as_policy_fn(lambda obs: np.full((len(obs), 3), 1 / 3), n_actions=2)
    with pytest.raises(ValueError, match="shape"):
        wrong.probs(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="exposes no hidden layer"):
        wrong.features(np.zeros((3, 4)))
    with pytest.raises(TypeError, match="cannot read a policy"):
        as_policy_fn(42, n_actions=2)
    with pytest.raises(ValueError, match="epsilon= applies only to argmax policies"):
        as_policy_fn(lambda obs: obs, n_actions=2, epsilon=0.1)


@pytest.fixture(scope="module")
def cartpole_ppo():
    import stable_baselines3 as sb3

    model = sb3.PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=64,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )
    model.learn(64)
    return model


def test_sb3_policy_probabilities_and_features(cartpole_ppo, tmp_path):
    pol = as_policy_fn(cartpole_ppo, n_actions=2)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    p = pol.probs(obs)
    obs_t, _ = cartpole_ppo.policy.obs_to_tensor(obs)
    ref = cartpole_ppo.policy.get_distribution(obs_t).distribution.probs.detach().numpy()
    assert np.allclose(p, ref, atol=1e-6)
    assert pol.features(obs).shape == (5, 16)
    path = tmp_path / "ppo.zip"
    cartpole_ppo.save(path)
    loaded = as_policy_fn(str(path), n_actions=2, algo="ppo")
    assert np.allclose(loaded.probs(obs), p, atol=1e-6)
    # The algorithm is read from the zip; naming another one is a contradiction.
    assert np.allclose(as_policy_fn(str(path), n_actions=2).probs(obs), p, atol=1e-6)
    with pytest.raises(ValueError, match=r"was saved by PPO .* not DQN"):
        as_policy_fn(str(path), n_actions=2, algo="dqn")
    with pytest.raises(ValueError, match="actions"):
        as_policy_fn(cartpole_ppo, n_actions=3)


def test_dqn_needs_epsilon():
    import stable_baselines3 as sb3

    model = sb3.DQN("MlpPolicy", "CartPole-v1", seed=0, device="cpu", learning_starts=10)
    with pytest.raises(ValueError, match="pass epsilon="):
        as_policy_fn(model, n_actions=2)
    pol = as_policy_fn(model, n_actions=2, epsilon=0.2)
    p = pol.probs(np.zeros((3, 4), dtype=np.float32))
    assert np.allclose(np.sort(p, axis=1), [[0.1, 0.9]] * 3)


# ------------------------------------------------------------------------------ MEG
def test_uniform_policy_scores_exactly_zero():
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    res = meg_approx(uniform, "CartPole-v1", horizon=12, seed=1, **FAST)
    # every model's L(beta) <= 0 with equality at beta = 0, for any fit
    assert res.meg == 0.0 and res.beta == 0.0
    assert res.first_stage == 0.0 and res.refine_shift == 0.0  # no refit at beta = 0
    assert res.certificate == pytest.approx(0.0, abs=1e-12)
    assert res.length_bound == pytest.approx(res.mean_length * math.log(2))
    assert res.upper_bound == pytest.approx(12 * math.log(2)) and res.normalized == 0.0


def test_bounds_mean_what_they_mean_on_exact_results():
    """upper_bound is H log|A| on both kinds of result; E[T] log|A| has its own name."""
    case = validation_case("cliffworld_xy", horizon=9)
    table = stationary_epsilon_greedy(case.mdp, 0.3)
    exact = im.meg(table, case.mdp)
    res = meg_approx(TablePolicy(table, case.observations), case.make, seed=0, **FAST)
    assert res.upper_bound == pytest.approx(exact.upper_bound, rel=1e-12)
    assert res.normalized == pytest.approx(res.meg / exact.upper_bound, rel=1e-12)
    assert res.length_bound <= res.upper_bound + 1e-12
    assert res.length_normalized == pytest.approx(res.meg / res.length_bound, rel=1e-12)


def test_one_options_record_for_both_estimators():
    """Both estimators take their settings from ApproxOptions only (no setting has a second
    home in either signature); a record, keywords, or both (keywords win) give one result."""
    import dataclasses
    import inspect

    from imitation_meg.approx import meg_approx_unknown

    fields = {f.name for f in dataclasses.fields(ApproxOptions)}
    for fn in (meg_approx, meg_approx_unknown):
        params = set(inspect.signature(fn).parameters)
        assert "options" in params and not fields & params, fn.__name__
    lean = lambda obs: np.tile([0.7, 0.3], (len(obs), 1))  # noqa: E731
    small = {"n_data_steps": 300, "n_eval_episodes": 10, "n_models": 2, "iterations": 2}
    small.update(steps_per_iteration=5, refine=1, n_boot=10, hidden=(8,), method="soft_q")
    with warnings.catch_warnings():  # a fit this short may be flagged; only equality matters
        warnings.simplefilter("ignore")
        a = meg_approx(lean, "CartPole-v1", horizon=6, seed=2, **small)
        b = meg_approx(lean, "CartPole-v1", horizon=6, options=ApproxOptions(seed=2, **small))
        c = meg_approx(
            lean, "CartPole-v1", horizon=6, options=ApproxOptions(**small, seed=9), seed=2
        )
        u1 = meg_approx_unknown(lean, "CartPole-v1", horizon=6, ascent_steps=2,
                                episodes_per_step=3, seed=2, **small)  # fmt: skip
        u2 = meg_approx_unknown(lean, "CartPole-v1", horizon=6, ascent_steps=2,
                                episodes_per_step=3, options=ApproxOptions(seed=2, **small))  # fmt: skip
    assert (a.meg, a.low, a.high, a.stages) == (b.meg, b.low, b.high, b.stages)
    assert (a.meg, a.low, a.high, a.stages) == (c.meg, c.low, c.high, c.stages)
    assert (u1.meg, u1.low, u1.trace, u1.candidates) == (u2.meg, u2.low, u2.trace, u2.candidates)
    assert len(u1.result.stages) == 2  # refine=1 governs the bound's final fits too
    import types

    cfg = types.SimpleNamespace(n_models=2, refine=1, seeds=(0, 1), horizon=9, lr=1e-3)
    made = ApproxOptions.from_fields(cfg, seed=4)
    assert made == ApproxOptions(n_models=2, refine=1, lr=1e-3, seed=4)
    with pytest.raises(ValueError, match="n_models must be an integer >= 1"):
        ApproxOptions.from_fields(types.SimpleNamespace(n_models=0))
    assert ApproxOptions(hidden=[8, 4], refine=True).hidden == (8, 4)
    assert ApproxOptions(refine=True).refine == 1 and ApproxOptions(refine=False).refine == 0
    with pytest.raises(TypeError, match=r"unknown setting\(s\) \['n_model'\].*'n_models'"):
        meg_approx(lean, "CartPole-v1", n_model=2)
    with pytest.raises(TypeError, match="options must be an ApproxOptions"):
        meg_approx(lean, "CartPole-v1", options={"n_models": 2})
    with pytest.raises(ValueError, match="hidden must be a sequence of positive layer sizes"):
        ApproxOptions(hidden=(0,))
    with pytest.raises(TypeError, match="progress must be True or False"):
        ApproxOptions(progress="yes")
    for bad in (0, -0.1, True, "0.05"):
        with pytest.raises(ValueError, match="utility_lr must be a positive finite number"):
            meg_approx_unknown(lean, "CartPole-v1", utility_lr=bad)
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        meg_approx_unknown(lean, "CartPole-v1", lr=0)


def test_bad_settings_are_refused():
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    with pytest.raises(ValueError, match="n_models must be an integer >= 1"):
        meg_approx(uniform, "CartPole-v1", n_models=0)
    with pytest.raises(ValueError, match="confidence"):
        meg_approx(uniform, "CartPole-v1", confidence=1.5)
    with pytest.raises(TypeError, match="seed"):
        meg_approx(uniform, "CartPole-v1", seed=1.5)
    with pytest.raises(ValueError, match="refine must be True, False or an integer >= 0"):
        meg_approx(uniform, "CartPole-v1", refine=-1)
    with pytest.raises(ValueError, match=r"average must be .* got 2"):
        meg_approx(uniform, "CartPole-v1", average=2)
    for bad in (0.0, -1e-3, float("nan"), float("inf"), True, "1e-3"):
        with pytest.raises(ValueError, match="lr must be a positive finite number"):
            meg_approx(uniform, "CartPole-v1", lr=bad)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="last_steps must be an integer >= 0"):
            meg_approx(uniform, "CartPole-v1", last_steps=bad)


class _Tiled(gym.ObservationWrapper):
    """CartPole with each observation repeated ``k`` times (a wide observation)."""

    def __init__(self, env: gym.Env, k: int) -> None:
        super().__init__(env)
        self.k = k
        box = env.observation_space
        self.observation_space = gym.spaces.Box(
            np.tile(box.low, k), np.tile(box.high, k), dtype=np.float32
        )

    def observation(self, obs):
        return np.tile(obs, self.k).astype(np.float32)


def test_default_data_shrinks_to_the_memory_budget_with_a_warning():
    # CartPole's 4 floats keep the full default; an 84x84x3 image does not fit in 4 GiB
    assert default_data_steps(4, 3, 1, 4.0) == DATA_STEPS
    assert default_data_steps(84 * 84 * 3, 3, 2, math.inf) == DATA_STEPS  # no cap
    n = default_data_steps(84 * 84 * 3, 3, 1, 4.0)
    assert data_bytes(n, 84 * 84 * 3, 3, 1) <= 4 * 2**30 < data_bytes(n + 1, 84 * 84 * 3, 3, 1)
    # a real run: 400-entry observations, 2 models, no refit -> 6400 bytes per step
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    kw = {k: v for k, v in FAST.items() if k != "n_data_steps"}
    kw.update(iterations=2, steps_per_iteration=5, refine=False, n_eval_episodes=10)
    gib = 600 * 6400 / 2**30
    with pytest.warns(im.approx.ApproxMEGWarning, match="so 600 are used"):
        res = meg_approx(
            uniform,
            lambda: _Tiled(gym.make("CartPole-v1"), 100),
            horizon=12,
            data_memory_gib=gib,
            **kw,
        )
    eval_steps = res.mean_length * 10
    # about 600 data steps per model (whole episodes, 16 copies in lockstep may overshoot)
    assert 2 * 600 <= res.n_env_steps - eval_steps <= 2 * (600 + 3 * 16 * 12)
    with pytest.raises(ValueError, match="data_memory_gib must be a positive number"):
        meg_approx(uniform, "CartPole-v1", data_memory_gib=0)


def test_unknown_utility_default_data_obeys_the_memory_budget():
    from imitation_meg.approx import meg_approx_unknown

    # 400-entry observations, 3 models, 3 refits: (3 x 6/3 fits + 2 ascent sets) x 8 x 400 =
    # 25 600 bytes per data step, so this budget holds 500 of the default 180 000
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    kw = {k: v for k, v in FAST.items() if k not in ("n_data_steps", "n_models")}
    kw.update(iterations=2, steps_per_iteration=5, n_eval_episodes=10, n_models=3)
    wide = lambda: _Tiled(gym.make("CartPole-v1"), 100)  # noqa: E731
    with pytest.warns(im.approx.ApproxMEGWarning, match="default 180000 data steps .* so 500 are"):
        res = meg_approx_unknown(
            uniform,
            wide,
            horizon=12,
            ascent_steps=1,
            episodes_per_step=2,
            data_memory_gib=500 * 25_600 / 2**30,
            **kw,
        )
    assert 0.0 <= res.meg <= res.result.certificate + 1e-12
    with pytest.raises(ValueError, match="data_memory_gib must be a positive number"):
        meg_approx_unknown(uniform, "CartPole-v1", data_memory_gib=-1.0)


@pytest.fixture(scope="module")
def small_case():
    """A random MDP (6 states, 3 actions, H = 2, deterministic moves, state-action utility)
    seen through 3 random features per state: small enough to fit well in seconds (the larger,
    stochastic cases are the validation study's)."""
    mdp = im.envs.random_mdp(6, 3, 2, branching=1, utility="state_action", seed=3)
    feats = np.random.default_rng(7).normal(size=(6, 3)).astype(np.float32)
    return mdp, feats


SMALL = {
    "n_data_steps": 1200,
    "n_eval_episodes": 200,
    "n_models": 2,
    "hidden": (32, 32),
    "iterations": 6,
    "steps_per_iteration": 100,
    "n_boot": 100,
}


def test_small_case_matches_exact_meg(small_case):
    mdp, feats = small_case
    table = stationary_epsilon_greedy(mdp, 0.1)
    exact = im.meg(table, mdp).meg
    assert exact > 0.5  # a goal-directed policy, far from the trivial 0
    res = meg_approx(TablePolicy(table, feats), lambda: TabularGymEnv(mdp, feats), seed=0, **SMALL)
    bound = mdp.horizon * math.log(3)
    assert abs(res.meg - exact) <= 0.05 * bound
    assert res.low <= exact <= res.high
    assert res.meg <= res.certificate + 1e-12
    assert res.n_env_steps > 0 and len(res.models) == 2


def test_interval_adds_the_refits_move_as_an_allowance(small_case):
    from scipy.stats import norm
    from scipy.stats import t as student_t

    mdp, feats = small_case
    pol = TablePolicy(stationary_epsilon_greedy(mdp, 0.3), feats)
    make = lambda: TabularGymEnv(mdp, feats)  # noqa: E731
    kw = dict(FAST, iterations=3, n_boot=50)
    res = meg_approx(pol, make, seed=2, refine=1, **kw)
    assert math.isfinite(res.first_stage) and res.first_stage >= 0.0
    assert res.refine_shift == pytest.approx(res.meg - res.first_stage, abs=1e-12)
    assert res.refine_shift != 0.0
    assert res.allowance == pytest.approx(abs(res.refine_shift), abs=1e-12)  # one earlier stage
    sampling = math.hypot(
        norm.ppf(0.975) * res.bootstrap_se, student_t.ppf(0.975, 1) * res.model_se
    )
    assert 0.0 < res.low < res.high < res.certificate  # no clipping in this case
    assert (res.high - res.low) / 2 == pytest.approx(sampling + res.allowance, rel=1e-9)
    assert res.stages == pytest.approx((res.first_stage, res.meg), abs=1e-12)
    # a second refit continues the first one (same draws); the allowance is the largest move
    # from either earlier stage, not only from the first
    twice = meg_approx(pol, make, seed=2, refine=2, **kw)
    assert len(twice.stages) == 3 and twice.stages[:2] == pytest.approx(res.stages, abs=1e-12)
    assert twice.meg == pytest.approx(twice.stages[2], abs=1e-12) and twice.meg != res.meg
    assert twice.refine_shift == pytest.approx(twice.meg - res.first_stage, abs=1e-12)
    moves = [abs(twice.meg - m) for m in twice.stages[:2]]
    assert moves[0] != pytest.approx(moves[1], abs=1e-9)  # the two rules differ on this run
    assert twice.allowance == pytest.approx(max(moves), abs=1e-12)
    sampling2 = math.hypot(
        norm.ppf(0.975) * twice.bootstrap_se, student_t.ppf(0.975, 1) * twice.model_se
    )
    assert 0.0 < twice.low < twice.high < twice.certificate
    assert (twice.high - twice.low) / 2 == pytest.approx(sampling2 + max(moves), rel=1e-9)
    plain = meg_approx(pol, make, seed=2, refine=False, **kw)
    assert math.isnan(plain.first_stage) and plain.refine_shift == 0.0
    assert plain.stages == pytest.approx((plain.meg,), abs=1e-12)
    sampling = math.hypot(
        norm.ppf(0.975) * plain.bootstrap_se, student_t.ppf(0.975, 1) * plain.model_se
    )
    assert plain.low > 0.0  # the lower end is not clipped (the upper one is, at the certificate)
    assert plain.meg - plain.low == pytest.approx(sampling, rel=1e-9)
    # each stage of the two-refit run reports what a run stopped there reports (same fits,
    # same bootstrap draws), so one run gives the answer of every number of refits
    by_refits = [(r.meg, r.low, r.high) for r in (plain, res, twice)]
    assert len(twice.stage_intervals) == 3
    for got, want in zip(twice.stage_intervals, by_refits, strict=True):
        assert got == pytest.approx(want, abs=1e-12)
    # every stage's curves are kept: their per-fit maxima (at least 0) average to the stage
    assert len(twice.stage_curves) == 3
    for (betas, curves), value in zip(twice.stage_curves, twice.stages, strict=True):
        assert curves.shape == (2, betas.size) and 0.0 in betas
        assert np.maximum(curves.max(1), 0.0).mean() == pytest.approx(value, abs=1e-12)
    assert np.array_equal(twice.stage_curves[-1][0], np.sort(twice.stage_curves[-1][0]))
    # settled: the last refit's move against the larger of its sampling half-width and 1% of
    # H log|A|; None without refits
    assert plain.settled is None
    for r, half in ((res, sampling), (twice, sampling2)):
        move = abs(r.stages[-1] - r.stages[-2])
        assert r.settled is (move <= max(half, 0.01 * r.upper_bound))


def test_unsettled_stages_are_flagged_and_warned():
    """The rule on given numbers (one stage: nothing to compare; the larger of the sampling
    half-width and 1% of the scale decides), and a real run whose refits still move: the flag
    and the warning come together, in the result and on the command line's table."""
    from imitation_meg.approx.evaluate import stages_settled, warn_unsettled

    assert stages_settled([1.0], 0.1, 10.0) is None
    assert stages_settled([1.0, 1.5], 0.1, 10.0) is False  # 0.5 > max(0.1, 0.1)
    assert stages_settled([1.0, 1.5, 1.55], 0.1, 10.0) is True  # only the last move counts
    assert stages_settled([1.0, 1.15], 0.1, 20.0) is True  # 0.15 <= 1% of 20
    assert stages_settled([1.0, 1.15], math.nan, 10.0) is False  # no sampling part: floor only
    with pytest.warns(ApproxMEGWarning, match=r"not settled.*\+0\.5.*refine=2"):
        warn_unsettled([1.0, 1.5], 0.1, 10.0, "H log|A|")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_unsettled([1.0, 1.05], 0.1, 10.0, "H log|A|")  # settled: silent
        warn_unsettled([1.0], 0.1, 10.0, "H log|A|")


def test_a_run_still_moving_says_so(small_case):
    mdp, feats = small_case
    pol = TablePolicy(stationary_epsilon_greedy(mdp, 0.3), feats)
    # one fit of 3 iterations x 5 steps, far from converged, scored on 1 000 episodes: the refit
    # moves the estimate by about 0.05 nats, twice the tolerance (1% of H log|A|, 0.022, above
    # the bootstrap's half-width of about 0.012)
    kw = dict(FAST, iterations=3, steps_per_iteration=5, n_boot=50, refine=1)
    kw.update(n_models=1, n_eval_episodes=1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = meg_approx(pol, lambda: TabularGymEnv(mdp, feats), seed=2, **kw)
    said = [w for w in caught if "not settled" in str(w.message)]
    assert res.settled is False and len(said) == 1
    assert issubclass(said[0].category, ApproxMEGWarning)
    assert "the last refit moved the estimate" in str(said[0].message)
    assert abs(res.stages[1] - res.stages[0]) > 0.01 * res.upper_bound


def test_allowance_is_the_largest_move_from_any_earlier_stage():
    """The stages' estimates 1.0, 1.5, 1.05: the last is close to the first, but the refits
    moved it by 0.45 on the way, and that is the allowance (the fits agree and the episodes are
    identical, so the sampling part is 0 and the half-width is the allowance alone)."""
    from imitation_meg.approx.evaluate import stage_interval

    mats = {name: np.full((4, 3), 1.05) for name in ("0", "1", "all")}
    seq = np.random.SeedSequence(0)
    kw = {"n_models": 2, "certificate": 10.0, "n_boot": 20, "confidence": 0.95, "s_boot": seq}
    last = stage_interval(mats, earlier=[1.0, 1.5], **kw)
    assert last.mean == pytest.approx(1.05)
    assert (last.se_models, last.se_boot) == pytest.approx((0.0, 0.0), abs=1e-12)
    assert last.allowance == pytest.approx(0.45) and last.shift == pytest.approx(0.05)
    assert (last.low, last.high) == pytest.approx((0.6, 1.5))
    # the first stage has no earlier one; clipping at 0 and at the certificate still applies
    assert stage_interval(mats, earlier=[], **kw).allowance == 0.0
    wide = stage_interval(mats, earlier=[3.0], **{**kw, "certificate": 2.5})
    assert (wide.low, wide.high) == pytest.approx((0.0, 2.5))


def test_same_seed_same_result(small_case):
    mdp, feats = small_case
    pol = TablePolicy(stationary_epsilon_greedy(mdp, 0.3), feats)
    kw = dict(FAST, iterations=3, n_boot=20)
    a = meg_approx(pol, lambda: TabularGymEnv(mdp, feats), seed=5, **kw)
    b = meg_approx(pol, lambda: TabularGymEnv(mdp, feats), seed=5, **kw)
    c = meg_approx(pol, lambda: TabularGymEnv(mdp, feats), seed=6, **kw)
    assert (a.meg, a.low, a.high, a.beta) == (b.meg, b.low, b.high, b.beta)
    assert np.array_equal(a.replicates, b.replicates)
    assert a.meg != c.meg
    # the fit settings: the defaults are the validated ones (bit for bit); others fit other
    # networks
    from imitation_meg.approx.options import AVERAGE, LAST_STEPS, LR

    assert (LR, AVERAGE, LAST_STEPS) == (3e-3, 0.5, 3)
    d = meg_approx(
        pol,
        lambda: TabularGymEnv(mdp, feats),
        seed=5,
        **dict(kw, lr=3e-3, average=0.5, last_steps=3),
    )
    assert (d.meg, d.low, d.high, d.stages) == (a.meg, a.low, a.high, a.stages)
    for other in ({"lr": 1e-3}, {"average": 0.0}, {"last_steps": 0}, {"last_steps": 2}):
        e = meg_approx(pol, lambda: TabularGymEnv(mdp, feats), seed=5, **kw, **other)
        assert e.stages[0] != a.stages[0], other


def test_time_features_mark_the_last_decisions():
    """``last_steps`` indicators: column ``d`` is 1 exactly at decision ``t = H - 1 - d``."""
    from imitation_meg.approx.soft_q_features import TIME_SCALES, time_features

    H = 6
    t = th.arange(H)
    plain = time_features(t, H)
    marked = time_features(t, H, last_steps=3)
    n_smooth = 1 + len(TIME_SCALES)
    assert plain.shape == (H, n_smooth) and marked.shape == (H, n_smooth + 3)
    assert th.equal(marked[:, :n_smooth], plain)
    ind = marked[:, n_smooth:]
    for d in range(3):
        assert ind[:, d].tolist() == [1.0 if k == H - 1 - d else 0.0 for k in range(H)]
    # a horizon shorter than last_steps: the indicators of decisions that do not exist stay 0
    short = time_features(th.arange(2), 2, last_steps=3)[:, n_smooth:]
    assert short.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_validation_case_exact_values_are_consistent():
    case = validation_case("random_features", horizon=5)
    assert case.observations.shape == (40, 6)
    table = stationary_epsilon_greedy(case.mdp, 0.0)
    assert th.allclose(table.sum(-1), th.ones(40, dtype=table.dtype))
    with pytest.raises(ValueError, match="unknown validation case"):
        validation_case("nope", horizon=3)


@pytest.mark.parametrize(
    ("name", "horizon", "shape", "starts"),
    [
        ("taxi_onehot", 20, (500, 6, 19), 300),
        ("cliffwalking_coords", 20, (48, 4, 2), 1),
        ("seals_random_obs", 12, (30, 5, 5), 3),
        ("branching_onehot", 8, (16, 3, 16), 1),
    ],
)
def test_held_out_cases_are_the_environments_they_name(name, horizon, shape, starts):
    """Each held-out case's MDP has the environment's size, horizon and starts, its
    observations tell every state apart, and an episode of its environment emits the
    observation of the state the MDP's table gives for it."""
    from imitation_meg.approx.envs import CASES, HELD_OUT_CASES

    assert name in HELD_OUT_CASES and name not in CASES
    case = validation_case(name, horizon=horizon)
    S, A, F = shape
    assert (case.mdp.n_states, case.mdp.n_actions, case.mdp.horizon) == (S, A, horizon)
    assert case.observations.shape == (S, F)
    assert len(np.unique(case.observations, axis=0)) == S
    assert int((case.mdp.initial_state_dist > 0).sum()) == starts
    env = case.make()
    assert env.action_space.n == A
    obs, _ = env.reset(seed=1)
    table = TablePolicy(th.full((S, A), 1.0 / A), case.observations)
    s = int(table.states(obs[None])[0])
    assert np.array_equal(case.observations[s], obs)
    assert case.mdp.initial_state_dist[s] > 0
    rng = np.random.default_rng(0)
    for _ in range(horizon):
        a = int(rng.integers(A))
        obs, _, terminated, truncated, _ = env.step(a)
        nxt = int(table.states(obs[None])[0])
        assert np.array_equal(case.observations[nxt], obs)
        # the step the environment took is one the MDP allows from s under a
        succ = case.mdp.next_state[s, a][case.mdp.prob[s, a] > 0]
        assert nxt in succ.tolist() or terminated, (s, a, nxt)
        s = nxt
        if terminated or truncated:
            break


@pytest.mark.parametrize(
    ("name", "horizon", "shape", "starts"),
    [
        ("cliffwalking_jitter", 25, (48, 4, 2), 1),
        ("taxi_jitter", 25, (500, 6, 4), 300),
        ("frozenlake6_jitter", 30, (36, 4, 2), 1),
        ("randomtrans_jitter", 15, (60, 3, 3), 2),
    ],
)
def test_jittered_cases_are_tabular_underneath_and_continuous_on_top(name, horizon, shape, starts):
    """Each jittered case: the MDP has the environment's size, horizon and starts; every
    variant of a state's observation is nearer to that state's centre than to any other (so
    epsilon-greedy tables act on them); an episode emits, at each step, a variant of the state
    the MDP's table allows; and 1 000 uniform steps see more distinct observations than the
    empirical MDP's probe accepts (the route of continuous observations)."""
    from imitation_meg.approx.empirical import PROBE_NEW
    from imitation_meg.approx.envs import (
        CASES,
        CONTINUOUS_HELD_OUT_CASES,
        EMPIRICAL_HELD_OUT_CASES,
        HELD_OUT_CASES,
        JITTER_VARIANTS,
    )

    assert name in CONTINUOUS_HELD_OUT_CASES
    assert name not in CASES + HELD_OUT_CASES + EMPIRICAL_HELD_OUT_CASES
    case = validation_case(name, horizon=horizon)
    S, A, F = shape
    assert (case.mdp.n_states, case.mdp.n_actions, case.mdp.horizon) == (S, A, horizon)
    assert case.observations.shape == (S, F) and case.variants.shape == (S, JITTER_VARIANTS, F)
    assert int((case.mdp.initial_state_dist > 0).sum()) == starts
    centres = TablePolicy(th.full((S, A), 1.0 / A), case.observations)
    for s in range(S):  # a sample of each state's variants (all of them: 40 s on Taxi)
        assert (centres.states(case.variants[s, :: 64 if S > 100 else 1]) == s).all(), s

    def state_of(obs: np.ndarray) -> int:
        s = int(centres.states(obs[None])[0])
        assert (case.variants[s] == obs).all(1).any()  # one of s's variants, exactly
        return s

    env = case.make()
    obs, _ = env.reset(seed=1)
    s = state_of(obs)
    assert case.mdp.initial_state_dist[s] > 0
    rng = np.random.default_rng(0)
    seen = [obs.tobytes()]
    while len(seen) < 1_000:
        a = int(rng.integers(A))
        obs, _, terminated, truncated, _ = env.step(a)
        nxt = state_of(obs)
        succ = case.mdp.next_state[s, a][case.mdp.prob[s, a] > 0]
        assert nxt in succ.tolist() or terminated, (s, a, nxt)
        s = nxt
        seen.append(obs.tobytes())
        if terminated or truncated:
            obs, _ = env.reset(seed=len(seen))
            s = state_of(obs)
            seen.append(obs.tobytes())
    assert len(set(seen)) > PROBE_NEW * len(seen)


def test_jittered_observation_draws_each_variant_alike_and_keeps_the_dynamics():
    """The state-level policy of an observation policy is the mean over the state's variants
    (the wrapper draws them uniformly: a 50 000-draw mean agrees within its sampling error);
    the wrapper draws from its own generator, so the plain environment's states, step for step,
    are those it has unwrapped; the same seed repeats the observations."""
    from imitation_meg.approx.envs import state_policy

    case = validation_case("frozenlake6_jitter", horizon=30)
    w = np.array([[3.0, -1.0, 0.5, 0.0], [-2.0, 4.0, 0.0, 1.0]])

    def probs(obs: np.ndarray) -> np.ndarray:
        z = np.asarray(obs, dtype=np.float64) @ w
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    table = state_policy(case, probs)
    assert table.shape == (36, 4) and np.allclose(table.sum(1), 1.0)
    env = case.make()
    env.reset(seed=3)
    draws = np.stack([env.observation(7) for _ in range(50_000)])
    mc = probs(draws)
    se = mc.std(0) / math.sqrt(len(mc))
    assert (np.abs(mc.mean(0) - table[7]) < 5 * se + 1e-12).all()
    assert not np.allclose(table[7], probs(case.observations[7:8])[0])  # the mean, not the centre

    def states(wrapped: bool, seed: int) -> tuple[list[int], list[bytes]]:
        e = case.make() if wrapped else gym.make("FrozenLake-v1", desc=list(FROZENLAKE6_MAP))
        o, _ = e.reset(seed=seed)
        out, obs = [], [np.asarray(o).tobytes()]
        for a in [1, 2, 2, 1, 0, 3, 2, 1, 1, 2] * 3:
            o, _, term, trunc, _ = e.step(a)
            out.append(int(e.unwrapped.s))
            obs.append(np.asarray(o).tobytes())
            if term or trunc:
                break
        return out, obs

    assert states(True, 11)[0] == states(False, 11)[0]
    assert states(True, 11) == states(True, 11)
    assert states(True, 11)[1] != states(True, 12)[1]


@pytest.mark.parametrize("name", ["cliffworld_xy", "random_features"])
def test_a_tuning_case_jittered_is_the_same_case_seen_through_variants(name):
    """``<case>_jitter``: the plain case's MDP and observations (as centres); with the same
    seed and actions, each observation is a variant of the plain environment's (decoded by the
    nearest centre), step for step."""
    from imitation_meg.approx.envs import CONTINUOUS_CASES

    assert f"{name}_jitter" in CONTINUOUS_CASES
    plain = validation_case(name, horizon=10)
    case = validation_case(f"{name}_jitter", horizon=10)
    assert np.array_equal(case.observations, plain.observations)
    assert th.equal(case.mdp.next_state, plain.mdp.next_state)
    S, A = plain.mdp.n_states, plain.mdp.n_actions
    centres = TablePolicy(th.full((S, A), 1.0 / A), case.observations)
    for s in range(S):
        assert (centres.states(case.variants[s]) == s).all()
    a_env, b_env = plain.make(), case.make()
    a, _ = a_env.reset(seed=4)
    b, _ = b_env.reset(seed=4)
    rng = np.random.default_rng(1)
    for _ in range(10):
        s = int(centres.states(np.asarray(a)[None])[0])
        assert np.array_equal(plain.observations[s], a)
        assert (case.variants[s] == b).all(1).any() and not np.array_equal(a, b)
        act = int(rng.integers(A))
        a, *_ = a_env.step(act)
        b, *_ = b_env.step(act)


def test_jitter_variants_refuse_bad_shapes_and_spreads():
    from imitation_meg.approx.envs import JitteredObservation, jitter_variants

    obs = np.zeros((3, 2))
    v = jitter_variants(obs, [0.1, 0.2], n_variants=5, seed=0)
    assert v.shape == (3, 5, 2) and (np.abs(v[..., 1]) <= 0.2).all() and np.abs(v).max() > 0
    for kwargs, match in [
        ({"observations": np.zeros(3)}, r"must be \(S, F\)"),
        ({"spread": [0.1, 0.2, 0.3]}, "one per entry"),
        ({"spread": -0.1}, "spread must be"),
        ({"n_variants": 0}, "n_variants must be"),
    ]:
        args = {"observations": obs, "spread": 0.1, "n_variants": 5, **kwargs}
        with pytest.raises(ValueError, match=match):
            jitter_variants(args.pop("observations"), args.pop("spread"), seed=0, **args)
    with pytest.raises(ValueError, match=r"\(S, K, F\)"):
        JitteredObservation(gym.make("FrozenLake-v1"), np.zeros((16, 2)))


def test_taxi_observation_decodes_the_state():
    from imitation_meg.approx.envs import TaxiObservation
    from imitation_meg.envs import registered_id

    env = TaxiObservation(gym.make(registered_id("Taxi")))
    m = env.matrix()
    assert m.shape == (500, 19) and (m.sum(1) == 4).all()
    row, col, passenger, dest = env.unwrapped.decode(123)
    assert np.flatnonzero(m[123]).tolist() == [row, 5 + col, 10 + passenger, 15 + dest]
    assert np.array_equal(env.observation(123), m[123])
    with pytest.raises(TypeError, match="needs gymnasium's Taxi"):
        TaxiObservation(gym.make("FrozenLake-v1"))


def test_truncated_episodes_warn():
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    env = lambda: gym.make("CartPole-v1", max_episode_steps=5)  # noqa: E731
    with pytest.warns(im.approx.ApproxMEGWarning) as caught:
        meg_approx(uniform, env, horizon=8, **dict(FAST, iterations=1, n_eval_episodes=4))
    messages = [str(w.message) for w in caught]
    assert any("cut by the environment" in m for m in messages)
    # +1 on every step and no episode terminating within 5 steps: no action is better
    assert any("same reward on every step" in m for m in messages)


# ------------------------------------------------------------------------------ layers, CLI
def test_core_does_not_import_approx():
    """Below the estimators nothing imports them; the user-facing entry points above them do
    (the command line, and the training callback, which scores non-tabular environments
    through their soft-value curve)."""
    from tests.test_layers import import_graph

    graph = import_graph()
    above = ("imitation_meg", "imitation_meg.cli", "imitation_meg.callbacks")
    for mod, targets in graph.items():
        if mod.startswith(("imitation_meg.approx", "imitation_meg.cli.")) or mod in above:
            continue
        assert not any(t.startswith("imitation_meg.approx") for t in targets), mod


def test_score_function_prints_an_estimate(capsys, tmp_path):
    from imitation_meg.cli.approx import is_tabular, score_approx

    assert is_tabular("FrozenLake-v1") and not is_tabular("CartPole-v1")
    args = argparse.Namespace(
        env="CartPole-v1",
        policy="uniform",
        algo=None,
        epsilon=None,
        horizon=40,
        seed=0,
        mode="known",
        json=str(tmp_path / "out.json"),
        signed=False,
        rollouts=None,
        target=None,
        vec_normalize=None,
        approx_models=2,
        approx_episodes=8,
        approx_iterations=2,
        approx_steps=20,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert score_approx(args) == 0
    out = capsys.readouterr().out
    assert "MEG estimate" in out and "interval" in out and "wall time" in out
    assert (tmp_path / "out.json").stat().st_size > 0
    args.mode = "unknown"  # only through the empirical MDP (every utility of the observation)
    with pytest.raises(ValueError, match="add --approx-option method=empirical"):
        score_approx(args)


def test_approx_options_reach_the_estimator_from_the_command_line(tmp_path, capsys):
    from imitation_meg.cli import main

    out = tmp_path / "o.json"
    opts = ["n_models=2", "refine=1", "n_data_steps=300", "n_eval_episodes=8", "iterations=2"]
    opts += ["method=soft_q"]  # CartPole scores by its paths by default
    opts += ["steps_per_iteration=5", "hidden=[16, 16]"]
    argv = ["score", "--env", "CartPole-v1", "--policy", "uniform", "--horizon", "10"]
    argv += [a for o in opts for a in ("--approx-option", o)]
    assert main([*argv, "--json", str(out)]) == 0
    assert "2 soft Q-networks" in capsys.readouterr().out
    res = json.loads(out.read_text())["result"]
    assert len(res["models"]) == 2 and len(res["stages"]) == 2  # refine=1: one refit
    default = ["score", "--env", "CartPole-v1", "--policy", "uniform", "--horizon", "10"]
    bad = {
        "refine": "must be KEY=VALUE",
        "refin=2": "is not a setting of this estimator; its settings are [",
        "seed=3": "seed is set by --seed",
        "refine=-1": "refine must be True, False or an integer >= 0, got -1",
        "hidden=[0]": "hidden must be a sequence of positive layer sizes",
        "hidden=[64": "--approx-option 'hidden=[64' is not valid YAML",
        "device=gpu": "device must be a torch device such as 'cpu', 'cuda' or 'cuda:1'",
    }
    if not th.cuda.is_available():
        bad["device=cuda"] = "torch sees 0 CUDA device(s)"
    for item, message in bad.items():
        assert main([*default, "--approx-option", item]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, (item, err)
    assert main([*default, "--approx-option", "refine=1", "--approx-option", "refine=2"]) == 2
    assert "given twice" in capsys.readouterr().err
    # an exact score has no estimator settings
    exact = [
        "score",
        "--env",
        "FrozenLake-v1",
        "--policy",
        "uniform",
        "--approx-option",
        "refine=2",
    ]
    assert main(exact) == 2
    assert "this score is exact" in capsys.readouterr().err


def test_no_reward_in_the_data_warns_and_scores_zero():
    # FrozenLake's only reward is at the goal, out of reach in 2 decisions
    left = lambda obs: np.tile([0.7, 0.1, 0.1, 0.1], (len(obs), 1))  # noqa: E731
    env = lambda: OneHotObservation(gym.make("FrozenLake-v1", max_episode_steps=2))  # noqa: E731
    with pytest.warns(im.approx.ApproxMEGWarning, match="saw no non-zero reward"):
        res = meg_approx(left, env, **dict(FAST, iterations=1))
    assert res.meg == 0.0 and res.certificate > 0.0
    assert res.beta == 0.0 and not res.at_boundary  # the uniform model, not the grid's end


def test_a_constant_reward_without_early_ends_scores_zero():
    """MountainCar before any episode reached the goal: -1 on every step, every episode runs to
    the horizon, so every policy is optimal and MEG is 0; a near-deterministic policy must not
    score the fitted networks' noise (an untrained DQN scored 10-22 nats this way)."""
    push = lambda obs: np.tile([0.98, 0.01, 0.01], (len(obs), 1))  # noqa: E731
    with pytest.warns(im.approx.ApproxMEGWarning, match="same reward on every step"):
        res = meg_approx(push, "MountainCar-v0", horizon=20, **dict(FAST, iterations=2))
    assert res.meg == 0.0 and res.low == 0.0 and res.high == 0.0
    assert res.certificate > 10.0  # the policy is far from uniform: only the utility is flat
    assert res.beta == 0.0 and not res.at_boundary
    assert all(m["beta"] == 0.0 for m in res.models)


@pytest.mark.expensive
def test_unknown_utility_lower_bound_on_a_small_case(small_case):
    from imitation_meg.approx import meg_approx_unknown

    mdp, feats = small_case
    table = stationary_epsilon_greedy(mdp, 0.1)
    exact_unknown = im.meg_unknown(table, mdp).meg
    res = meg_approx_unknown(
        TablePolicy(table, feats),
        lambda: TabularGymEnv(mdp, feats),
        ascent_steps=3,
        episodes_per_step=20,
        seed=0,
        **FAST,
    )
    bound = mdp.horizon * math.log(3)
    # a lower bound on the exact optimum over every utility of the state, up to estimation error
    assert 0.0 <= res.meg <= exact_unknown + 0.05 * bound
    assert set(res.candidates) == {"initial", "ascended"}
    assert res.meg == max(res.candidates.values())
    assert len(res.trace) == 3 and res.to_dict()["lower_bound"] is True


def test_unknown_utility_over_agent_features(cartpole_ppo):
    from imitation_meg.approx import meg_approx_unknown

    res = meg_approx_unknown(
        cartpole_ppo,
        "CartPole-v1",
        utility="agent",
        horizon=6,
        ascent_steps=2,
        episodes_per_step=6,
        **dict(FAST, iterations=2, n_eval_episodes=10, n_data_steps=60),
    )
    assert res.utility_class == "agent" and 0.0 <= res.meg <= res.result.certificate + 1e-12
    with pytest.raises(ValueError, match="exposes none"):
        meg_approx_unknown(
            lambda obs: np.full((len(obs), 2), 0.5), "CartPole-v1", utility="agent", horizon=4
        )
    with pytest.raises(ValueError, match="utility must be one of"):
        meg_approx_unknown(cartpole_ppo, "CartPole-v1", utility="linear")


def test_cli_score_dispatches_to_the_approximate_estimator(capsys):
    from imitation_meg.cli import main

    # a non-tabular id goes to the approximate path, whose unsupported options exit 2
    assert main(["score", "--env", "CartPole-v1", "--policy", "optimal"]) == 2
    err = capsys.readouterr().err
    assert "need a tabular environment (drop --approx)" in err
    assert (
        main(
            [
                "score",
                "--env",
                "FrozenLake-v1",
                "--policy",
                "uniform",
                "--approx",
                "--mode",
                "unknown",
            ]
        )
        == 2
    )
    assert "add --approx-option method=empirical" in capsys.readouterr().err
    assert main(["score", "--env", "NoSuchEnv-v9", "--policy", "uniform"]) == 2
    assert "could not make environment" in capsys.readouterr().err


@pytest.mark.expensive
@pytest.mark.timeout(900)  # training (1-2 min) + the score, which the assertion holds to a limit
@pytest.mark.parametrize(
    ("options", "limit"),
    [
        ((), 60),
        (("--approx-option", "method=soft_q"), 600),
        (("--approx-option", "method=linear"), 400),
    ],
    ids=["paths", "soft_q", "linear"],
)
def test_cli_scores_a_cartpole_ppo_zip_within_its_time(tmp_path, capsys, options, limit):
    """The score command on a trained CartPole agent, end to end, on this module's one torch
    thread, within the time each method's measurements in docs/approx.md allow (measure on a
    quiet machine): the default (the paths) in a minute with an interval at most 30% of the
    estimate wide. The linear method's rounds do not settle on this agent (the fits' spread is
    their features'), and it says so."""
    import time

    import stable_baselines3 as sb3

    from imitation_meg.cli import main

    model = sb3.PPO(
        "MlpPolicy", "CartPole-v1", seed=0, device="cpu", policy_kwargs={"net_arch": [64, 64]}
    )
    model.learn(30_000)
    path = tmp_path / "ppo.zip"
    model.save(path)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        if options:  # the command line prints the warning as a line (not an error here)
            warnings.simplefilter("always", ApproxMEGWarning)
        code = main(
            ["score", "--env", "CartPole-v1", "--policy", str(path), "--algo", "ppo", *options]
        )
    wall = time.perf_counter() - t0
    out, err = capsys.readouterr()
    print(f"the score took {wall:.1f} s")  # shown with -s: the figure docs/development.md gives
    assert code == 0 and "MEG estimate" in out and "interval" in out
    if not options:
        line = next(v for v in out.splitlines() if v.startswith("MEG estimate"))
        meg, low, high = (float(v) for v in re.findall(r"-?\d+\.\d+", line)[:3])
        assert "random paths" in out and high - low <= 0.3 * meg, line
    assert ("has not settled" in err) == ("method=linear" in options)
    assert wall < limit, f"took {wall:.0f} s"


# ------------------------------------------------------------------------------ batched fits
def _fit_inputs(n_models: int, *, reward_fn=None):
    from imitation_meg.approx.soft_q import new_model

    case = validation_case("random_features", horizon=4)
    src = EnvSource(case.make)
    datas = [
        collect(src, uniform_behaviour(4), None, np.random.default_rng(k), min_steps=200, n_envs=4)
        for k in range(n_models)
    ]
    models = [
        new_model(d, 4, 4, hidden=(16, 16), seed=10 + k, reward_fn=reward_fn)
        for k, d in enumerate(datas)
    ]
    return models, datas


@pytest.mark.parametrize(("split", "average"), [(False, 0.0), (True, 0.0), (False, 0.5)])
def test_batched_fit_equals_each_model_fitted_alone(split, average, monkeypatch):
    """The ensemble fit trains each model exactly as a fit of that model alone would (own
    rows, rationalities, prior, clipping and Adam moments), up to rounding."""
    from imitation_meg.approx import soft_q
    from imitation_meg.approx.soft_q import BetaPrior, fit_soft_q, fit_soft_q_ensemble

    # a small clipping norm, so that every step clips, each model by its own gradient's norm
    monkeypatch.setattr(soft_q, "_GRAD_CLIP", 0.05)

    reward_fn = (lambda x: x[:, 0].double()) if split else None
    together, datas = _fit_inputs(3, reward_fn=reward_fn)
    alone, _ = _fit_inputs(3, reward_fn=reward_fn)
    priors = [BetaPrior(), BetaPrior(focus=2.0), BetaPrior(focus=-0.5)]
    settings = {"iterations": 3, "steps_per_iteration": 25, "batch_size": 32, "lr": 3e-3}
    settings["average"] = average
    losses = fit_soft_q_ensemble(together, datas, priors=priors, seeds=[5, 6, 7], **settings)
    x = th.as_tensor(datas[0].x[:50])
    t = th.as_tensor(datas[0].t[:50])
    b = th.linspace(-3.0, 3.0, 50)
    for k in range(3):
        ref = fit_soft_q(alone[k], datas[k], prior=priors[k], seed=[5, 6, 7][k], **settings)
        assert losses[k] == pytest.approx(ref, rel=1e-4)
        got, want = together[k].f(x, t, b), alone[k].f(x, t, b)
        assert th.allclose(got, want, atol=1e-5), (got - want).abs().max()
    # the models differ from each other (their own data and seeds were used)
    assert not th.allclose(together[0].f(x, t, b), together[1].f(x, t, b), atol=1e-3)


def test_fit_averages_the_last_steps_weights(monkeypatch):
    """With ``average=0.5`` of 4 steps per iteration, each iteration's frozen copy and the fitted
    network are the mean of the weights after its steps 3 and 4; with 0, the last step's."""
    from imitation_meg.approx import soft_q, soft_q_batches
    from imitation_meg.approx.soft_q import fit_soft_q

    def fit(average: float):
        before: list[list[th.Tensor]] = []  # weights before each step's update
        live: list[list[th.Tensor]] = []  # the online weights themselves (final after the fit)
        frozen: list[list[th.Tensor]] = []  # each iteration's frozen copy
        clip, rows = soft_q._clip_each, soft_q_batches._Fit.rows

        def record_step(params, max_norm):
            before.append([p[0].detach().clone() for p in params])
            live[:] = [params]
            clip(params, max_norm)

        def record_rows(self, idx, b, copy):
            frozen.append([p[0].clone() for p in copy])
            return rows(self, idx, b, copy)

        monkeypatch.setattr(soft_q, "_clip_each", record_step)
        monkeypatch.setattr(soft_q_batches._Fit, "rows", record_rows)
        (model,), datas = _fit_inputs(1)
        settings = {"iterations": 2, "steps_per_iteration": 4, "batch_size": 16, "lr": 1e-2}
        fit_soft_q(model, datas[0], seed=3, average=average, **settings)
        monkeypatch.undo()
        fitted = [t for lin in soft_q_batches._linears(model) for t in (lin.weight, lin.bias)]
        final = [p[0].detach() for p in live[0]]
        return before, final, frozen, [t.detach() for t in fitted]

    def close(xs, ys):
        return all(th.allclose(x, y, atol=1e-6) for x, y in zip(xs, ys, strict=True))

    def mean(xs, ys):
        return [(x + y) / 2 for x, y in zip(xs, ys, strict=True)]

    before, final, frozen, fitted = fit(0.5)
    assert len(before) == 8 and len(frozen) == 2
    assert close(frozen[0], before[0])  # the initial weights
    assert close(frozen[1], mean(before[3], before[4]))  # after steps 3 and 4
    assert close(fitted, mean(before[7], final))  # after steps 7 and 8
    assert not close(fitted, final)
    before, final, frozen, fitted = fit(0.0)
    assert close(frozen[1], before[4]) and close(fitted, final)
    (model,), datas = _fit_inputs(1)
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(ValueError, match="average must be"):
            fit_soft_q(model, datas[0], iterations=1, average=bad)
    for bad in (0.0, -1e-3, float("nan"), float("inf"), True, "1e-3"):
        with pytest.raises(ValueError, match="lr must be a positive finite number"):
            fit_soft_q(model, datas[0], iterations=1, lr=bad)


def test_batched_fit_skips_null_models_and_checks_lengths():
    from imitation_meg.approx.soft_q import fit_soft_q_ensemble

    models, datas = _fit_inputs(2)
    models[1].null = True
    before = [p.detach().clone() for p in models[1].nets.parameters()]
    losses = fit_soft_q_ensemble(models, datas, iterations=2, steps_per_iteration=5)
    assert losses[1] == [0.0, 0.0] and len(losses[0]) == 2 and losses[0][0] > 0
    assert all(th.equal(p, q) for p, q in zip(before, models[1].nets.parameters(), strict=True))
    with pytest.raises(ValueError, match="same length"):
        fit_soft_q_ensemble(models, datas[:1], iterations=1)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("iterations", 0), ("steps_per_iteration", 0), ("batch_size", 0), ("lr", 0.0), ("lr", "1e-3")],
)
def test_batched_fit_refuses_bad_settings(setting, value):
    from imitation_meg.approx.soft_q import fit_soft_q, fit_soft_q_ensemble

    models, datas = _fit_inputs(1)
    settings = {"iterations": 1, "steps_per_iteration": 2, setting: value}
    with pytest.raises(ValueError, match=setting):
        fit_soft_q_ensemble(models, datas, **settings)
    with pytest.raises(ValueError, match=setting):
        fit_soft_q(models[0], datas[0], **settings)


def test_batched_fit_refuses_networks_of_different_shapes():
    from imitation_meg.approx.soft_q import fit_soft_q_ensemble, new_model

    models, datas = _fit_inputs(2)
    models[1] = new_model(datas[1], 4, 4, hidden=(8, 8), seed=0)
    with pytest.raises(ValueError, match="one shape"):
        fit_soft_q_ensemble(models, datas, iterations=1, steps_per_iteration=2)


def test_default_schedule_splits_the_step_budget():
    from imitation_meg.approx.options import STEP_BUDGET, default_schedule

    assert STEP_BUDGET == 48_000
    assert default_schedule(10, None, None) == (30, 1600)  # H + 20 iterations
    assert default_schedule(10, None, None, budget=24_000) == (30, 800)
    assert ApproxOptions().schedule(10) == (30, 1600)
    assert ApproxOptions(iterations=4).schedule(10) == (4, 12_000)
    assert default_schedule(500, None, None) == (520, 92)
    assert default_schedule(5000, None, None) == (5020, 20)  # at least 20 per iteration
    assert default_schedule(10, 4, 7) == (4, 7)


@settings(max_examples=40, deadline=None)
@given(
    horizon=st.integers(1, 600),
    last_steps=st.integers(0, 4),
    ts=st.lists(st.integers(-3, 610), min_size=0, max_size=50),
)
def test_time_table_equals_the_features_bit_for_bit(horizon, last_steps, ts):
    from imitation_meg.approx.soft_q_features import TimeTable, time_features

    t = th.tensor(ts, dtype=th.int64)
    table = TimeTable(horizon, last_steps)
    assert th.equal(table(t), time_features(t, horizon, last_steps))
    tf = t.to(th.float32)  # float times are computed directly
    assert th.equal(table(tf), time_features(tf, horizon, last_steps))
