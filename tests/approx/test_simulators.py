"""The classic-control simulators step as gymnasium's environments do.

Each simulator is checked against the environment itself: teacher-forced from states that random
episodes reach and from states drawn across the state space (terminations, walls, speed limits),
and untethered along whole episodes from ``reset(seed=...)``; changed constants carry over, and
:func:`dynamics_for` refuses what it cannot simulate with the reason.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.mountain_car import MountainCarEnv

from imitation_meg.approx import simulators
from imitation_meg.approx.simulators import (
    AcrobotDynamics,
    ContinuousMountainCarDynamics,
    MountainCarDynamics,
    PendulumDynamics,
    check_against,
    dynamics_for,
)

#: Each simulated id, its simulator, and a box of states around (and a little beyond) the
#: states it reaches: the goal regions, the left wall, the speed limits.
CASES: dict[str, tuple[type[Any], list[float], list[float]]] = {
    "Acrobot-v1": (AcrobotDynamics, [-np.pi, -np.pi, -13.0, -29.0], [np.pi, np.pi, 13.0, 29.0]),
    "MountainCar-v0": (MountainCarDynamics, [-1.25, -0.08], [0.65, 0.08]),
    "Pendulum-v1": (PendulumDynamics, [-8.0, -9.0], [8.0, 9.0]),
    "MountainCarContinuous-v0": (ContinuousMountainCarDynamics, [-1.25, -0.08], [0.65, 0.08]),
}
IDS = list(CASES)


def _make(env_id: str, **kw: Any) -> tuple[Any, Any]:
    env = gym.make(env_id, **kw)
    dyn, why = dynamics_for(env)
    assert dyn is not None, why
    return env, dyn


def _visited(env: Any, dyn: Any, n: int, seed: int = 0) -> np.ndarray:
    """``n`` states ``(n, d)`` that episodes of random actions reach (starts included)."""
    env.action_space.seed(seed)
    rows: list[np.ndarray] = []
    while len(rows) < n:
        env.reset(seed=seed + len(rows))
        rows.append(dyn.start(env))
        done = False
        while not done and len(rows) < n:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            rows.append(dyn.start(env))  # the state now
            done = term or trunc
    return np.stack(rows)


def _actions(dyn: Any, n: int, rng: np.random.Generator, dtype: Any = np.float64) -> np.ndarray:
    """``n`` random actions; a box's reach 30% beyond its bounds (the clipping is compared)."""
    if dyn.n_actions:
        return rng.integers(dyn.n_actions, size=n)
    half = (dyn.actions.high - dyn.actions.low) / 2
    mid = (dyn.actions.high + dyn.actions.low) / 2
    return (mid + 1.3 * half * (2 * rng.random((n, dyn.actions.dim)) - 1)).astype(dtype)


def _states(env_id: str, env: Any, dyn: Any, rng: np.random.Generator, n: int) -> np.ndarray:
    """Visited states and as many drawn across the box of :data:`CASES`."""
    _, low, high = CASES[env_id]
    return np.concatenate([_visited(env, dyn, n), rng.uniform(low, high, (n, len(low)))])


@pytest.mark.parametrize("env_id", IDS)
def test_each_step_agrees_with_the_environment(env_id: str, rng: np.random.Generator) -> None:
    env, dyn = _make(env_id)
    assert isinstance(dyn, CASES[env_id][0]) and dyn.name == type(env.unwrapped).__name__
    states = _states(env_id, env, dyn, rng, 250)
    actions = _actions(dyn, len(states), rng)
    assert check_against(dyn, env, states, actions) == ""
    _, reward, term = dyn.step(states, actions)
    if env_id != "Pendulum-v1":  # the terminations were compared too
        assert 0 < term.sum() < len(term)
    if env_id != "MountainCar-v0":  # (-1 on every step there)
        assert np.unique(reward).size > 1


@pytest.mark.parametrize("env_id", IDS)
def test_each_step_is_bit_for_bit_the_environments(env_id: str, rng: np.random.Generator) -> None:
    """The same operations in the same order and number types: observations, rewards and next
    states equal to the last bit (``float32`` actions too, computed as the environment computes
    with them under this NumPy)."""
    env, dyn = _make(env_id)
    states = _states(env_id, env, dyn, rng, 150)
    if env_id == "MountainCarContinuous-v0":  # states the environment holds in float32 too
        states = np.concatenate([states, states[150:].astype(np.float32).astype(np.float64)])
    for dtype in (np.float64,) if dyn.n_actions else (np.float64, np.float32):
        assert check_against(dyn, env, states, _actions(dyn, len(states), rng, dtype), atol=0) == ""


def test_the_number_types_are_those_of_the_environment(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bit-for-bit check sees the other NumPy's promotion of ``float32`` (the continuous
    mountain car's state) and plain ``x * x`` for the environments' ``x ** 2`` (``pow``)."""
    env, dyn = _make("MountainCarContinuous-v0")
    states = _visited(env, dyn, 300)
    actions = _actions(dyn, len(states), rng, np.float32)
    assert check_against(dyn, env, states, actions, atol=0) == ""
    monkeypatch.setattr(simulators, "_WEAK", not simulators._WEAK)
    assert "differs by" in check_against(dyn, env, states, actions, atol=0)
    assert check_against(dyn, env, states, actions) == ""  # within 1e-5 all the same
    monkeypatch.undo()
    x = rng.normal(0.0, 5.0, 20_000)
    pow_ = np.array([np.float64(v) ** 2 for v in x])
    np.testing.assert_array_equal(simulators._square(x), pow_)
    x32 = x.astype(np.float32)
    if simulators._WEAK:  # NumPy 2: a float32's square is its own powf
        pow32 = np.array([np.float32(v) ** 2 for v in x32], dtype=np.float64)
        np.testing.assert_array_equal(simulators._square(x32, single=True), pow32)


@pytest.mark.parametrize(
    ("env_id", "dtype", "episodes"),
    [
        ("Acrobot-v1", None, 2),
        ("MountainCar-v0", None, 3),
        ("Pendulum-v1", np.float64, 3),
        ("Pendulum-v1", np.float32, 2),
        ("MountainCarContinuous-v0", np.float64, 1),
        ("MountainCarContinuous-v0", np.float32, 1),
    ],
)
def test_whole_episodes_agree_without_teacher_forcing(
    env_id: str, dtype: Any, episodes: int, rng: np.random.Generator
) -> None:
    """Episodes of random actions from ``reset(seed=...)``, the simulator left to itself: every
    observation within 1e-6 (they agree bit for bit: Acrobot's 500 steps too), every reward and
    termination the same, to the time limit or the end."""
    env, dyn = _make(env_id)
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        state = dyn.start(env)[None]
        np.testing.assert_array_equal(dyn.observe(state)[0], obs)
        for t in range(1, 10_000):
            a = _actions(dyn, 1, rng, dtype)
            obs, r, term, trunc, _ = env.step(int(a[0]) if dyn.n_actions else a[0])
            state, r_sim, term_sim = dyn.step(state, a)
            np.testing.assert_allclose(dyn.observe(state)[0], obs, rtol=0, atol=1e-6)
            assert (float(r_sim[0]), bool(term_sim[0])) == (float(r), bool(term)), t
            if term or trunc:
                break
        assert t >= 50  # (MountainCar, Pendulum: 200 steps; Acrobot 500; the continuous car 999)


@pytest.mark.parametrize(
    ("env_id", "make_kw", "changes"),
    [
        ("MountainCar-v0", {}, {"force": 0.002}),
        ("MountainCar-v0", {"goal_velocity": 0.01}, {"gravity": 0.003, "max_speed": 0.05}),
        ("Pendulum-v1", {"g": 5.0}, {}),
        ("Pendulum-v1", {}, {"m": 2.0, "l": 0.7, "max_torque": 1.0, "dt": 0.1}),
        ("Acrobot-v1", {}, {"LINK_MASS_2": 2.0, "LINK_COM_POS_2": 0.7, "dt": 0.1}),
        ("Acrobot-v1", {}, {"book_or_nips": "nips", "AVAIL_TORQUE": [-2.0, 0.5, 2.0]}),
        ("MountainCarContinuous-v0", {"goal_velocity": 0.01}, {"power": 0.003}),
    ],
)
def test_changed_constants_carry_over(
    env_id: str, make_kw: dict[str, Any], changes: dict[str, Any], rng: np.random.Generator
) -> None:
    env = gym.make(env_id, **make_kw)
    for name, value in changes.items():
        setattr(env.unwrapped, name, value)
    dyn, why = dynamics_for(env)
    assert dyn is not None, why
    states = _states(env_id, env, dyn, rng, 100)
    actions = _actions(dyn, len(states), rng)
    assert check_against(dyn, env, states, actions) == ""
    default, _ = dynamics_for(gym.make(env_id))  # the unchanged physics: caught
    assert default is not None
    assert check_against(default, env, states, actions) != ""


class _Subclassed(MountainCarEnv):
    pass


class MountainCarEnv2(MountainCarEnv):
    pass


def test_dynamics_for_refuses_what_it_cannot_simulate_and_says_why() -> None:
    dyn, why = dynamics_for(_Subclassed())
    assert dyn is None and "_Subclassed subclasses gymnasium's MountainCarEnv" in why
    same_name = type("MountainCarEnv", (MountainCarEnv,), {"__module__": __name__})
    dyn, why = dynamics_for(same_name())
    assert dyn is None and "subclasses gymnasium's MountainCarEnv" in why
    pendulum = gym.make("Pendulum-v1")
    for wrapped, kind in [
        (gym.wrappers.NormalizeObservation(gym.make("MountainCar-v0")), "NormalizeObservation"),
        (gym.wrappers.TransformReward(gym.make("Acrobot-v1"), lambda r: 2 * r), "TransformReward"),
        (gym.wrappers.RescaleAction(pendulum, -1.0, 1.0), "RescaleAction"),
        (gym.wrappers.ClipAction(gym.make("MountainCarContinuous-v0")), "ClipAction"),
    ]:
        dyn, why = dynamics_for(wrapped)
        assert dyn is None and f"its wrapper {kind} may change" in why
    noisy: Any = gym.make("Acrobot-v1")
    noisy.unwrapped.torque_noise_max = 0.1
    dyn, why = dynamics_for(noisy)
    assert dyn is None and "torque_noise_max=0.1" in why and "deterministic" in why
    short: Any = gym.make("Acrobot-v1")
    short.unwrapped.AVAIL_TORQUE = [-1.0, 1.0]
    dyn, why = dynamics_for(short)
    assert dyn is None and "AVAIL_TORQUE lists 2 torques" in why
    dyn, why = dynamics_for(gym.make("FrozenLake-v1"))
    assert dyn is None and "no simulator here" in why and "AcrobotEnv" in why
    # the plain layers of gym.make (time limit, checks) are no obstacle
    assert isinstance(dynamics_for(gym.make("Pendulum-v1"))[0], PendulumDynamics)


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("n", [1, 64])
def test_the_step_works_on_batches(env_id: str, n: int, rng: np.random.Generator) -> None:
    env, dyn = _make(env_id)
    _, low, high = CASES[env_id]
    states = rng.uniform(low, high, (n, len(low)))
    actions = _actions(dyn, n, rng)
    nxt, reward, term = dyn.step(states, actions)
    obs = dyn.observe(nxt)
    d, shape = len(low), env.observation_space.shape
    assert nxt.shape == (n, d) and nxt.dtype == np.float64
    assert reward.shape == (n,) and term.shape == (n,) and term.dtype == bool
    assert obs.shape == (n, *shape) and obs.dtype == env.observation_space.dtype == np.float32
    # the batch steps each state as it steps it alone (a box's actions also as (n,))
    for i in (0, n - 1):
        one = dyn.step(states[i : i + 1], actions[i : i + 1])
        assert np.array_equal(one[0][0], nxt[i]) and (one[1][0], one[2][0]) == (reward[i], term[i])
    if not dyn.n_actions:
        flat = dyn.step(states, actions[:, 0])
        assert all(np.array_equal(x, y) for x, y in zip(flat, (nxt, reward, term), strict=True))
    assert dyn.actions.describe == (
        f"Discrete({dyn.n_actions})"
        if dyn.n_actions
        else f"Box({env.action_space.low.tolist()}, {env.action_space.high.tolist()})"
    )


def test_check_against_names_the_first_disagreement_and_ignores_the_time_limit(
    rng: np.random.Generator,
) -> None:
    env: Any = gym.make("MountainCar-v0")  # a time limit of 200 steps
    dyn = MountainCarDynamics(env.unwrapped)
    states = _visited(env, dyn, 300)
    actions = _actions(dyn, 300, rng)
    env.reset(seed=3)
    before = np.array(env.unwrapped.state)
    assert check_against(dyn, env, states, actions) == ""  # 300 steps: no truncation in the way
    assert np.array_equal(env.unwrapped.state, before)  # the core's state is put back
    env.unwrapped.force = 0.0015
    msg = check_against(dyn, env, states, actions)
    assert msg.startswith("step ") and "differs by" in msg and "environment [" in msg, msg
    assert "simulator [" in msg
    with pytest.raises(ValueError, match=r"states of shape .* and actions of shape"):
        check_against(dyn, env, states, actions[:-1])
    with pytest.raises(ValueError, match="MountainCarEnv simulates, got PendulumEnv"):
        check_against(dyn, gym.make("Pendulum-v1"), states, actions)
    with pytest.raises(ValueError, match="atol must be >= 0"):
        check_against(dyn, env, states, actions, atol=-1.0)


def test_the_paths_method_takes_every_simulated_environment() -> None:
    """``simulator`` (the paths method's choice, and the default method's) hands over every
    simulated environment: CartPole's curve by splitting on survival, the others' (which
    declare a state box for the twist) by twisted SMC."""
    from imitation_meg.approx.deterministic import curve_method
    from imitation_meg.approx.rollouts import EnvSource

    cart = simulators.simulator(EnvSource("CartPole-v1"))[0]
    assert isinstance(cart, simulators.CartPoleDynamics) and curve_method(cart) == "paths"
    for env_id in ("MountainCar-v0", "Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0"):
        dyn, why = simulators.simulator(EnvSource(env_id))
        assert dyn is not None and why == "" and curve_method(dyn) == "smc"
        low, high, periodic = dyn.state_box()
        assert low.shape == high.shape == periodic.shape and np.all(low < high)
