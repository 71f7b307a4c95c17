"""The transition operator's fast paths compute the products of the dense transition matrix."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch as th

from imitation_meg.core.kernels import operators as _operators
from imitation_meg.envs import random_mdp


def _dense_am(mdp, dtype=th.float64):
    """``T`` in the action-major layout ``(A * S, S)`` (row ``a * S + s``), from the MDP alone."""
    S, A = mdp.n_states, mdp.n_actions
    return mdp.dense_transition().transpose(0, 1).reshape(A * S, S).to(dtype)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("dtype", [th.float64, th.float32])
def test_every_path_computes_backup_and_push(layout, k, dtype, rng):
    mdp = random_mdp(30, 3, 4, branching=3, seed=int(rng.integers(1000)))
    S, A = mdp.n_states, mdp.n_actions
    prod = mdp.operator.products(dtype, k)
    assert prod.numpy == (layout == "scipy")
    assert prod.is_sparse == (layout != "dense")
    T_am = _dense_am(mdp, dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == th.float32 else {"rtol": 1e-12, "atol": 1e-12}
    th.testing.assert_close(prod.dense_matrix(), T_am, **tol)
    x = th.as_tensor(rng.standard_normal((S, k)), dtype=dtype)
    c = th.as_tensor(rng.standard_normal((A * S, k)), dtype=dtype)
    mass = prod.sa_buffer(k, x)
    mass.copy_(th.as_tensor(rng.random((A, S, k)), dtype=dtype))
    for alpha in (1.0, 0.9):
        out = th.empty(A * S, k, dtype=dtype)
        # The per-step operands of one-step buffers, as the passes hand them over.
        (out_op,) = prod.operands(out.unsqueeze(0), k)
        (x_op,) = prod.operands(x.unsqueeze(0), k)
        (c_op,) = prod.operands(c.unsqueeze(0), k)
        prod.backup(out_op, x_op, c_op, alpha)
        th.testing.assert_close(out, c + alpha * (T_am @ x), **tol)
    D = th.full((S, k), 7.0, dtype=dtype)  # push overwrites, it does not accumulate
    (D_op,) = prod.operands(D.unsqueeze(0), k)
    prod.push(D_op, prod.flat(mass))
    th.testing.assert_close(D, T_am.T @ mass.reshape(A * S, k), **tol)


def test_state_major_products_read_the_mass_without_a_copy(monkeypatch):
    monkeypatch.setattr(_operators, "LAYOUT_OVERRIDE", "state_major")
    mdp = random_mdp(20, 3, 4, branching=2, seed=3)
    prod = mdp.operator.products(th.float64, 2)
    mass = prod.sa_buffer(2, th.zeros(1, dtype=th.float64))
    assert mass.shape == (3, 20, 2) and mass.transpose(0, 1).is_contiguous()


def test_expect_next_and_push_forward_match_einsum(rng):
    for S, dense in ((20, True), (2000, False)):  # 2000 * 2 * 2000 entries: CSR
        mdp = random_mdp(S, 2, 3, branching=2, seed=1)
        assert mdp.operator.has_dense(th.float64) == dense
        V = th.as_tensor(rng.standard_normal((2, S)))
        m = th.as_tensor(rng.random((2, S, 2)))
        T = th.zeros(S, 2, S, dtype=th.float64)
        T.scatter_add_(-1, mdp.next_state, mdp.prob)  # independent of the operator's caches
        th.testing.assert_close(mdp.expect_next(V), th.einsum("sat,kt->ksa", T, V))
        th.testing.assert_close(mdp.push_forward(m), th.einsum("ksa,sat->kt", m, T))


def test_copies_share_the_operator_on_one_device():
    mdp = random_mdp(10, 2, 3, seed=0)
    assert mdp.with_horizon(7).operator is mdp.operator
    assert mdp.with_utility(np.zeros(10)).operator is mdp.operator
    m32 = mdp.to(dtype=th.float32)
    assert m32.operator is mdp.operator
    # A float64 product on the float32 copy uses the float64 transitions, not rounded copies.
    v = th.linspace(-1.0, 1.0, 10, dtype=th.float64).view(1, 10) / 3.0
    assert th.equal(m32.expect_next(v), mdp.expect_next(v))
    assert m32.expect_next(v.float()).dtype == th.float32


def test_workspaces_are_kept_per_thread():
    op = random_mdp(5, 2, 2, seed=0).operator
    op.keep_workspace("k", "main")
    seen = []
    t = threading.Thread(target=lambda: seen.append(op.workspace("k")))
    t.start()
    t.join()
    assert op.workspace("k") == "main" and seen == [None]
