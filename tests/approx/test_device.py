"""The approximate estimators' ``device`` setting: checked everywhere, run where CUDA is.

The fits move to the device; the draws, the environment steps and the evaluation do not, so a
CUDA run must agree with the CPU run of the same seed up to the rounding that fitted
Q-iteration grows, and repeat itself exactly. The CUDA tests are skipped where torch sees no
CUDA device (CI has none).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from imitation_meg.approx import ApproxOptions, meg_approx, meg_approx_unknown
from imitation_meg.approx.envs import TablePolicy, stationary_epsilon_greedy, validation_case
from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import fit_soft_q_ensemble, new_model

needs_cuda = pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA device")

#: Small settings: the comparison, not the estimate's accuracy, is under test.
SMALL = {
    "n_models": 2,
    "refine": 1,
    "n_data_steps": 3000,
    "n_eval_episodes": 100,
    "n_boot": 100,
    "iterations": 12,
    "steps_per_iteration": 40,
    "seed": 3,
}


def test_the_device_setting_is_checked():
    assert ApproxOptions().device == "cpu"
    assert ApproxOptions(device=th.device("cpu")).device == "cpu"
    with pytest.raises(TypeError, match="device must be a string"):
        ApproxOptions(device=0)
    with pytest.raises(ValueError, match=r"device must be a torch device.*'gpu'"):
        ApproxOptions(device="gpu")
    with pytest.raises(ValueError, match=r"device must be a torch device.*'gpu'"):
        fit_soft_q_ensemble([], [], iterations=1, device="gpu")  # the fits check it too
    with pytest.raises(ValueError, match="holds shapes, not numbers"):
        ApproxOptions(device="meta")
    if not th.cuda.is_available():
        with pytest.raises(ValueError, match=r"torch sees 0 CUDA device.*pass device='cpu'"):
            ApproxOptions(device="cuda")
    else:
        with pytest.raises(ValueError, match="CUDA device"):
            ApproxOptions(device=f"cuda:{th.cuda.device_count()}")


@pytest.fixture(scope="module")
def cliff():
    case = validation_case("cliffworld_xy", horizon=9)
    policy = TablePolicy(stationary_epsilon_greedy(case.mdp, 0.1), case.observations)
    return case, policy


def _data(case, n_episodes: int = 60, seed: int = 0) -> Rollouts:
    from imitation_meg.approx.core import uniform_behaviour
    from imitation_meg.approx.rollouts import EnvSource, collect

    source = EnvSource(case.make, horizon=9)
    uniform = uniform_behaviour(source.n_actions)
    return collect(source, uniform, n_episodes, np.random.default_rng(seed))


@needs_cuda
def test_a_fit_on_cuda_matches_the_same_fit_on_the_cpu(cliff):
    case, _ = cliff
    data = _data(case)
    fitted = {}
    for device in ("cpu", "cuda"):
        models = [new_model(data, 4, 9, hidden=(64, 64), seed=s, last_steps=3) for s in (0, 1)]
        losses = fit_soft_q_ensemble(
            models, [data, data], iterations=10, steps_per_iteration=50, lr=3e-3, device=device
        )
        fitted[device] = (models, losses)
        for m in models:  # the models stay where they were: on the CPU
            assert all(p.device.type == "cpu" for p in m.nets.parameters())
    x = th.as_tensor(data.x[:500])
    t = th.as_tensor(data.t[:500])
    for b in (0.0, 1.0, 30.0):
        bb = th.full((500,), b)
        for m_cpu, m_gpu in zip(fitted["cpu"][0], fitted["cuda"][0], strict=True):
            with th.no_grad():
                f_cpu, f_gpu = m_cpu.f(x, t, bb), m_gpu.f(x, t, bb)
            assert th.allclose(f_gpu, f_cpu, atol=5e-3), float((f_gpu - f_cpu).abs().max())
    np.testing.assert_allclose(fitted["cuda"][1], fitted["cpu"][1], rtol=0.05)


@needs_cuda
def test_meg_approx_on_cuda_repeats_itself_and_agrees_with_the_cpu(cliff):
    case, policy = cliff
    cpu = meg_approx(policy, case.make, horizon=9, **SMALL)
    gpu = meg_approx(policy, case.make, horizon=9, device="cuda", **SMALL)
    again = meg_approx(policy, case.make, horizon=9, device="cuda", **SMALL)
    assert gpu.meg == again.meg and gpu.stages == again.stages
    assert gpu.n_env_steps == cpu.n_env_steps
    half = max(cpu.high - cpu.low, gpu.high - gpu.low) / 2
    assert abs(gpu.meg - cpu.meg) <= half, (gpu.meg, cpu.meg, half)


@needs_cuda
def test_meg_approx_unknown_runs_its_fits_on_cuda(cliff):
    case, policy = cliff
    kw = {**SMALL, "refine": 0}
    cpu = meg_approx_unknown(policy, case.make, horizon=9, ascent_steps=2, **kw)
    gpu = meg_approx_unknown(policy, case.make, horizon=9, ascent_steps=2, device="cuda", **kw)
    assert np.isfinite(gpu.meg) and gpu.low <= gpu.meg <= gpu.high
    half = max(cpu.high - cpu.low, gpu.high - gpu.low) / 2
    assert abs(gpu.meg - cpu.meg) <= half + 0.05 * abs(cpu.meg), (gpu.meg, cpu.meg)
