"""The discounted infinite-horizon setting against an independent brute force.

The brute force is its own code: stationary soft value iteration by plain sweeps until nothing
changes, in extended precision (numpy ``longdouble``), on dense transitions; the discounted
occupancy by a dense linear solve; the supremum over finite betas on a grid up to
``|beta| * spread = 1e6`` refined by a bounded scalar search; for linear classes, BFGS on the
brute-force log-likelihood with its own gradient ``phi^T (mu_pi - mu_theta)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core import discounted
from imitation_meg.core.trajectories import sample_trajectories
from imitation_meg.envs import notebook_grid, random_mdp

from .helpers import brute_sup

LD = np.longdouble


# ----------------------------------------------------------------------------- brute force
def _soft_vi(T: np.ndarray, r: np.ndarray, gamma: float) -> np.ndarray:
    """Stationary soft log-policy of ``r (S, A)`` by plain sweeps (extended precision)."""
    T, r = T.astype(LD), r.astype(LD)
    V = np.zeros(r.shape[0], dtype=LD)
    for _ in range(200_000):
        Q = r + LD(gamma) * (T @ V)
        m = Q.max(-1, keepdims=True)
        V_new = m[:, 0] + np.log(np.exp(Q - m).sum(-1))
        # To the rounding floor of extended precision: the sweeps' remaining error is the last
        # change times gamma / (1 - gamma), ~20x for gamma = 0.95 at |V| ~ 1e7.
        done = np.abs(V_new - V).max() <= LD(8) * np.finfo(LD).eps * (1 + np.abs(V_new).max())
        V = V_new
        if done:
            break
    Q = r + LD(gamma) * (T @ V)
    return Q - V[:, None]


def _occ(T: np.ndarray, pi: np.ndarray, p0: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted state occupancy by a dense linear solve."""
    P = np.einsum("sa,sax->sx", pi, T)
    return np.linalg.solve(np.eye(len(p0)) - gamma * P.T, p0)


def _L(T, r, gamma, pi, p0, beta) -> float:
    lp = _soft_vi(T, beta * r, gamma)
    w = (_occ(T, pi, p0, gamma)[:, None] * pi).astype(LD)
    return float(np.where(w > 0, w * lp, LD(0)).sum())


def _brute_known(T, r, gamma, pi, p0) -> float:
    bound = math.log(r.shape[1]) / (1 - gamma)
    f = lambda b: _L(T, r, gamma, pi, p0, b)  # noqa: E731
    return min(max(brute_sup(f, float(np.ptp(r)), bound, n_grid=28), 0.0), bound)


def _brute_unknown(T, phi, gamma, pi, p0) -> float:
    """sup_theta L(theta) for the state features ``phi (S, F)`` by BFGS (full-support
    behaviours: the optimum is interior)."""
    _S, A = pi.shape
    mu = _occ(T, pi, p0, gamma)[:, None] * pi

    def neg(theta):
        r = np.repeat((phi @ theta)[:, None], A, 1)
        lp = _soft_vi(T, r, gamma).astype(float)
        model = np.exp(lp)
        mu_m = _occ(T, model, p0, gamma)[:, None] * model
        return -float((mu * lp).sum()), -phi.T @ (mu - mu_m).sum(1)

    res = minimize(
        neg,
        np.zeros(phi.shape[1]),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-11, "maxiter": 2000},
    )
    return -res.fun + math.log(A) / (1 - gamma)


def _case(seed: int, *, full_support: bool = False, gammas=(0.5, 0.8, 0.9)):
    rng = np.random.default_rng(seed)
    S, A = int(rng.integers(2, 7)), int(rng.integers(2, 4))
    gamma = float(rng.choice(gammas))
    T = rng.dirichlet(np.ones(S) * 0.5, size=(S, A)) * (rng.random((S, A, S)) < 0.6)
    T[T.sum(-1) == 0, 0] = 1.0
    T /= T.sum(-1, keepdims=True)
    if rng.random() < 0.5:  # 0/1 utilities: ties
        r = rng.integers(0, 2, (S, A)).astype(float)
        if np.ptp(r) == 0:
            r[0, 0] = 1 - r[0, 0]
    else:
        r = rng.standard_normal((S, A))
    style = 0 if full_support else int(rng.integers(0, 3))
    if style == 0:
        pi = rng.dirichlet(np.ones(A), S)
    elif style == 1:
        pi = np.eye(A)[rng.integers(0, A, S)]
    else:
        pi = rng.dirichlet(np.ones(A), S) * (rng.random((S, A)) < 0.6)
        pi[pi.sum(-1) == 0, 0] = 1.0
        pi /= pi.sum(-1, keepdims=True)
    p0 = rng.dirichlet(np.ones(S))
    mdp = im.TabularMDP(T, r, None, p0, discount=gamma)
    return mdp, T, r, gamma, pi, p0


# ----------------------------------------------------------------------------- known utility
def _known_against_the_brute_force(seed: int, gammas=(0.5, 0.8, 0.9)) -> None:
    mdp, T, r, gamma, pi, p0 = _case(seed, gammas=gammas)
    res = im.meg(pi, mdp)
    assert res.converged
    assert 0.0 <= res.meg <= math.log(mdp.n_actions) / (1 - gamma) + 1e-12
    assert res.upper_bound == pytest.approx(math.log(mdp.n_actions) / (1 - gamma), rel=1e-15)
    assert res.meg == pytest.approx(_brute_known(T, r, gamma, pi, p0), abs=1e-8)
    # A one-member class is the known utility.
    one = im.meg_unknown(pi, mdp, features=r[:, :, None])
    assert one.meg == pytest.approx(res.meg, abs=1e-8)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 100_000),
    log_a=st.floats(-30, 30),
    b=st.floats(-100, 100),
    neg=st.booleans(),
)
def test_property_scale_and_translation_invariance(seed, log_a, b, neg):
    mdp, _, r, _, pi, _ = _case(seed)
    a = (-1.0 if neg else 1.0) * 10.0**log_a
    base = im.meg(pi, mdp)
    moved = im.meg(pi, mdp, a * (r + b))  # shifted, then scaled: no digits lost to the shift
    assert moved.meg == pytest.approx(base.meg, rel=1e-8, abs=1e-10)
    if math.isfinite(base.beta):
        assert moved.beta == pytest.approx(base.beta / a, rel=1e-6)


def test_uniform_scores_zero_and_soft_optimal_scores_its_own_likelihood():
    mdp = notebook_grid()
    assert im.meg(policies.uniform(mdp), mdp).meg == 0.0
    assert im.meg_unknown(policies.uniform(mdp), mdp).meg == 0.0
    # A soft-optimal policy at beta = 2 is its own best model: beta recovered, MEG = its Gibbs.
    pi = policies.soft_optimal(mdp, 2.0)
    res = im.meg(pi, mdp)
    assert res.beta == pytest.approx(2.0, rel=1e-9) and not res.at_boundary
    dyn = discounted.Dynamics.of(mdp)
    p = pi.numpy()
    w = discounted.occupancy(dyn, p)[:, None] * p
    own = float((w * np.log(p)).sum()) + math.log(4) / (1 - 0.9)
    assert res.meg == pytest.approx(own, rel=1e-10)
    assert res.extra["bellman_residual"] <= 1e-10


def test_limits_weight_ties_by_what_follows():
    # Three states: state 0 moves to state 1 (a0) or state 2 (a1); 1 and 2 are absorbing and
    # give utility 1 for both actions in state 1 and for a0 only in state 2. Both first moves are
    # optimal; the limit of the soft policies weights them by the discounted entropy after them,
    # v1(1) = gamma log 2 / (1 - gamma) against v1(2) = 0 (exp(gamma v1) each), not evenly.
    gamma = 0.5
    T = np.zeros((3, 2, 3))
    T[0, 0, 1] = T[0, 1, 2] = 1.0
    T[1, :, 1] = T[2, :, 2] = 1.0
    U = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    mdp = im.TabularMDP(T, U, None, discount=gamma)
    lim = policies.optimal(mdp, tie_break="max_entropy").numpy()
    weight = math.exp(gamma * math.log(2) / (1 - gamma))  # = 2
    np.testing.assert_allclose(lim[0], [weight / (weight + 1), 1 / (weight + 1)], rtol=1e-12)
    # The policy taking a1 then a0: L tends to log(1/3) (the rest is certain).
    pi = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    res = im.meg(pi, mdp)
    assert res.beta == math.inf and res.converged
    assert res.meg == pytest.approx(math.log(2) / (1 - gamma) + math.log(1 / 3), rel=1e-12)


def test_time_dependent_input_and_trajectories_are_refused():
    mdp = notebook_grid()
    with pytest.raises(ValueError, match="stationary"):
        im.meg(np.full((3, 25, 4), 0.25), mdp)
    with pytest.raises(ValueError, match="infinite-horizon"):
        im.meg(None, mdp, sa_occupancy=np.full((3, 25, 4), 1 / 100))
    with pytest.raises(ValueError, match="discount below 1"):
        im.TabularMDP(np.ones((2, 2, 2)) / 2, np.zeros(2), None, discount=1.0)
    with pytest.raises(ValueError, match="finite horizon"):
        im.occupancy_measures(mdp, policies.uniform(mdp))
    with pytest.raises(ValueError, match="trajectory estimates need a finite horizon"):
        sample_trajectories(mdp, policies.uniform(mdp), 3)
    data = sample_trajectories(mdp.with_horizon(4), policies.uniform(mdp), 3)
    with pytest.raises(ValueError, match="trajectory estimates need a finite horizon"):
        im.meg_from_trajectories(data, mdp)
    with pytest.raises(ValueError, match="finite horizon"):
        im.meg_unknown(policies.uniform(mdp), mdp, utility_model="mlp")


def test_sparse_and_dense_transitions_and_both_linear_solvers_agree(monkeypatch):
    mdp = random_mdp(60, 3, None, branching=3, discount=0.95, seed=1)
    dense = im.TabularMDP(
        mdp.dense_transition(), mdp.utility, None, mdp.initial_state_dist, discount=0.95
    )
    pi = policies.epsilon_greedy(mdp, 0.2)
    a, b = im.meg(pi, mdp), im.meg(pi, dense)
    assert a.meg == pytest.approx(b.meg, rel=1e-10)
    u_lu = im.meg_unknown(pi, mdp, features=mdp.utility[:, None])
    monkeypatch.setattr(discounted, "LU_MAX_STATES", 10)  # Krylov solves instead of LU
    c = im.meg(pi, random_mdp(60, 3, None, branching=3, discount=0.95, seed=1))
    assert c.meg == pytest.approx(a.meg, rel=1e-9) and c.converged
    u_kr = im.meg_unknown(pi, mdp, features=mdp.utility[:, None])
    assert u_kr.meg == pytest.approx(u_lu.meg, rel=1e-9)


# ----------------------------------------------------------------------------- linear classes
def _unknown_against_the_brute_force(seed: int, gammas=(0.5, 0.8, 0.9)) -> None:
    mdp, T, _r, gamma, pi, p0 = _case(seed, full_support=True, gammas=gammas)
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((mdp.n_states, int(rng.integers(1, 4))))
    res = im.meg_unknown(pi, mdp, features=phi)
    assert res.converged and res.extra["attained_by"] == "interior"
    assert res.meg == pytest.approx(_brute_unknown(T, phi, gamma, pi, p0), abs=1e-8)
    gibbs = res.extra["certificate"]
    assert 0.0 <= res.meg <= gibbs + 1e-10
    # Unknown over a class dominates every member's known MEG.
    for _ in range(2):
        U = phi @ rng.standard_normal(phi.shape[1])
        assert im.meg(pi, mdp, U).meg <= res.meg + 1e-9


@pytest.mark.parametrize(
    "check",
    [_known_against_the_brute_force, _unknown_against_the_brute_force],
    ids=["known", "unknown"],
)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000))
def test_property_meg_matches_the_brute_force(check, seed):
    check(seed)


@pytest.mark.expensive
@pytest.mark.parametrize(
    ("check", "gammas"),
    [
        (_known_against_the_brute_force, (0.5, 0.8, 0.9, 0.95, 0.99)),
        (_unknown_against_the_brute_force, (0.5, 0.8, 0.9, 0.95)),
    ],
    ids=["known", "unknown"],
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000))
def test_property_meg_matches_the_brute_force_many(check, gammas, seed):
    check(seed, gammas=gammas)


def test_every_state_utility_reaches_a_limit_policy_gibbs_bound():
    # The max-entropy optimal policy of a state utility is the limit of that member's soft
    # policies: the class of every state utility attains its Gibbs bound, at infinity.
    mdp = notebook_grid()
    pi = policies.optimal(mdp, tie_break="max_entropy")
    res = im.meg_unknown(pi, mdp)
    assert res.converged and res.at_boundary and res.extra["attained_by"] == "limit"
    assert res.meg == pytest.approx(res.extra["certificate"], rel=1e-10)
    assert res.meg == pytest.approx(im.meg(pi, mdp).meg, rel=1e-10)
    target = im.meg_target(pi, mdp, [s // 5 for s in range(25)])  # the row
    assert 0.0 < target.meg <= res.meg + 1e-10


def test_a_fixed_point_short_of_its_tolerance_says_so(monkeypatch):
    mdp = notebook_grid()
    pi = policies.epsilon_greedy(mdp, 0.3)
    monkeypatch.setattr(discounted, "_NEWTON_MAX", 1)  # one soft policy iteration step
    res = im.meg(pi, mdp)
    assert not res.converged and res.extra["bellman_residual"] > discounted.CONVERGED_RESIDUAL
    unk = im.meg_unknown(pi, mdp)
    assert not unk.converged
    monkeypatch.undo()
    full = im.meg(pi, mdp)
    assert full.converged and full.extra["bellman_residual"] <= 1e-11


# ----------------------------------------------------------------------------- discounts near 1
@pytest.mark.parametrize("gamma", [1 - 1e-9, 1 - 1e-10, 0.9999999999, 1 - 1e-12, 1 - 1e-13])
def test_a_discount_closer_to_1_than_the_solvers_resolve_is_refused(gamma):
    ng = notebook_grid()
    with pytest.raises(ValueError, match=r"too close to 1.*0\.99999999.*finite horizon"):
        im.TabularMDP(ng.dense_transition(), ng.utility, horizon=None, discount=gamma)
    with pytest.raises(ValueError, match=rf"discount {gamma} is too close to 1"):
        ng.with_horizon(None, gamma)
    # A finite horizon discounts only the utility: any discount in [0, 1] stays allowed.
    assert ng.with_horizon(50, gamma).discount == gamma


def test_the_largest_discount_is_accepted_as_the_literal_and_as_1_minus_1e_8():
    ng = notebook_grid()
    assert discounted.DISCOUNT_MAX == 0.99999999
    for gamma in (0.99999999, 1 - 1e-8, discounted.DISCOUNT_MAX):
        assert ng.with_horizon(None, gamma).discount == gamma


def test_the_normalized_meg_keeps_its_trend_up_to_the_largest_discount():
    # (1 - gamma) MEG is smooth in gamma and changes by O(1 - gamma): 3.5e-7 from 1 - 1e-6 to
    # 1 - 1e-7, so about 3.5e-8 more at 1 - 1e-8 (a Newton stop short of the fixed point gave a
    # jump of 5e-7 there, beta 1.13714 instead of 1.13741).
    ng = notebook_grid()
    f, beta = [], []
    for k in (6, 7, 8):
        mdp = ng.with_horizon(None, 1 - 10.0**-k)
        res = im.meg(policies.epsilon_greedy(mdp, 0.3), mdp)
        assert res.converged and not res.at_boundary
        f.append(res.normalized * math.log(4))
        beta.append(res.beta)
    assert f[1] - f[0] == pytest.approx(3.47e-7, rel=0.01)
    assert 0 < f[2] - f[1] < 0.15 * (f[1] - f[0])
    assert abs(beta[2] - beta[1]) < 0.15 * abs(beta[1] - beta[0])


def test_soft_values_near_the_largest_discount_are_not_stopped_in_newtons_global_phase():
    # At 1 - 1e-8 the values are ~1.4e8; two Newton steps that do not halve a residual of 0.5
    # (one step's reward) are the global phase, not the rounding floor: the log-policy has to
    # reach the fixed point, whose Bellman residual is ~1e-7 (the rounding of the values).
    mdp = notebook_grid().with_horizon(None, discounted.DISCOUNT_MAX)
    dyn = discounted.Dynamics.of(mdp)
    sv = discounted.soft_values(dyn, mdp.reward_sa().numpy(), 1.0)
    assert sv.residual < 1e-6 and sv.steps >= 5
    # The policy is the same at 1 - 1e-7 to O(1 - gamma) (2e-6; a stop after 3 steps: 0.05).
    near = discounted.soft_values(
        discounted.Dynamics.of(notebook_grid().with_horizon(None, 1 - 1e-7)),
        mdp.reward_sa().numpy(),
        1.0,
    )
    assert np.abs(sv.log_pi - near.log_pi).max() < 1e-5


def test_hard_values_near_the_largest_discount_tie_only_what_ties():
    # CliffWorld's Q* has action gaps of 0.011 (utility -1 / -10 / +10) under values of 1e9 at
    # 1 - 1e-8: ties relative to max |Q| (1e-9 * 1e9 = 1) would merge them, and the optimal
    # policy would split states where one action is best.
    cliff = im.envs.cliff_world(horizon=10)
    ref = policies.optimal(cliff.with_horizon(None, 0.999)).numpy()
    for gamma in (1 - 1e-7, discounted.DISCOUNT_MAX):
        mdp = cliff.with_horizon(None, gamma)
        np.testing.assert_array_equal(policies.optimal(mdp).numpy(), ref)
        Q, V = discounted.hard_values(discounted.Dynamics.of(mdp), mdp.reward_sa().numpy())
        gap = V[:, None] - Q
        assert 0.005 < gap[gap > 1e-6].min() < 0.02  # the smallest real gap stays untied
        np.testing.assert_array_equal(discounted.ties(Q), ref > 0)


def test_the_command_line_refuses_a_discount_it_cannot_solve_in_one_line(capsys):
    # Formerly 411.07, normalized 0.0000, converged yes (cliff world at 1 - 1e-10).
    from imitation_meg.cli import main

    argv = ["score", "--cliff-world", "--policy", "epsilon-greedy", "--epsilon", "0.1"]
    assert main([*argv, "--horizon", "inf", "--discount", "0.9999999999"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("imitation-meg score: error: discount 0.9999999999 is too close to 1")
    assert "\n" not in err and "0.99999999 (1 - 1e-8)" in err
    assert main([*argv, "--horizon", "inf", "--discount", "0.99999999"]) == 0
    out = capsys.readouterr().out
    assert "0.6933" in out and "yes" in out  # normalized 0.693, as at 1 - 1e-6
