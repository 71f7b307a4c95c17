"""The soft-value curve: the identity it rests on, its conjugate, its files and its scores.

For every policy ``pi`` in every finite MDP (stochastic dynamics, time-dependent policies)
``E_pi[sum_t (log pi_beta,t + log|A|)] = beta J(pi) - Lambda(beta)`` with
``Lambda(beta) = E_{s0} W_0(s0)``, ``W_t(s) = log mean_a exp(beta r(s, a) + E[W_{t+1}(s')])``
(docs/approx.md has the proof). The property tests check it against the exact code: the
discrete passes of :class:`~imitation_meg.core.known.MEGObjective` at finite rationalities and its
exact limits at ``beta = +-inf``, and the Box-action passes of
:class:`~imitation_meg.continuous.known.ContinuousMEGObjective` (their own quadrature).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg import continuous as cont
from imitation_meg import policies
from imitation_meg.approx.curve import (
    CurveInfo,
    SoftValueCurve,
    beta_grid,
    conjugate_on_grid,
    exact_curve,
)
from imitation_meg.core.known import MEGObjective


def _random_mdp(rng: np.random.Generator, S: int, A: int, H: int, integer: bool) -> im.TabularMDP:
    """Dirichlet transitions and normal rewards; or (``integer``) integer rewards and coin-flip
    transitions (each half to one of two random states), so that hard Q-values are multiples of
    ``2^-H``: tie or differ by at least that."""
    if integer:
        T = np.zeros((S, A, S))
        for s in range(S):
            for a in range(A):
                for j in rng.integers(0, S, size=2):
                    T[s, a, j] += 0.5
        r = rng.integers(-2, 3, size=(S, A)).astype(float)
    else:
        T = rng.dirichlet(np.ones(S) * 0.5, size=(S, A))
        r = rng.normal(size=(S, A))
    return im.TabularMDP(T, r, horizon=H, initial_state_dist=rng.dirichlet(np.ones(S)))


def _reference_lambda(mdp: im.TabularMDP, beta: float) -> float:
    """``E_{s0} W_0(s0)`` by the plain backward recursion of the module docstring."""
    T = mdp.dense_transition().double().numpy()
    r = mdp.reward_sa().double().numpy()
    W = np.zeros(mdp.n_states)
    for _ in range(mdp.steps):
        q = beta * r + T @ W  # (S, A)
        top = q.max(1)
        W = top + np.log(np.exp(q - top[:, None]).mean(1))
    return float(mdp.initial_state_dist.double().numpy() @ W)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    S=st.integers(1, 5),
    A=st.integers(2, 4),
    H=st.integers(1, 5),
    beta=st.sampled_from([-7.0, -1.3, -0.2, 0.05, 0.6, 2.5, 11.0]),
)
def test_the_identity_holds_for_every_policy_at_finite_beta(seed, S, A, H, beta):
    """Random stochastic MDPs, random time-dependent policies: ``L(beta) + H log|A|`` of the
    exact passes equals ``beta J(pi) - Lambda(beta)`` of the reference recursion."""
    rng = np.random.default_rng(seed)
    mdp = _random_mdp(rng, S, A, H, integer=False)
    pi = rng.dirichlet(np.ones(A) * 0.6, size=(H, S))
    obj = MEGObjective(mdp, pi, mdp.reward_sa())
    L = float(obj.evaluate_batch(th.tensor([beta], dtype=th.float64)).L[0])
    lam = _reference_lambda(mdp, beta)
    assert L + H * math.log(A) == pytest.approx(beta * obj.expected_utility - lam, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), S=st.integers(1, 4), A=st.integers(2, 3), H=st.integers(1, 4))
def test_the_identity_holds_in_the_limits(seed, S, A, H):
    """At ``beta = +-inf``: an optimal (anti-optimal) policy's exact limit of ``L + H log|A|``
    is the limit of ``beta J - Lambda(beta)`` (integer rewards and coin-flip transitions: ties,
    weighted by the entropy after them, and gaps of at least ``2^-H``, so ``beta = 60 2^H`` is
    the limit to about e^-60); a policy
    with mass off the argmax has ``L = -inf`` there, as ``beta J - Lambda`` falls without
    bound."""
    rng = np.random.default_rng(seed)
    mdp = _random_mdp(rng, S, A, H, integer=True)
    for sign, pi in ((1.0, policies.optimal(mdp)), (-1.0, policies.anti_optimal(mdp))):
        obj = MEGObjective(mdp, pi, mdp.reward_sa())
        limit = obj.evaluate_limit(sign).L + H * math.log(A)
        b = sign * 60.0 * 2**H
        assert limit == pytest.approx(
            b * obj.expected_utility - _reference_lambda(mdp, b), abs=1e-9
        )
    spread = rng.dirichlet(np.ones(A), size=(H, S))
    obj = MEGObjective(mdp, spread, mdp.reward_sa())
    j, j_max = obj.expected_utility, MEGObjective(mdp, policies.optimal(mdp)).expected_utility
    if j < j_max - 1e-9:
        assert -math.inf == obj.evaluate_limit(1.0).L
        assert 60.0 * j - _reference_lambda(mdp, 60.0) < 30.0 * j - _reference_lambda(mdp, 30.0)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), H=st.integers(1, 3), beta=st.sampled_from([-2.0, 0.4, 3.0]))
def test_box_actions_have_one_curve_for_every_policy(seed, H, beta):
    """The identity with the uniform density on a box: ``L(beta) - beta J(pi)`` is ``-Lambda``,
    the same for every policy, on random continuous-action MDPs (exact quadrature passes)."""
    mdp = cont.random_continuous_mdp(3, 1, H, seed=seed)
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(3):
        mean = rng.uniform(-0.6, 0.6, size=(3, 1))
        std = rng.uniform(0.2, 0.8, size=(3, 1))
        obj = cont.ContinuousMEGObjective(mdp, cont.GaussianPolicy(mean, std))
        L = float(obj.evaluate_batch(th.tensor([beta], dtype=th.float64)).L[0])
        values.append(L - beta * obj.expected_utility)
    uniform = cont.ContinuousMEGObjective(mdp, cont.policies.uniform(mdp))
    L_u = float(uniform.evaluate_batch(th.tensor([beta], dtype=th.float64)).L[0])
    values.append(L_u - beta * uniform.expected_utility)
    assert np.ptp(values) < 1e-9 * max(1.0, abs(values[0]))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6), S=st.integers(2, 5), A=st.integers(2, 3), H=st.integers(1, 6))
def test_the_exact_curve_scores_every_policy_as_meg_does(seed, S, A, H):
    """``sup_beta beta J - Lambda(beta)`` at a policy's return is its MEG: exactly through the
    occupancy mixture, and to 1e-6 on the grid (Hermite refinement); the grid's values are the
    reference recursion's."""
    rng = np.random.default_rng(seed)
    mdp = _random_mdp(rng, S, A, H, integer=False)
    curve = exact_curve(mdp)
    pi = rng.dirichlet(np.ones(A) * 0.5, size=(H, S))
    ex = im.meg(pi, mdp)
    meg, _beta = curve.conjugate(ex.expected_utility)
    assert meg == pytest.approx(ex.meg, abs=1e-9)
    c = conjugate_on_grid(curve.betas, curve.value[None], curve.slope[None], ex.expected_utility)
    assert c.meg[0] == pytest.approx(ex.meg, abs=1e-6 * max(1.0, ex.meg))
    for k in rng.integers(0, len(curve.betas), size=3):
        b = float(curve.betas[k])
        assert curve.value[k] == pytest.approx(_reference_lambda(mdp, b), abs=1e-8 * (1 + abs(b)))


def test_the_paper_grid_by_its_curve():
    """CliffWorld's epsilon-greedy policies (the README's numbers) from one curve."""
    mdp = im.envs.cliff_world(horizon=30)
    curve = exact_curve(mdp)
    for eps, want in ((0.1, 26.4856), (0.5, 6.0337)):
        j = im.meg(policies.epsilon_greedy(mdp, eps), mdp).expected_utility
        assert curve.score(j, exact_return=True).meg == pytest.approx(want, abs=1e-4)
    # the optimal policy: the limit at beta = +inf, exactly
    j_max = im.meg(policies.optimal(mdp), mdp)
    res = curve.score(j_max.expected_utility, exact_return=True)
    assert res.meg == pytest.approx(j_max.meg, abs=1e-9) and res.beta > 100.0 and res.in_range
    with pytest.raises(ValueError, match="no policy of"):
        curve.conjugate(j_max.expected_utility + 1.0)


def _info(**kw):
    base = {"env": "x", "env_kwargs": {}, "horizon": 3, "actions": {"kind": "discrete", "n": 2}}
    return CurveInfo(**{**base, "method": "paths", **kw})


def test_a_constant_reward_scores_zero_at_beta_zero():
    """Every policy has the uniform return: the curve is a line, every beta scores 0, and the
    maximiser reported is 0 (not the grid's end)."""
    betas = beta_grid(10.0)
    lam = betas * 10.0
    curve = SoftValueCurve(betas, lam[None], np.full((1, len(betas)), 10.0), _info())
    res = curve.score([10.0, 10.0, 10.0])
    assert res.meg == 0.0 and res.beta == 0.0 and not res.at_edge


def test_files_keep_the_curve_and_its_provenance(tmp_path):
    mdp = im.envs.cliff_world(width=4, height=3, horizon=6)
    curve = exact_curve(mdp, env="tiny-cliff", env_kwargs={"k": 1})
    path = curve.save(tmp_path / "c")
    assert path.suffix == ".npz"
    back = SoftValueCurve.load(path)
    assert np.array_equal(back.value, curve.value) and np.array_equal(back.slope, curve.slope)
    assert back.info == curve.info and back.info.version == im.__version__
    j = float(curve.slope[len(curve.betas) // 2 + 300])
    assert back.conjugate(j)[0] == pytest.approx(curve.conjugate(j)[0], abs=1e-6)
    back.check_for(env="tiny-cliff", horizon=6, actions=curve.info.actions, env_kwargs={"k": 1})
    with pytest.raises(ValueError, match=r"horizon 7 \(the curve's: 6\)"):
        back.check_for(env="tiny-cliff", horizon=7, actions=curve.info.actions, env_kwargs={"k": 1})
    with pytest.raises(ValueError, match="environment 'other'"):
        back.check_for(env="other", horizon=6, actions=curve.info.actions, env_kwargs={"k": 1})
    with pytest.raises(ValueError, match="env_kwargs"):
        back.check_for(env="tiny-cliff", horizon=6, actions=curve.info.actions)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="is not a soft-value curve file"):
        SoftValueCurve.load(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError, match="no soft-value curve file"):
        SoftValueCurve.load(tmp_path / "missing.npz")


def test_scores_from_sampled_returns_cover_the_exact_value():
    """J from sampled returns: the bootstrap interval carries J's noise through the slope
    (``beta*``) and covers the exact MEG in most seeds."""
    mdp = im.envs.cliff_world(horizon=20)
    curve = exact_curve(mdp)
    pi = policies.epsilon_greedy(mdp, 0.3)
    exact = im.meg(pi, mdp)
    from imitation_meg.core.trajectories import sample_trajectories

    covered = 0
    for seed in range(20):
        states, actions = sample_trajectories(mdp, pi, 200, rng=seed)
        r = mdp.reward_sa().double().numpy()
        returns = r[states[:, :-1], actions].sum(1)
        res = curve.score(returns, seed=seed)
        assert res.low <= res.meg <= res.high
        assert res.return_se > 0 and res.bootstrap_se > 0
        covered += res.low <= exact.meg <= res.high
    assert covered >= 16


def _bernoulli_curve(rng, p, n_starts, n_particles):
    """A curve of a one-step reward ``R ~ Bernoulli(p)`` under the uniform policy estimated by
    two populations of ``n_particles`` per start (as the paths and the SMC estimate theirs):
    each population's ``log mean exp(beta R)`` and its slope."""
    from imitation_meg.approx.curve import curve_of_populations

    betas = beta_grid(1.0)
    k = (rng.random((n_starts, 2, n_particles)) < p).sum(2)[..., None]  # (K, 2, 1) successes
    with np.errstate(divide="ignore"):  # log 0 where no particle (or every one) succeeded
        hit, miss = np.log(k) + betas, np.log(n_particles - k) + 0 * betas  # (K, 2, G)
    lz = np.logaddexp(hit, miss) - math.log(n_particles)
    slopes = np.exp(hit - np.logaddexp(hit, miss))
    return curve_of_populations(
        betas,
        lz,
        slopes,
        _info(horizon=1),
        ess=np.full(len(betas), float(n_particles)),
        returns_found=(0.0, 1.0),
        min_ess=1.0,
    )


@pytest.mark.parametrize("n_starts", [1, 3])
def test_a_curve_of_few_starts_carries_its_populations_noise(n_starts):
    """With one start the bootstrap over the curve's units sees none of the curve's noise and
    with a few it sees it poorly; the populations' disagreement does. An exact return against
    curves from independent draws: the interval covers the exact MEG in at least 90 of 100
    (the bootstrap and the bias allowance alone: in 7 of 100 with one start, 81 with three)."""
    p, J = 0.1, 0.25
    exact_beta = math.log(J * (1 - p) / (p * (1 - J)))  # Lambda'(beta) = J
    exact = exact_beta * J - math.log(1 - p + p * math.exp(exact_beta))
    rng = np.random.default_rng(0)
    covered = 0
    for seed in range(100):
        curve = _bernoulli_curve(rng, p, n_starts, 100)
        res = curve.score(J, exact_return=True, n_boot=50, seed=seed)
        covered += res.low <= exact <= res.high
    assert covered >= 90


def test_many_spread_starts_add_nothing_beyond_the_bootstrap():
    """Where the units' log Z spread more than their populations disagree, the bootstrap sees
    the noise: ``curve_se`` is 0 and the interval is the bootstrap's."""
    from imitation_meg.approx.curve import curve_of_populations

    betas = beta_grid(1.0)
    K = 32
    shift = np.linspace(-1.0, 1.0, K)[:, None, None]  # starts far apart
    noise = np.random.default_rng(1).normal(scale=1e-3, size=(K, 2, len(betas)))
    lz = betas[None, None, :] * 0.1 + shift * np.abs(betas)[None, None, :] + noise
    curve = curve_of_populations(
        betas,
        lz,
        np.gradient(lz, betas, axis=2),
        _info(horizon=1),
        ess=np.full(len(betas), 1e4),
        returns_found=(-2.0, 2.0),
        min_ess=1.0,
    )
    res = curve.score(0.5, exact_return=True, n_boot=200)
    assert res.curve_se == 0.0 and res.bootstrap_se > 0


def test_bad_scores_are_named():
    curve = exact_curve(im.envs.cliff_world(width=4, height=3, horizon=5))
    with pytest.raises(ValueError, match="at least one episode"):
        curve.score([])
    with pytest.raises(ValueError, match="not finite"):
        curve.score([1.0, math.nan])
    with pytest.raises(ValueError, match="n_boot=0"):
        curve.score([1.0, 2.0], n_boot=0)
    with pytest.raises(ValueError, match="confidence"):
        curve.score([1.0, 2.0], confidence=1.0)
    with pytest.raises(TypeError, match="TabularMDP"):
        exact_curve("CartPole-v1")
    with pytest.raises(ValueError, match="undiscounted"):
        exact_curve(im.TabularMDP(np.ones((2, 2, 2)) / 2, np.eye(2), horizon=None, discount=0.9))
    with pytest.raises(ValueError, match="ascending grid"):
        SoftValueCurve(np.array([1.0, 0.0, 2.0]), np.zeros((1, 3)), np.zeros((1, 3)), _info())


def test_the_squashed_laws_certificate_agrees_with_their_quadrature_rules():
    """The per-step certificate of SAC-like laws (Gauss-Hermite) against the panel rules the
    exact continuous code uses, across means and widths up to the ones it serves."""
    from imitation_meg.approx.agent import squashed_kl
    from imitation_meg.continuous.densities import ActionLaw

    rng = np.random.default_rng(0)
    mean = rng.normal(scale=3.0, size=(200, 2))
    std = rng.uniform(0.01, 2.0, size=(200, 2))
    law = ActionLaw("squashed", mean, std, np.array([-2.0, -1.0]), np.array([2.0, 3.0]))
    assert np.abs(squashed_kl(mean, std) - law.rule().kl.numpy()).max() < 1e-5
