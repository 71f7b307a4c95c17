"""The paths method: known-utility MEG of a deterministic environment from ``Z_beta(s0)``.

Its pieces are checked against independent answers: the CartPole simulator against gymnasium's
own environment, the splitting estimate of ``Z`` against complete enumeration of the action
sequences, and the identity ``sum_t log pi_beta = beta R - log Z_beta(s0)`` against the exact
tabular solver on random deterministic MDPs.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg.approx import ApproxMEGWarning, meg_approx, simulators
from imitation_meg.approx.curve import CurveInfo
from imitation_meg.approx.paths import curve_from_sums, enumerate_paths, log_partition, split_paths
from imitation_meg.approx.simulators import CartPoleDynamics, dynamics_for


def _cartpole_starts(n: int, seed: int = 0) -> np.ndarray:
    env = gym.make("CartPole-v1")
    dyn, _ = dynamics_for(env)
    assert dyn is not None
    rows = []
    for i in range(n):
        env.reset(seed=seed + i)
        rows.append(dyn.start(env))
    return np.stack(rows)


@pytest.mark.parametrize("integrator", ["euler", "semi-implicit euler"])
def test_cartpole_simulator_steps_as_gymnasium_does(integrator: str) -> None:
    env = gym.make("CartPole-v1")
    env.unwrapped.kinematics_integrator = integrator
    dyn, why = dynamics_for(env)
    assert dyn is not None, why
    rng = np.random.default_rng(0)
    ends = 0
    for seed in range(20):
        env.reset(seed=seed)
        state = dyn.start(env)[None]
        for _ in range(500):
            a = int(rng.integers(2))
            obs, r, term, trunc, _ = env.step(a)
            state, r_sim, term_sim = dyn.step(state, np.array([a]))
            np.testing.assert_allclose(dyn.observe(state)[0], obs, rtol=0, atol=1e-6)
            assert (float(r_sim[0]), bool(term_sim[0])) == (float(r), bool(term))
            if term or trunc:
                ends += bool(term)
                break
    assert ends == 20  # random actions drop the pole: the terminations were compared too


def test_splitting_estimates_z_as_complete_enumeration_gives_it() -> None:
    env = gym.make("CartPole-v1")
    dyn, _ = dynamics_for(env)
    assert isinstance(dyn, CartPoleDynamics)
    horizon, betas = 16, np.array([-2.0, -0.5, 0.0, 0.3, 2.0, 50.0])
    starts = _cartpole_starts(3, seed=7)
    sums = split_paths(dyn, starts, horizon, 4000, np.random.default_rng(1))
    est = log_partition(sums, betas).reshape(3, 2, -1)
    for k, start in enumerate(starts):
        exact = enumerate_paths(dyn, start, horizon).log_partition(betas)
        # each population of 2 000 particles alone: within 0.1 nats of the truth
        assert np.abs(est[k] - exact).max() < 0.1, (k, est[k], exact)
    with pytest.raises(ValueError, match="at least n_split=2 particles"):
        split_paths(dyn, starts, horizon, 1, np.random.default_rng(1))
    # and the estimate is not the same thing at another horizon (the check can fail)
    other = enumerate_paths(dyn, starts[0], horizon - 4).log_partition(betas)
    assert np.abs(est[0] - other).max() > 0.5


class _TableDynamics:
    """A deterministic tabular MDP on arrays of states (for the identity test only): taking
    ``a`` in ``s`` pays ``reward[s, a]`` and leads to ``nxt[s, a]``, or ends the episode where
    ``nxt[s, a]`` is ``-1``."""

    name = "table"

    def __init__(self, nxt: np.ndarray, reward: np.ndarray) -> None:
        self.nxt, self.reward, self.n_actions = nxt, reward, nxt.shape[1]

    def step(self, s, a):
        i = s[:, 0].astype(np.int64)
        j = self.nxt[i, a]
        return np.maximum(j, 0)[:, None].astype(np.float64), self.reward[i, a], j < 0


def _info(horizon: int, n_actions: int) -> CurveInfo:
    return CurveInfo("table", {}, horizon, {"kind": "discrete", "n": n_actions}, "paths")


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_actions=st.integers(2, 3),
    horizon=st.integers(2, 5),
    ends=st.sampled_from([0.0, 0.3]),
)
def test_paths_identity_gives_the_exact_meg_of_a_deterministic_mdp(
    seed: int, n_actions: int, horizon: int, ends: float
) -> None:
    """Against the exact solver, where a terminated episode goes on in an absorbing state worth
    0 (the tabular model of an ending; ``ends`` of the transitions end the episode)."""
    rng = np.random.default_rng(seed)
    S = 5
    nxt = rng.integers(0, S, size=(S, n_actions))
    nxt[rng.random(nxt.shape) < ends] = -1
    reward = rng.normal(size=(S, n_actions))
    T = np.zeros((S + 1, n_actions, S + 1))
    T[np.arange(S)[:, None], np.arange(n_actions)[None], np.where(nxt < 0, S, nxt)] = 1.0
    T[S, :, S] = 1.0
    utility = np.vstack([reward, np.zeros((1, n_actions))])
    init = np.zeros(S + 1)
    init[:2] = 0.5
    mdp = im.TabularMDP(T, utility, horizon=horizon, initial_state_dist=init)
    policy = rng.dirichlet(np.ones(n_actions) * 0.7, size=S + 1)
    exact = im.meg(policy, mdp)
    # every sequence from each start, many times over: Z is close to exact here
    starts = np.array([[0.0], [1.0]])
    sums = split_paths(_TableDynamics(nxt, reward), starts, horizon, 60_000, rng)
    meg, _ = curve_from_sums(sums, _info(horizon, n_actions)).conjugate(exact.expected_utility)
    assert meg == pytest.approx(exact.meg, abs=0.02 + 0.01 * exact.meg)


def test_the_uniform_policy_scores_zero() -> None:
    """Uniform actions are the model at beta = 0: the curve is 0 there and, by Jensen's
    inequality (log E[exp(beta R)] >= beta E[R]), at most 0 everywhere else."""
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    res = meg_approx(
        uniform,
        "CartPole-v1",
        horizon=60,
        method="paths",
        n_eval_episodes=200,
        n_starts=8,
        n_particles=512,
        seed=1,
    )
    assert res.method == "paths" and res.settled is True
    assert res.meg < 0.05 and res.low == 0.0
    assert abs(res.beta) < 0.01


def test_cartpole_scores_by_paths_by_default_and_repeats_itself() -> None:
    # a policy that pushes against the pole's lean balances for long; its MEG is high
    def lean(obs: np.ndarray) -> np.ndarray:
        right = 1.0 / (1.0 + np.exp(-40.0 * (obs[:, 2] + 0.3 * obs[:, 3])))
        return np.stack([1 - right, right], axis=1)

    kw: dict = {
        "horizon": 200,
        "n_eval_episodes": 100,
        "n_starts": 8,
        "n_particles": 512,
        "seed": 3,
    }
    res = meg_approx(lean, "CartPole-v1", **kw)
    again = meg_approx(lean, "CartPole-v1", **kw)
    assert res.method == "paths"
    assert (res.meg, res.low, res.high) == (again.meg, again.low, again.high)
    assert 0 < res.low <= res.meg <= res.high <= res.certificate + 1e-9
    assert res.meg > 5.0 and (res.high - res.low) < 0.3 * res.meg
    assert res.n_env_steps > 100 and res.particle_steps > 0


def test_paths_refuses_what_it_cannot_simulate() -> None:
    with pytest.raises(ValueError, match="method='soft_q'"):
        meg_approx(lambda o: np.full((len(o), 4), 0.25), "FrozenLake-v1", method="paths")
    wrapped = gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 2 * r)
    dyn, why = dynamics_for(wrapped)
    assert dyn is None and "TransformReward" in why


def test_rl_zoos_patched_time_limit_is_a_time_limit() -> None:
    """RL Zoo replaces gymnasium's TimeLimit by its own subclass when imported (only the
    ``truncated`` flag differs): CartPole behind it is still simulated."""
    patches = pytest.importorskip("rl_zoo3.gym_patches")
    env = patches.PatchedTimeLimit(gym.make("CartPole-v1").env, max_episode_steps=500)
    dyn, why = dynamics_for(env)
    assert isinstance(dyn, CartPoleDynamics), why


def test_a_simulator_that_disagrees_with_the_environment_is_caught(monkeypatch) -> None:
    class Heavier(CartPoleDynamics):
        def __init__(self, env):
            super().__init__(env)
            self.gravity *= 1.01

    monkeypatch.setitem(simulators._SIMULATORS, "CartPoleEnv", Heavier)
    with pytest.raises(ValueError, match="disagrees with CartPole-v1"):
        meg_approx(
            lambda o: np.full((len(o), 2), 0.5),
            "CartPole-v1",
            method="paths",
            n_eval_episodes=4,
            n_starts=2,
            n_particles=8,
        )


def test_too_few_particles_warn_and_say_unsettled() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = meg_approx(
            lambda o: np.full((len(o), 2), 0.5),
            "CartPole-v1",
            horizon=200,
            method="paths",
            n_eval_episodes=10,
            n_starts=2,
            n_particles=4,
            seed=0,
        )
    assert res.settled is False
    assert any(
        issubclass(w.category, ApproxMEGWarning) and "paths" in str(w.message) for w in caught
    )


def test_enumeration_counts_every_sequence() -> None:
    """The exact reference is itself checked where Z is known in closed form: one decision
    (Z = exp(beta), a reward of 1 either way), four (none ends so soon from near upright); with
    a policy, its expected return; and it refuses what it cannot follow."""
    env = gym.make("CartPole-v1")
    dyn, _ = dynamics_for(env)
    assert dyn is not None
    start = _cartpole_starts(1)[0]
    one = enumerate_paths(dyn, start, 1)
    assert one.log_partition(np.array([0.0, 1.5])) == pytest.approx([0.0, 1.5])
    assert math.isnan(one.expected_return)
    # every sequence of 4 decisions survives from near upright: Z_beta = exp(4 beta)
    four = enumerate_paths(dyn, start, 4, lambda o: np.full((len(o), 2), 0.5))
    assert four.log_partition(np.array([0.7])) == pytest.approx([2.8])
    assert four.expected_return == pytest.approx(4.0)
    with pytest.raises(ValueError, match="between 1 and 24"):
        enumerate_paths(dyn, start, 25)
    with pytest.raises(ValueError, match="one state of shape"):
        enumerate_paths(dyn, start[None], 3)
    with pytest.raises(TypeError, match="horizon must be an integer"):
        enumerate_paths(dyn, start, 3.0)  # type: ignore[arg-type]


def test_splitting_finds_rare_long_survival_as_the_exact_solver_does() -> None:
    """A walk on 7 cells that ends when it steps off either edge pays 1 per step: random
    actions survive 200 steps with probability about e^-25, so Z at large beta rests on
    sequences plain sampling would never see. A policy that steps towards the middle 9 times in
    10 is scored against the exact tabular solver (the ending as an absorbing state worth 0)."""
    W, H = 7, 200
    nxt = np.array([[s - 1, s + 1] for s in range(W)])
    nxt[nxt >= W] = -1  # off the edge: the episode ends (nxt -1 below already)
    reward = np.ones((W, 2))
    T = np.zeros((W + 1, 2, W + 1))
    T[np.arange(W)[:, None], np.arange(2)[None], np.where(nxt < 0, W, nxt)] = 1.0
    T[W, :, W] = 1.0
    utility = np.vstack([reward, np.zeros((1, 2))])
    mdp = im.TabularMDP(T, utility, horizon=H, initial_state_dist=np.eye(W + 1)[W // 2])
    toward = np.array([[0.9, 0.1] if s > W // 2 else [0.1, 0.9] for s in range(W)] + [[0.5, 0.5]])
    toward[W // 2] = 0.5
    exact = im.meg(toward, mdp)
    rng = np.random.default_rng(0)
    sums = split_paths(_TableDynamics(nxt, reward), np.full((4, 1), W // 2.0), H, 2048, rng)
    meg, _ = curve_from_sums(sums, _info(H, 2)).conjugate(exact.expected_utility)
    assert exact.meg > 5.0  # a long survival is worth many nats here
    assert meg == pytest.approx(exact.meg, rel=0.01)
    assert not sums.extinct.any()


def test_the_default_is_the_soft_q_fits_where_nothing_is_simulated() -> None:
    """``method=None`` on an environment the library does not simulate is the soft Q-fits, the
    same draws as ``method="soft_q"`` (so the published tables describe the default)."""
    from imitation_meg.approx.envs import TablePolicy, stationary_epsilon_greedy, validation_case

    case = validation_case("cliffworld_xy", horizon=6)
    pol = TablePolicy(stationary_epsilon_greedy(case.mdp, 0.3), case.observations)
    small = {"n_data_steps": 400, "n_eval_episodes": 20, "n_models": 2, "iterations": 2}
    small.update(steps_per_iteration=5, refine=1, seed=4)
    default = meg_approx(pol, case.make, **small)
    fits = meg_approx(pol, case.make, method="soft_q", **small)
    assert default.method == fits.method == "soft_q"
    assert (default.meg, default.low, default.high) == (fits.meg, fits.low, fits.high)


def test_command_line_scores_a_cartpole_agent_by_its_paths(tmp_path, capsys) -> None:
    """``imitation-meg score --env CartPole-v1 --policy ppo.zip --algo ppo`` takes the paths by
    default: the diagnostics and the time split are printed, ``--json`` keeps them."""
    import json

    import stable_baselines3 as sb3
    import torch as th

    from imitation_meg.cli import main

    th.manual_seed(0)
    model = sb3.PPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", n_steps=256, batch_size=64)
    model.learn(1024)
    model.save(tmp_path / "ppo.zip")
    argv = ["score", "--env", "CartPole-v1", "--policy", str(tmp_path / "ppo.zip"), "--algo", "ppo"]
    for opt in ("n_eval_episodes=200", "n_particles=256", "n_starts=8"):
        argv += ["--approx-option", opt]
    argv += ["--json", str(tmp_path / "r.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "the soft-optimal model's paths" in out and "random paths        256 from each of 8" in out
    )
    assert "time split          the curve" in out and "policy episodes" in out
    res = json.loads((tmp_path / "r.json").read_text())["result"]
    assert res["method"] == "paths" and res["n_eval_episodes"] == 200
    assert 0.0 < res["low"] <= res["meg"] <= res["high"] <= res["certificate"]
    assert set(res["timings"]) == {
        "the curve",
        "policy episodes",
        "check in the environment",
        "maximum and bootstrap",
    }
