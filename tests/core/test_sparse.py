"""Sparse (CSR) and dense backups agree; float32 mode stays close to float64; lean MEG storage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core.kernels import operators as _operators
from imitation_meg.core.known import MEGObjective, sa_occupancy_of, solve_beta
from imitation_meg.core.soft_vi import soft_state_visitation
from imitation_meg.envs import cliff_world, random_mdp


def _force_sparse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)


@pytest.mark.parametrize("S, A, B, K", [(7, 2, 3, 1), (50, 3, 4, 1), (50, 3, 4, 5), (1, 2, 1, 3)])
def test_csr_and_dense_paths_match_einsum(S, A, B, K, rng, monkeypatch):
    small = random_mdp(S, A, 3, branching=B, seed=int(rng.integers(1000)))
    T = small.dense_transition()
    V = th.as_tensor(rng.standard_normal((K, S)))
    m = th.as_tensor(rng.random((K, S, A)))
    exp_next = th.einsum("sat,kt->ksa", T, V)
    exp_push = th.einsum("ksa,sat->kt", m, T)
    assert small.operator.has_dense(th.float64)  # dense fast path
    th.testing.assert_close(small.expect_next(V), exp_next, rtol=1e-12, atol=1e-12)
    th.testing.assert_close(small.push_forward(m), exp_push, rtol=1e-12, atol=1e-12)
    _force_sparse(monkeypatch)
    sparse = im.TabularMDP((small.next_state, small.prob), small.utility, 3)
    assert not sparse.operator.has_dense(th.float64)  # CSR path
    th.testing.assert_close(sparse.expect_next(V), exp_next, rtol=1e-12, atol=1e-12)
    th.testing.assert_close(sparse.push_forward(m), exp_push, rtol=1e-12, atol=1e-12)
    # Leading batch dimensions are kept.
    assert sparse.expect_next(V.view(K, 1, S)).shape == (K, 1, S, A)


def test_duplicate_successors_are_summed(monkeypatch):
    _force_sparse(monkeypatch)
    ns = np.array([[[1, 1, 0]], [[0, 0, 0]]])
    pr = np.array([[[0.25, 0.25, 0.5]], [[1.0, 0.0, 0.0]]])
    mdp = im.TabularMDP((ns, pr), [0.0, 1.0], 2)
    out = mdp.expect_next(th.tensor([[2.0, 10.0]], dtype=th.float64))
    assert out[0, :, 0].tolist() == [0.5 * 2 + 0.5 * 10, 2.0]
    assert mdp.push_forward(th.tensor([[[1.0], [0.0]]], dtype=th.float64))[0].tolist() == [0.5, 0.5]


@pytest.mark.parametrize("discount", [1.0, 0.8])
def test_soft_vi_occupancy_and_meg_agree_across_paths(discount, rng, monkeypatch):
    small = random_mdp(40, 3, 7, discount=discount, seed=3)
    pi = rng.dirichlet(np.ones(3), size=(7, 40))
    betas = [0.0, 0.5, -2.0, math.inf]
    dense = (
        im.soft_value_iteration(small, betas),
        im.occupancy_measures(small, pi),
        im.meg(pi, small),
    )
    _force_sparse(monkeypatch)
    sp = im.TabularMDP(
        (small.next_state, small.prob), small.utility, 7, small.initial_state_dist, discount
    )
    sparse = (im.soft_value_iteration(sp, betas), im.occupancy_measures(sp, pi), im.meg(pi, sp))
    th.testing.assert_close(sparse[0].log_pi, dense[0].log_pi, rtol=1e-11, atol=1e-11)
    th.testing.assert_close(sparse[0].V, dense[0].V, rtol=1e-11, atol=1e-11)
    th.testing.assert_close(sparse[1], dense[1], rtol=1e-12, atol=1e-14)
    assert sparse[2].meg == pytest.approx(dense[2].meg, rel=1e-10)


def test_soft_state_visitation_matches_full_outputs(monkeypatch):
    mdp = random_mdp(60, 3, 6, seed=2)
    betas = th.tensor([0.3, 1.0, 2.5], dtype=th.float64)
    res = im.soft_value_iteration(mdp, betas)
    D = im.occupancy_measures(mdp, res.pi)
    for max_bytes in (1, 1 << 30):  # one beta per chunk, and all at once
        V0, visits = soft_state_visitation(mdp, betas, max_bytes=max_bytes)
        th.testing.assert_close(V0, res.V[:, 0], rtol=1e-12, atol=1e-12)
        th.testing.assert_close(visits, D.sum(1), rtol=1e-12, atol=1e-12)
    assert float(visits.sum(-1)[0]) == pytest.approx(mdp.horizon + 1)
    with pytest.raises(ValueError, match="finite betas"):
        soft_state_visitation(mdp, [1.0, math.inf])


def test_float32_error_bounds():
    mdp = cliff_world(horizon=30)
    m32 = mdp.to(dtype=th.float32)
    assert (
        m32.prob.dtype == th.float32
        and m32.expect_next(m32.utility.view(1, -1)).dtype == th.float32
    )
    betas = [0.1, 1.0, 3.0]
    r64 = im.soft_value_iteration(mdp, betas)
    r32 = im.soft_value_iteration(m32, betas)
    assert r32.log_pi.dtype == th.float32
    # Soft values reach |beta * sum_t U| ~ 1e3 here: float32 rounding (6e-8 relative) leaves
    # about 1e-5 absolute error in the probabilities.
    assert float((r32.pi.double() - r64.pi).abs().max()) < 5e-5
    D64 = im.occupancy_measures(mdp, r64.pi)
    D32 = im.occupancy_measures(m32, r32.pi)
    assert float((D32.double() - D64).abs().max()) < 5e-5
    pi = policies.epsilon_greedy(mdp, 0.3)
    a, b = im.meg(pi, mdp), im.meg(pi.float(), m32)
    assert abs(a.meg - b.meg) < 1e-4 * a.upper_bound
    assert b.beta == pytest.approx(a.beta, rel=1e-3)


def test_mixed_dtype_inputs_promote():
    mdp = random_mdp(30, 2, 3, seed=1)
    v32 = th.ones(1, 30, dtype=th.float32)
    assert mdp.expect_next(v32).dtype == th.float64
    m32 = mdp.to(dtype=th.float32)
    assert m32.expect_next(th.ones(1, 30, dtype=th.float64)).dtype == th.float64
    with pytest.raises(TypeError, match=r"float64 or th\.float32"):
        mdp.to(dtype=th.float16)


def test_meg_objective_stores_state_occupancy_only(rng):
    mdp = random_mdp(50, 3, 8, seed=4)
    pi = rng.dirichlet(np.ones(3), size=50)
    obj = MEGObjective(mdp, pi)
    beh = obj.behaviour
    assert beh.D.shape == (8, 50) and beh.sa is None  # (H, S), not (H, S, A)
    ref = sa_occupancy_of(mdp, pi)
    th.testing.assert_close(obj.sa_occupancy, ref)
    via_sa = MEGObjective(mdp, sa_occupancy=ref)
    b = th.tensor([0.0, 0.7, -1.3], dtype=th.float64)
    for x, y in zip(obj.evaluate(b), via_sa.evaluate(b), strict=True):
        th.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert obj.expected_utility == pytest.approx(via_sa.expected_utility, rel=1e-12)


def test_second_derivative_is_exact(rng):
    mdp = random_mdp(25, 3, 6, discount=0.9, seed=6)
    obj = MEGObjective(mdp, rng.dirichlet(np.ones(3), size=(6, 25)))
    b = th.tensor([0.0, 0.4, -1.5, 3.0], dtype=th.float64)
    h = 1e-5
    _, dL, d2L, _ = obj.evaluate2(b)
    Lp, dLp, _, _ = obj.evaluate2(b + h)
    Lm, dLm, _, _ = obj.evaluate2(b - h)
    th.testing.assert_close(dL, (Lp - Lm) / (2 * h), rtol=1e-6, atol=1e-8)
    th.testing.assert_close(d2L, (dLp - dLm) / (2 * h), rtol=1e-6, atol=1e-8)
    assert bool((d2L <= 0).all())  # L is concave


@pytest.mark.parametrize("batch", [1, 2, 64])
def test_solver_same_answer_for_any_batch_size(batch, rng):
    mdp = cliff_world(horizon=12)
    pi = policies.epsilon_greedy(mdp, 0.4)
    ref = im.meg(pi, mdp)
    obj = MEGObjective(mdp, pi)
    obj.batch = batch
    sol = solve_beta(obj)
    assert sol.converged and not sol.at_boundary
    assert sol.L + 12 * math.log(4) == pytest.approx(ref.meg, rel=1e-10)
    assert sol.beta == pytest.approx(ref.beta, rel=1e-8)


def test_meg_pass_history_equals_per_step_accumulation(monkeypatch, torch_passes):
    """The batched accumulation after the loop (small MDPs) equals the per-step one."""
    from imitation_meg.core.kernels import known_passes as _known_passes

    mdp = cliff_world(horizon=12)
    pi = policies.epsilon_greedy(mdp, 0.3)
    betas = th.tensor([0.05, 0.3, 2.0], dtype=th.float64)
    full = MEGObjective(mdp, pi).evaluate2(betas)
    monkeypatch.setattr(_known_passes, "_W_BYTES", 0)  # no cached occupancy: per-step path
    lean = MEGObjective(mdp, pi).evaluate2(betas)
    for a, b in zip(full, lean, strict=True):
        th.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
