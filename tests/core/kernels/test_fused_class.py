"""The compiled passes of the linear classes (numba) against the torch passes, and the solver's
preconditioning against its plain form."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core import likelihood, newton
from imitation_meg.core.kernels import fused as _fused
from imitation_meg.core.kernels import fused_class as _fused_class
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import sa_occupancy_of
from imitation_meg.core.unknown import class_features
from imitation_meg.envs import random_mdp

from ..helpers import mdp_sizes

pytest.importorskip("numba")

KINDS = ("index", "labels", "state", "state_action")


def _features(kind: str, S: int, A: int, rng: np.random.Generator):
    return {
        "index": None,
        "labels": np.eye(4)[np.arange(S) % 4],
        "state": rng.standard_normal((S, 3)),
        "state_action": rng.standard_normal((S, A, 3)),
    }[kind]


def _passes(mdp, w, feats, theta, v, *, compiled: bool, threads: int = 1, store: bool = True):
    """``(L, grad, curvature diagonal, -Hessian @ v)`` by one objective."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_fused_class, "MIN_WORK", 0 if compiled else 10**18)
        mp.setattr(_fused_class, "STORE_MAX_BYTES", 1 << 30 if store else 0)
        before = th.get_num_threads()
        try:
            th.set_num_threads(threads)
            obj = likelihood.ClassObjective(mdp, w.clone(), feats)
            assert (obj._compiled is not None) == compiled
            L = obj.value(theta)
            g = obj.grad()
            c = obj.curvature_diagonal()
            return L, g, c, obj.neg_hvp(v)
        finally:
            th.set_num_threads(before)


@pytest.mark.parametrize("kind", KINDS)
def test_compiled_gradient_and_hessian_products_equal_the_torch_passes(kind, rng):
    S, A = 80, 3
    mdp = random_mdp(S, A, 9, branching=3, discount=0.95, seed=int(rng.integers(1000)))
    pi = th.as_tensor(rng.dirichlet(np.ones(A), size=(9, S)))
    w = sa_occupancy_of(mdp, pi)
    feats = class_features(mdp, _features(kind, S, A, rng))
    theta = th.as_tensor(rng.standard_normal(feats.n_features))
    v = th.as_tensor(rng.standard_normal(feats.n_features))
    ref = _passes(mdp, w, feats, theta, v, compiled=False)
    got = {
        (threads, store): _passes(
            mdp, w, feats, theta, v, compiled=True, threads=threads, store=store
        )
        for threads in (1, 2)
        for store in (True, False)
    }
    for out in got.values():
        assert out[0] == ref[0]  # the value pass is torch's in both
        th.testing.assert_close(out[1], ref[1], rtol=1e-12, atol=1e-13)
        th.testing.assert_close(out[3], ref[3], rtol=1e-11, atol=1e-12)
        assert bool((out[2] > 0).all())
        if kind not in ("index", "labels"):  # one-hot classes use the one-step curvature
            th.testing.assert_close(out[2], ref[2], rtol=1e-12, atol=1e-13)
    for store in (True, False):  # serial (scatter) and parallel (gather): the same bits
        for a, b in zip(got[(1, store)], got[(2, store)], strict=True):
            assert a == b if isinstance(a, float) else th.equal(a, b)


def test_face_restricted_objective_compiled_equals_torch(rng):
    S, A, H = 40, 3, 6
    mdp = random_mdp(S, A, H, branching=2, seed=3)
    allowed = th.ones(H, S, A, dtype=th.bool)
    allowed[:, ::3, 0] = False
    pi = th.as_tensor(rng.dirichlet(np.ones(A), size=(H, S))) * allowed
    pi = pi / pi.sum(-1, keepdim=True)
    w = sa_occupancy_of(mdp, pi)
    feats = class_features(mdp, None)
    theta = th.as_tensor(rng.standard_normal(S))
    v = th.as_tensor(rng.standard_normal(S))
    with pytest.MonkeyPatch.context() as mp:
        outs = []
        for limit in (10**18, 0):
            mp.setattr(_fused_class, "MIN_WORK", limit)
            obj = likelihood.ClassObjective(mdp, w.clone(), feats, allowed=allowed)
            obj.value(theta)
            outs.append((obj.grad(), obj.neg_hvp(v)))
    th.testing.assert_close(outs[0][0], outs[1][0], rtol=1e-12, atol=1e-13)
    th.testing.assert_close(outs[0][1], outs[1][1], rtol=1e-11, atol=1e-12)


@settings(max_examples=12, deadline=None)
@given(**mdp_sizes(S=(2, 25), A=(1, 4), H=(1, 6)), kind=st.sampled_from(KINDS))
def test_property_compiled_hessian_products_equal_the_torch_passes(seed, S, A, H, kind):
    gen = np.random.default_rng(seed)
    mdp = random_mdp(S, A, H, branching=min(3, S), discount=0.9, seed=seed)
    w = sa_occupancy_of(mdp, th.as_tensor(gen.dirichlet(np.ones(A), size=(H, S))))
    feats = class_features(mdp, _features(kind, S, A, gen))
    if feats.n_features == 0:
        return
    theta = th.as_tensor(gen.standard_normal(feats.n_features))
    v = th.as_tensor(gen.standard_normal(feats.n_features))
    ref = _passes(mdp, w, feats, theta, v, compiled=False)
    got = _passes(mdp, w, feats, theta, v, compiled=True)
    scale = float(ref[3].abs().max()) + 1e-300
    assert float((got[3] - ref[3]).abs().max()) <= 1e-11 * scale
    assert float((got[1] - ref[1]).abs().max()) <= 1e-12 * (float(ref[1].abs().max()) + 1.0)


def test_one_step_curvature_is_the_hessian_diagonal_for_one_step_choices():
    """With H = 2 only the first step's choices see a state's reward: the one-step curvature
    is the exact diagonal of the Hessian (by unit Hessian-vector products)."""
    S, A, H = 12, 3, 2
    mdp = random_mdp(S, A, H, branching=3, seed=7)
    w = sa_occupancy_of(mdp, policies.epsilon_greedy(mdp, 0.3))
    feats = class_features(mdp, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_fused_class, "MIN_WORK", 0)
        mp.setattr(likelihood, "_VISITS_IN_CURVATURE", 0.0)
        obj = likelihood.ClassObjective(mdp, w, feats)
        obj.value(th.as_tensor(np.random.default_rng(1).standard_normal(S)))
        obj.grad()
        diag = obj.curvature_diagonal()
        exact = th.stack([obj.neg_hvp(th.eye(S, dtype=th.float64)[j])[j] for j in range(S)])
    th.testing.assert_close(diag, exact, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("features", [None, "state"])
def test_meg_unknown_compiled_and_preconditioned_equals_the_plain_solver(features, monkeypatch):
    """Compiled passes, recycled CG pairs and the one-step curvature change only the path to the
    optimum: the same MEG to the solver's tolerance."""
    mdp = random_mdp(400, 4, 25, branching=4, seed=2)
    pi = policies.soft_optimal(mdp, 2.0)
    feats = None if features is None else np.random.default_rng(0).standard_normal((400, 6))
    monkeypatch.setattr(_fused_class, "MIN_WORK", 10**18)
    monkeypatch.setattr(newton, "_RECYCLE_PAIRS", 0)
    plain = im.meg_unknown(pi, mdp, features=feats)
    monkeypatch.setattr(_fused_class, "MIN_WORK", 0)
    monkeypatch.setattr(newton, "_RECYCLE_PAIRS", 16)
    fast = im.meg_unknown(pi, mdp, features=feats)
    assert plain.converged and fast.converged
    tol = 1e-10 * max(1.0, abs(plain.log_likelihood))
    assert fast.meg == pytest.approx(plain.meg, abs=tol)
    assert fast.extra["passes"] <= plain.extra["passes"]


def test_meg_unknown_gives_the_same_bits_on_one_and_two_threads(monkeypatch):
    monkeypatch.setattr(_threads, "PARALLEL_MIN_WORK", 1)  # every MDP uses the caller's threads
    monkeypatch.setattr(_fused_class, "MIN_WORK", 0)
    mdp = random_mdp(120, 4, 5, branching=4, seed=5)
    pi = policies.epsilon_greedy(mdp, 0.2)
    before = th.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            th.set_num_threads(n)
            results.append(im.meg_unknown(pi, mdp))
    finally:
        th.set_num_threads(before)
    one, two = results
    assert one.meg == two.meg and one.log_likelihood == two.log_likelihood
    assert th.equal(one.extra["theta"], two.extra["theta"])


def test_compiled_passes_run_only_where_they_pay():
    small = random_mdp(30, 3, 5, seed=0)
    w = sa_occupancy_of(small, policies.uniform(small))
    assert not _fused_class.usable(small, w)
    big = random_mdp(20_000, 4, 10, branching=4, seed=0, utility="none")
    w_big = th.zeros(10, 1, 1).expand(10, 20_000, 4)
    assert _fused_class.usable(big, w_big)
    assert not _fused_class.usable(big, w_big.to("meta"))


def test_specialised_calls_without_numba_internals_give_the_same_bits(monkeypatch):
    """The direct entry into a compiled specialisation (numba internals) and numba's own
    dispatch (the fallback) run the same machine code: the same bits."""
    monkeypatch.setattr(_fused_class, "MIN_WORK", 0)
    mdp = random_mdp(150, 4, 6, branching=3, seed=7)
    pi = policies.epsilon_greedy(mdp, 0.2)
    direct = im.meg_unknown(pi, mdp)
    import numba

    overloads = _fused_class._kernel("hvp", serial=True).overloads  # one thread: serial loops
    literal = [sig for sig in overloads if isinstance(sig[-1], numba.types.Literal)]
    assert literal and overloads[literal[0]].entry_point is not None  # the internals it reads
    monkeypatch.setattr(_fused, "DIRECT_ENTRY", False)
    dispatched = im.meg_unknown(pi, mdp)
    assert direct.meg == dispatched.meg and th.equal(
        direct.extra["theta"], dispatched.extra["theta"]
    )
    seen = []
    monkeypatch.setattr(_fused, "DIRECT_ENTRY", True)
    _fused.call_specialised(lambda *a: seen.append(a), (1.5, "x"), 4, 2)  # no ``overloads``
    assert seen == [(1.5, "x", 4, 2)]
