"""Enumerated MDPs of savable emulators: a toy emulator, and Atari games through the ALE.

The ALE tests replay every action sequence of a small horizon in the real wrapped environment
(fresh resets, no save or restore) and check the enumerated MDP against it: rewards, the agent's
stacked observation (through SB3's own ``VecFrameStack``), the emulator's bytes, and that states
merge exactly where both the emulator state and the observation agree.
"""

from __future__ import annotations

import itertools
import pathlib
import pickle

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.envs.emulator import (
    ALEEmulator,
    Emulator,
    EmulatorStep,
    emulator_policy_table,
    enumerate_mdp,
    make_atari,
    stacked_observations,
)

BREAKOUT = "BreakoutNoFrameskip-v4"
ROOT = pathlib.Path(__file__).resolve().parents[2]


class Walk:
    """A toy emulator: a position 0..3 that action 1 moves up (reward 1) and action 0 down;
    reaching 3 ends the episode. Its observation is the position + 1 (a one-pixel frame)."""

    name, n_actions = "walk", 2

    def __init__(self) -> None:
        self.pos = 1

    def starts(self) -> list[tuple[bytes, list[np.ndarray]]]:
        self.pos = 1
        return [(self.save(), [self._obs()])]

    def save(self) -> bytes:
        return bytes([self.pos])

    def restore(self, state: bytes) -> None:
        self.pos = state[0]

    def step(self, action: int) -> EmulatorStep:
        old = self.pos
        self.pos = min(3, old + 1) if action == 1 else max(0, old - 1)
        return EmulatorStep(self._obs(), float(self.pos > old), self.pos == 3)

    def _obs(self) -> np.ndarray:
        return np.array([[[self.pos + 1]]], dtype=np.uint8)


def _ale():
    return pytest.importorskip("ale_py")


def _breakout(**wrapper_kwargs):
    _ale()
    pytest.importorskip("stable_baselines3")
    return make_atari(BREAKOUT, wrapper_kwargs=wrapper_kwargs or None)


# ----------------------------------------------------------------------------- toy emulator
def test_a_toy_emulator_is_enumerated_exactly():
    assert isinstance(Walk(), Emulator)
    mdp = enumerate_mdp(Walk(), 3, frame_stack=2)
    md = mdp.metadata
    # Frames are the position + 1 (0 is the padding). Depth 0: pos 1 [pad, 1]; depth 1: pos 0
    # [1, 0] and pos 2 [1, 2]; depth 2: pos 0 [0, 0], pos 1 [0, 1], pos 1 [2, 1], pos 3 (end).
    # From depth 2 every move returns to a state already found (pos 0 [0, 0] to itself, pos 1
    # [0, 1] to pos 0 [1, 0] and pos 2 [1, 2]): states merge across depths, and nothing is new
    # at depth 3.
    assert md["layer_sizes"] == [1, 2, 4] and mdp.n_states == 7
    stacks = (md["frames"][:, 0, 0, 0][md["frame_index"]].astype(int) - 1).tolist()
    assert stacks == [[-1, 1], [1, 0], [1, 2], [0, 0], [0, 1], [2, 1], [2, 3]]
    assert md["terminal"].tolist() == [False] * 6 + [True]
    assert not md["frontier"].any()
    ns = mdp.next_state[..., 0].tolist()
    assert ns == [[1, 2], [3, 4], [5, 6], [3, 4], [1, 2], [1, 2], [6, 6]]
    assert mdp.utility.tolist() == [[0.0, 1.0]] * 6 + [[0.0, 0.0]]
    assert mdp.initial_state_dist.tolist() == [1.0] + [0.0] * 6
    # The best return within 3 decisions is 2 (up, up: then the episode ends).
    assert im.meg(im.policies.optimal(mdp), mdp).expected_utility == pytest.approx(2.0)
    # With 2 decisions the depth-2 states are the frontier: absorbing, never expanded.
    short = enumerate_mdp(Walk(), 2, frame_stack=2)
    assert short.metadata["frontier"].tolist() == [False] * 3 + [True] * 3 + [False]
    assert short.next_state[3:, :, 0].tolist() == [[3, 3], [4, 4], [5, 5], [6, 6]]


def test_max_states_is_refused_with_the_count_and_depth():
    with pytest.raises(
        ValueError, match=r"more than max_states=3 .*reached 3 states by depth 2 of 3"
    ):
        enumerate_mdp(Walk(), 3, max_states=3)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        enumerate_mdp(Walk(), 0)
    with pytest.raises(TypeError, match="frame_stack must be a positive integer"):
        enumerate_mdp(Walk(), 2, frame_stack=2.0)
    with pytest.raises(ValueError, match="noops=, reward= and warmup= apply to ALE"):
        enumerate_mdp(Walk(), 2, reward="game")
    with pytest.raises(TypeError, match="observation_matrix must be"):
        enumerate_mdp(Walk(), 2, observation_matrix="yes")


def test_an_environment_that_cannot_save_its_state_is_refused():
    import gymnasium as gym

    with pytest.raises(TypeError, match="CartPoleEnv cannot save and restore its state"):
        enumerate_mdp(gym.make("CartPole-v1"), 2)


def test_the_policy_table_reads_batches_of_stacked_observations():
    mdp = enumerate_mdp(Walk(), 3, frame_stack=2, observation_matrix=True)
    assert tuple(mdp.observation_matrix.shape) == (7, 1, 1, 2)

    def up_when_low(obs: np.ndarray) -> np.ndarray:
        low = obs[:, 0, 0, -1] < 3  # the newest frame: the position + 1
        return np.stack([np.where(low, 0.2, 0.9), np.where(low, 0.8, 0.1)], axis=1)

    pi = emulator_policy_table(up_when_low, mdp, batch_size=3)
    ref = th.as_tensor(up_when_low(stacked_observations(mdp)), dtype=th.float64)
    assert th.allclose(pi, ref)
    first = stacked_observations(mdp, np.array([0]), channels_first=True)
    assert first.shape == (1, 2, 1, 1) and first[0, :, 0, 0].tolist() == [0, 2]
    with pytest.raises(ValueError, match=r"probabilities \(3, 2\)"):
        emulator_policy_table(lambda obs: np.ones((len(obs), 3)) / 3, mdp, batch_size=3)


# ----------------------------------------------------------------------------- the ALE
class Replayer:
    """The real wrapped Breakout under SB3's ``VecFrameStack``, replayed from fresh resets."""

    def __init__(self) -> None:
        from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

        self.env = _breakout()
        self.venv = VecFrameStack(DummyVecEnv([lambda: self.env]), n_stack=4)

    def __call__(self, sequence, seed=0):
        """After a reset with ``seed``, step through ``sequence`` (no save or restore): per
        step the reward, the stacked observation and the ALE's bytes (the start included)."""
        ale = self.env.unwrapped.ale
        w = self.env
        while w is not self.env.unwrapped:  # a real reset, not EpisodicLifeEnv's no-op step
            if type(w).__name__ == "EpisodicLifeEnv":
                w.was_real_done = True
            w = w.env
        self.venv.seed(seed)
        obs = self.venv.reset()
        out = [(0.0, obs[0].copy(), pickle.dumps(ale.cloneState(), protocol=4))]
        for a in sequence:
            obs, reward, done, _info = self.venv.step(np.array([a]))
            assert not done[0]
            state = pickle.dumps(ale.cloneState(), protocol=4)
            out.append((float(reward[0]), obs[0].copy(), state))
        return out


# Each replay starts with a real reset (the ROM reloaded): about 0.45 s apiece.
@pytest.mark.parametrize("H", [2, pytest.param(3, marks=pytest.mark.expensive)])
def test_breakout_matches_brute_force_replay_of_every_action_sequence(H):
    mdp = enumerate_mdp(_breakout(), H, frame_stack=4, keep_states=True)
    md = mdp.metadata
    # 4 actions, 3 successors: FIRE and NOOP coincide once the ball is out.
    assert md["layer_sizes"] == [1, 3, 9, 27][: H + 1]
    ns = mdp.next_state[..., 0].numpy()
    r = mdp.utility.numpy()
    obs = stacked_observations(mdp)
    seen: dict[int, tuple[bytes, bytes]] = {}
    replay = Replayer()
    for seq in itertools.product(range(mdp.n_actions), repeat=H):
        s = 0
        steps = replay(seq)
        for t, (reward, frame_stack, state) in enumerate(steps):
            if t > 0:
                assert r[s, seq[t - 1]] == reward
                s = ns[s, seq[t - 1]]
            assert md["depth"][s] == t
            assert md["states"][s] == state
            assert np.array_equal(obs[s], frame_stack)
            # Merged: every path into s gave the same bytes and observation.
            key = (state, frame_stack.tobytes())
            assert seen.setdefault(int(s), key) == key
    # Distinct states are distinct (bytes or observation): no spurious splits.
    assert len(set(seen.values())) == len(seen) == mdp.n_states


def test_the_mdp_is_a_valid_one_where_a_uniform_policy_scores_zero():
    mdp = enumerate_mdp(_breakout(), 4, frame_stack=4)
    prob = mdp.prob
    assert th.allclose(prob.sum(-1), th.ones(mdp.n_states, mdp.n_actions, dtype=prob.dtype))
    assert mdp.metadata["reward"] == "clipped"
    uniform = im.policies.uniform(mdp)
    assert im.meg(uniform, mdp).meg == pytest.approx(0.0, abs=1e-9)
    assert im.meg_unknown(uniform, mdp).meg == pytest.approx(0.0, abs=1e-6)


def test_sticky_actions_and_random_frame_skips_are_refused():
    import gymnasium as gym

    _ale()
    sticky = gym.make(BREAKOUT, repeat_action_probability=0.25)
    with pytest.raises(ValueError, match=r"sticky actions \(repeat_action_probability=0.25\)"):
        enumerate_mdp(sticky, 2)
    with pytest.raises(ValueError, match=r"sticky actions \(action_repeat_probability=0.25\)"):
        enumerate_mdp(_breakout(action_repeat_probability=0.25), 2)
    with pytest.raises(ValueError, match="sticky actions"):
        enumerate_mdp(gym.make("ALE/Breakout-v5"), 2)
    with pytest.raises(ValueError, match="random number of frames"):
        enumerate_mdp(gym.make("Breakout-v4"), 2)


def test_unknown_wrappers_and_bad_ale_options_are_refused():
    import gymnasium as gym

    _ale()
    stacked = gym.wrappers.TransformReward(gym.make(BREAKOUT), lambda r: 2 * r)
    with pytest.raises(TypeError, match="wrapped in TransformReward"):
        enumerate_mdp(stacked, 2)
    with pytest.raises(ValueError, match="noops must list positive numbers"):
        enumerate_mdp(_breakout(), 2, noops=[0])
    with pytest.raises(ValueError, match="needs NoopResetEnv"):
        enumerate_mdp(_breakout(noop_max=0), 2, noops="all")
    with pytest.raises(ValueError, match="reward must be 'env'"):
        ALEEmulator(_breakout(), reward="score")


def test_noop_starts_are_equally_likely_and_game_rewards_are_unclipped():
    mdp = enumerate_mdp(_breakout(), 1, frame_stack=4, noops=[1, 2, 3], reward="game")
    md = mdp.metadata
    assert md["n_starts"] == 3 and md["noops"] == [1, 2, 3] and md["reward"] == "game"
    assert mdp.initial_state_dist[:3].tolist() == pytest.approx([1 / 3] * 3)
    assert md["layer_sizes"] == [3, 9]
    raw = enumerate_mdp(_breakout(clip_reward=False), 1, frame_stack=4)
    assert raw.metadata["reward"] == "game"


def test_a_warmup_starts_the_enumeration_later_with_its_frames_in_the_stack():
    warmup = [2, 2, 0]
    mdp = enumerate_mdp(_breakout(), 1, frame_stack=4, warmup=warmup, keep_states=True)
    assert mdp.metadata["warmup"] == warmup and mdp.metadata["layer_sizes"] == [1, 3]
    _reward, stack, state = Replayer()(warmup)[-1]
    assert mdp.metadata["states"][0] == state
    assert np.array_equal(stacked_observations(mdp, np.array([0]))[0], stack)
    assert (mdp.metadata["frame_index"][0] != 0).all()  # four real frames, no padding left
    # With the Zoo's episodic lives, Breakout's first life ends after 23 no-ops.
    with pytest.raises(ValueError, match=r"warmup action 22 .* ends the episode"):
        enumerate_mdp(_breakout(), 1, warmup=[0] * 23)
    with pytest.raises(ValueError, match=r"warmup must list actions in 0..3"):
        enumerate_mdp(_breakout(), 1, warmup=[4])


@pytest.mark.expensive  # PPO on Breakout for 256 steps, then the table and both MEGs: ~15 s
def test_a_tiny_ppo_agent_is_scored_exactly(tmp_path):
    _ale()
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from imitation_meg.adapters import policy_table
    from imitation_meg.adapters.sb3 import SB3ActionProbs

    venv = VecFrameStack(make_atari_env(BREAKOUT, n_envs=2, seed=0), n_stack=4)
    model = PPO("CnnPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(256)
    model.save(tmp_path / "ppo.zip")
    venv.close()
    model = PPO.load(tmp_path / "ppo.zip", device="cpu")
    mdp = enumerate_mdp(_breakout(), 3, frame_stack=4, observation_matrix=True)
    pi = emulator_policy_table(SB3ActionProbs(model.policy), mdp, channels_first=True)
    # The zip read through the library's front door, from the MDP's own observation matrix.
    assert th.allclose(pi, policy_table(str(tmp_path / "ppo.zip"), mdp), atol=1e-6)
    # Along a replayed path, the agent's own probabilities on SB3's stacked frames.
    obs = Replayer()([3, 2, 1])[-1][1]
    s = 0
    for a in (3, 2, 1):
        s = int(mdp.next_state[s, a, 0])
    obs_t, _ = model.policy.obs_to_tensor(obs[None])
    with th.no_grad():
        probs = model.policy.get_distribution(obs_t).distribution.probs[0].double()
    assert th.allclose(pi[s], probs, atol=1e-6)
    known = im.meg(pi, mdp)
    unknown = im.meg_unknown(pi, mdp)
    assert 0.0 <= known.meg <= unknown.meg + 1e-6 <= known.upper_bound + 1e-6
    assert unknown.meg > 0.0  # a trained agent is not exactly uniform


@pytest.mark.expensive  # rl_zoo3.train in a subprocess and two enumerations: about a minute
def test_the_atari_study_runs_from_its_fast_config(tmp_path):
    _ale()
    pytest.importorskip("rl_zoo3")
    from imitation_meg.runners import load_driver
    from imitation_meg.runners.config import load_config, load_yaml

    fast = load_yaml(ROOT / "configs" / "atari_exact_fast.yaml")
    module = load_driver("atari_exact", ROOT / "experiments")
    over = {"results_dir": str(tmp_path), "agents_dir": str(tmp_path / "agents")}
    res = module.main(load_config({**fast, **over}, module.Config))
    rows = {r["horizon"]: r for r in res["cases"]}
    assert sorted(rows) == [2, 3]
    assert rows[2]["states"] == 13 and rows[3]["states"] == 40
    for r in rows.values():
        assert 0.0 <= r["known_meg"] <= r["unknown_meg"] + 1e-6 <= r["bound"] + 1e-6
        assert r["build_s"] > 0 and r["peak_rss_mb"] > 0
    assert (tmp_path / "cases.csv").stat().st_size > 0
