"""Exact continuous-action MEG against an independent brute force (composite Boole's rule on a
dense uniform grid, its own soft value iteration, Brent's method in beta), and its invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th
from continuous_brute_force import (
    BruteForce,
    boole,
    gaussian_points,
    poly_density,
    random_coefs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from imitation_meg.continuous import (
    ContinuousMDP,
    ContinuousMEGObjective,
    ContinuousTabularEnv,
    DensityPolicy,
    GaussianPolicy,
    meg_continuous,
    random_continuous_mdp,
)
from imitation_meg.continuous import policies as P
from imitation_meg.continuous.mdp import QuadraticUtility, SmoothTransition
from imitation_meg.continuous.policies import ContinuousPolicy, TabularRule


# ----------------------------------------------------------------------------- against it
@pytest.mark.parametrize("seed", [0, 3])
def test_polynomial_density_1d_matches_brute_force(seed):
    mdp = random_continuous_mdp(4, 1, 3, seed=seed)
    coefs = random_coefs(seed, 4, 1)
    dens, pol = poly_density(coefs, mdp)
    bf = BruteForce(mdp, 2000)
    bf.behaviour_from_density(dens)
    ref, ref_beta = bf.meg()
    res = meg_continuous(pol, mdp)
    assert res.converged and res.quadrature_error <= 1e-10
    assert res.meg == pytest.approx(ref, abs=1e-8)
    assert res.beta == pytest.approx(ref_beta, rel=1e-6)
    assert res.meg > 1e-3  # not the trivial uniform answer


@pytest.mark.parametrize("kind", ["squashed", "clipped"])
def test_gaussians_1d_match_brute_force(kind):
    mdp = random_continuous_mdp(3, 1, 3, seed=5, low=-2.0, high=2.0)
    rng = np.random.default_rng(1)
    if kind == "squashed":
        mean, std = rng.uniform(-0.8, 0.8, (3, 1)), rng.uniform(0.3, 0.9, (3, 1))
    else:
        mean, std = rng.uniform(-1.5, 1.5, (3, 1)), rng.uniform(0.4, 1.2, (3, 1))
    pol = GaussianPolicy(mean, std, kind=kind)
    bf = BruteForce(mdp, 2000)
    bf.behaviour_from_points(*gaussian_points(mdp, mean, std, kind))
    ref, ref_beta = bf.meg()
    res = meg_continuous(pol, mdp)
    assert res.converged
    assert res.meg == pytest.approx(ref, abs=1e-8)
    assert res.beta == pytest.approx(ref_beta, rel=1e-6)
    assert res.meg > 1e-3
    if kind == "clipped":  # point masses on the bounds: no density, no finite certificate
        assert res.certificate == math.inf and math.isnan(res.normalized)
    else:
        assert 0 < res.meg < res.certificate < math.inf


def test_polynomial_density_2d_matches_brute_force():
    mdp = random_continuous_mdp(3, 2, 2, seed=2)
    coefs = random_coefs(7, 3, 2)
    dens, pol = poly_density(coefs, mdp)
    bf = BruteForce(mdp, 240)
    bf.behaviour_from_density(dens)
    ref, ref_beta = bf.meg()
    res = meg_continuous(pol, mdp)
    assert res.converged and res.n_model_points >= 48**2
    assert res.meg == pytest.approx(ref, abs=1e-8)
    assert res.beta == pytest.approx(ref_beta, rel=1e-6)


def test_squashed_gaussian_2d_matches_brute_force():
    mdp = random_continuous_mdp(3, 2, 2, seed=4)
    rng = np.random.default_rng(2)
    mean, std = rng.uniform(-0.5, 0.5, (3, 2)), rng.uniform(0.3, 0.5, (3, 2))
    bf = BruteForce(mdp, 240)
    bf.behaviour_from_points(*gaussian_points(mdp, mean, std, "squashed", n=240))
    ref, ref_beta = bf.meg()
    res = meg_continuous(GaussianPolicy(mean, std, kind="squashed"), mdp)
    assert res.meg == pytest.approx(ref, abs=1e-8)
    assert res.beta == pytest.approx(ref_beta, rel=1e-6)
    assert res.meg > 1e-3


@pytest.mark.parametrize("d", [1, 2])
def test_uniform_scores_zero(d):
    mdp = random_continuous_mdp(4, d, 3, seed=1)
    res = meg_continuous(P.uniform(mdp), mdp)
    # the environment's law of the next state is the MDP's (its numpy path for one action)
    env = ContinuousTabularEnv(mdp)
    a = np.full(d, 0.3)
    law = mdp.transition(th.tensor([2]), th.as_tensor(a[None]))[0].numpy()
    np.testing.assert_allclose(mdp._transition.one(2, a), law, rtol=1e-12)
    assert env.mdp.utility.one(2, a) == pytest.approx(
        float(mdp.reward(th.tensor([2]), th.as_tensor(a[None]))[0])
    )
    assert res.meg == 0.0 and res.beta == 0.0 and res.certificate == pytest.approx(0, abs=1e-14)


@pytest.mark.parametrize(("d", "beta"), [(1, -1.3), (1, 0.4), (1, 2.5), (2, 1.7)])
def test_soft_optimal_scores_its_own_log_likelihood_ratio(d, beta):
    mdp = random_continuous_mdp(4, d, 3, seed=6)
    pol = P.soft_optimal(mdp, beta)
    res = meg_continuous(pol, mdp)
    assert res.beta == pytest.approx(beta, rel=1e-8)
    # Gibbs: the supremum is the policy's own E[sum_t log(pi / u)], the certificate.
    assert res.meg == pytest.approx(res.certificate, rel=1e-10, abs=1e-12)
    # ... and that is what an independent computation of the density's own ratio gives.
    if d == 1:
        bf = BruteForce(mdp, 2000)
        V = bf.soft(beta)
        dens_t = np.stack(
            [np.exp(beta * (bf.r + bf.T @ V[t + 1] - V[t][:, None])) / bf.vol for t in range(3)]
        )
        bf.bw, bf.bT, bf.br = dens_t * bf.w, bf.T, bf.r
        D = bf.occupancy()
        own = sum(
            D[t] @ (bf.bw[t] * np.log(dens_t[t] * bf.vol)).sum(-1) for t in range(mdp.horizon)
        )
        assert res.meg == pytest.approx(own, abs=1e-8)


# ----------------------------------------------------------------------------- invariances
@pytest.mark.parametrize(("a", "b"), [(1e-3, 0.0), (7.0, 100.0), (-2.0, 3.0), (1e150, 0.0)])
def test_utility_scale_and_translation(a, b):
    mdp = random_continuous_mdp(4, 1, 3, seed=8)
    coefs = random_coefs(3, 4, 1)
    _, pol = poly_density(coefs, mdp)
    base = meg_continuous(pol, mdp)
    util = mdp.utility

    def moved(s, x):
        return a * util(s, x) + b

    res = meg_continuous(pol, mdp, moved)
    assert res.meg == pytest.approx(base.meg, rel=1e-9)
    assert res.beta == pytest.approx(base.beta / a, rel=1e-7)
    assert res.expected_utility == pytest.approx(a * base.expected_utility + 3 * b, rel=1e-9)


def test_box_rescaling_leaves_meg_unchanged():
    # The same problem on [-1, 1] and on [2, 10]: MEG is a ratio of densities.
    results = []
    for low, high in ((-1.0, 1.0), (2.0, 10.0)):
        mdp = random_continuous_mdp(3, 1, 3, seed=9, low=low, high=high)
        results.append(meg_continuous(GaussianPolicy([[0.3], [-0.2], [0.9]], [[0.5]] * 3), mdp))
    assert results[0].meg == pytest.approx(results[1].meg, rel=1e-9)
    assert results[0].certificate == pytest.approx(results[1].certificate, rel=1e-9)


# ----------------------------------------------------------------------------- the limits
def _peak_mdp() -> ContinuousMDP:
    """One state, one decision, utility -(x - 0.2)^2 on [-1, 1]."""
    lo, hi = np.array([-1.0]), np.array([1.0])
    trans = SmoothTransition(np.zeros((1, 1)), np.zeros((1, 1, 2)), lo, hi)
    util = QuadraticUtility([0.0], [[0.0]], [[1.0]], [[0.2]], lo, hi)
    return ContinuousMDP(1, lo, hi, 1, trans, util)


class _PointMass(ContinuousPolicy):
    """A deterministic action, dressed as a rule (the objective would score it; the public
    functions refuse policies without densities)."""

    name = "point mass"

    def __init__(self, a: float) -> None:
        self.a = a

    def rule(self, mdp, level=0):
        pts = th.full((1, 1, 1, 1), self.a, dtype=th.float64)
        return TabularRule(
            pts, th.ones(1, 1, 1, dtype=th.float64), th.zeros(1, 1, dtype=th.float64), True
        )


def test_l_tends_to_minus_infinity_for_a_density_and_plus_infinity_for_the_argmax():
    # Laplace (exact here, the utility is quadratic and the peak far from the bounds):
    # beta V = log(sqrt(pi / beta) / 2), so L(beta) = beta E_pi[Q] + log(2) + log(beta) / 2
    # - log(pi) / 2. A policy with a density has E_pi[Q] < max Q = 0: L -> -inf linearly.
    mdp = _peak_mdp()
    coefs = np.array([[[1.2, -0.5]]])
    dens, pol = poly_density(coefs, mdp)
    obj = ContinuousMEGObjective(mdp, pol, level=3)
    x, w = boole(-1, 1, 4000)
    eq = float((w * dens(0, x[:, None]) * -((x - 0.2) ** 2)).sum())
    betas = th.tensor([300.0, 1000.0, 3000.0], dtype=th.float64)  # normalised units
    unit = obj.unit
    ev = obj.evaluate_batch(betas)
    b = betas.numpy() / unit  # utility units
    laplace = b * eq + math.log(2) + 0.5 * np.log(b) - 0.5 * math.log(math.pi)
    np.testing.assert_allclose(ev.L.numpy(), laplace, rtol=1e-9)
    lim = obj.evaluate_limit(1.0)
    assert -math.inf == lim.L and lim.dL < 0
    # dL/dbeta = E_pi[Q] - E_{pi_beta}[Q] = E_pi[Q] + 1 / (2 beta) tends to that slope, which is
    # the limit's dL (its best utility is the best over the rule's points: 0 to ~1e-6)
    np.testing.assert_allclose(ev.dL.numpy() * unit, eq + 0.5 / b, rtol=1e-9)
    assert lim.dL * unit == pytest.approx(eq, abs=1e-5)
    # A point mass on the argmax: L(beta) = log(2) + log(beta) / 2 - log(pi) / 2 -> +inf.
    at_max = ContinuousMEGObjective(mdp, _PointMass(0.2), level=3).evaluate_batch(betas)
    np.testing.assert_allclose(
        at_max.L.numpy(), math.log(2) + 0.5 * np.log(b) - 0.5 * math.log(math.pi), rtol=1e-9
    )


# ----------------------------------------------------------------------------- properties
@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    S=st.integers(1, 4),
    H=st.integers(1, 3),
    c=st.lists(st.floats(-0.99, 1.99), min_size=8, max_size=8),
    a=st.sampled_from([-3.0, 0.01, 1.0, 250.0]),
    b=st.floats(-50, 50),
)
def test_properties_on_random_problems(seed, S, H, c, a, b):
    mdp = random_continuous_mdp(S, 1, H, seed=seed)
    coefs = (np.array(c).reshape(4, 1, 2) * [[[1.5, 1.0]]])[:S]
    _, pol = poly_density(coefs, mdp)
    res = meg_continuous(pol, mdp)
    # bounds: 0 <= MEG <= the policy's own log-likelihood ratio (Gibbs)
    assert -1e-12 <= res.meg <= res.certificate + 1e-10
    assert res.converged
    # Theorem 5.1: at an interior optimum the model matches the policy's expected utility
    if res.beta != 0.0:
        scale = max(1.0, abs(res.expected_utility))
        assert abs(res.model_expected_utility - res.expected_utility) <= 1e-8 * scale
    # Proposition 3.1: invariance under U -> a U + b
    util = mdp.utility
    moved = meg_continuous(pol, mdp, lambda s, x: a * util(s, x) + b)
    assert moved.meg == pytest.approx(res.meg, rel=1e-8, abs=1e-12)
    # the signed variant carries the sign of E_pi[U] - E_uniform[U]
    signed = meg_continuous(pol, mdp, signed=True)
    sign = 1.0 if res.expected_utility >= res.uniform_expected_utility else -1.0
    assert signed.meg == pytest.approx(sign * res.meg, abs=1e-15)


# ----------------------------------------------------------------------------- validation
def test_bad_inputs_are_named():
    mdp = random_continuous_mdp(3, 1, 2, seed=0)
    with pytest.raises(ValueError, match="low < high"):
        random_continuous_mdp(3, 1, 2, low=1.0, high=1.0)
    with pytest.raises(ValueError, match="bounded"):
        ContinuousMDP(2, [-np.inf], [1.0], 2, lambda s, a: th.full((s.shape[0], 2), 0.5))
    with pytest.raises(ValueError, match="sum to 1"):
        ContinuousMDP(2, [-1.0], [1.0], 2, lambda s, a: th.full((s.shape[0], 2), 0.6))
    with pytest.raises(ValueError, match=r"integrates to 2"):
        meg_continuous(DensityPolicy(lambda s, a: th.ones(s.shape[0])), mdp)
    with pytest.raises(ValueError, match="deterministic policy"):
        meg_continuous(GaussianPolicy([[0.0]] * 3, [[0.0]] * 3), mdp)
    with pytest.raises(TypeError, match="ContinuousPolicy"):
        meg_continuous(np.full((3, 1), 0.5), mdp)
    with pytest.raises(ValueError, match="3 states"):
        meg_continuous(GaussianPolicy([[0.0]] * 2, [[1.0]] * 2), mdp)
    with pytest.raises(ValueError, match="no utility"):
        meg_continuous(P.uniform(mdp), ContinuousMDP(3, [-1.0], [1.0], 2, mdp._transition))
    with pytest.raises(ValueError, match="must be finite"):
        P.soft_optimal(mdp, math.inf)
    env = ContinuousTabularEnv(mdp)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside the box"):
        env.step(np.array([1.5]))


def test_a_narrow_policy_warns_when_the_rule_cannot_resolve_it():
    from imitation_meg.continuous import ContinuousMEGWarning

    # A Gaussian of width 1e-3 on the utility's peak: the model at the optimum is as narrow,
    # and 64 or 128 Gauss-Legendre points on [-1, 1] cannot resolve it.
    mdp = _peak_mdp()
    pol = GaussianPolicy([[math.atanh(0.2)]], [[1e-3]], kind="squashed")
    with pytest.warns(ContinuousMEGWarning, match="quadrature rules differ"):
        res = meg_continuous(pol, mdp, max_level=1)
    assert not res.converged and res.quadrature_error > 1e-3


# ------------------------------------------------------- the wrong MDP, NaN Gaussians (issue 59)
def test_a_tabular_mdp_is_refused_with_the_function_that_scores_it():
    import imitation_meg as im

    cm = random_continuous_mdp(4, 1, 3, seed=0)
    grid = im.envs.cliff_world()
    with pytest.raises(TypeError, match=r"meg_continuous takes a ContinuousMDP") as info:
        meg_continuous(P.uniform(cm), grid)
    assert "the TabularMDP CliffWorld10x4" in str(info.value)
    assert str(info.value).endswith("a TabularMDP is scored with imitation_meg.meg.")
    with pytest.raises(TypeError, match=r"ContinuousMEGObjective takes a ContinuousMDP"):
        ContinuousMEGObjective(grid, P.uniform(cm))
    with pytest.raises(TypeError, match=r"takes a ContinuousMDP .*got NoneType None"):
        meg_continuous(P.uniform(cm), None)
    for build in (P.uniform, lambda m: P.soft_optimal(m, 1.0)):
        with pytest.raises(TypeError, match=r"takes a ContinuousMDP.*imitation_meg\.policies"):
            build(grid)
    # a tabular policy's table on the box: the hint names where it belongs
    with pytest.raises(TypeError, match=r"got ndarray \(an array is a table of a TabularMDP"):
        meg_continuous(np.full((4, 2), 0.5), cm)


@pytest.mark.parametrize(
    ("mean", "std", "message"),
    [
        (
            [[0.1], [math.nan], [0.2]],
            [[0.3]] * 3,
            r"the mean is nan at \(s, j\) = \(1, 0\) \(1 NaN",
        ),
        ([[math.inf]] * 3, [[0.3]] * 3, r"the mean is inf at \(s, j\) = \(0, 0\) \(0 NaN and 3"),
        ([[0.0]] * 3, [[0.3], [0.3], [math.nan]], r"the std is nan at \(s, j\) = \(2, 0\)"),
        ([[0.0]] * 3, [[0.3], [-1.0], [0.3]], r"the std is -1\.0 at \(s, j\) = \(1, 0\)"),
        (
            [[[0.0]] * 3, [[0.0], [0.0], [math.nan]]],
            [[[0.3]] * 3] * 2,
            r"\(t, s, j\) = \(1, 2, 0\)",
        ),
    ],
)
def test_a_nan_gaussian_is_named_by_what_is_nan(mean, std, message):
    with pytest.raises(ValueError, match=message) as info:
        GaussianPolicy(mean, std, name="agent")
    assert "GaussianPolicy 'agent'" in str(info.value)
    if "mean" in message:
        assert "std in" not in str(info.value)  # not reported as a standard deviation


def test_the_quadrature_names_a_nan_mean_too():
    from imitation_meg.continuous.densities import ActionLaw
    from imitation_meg.continuous.quadrature import clipped_gaussian_rule

    one = np.ones(1)
    with pytest.raises(ValueError, match=r"finite means, got 1 NaN and 0 infinite mean\(s\) of 2"):
        clipped_gaussian_rule(np.array([[0.0, math.nan]]), np.full((1, 2), 0.3), -one, one)
    law = ActionLaw("squashed", np.array([[math.nan]]), np.array([[0.3]]), -one, one)
    with pytest.raises(ValueError, match=r"finite means, got 1 NaN"):
        law.rule()
    law = ActionLaw("squashed", np.array([[0.0]]), np.array([[math.nan]]), -one, one)
    with pytest.raises(ValueError, match=r"positive finite standard deviations.*\(1 NaN\)"):
        law.rule()
