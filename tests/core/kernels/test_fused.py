"""The compiled fused MEG passes (numba) against the reference loop and the torch passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core.kernels import fused as _fused
from imitation_meg.core.kernels import operators as _operators
from imitation_meg.core.known import MEGObjective, objective_reference, sa_occupancy_of
from imitation_meg.envs import random_mdp

from ..helpers import mdp_sizes

pytest.importorskip("numba")


#: The two compiled forms: one parallel call per step (large MDPs) and one call per pass.
FORMS = ("steps", "whole")


def _force(mp, form):
    """Compiled passes on every sparse MDP in ``form``, and small MDPs sparse (as large ones
    are)."""
    mp.setattr(_fused, "FUSED_MIN_SA", 0)
    mp.setattr(_fused, "SMALL_MAX_WORK", -1 if form == "steps" else 10**12)
    mp.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)


@pytest.fixture(params=FORMS)
def fused(request, monkeypatch):
    """Compiled passes on every sparse MDP, in each of the two forms."""
    _force(monkeypatch, request.param)
    return request.param


def _check_against_reference(obj, mdp, w, betas, rel):
    full = obj.evaluate_batch(th.tensor(betas, dtype=th.float64))
    light = obj.evaluate_batch(th.tensor(betas, dtype=th.float64), second=False)
    for k, beta in enumerate(betas):
        ref = objective_reference(mdp.to(dtype=th.float64), w, beta)
        for j in range(4):
            assert float(full[j][k]) == pytest.approx(ref[j], rel=rel, abs=rel)
            if j != 2:
                assert float(light[j][k]) == pytest.approx(ref[j], rel=rel, abs=rel)
        assert np.isnan(float(light[2][k])) and np.isnan(float(light[4][k]))
    zero, ref0 = obj.evaluate_zero(), objective_reference(mdp.to(dtype=th.float64), w, 0.0)
    for j in range(4):
        assert float(zero[j][0]) == pytest.approx(ref0[j], rel=rel, abs=rel)


@pytest.mark.parametrize("given_as", ["stationary", "time_varying", "occupancy"])
def test_fused_pass_matches_the_reference_loop(fused, given_as, rng):
    mdp = random_mdp(40, 3, 7, branching=3, discount=0.9, seed=int(rng.integers(1000)))
    assert _fused.usable(mdp, mdp.reward_sa())
    shape = (40,) if given_as == "stationary" else (7, 40)
    pi = th.as_tensor(rng.dirichlet(np.ones(3), size=shape))
    w = sa_occupancy_of(mdp, pi)
    obj = MEGObjective(mdp, sa_occupancy=w) if given_as == "occupancy" else MEGObjective(mdp, pi)
    _check_against_reference(obj, mdp, w, [0.0, 0.4, -1.5, 3.0, 40.0], rel=1e-11)


def test_fused_float32_pass_is_close_to_the_float64_reference(fused, rng):
    mdp = random_mdp(50, 4, 8, branching=2, seed=3, dtype=th.float32)
    pi = th.as_tensor(rng.dirichlet(np.ones(4), size=50), dtype=th.float32)
    w = sa_occupancy_of(mdp.to(dtype=th.float64), pi.double())
    _check_against_reference(MEGObjective(mdp, pi), mdp, w, [0.3, -2.0], rel=2e-5)


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=15, deadline=None)
@given(**mdp_sizes(S=(2, 30), A=(1, 4), H=(1, 6)), beta=st.floats(-30.0, 30.0, allow_nan=False))
def test_property_fused_pass_equals_the_reference(form, seed, S, A, H, beta):
    """Any sparse MDP, policy and beta: either compiled pass is the reference recursion to
    rounding."""
    with pytest.MonkeyPatch.context() as mp:
        _force(mp, form)
        mdp = random_mdp(S, A, H, branching=min(2, S), discount=0.95, seed=seed)
        gen = np.random.default_rng(seed)
        pi = th.as_tensor(gen.dirichlet(np.ones(A), size=(H, S)))
        got = MEGObjective(mdp, pi).evaluate_batch(th.tensor([beta], dtype=th.float64))
        ref = objective_reference(mdp, sa_occupancy_of(mdp, pi), beta)
        for j in range(4):
            assert float(got[j][0]) == pytest.approx(ref[j], rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("form", FORMS)
def test_fused_meg_equals_the_torch_passes_meg(form, monkeypatch):
    monkeypatch.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)
    mdp = random_mdp(300, 4, 20, branching=4, seed=5)
    for eps in (0.1, 0.6):
        pi = policies.epsilon_greedy(mdp, eps)
        monkeypatch.setattr(_fused, "FUSED_MIN_SA", 10**12)
        monkeypatch.setattr(_fused, "SMALL_MAX_WORK", -1)
        assert not _fused.usable(mdp, mdp.reward_sa())
        ref = im.meg(pi, mdp)
        _force(monkeypatch, form)
        got = im.meg(pi, mdp)
        assert got.converged and ref.converged
        assert got.meg == pytest.approx(ref.meg, rel=1e-10, abs=1e-10)
        assert got.beta == pytest.approx(ref.beta, rel=1e-8)


def test_fused_pass_gives_the_same_bits_with_any_number_of_threads(fused):
    mdp = random_mdp(500, 3, 10, branching=3, seed=2)
    obj = MEGObjective(mdp, policies.epsilon_greedy(mdp, 0.2))
    betas = th.tensor([0.7], dtype=th.float64)
    before = th.get_num_threads()
    try:
        th.set_num_threads(1)
        one = obj.evaluate_batch(betas)
        th.set_num_threads(2)
        two = obj.evaluate_batch(betas)
    finally:
        th.set_num_threads(before)
    for a, b in zip(one, two, strict=True):
        assert th.equal(a, b)


def test_fused_pass_runs_only_where_it_pays(monkeypatch):
    small = random_mdp(20, 3, 5, seed=0)  # dense operator, 20 x 3 x 20 x 5 transition-steps
    assert _fused.small(small) and _fused.usable(small, small.reward_sa())  # one call per pass
    assert not _fused.usable(small, small.reward_sa().to("meta"))  # not on CPU
    monkeypatch.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)
    mid = random_mdp(3000, 3, 100, branching=4, seed=0)  # 3.6e6 transition-steps, 9000 pairs
    assert not _fused.small(mid) and not _fused.usable(mid, mid.reward_sa())  # the torch passes
    monkeypatch.setattr(_fused, "FUSED_MIN_SA", 0)
    assert _fused.usable(mid, mid.reward_sa())  # one parallel call per step
    monkeypatch.setattr(_fused, "_HAS_NUMBA", False)  # an install without the ``fast`` extra
    assert not _fused.usable(small, small.reward_sa())
    assert not _fused.usable(mid, mid.reward_sa())
    assert im.meg(policies.epsilon_greedy(small, 0.3), small).converged  # the torch passes


def test_compiled_small_off_never_imports_numba_and_gives_the_same_meg():
    """``IMITATION_MEG_COMPILED_SMALL=0`` (what a one-off ``imitation-meg score`` sets): small
    MDPs run the torch passes and numba is never imported; by default the compiled pass runs.
    Both give the same MEG."""
    code = """
import json, sys
import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core.kernels import fused as _fused
mdp = im.envs.cliff_world(width=10, height=4)
res = im.meg(policies.epsilon_greedy(mdp, 0.1), mdp)
print(json.dumps({"meg": res.meg, "numba": "numba" in sys.modules,
                  "compiled": _fused.COMPILED_SMALL}))
"""
    runs = {}
    for flag in ("0", "1"):
        env = {**os.environ, "IMITATION_MEG_COMPILED_SMALL": flag}
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        runs[flag] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["0"]["compiled"] is False and runs["0"]["numba"] is False
    assert runs["1"]["compiled"] is True and runs["1"]["numba"] is True
    assert runs["0"]["meg"] == pytest.approx(runs["1"]["meg"], rel=1e-12)


def test_the_score_command_leaves_the_callers_setting(tmp_path):
    """``imitation-meg score`` runs small MDPs on the torch passes while it runs (through
    ``main(argv)`` too), and gives the caller's setting back."""
    from imitation_meg.cli import main

    before = (_fused.COMPILED_SMALL, os.environ.get("IMITATION_MEG_COMPILED_SMALL"))
    assert main(["score", "--cliff-world", "--horizon", "6", "--policy", "uniform"]) == 0
    assert (_fused.COMPILED_SMALL, os.environ.get("IMITATION_MEG_COMPILED_SMALL")) == before
