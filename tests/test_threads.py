"""Thread settings: every public call leaves the caller's torch and numba thread counts as they
were, small computations run on one thread, and results do not depend on the threads."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg import _fused, _fused_class, _threads, policies
from imitation_meg.cid import examples
from imitation_meg.envs import cliff_world, random_mdp
from imitation_meg.trajectories import sample_trajectories

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _numba_count() -> int | None:
    """This thread's numba count where numba's pool runs (reading it otherwise launches it)."""
    pool = _threads._numba_pool()
    return None if pool is None else pool.get_num_threads()


def _calls(mdp: im.TabularMDP) -> dict[str, object]:
    """Every public entry point once on ``mdp`` (finite horizon), as thunks."""
    pi = policies.epsilon_greedy(mdp, 0.2)
    mouse = examples.mouse()
    rule = {"D": [[0.8, 0.2], [0.2, 0.8]]}
    disc = random_mdp(30, 3, None, discount=0.9, seed=1)
    traj = sample_trajectories(mdp, pi, 20, rng=0)
    return {
        "meg": lambda: im.meg(pi, mdp),
        "meg_unknown": lambda: im.meg_unknown(pi, mdp),
        "meg_target": lambda: im.meg_target(pi, mdp, np.arange(mdp.n_states) % 3),
        "meg_unknown_mlp": lambda: im.meg_unknown(
            pi, mdp, utility_model="mlp", steps=2, restarts=1
        ),
        "soft_value_iteration": lambda: im.soft_value_iteration(mdp, [0.5, 2.0]),
        "occupancy_measures": lambda: im.occupancy_measures(mdp, pi),
        "meg_from_trajectories": lambda: im.meg_from_trajectories(traj, mdp, n_boot=3, rng=0),
        "meg_one_step": lambda: im.meg_one_step([[0.7, 0.3]], [[1.0, 0.0]]),
        "meg_cid": lambda: im.meg_cid(mouse, rule),
        "meg_cid_unknown": lambda: im.meg_cid_unknown(mouse, rule, ["T"]),
        "meg_cid_target": lambda: im.meg_cid_target(mouse, ["T"], policy=rule),
        "meg_discounted": lambda: im.meg(policies.epsilon_greedy(disc, 0.3), disc),
        "meg_unknown_discounted": lambda: im.meg_unknown(policies.epsilon_greedy(disc, 0.3), disc),
    }


@pytest.mark.parametrize("caller", [1, 2])
@pytest.mark.parametrize("size", ["small", "large"])
def test_public_calls_leave_the_callers_thread_counts(caller, size, monkeypatch):
    """Small: the one-thread path; large: every MDP counts as large, with the compiled passes
    (numba's parallel loops) forced on."""
    if size == "large":
        monkeypatch.setattr(_threads, "PARALLEL_MIN_WORK", 1)
        monkeypatch.setattr(_fused, "FUSED_MIN_SA", 0)
        monkeypatch.setattr(_fused, "SMALL_MAX_WORK", -1)
        monkeypatch.setattr(_fused_class, "MIN_WORK", 0)
    mdp = random_mdp(60, 3, 6, branching=3, seed=4) if size == "large" else cliff_world(horizon=8)
    before = th.get_num_threads()
    try:
        th.set_num_threads(caller)
        numba_before = _numba_count()
        for name, call in _calls(mdp).items():
            call()
            assert th.get_num_threads() == caller, name
            after = _numba_count()
            assert after == (numba_before if numba_before is not None else after), name
            numba_before = after if numba_before is None else numba_before
    finally:
        th.set_num_threads(before)


def test_small_work_runs_on_one_thread_and_large_on_the_callers():
    before = th.get_num_threads()
    try:
        th.set_num_threads(2)
        with _threads.limited(_threads.PARALLEL_MIN_WORK - 1) as n:
            assert n == 1 and th.get_num_threads() == 1
            with _threads.limited(_threads.PARALLEL_MIN_WORK) as inner:  # never more than outer
                assert inner == 1
        assert th.get_num_threads() == 2
        with _threads.limited(_threads.PARALLEL_MIN_WORK) as n:
            assert n == 2 and th.get_num_threads() == 2
        with _threads.limited(None) as n:
            assert n == 2
        assert _threads.step_work(cliff_world(horizon=3)) == 40 * 4 * 2
        assert _threads.step_work("not an MDP") is None
    finally:
        th.set_num_threads(before)


def test_threads_are_restored_when_the_call_raises():
    before = th.get_num_threads()
    try:
        th.set_num_threads(2)
        with pytest.raises(ValueError, match="tol"):
            im.meg_unknown(policies.uniform(cliff_world(horizon=3)), cliff_world(horizon=3), tol=2)
        assert th.get_num_threads() == 2
    finally:
        th.set_num_threads(before)


_OMP_CASE = """
import sys
import torch as th, numba
import imitation_meg as im
from imitation_meg import _fused
from imitation_meg.envs import random_mdp
S = int(sys.argv[1])
if S < 100_000:  # a small MDP with the large MDPs' fused passes
    _fused.FUSED_MIN_SA, _fused.SMALL_MAX_WORK = 0, -1
mdp = random_mdp(S, 4, 2, branching=4, seed=0)
pi = im.policies.epsilon_greedy(mdp, 0.3)
assert _fused.usable(mdp, mdp.reward_sa()) and not _fused.small(mdp)
before = (th.get_num_threads(), numba.config.NUMBA_NUM_THREADS)
assert im.meg(pi, mdp).converged
print(before[0], before[1], th.get_num_threads(), numba.get_num_threads())
"""


@pytest.mark.skipif(not _threads.has_numba(), reason="the leak comes from numba's pool")
@pytest.mark.parametrize(
    "n_states", [2000, pytest.param(200_000, marks=pytest.mark.expensive)], ids=["forced", "issue"]
)
def test_a_fused_meg_under_omp_num_threads_1_leaves_torch_on_one_thread(n_states):
    """The issue's case (a 2e5-state MDP, H = 2; or a small one with the same fused passes):
    numba's OpenMP pool, launched by the first compiled pass of a fresh process, used to reset
    the OpenMP thread count that torch reads (1 -> 2)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("NUMBA_NUM_THREADS", None)
    out = subprocess.run(
        [sys.executable, "-c", _OMP_CASE, str(n_states)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    torch_before, numba_default, torch_after, numba_after = map(
        int, out.stdout.strip().splitlines()[-1].split()
    )
    assert torch_before == 1 and torch_after == 1
    assert numba_after == numba_default


@pytest.mark.skipif(not _threads.has_numba(), reason="numba's loops")
def test_numba_threads_follow_torch_and_are_put_back():
    import numba

    before = th.get_num_threads()
    try:
        th.set_num_threads(1)
        with _threads.numba_threads() as n:
            assert n == 1 and numba.get_num_threads() == 1 and th.get_num_threads() == 1
        assert th.get_num_threads() == 1
    finally:
        th.set_num_threads(before)
