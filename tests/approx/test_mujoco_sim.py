"""gymnasium's MuJoCo tasks on arrays of states (:mod:`imitation_meg.approx.mujoco_sim`).

The simulator is checked against the environment itself along whole episodes from
``reset(seed=...)`` (chained: each next state is the simulator's own, never the environment's),
bit for bit; :func:`dynamics_for` serves gymnasium's tasks and refuses the rest with the
reason; a curve on a short horizon matches direct Monte Carlo; a curve over the step limit is
refused with the horizon that fits; and ``imitation-meg score`` scores a HalfCheetah SAC run
folder as the RL Zoo writes it.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from tests.zoo_train import train_zoo

pytest.importorskip("mujoco")

from imitation_meg.approx.evaluate import ApproxMEGWarning
from imitation_meg.approx.mujoco_sim import MujocoDynamics
from imitation_meg.approx.simulators import check_against, dynamics_for

#: The tasks' version on this lane: v4 on gymnasium 0.29, v5 on gymnasium 1.x.
V = "v4" if gym.__version__.startswith("0.") else "v5"
CHEETAH, HOPPER = f"HalfCheetah-{V}", f"Hopper-{V}"


@pytest.fixture(autouse=True)
def _in_a_temporary_folder(tmp_path, monkeypatch):
    """MuJoCo 4 writes the models' deprecation warnings to MUJOCO_LOG.TXT in the cwd."""
    monkeypatch.chdir(tmp_path)


def _dyn(env_id: str, **kw: Any) -> tuple[Any, MujocoDynamics]:
    env = gym.make(env_id, **kw)
    dyn, why = dynamics_for(env)
    assert isinstance(dyn, MujocoDynamics), why
    return env, dyn


@pytest.mark.parametrize(
    "name", ["HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid", "Reacher", "Swimmer"]
)
def test_a_chained_replay_agrees_with_the_environment_bit_for_bit(name):
    env = gym.make(f"{name}-{V}")
    _, dyn = _dyn(f"{name}-{V}")  # its own instance of the task
    obs, _ = env.reset(seed=3)
    env.action_space.seed(0)
    state = dyn.start(env)[None]
    assert np.array_equal(dyn.observe(state)[0], obs)
    for _ in range(60):
        act = env.action_space.sample()
        obs, r, term, _, _ = env.unwrapped.step(act)
        state, r_sim, term_sim = dyn.step(state, act[None])
        assert dyn.observe(state).dtype == obs.dtype
        assert np.array_equal(dyn.observe(state)[0], obs)
        assert r_sim[0] == r and bool(term_sim[0]) == term
        if term:
            break


def test_a_batch_steps_each_row_from_its_own_state():
    env, dyn = _dyn(CHEETAH)
    rows = []
    for seed in range(3):
        env.reset(seed=seed)
        rows.append(dyn.start(env))
    states = np.stack(rows)
    acts = np.stack([np.full(6, -1.0), np.zeros(6), np.full(6, 1.0)]).astype(np.float32)
    nxt, r, _ = dyn.step(states, acts)
    for i in range(3):  # the same step alone
        one, r_one, _ = dyn.step(states[i : i + 1], acts[i : i + 1])
        assert np.array_equal(one[0], nxt[i]) and r_one[0] == r[i]
    assert len(set(r.tolist())) == 3  # the actions matter


def test_check_against_agrees_on_visited_states_and_restores_the_environment():
    env, dyn = _dyn(HOPPER)
    env.reset(seed=1)
    env.action_space.seed(1)
    states, acts = [], []
    for _ in range(20):
        states.append(dyn.start(env))
        a = env.action_space.sample()
        acts.append(a)
        _, _, term, _, _ = env.step(a)
        if term:
            break
    before = dyn.start(env)
    assert check_against(dyn, env, np.stack(states), np.stack(acts)) == ""
    assert np.array_equal(dyn.start(env), before)


def test_check_against_finds_a_simulator_of_other_physics():
    env, _ = _dyn(CHEETAH)
    _, other = _dyn(CHEETAH, forward_reward_weight=2.0)  # another reward
    env.reset(seed=0)
    state = other.start(env)[None]
    acts = np.ones((1, 6), dtype=np.float32)
    assert "the reward is" in check_against(other, env, state, acts)


def test_dynamics_for_refuses_a_wrapper_that_changes_what_it_computes():
    env = gym.wrappers.ClipAction(gym.make(CHEETAH))
    dyn, why = dynamics_for(env)
    assert dyn is None and "ClipAction" in why


def test_dynamics_for_refuses_a_mujoco_env_defined_elsewhere():
    from gymnasium.envs.mujoco import mujoco_env

    core = gym.make(CHEETAH).unwrapped
    mine = type("MyCheetah", (type(core),), {"__module__": "my_lab.envs"})
    dyn, why = dynamics_for(mine())
    assert dyn is None and "outside gymnasium's own tasks" in why
    assert issubclass(mine, mujoco_env.MujocoEnv)


def test_a_tiny_curve_is_a_convex_curve_through_zero():
    from imitation_meg.approx.known import soft_value_curve

    curve = soft_value_curve(HOPPER, horizon=3, n_starts=2, n_particles=8, seed=0)
    assert curve.info.method == "smc" and curve.info.env == HOPPER
    assert curve.starts is not None and curve.starts.shape == (2, curve.starts.shape[1])
    assert np.all(np.isfinite(curve.value))
    assert np.interp(0.0, curve.betas, curve.value) == pytest.approx(0.0, abs=1e-9)
    mid = np.interp(0.0, curve.betas, curve.slope)  # Lambda' = E_beta[R] rises with beta
    assert curve.slope[0] < mid < curve.slope[-1]
    lo, hi = curve.returns_found
    assert 0.0 < lo < hi < 3 * 4.0  # Hopper: about 1 a step alive (healthy reward + speed)


@pytest.mark.expensive  # about 20 s of CPU: some 40 rungs
def test_a_short_curve_matches_direct_monte_carlo():
    """At H = 1 the curve is ``E_s0 log E_a exp(beta r(s0, a))``: 20 000 uniform actions at
    each of the curve's own starts give it directly."""
    from imitation_meg.approx.known import soft_value_curve

    curve = soft_value_curve(CHEETAH, horizon=1, n_starts=4, n_particles=64, seed=0)
    assert curve.info.method == "smc"
    _, dyn = _dyn(CHEETAH)
    rng = np.random.default_rng(1)
    cols = [int(np.argmin(np.abs(curve.betas - b))) for b in (-2.0, 0.5, 2.0, 8.0)]
    betas = curve.betas[cols]  # points of the curve's grid (no interpolation)
    direct = np.zeros(len(betas))
    for s0 in curve.starts:
        acts = dyn.actions.sample(rng, 20_000)
        _, r, _ = dyn.step(np.repeat(s0[None], len(acts), axis=0), acts)
        for j, b in enumerate(betas):
            direct[j] += (np.log(np.mean(np.exp(b * r - (b * r).max()))) + (b * r).max()) / len(
                curve.starts
            )
    got = curve.value[cols]
    # 64 particles a start: the log of an unbiased estimate, within 10% (or 0.1 nat)
    assert np.all(np.abs(got - direct) <= 0.1 * np.maximum(1.0, np.abs(direct))), (got, direct)
    assert np.interp(0.0, curve.betas, curve.value) == pytest.approx(0.0, abs=1e-9)


def test_a_curve_over_the_step_limit_is_refused_with_the_horizon_that_fits():
    from imitation_meg.approx.known import soft_value_curve

    with pytest.raises(ValueError, match=r"pass a horizon of at most \d+ \(--horizon \d+"):
        soft_value_curve(CHEETAH, seed=0)  # H = 1000, 64 starts


ZOO_HYPERPARAMS = f"""\
# rl_zoo3's hyperparams/sac.yml entry for the MuJoCo tasks (its &mujoco-defaults)
{CHEETAH}:
  n_timesteps: !!float 1e6
  policy: 'MlpPolicy'
  learning_starts: 10000
"""


@pytest.fixture(scope="module")
def cheetah_run(tmp_path_factory):
    """A HalfCheetah SAC run folder written by ``python -m rl_zoo3.train`` (1 200 steps)."""
    pytest.importorskip("rl_zoo3")
    d = tmp_path_factory.mktemp("zoo")
    (d / "sac.yml").write_text(ZOO_HYPERPARAMS)
    args = ("-conf", str(d / "sac.yml"), "-n", "1200", "-params", "learning_starts:1000")
    logs = train_zoo("sac", CHEETAH, d, *args, cwd=d)
    return logs / "sac" / f"{CHEETAH}_1"


@pytest.mark.expensive  # about a minute: rl_zoo3.train, then a curve at H = 5
def test_the_cli_scores_a_zoo_halfcheetah_run_and_refuses_the_full_horizon(cheetah_run, capsys):
    from imitation_meg.cli import main

    argv = ["score", "--policy", str(cheetah_run), "--approx", "--horizon", "5"]
    small = ["--approx-option", "n_starts=4", "--approx-option", "n_particles=16"]
    with warnings.catch_warnings():  # so few particles: the curve may warn that it is thin
        warnings.simplefilter("ignore", ApproxMEGWarning)
        assert main([*argv, *small]) == 0
    out = capsys.readouterr().out
    assert "MEG" in out and "95%" in out and "paths" in out, out
    assert main(["score", "--policy", str(cheetah_run), "--approx"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--horizon" in err, err


def test_the_certificate_of_a_law_in_six_dimensions_adds_up_over_coordinates():
    """MuJoCo's boxes have up to 17 dimensions; a tensor-product rule stops at 3, and a
    diagonal law's divergence from the uniform density is the sum of its coordinates'."""
    from imitation_meg.approx.agent import _law_kl
    from imitation_meg.continuous.densities import ActionLaw

    rng = np.random.default_rng(0)
    mean, std = rng.normal(size=(2, 3)), np.full((2, 3), 3.0)  # wide: the rule, not Hermite
    law = ActionLaw("squashed", mean, std, -np.ones(3), np.ones(3))
    joint = law.rule().kl.double().numpy()
    wide = ActionLaw(
        "squashed", np.hstack([mean, mean]), np.hstack([std, std]), -np.ones(6), np.ones(6)
    )
    assert np.allclose(_law_kl(wide), 2 * joint, rtol=1e-9)
    uniform = ActionLaw("uniform", np.zeros((2, 6)), np.ones((2, 6)), -np.ones(6), np.ones(6))
    assert np.array_equal(_law_kl(uniform), np.zeros(2))
