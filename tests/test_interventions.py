"""Interventional MEG: the union construction, its properties and an independent brute force."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize, minimize_scalar

import imitation_meg as im
from imitation_meg.interventions import ShareWarning, meg_interventional, union_mdp

H = 4


def _mdps(seed: int = 0, K: int = 3, S: int = 5, A: int = 3) -> list[im.TabularMDP]:
    return [im.envs.random_mdp(S + k, A, H, seed=seed + 7 * k) for k in range(K)]


def _policies(mdps: list[im.TabularMDP], rng: np.random.Generator) -> list[th.Tensor]:
    return [th.as_tensor(rng.dirichlet(np.ones(m.n_actions), size=m.n_states)) for m in mdps]


# ------------------------------------------------------------------ an independent brute force
def _soft_log_policy(T: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Soft value iteration at beta = 1 for dense ``T (S, A, S)`` and ``r (S, A)``: log pi
    ``(H, S, A)``."""
    S, A = r.shape
    V = np.zeros(S)
    out = np.empty((H, S, A))
    for t in reversed(range(H)):
        Q = r + T @ V
        m = Q.max(1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(Q - m).sum(1))
        out[t] = Q - lse[:, None]
        V = lse
    return out


def _occupancy(T: np.ndarray, p0: np.ndarray, pi: np.ndarray) -> np.ndarray:
    d = p0.copy()
    w = np.empty((H, *pi.shape))
    for t in range(H):
        w[t] = d[:, None] * pi
        d = np.einsum("sa,sap->p", w[t], T)
    return w


def _brute_L(mdps, pis, rewards, weights) -> float:
    """sum_k w_k L_k for per-copy rewards (S_k, A) at beta 1, computed here from scratch."""
    total = 0.0
    for m, pi, r, wk in zip(mdps, pis, rewards, weights, strict=True):
        T = m.dense_transition().numpy()
        w = _occupancy(T, m.initial_state_dist.numpy(), pi.numpy())
        total += wk * float((w * _soft_log_policy(T, r)).sum())
    return total


def _brute_known(mdps, pis, utils, weights) -> float:
    """sup_beta of the weighted log-likelihood by a bounded scalar search and a grid."""
    bound = H * math.log(mdps[0].n_actions)

    def neg(beta: float) -> float:
        return -_brute_L(mdps, pis, [beta * u for u in utils], weights)

    grid = np.concatenate([-np.logspace(-2, 2, 30), [0.0], np.logspace(-2, 2, 30)])
    b0 = grid[int(np.argmin([neg(b) for b in grid]))]
    best = minimize_scalar(neg, bracket=(b0 - 0.5, b0, b0 + 0.5))
    return max(-best.fun, -neg(b0)) + bound


# ------------------------------------------------------------------ properties
def test_one_intervention_is_ordinary_meg(rng) -> None:
    (m,) = _mdps(K=1)
    (pi,) = _policies([m], rng)
    res = meg_interventional([pi], [m])
    plain = im.meg(pi, m)
    assert res.meg == pytest.approx(plain.meg, rel=1e-9)
    assert res.on_distribution == pytest.approx(plain.meg, rel=1e-12)
    assert res.shares[0] == pytest.approx(res.meg, rel=1e-7)
    phi = rng.standard_normal((m.n_states, 2))
    cls = meg_interventional([pi], [m], features=[phi])
    assert cls.meg == pytest.approx(im.meg_unknown(pi, m, features=phi).meg, rel=1e-9)
    labels = [s % 2 for s in range(m.n_states)]
    tgt = meg_interventional([pi], [m], target=[labels])
    assert tgt.meg == pytest.approx(im.meg_target(pi, m, labels).meg, rel=1e-9)


def test_equals_meg_of_the_union_mdp_built_by_hand(rng) -> None:
    mdps = _mdps()
    pis = _policies(mdps, rng)
    weights = np.array([1.0, 2.0, 5.0])
    w = weights / weights.sum()
    sizes = [m.n_states for m in mdps]
    S = sum(sizes)
    T = np.zeros((S, 3, S))
    p0 = np.zeros(S)
    u = np.zeros(S)
    o = 0
    for k, m in enumerate(mdps):
        n = m.n_states
        T[o : o + n, :, o : o + n] = m.dense_transition().numpy()
        p0[o : o + n] = w[k] * m.initial_state_dist.numpy()
        u[o : o + n] = m.utility.numpy()
        o += n
    hand = im.TabularMDP(T, u, H, p0)
    pi = th.cat(pis)
    res = meg_interventional(pis, mdps, weights=weights)
    assert res.meg == pytest.approx(im.meg(pi, hand).meg, rel=1e-9)
    assert sum(res.shares) == pytest.approx(res.meg, rel=1e-7)
    phi = rng.standard_normal((S, 3))
    parts = np.split(phi, np.cumsum(sizes)[:-1])
    cls = meg_interventional(pis, mdps, features=parts, weights=weights)
    assert cls.meg == pytest.approx(im.meg_unknown(pi, hand, features=phi).meg, rel=1e-8)
    assert union_mdp(mdps, weights).n_states == S


def test_unknown_is_at_least_known_for_every_member(rng) -> None:
    mdps = _mdps(seed=3)
    pis = _policies(mdps, rng)
    phis = [rng.standard_normal((m.n_states, 2)) for m in mdps]
    cls = meg_interventional(pis, mdps, features=phis, separate=False)
    for _ in range(6):
        theta = rng.standard_normal(2)
        known = meg_interventional(pis, mdps, [p @ theta for p in phis], separate=False)
        assert known.meg <= cls.meg + 1e-9
    labels = [[s % 3 for s in range(m.n_states)] for m in mdps]
    tgt = meg_interventional(pis, mdps, target=labels, separate=False)
    for _ in range(4):
        values = rng.standard_normal(3)
        known = meg_interventional(
            pis, mdps, [values[np.array(lab)] for lab in labels], separate=False
        )
        assert known.meg <= tgt.meg + 1e-9


@settings(max_examples=15, deadline=None)
@given(
    scale=st.floats(1e-3, 1e3) | st.floats(-1e3, -1e-3),
    shift=st.floats(-50, 50),
    seed=st.integers(0, 20),
)
def test_invariant_to_utility_scale_and_translation(scale: float, shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mdps = _mdps(seed=seed, K=2)
    pis = _policies(mdps, rng)
    utils = [m.utility.numpy() for m in mdps]
    base = meg_interventional(pis, mdps, utils, separate=False)
    moved = meg_interventional(pis, mdps, [scale * u + shift for u in utils], separate=False)
    assert moved.meg == pytest.approx(base.meg, rel=1e-7, abs=1e-10)
    np.testing.assert_allclose(moved.shares, base.shares, rtol=1e-6, atol=1e-9)


def test_agrees_with_a_brute_force(rng) -> None:
    mdps = _mdps(seed=5, K=2)
    # Behaviour close to soft-optimal for the shared utility, so the optimum is interior.
    utils = [m.reward_sa().numpy() for m in mdps]
    pis = []
    for m, u in zip(mdps, utils, strict=True):
        soft = np.exp(_soft_log_policy(m.dense_transition().numpy(), 2.0 * u)[0])
        pis.append(th.as_tensor(0.8 * soft + 0.2 * rng.dirichlet(np.ones(3), size=m.n_states)))
    w = np.array([0.3, 0.7])
    res = meg_interventional(pis, mdps, weights=w)
    assert res.result.at_boundary is False
    assert res.meg == pytest.approx(_brute_known(mdps, pis, utils, w), rel=1e-6)
    # The shares: each copy's log-likelihood at the joint beta.
    for k in range(2):
        Lk = _brute_L([mdps[k]], [pis[k]], [res.result.beta * utils[k]], [1.0])
        assert res.scores[k] == pytest.approx(Lk + H * math.log(3), rel=1e-7, abs=1e-9)
    # A two-feature class, maximised over theta in R^2 from scratch.
    phis = [rng.standard_normal((m.n_states, 2)) for m in mdps]

    def neg(theta: np.ndarray) -> float:
        return -_brute_L(mdps, pis, [np.repeat((p @ theta)[:, None], 3, 1) for p in phis], w)

    best = min(
        (minimize(neg, x0, method="BFGS") for x0 in rng.standard_normal((4, 2))),
        key=lambda o: o.fun,
    )
    cls = meg_interventional(pis, mdps, features=phis, weights=w)
    assert cls.meg == pytest.approx(-best.fun + H * math.log(3), rel=1e-6)


def test_uniform_policy_scores_zero(rng) -> None:
    mdps = _mdps(seed=2)
    pis = [im.policies.uniform(m) for m in mdps]
    assert meg_interventional(pis, mdps).meg == pytest.approx(0.0, abs=1e-10)
    phis = [rng.standard_normal((m.n_states, 3)) for m in mdps]
    assert meg_interventional(pis, mdps, features=phis).meg == pytest.approx(0.0, abs=1e-10)


def test_limits_have_exact_shares() -> None:
    """Optimal policies: the supremum is a limit (beta = inf, a class's direction); the shares
    still add up to the joint value."""
    mdps = [im.envs.cliff_world(horizon=6), im.envs.cliff_world(horizon=6, goal_region=3)]
    pis = [im.policies.optimal(m) for m in mdps]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShareWarning)
        known = meg_interventional(pis, mdps)
        assert math.isinf(known.result.beta) and known.shares_exact
        cells = [im.envs.grid_target(m, "cell") for m in mdps]
        tgt = meg_interventional(pis, mdps, target=cells)
    assert tgt.shares_exact and tgt.result.at_boundary
    assert sum(tgt.shares) == pytest.approx(tgt.meg, rel=1e-7)
    assert tgt.meg >= known.meg - 1e-9


def test_bad_inputs(rng) -> None:
    mdps = _mdps(K=2)
    pis = _policies(mdps, rng)
    with pytest.raises(ValueError, match="has horizon=5 but intervention 0"):
        meg_interventional(pis, [mdps[0], mdps[1].with_horizon(5)])
    with pytest.raises(ValueError, match="weights must be 2 positive"):
        meg_interventional(pis, mdps, weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="at most one of"):
        meg_interventional(pis, mdps, features=[np.eye(5), np.eye(6)], target=[[0] * 5, [0] * 6])
    with pytest.raises(ValueError, match="one policy table per intervention"):
        meg_interventional(pis[:1], mdps)
    with pytest.raises(ValueError, match="features must give one entry per intervention"):
        meg_interventional(pis, mdps, features=[np.eye(5)])
    with pytest.raises(ValueError, match="gives 4 labels for 5 states"):
        meg_interventional(pis, mdps, target=[[0] * 4, [0] * 6])
    with pytest.raises(ValueError, match="reference must index"):
        meg_interventional(pis, mdps, reference=2)
    with pytest.raises(TypeError, match="non-empty list"):
        meg_interventional(pis, mdps[0])


def test_features_that_do_not_fit_together_are_refused_with_the_reason(rng) -> None:
    mdps = _mdps(K=2)
    pis = _policies(mdps, rng)
    # Formerly a raw torch RuntimeError from concatenating (5, 2) and (6, 3).
    with pytest.raises(ValueError, match=r"features have \[2, 3\] columns.*same F columns"):
        meg_interventional(pis, mdps, features=[np.ones((5, 2)), np.ones((6, 3))])
    with pytest.raises(ValueError, match=r"features of intervention 1 .* must have shape \(6, F\)"):
        meg_interventional(pis, mdps, features=[np.ones((5, 2)), np.ones((5, 2))])
    with pytest.raises(ValueError, match=r"features of intervention 0 .*NaN"):
        meg_interventional(pis, mdps, features=[np.full((5, 2), np.nan), np.ones((6, 2))])
    with pytest.raises(ValueError, match=r"features of intervention 1 .*\(6, 3, 6, F\)"):
        meg_interventional(pis, mdps, features=[np.ones((5, 2)), np.ones((6, 3, 2))[..., None]])


def test_state_and_state_action_features_mix_as_one_class(rng) -> None:
    # Copy 0's state features are the same for every action: stacking them with copy 1's
    # (S, A, F) features is the class of copy 0's (S, F) features, as given.
    mdps = _mdps(K=2)
    pis = _policies(mdps, rng)
    phi0 = rng.standard_normal((5, 2))
    phi1 = rng.standard_normal((6, 3, 2))
    mixed = meg_interventional(pis, mdps, features=[phi0, phi1], separate=False)
    same = meg_interventional(
        pis, mdps, features=[np.repeat(phi0[:, None], 3, 1), phi1], separate=False
    )
    assert mixed.meg == pytest.approx(same.meg, rel=1e-9) and mixed.shares_exact


def test_options_of_the_wrong_kind_are_refused(rng) -> None:
    mdps = _mdps(K=2)
    pis = _policies(mdps, rng)
    # Formerly reference=True was taken as intervention 1.
    for ref in (True, 1.0, "1"):
        with pytest.raises(TypeError, match="reference must be the integer index"):
            meg_interventional(pis, mdps, reference=ref)
    assert meg_interventional(pis, mdps, reference=np.int64(1), separate=False).reference == 1
    with pytest.raises(TypeError, match="separate must be True or False"):
        meg_interventional(pis, mdps, separate="no")
    for tol in (0, 1.0, True, "1e-9"):
        with pytest.raises(ValueError, match="tol must be a relative tolerance"):
            meg_interventional(pis, mdps, tol=tol)
    with pytest.raises(ValueError, match=r"names must give one entry.*2 strings"):
        meg_interventional(pis, mdps, names="ab")
    with pytest.raises(TypeError, match="names must be strings"):
        meg_interventional(pis, mdps, names=["a", 2])
    with pytest.raises(ValueError, match=r"weights must be a flat list .* shape \(1, 2\)"):
        meg_interventional(pis, mdps, weights=[[1.0, 1.0]])


def test_discounted_interventions_split_the_union_exactly() -> None:
    # Discounted copies: the union's discounted occupancy is sum_k w_k d_k, so the shares are
    # the copies' discounted log-likelihoods at the joint model, adding up to the joint value,
    # interior and at limits (optimal policies: beta = inf, a class direction).
    mdps = [im.envs.random_mdp(6 + k, 3, None, discount=0.9, seed=k) for k in range(2)]
    for limit, make in (
        (False, lambda m: im.policies.epsilon_greedy(m, 0.3)),
        (True, lambda m: im.policies.optimal(m, tie_break="max_entropy")),
    ):
        pis = [make(m) for m in mdps]
        known = meg_interventional(pis, mdps)
        assert math.isinf(known.result.beta) == limit
        assert known.meg == pytest.approx(im.meg(th.cat(pis), union_mdp(mdps)).meg, rel=1e-10)
        feats = meg_interventional(pis, mdps, features=[np.eye(6), np.eye(7, 6)])
        assert feats.result.at_boundary == limit
        for res in (known, feats):
            assert res.shares_exact and sum(res.shares) == pytest.approx(res.meg, rel=1e-7)
    # One copy twice: the same agent in the same MDP scores its own MEG.
    pi = im.policies.epsilon_greedy(mdps[0], 0.3)
    twice = meg_interventional([pi, pi], [mdps[0], mdps[0]])
    assert twice.meg == pytest.approx(im.meg(pi, mdps[0]).meg, rel=1e-10)
