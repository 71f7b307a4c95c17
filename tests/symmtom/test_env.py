"""Rule tests for the SymmToM environment: hand-computed rewards in constructed situations."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from imitation_meg.symmtom import SymmToMWarning, observation_size, parallel_env
from imitation_meg.symmtom.agents import RandomPolicy, run_episodes

pettingzoo_test = pytest.importorskip("pettingzoo.test")

NONE, PX, MX, PY, MY = range(5)


def make(n=2, w=6, c=2, *, positions, bases=None, first_hand=None, knowledge=None, seed=0, **kw):
    """An env reset to a fixed layout. Default bases sit in the far column x = w - 1."""
    env = parallel_env(n_agents=n, width=w, n_pieces=c, **kw)
    if bases is None:
        bases = [(w - 1, y) for y in range(n)]
    if first_hand is None:
        first_hand = np.zeros((n, c), dtype=bool)
        for p in range(c):
            first_hand[p % n, p] = True
    opts = {"positions": positions, "bases": bases, "first_hand": first_hand}
    if knowledge is not None:
        opts["knowledge"] = np.asarray(knowledge, dtype=bool) | first_hand
    obs, _infos = env.reset(seed=seed, options=opts)
    return env, obs


def act(env, *pairs):
    return env.step({f"agent_{i}": np.array(p) for i, p in enumerate(pairs)})


# ----------------------------------------------------------------------------- spaces and reset
@pytest.mark.parametrize(("oracle", "size"), [(False, 35), (True, 44)])
def test_space_sizes_n3_c3(oracle, size):
    env = parallel_env(n_agents=3, width=6, n_pieces=3, oracle=oracle)
    assert env.observation_space("agent_0").shape == (size,)
    assert observation_size(3, 3, oracle=oracle) == size
    obs, _ = env.reset(seed=0)
    assert all(o.shape == (size,) and o.dtype == np.float32 for o in obs.values())
    assert tuple(env.action_space("agent_2").nvec) == (5, 3)


@pytest.mark.parametrize(("n", "c"), [(4, 8), (3, 9), (4, 12)])
def test_observation_size_formula(n, c):
    env = parallel_env(n_agents=n, width=12, n_pieces=c)
    obs, _ = env.reset(seed=1)
    assert obs["agent_0"].shape == (c * (2 * n - 1) + 6 * n + 2,)


def test_action_sample_is_uniform_over_move_and_piece():
    env = parallel_env(n_agents=3, width=6, n_pieces=3)
    space = env.action_space("agent_0")
    space.seed(0)
    counts = np.zeros((5, 3))
    for _ in range(6000):
        m, p = space.sample()
        counts[m, p] += 1
    expected = 6000 / 15
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 36.1  # 99.9% quantile of chi2 with 14 dof


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("n", "w", "c"), [(3, 6, 3), (4, 6, 8), (3, 12, 9), (4, 12, 6)])
def test_reset_invariants(seed, n, w, c):
    env = parallel_env(n_agents=n, width=w, n_pieces=c)
    obs, infos = env.reset(seed=seed)
    assert env.agents == [f"agent_{i}" for i in range(n)]
    assert len({tuple(p) for p in env.positions.tolist()}) == n
    assert len({tuple(p) for p in env.bases.tolist()}) == n
    assert ((env.positions >= 0) & (env.positions < w)).all() and (
        (env.bases >= 0) & (env.bases < w)
    ).all()
    assert (env.first_hand.sum(axis=0) == 1).all()
    assert set(env.first_hand.sum(axis=1).tolist()) <= {c // n, -(-c // n)}
    assert (env.knowledge == env.first_hand).all()
    assert env.timestep == 0
    for a in env.agents:
        assert env.observation_space(a).contains(obs[a])
        assert infos[a]["totals"]["reward"] == 0


def test_seeding_reproducible_and_only_through_reset():
    def rollout(seed):
        env = parallel_env(n_agents=3, width=6, n_pieces=3)
        obs, _ = env.reset(seed=seed)
        pol = RandomPolicy(123)
        trace = [np.concatenate(list(obs.values()))]
        while env.agents:
            obs, *_ = env.step({a: pol(None, env, 0) for a in env.agents})
            trace.append(np.concatenate(list(obs.values())) if obs else np.zeros(0))
        return trace

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    assert not (a[0] == c[0]).all()
    np.random.seed(0)  # global seeding must not matter
    d = rollout(7)
    assert all((x == y).all() for x, y in zip(a, d, strict=True))


def test_pettingzoo_parallel_api_test():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SymmToMWarning)
        pettingzoo_test.parallel_api_test(
            parallel_env(n_agents=3, width=6, n_pieces=3), num_cycles=100
        )
        pettingzoo_test.parallel_api_test(
            parallel_env(n_agents=4, width=6, n_pieces=8, oracle=True), num_cycles=50
        )


def test_seed_test_of_pettingzoo():
    from pettingzoo.test import parallel_seed_test

    parallel_seed_test(lambda: parallel_env(n_agents=3, width=6, n_pieces=3))


# ----------------------------------------------------------------------------- speech and rewards
def test_two_agent_exchange_then_repeat_gives_zero():
    env, _ = make(positions=[(1, 1), (2, 1)])
    _, rew, _, _, info = act(env, (NONE, 0), (NONE, 1))
    assert rew == {"agent_0": 2.0, "agent_1": 2.0}
    assert info["agent_0"]["listen_reward"] == 1 and info["agent_0"]["speak_reward"] == 1
    assert env.knowledge.all()
    _, rew, *_ = act(env, (NONE, 0), (NONE, 1))
    assert rew == {"agent_0": 0.0, "agent_1": 0.0}
    _, rew, *_ = act(env, (NONE, 1), (NONE, 0))  # second-hand pieces, known to the listener
    assert rew == {"agent_0": 0.0, "agent_1": 0.0}


def test_heard_knowledge_usable_only_from_next_step():
    # agent 1 tells agent 0 piece 1; in the same step agent 0 tries to relay piece 1 to agent 2.
    env, _ = make(n=3, c=3, positions=[(2, 2), (1, 2), (3, 2)])
    _, rew, _, _, info = act(env, (NONE, 1), (NONE, 1), (NONE, 2))
    # agent 1 -> agent 0 (piece 1 new): 0 +1 listen, 1 +1 speak; agent 2 -> agent 0 (piece 2 new): +1/+1.
    # agent 0 said piece 1 before knowing it: nothing said.
    assert rew == {"agent_0": 2.0, "agent_1": 1.0, "agent_2": 1.0}
    assert info["agent_0"]["wrong_speech"] == 1
    _, rew, *_ = act(env, (NONE, 1), (NONE, 1), (NONE, 2))
    # now agent 0 relays piece 1 to agent 2 (not to agent 1, who is out of range at distance 2).
    assert rew == {"agent_0": 1.0, "agent_1": 0.0, "agent_2": 1.0}


def test_stale_speech_timing_of_the_original_code():
    """speech_timing="stale": what an agent may say is its knowledge at the start of the previous
    step, so a piece heard at step t can be relayed from step t + 2 (fresh: t + 1)."""
    layout = {"n": 3, "c": 3, "positions": [(2, 2), (1, 2), (3, 2)]}
    fresh, _ = make(**layout)
    stale, _ = make(**layout, speech_timing="stale")
    actions = ((NONE, 1), (NONE, 1), (NONE, 2))
    first = {"agent_0": 2.0, "agent_1": 1.0, "agent_2": 1.0}
    relay = {"agent_0": 1.0, "agent_1": 0.0, "agent_2": 1.0}
    nothing = dict.fromkeys(relay, 0.0)
    assert act(fresh, *actions)[1] == first and act(stale, *actions)[1] == first
    _, rew, _, _, info = act(stale, *actions)
    assert rew == nothing and info["agent_0"]["wrong_speech"] == 1
    assert act(fresh, *actions)[1] == relay
    assert act(stale, *actions)[1] == relay  # step t + 2
    assert act(fresh, *actions)[1] == nothing  # agent 2 knows piece 1 already


def test_stale_speech_can_say_a_piece_just_forgotten():
    """Stale timing: right after a recharge the agent can still say a forgotten second-hand piece."""
    layout = {
        "n": 3,
        "c": 3,
        "positions": [(1, 1), (5, 5), (2, 3)],
        "bases": [(1, 2), (5, 0), (0, 5)],
        "knowledge": [[1, 1, 1], [0, 1, 0], [0, 0, 1]],
    }
    for timing, second in (("fresh", 0.0), ("stale", 1.0)):
        env, _ = make(**layout, speech_timing=timing)
        # agent 0 steps onto its base with full knowledge: recharge 3 * 2, forgets pieces 1 and 2;
        # its piece 0 reaches agent 2 (in range of the base)
        _, rew, _, _, info = act(env, (PY, 0), (NONE, 1), (NONE, 2))
        assert rew["agent_0"] == 6.0 + 1.0 and info["agent_0"]["correct_base_use"] == 1
        assert env.knowledge[0].tolist() == [True, False, False]
        # next step: agent 0 says piece 1, which it no longer knows; agent 2 lacks it
        _, rew, *_ = act(env, (NONE, 1), (NONE, 1), (NONE, 0))
        assert rew["agent_0"] == second and rew["agent_2"] == second


def test_two_speakers_same_new_piece_give_two():
    know = np.array([[0, 0, 1], [1, 0, 0], [1, 1, 0]], dtype=bool)
    fh = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=bool)
    env, _ = make(n=3, c=3, positions=[(2, 2), (1, 2), (3, 3)], first_hand=fh, knowledge=know)
    _, rew, _, _, info = act(env, (NONE, 2), (NONE, 0), (NONE, 0))
    # agents 1 and 2 both tell agent 0 piece 0: agent 0 +2; each speaker +1.
    # agent 0 tells piece 2 to both (new for both): +2. agents 1 and 2 are at distance 2: no exchange.
    assert info["agent_0"]["listen_reward"] == 2 and info["agent_0"]["speak_reward"] == 2
    assert rew == {"agent_0": 4.0, "agent_1": 2.0, "agent_2": 2.0}


def test_rewards_use_positions_after_movement():
    env, _ = make(positions=[(1, 1), (3, 1)])  # distance 2: out of range before moving
    _, rew, *_ = act(env, (PX, 0), (NONE, 1))
    assert rew == {"agent_0": 2.0, "agent_1": 2.0}
    env, _ = make(positions=[(1, 1), (2, 1)])  # in range before, out of range after
    _, rew, *_ = act(env, (MX, 0), (NONE, 1))
    assert rew == {"agent_0": 0.0, "agent_1": 0.0}


@pytest.mark.parametrize(
    ("hearing", "other", "hears"),
    [
        (1, (3, 3), True),
        (1, (1, 3), True),
        (1, (4, 2), False),
        (1, (2, 4), False),
        (2, (4, 4), True),
        (2, (5, 2), False),
    ],
)
def test_hearing_range_is_chebyshev(hearing, other, hears):
    env, _ = make(w=8, hearing=hearing, positions=[(2, 2), other])
    _, rew, *_ = act(env, (NONE, 0), (NONE, 0))  # agent 1 says piece 0, unknown to it: silent
    assert rew["agent_1"] == (1.0 if hears else 0.0)
    assert rew["agent_0"] == (1.0 if hears else 0.0)


@pytest.mark.parametrize(("n", "c"), [(3, 3), (3, 6), (4, 4), (4, 12)])
def test_recharge_gives_c_times_n_minus_1_and_forgets_second_hand(n, c):
    know = np.zeros((n, c), dtype=bool)
    know[0] = True
    positions = [(0, 0)] + [(5, 2 * k) for k in range(n - 1)]
    bases = [(0, 0)] + [(3, 2 * k) for k in range(n - 1)]
    env, _ = make(n=n, c=c, positions=positions, bases=bases, knowledge=know)
    actions = [(NONE, 0)] * n
    _, rew, _, _, info = act(env, *actions)
    assert rew["agent_0"] == c * (n - 1)
    assert info["agent_0"]["correct_base_use"] == 1
    assert (env.knowledge[0] == env.first_hand[0]).all()
    _, rew, _, _, info = act(env, *actions)  # still on the base, no longer complete
    assert rew["agent_0"] == 0 and info["agent_0"]["correct_base_use"] == 0


def test_recharge_needs_complete_knowledge_at_start_of_step():
    know = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]], dtype=bool)
    env, _ = make(
        n=3, c=3, positions=[(0, 0), (1, 0), (4, 4)], bases=[(0, 0), (5, 5), (5, 4)], knowledge=know
    )
    _, rew, *_ = act(env, (NONE, 0), (NONE, 1), (NONE, 2))
    assert (
        rew["agent_0"] == 2.0
    )  # heard piece 1 (+1), told piece 0 to agent 1 (+1); no recharge yet
    _, rew, *_ = act(env, (NONE, 1), (MX + 1, 1), (NONE, 2))  # agent 1 walks away (+y)
    assert rew["agent_0"] == 6.0


def test_base_without_knowledge_or_foreign_base_gives_nothing():
    know = np.array([[1, 1, 1], [0, 1, 0], [0, 0, 1]], dtype=bool)
    bases = [(5, 5), (0, 0), (4, 1)]
    # agent 0 (complete) steps onto agent 1's base: 0, and not a use of its own base.
    env, _ = make(n=3, c=3, positions=[(0, 1), (5, 3), (4, 3)], bases=bases, knowledge=know)
    _, rew, _, _, info = act(env, (MY, 0), (NONE, 1), (NONE, 2))
    assert env.positions[0].tolist() == [0, 0]
    assert rew["agent_0"] == 0 and info["agent_0"]["correct_base_use"] == 0
    assert info["agent_0"]["incorrect_base_use"] == 0
    # agent 2 (incomplete) steps onto its own base: 0 reward, logged as an incorrect use.
    _, rew, _, _, info = act(env, (NONE, 0), (NONE, 1), (MY, 2))
    _, rew, _, _, info = act(env, (NONE, 0), (NONE, 1), (MY, 2))
    assert env.positions[2].tolist() == [4, 1]
    assert rew["agent_2"] == 0 and info["agent_2"]["incorrect_base_use"] == 1
    _, rew, _, _, info = act(env, (NONE, 0), (NONE, 1), (NONE, 2))  # staying is not a new arrival
    assert (
        info["agent_2"]["incorrect_base_use"] == 0
        and info["agent_2"]["totals"]["incorrect_base_use"] == 1
    )


# ----------------------------------------------------------------------------- movement
def test_move_into_wall_is_cancelled_and_logged():
    env, _ = make(positions=[(0, 0), (5, 5)])
    _, _, _, _, info = act(env, (MX, 0), (PY, 1))
    assert env.positions.tolist() == [[0, 0], [5, 5]]
    assert info["agent_0"]["useless_move"] == 1 and info["agent_1"]["useless_move"] == 1
    act(env, (PX, 0), (MY, 1))
    assert env.positions.tolist() == [[1, 0], [5, 4]]


def test_move_into_stationary_agent_is_cancelled():
    env, _ = make(positions=[(1, 1), (2, 1)])
    act(env, (PX, 0), (NONE, 1))
    assert env.positions.tolist() == [[1, 1], [2, 1]]


def test_follow_and_swap_are_allowed():
    env, _ = make(n=3, c=3, positions=[(1, 1), (2, 1), (4, 4)])
    act(env, (PX, 0), (PX, 1), (NONE, 2))  # 0 follows 1
    assert env.positions.tolist() == [[2, 1], [3, 1], [4, 4]]
    act(env, (PX, 0), (MX, 1), (NONE, 2))  # swap
    assert env.positions.tolist() == [[3, 1], [2, 1], [4, 4]]


def test_chain_blocked_by_stationary_agent_cancels_all():
    env, _ = make(n=3, c=3, positions=[(1, 1), (2, 1), (3, 1)])
    act(env, (PX, 0), (PX, 1), (NONE, 2))
    assert env.positions.tolist() == [[1, 1], [2, 1], [3, 1]]
    env, _ = make(n=3, c=3, positions=[(3, 1), (4, 1), (5, 1)])
    act(env, (PX, 0), (PX, 1), (PX, 2))  # agent 2 hits the wall, so the others are blocked too
    assert env.positions.tolist() == [[3, 1], [4, 1], [5, 1]]


def test_conflict_for_one_cell_resolved_by_env_generator():
    winners = []
    for seed in range(40):
        env, _ = make(positions=[(1, 1), (3, 1)], seed=seed)
        act(env, (PX, 0), (MX, 1))
        pos = env.positions.tolist()
        assert pos in ([[2, 1], [3, 1]], [[1, 1], [2, 1]])
        winners.append(0 if pos[0] == [2, 1] else 1)
        env2, _ = make(positions=[(1, 1), (3, 1)], seed=seed)
        act(env2, (PX, 0), (MX, 1))
        assert env2.positions.tolist() == pos  # same seed, same tie-break
    assert 8 <= sum(winners) <= 32


# ----------------------------------------------------------------------------- observation, episode
def test_observation_layout_by_hand():
    fh = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=bool)
    env, obs = make(
        n=3, c=3, positions=[(0, 2), (1, 3), (5, 5)], bases=[(2, 2), (1, 0), (5, 0)], first_hand=fh
    )
    obs, *_ = act(env, (PX, 0), (NONE, 1), (MY, 2))
    # after: agent 0 at (1, 2), agent 1 at (1, 3), agent 2 at (5, 4); 1 told 0 nothing (piece 1 said? no: piece 1)
    o = obs["agent_0"]
    s = 5.0
    expected = np.concatenate(
        [
            [1, 0, 0],  # own first-hand
            [1, 0, 0, 0, 0, -1],  # moves of 0, 1, 2
            [0 / s, 1 / s, 4 / s, 2 / s],  # others relative to self
            [0, 1, 0, 0, 0, 1],  # others' first-hand
            [
                1 / s,
                0,
                0,
                -3 / s,
                0,
                -4 / s,
            ],  # own base rel. self, then each other's base rel. that other
            [0, 1, 0, 0, 0, 0],  # heard: agent 1 said piece 1; agent 2 out of range
            [0, 0, 0, 0],  # walls +x, -x, +y, -y
        ]
    )
    np.testing.assert_allclose(o, expected.astype(np.float32), atol=1e-6)
    o2 = obs["agent_2"]
    np.testing.assert_allclose(o2[-4:], [1, 0, 0, 0])


def test_oracle_appends_current_knowledge():
    env, _ = make(positions=[(1, 1), (2, 1)], oracle=True)
    obs, *_ = act(env, (NONE, 0), (NONE, 1))
    np.testing.assert_array_equal(obs["agent_1"][-4:], [1, 1, 1, 1])
    env, obs = make(positions=[(1, 1), (3, 1)], oracle=True)
    np.testing.assert_array_equal(
        obs["agent_1"][-4:], [0, 1, 1, 0]
    )  # self first: agent 1 knows piece 1


@pytest.mark.parametrize("w", [6, 12])
def test_truncation_at_five_w(w):
    env = parallel_env(n_agents=3, width=w, n_pieces=3)
    env.reset(seed=0)
    steps = 0
    while env.agents:
        _, _, term, trunc, _info = env.step({a: env.action_space(a).sample() for a in env.agents})
        steps += 1
        assert not any(term.values())
        assert all(trunc.values()) == (steps == 5 * w)
    assert steps == 5 * w and env.agents == []
    with pytest.raises(ValueError, match="reset"):
        env.step({})


def test_info_episode_totals_add_up():
    env = parallel_env(n_agents=3, width=6, n_pieces=6)
    out = run_episodes(env, RandomPolicy(0), 3, seed=0)
    parts = out["listen_reward"] + out["speak_reward"] + out["recharge_reward"]
    np.testing.assert_allclose(out["reward"], parts)
    # each +1 of listening is matched by a +1 of speaking somewhere
    np.testing.assert_allclose(out["listen_reward"].sum(axis=1), out["speak_reward"].sum(axis=1))


# ----------------------------------------------------------------------------- render
def test_ansi_and_rgb_render():
    env, _ = make(n=3, c=3, positions=[(0, 0), (1, 0), (5, 5)], render_mode="ansi")
    act(env, (NONE, 0), (NONE, 1), (NONE, 2))
    text = env.render()
    lines = text.splitlines()
    assert lines[2] == "|.....2|" and lines[7] == "|01...a|"
    assert "agent 0: pos=(0, 0)" in text and "knows=Fk." in text
    env2, _ = make(n=3, c=3, positions=[(0, 0), (1, 0), (5, 5)], render_mode="rgb_array")
    img = env2.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    from imitation_meg.symmtom.render import AGENT_COLORS

    cell, pad = 24, 12
    row, col = (
        pad + 5 * cell + cell // 2,
        pad + 0 * cell + cell // 2 - 6,
    )  # agent 0 at (0, 0): bottom-left
    np.testing.assert_array_equal(img[row, col], AGENT_COLORS[0])
    with pytest.warns(SymmToMWarning, match="render_mode"):
        assert parallel_env().render() is None


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"width": 3}, ValueError, "2\\*hearing\\+1 = 3 >= width = 3"),
        ({"width": 6, "hearing": 3}, ValueError, "width >= 8"),
        ({"n_agents": 40, "width": 6}, ValueError, "does not fit on a 6x6 grid"),
        ({"n_agents": 1}, ValueError, "at least 2 agents"),
        ({"n_pieces": 0}, ValueError, "at least 1"),
        ({"hearing": 0}, ValueError, "hearing=0"),
        ({"width": 6.0}, TypeError, "width must be an int"),
        ({"render_mode": "human"}, ValueError, "render_mode='human'"),
        ({"max_steps": 0}, ValueError, "max_steps=0"),
        ({"speech_timing": "late"}, ValueError, "speech_timing='late'"),
    ],
)
def test_constructor_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        parallel_env(**kwargs)


def test_fewer_pieces_than_agents_warns():
    with pytest.warns(SymmToMWarning, match="n_pieces=1 < n_agents=2"):
        parallel_env(n_agents=2, n_pieces=1)


def test_action_and_option_validation():
    env = parallel_env(n_agents=2, width=6, n_pieces=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="out of range"):
        env.step({"agent_0": (5, 0), "agent_1": (0, 0)})
    with pytest.raises(ValueError, match="lack agents \\['agent_1'\\]"):
        env.step({"agent_0": (0, 0)})
    with pytest.raises(TypeError, match="dict"):
        env.step([(0, 0), (0, 0)])
    with pytest.raises(ValueError, match="distinct cells"):
        env.reset(options={"positions": [(1, 1), (1, 1)]})
    with pytest.raises(ValueError, match="exactly one owner"):
        env.reset(options={"first_hand": [[1, 1], [1, 0]]})
    with pytest.raises(ValueError, match="containing first_hand"):
        env.reset(options={"first_hand": [[1, 0], [0, 1]], "knowledge": [[0, 1], [0, 1]]})
    with pytest.warns(SymmToMWarning, match="ignored"):
        env.reset(options={"colour": 1})
    with pytest.raises(ValueError, match="unknown agent"):
        env.action_space("agent_9")


# ----------------------------------------------------------------------------- random baselines
@pytest.mark.parametrize(
    ("n", "w", "c", "paper"), [(3, 6, 3, 3.7), (4, 6, 4, 5.2), (3, 12, 3, 1.8)]
)
def test_random_agent_matches_paper_baseline(n, w, c, paper):
    episodes = 500
    out = run_episodes(
        parallel_env(n_agents=n, width=w, n_pieces=c), RandomPolicy(1), episodes, seed=1
    )
    per_episode = out["reward"].mean(axis=1)
    mean, se = per_episode.mean(), per_episode.std(ddof=1) / np.sqrt(episodes)
    # the paper's number is itself a 1000-episode mean: compare with the combined standard error
    combined = se * np.sqrt(1 + episodes / 1000)
    assert abs(mean - paper) < 4 * combined, (mean, se, paper)
