"""MiniGrid layouts as exact MDPs: lockstep with the real environment, the exact utility, refusals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th

pytest.importorskip("minigrid")

import gymnasium as gym

import imitation_meg as im
from imitation_meg.envs.minigrid import (
    agent_cells,
    minigrid_mdp,
    minigrid_target,
    wrap_observation,
)

# (id, seed, observation stack): small layouts in the default run, the larger ones expensive.
LAYOUTS = [
    ("MiniGrid-Empty-5x5-v0", 0, "image"),
    ("MiniGrid-DoorKey-5x5-v0", 3, "image"),
    ("MiniGrid-LavaGapS5-v0", 1, "flat"),
    ("MiniGrid-LavaCrossingS9N1-v0", 0, "full"),
    ("MiniGrid-DistShift1-v0", 0, "image"),
    ("MiniGrid-DistShift2-v0", 0, "image"),
    ("MiniGrid-MultiRoom-N2-S4-v0", 0, "image"),
    pytest.param("MiniGrid-SimpleCrossingS9N1-v0", 2, "image", marks=pytest.mark.expensive),
    pytest.param("MiniGrid-KeyCorridorS3R1-v0", 0, "image", marks=pytest.mark.expensive),
    pytest.param("MiniGrid-FourRooms-v0", 0, "image", marks=pytest.mark.expensive),
    pytest.param("MiniGrid-Unlock-v0", 0, "image", marks=pytest.mark.expensive),
    pytest.param("MiniGrid-DoorKey-6x6-v0", 1, "rgb", marks=pytest.mark.expensive),
]


def _fingerprint(env: gym.Env, terminated: bool) -> tuple:
    """The environment's state from its own encodings, independent of the builder's keys."""
    u = env.unwrapped
    carrying = None if u.carrying is None else u.carrying.encode()
    pos = tuple(int(v) for v in u.agent_pos)
    return pos, int(u.agent_dir), u.grid.encode().tobytes(), carrying, bool(terminated)


def lockstep(mdp: im.TabularMDP, env_id: str, seed: int, observation: str) -> None:
    """From every enumerated state, stepping (a copy of) the real wrapped environment with every
    action gives the MDP's successor, reward, termination and observations."""
    meta = mdp.metadata
    S, A = mdp.n_states, mdp.n_actions
    M = meta["max_steps"]
    nxt = mdp.next_state[..., 0].numpy()
    assert bool((mdp.prob[..., 0] == 1).all())
    obs_table = mdp.observation_matrix.numpy()
    root = wrap_observation(gym.make(env_id), observation)
    obs0, _ = root.reset(seed=seed)
    saved: dict[int, bytes] = {}  # each state's environment, pickled (a faithful copy)
    prints: dict[int, tuple] = {}
    for s in range(S):  # breadth-first order: a state's parent comes first
        p, a = int(meta["parent"][s]), int(meta["parent_action"][s])
        if p < 0:
            env, obs, term = root, obs0, False
        else:
            env = pickle.loads(saved[p])
            obs, _, term, _, _ = env.step(a)
        np.testing.assert_array_equal(obs, obs_table[s], err_msg=f"observation of state {s}")
        assert int(meta["depth"][s]) == env.unwrapped.step_count
        saved[s], prints[s] = pickle.dumps(env), _fingerprint(env, term)
        assert bool(term) == (meta["terminal"][s] != 0)
    assert len(set(prints.values())) == S, "two states of the MDP are the same environment state"
    for s in range(S):
        if meta["terminal"][s] != 0:
            assert (nxt[s] == s).all() and not meta["success"][s].any()
            continue
        depth = int(meta["depth"][s])
        for a in range(A):
            env = pickle.loads(saved[s])
            obs, reward, term, _, _ = env.step(a)
            t = int(nxt[s, a])
            assert _fingerprint(env, term) == prints[t], f"successor of ({s}, {a})"
            np.testing.assert_array_equal(obs, obs_table[t])
            expected = (1 - 0.9 * (depth + 1) / M) if meta["success"][s, a] else 0.0
            assert reward == pytest.approx(expected, abs=1e-12), f"reward of ({s}, {a})"


@pytest.mark.parametrize(("env_id", "seed", "observation"), LAYOUTS)
def test_lockstep_layouts(env_id: str, seed: int, observation: str) -> None:
    mdp = minigrid_mdp(env_id, seed=seed, observation=observation)
    lockstep(mdp, env_id, seed, observation)


def _time_augmented(mdp: im.TabularMDP) -> tuple[im.TabularMDP, np.ndarray]:
    """The MDP whose states are (state, time), with MiniGrid's time-dependent reward
    ``success * (1 - 0.9 (t + 1) / M)``; returns it and the map (s, t) -> index."""
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    M = mdp.metadata["max_steps"]
    nxt = mdp.next_state[..., 0].numpy()
    succ = mdp.metadata["success"]
    idx = np.arange(S * (H + 1)).reshape(H + 1, S)  # (t, s)
    next_state = np.empty((H + 1, S, A), dtype=np.int64)
    reward = np.zeros((H + 1, S, A))
    for t in range(H + 1):
        next_state[t] = idx[min(t + 1, H)][nxt]
        reward[t] = succ * (1 - 0.9 * (t + 1) / M)
    p0 = np.zeros(S * (H + 1))
    p0[idx[0]] = mdp.initial_state_dist.numpy()
    aug = im.TabularMDP(
        (next_state.reshape(-1, A, 1), np.ones(((H + 1) * S, A, 1))),
        reward.reshape(-1, A),
        H,
        p0,
    )
    return aug, idx


@pytest.mark.parametrize("env_id", ["MiniGrid-Empty-5x5-v0", "MiniGrid-LavaGapS5-v0"])
def test_reward_utility_is_minigrids_time_dependent_reward(env_id: str, rng) -> None:
    """MEG of the time-independent 'reward' utility equals MEG of MiniGrid's own reward in an
    MDP whose states carry the time; the bare success indicator does not."""
    env = gym.make(env_id, max_steps=12)
    mdp = minigrid_mdp(env, seed=0, horizon=9)
    aug, idx = _time_augmented(mdp)
    noise = th.as_tensor(rng.dirichlet(np.ones(mdp.n_actions), size=mdp.n_states))
    pi = 0.5 * im.policies.optimal(mdp)[0] + 0.5 * noise
    pi_aug = pi[np.argsort(idx.reshape(-1)) % mdp.n_states]
    exact = im.meg(pi_aug, aug)
    ours = im.meg(pi, mdp)
    assert ours.meg == pytest.approx(exact.meg, rel=1e-9, abs=1e-10)
    assert ours.meg > 0.1
    success = im.meg(pi, minigrid_mdp(env, seed=0, horizon=9, utility="success"))
    assert abs(success.meg - exact.meg) > 1e-4


def test_agent_starts_and_targets() -> None:
    starts = [((1, 1), 0), ((2, 2), 1), ((3, 1), 3)]
    mdp = minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=starts)
    p0 = mdp.initial_state_dist.numpy()
    assert np.flatnonzero(p0).tolist() == [0, 1, 2]
    np.testing.assert_allclose(p0[:3], 1 / 3)
    cells = agent_cells(mdp)
    assert [(cells[i], int(mdp.metadata["agent_dir"][i])) for i in range(3)] == starts
    res = im.meg_target(im.policies.uniform(mdp), mdp, cells)
    assert res.meg == pytest.approx(0.0, abs=1e-9)
    assert minigrid_target(mdp, "row")[:3] == [1, 2, 1]
    assert minigrid_target(mdp, "column")[:3] == [1, 2, 3]
    on_goal = minigrid_target(mdp, "goal")
    assert mdp.metadata["goal_cells"] == [(3, 3)]
    assert on_goal == [c == (3, 3) for c in cells] and any(on_goal)
    with pytest.raises(ValueError, match="kind must be"):
        minigrid_target(mdp, "lava")


def test_auto_observation_picks_the_matching_stack() -> None:
    env = gym.make("MiniGrid-Empty-5x5-v0")
    flat_space = wrap_observation(gym.make("MiniGrid-Empty-5x5-v0"), "flat").observation_space
    mdp = minigrid_mdp(env, observation="auto", observation_space=flat_space)
    assert mdp.metadata["observation"] == "flat"
    assert tuple(mdp.observation_matrix.shape[1:]) == flat_space.shape
    with pytest.raises(ValueError, match="none of the standard observation stacks"):
        minigrid_mdp(
            "MiniGrid-Empty-5x5-v0",
            observation="auto",
            observation_space=gym.spaces.Box(0, 1, (5,)),
        )


@pytest.mark.parametrize("observation", ["image", "flat", "full", "rgb", "rgb-full"])
def test_building_prints_no_gymnasium_forwarding_warning(observation: str) -> None:
    """minigrid 2.3's wrappers read ``env.width`` / ``env.get_frame`` through gymnasium 0.29's
    wrappers, which warn; the build silences that warning, and only that one."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        minigrid_mdp("MiniGrid-Empty-5x5-v0", observation=observation)
    assert not [w for w in caught if "other wrappers is deprecated" in str(w.message)]
    # outside the build, the caller's own use of the forwarding still warns (gymnasium 0.29;
    # gymnasium 1.x forwards no attribute through a wrapper)
    if not gym.__version__.startswith("0."):
        return
    env = wrap_observation(gym.make("MiniGrid-Empty-5x5-v0"), observation)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _ = env.width
    assert any("other wrappers is deprecated" in str(w.message) for w in caught)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="moves its obstacles at random"):
        minigrid_mdp("MiniGrid-Dynamic-Obstacles-5x5-v0")
    with pytest.raises(ValueError, match="BabyAI level"):
        minigrid_mdp("BabyAI-GoToRedBall-v0")
    with pytest.raises(ValueError, match="more than max_states=50"):
        minigrid_mdp("MiniGrid-DoorKey-5x5-v0", seed=3, max_states=50)
    with pytest.raises(ValueError, match="not among the verified ones"):
        minigrid_mdp("MiniGrid-Fetch-5x5-N2-v0")
    with pytest.raises(ValueError, match=r"horizon must be an integer in \[1, max_steps=100\]"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", horizon=101)
    with pytest.raises(ValueError, match="utility must be"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", utility="shaped")
    with pytest.raises(ValueError, match="unknown observation"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", observation="pixels")
    with pytest.raises(ValueError, match="lies off the 5x5 grid"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=[((7, 1), 0)])
    with pytest.raises(ValueError, match="on a wall"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=[((0, 0), 0)])
    with pytest.raises(TypeError, match="needs a MiniGrid environment"):
        minigrid_mdp("FrozenLake-v1")
    from minigrid.wrappers import NoDeath, PositionBonus

    with pytest.raises(ValueError, match="NoDeath: it changes what lava does"):
        minigrid_mdp(NoDeath(gym.make("MiniGrid-LavaGapS5-v0"), no_death_types=("lava",)))
    with pytest.raises(ValueError, match="PositionBonus"):
        minigrid_mdp(PositionBonus(gym.make("MiniGrid-Empty-5x5-v0")))


def test_starts_where_an_episode_cannot_begin_are_refused() -> None:
    # A start on lava or on the goal built an MDP whose first state is one the environment
    # never has at a decision (stepping onto either ends the episode), and scored it.
    with pytest.raises(ValueError, match=r"\(\(2, 1\), 0\) is on a lava square.*ends the episode"):
        minigrid_mdp("MiniGrid-LavaGapS5-v0", agent_starts=[((2, 1), 0)])
    with pytest.raises(ValueError, match=r"\(\(3, 3\), 2\) is on a goal square"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=[((1, 1), 0), ((3, 3), 2)])
    # A start listed twice put p0's second share on a state the search found, not a start.
    with pytest.raises(ValueError, match=r"\(\(1, 1\), 0\) is listed twice"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=[((1, 1), 0), ((1, 1), 0)])
    for bad in ([((1.5, 1), 0)], [((True, 1), 0)], [((1, 1), 0.0)]):
        with pytest.raises(ValueError, match="must be integers"):
            minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=bad)
    with pytest.raises(TypeError, match="agent_starts must be a list"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts={(1, 1): 0})
    with pytest.raises(ValueError, match=r"entries must be \(\(x, y\), direction\)"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=((1, 1), 0))  # not in a list
    # The same start in another direction is another state: allowed.
    mdp = minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=[((1, 1), 0), ((1, 1), 1)])
    assert np.flatnonzero(mdp.initial_state_dist.numpy()).tolist() == [0, 1]


def test_seeds_must_be_non_negative_integers() -> None:
    # Formerly -1 reached numpy's SeedSequence (a traceback) and 1.5 was truncated to 1.
    with pytest.raises(ValueError, match=r"seed must be a non-negative integer.*got -1"):
        minigrid_mdp("MiniGrid-Empty-5x5-v0", seed=-1)
    for seed in (1.5, "3", True, None):
        with pytest.raises(TypeError, match="seed must be a non-negative integer"):
            minigrid_mdp("MiniGrid-Empty-5x5-v0", seed=seed)
    assert minigrid_mdp("MiniGrid-Empty-5x5-v0", seed=np.int64(2)).metadata["seed"] == 2
