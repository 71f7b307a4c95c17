"""Unknown-utility MEG over linear classes on continuous actions: against the known-utility
solve, an independent brute force (dense grid, scipy's BFGS), and its bounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from continuous_brute_force import BruteForce, poly_density, random_coefs
from scipy.optimize import minimize

from imitation_meg.continuous import (
    GaussianPolicy,
    meg_continuous,
    meg_continuous_unknown,
    random_continuous_mdp,
)
from imitation_meg.continuous import policies as P


def quad_features(s: th.Tensor, a: th.Tensor) -> th.Tensor:
    """``(M, 3)``: the action, its square, and whether the state is 0."""
    return th.stack([a[:, 0], a[:, 0] ** 2, (s == 0).double()], 1)


def test_the_class_of_one_utility_is_known_utility_meg():
    mdp = random_continuous_mdp(4, 1, 3, seed=2)
    _, pol = poly_density(random_coefs(2, 4, 1), mdp)
    known = meg_continuous(pol, mdp)
    util = mdp.utility
    res = meg_continuous_unknown(pol, mdp, lambda s, a: util(s, a).unsqueeze(1))
    assert res.converged
    assert res.meg == pytest.approx(known.meg, rel=1e-9)
    assert res.theta[0] == pytest.approx(known.beta, rel=1e-6)


def test_matches_brute_force_and_bounds():
    mdp = random_continuous_mdp(3, 1, 3, seed=4)
    dens, pol = poly_density(random_coefs(5, 3, 1), mdp)
    res = meg_continuous_unknown(pol, mdp, quad_features)
    bf = BruteForce(mdp, 2000)
    bf.behaviour_from_density(dens)

    def neg_L(theta: np.ndarray) -> float:
        bf.set_utility(lambda s, a: quad_features(s, a) @ th.as_tensor(theta))
        return -bf.L(1.0)

    opt = minimize(neg_L, np.zeros(3), method="BFGS", options={"gtol": 1e-11})
    assert res.converged
    assert res.meg == pytest.approx(-opt.fun, abs=1e-8)
    np.testing.assert_allclose(res.theta, opt.x, rtol=1e-4, atol=1e-5)
    # a larger class scores at least as much as its member, and never above the certificate
    member = meg_continuous(
        pol, mdp, lambda s, a: quad_features(s, a) @ th.tensor([0.3, -1.0, 2.0], dtype=th.float64)
    )
    assert member.meg <= res.meg <= res.certificate


@pytest.mark.parametrize("d", [1, 2])
def test_uniform_scores_zero_over_every_utility_of_the_state(d):
    mdp = random_continuous_mdp(4, d, 2, seed=1)
    res = meg_continuous_unknown(P.uniform(mdp), mdp, "state")
    assert res.meg == pytest.approx(0.0, abs=1e-13) and res.converged


def test_a_soft_optimal_policy_of_a_class_member_scores_its_certificate():
    mdp = random_continuous_mdp(4, 1, 3, seed=3)
    theta = np.array([1.5, -2.0, 0.7])
    util = lambda s, a: quad_features(s, a) @ th.as_tensor(theta)  # noqa: E731
    pol = P.soft_optimal(mdp, 1.0, util)
    res = meg_continuous_unknown(pol, mdp, quad_features)
    assert res.meg == pytest.approx(res.certificate, rel=1e-9)
    np.testing.assert_allclose(res.theta, theta, rtol=1e-6)


def test_every_utility_of_the_state_for_a_squashed_gaussian():
    mdp = random_continuous_mdp(4, 1, 3, seed=6)
    pol = GaussianPolicy(np.linspace(-1, 1, 4)[:, None], np.full((4, 1), 0.4))
    res = meg_continuous_unknown(pol, mdp, "state")
    known = meg_continuous(pol, mdp, np.arange(4.0))  # one utility of the state
    assert res.converged and known.meg <= res.meg <= res.certificate
    assert res.meg > 0.05


def test_bad_features_are_named():
    mdp = random_continuous_mdp(3, 1, 2, seed=0)
    with pytest.raises(ValueError, match="'state'"):
        meg_continuous_unknown(P.uniform(mdp), mdp, "states")
    with pytest.raises(ValueError, match=r"\(S, F\) with S = 3"):
        meg_continuous_unknown(P.uniform(mdp), mdp, np.eye(4))


def test_a_tabular_mdp_and_bad_options_are_refused():
    import imitation_meg as im

    mdp = random_continuous_mdp(3, 1, 2, seed=0)
    with pytest.raises(TypeError, match=r"meg_continuous_unknown takes a ContinuousMDP") as info:
        meg_continuous_unknown(P.uniform(mdp), im.envs.cliff_world())
    assert str(info.value).endswith("a TabularMDP is scored with imitation_meg.meg_unknown.")
    with pytest.raises(TypeError, match="policy must be a ContinuousPolicy"):
        meg_continuous_unknown(None, mdp)
    for kwargs, message in (
        ({"max_level": -1}, "max_level must be an integer >= 1, got -1"),
        ({"max_level": 0}, "max_level must be an integer >= 1, got 0"),
        ({"max_iter": 0}, "max_iter must be an integer >= 1, got 0"),
        ({"tol": float("nan")}, "tol must be a positive number, got nan"),
        ({"tol": 0.0}, "tol must be a positive number"),
    ):
        with pytest.raises(ValueError, match=message):
            meg_continuous_unknown(P.uniform(mdp), mdp, **kwargs)
