"""The ALE as a simulator of the curve (imitation_meg.approx.ale): agreement with the game played
from its reset, bounded memory, starts that carry over, the refusals, a tiny curve, the CLI."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from tests.zoo_train import train_zoo

PONG = "PongNoFrameskip-v4"


def _pong(**make_kwargs):
    pytest.importorskip("ale_py")
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym

    from imitation_meg.approx.ale import register_games

    assert register_games(PONG)
    return gym.make(PONG, **make_kwargs)


def _random_walk(dyn, starts, steps, seed=0):
    """States (before each step) and actions of random episodes in lockstep."""
    rng = np.random.default_rng(seed)
    x, states, actions = starts, [], []
    for _ in range(steps):
        a = rng.integers(0, dyn.n_actions, size=len(x))
        states.append(x)
        actions.append(a)
        x, _, term = dyn.step(x, a)
        assert not term.any()  # no point ends a Pong episode
    return x, states, actions


def test_the_simulator_agrees_with_the_game_played_from_its_reset():
    from imitation_meg.approx.ale import ALEDynamics
    from imitation_meg.approx.simulators import check_against, dynamics_for

    env = _pong()
    dyn, why = dynamics_for(env)
    assert isinstance(dyn, ALEDynamics) and why == ""
    assert (dyn.n_actions, dyn.curve_method, hasattr(dyn, "state_box")) == (6, "smc", False)
    starts = []
    for seed in (0, 1):
        env.reset(seed=seed)
        starts.append(dyn.start(env))
    starts = np.stack(starts)
    assert starts.shape == (2, 1) and (starts < 0).all()  # starts are keyed by their seed
    obs0 = dyn.observe(starts)
    assert obs0.shape == (2, 84, 84, 4) and obs0.dtype == np.uint8
    assert not obs0[..., :3].any() and obs0[..., 3].any()  # zeros before the first frame
    _, states, actions = _random_walk(dyn, starts, 16)
    # the first episode, then a jump between both episodes' states (replayed from the reset)
    first = (np.concatenate([s[:1] for s in states]), np.concatenate([a[:1] for a in actions]))
    assert check_against(dyn, env, *first) == ""
    mixed = (np.concatenate([s[::-1] for s in states[::5]]), np.concatenate(actions[::5])[::-1])
    assert check_against(dyn, env, *mixed) == ""
    # a simulator whose emulator state is wrong disagrees with the replay
    i = int(states[5][0, 0]) - dyn._tag
    other = int(states[15][0, 0]) - dyn._tag
    dyn._local(states[15][0, 0])
    dyn._local(states[5][0, 0])  # both present (a step drops the states it does not touch)
    dyn._entries[i].state = dyn._entries[other].state
    dyn._entries[i].steps.clear()
    assert "frames differ" in check_against(dyn, env, states[5][:1], actions[5][:1])


def test_memory_is_bounded_and_dropped_states_are_replayed():
    from imitation_meg.approx.ale import ALEDynamics

    env = _pong()
    dyn = ALEDynamics(env)
    env.reset(seed=3)
    start = dyn.start(env)[None]
    x, states, _ = _random_walk(dyn, np.repeat(start, 4, axis=0), 30, seed=1)
    # the last step's input and output rows (at most 8 entries) and the start
    assert len(dyn._entries) <= 9
    early = states[10]
    i = int(early[0, 0]) - dyn._tag
    assert i not in dyn._entries  # dropped ...
    before = dyn.emulator_steps
    seen = dyn.observe(early)  # ... and replayed from its start: 10 steps a distinct row
    replayed = dyn.emulator_steps - before
    assert 0 < replayed <= 40 and replayed % 10 == 0 and seen.shape == (4, 84, 84, 4)
    # a second simulator resolves the starts (keys < 0), not another registry's states
    again = ALEDynamics(env)
    assert np.array_equal(again.observe(start), dyn.observe(start))
    with pytest.raises(ValueError, match="not one of this simulator's"):
        again.observe(x)


def test_identical_particles_step_once():
    from imitation_meg.approx.ale import ALEDynamics

    env = _pong()
    dyn = ALEDynamics(env)
    env.reset(seed=0)
    many = np.repeat(dyn.start(env)[None], 50, axis=0)
    before = dyn.emulator_steps
    nxt, r, term = dyn.step(np.repeat(many, 6, axis=0), np.tile(np.arange(6), 50))
    assert dyn.emulator_steps - before == 6  # 300 rows, 6 distinct (state, action) pairs
    assert nxt.shape == (300, 1) and r.shape == term.shape == (300,)
    assert len(np.unique(nxt)) == 6 and np.array_equal(nxt[:6], nxt[6:12])


def test_sticky_actions_are_refused_in_one_line(capsys):
    from imitation_meg.approx.simulators import dynamics_for
    from imitation_meg.cli import main

    env = _pong(repeat_action_probability=0.25)
    with pytest.raises(ValueError, match=r"sticky actions \(repeat_action_probability=0.25\)"):
        dynamics_for(env)
    argv = ["score", "--env", "ALE/Pong-v5", "--policy", "uniform", "--horizon", "5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "sticky actions" in err and "deterministic steps" in err


def test_a_curve_beyond_an_hour_is_refused_naming_a_horizon_that_fits(capsys):
    from imitation_meg.approx.ale import ALEDynamics
    from imitation_meg.cli import main

    dyn = ALEDynamics(_pong())
    dyn.check_cost(20, 8)  # fits
    with pytest.raises(ValueError, match=r"pass --horizon \d+"):
        dyn.check_cost(27_000, 8)
    argv = ["score", "--env", PONG, "--policy", "uniform", "--horizon", "27000"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "CPU hours" in err and "--horizon" in err


def test_random_paths_find_the_uniform_return_of_a_short_horizon():
    """At beta = 0 the SMC's particles follow uniform random paths (equal weights): after the
    reset of seed 0 and 49 NOOP decisions, the uniform policy's expected return at H = 8 is
    -73/81 (see the next test)."""
    from imitation_meg.approx.ale import ALEDynamics
    from imitation_meg.approx.smc import FlatTwist, twisted_smc

    dyn = ALEDynamics(_pong(), warmup=[0] * 49)
    twist = FlatTwist(np.array([0.0]))
    sums = twisted_smc(dyn, np.array([[-1.0]]), 8, twist, 64, np.random.default_rng(0), flat=True)
    assert abs(sums.log_z).max() < 1e-12  # beta = 0: every weight is 1
    assert set(np.unique(sums.ret)) <= {-1.0, 0.0}
    assert sums.ret.mean() == pytest.approx(-73 / 81, abs=0.1)  # 2.7 standard errors


@pytest.mark.expensive  # the SMC's ladder at H = 8: about a minute
def test_a_tiny_curve_finds_the_uniform_return_of_a_short_horizon():
    """49 NOOP decisions after the reset of seed 0 bring Pong's ball to 8 decisions before it
    passes the agent's paddle: of the 3^4 distinct ways to move in the 4 decisions that matter,
    8 return it, so the uniform policy's expected (clipped) return at H = 8 is -73/81 (the
    enumerated MDP's, docs/results/atari_exact). At beta = 0 the SMC's paths are uniform random
    paths."""
    from imitation_meg.approx.ale import ALEDynamics
    from imitation_meg.approx.curve import CurveInfo
    from imitation_meg.approx.smc import smc_curve

    dyn = ALEDynamics(_pong(), warmup=[0] * 49)
    starts = np.array([[-1.0]])  # the reset of seed 0
    info = CurveInfo(PONG, {}, 8, dyn.actions.to_dict(), "smc")
    curve = smc_curve(dyn, starts, 8, 128, np.random.default_rng(0), info, rounds=0)
    at0 = int(np.argmin(np.abs(curve.betas)))
    assert curve.betas[at0] == 0 and abs(curve.value[at0]) < 1e-12
    assert curve.slope[at0] == pytest.approx(-73 / 81, abs=0.06)
    lo, hi = curve.returns_found
    assert lo == pytest.approx(-1.0) and hi == pytest.approx(0.0)
    # Lambda is log E[exp(beta R)] of a return in {-1, 0}: between beta * E[R] and 0
    top = curve.betas > 0
    assert (curve.value[top] <= 1e-9).all()
    assert (curve.value[top] >= curve.betas[top] * (-73 / 81) - 0.02).all()


@pytest.mark.expensive  # rl_zoo3.train on Pong for 1 024 steps, then the score: about a minute
def test_the_command_line_scores_a_pong_zoo_run(tmp_path, capsys):
    pytest.importorskip("rl_zoo3")
    _pong()
    from imitation_meg.cli import main

    args = ("-n", "1024", "--num-threads", "1", "--gym-packages", "ale_py")
    folder = train_zoo("ppo", PONG, tmp_path, *args) / "ppo" / f"{PONG}_1"
    out = tmp_path / "score.json"
    argv = ["score", "--policy", str(folder), "--horizon", "6", "--json", str(out)]
    argv += ["--approx-option", "n_eval_episodes=40", "--approx-option", "n_starts=2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "MEG" in printed and "%" in printed
    res = json.loads(out.read_text())
    assert res["env"] == PONG and res["result"]["method"] == "paths"
    assert 0.0 <= res["result"]["low"] <= res["meg"] <= res["result"]["high"]


def test_a_zoo_run_of_another_atari_setting_is_refused_in_one_line(tmp_path, capsys):
    _pong()
    from imitation_meg.cli import main

    folder = tmp_path / "ppo" / f"{PONG}_1"
    params = folder / PONG
    params.mkdir(parents=True)
    (folder / f"{PONG}.zip").write_bytes(b"")
    (params / "args.yml").write_text(
        f"!!python/object/apply:collections.OrderedDict\n- - - env\n    - {PONG}\n"
    )
    (params / "config.yml").write_text(
        "!!python/object/apply:collections.OrderedDict\n- - - env_wrapper\n"
        "    - - stable_baselines3.common.atari_wrappers.AtariWrapper\n"
        "  - - frame_stack\n    - 2\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # the command prints the run's ZooWrapperWarning
        assert main(["score", "--policy", str(folder), "--horizon", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("frame_stack=2" in line for line in err[:-1])
    assert "frame_stack 2 is not the RL Zoo's 4" in err[-1]
