"""Soft value iteration: parity with imitation, batching, extreme betas, occupancies, autograd."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import seals  # noqa: F401 (registers the seals environment ids)
import torch as th

import imitation_meg as im
from imitation_meg import soft_vi
from imitation_meg.core.kernels import operators as _operators
from imitation_meg.envs import cliff_world, random_mdp

SEALS_IDS = ["seals/CliffWorld7x4-v0", "seals/CliffWorld15x6-v0", "seals/Random-v0"]


@pytest.mark.parametrize("env_id", SEALS_IDS)
@pytest.mark.parametrize("discount", [1.0, 0.9])
def test_mce_partition_twin_matches_imitation(env_id, discount, rng):
    mce_irl = pytest.importorskip("imitation.algorithms.mce_irl")
    env = gym.make(env_id).unwrapped
    reward = rng.standard_normal(env.state_dim)
    for kw in ({}, {"reward": reward}):
        V0, Q0, pi0 = mce_irl.mce_partition_fh(env, discount=discount, **kw)
        V1, Q1, pi1 = soft_vi.mce_partition_fh(env, discount=discount, **kw)
        for a, b in ((V0, V1), (Q0, Q1), (pi0, pi1)):
            assert a.shape == b.shape and b.dtype == np.float64
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("env_id", SEALS_IDS)
def test_mce_occupancy_twin_matches_imitation(env_id, rng):
    mce_irl = pytest.importorskip("imitation.algorithms.mce_irl")
    env = gym.make(env_id).unwrapped
    reward = rng.standard_normal(env.state_dim)
    pi = rng.dirichlet(np.ones(env.action_dim), size=(env.horizon, env.state_dim))
    for kw in ({}, {"reward": reward}, {"pi": pi}, {"pi": pi, "discount": 0.8}):
        D0, Dc0 = mce_irl.mce_occupancy_measures(env, **kw)
        D1, Dc1 = soft_vi.mce_occupancy_measures(env, **kw)
        assert D1.shape == (env.horizon + 1, env.state_dim)
        np.testing.assert_allclose(D1, D0, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(Dc1, Dc0, rtol=1e-10, atol=1e-12)


def test_twins_need_a_horizon():
    env = gym.make("seals/Random-v0").unwrapped
    env.horizon = None
    with pytest.raises(ValueError, match="finite-horizon"):
        soft_vi.mce_partition_fh(env)


def test_batched_equals_one_at_a_time():
    mdp = random_mdp(30, 3, 6, seed=2)
    betas = [0.0, 0.3, -2.0, 7.5, math.inf, -math.inf]
    res = im.soft_value_iteration(mdp, betas)
    assert res.log_pi.shape == (6, 6, 30, 3) and res.V.shape == (6, 6, 30)
    for k, b in enumerate(betas):
        single = im.soft_value_iteration(mdp, b)
        th.testing.assert_close(res.log_pi[k], single.log_pi[0], rtol=1e-13, atol=1e-13)
    th.testing.assert_close(res.pi.sum(-1), th.ones(6, 6, 30, dtype=th.float64))


def test_beta_zero_is_uniform_and_lemma_c1():
    mdp = random_mdp(20, 4, 5, seed=3)
    res = im.soft_value_iteration(mdp, [0.0, 2.0])
    th.testing.assert_close(res.pi[0], th.full((5, 20, 4), 0.25, dtype=th.float64))
    # pi_{beta, U} = pi_{1, beta U}
    scaled = im.soft_value_iteration(mdp, 1.0, utility=2.0 * mdp.utility)
    th.testing.assert_close(res.log_pi[1], scaled.log_pi[0])


def test_hand_computed_two_step_values():
    # One state, two actions with rewards 0 and 1, horizon 2, beta = 1.
    mdp = im.TabularMDP(np.ones((1, 2, 1)), [[0.0, 1.0]], 2)
    res = im.soft_value_iteration(mdp, 1.0)
    v1 = math.log(1 + math.e)
    v0 = math.log(math.exp(v1) + math.exp(1 + v1))
    assert float(res.V[0, 1, 0]) == pytest.approx(v1, rel=1e-14)
    assert float(res.V[0, 0, 0]) == pytest.approx(v0, rel=1e-14)
    assert float(res.pi[0, 0, 0, 1]) == pytest.approx(math.e / (1 + math.e), rel=1e-14)


@pytest.mark.parametrize("beta", [1e6, -1e6, 1e12])
def test_extreme_betas_are_finite_and_match_the_limit(beta):
    for mdp in (cliff_world(horizon=15), random_mdp(25, 3, 8, seed=7)):
        res = im.soft_value_iteration(mdp, [beta, math.copysign(math.inf, beta)])
        assert th.isfinite(res.log_pi[0]).all() and th.isfinite(res.V[0]).all()
        assert not th.isnan(res.log_pi).any() and not th.isnan(res.Q).any()
        th.testing.assert_close(
            res.pi[0].sum(-1), th.ones(mdp.horizon, mdp.n_states, dtype=th.float64)
        )
    # Without ties in the hard Q the finite-beta policy has converged to the hard limit.
    # (CliffWorld has exact ties, which finite betas break by future entropy.)
    th.testing.assert_close(res.pi[0], res.pi[1], atol=1e-12, rtol=0)


def test_infinite_beta_splits_ties_evenly():
    # Two identical best actions and one bad one.
    mdp = im.TabularMDP(np.ones((1, 3, 1)), [[1.0, 1.0, 0.0]], 1)
    res = im.soft_value_iteration(mdp, [math.inf, -math.inf])
    assert res.pi[0, 0, 0].tolist() == [0.5, 0.5, 0.0]
    assert res.pi[1, 0, 0].tolist() == [0.0, 0.0, 1.0]
    assert float(res.V[0, 0, 0]) == 1.0 and float(res.V[1, 0, 0]) == 0.0


def test_occupancy_stationary_and_time_dependent(rng):
    mdp = random_mdp(12, 3, 5, seed=4)
    pi = rng.dirichlet(np.ones(3), size=12)
    D = im.occupancy_measures(mdp, pi)
    assert D.shape == (6, 12)
    th.testing.assert_close(D.sum(-1), th.ones(6, dtype=th.float64))
    D2 = im.occupancy_measures(mdp, np.broadcast_to(pi, (5, 12, 3)))
    th.testing.assert_close(D, D2)
    # Hand check of one step.
    T = mdp.dense_transition().numpy()
    d1 = np.einsum("s,sa,sat->t", mdp.initial_state_dist.numpy(), pi, T)
    np.testing.assert_allclose(D[1].numpy(), d1, rtol=1e-12)


@pytest.mark.parametrize(("S", "sparse"), [(8, False), (12, True)], ids=["dense", "csr"])
def test_soft_vi_is_differentiable_in_the_utility(S, sparse, monkeypatch):
    """Autograd through soft VI equals central differences, on the dense and the CSR path."""
    if sparse:
        monkeypatch.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)
    mdp = random_mdp(S, 2, 4, seed=5)
    u = mdp.utility.clone().requires_grad_(True)

    def v0(x):
        return im.soft_value_iteration(mdp, 0.7, utility=x).V[0, 0] @ mdp.initial_state_dist

    (grad,) = th.autograd.grad(v0(u), u)
    eps = 1e-6
    for s in range(3):
        up, dn = u.detach().clone(), u.detach().clone()
        up[s] += eps
        dn[s] -= eps
        fd = (float(v0(up)) - float(v0(dn))) / (2 * eps)
        assert float(grad[s]) == pytest.approx(fd, rel=1e-6)


def test_bad_betas():
    mdp = random_mdp(4, 2, 2)
    with pytest.raises(ValueError, match="NaN"):
        im.soft_value_iteration(mdp, [1.0, math.nan])
    with pytest.raises(ValueError, match="1-D"):
        im.soft_value_iteration(mdp, [[1.0]])
    with pytest.raises(ValueError, match="no utility attached"):
        im.soft_value_iteration(random_mdp(4, 2, 2, utility="none"), 1.0)


# ----------------------------------------------------------------------------- fast vs reference
@pytest.mark.parametrize("discount", [1.0, 0.8])
def test_fast_pass_matches_the_reference_recursion(layout, discount, rng):
    mdp = random_mdp(30, 3, 7, branching=3, discount=discount, seed=int(rng.integers(1000)))
    for betas in ([0.7], [0.0, 0.3, -2.0, 7.5]):
        ref_lp, ref_Q, ref_V = soft_vi.soft_bellman_reference(mdp, betas)
        fast = im.soft_value_iteration(mdp, betas)
        th.testing.assert_close(fast.log_pi, ref_lp, rtol=1e-12, atol=1e-12)
        th.testing.assert_close(fast.V, ref_V, rtol=1e-12, atol=1e-12)
        th.testing.assert_close(fast.Q, ref_Q, rtol=1e-12, atol=1e-12)
        th.testing.assert_close(fast.pi, ref_lp.exp(), rtol=1e-12, atol=1e-12)


def test_fast_occupancy_matches_the_reference_loop(layout, rng):
    mdp = random_mdp(30, 3, 7, branching=3, seed=int(rng.integers(1000)))
    stationary = th.as_tensor(rng.dirichlet(np.ones(3), size=30))
    timed = th.as_tensor(rng.dirichlet(np.ones(3), size=(7, 30)))
    batch = th.as_tensor(rng.dirichlet(np.ones(3), size=(4, 7, 30)))
    for pi in (stationary, timed, batch):
        fast = im.occupancy_measures(mdp, pi)
        th.testing.assert_close(fast, soft_vi.occupancy_reference(mdp, pi), rtol=1e-12, atol=1e-14)
    # Each step of the reference is the push-forward of T, summed by hand.
    T = mdp.dense_transition().numpy()
    d = mdp.initial_state_dist.numpy()
    for t in range(7):
        d = np.einsum("s,sa,sat->t", d, timed[t].numpy(), T)
    np.testing.assert_allclose(im.occupancy_measures(mdp, timed)[-1].numpy(), d, rtol=1e-12)


def test_reference_recursion_matches_imitation():
    mce_irl = pytest.importorskip("imitation.algorithms.mce_irl")
    env = gym.make("seals/CliffWorld7x4-v0").unwrapped
    V0, Q0, pi0 = mce_irl.mce_partition_fh(env)
    mdp = im.TabularMDP.from_env(env)
    lp, Q, V = soft_vi.soft_bellman_reference(mdp, 1.0)
    np.testing.assert_allclose(V[0].numpy(), V0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Q[0].numpy(), Q0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lp[0].exp().numpy(), pi0, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="finite betas"):
        soft_vi.soft_bellman_reference(mdp, math.inf)
