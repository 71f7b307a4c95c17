"""Known-utility MEG: paper examples, propositions, an independent solver, property tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.envs import cliff_world, random_mdp

from .helpers import mdp_sizes

LOG2 = math.log(2)


# ----------------------------------------------------------------------------- the mouse
def test_mouse_example_one():
    res = im.meg_one_step([0.8, 0.2], [1.0, -1.0])
    assert res.meg == pytest.approx(0.8 * math.log(0.8) + 0.2 * math.log(0.2) + LOG2, rel=1e-12)
    assert round(res.meg, 4) == 0.1927
    assert res.beta == pytest.approx(LOG2, rel=1e-10)
    assert im.meg_one_step([1.0, 0.0], [1.0, -1.0]).meg == pytest.approx(LOG2, rel=1e-14)
    assert im.meg_one_step([0.5, 0.5], [1.0, -1.0]).meg == 0.0
    anti = im.meg_one_step([0.0, 1.0], [1.0, -1.0])
    assert anti.meg == pytest.approx(LOG2) and anti.beta == -math.inf and anti.at_boundary
    assert im.meg_one_step([0.0, 1.0], [1.0, -1.0], signed=True).meg == pytest.approx(-LOG2)
    assert im.meg_one_step([1.0, 0.0], [1.0, -1.0], signed=True).meg == pytest.approx(LOG2)


def test_mouse_as_an_mdp_with_transition_utility():
    # States: 0 start, 1 cheese, 2 no cheese. Action 0 goes to the cheese, action 1 away.
    T = np.zeros((3, 2, 3))
    T[0, 0, 1] = T[0, 1, 2] = 1.0
    T[1, :, 1] = T[2, :, 2] = 1.0
    U = np.zeros((3, 2, 3))
    U[:, :, 1], U[:, :, 2] = 1.0, -1.0
    mdp = im.TabularMDP(T, U, 1)
    pi = np.array([[0.8, 0.2], [0.5, 0.5], [0.5, 0.5]])
    res = im.meg(pi, mdp)
    assert round(res.meg, 4) == 0.1927 and res.beta == pytest.approx(LOG2, rel=1e-9)
    # Scale dependence of the naive plug-in (beta = 1), paper Example 1: the always-cheese mouse
    # has log-likelihood log(e / (e + 1/e)) = -log(1 + e^-2) = -0.127 under U and
    # -log(1 + e^-4) = -0.0181 under 2U (the paper rounds them to -0.13 and -0.018) ...
    always = np.array([[1.0, 0.0]] * 3)
    lp_u = im.soft_value_iteration(mdp, 1.0).log_pi[0, 0, 0, 0]
    lp_2u = im.soft_value_iteration(mdp, 1.0, utility=2 * U).log_pi[0, 0, 0, 0]
    assert float(lp_u) == pytest.approx(-math.log1p(math.exp(-2.0)), rel=1e-14)
    assert float(lp_2u) == pytest.approx(-math.log1p(math.exp(-4.0)), rel=1e-14)
    assert round(float(lp_u), 2) == -0.13 and round(float(lp_2u), 3) == -0.018
    # ... while MEG does not depend on the scale.
    assert im.meg(always, mdp).meg == pytest.approx(im.meg(always, mdp, 2 * U).meg, rel=1e-12)


# ----------------------------------------------------------------------------- an independent solver
def _np_loglik(beta, T, r, H, p0, pi):
    """E_pi[sum_t log pi_beta] with plain numpy (dense T, loops), for cross-checking."""
    S, _A = r.shape
    V = np.zeros(S)
    logps = []
    for _ in range(H):
        Q = beta * r + T @ V
        V = logsumexp(Q, axis=1)
        logps.append(Q - V[:, None])
    logps.reverse()
    d, total = p0.copy(), 0.0
    for t in range(H):
        total += np.sum(d[:, None] * pi[t] * logps[t])
        d = np.einsum("s,sa,sat->t", d, pi[t], T)
    return total


def _np_meg(pi, mdp, bounds):
    T = mdp.dense_transition().numpy()
    r = mdp.reward_sa().numpy()
    H, A = mdp.horizon, mdp.n_actions
    p0 = mdp.initial_state_dist.numpy()
    pi = np.broadcast_to(np.asarray(pi), (H, *r.shape))
    opt = minimize_scalar(
        lambda b: -_np_loglik(b, T, r, H, p0, pi),
        bounds=bounds,
        method="bounded",
        options={"xatol": 1e-12, "maxiter": 500},
    )
    return -opt.fun + H * math.log(A), opt.x


@pytest.mark.parametrize("horizon", [5, 12, 30])
@pytest.mark.parametrize("eps", [0.1, 0.5, 0.9])
def test_cliffworld_epsilon_greedy_matches_independent_solver(horizon, eps):
    mdp = cliff_world(horizon=horizon)
    pi = policies.epsilon_greedy(mdp, eps).numpy()
    ours = im.meg(pi, mdp)
    ref, ref_beta = _np_meg(pi, mdp, (0.0, 5.0))
    assert ours.converged and not ours.at_boundary
    assert ours.meg == pytest.approx(ref, rel=1e-6)
    assert ours.beta == pytest.approx(ref_beta, rel=1e-4)
    assert ours.meg >= ref - 1e-9  # ours is the exact optimum: never below Brent's


@pytest.mark.parametrize("horizon", [5, 30])
def test_cliffworld_optimal_policy_is_the_exact_limit(horizon):
    mdp = cliff_world(horizon=horizon)
    pi = policies.optimal(mdp, tie_break="max_entropy")
    res = im.meg(pi, mdp)
    assert res.at_boundary and res.beta == math.inf
    # At +inf the model is the maximum-entropy optimal policy itself:
    # MEG = H log|A| - E_pi[sum_t H(pi_t)].
    D = im.occupancy_measures(mdp, pi)[:-1]
    ent = -(th.where(pi > 0, pi * pi.log(), th.zeros_like(pi))).sum(-1)
    expected = horizon * math.log(4) - float((D * ent).sum())
    assert res.meg == pytest.approx(expected, rel=1e-12)
    assert res.model_expected_utility == pytest.approx(res.expected_utility, rel=1e-12)
    # The even split of ties is another optimal policy, of lower causal entropy where tied
    # actions lead to different numbers of tied continuations: it is not the model at +inf, and
    # scores below what the model at +inf would give it (Gibbs).
    even = policies.optimal(mdp)
    res_even = im.meg(even, mdp)
    D_even = im.occupancy_measures(mdp, even)[:-1]
    ent_even = -(th.where(even > 0, even * even.log(), th.zeros_like(even))).sum(-1)
    own = horizon * math.log(4) - float((D_even * ent_even).sum())
    assert res_even.meg <= own + 1e-12
    if horizon == 5:  # the goal is not reached: tied first moves with unequal continuations
        assert res_even.meg < own - 1e-3


# ----------------------------------------------------------------------------- propositions
@pytest.mark.parametrize("a, b", [(2.0, 0.0), (0.3, -5.0), (-1.0, 0.0), (-4.0, 3.0)])
def test_prop_3_1_affine_invariance(a, b, rng):
    mdp = random_mdp(15, 3, 6, seed=11)
    pi = rng.dirichlet(np.ones(3), size=15) * 0.5 + 0.5 * policies.optimal(mdp)[0].numpy()
    base = im.meg(pi, mdp)
    moved = im.meg(pi, mdp, a * mdp.utility + b)
    assert moved.meg == pytest.approx(base.meg, rel=1e-8)
    assert moved.beta == pytest.approx(base.beta / a, rel=1e-6)
    signed = im.meg(pi, mdp, a * mdp.utility + b, signed=True)
    assert math.copysign(1, signed.meg) == math.copysign(1, a)


def test_prop_3_2_bounds_uniform_and_unique_optimum():
    mdp = random_mdp(12, 3, 5, utility="state_action", seed=5)
    bound = 5 * math.log(3)
    assert im.meg(policies.uniform(mdp), mdp).meg == 0.0
    opt = im.meg(policies.optimal(mdp), mdp)
    assert opt.meg == pytest.approx(bound, rel=1e-12) and opt.normalized == pytest.approx(1.0)
    assert opt.upper_bound == pytest.approx(bound)


def test_prop_3_3_uninfluenceable_utility_gives_zero(rng):
    S, A = 6, 3
    row = rng.dirichlet(np.ones(S), size=S)
    T = np.repeat(row[:, None, :], A, axis=1)  # actions do not matter
    mdp = im.TabularMDP(T, rng.standard_normal(S), 7, np.full(S, 1 / S))
    pi = rng.dirichlet(np.ones(A), size=S)
    res = im.meg(pi, mdp)
    assert res.meg == 0.0 and res.beta == 0.0


def test_theorem_5_1_interior_optimum_matches_expected_utility(rng):
    mdp = random_mdp(20, 4, 8, seed=8)
    pi = 0.6 * policies.optimal(mdp) + 0.4 * th.as_tensor(rng.dirichlet(np.ones(4), size=(8, 20)))
    res = im.meg(pi, mdp)
    assert not res.at_boundary and res.converged
    assert res.model_expected_utility == pytest.approx(res.expected_utility, rel=1e-8)
    assert abs(res.grad) < 1e-6


def test_time_dependent_policy_and_discount(rng):
    mdp = random_mdp(10, 2, 4, discount=0.7, seed=9)
    pi = 0.5 * policies.optimal(mdp) + 0.25
    res = im.meg(pi, mdp)
    assert 0 < res.meg < res.upper_bound and res.converged
    # dL/dbeta vanishes at the optimum under discounting too (checked by finite differences).
    from imitation_meg.core.known import MEGObjective

    obj = MEGObjective(mdp, pi)
    h = 1e-5 * max(1.0, abs(res.beta))
    L = obj.evaluate(th.tensor([res.beta - h, res.beta + h], dtype=th.float64))[0]
    assert abs(float(L[1] - L[0]) / (2 * h)) < 1e-6


@pytest.mark.parametrize("scale", [1e-200, 1e-15, 1e-8, 1e8, 1e100, 1e200])
def test_extreme_scale_utilities_give_the_same_meg(scale):
    # Issue 12: the 10x4 CliffWorld utility times 1e-15 gave 0.0 (eps-greedy 0.1, H = 30, MEG
    # 26.4856), a false "NaN or inf" error at 1e100, a torch assert at 1e200. MEG depends on
    # the utility only through its direction (Proposition 3.1).
    mdp = cliff_world(horizon=30)
    pi = policies.epsilon_greedy(mdp, 0.1)
    base = im.meg(pi, mdp)
    ref, _ = _np_meg(pi.numpy(), mdp, (0.0, 5.0))  # independent: scipy's bounded Brent
    assert base.meg == pytest.approx(ref, rel=1e-9) and round(base.meg, 4) == 26.4856
    res = im.meg(pi, mdp, scale * mdp.utility)
    assert res.converged and not res.at_boundary
    assert res.meg == pytest.approx(base.meg, rel=1e-12)
    assert res.beta == pytest.approx(base.beta / scale, rel=1e-10)
    assert res.expected_utility == pytest.approx(scale * base.expected_utility, rel=1e-12)
    assert res.model_expected_utility == pytest.approx(res.expected_utility, rel=1e-9)


def test_one_state_utility_at_1e_14():
    # Issue 12: a utility of 1e-14 on one state gave 0.0 instead of 0.6256. The optimum is at a
    # negative beta (the eps-greedy policy of the MDP's own utility avoids that state).
    mdp = cliff_world(horizon=30)
    pi = policies.epsilon_greedy(mdp, 0.1)
    U = np.zeros(40)
    U[5] = 1.0
    ref, ref_beta = _np_meg(pi.numpy(), mdp.with_utility(U), (-20.0, 0.0))
    for c in (1.0, 1e-14):
        res = im.meg(pi, mdp, c * U)
        assert res.converged and round(res.meg, 4) == 0.6256
        assert res.meg == pytest.approx(ref, rel=1e-9)
        assert res.beta * c == pytest.approx(ref_beta, rel=1e-5)


def test_meg_one_step_is_scale_invariant():
    for c in (1e-200, 1e-14, 1.0, 1e14, 1e200):
        res = im.meg_one_step([0.8, 0.2], [c, -c])
        assert res.meg == pytest.approx(0.8 * math.log(0.8) + 0.2 * math.log(0.2) + LOG2, rel=1e-13)
        assert res.beta * c == pytest.approx(0.5 * math.log(4.0), rel=1e-10) and res.converged


def test_result_to_dict_is_json_ready():
    import json

    res = im.meg(policies.optimal(cliff_world(horizon=4)), cliff_world(horizon=4))
    d = res.to_dict()
    assert d["beta"] == "inf" and d["grad"] is None
    json.dumps(d)


def test_meg_validation_errors():
    mdp = random_mdp(5, 2, 3)
    with pytest.raises(TypeError, match="TabularMDP"):
        im.meg(np.full((5, 2), 0.5), "not an mdp")
    with pytest.raises(ValueError, match="must have shape"):
        im.meg(np.full((4, 2), 0.5), mdp)
    with pytest.raises(ValueError, match="no utility attached"):
        im.meg(np.full((5, 2), 0.5), random_mdp(5, 2, 3, utility="none"))
    with pytest.raises(ValueError, match="utility must have shape"):
        im.meg(np.full((5, 2), 0.5), mdp, np.ones(7))
    with pytest.raises(ValueError, match="policy must have the shape"):
        im.meg_one_step([0.5, 0.5, 0.0], [1.0, 0.0])


# ----------------------------------------------------------------------------- properties
@settings(max_examples=25, deadline=None)
@given(
    **mdp_sizes(
        S=(1, 12),
        A=(2, 4),
        H=(1, 8),
        mix=st.floats(0.0, 1.0),
        a=st.sampled_from([-3.0, -0.5, 0.25, 7.0]),
        b=st.floats(-5, 5),
    )
)
def test_property_bounds_and_invariance(seed, S, A, H, mix, a, b):
    rng = np.random.default_rng(seed)
    mdp = random_mdp(S, A, H, seed=rng, utility="state_action")
    pi = mix * policies.optimal(mdp) + (1 - mix) * th.as_tensor(
        rng.dirichlet(np.ones(A), size=(H, S))
    )
    res = im.meg(pi, mdp)
    assert 0.0 <= res.meg <= H * math.log(A) + 1e-12
    assert math.isfinite(res.meg) and res.converged
    moved = im.meg(pi, mdp, a * mdp.utility + b)
    assert moved.meg == pytest.approx(res.meg, rel=1e-7, abs=1e-9)
    cert = float(
        (
            im.occupancy_measures(mdp, pi)[:-1]
            * (math.log(A) + (th.where(pi > 0, pi * pi.log(), th.zeros_like(pi))).sum(-1))
        ).sum()
    )
    assert res.meg <= cert + 1e-9  # Gibbs upper certificate


@settings(max_examples=40, deadline=None)
@given(
    **mdp_sizes(S=(1, 10), A=(2, 4), H=(1, 7)),
    mix=st.floats(0.0, 1.0),
    log_scale=st.floats(-200.0, 200.0),
    negative=st.booleans(),
    shift=st.floats(-5.0, 5.0),
    discount=st.sampled_from([1.0, 0.9]),
    kind=st.sampled_from(["state", "state_action"]),
)
def test_property_scale_and_translation_invariance(
    seed, S, A, H, mix, log_scale, negative, shift, discount, kind
):
    # Proposition 3.1 over 1e-200 .. 1e200, with translations: equal MEG (relative 1e-8), beta
    # mapped by 1 / a, converged throughout; bounds, Gibbs certificate, uniform policy 0.
    rng = np.random.default_rng(seed)
    mdp = random_mdp(S, A, H, seed=rng, utility=kind, discount=discount)
    pi = mix * policies.optimal(mdp) + (1 - mix) * th.as_tensor(
        rng.dirichlet(np.ones(A), size=(H, S))
    )
    base = im.meg(pi, mdp)
    a = (-1.0 if negative else 1.0) * 10.0**log_scale
    U = mdp.utility
    moved = im.meg(pi, mdp, a * U + shift * abs(a) * float(U.max() - U.min()))
    assert base.converged and moved.converged
    assert moved.meg == pytest.approx(base.meg, rel=1e-8, abs=1e-10)
    assert moved.at_boundary == base.at_boundary
    if math.isfinite(base.beta) and base.beta != 0.0:
        assert moved.beta * a == pytest.approx(base.beta, rel=1e-6)
    else:
        assert moved.beta * math.copysign(1.0, a) == base.beta
    assert 0.0 <= base.meg <= H * math.log(A) + 1e-12
    cert = float(
        (
            im.occupancy_measures(mdp, pi)[:-1]
            * (math.log(A) + (th.where(pi > 0, pi * pi.log(), th.zeros_like(pi))).sum(-1))
        ).sum()
    )
    assert base.meg <= cert + 1e-9
    assert im.meg(policies.uniform(mdp), mdp, a * U).meg == 0.0


# ----------------------------------------------------------------------------- solver internals
def test_zero_pass_matches_the_general_pass(torch_passes, rng):
    # the torch passes (the compiled ones run the general pass at beta = 0: test_fused.py)
    from imitation_meg.core.kernels import fused as _fused
    from imitation_meg.core.known import MEGObjective

    for mdp in (cliff_world(horizon=9), random_mdp(30, 3, 7, discount=0.8, seed=3)):
        pi = th.as_tensor(rng.dirichlet(np.ones(mdp.n_actions), size=(mdp.horizon, mdp.n_states)))
        obj = MEGObjective(mdp, pi)
        assert not _fused.usable(mdp, obj.r)
        general = obj.evaluate_batch(th.zeros(1, dtype=th.float64))
        for x, y in zip(obj.evaluate_zero(), general, strict=True):
            th.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_limit_pass_matches_the_limit_recursion(layout, rng):
    # L at +-inf from limit_value_iteration's policy (the reference loop), both signs in one
    # pass or one at a time; on a tie-free MDP L(beta) tends to it.
    from imitation_meg.core.kernels import known_passes as _known_passes
    from imitation_meg.core.known import MEGObjective, objective_reference, sa_occupancy_of
    from imitation_meg.core.soft_vi import limit_value_iteration

    for mdp, eps in ((cliff_world(horizon=7), 0.0), (cliff_world(horizon=7), 0.3)):
        pi = policies.epsilon_greedy(mdp, eps, tie_break="max_entropy")
        obj = MEGObjective(mdp, pi)
        w = sa_occupancy_of(mdp, pi)
        for sign in (1.0, -1.0):
            lim = obj.evaluate_limit(sign)
            (one,) = _known_passes.limit_pass(mdp, obj.r, obj.behaviour, (sign,)).values()
            assert one == pytest.approx(tuple(lim), rel=1e-13, abs=1e-13)
            _, V, lp = limit_value_iteration(mdp, sign=sign)
            ref = float(th.where(w > 0, w * lp, th.zeros_like(w)).sum())
            assert pytest.approx(ref, rel=1e-12) == lim.L or lim.L == ref == -math.inf
            assert lim.model_eu == pytest.approx(float(V[0] @ mdp.initial_state_dist), rel=1e-12)
        # The behaviour is the +inf limit policy itself (eps = 0): L there is minus its entropy.
        if eps == 0.0:
            assert pytest.approx(obj.limit_upper_bound(), rel=1e-12) == obj.evaluate_limit(1.0).L
    mdp = random_mdp(15, 3, 5, utility="state_action", seed=3)  # no ties in the hard Q
    w = sa_occupancy_of(mdp, policies.optimal(mdp))
    lim = MEGObjective(mdp, sa_occupancy=w).evaluate_limit(1.0)
    assert lim.L == 0.0  # the optimal policy itself, deterministic
    far = objective_reference(mdp, w, 1e3)[0]
    assert far == pytest.approx(lim.L, abs=1e-9)


def test_limit_of_l_breaks_ties_by_future_entropy():
    # Hand-derived, H = 3, a state utility received at every step. From state 0 both actions
    # tie in hard value (a0 -> state 1, a1 -> state 2, both reach the +1 state 3 next); state 1
    # has 2 actions tied, state 2 only 1 (its a1 leads to the -1 state 4); at the last step all
    # actions tie. With v1 the log-number of tied continuations, Q_beta(0, a) = beta * 1 +
    # v1(next state) + o(1) with v1(1) = 2 log 2, v1(2) = log 2: the soft policies take a0 with
    # probability 4 / (4 + 2) = 2/3 in the limit (an even split would give 1/2).
    # The behaviour takes a0 at t = 0, splits evenly at state 1 (t = 1), a0 at t = 2:
    # lim L(beta) = log(2/3) + 2 log(1/2), so MEG = 3 log 2 + log(2/3) - 2 log 2.
    S, A = 5, 2
    T = np.zeros((S, A, S))
    T[0, 0, 1] = T[0, 1, 2] = 1.0
    T[1, :, 3] = 1.0
    T[2, 0, 3] = T[2, 1, 4] = 1.0
    T[3, :, 3] = T[4, :, 4] = 1.0
    U = np.array([0.0, 0.0, 0.0, 1.0, -1.0])
    mdp = im.TabularMDP(T, U, 3)
    pi = np.zeros((3, S, A))
    pi[:, :, 0] = 1.0
    pi[1, 1] = [0.5, 0.5]
    from imitation_meg.core.known import MEGObjective

    lim = MEGObjective(mdp, pi).evaluate_limit(1.0)
    assert pytest.approx(math.log(2 / 3) + 2 * math.log(0.5), rel=1e-14) == lim.L
    res = im.meg(pi, mdp)
    assert res.beta == math.inf and res.at_boundary and res.converged
    assert res.meg == pytest.approx(math.log(2 / 3) + math.log(2), rel=1e-14)


@pytest.mark.parametrize("k", [2, 3])
def test_supremum_beyond_the_tied_limit(k):
    # A deterministic optimal policy on CliffWorld with a k-square goal region: hard Q-values tie,
    # so L(beta) rises towards the limit of the soft policies (ties weighted by future entropy),
    # above what an even split of the ties would give. MEG is that limit, exact, not an early
    # stop at a large finite beta.
    mdp = cliff_world(horizon=30, goal_region=k)
    pi = policies.optimal(mdp, tie_break="first")
    res = im.meg(pi, mdp)
    from imitation_meg.core.known import MEGObjective, sa_occupancy_of
    from imitation_meg.core.soft_vi import hard_value_iteration

    obj = MEGObjective(mdp, pi)
    L_big = float(obj.evaluate(th.tensor([1e4], dtype=th.float64))[0][0])
    L_inf = obj.evaluate_limit(1.0).L
    w = sa_occupancy_of(mdp, pi)
    lp_even = hard_value_iteration(mdp)[2]
    L_even = float(th.where(w > 0, w * lp_even, th.zeros_like(w)).sum())
    assert L_big > L_even  # the case this test is about: past the even split
    assert L_big <= L_inf + 1e-9 and L_inf - L_big < 1e-6  # L(beta) rises to the limit
    assert res.meg == pytest.approx(L_inf + 30 * math.log(4), rel=1e-12)
    assert res.converged and res.at_boundary


def test_light_pass_matches_the_full_pass(rng):
    from imitation_meg.core.known import MEGObjective

    for mdp in (cliff_world(horizon=9), random_mdp(30, 3, 7, discount=0.8, seed=5)):
        pi = th.as_tensor(rng.dirichlet(np.ones(mdp.n_actions), size=(mdp.horizon, mdp.n_states)))
        obj = MEGObjective(mdp, pi)
        betas = th.tensor([0.05, 0.7, 3.0], dtype=th.float64)
        full = obj.evaluate2(betas)
        light = obj.evaluate2(betas, second=False)
        for j in (0, 1, 3):  # L, dL, model expected utility
            th.testing.assert_close(light[j], full[j], rtol=1e-12, atol=1e-12)
        assert bool(th.isnan(light[2]).all()) and bool(th.isfinite(full[2]).all())


@pytest.mark.parametrize("eps", [0.0, 0.2, 1.0])
def test_limit_upper_bound_bounds_both_limits(eps, rng):
    from imitation_meg.core.known import MEGObjective

    for mdp in (
        cliff_world(horizon=8),
        cliff_world(horizon=8, goal_region=2),
        random_mdp(20, 3, 6, seed=2),
    ):
        pi = policies.epsilon_greedy(mdp, eps)
        obj = MEGObjective(mdp, pi)
        bound = obj.limit_upper_bound()
        for sign in (1.0, -1.0):
            assert obj.evaluate_limit(sign)[0] <= bound + 1e-12
        if eps == 1.0:  # uniform: the Gibbs bound is L(0) = -H log A
            assert bound == pytest.approx(-mdp.horizon * math.log(mdp.n_actions), rel=1e-12)
        elif eps > 0:  # full support leaves both tie sets at the last step
            assert bound == -math.inf
    # The +inf limit policy itself attains the bound (L(+inf) is minus its causal entropy).
    mdp = cliff_world(horizon=8)
    obj = MEGObjective(mdp, policies.optimal(mdp, tie_break="max_entropy"))
    assert obj.evaluate_limit(1.0)[0] == pytest.approx(obj.limit_upper_bound(), abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    S=st.integers(1, 12),
    A=st.integers(2, 4),
    H=st.integers(1, 5),
    zeros=st.floats(0.0, 0.9),
)
def test_property_last_step_bound_implies_both_limits_are_minus_inf(seed, S, A, H, zeros):
    """When the last two steps' mass leaves the ties of u and of -u, the hard pass agrees: L and
    the limit of L(beta) are -inf at both ends (so skipping that pass loses nothing)."""
    from imitation_meg.core.known import MEGObjective

    gen = np.random.default_rng(seed)
    mdp = random_mdp(S, A, H, seed=seed)
    if gen.random() < 0.3:  # ties in the utility: actions with equal utility
        mdp = mdp.with_utility(th.as_tensor(gen.integers(0, 2, size=(S, A)), dtype=th.float64))
    pi = gen.dirichlet(np.ones(A), size=S) * (gen.random((S, A)) >= zeros)
    pi[pi.sum(-1) == 0, 0] = 1.0
    obj = MEGObjective(mdp, th.as_tensor(pi / pi.sum(-1, keepdims=True)))
    gibbs = obj.behaviour.entropy_bound()
    bound = obj.limit_upper_bound()
    assert bound == gibbs or (bound == -math.inf and obj._leaves_the_last_ties())
    for sign in (1.0, -1.0):
        lim = obj.evaluate_limit(sign)
        assert gibbs + 1e-12 >= lim.L  # Gibbs: no model beats the behaviour's own likelihood
        if obj._leaves_the_last_ties():
            assert -math.inf == lim.L


def test_float32_underflow_skips_the_limit_pass(monkeypatch):
    """A softmax policy with probabilities underflowed to 0 has a Gibbs bound above L(0), but
    its last two steps leave the ties: no hard pass, the same MEG as with the pass."""
    from imitation_meg.core.known import MEGObjective

    mdp = random_mdp(30, 4, 6, seed=1)
    pi = th.softmax(40.0 * th.as_tensor(np.random.default_rng(0).normal(size=(30, 4))), -1)
    pi[pi < 1e-12] = 0.0
    pi = pi / pi.sum(-1, keepdim=True)
    obj = MEGObjective(mdp, pi)
    assert obj.behaviour.entropy_bound() > -6 * math.log(4)  # a bound above L(0)
    assert obj.limit_upper_bound() == -math.inf  # the last two steps leave both tie sets
    fast = im.meg(pi, mdp)
    monkeypatch.setattr(MEGObjective, "_leaves_the_last_ties", lambda self: False)
    slow = im.meg(pi, mdp)
    assert fast.meg == pytest.approx(slow.meg, rel=1e-12, abs=1e-12)
    assert fast.passes == slow.passes - 1


def test_pass_workspaces_shared_on_one_mdp_keep_objectives_apart(rng):
    # Workspaces are kept on the MDP: a second objective (another utility, another policy) on the
    # same MDP must not see the first one's constants.
    from imitation_meg.core.known import MEGObjective

    mdp = cliff_world(horizon=10)
    U2 = th.as_tensor(rng.standard_normal(mdp.n_states))
    pi1, pi2 = policies.epsilon_greedy(mdp, 0.2), policies.soft_optimal(mdp, 0.5, U2)
    betas = th.tensor([0.1, 0.4, 2.0], dtype=th.float64)
    first = MEGObjective(mdp, pi1).evaluate2(betas)
    second = MEGObjective(mdp, pi2, U2).evaluate2(betas)
    fresh = cliff_world(horizon=10)  # no shared cache
    for got, ref in (
        (first, MEGObjective(fresh, pi1).evaluate2(betas)),
        (second, MEGObjective(fresh, pi2, U2).evaluate2(betas)),
    ):
        for a, b in zip(got, ref, strict=True):
            th.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # Copies with another horizon share the operator cache; their workspaces must not collide.
    for H in (6, 14):
        short = mdp.with_horizon(H)
        pi = policies.epsilon_greedy(short, 0.2)
        got = MEGObjective(short, pi).evaluate2(betas)
        ref = MEGObjective(cliff_world(horizon=H), pi).evaluate2(betas)
        for a, b in zip(got, ref, strict=True):
            th.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- fast vs reference
@pytest.mark.parametrize("lean", [False, True])
def test_fused_pass_matches_the_reference_loop(layout, lean, rng, monkeypatch):
    from imitation_meg.core.kernels import known_passes as _known_passes
    from imitation_meg.core.known import MEGObjective, objective_reference, sa_occupancy_of

    if lean:  # no cached occupancy: one slot per step, accumulated per step
        monkeypatch.setattr(_known_passes, "_W_BYTES", 0)
    mdp = random_mdp(25, 3, 6, branching=3, discount=0.9, seed=int(rng.integers(1000)))
    pi = th.as_tensor(rng.dirichlet(np.ones(3), size=(6, 25)))
    w = sa_occupancy_of(mdp, pi)
    betas = [0.0, 0.4, -1.5, 3.0]
    obj = MEGObjective(mdp, pi)
    full = obj.evaluate_batch(th.tensor(betas, dtype=th.float64))
    light = obj.evaluate_batch(th.tensor(betas, dtype=th.float64), second=False)
    for k, beta in enumerate(betas):
        ref = objective_reference(mdp, w, beta)
        for j in range(4):
            assert float(full[j][k]) == pytest.approx(ref[j], rel=1e-11, abs=1e-11)
            if j != 2:
                assert float(light[j][k]) == pytest.approx(ref[j], rel=1e-11, abs=1e-11)
    zero, ref0 = obj.evaluate_zero(), objective_reference(mdp, w, 0.0)
    for j in range(4):
        assert float(zero[j][0]) == pytest.approx(ref0[j], rel=1e-11, abs=1e-11)


def test_reference_derivatives_match_autograd(rng):
    from imitation_meg.core.known import objective_reference, sa_occupancy_of

    mdp = random_mdp(12, 3, 5, discount=0.85, seed=4)
    w = sa_occupancy_of(mdp, th.as_tensor(rng.dirichlet(np.ones(3), size=(5, 12))))
    for beta in (0.0, 0.6, -2.0):
        b = th.tensor(beta, dtype=th.float64, requires_grad=True)
        log_pi = im.soft_value_iteration(mdp, 1.0, utility=b * mdp.utility).log_pi[0]
        L = (w * log_pi).sum()
        (dL,) = th.autograd.grad(L, b, create_graph=True)
        (d2L,) = th.autograd.grad(dL, b)
        ref = objective_reference(mdp, w, beta)
        assert ref[0] == pytest.approx(float(L.detach()), rel=1e-12)
        assert ref[1] == pytest.approx(float(dL.detach()), rel=1e-10, abs=1e-12)
        assert ref[2] == pytest.approx(float(d2L), rel=1e-10)
        # The model's expected utility: E_{pi_beta}[sum_t gamma^t U] from its own occupancy.
        pib = log_pi.detach().exp()
        D = im.occupancy_measures(mdp, pib)[:-1]
        gam = 0.85 ** th.arange(5, dtype=th.float64)
        eu = float((gam.view(5, 1) * D * (pib * mdp.reward_sa()).sum(-1)).sum())
        assert ref[3] == pytest.approx(eu, rel=1e-12)


def test_long_passes_show_progress(monkeypatch, capsys, torch_passes):
    # the torch passes (a compiled pass on a small MDP is short: at most SMALL_MAX_WORK)
    pytest.importorskip("tqdm")
    from imitation_meg import progress

    monkeypatch.setattr(progress, "_LONG_PASS_STEPS", 1)  # every pass counts as long
    mdp = random_mdp(3, 2, 5, seed=0)
    res = im.meg(policies.epsilon_greedy(mdp, 0.3), mdp)
    err = capsys.readouterr().err
    assert res.converged and "MEG pass" in err and "occupancy" in err


def test_nearly_linear_l_with_a_slope_below_tolerance_is_not_extrapolated():
    # A half-random policy on MiniGrid's 5x5 room with the success indicator: beyond beta ~ 100
    # L is nearly linear (dL ~ -2e-11, below the solver's tolerance, d2L ~ -5e-27). The closing
    # Newton gain 0.5 dL^2 / |d2L| must not be taken there: it once put L at 4e4 and MEG at its
    # bound (194.6 instead of 0.90).
    pytest.importorskip("minigrid")
    from imitation_meg.core.known import MEGObjective

    mdp = im.envs.minigrid_mdp("MiniGrid-Empty-5x5-v0", seed=0)
    mix = 0.5 * policies.optimal(mdp) + 0.5 * policies.uniform(mdp)
    u = mdp.metadata["success"].astype(float)
    res = im.meg(mix, mdp, u)
    betas = th.logspace(-1, 7, 81, dtype=th.float64)
    L = MEGObjective(mdp, mix, u).evaluate(betas)[0]
    best = float(L.max()) + res.upper_bound
    assert res.converged and 0.0 <= res.meg <= res.upper_bound
    assert res.meg == pytest.approx(best, abs=1e-8)
