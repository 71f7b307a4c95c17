"""Single-agent wrapper, frame stacking, SB3 adapters and the lazy SB3 import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from imitation_meg.symmtom import parallel_env
from imitation_meg.symmtom.agents import HeuristicPolicy, StayPolicy
from imitation_meg.symmtom.wrappers import FrameBuffer, SingleAgentEnv


def test_import_does_not_load_sb3():
    code = "import sys, imitation_meg.symmtom; print('stable_baselines3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_frame_buffer_order_and_validation():
    buf = FrameBuffer(2, 3)
    np.testing.assert_array_equal(buf.reset(np.array([1, 2])), [0, 0, 0, 0, 1, 2])
    np.testing.assert_array_equal(buf.push(np.array([3, 4])), [0, 0, 1, 2, 3, 4])
    np.testing.assert_array_equal(buf.push(np.array([5, 6])), [1, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match="frame_stack=0"):
        FrameBuffer(2, 0)


def test_single_agent_env_rewards_match_parallel_env():
    env = SingleAgentEnv(
        parallel_env(n_agents=3, width=6, n_pieces=3), HeuristicPolicy(), frame_stack=2
    )
    obs, _ = env.reset(seed=3)
    assert obs.shape == (70,) and env.observation_space.contains(obs)
    total, steps, done = 0.0, 0, False
    while not done:
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        total += r
        steps += 1
        done = term or trunc
    assert steps == 30 and info["totals"]["reward"] == pytest.approx(total)


def test_single_agent_env_validation():
    with pytest.raises(TypeError, match="SymmToMEnv"):
        SingleAgentEnv("env")
    with pytest.raises(ValueError, match="learner=5"):
        SingleAgentEnv(parallel_env(), learner=5)
    with pytest.raises(ValueError, match="got 1 policies"):
        SingleAgentEnv(parallel_env(), [StayPolicy()])


def test_sb3_env_checker_and_shared_vecenv():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env

    from imitation_meg.symmtom.sb3 import SharedParameterVecEnv

    check_env(SingleAgentEnv(parallel_env(), frame_stack=3))
    venv = SharedParameterVecEnv(
        parallel_env(n_agents=3, width=6, n_pieces=3), frame_stack=2, seed=0
    )
    obs = venv.reset()
    assert obs.shape == (3, 70)
    for _t in range(30):
        obs, _rew, dones, infos = venv.step(
            np.array([venv.action_space.sample() for _ in range(3)])
        )
    assert dones.all() and "terminal_observation" in infos[0]
    assert obs.shape == (3, 70) and (obs[:, :35] == 0).all()  # fresh episode: empty older frame
