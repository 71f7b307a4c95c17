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
from imitation_meg import policies
from imitation_meg.cid import examples
from imitation_meg.core.kernels import fused as _fused
from imitation_meg.core.kernels import fused_class as _fused_class
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.trajectories import sample_trajectories
from imitation_meg.envs import cliff_world, random_mdp

ROOT = pathlib.Path(__file__).resolve().parents[3]


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
        "meg_interventional": lambda: im.meg_interventional([pi, pi], [mdp, mdp]),
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


@pytest.fixture
def two_threads():
    """The caller runs torch on two threads; its own count is put back afterwards."""
    before = th.get_num_threads()
    th.set_num_threads(2)
    yield
    th.set_num_threads(before)


def test_small_work_runs_on_one_thread_and_large_on_the_callers(two_threads):
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
    assert _threads.step_work([cliff_world(horizon=3)] * 2) == 2 * 40 * 4 * 2
    assert _threads.step_work([cliff_world(horizon=3), "not an MDP"]) is None


def test_threads_are_restored_when_the_call_raises(two_threads):
    with pytest.raises(ValueError, match="tol"):
        im.meg_unknown(policies.uniform(cliff_world(horizon=3)), cliff_world(horizon=3), tol=2)
    assert th.get_num_threads() == 2


_OMP_CASE = """
import sys
import numpy as np, torch as th, numba
import imitation_meg as im
from imitation_meg.core.kernels import fused as _fused
from imitation_meg.core.kernels import fused_class as _fused_class
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.envs import random_mdp
S, first = int(sys.argv[1]), sys.argv[2]
if S < 100_000:  # a small MDP with the large MDPs' compiled passes (numba's parallel loops)
    _fused.FUSED_MIN_SA, _fused.SMALL_MAX_WORK, _fused_class.MIN_WORK = 0, -1, 0
mdp = random_mdp(S, 4, 2, branching=4, seed=0)
pi = im.policies.epsilon_greedy(mdp, 0.3)
disc = random_mdp(50, 3, None, discount=0.9, seed=1)
assert _fused.usable(mdp, mdp.reward_sa()) and not _fused.small(mdp)
calls = {
    "meg": lambda: im.meg(pi, mdp),
    "meg_unknown": lambda: im.meg_unknown(pi, mdp, features=np.eye(4)[np.arange(S) % 4]),
    "discounted": lambda: im.meg(im.policies.epsilon_greedy(disc, 0.3), disc),
}
numba_default = numba.config.NUMBA_NUM_THREADS
print(th.get_num_threads(), numba_default)
for name in (first, *(n for n in calls if n != first)):
    assert calls[name]().converged, name
    pool = _threads._numba_pool()  # numba's count if its pool runs (reading it launches it)
    print(name, th.get_num_threads(), pool.get_num_threads() if pool else numba_default)
"""


@pytest.mark.skipif(not _threads.has_numba(), reason="the leak comes from numba's pool")
@pytest.mark.parametrize(
    ("n_states", "first"),
    [
        (2000, "meg"),
        (2000, "meg_unknown"),
        (2000, "discounted"),
        pytest.param(200_000, "meg", marks=pytest.mark.expensive),
    ],
    ids=["forced-meg", "forced-meg_unknown", "forced-discounted", "issue"],
)
def test_calls_under_omp_num_threads_1_leave_torch_on_one_thread(n_states, first):
    """Under ``OMP_NUM_THREADS=1`` in a fresh process, each public call in turn (the first one
    launches numba's pool): the issue's case (a 2e5-state MDP, H = 2; or a small one with the
    same compiled passes forced on). Numba's OpenMP pool used to reset the OpenMP thread count
    that torch reads (1 -> 2) at its launch."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("NUMBA_NUM_THREADS", None)
    out = subprocess.run(
        [sys.executable, "-c", _OMP_CASE, str(n_states), first],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    torch_before, numba_default = map(int, lines[0].split())
    assert torch_before == 1
    after = {name: (int(t), int(n)) for name, t, n in (line.split() for line in lines[1:])}
    assert next(iter(after)) == first and len(after) == 3
    assert all(counts == (1, numba_default) for counts in after.values()), after


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


@pytest.mark.expensive
@pytest.mark.parametrize("caller", [1, 2])
def test_approximate_meg_leaves_the_callers_thread_counts(caller):
    """The approximate entry points (SB3-style soft-Q fits on a gym environment) too."""
    import warnings

    lean = lambda obs: np.tile([0.7, 0.3], (len(obs), 1))  # noqa: E731
    kw = {"horizon": 12, "seed": 1, "n_data_steps": 600, "n_eval_episodes": 10, "n_models": 2}
    kw.update(hidden=(16, 16), iterations=2, steps_per_iteration=5, n_boot=10)
    before = th.get_num_threads()
    try:
        th.set_num_threads(caller)
        numba_before = _numba_count()
        with warnings.catch_warnings():  # a fit this short is flagged; only threads matter here
            warnings.simplefilter("ignore")
            im.meg_approx(lean, "CartPole-v1", **kw)
            assert th.get_num_threads() == caller
            im.meg_approx_unknown(lean, "CartPole-v1", ascent_steps=1, episodes_per_step=2, **kw)
        assert th.get_num_threads() == caller
        assert _numba_count() == numba_before or numba_before is None
    finally:
        th.set_num_threads(before)


@pytest.mark.parametrize("caller", [1, 2])
def test_parallel_map_runs_each_task_on_one_torch_thread_and_keeps_the_order(caller):
    """Tasks see one torch thread, on up to the caller's count of Python threads; the results
    come back in the items' order; the caller's count is put back, also when a task raises."""
    import threading

    seen: list[tuple[int, int]] = []

    def task(i: int) -> int:
        seen.append((th.get_num_threads(), threading.get_ident()))
        return i * i

    before = th.get_num_threads()
    try:
        th.set_num_threads(caller)
        assert _threads.parallel_map(task, range(7)) == [i * i for i in range(7)]
        assert th.get_num_threads() == caller
        assert {n for n, _ in seen} == {1}
        assert len({ident for _, ident in seen}) <= caller

        def fail(i: int) -> int:
            raise RuntimeError(f"task {i}")

        with pytest.raises(RuntimeError, match="task"):
            _threads.parallel_map(fail, [0, 1, 2])
        assert th.get_num_threads() == caller
        assert _threads.parallel_map(task, []) == []
    finally:
        th.set_num_threads(before)
