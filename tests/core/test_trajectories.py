"""MEG from trajectories: occupancies, padding of early ends, bootstrap intervals, convergence."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.core.trajectories import (
    TrajectoryLengthWarning,
    empirical_occupancy,
    meg_from_trajectories,
    sample_trajectories,
    trajectory_state_actions,
)

CLIFF = "seals/CliffWorld7x4-v0"


@pytest.fixture
def small():
    mdp = im.envs.cliff_world(width=4, height=2, horizon=4)
    return mdp, im.policies.epsilon_greedy(mdp, 0.2)


def test_occupancy_by_hand():
    mdp = im.envs.cliff_world(width=4, height=2, horizon=2)
    states = np.array([[0, 5, 2], [0, 1, 1]])
    actions = np.array([[3, 1], [1, 0]])
    w = empirical_occupancy((states, actions), mdp, impossible="count")  # made-up steps
    expected = np.zeros((2, 8, 4))
    expected[0, 0, 3] = expected[0, 0, 1] = 0.5
    expected[1, 5, 1] = expected[1, 1, 0] = 0.5
    np.testing.assert_array_equal(w.numpy(), expected)


def test_sampler_matches_exact_occupancy(small):
    mdp, pi = small
    from imitation_meg.core.known import sa_occupancy_of

    w = empirical_occupancy(sample_trajectories(mdp, pi, 40_000, rng=0), mdp)
    np.testing.assert_allclose(w.numpy(), sa_occupancy_of(mdp, pi).numpy(), atol=0.01)


def test_estimate_converges_and_interval_covers(small):
    mdp, pi = small
    exact = im.meg(pi, mdp).meg
    errors = []
    for n in (30, 300, 3_000, 30_000):
        errs = [
            meg_from_trajectories(sample_trajectories(mdp, pi, n, rng=seed), mdp, n_boot=0).meg
            - exact
            for seed in range(5)
        ]
        errors.append(np.sqrt(np.mean(np.square(errs))))
    assert errors[-1] < 0.02 and errors[-1] < errors[1] / 3 < errors[0] / 3
    est = meg_from_trajectories(sample_trajectories(mdp, pi, 30_000, rng=7), mdp, n_boot=100, rng=8)
    assert est.n_trajectories == 30_000 and est.n_boot == 100 and est.replicates.shape == (100,)
    assert est.low <= exact <= est.high
    assert est.high - est.low < 0.1
    assert est.result.converged and est.mode == "known"


def test_small_sample_bias_is_upwards():
    mdp = im.envs.cliff_world(width=4, height=2, horizon=4)
    u = im.policies.uniform(mdp)
    small = [
        meg_from_trajectories(sample_trajectories(mdp, u, 10, rng=s), mdp, n_boot=0).meg
        for s in range(30)
    ]
    large = [
        meg_from_trajectories(sample_trajectories(mdp, u, 1000, rng=s), mdp, n_boot=0).meg
        for s in range(5)
    ]
    assert im.meg(u, mdp).meg == 0.0
    assert (
        0.01 < np.mean(small) < 0.2
    )  # exact value 0: every estimate is >= 0, the mean clearly positive
    assert np.mean(large) < np.mean(small) / 10


def test_bootstrap_is_reproducible_and_confidence_widens(small):
    mdp, pi = small
    data = sample_trajectories(mdp, pi, 200, rng=0)
    a = meg_from_trajectories(data, mdp, n_boot=50, rng=3)
    b = meg_from_trajectories(data, mdp, n_boot=50, rng=np.random.default_rng(3))
    assert (a.low, a.high) == (b.low, b.high)
    c = meg_from_trajectories(data, mdp, n_boot=50, rng=3, confidence=0.5)
    assert a.low <= c.low <= c.high <= a.high
    d = meg_from_trajectories(data, mdp, n_boot=0)
    assert d.meg == a.meg and np.isnan(d.low) and np.isnan(d.high)
    payload = a.to_dict()
    assert payload["n_trajectories"] == 200 and len(payload["replicates"]) == 50
    assert payload["result"]["meg"] == a.meg


def _frozen_lake_policy(mdp):
    """An epsilon-greedy policy that is deliberately non-uniform in the absorbing states."""
    pi = im.policies.epsilon_greedy(mdp, 0.3).clone()
    term = mdp.metadata["terminal_states"]
    pi[:, term] = th.tensor([0.7, 0.1, 0.1, 0.1], dtype=pi.dtype)
    return pi


def test_padding_in_absorbing_states_adds_nothing():
    """Early ends padded with a uniform action give exactly the MEG of the full-length data."""
    mdp = im.TabularMDP.from_env("FrozenLake-v1", horizon=20)
    term = set(mdp.metadata["terminal_states"])
    pi = _frozen_lake_policy(mdp)
    states, actions = sample_trajectories(mdp, pi, 2_000, rng=0)
    full = meg_from_trajectories((states, actions), mdp, n_boot=0)
    # Cut every trajectory where the gym episode would have terminated.
    cut_s, cut_a = [], []
    for s, a in zip(states, actions, strict=True):
        ends = [t for t in range(1, len(s)) if int(s[t]) in term]
        T = ends[0] if ends else len(a)
        cut_s.append(s[: T + 1])
        cut_a.append(a[:T])
    padded = meg_from_trajectories((cut_s, cut_a), mdp, n_boot=0)
    assert padded.n_padded > 500
    # The padded steps change the empirical occupancy (uniform instead of 0.7 / 0.1 actions) ...
    assert not th.allclose(
        empirical_occupancy((cut_s, cut_a), mdp), empirical_occupancy((states, actions), mdp)
    )
    # ... but not MEG: every model is uniform in an absorbing state, so those steps cancel.
    # Whatever the actions there, each padded step contributes log(1/|A|) to every model's
    # log-likelihood, which H log|A| cancels.
    assert padded.result.log_likelihood == pytest.approx(full.result.log_likelihood, abs=1e-9)
    assert padded.meg == pytest.approx(full.meg, abs=1e-9)
    assert padded.meg == pytest.approx(im.meg(pi, mdp).meg, rel=0.1)


def test_gym_frozen_lake_rollouts_reproduce_the_exact_value():
    """Real gymnasium episodes (terminating early) as imitation trajectories; integer observations."""
    import gymnasium as gym

    pytest.importorskip("imitation")
    from imitation.algorithms.mce_irl import TabularPolicy
    from imitation.data import rollout
    from imitation.data.wrappers import RolloutInfoWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv

    H = 20
    mdp = im.TabularMDP.from_env("FrozenLake-v1", horizon=H)
    pi = _frozen_lake_policy(mdp)
    venv = DummyVecEnv(
        [lambda: RolloutInfoWrapper(gym.make("FrozenLake-v1", max_episode_steps=H))] * 8
    )
    venv.seed(0)  # the slippery transitions: without a seed the test would vary from run to run
    policy = TabularPolicy(
        venv.observation_space, venv.action_space, pi.numpy(), np.random.default_rng(0)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trajs = rollout.generate_trajectories(
            policy,
            venv,
            rollout.make_sample_until(min_episodes=3_000),
            rng=np.random.default_rng(1),
        )
    assert any(len(t.acts) < H for t in trajs)
    est = meg_from_trajectories(trajs, mdp, n_boot=100, rng=2, confidence=0.99)
    exact = im.meg(pi, mdp).meg
    assert est.n_padded > 0 and est.n_trajectories == len(trajs)
    assert est.low <= exact <= est.high


def _seals_trajectories(mdp, pi, n, *, seed=1):
    import gymnasium as gym
    import seals  # noqa: F401 (registers the seals environment ids)

    pytest.importorskip("imitation")
    from imitation.algorithms.mce_irl import TabularPolicy
    from imitation.data import rollout
    from imitation.data.wrappers import RolloutInfoWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: RolloutInfoWrapper(gym.make(CLIFF))] * 8)
    venv.seed(seed)  # the same episodes on every run
    # seals' CliffWorld observes one-hot vectors; imitation's TabularPolicy wants the state index.
    tab = TabularPolicy(
        gym.spaces.Discrete(mdp.n_states), venv.action_space, pi.numpy(), np.random.default_rng(0)
    )

    class OnVectors(TabularPolicy):
        def predict(self, observation, state=None, episode_start=None, deterministic=False):
            return tab.predict(
                np.asarray(observation).argmax(-1), state, episode_start, deterministic
            )

    policy = OnVectors(tab.observation_space, tab.action_space, tab.pi, tab.rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rollout.generate_trajectories(
            policy, venv, rollout.make_sample_until(min_episodes=n), rng=np.random.default_rng(seed)
        )


def test_seals_infos_give_the_states_and_reproduce_the_exact_value():
    mdp = im.TabularMDP.from_env(CLIFF)
    pi = im.policies.epsilon_greedy(mdp, 0.4)
    trajs = _seals_trajectories(mdp, pi, 3_000)
    assert "old_state" in trajs[0].infos[0]
    est = meg_from_trajectories(trajs, mdp, n_boot=100, rng=0, confidence=0.99)
    exact = im.meg(pi, mdp).meg
    assert est.low <= exact <= est.high
    assert abs(est.meg - exact) < 0.1 * exact
    # Observation lookup (no infos) recovers the same states.
    import dataclasses

    bare = [dataclasses.replace(t, infos=None) for t in trajs[:50]]
    items_info = trajectory_state_actions(trajs[:50], mdp)
    items_obs = trajectory_state_actions(bare, mdp)
    for (s1, a1, f1), (s2, a2, f2) in zip(items_info, items_obs, strict=True):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(a1, a2)
        assert f1 == f2


def test_unknown_and_target_modes_use_the_empirical_occupancy(small):
    mdp, pi = small
    data = sample_trajectories(mdp, pi, 300, rng=0)
    w = empirical_occupancy(data, mdp)
    unk = meg_from_trajectories(data, mdp, features="all", n_boot=3, rng=0)
    assert unk.mode == "unknown"
    assert unk.meg == pytest.approx(im.meg_unknown(None, mdp, sa_occupancy=w).meg, abs=1e-9)
    known = meg_from_trajectories(data, mdp, n_boot=0)
    assert unk.meg >= known.meg - 1e-9
    tgt = meg_from_trajectories(data, mdp, target="row", n_boot=0)
    assert tgt.mode == "target"
    assert tgt.meg == pytest.approx(im.meg_target(None, mdp, "row", sa_occupancy=w).meg, abs=1e-9)


def test_signed(small):
    mdp, _pi = small
    anti = im.policies.anti_optimal(mdp)
    data = sample_trajectories(mdp, anti, 200, rng=0)
    assert meg_from_trajectories(data, mdp, signed=True, n_boot=0).meg < 0
    assert meg_from_trajectories(data, mdp, n_boot=0).meg > 0


def test_input_errors(small):
    mdp, pi = small
    states, actions = sample_trajectories(mdp, pi, 5, rng=0)
    with pytest.raises(ValueError, match="no trajectories"):
        meg_from_trajectories([], mdp)
    bad_a, bad_s = actions.copy(), states.copy()
    bad_a[0, 1], bad_s[0, 1] = 4, 8
    with pytest.raises(ValueError, match=r"actions \[4\] outside \[0, 4\)"):
        meg_from_trajectories((states, bad_a), mdp)
    with pytest.raises(ValueError, match=r"states \[8\] outside \[0, 8\)"):
        meg_from_trajectories((bad_s, actions), mdp)
    with pytest.raises(ValueError, match="3 states for 4 actions"):
        meg_from_trajectories((states[:, :3], actions), mdp)
    with pytest.raises(ValueError, match="must hold integers"):
        meg_from_trajectories((states + 0.5, actions), mdp)
    with pytest.raises(TypeError, match="item 0 is a int"):
        meg_from_trajectories([1, 2], mdp)
    with pytest.raises(TypeError, match="got dict"):
        meg_from_trajectories({"states": states}, mdp)
    with pytest.raises(ValueError, match="at most one of utility="):
        meg_from_trajectories((states, actions), mdp, features="all", target="row")
    with pytest.raises(ValueError, match="signed=True applies to known-utility MEG only"):
        meg_from_trajectories((states, actions), mdp, features="all", signed=True)
    with pytest.raises(ValueError, match="features must be an"):
        meg_from_trajectories((states, actions), mdp, features="everything")
    with pytest.raises(ValueError, match="n_boot must be"):
        meg_from_trajectories((states, actions), mdp, n_boot=-1)
    with pytest.raises(ValueError, match="confidence must lie"):
        meg_from_trajectories((states, actions), mdp, confidence=1.0)
    with pytest.raises(TypeError, match="rng must be"):
        meg_from_trajectories((states, actions), mdp, rng="seed")
    with pytest.raises(TypeError, match="mdp must be"):
        meg_from_trajectories((states, actions), "mdp")


def test_short_and_long_trajectories(small):
    mdp, pi = small
    states, actions = sample_trajectories(mdp, pi, 5, rng=0)
    # Short, final state known but not absorbing: a truncated episode.
    with pytest.raises(ValueError, match=r"stops after 2 of H=4 decisions .* not absorbing"):
        meg_from_trajectories((states[:, :3], actions[:, :2]), mdp)
    # Short, final state unknown.
    with pytest.raises(ValueError, match="final state is unknown"):
        meg_from_trajectories((states[:, :2], actions[:, :2]), mdp)
    # Longer than the horizon: the first H decisions are used, with a warning.
    long_s, long_a = sample_trajectories(mdp.with_horizon(6), pi[0], 5, rng=0)
    with pytest.warns(TrajectoryLengthWarning, match="only their first 4 decisions"):
        est = meg_from_trajectories((long_s, long_a), mdp, n_boot=0)
    assert est.n_cut == 5
    assert est.meg == pytest.approx(
        meg_from_trajectories((long_s[:, :5], long_a[:, :4]), mdp, n_boot=0).meg
    )


def test_absorbing_end_with_action_dependent_utility_is_refused():
    mdp = im.TabularMDP.from_env("FrozenLake-v1", horizon=5)
    goal = 15
    u = mdp.reward_sa().clone()
    u[goal, 0] = 1.0
    states = [np.array([14, goal])]  # a start at 14 is impossible (p0 is 0 there): counted
    actions = [np.array([2])]
    est = meg_from_trajectories((states, actions), mdp, n_boot=0, impossible="count")
    assert est.n_padded == 1 and est.n_impossible == 1
    with pytest.raises(ValueError, match="utility differs between actions"):
        meg_from_trajectories((states, actions), mdp, utility=u, n_boot=0, impossible="count")
    with pytest.raises(ValueError, match="state-action features"):
        meg_from_trajectories(
            (states, actions), mdp, features=np.ones((16, 4, 2)), n_boot=0, impossible="count"
        )


def test_observation_lookup_errors():
    from types import SimpleNamespace

    T = np.array([[[1.0, 0, 0], [0, 1, 0]], [[0, 0, 1], [0, 0, 1]], [[0, 0, 1], [0, 0, 1]]])
    obs_matrix = np.array([[1.0, 0], [0, 1], [0, 1]])  # states 1 and 2 look alike
    mdp = im.TabularMDP(T, np.zeros(3), 2, observation_matrix=obs_matrix)

    def traj(obs, acts):
        return SimpleNamespace(
            obs=np.asarray(obs, dtype=np.float32), acts=np.asarray(acts), infos=None, terminal=True
        )

    with pytest.raises(ValueError, match=r"ambiguous: states \[1, 2\]"):
        meg_from_trajectories([traj([[1, 0], [0, 1], [0, 1]], [1, 0])], mdp)
    with pytest.raises(ValueError, match=r"matches no state's row .*\(out of range\)"):
        meg_from_trajectories([traj([[1, 0], [0.5, 0.5], [0, 1]], [1, 0])], mdp)
    with pytest.raises(ValueError, match="observation_matrix rows have 2 entries"):
        meg_from_trajectories([traj([[1, 0, 0]] * 3, [1, 0])], mdp)
    with pytest.raises(ValueError, match="expected 3 observations for 2 actions"):
        meg_from_trajectories([traj([[1, 0]] * 2, [1, 0])], mdp)
    plain = im.TabularMDP(T, np.zeros(3), 2)
    with pytest.raises(ValueError, match="has no observation_matrix"):
        meg_from_trajectories([traj([[1, 0]] * 3, [1, 0])], plain)
    with pytest.raises(ValueError, match="observation 7 at step 1 is out of range"):
        meg_from_trajectories([traj([0, 7, 2], [1, 0])], plain)
    # Integer observations are state indices; state 0 -> action 1 -> state 1 -> action 0 -> 2.
    est = meg_from_trajectories([traj([0, 1, 2], [1, 0])], plain, n_boot=0)
    assert est.n_trajectories == 1
