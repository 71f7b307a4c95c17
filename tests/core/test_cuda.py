"""The exact solvers on a CUDA device agree with the CPU.

Skipped where torch sees no CUDA device (CI has none); run on a machine with one. The same MDP
and policy are solved on both devices in float64 and must give the same MEG (and the same
occupancies and soft-optimal policies) to solver tolerance.
"""

from __future__ import annotations

import math

import pytest
import torch as th

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.envs import cliff_world, random_mdp

pytestmark = pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA device")


def _both(mdp: im.TabularMDP) -> tuple[im.TabularMDP, im.TabularMDP]:
    gpu = mdp.to("cuda")
    assert gpu.device.type == "cuda"
    return mdp, gpu


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
def test_known_utility_meg_on_cuda_matches_the_cpu(epsilon):
    cpu, gpu = _both(cliff_world(width=6, height=3, horizon=12))
    pi_cpu = policies.epsilon_greedy(cpu, epsilon)
    a = im.meg(pi_cpu, cpu)
    b = im.meg(pi_cpu.to("cuda"), gpu)
    assert a.converged and b.converged
    assert math.isfinite(b.meg)
    assert b.meg == pytest.approx(a.meg, rel=1e-9, abs=1e-9)
    assert b.upper_bound == pytest.approx(a.upper_bound)


def test_policy_evaluation_and_soft_vi_on_cuda_match_the_cpu():
    cpu, gpu = _both(random_mdp(50, 4, 10, branching=3, seed=2))
    pi = policies.epsilon_greedy(cpu, 0.2)
    occ_cpu = im.occupancy_measures(cpu, pi)
    occ_gpu = im.occupancy_measures(gpu, pi.to("cuda"))
    assert occ_gpu.device.type == "cuda"
    th.testing.assert_close(occ_gpu.cpu(), occ_cpu, rtol=1e-10, atol=1e-12)
    sv_cpu = im.soft_value_iteration(cpu, [0.5, 2.0])
    sv_gpu = im.soft_value_iteration(gpu, [0.5, 2.0])
    th.testing.assert_close(sv_gpu.pi.cpu(), sv_cpu.pi, rtol=1e-9, atol=1e-12)


def test_unknown_utility_meg_on_cuda_matches_the_cpu():
    cpu, gpu = _both(random_mdp(40, 3, 8, branching=3, seed=5))
    pi = policies.epsilon_greedy(cpu, 0.3)
    a = im.meg_unknown(pi, cpu)
    b = im.meg_unknown(pi.to("cuda"), gpu)
    assert a.converged and b.converged
    assert b.meg == pytest.approx(a.meg, rel=1e-8, abs=1e-8)


def test_discounted_meg_on_cuda_matches_the_cpu():
    cpu, gpu = _both(random_mdp(40, 3, None, branching=3, discount=0.9, seed=7))
    pi = policies.epsilon_greedy(cpu, 0.3)
    a = im.meg(pi, cpu)
    b = im.meg(pi.to("cuda"), gpu)
    assert a.converged and b.converged
    assert b.meg == pytest.approx(a.meg, rel=1e-8, abs=1e-8)
    au = im.meg_unknown(pi, cpu)
    bu = im.meg_unknown(pi.to("cuda"), gpu)
    assert bu.meg == pytest.approx(au.meg, rel=1e-7, abs=1e-7)


def test_a_large_sparse_mdp_on_cuda_matches_the_cpu():
    """Large enough (2e4 states, H = 50) for the solvers' large-problem paths."""
    cpu, gpu = _both(random_mdp(20_000, 4, 50, branching=4, seed=1))
    pi = policies.epsilon_greedy(cpu, 0.2)
    a = im.meg(pi, cpu)
    b = im.meg(pi.to("cuda"), gpu)
    assert b.converged
    assert b.meg == pytest.approx(a.meg, rel=1e-9)
