"""Belief tracking of MADDPG-CE / -GE: hand-derived steps and invariants against the environment."""

from __future__ import annotations

import numpy as np
import pytest

from imitation_meg.symmtom import SymmToMEnv
from imitation_meg.symmtom.knowledge import KnowledgeTracker, update_beliefs

NONE = 0


def _fh(n: int, c: int) -> np.ndarray:
    fh = np.zeros((n, c), dtype=bool)
    fh[np.arange(c) % n, np.arange(c)] = True  # agent i owns pieces i, i + n, ...
    return fh


def _play(env: SymmToMEnv, tracker: KnowledgeTracker, actions) -> None:
    env.step({f"agent_{i}": a for i, a in enumerate(actions)})
    tracker.update(
        first_hand=env.first_hand,
        positions=env.positions,
        bases=env.bases,
        said=env.last_said,
        hearing=env.hearing,
    )


@pytest.mark.parametrize("mode", ["ce", "ge"])
@pytest.mark.parametrize(("n", "w", "c"), [(3, 6, 3), (4, 6, 8), (3, 12, 9)])
def test_own_row_is_always_the_true_knowledge(mode, n, w, c):
    """Zeroth order: an agent hears everything said in its range, so its own row is exact."""
    env, tracker = SymmToMEnv(n, w, c), KnowledgeTracker(mode)
    rng = np.random.default_rng(0)
    idx = np.arange(n)
    for ep in range(6):
        env.reset(seed=ep)
        tracker.reset(env.first_hand, env.knowledge)
        while env.agents:
            acts = [(int(rng.integers(5)), int(rng.integers(c))) for _ in range(n)]
            _play(env, tracker, acts)
            np.testing.assert_array_equal(tracker.beliefs[idx, idx], env.knowledge)


@pytest.mark.parametrize("mode", ["ce", "ge"])
def test_everything_in_range_makes_every_belief_exact(mode):
    """With all agents in one another's range nothing is unseen: K equals the true knowledge."""
    env, tracker = SymmToMEnv(3, 6, 6), KnowledgeTracker(mode)
    rng = np.random.default_rng(1)
    env.reset(
        seed=0,
        options={"positions": [(2, 2), (2, 3), (3, 2)], "bases": [(0, 0), (5, 5), (2, 1)]},
    )
    tracker.reset(env.first_hand, env.knowledge)
    for _ in range(20):
        _play(env, tracker, [(NONE, int(rng.integers(6))) for _ in range(3)])
        for k in range(3):
            np.testing.assert_array_equal(tracker.beliefs[k], env.knowledge)


def test_heard_speaker_informs_listeners_out_of_the_observers_range():
    """S1: observer 0 hears agent 1 say piece 1; agent 2 (in 1's range, not 0's) learns it too."""
    n, c = 3, 3
    fh = _fh(n, c)
    beliefs = np.repeat(fh[None], n, axis=0)
    positions = np.array([[0, 0], [1, 1], [2, 2]])  # 0-1 and 1-2 in range, 0-2 not
    out = update_beliefs(
        beliefs,
        first_hand=fh,
        positions=positions,
        bases=np.array([[5, 5], [5, 4], [5, 3]]),
        said=np.array([-1, 1, -1]),
        hearing=1,
        mode="ce",
    )
    expected = fh.copy()
    expected[[0, 2], 1] = True
    np.testing.assert_array_equal(out[0], expected)
    # observer 2 heard it too, and sees that 0 stood in 1's range
    np.testing.assert_array_equal(out[2], expected)


def test_greedy_encounter_by_hand():
    """Observer 0 at (0, 0); agents 1 at (4, 4) and 2 at (5, 5) meet out of its range.

    Believed knowledge: 1 knows {1, 3}, 2 knows {2}. GE: 1 says the piece most of its range lacks
    among {1, 3}: agent 2 lacks both (a tie): the lower, piece 1; 2 says piece 2 (1 lacks it).
    CE assumes nothing. What 1 and 2 actually said is not heard by 0 and changes nothing.
    """
    n, c = 3, 4
    fh = np.zeros((n, c), dtype=bool)
    fh[0, 0] = fh[1, 1] = fh[2, 2] = fh[1, 3] = True
    beliefs = np.repeat(fh[None], n, axis=0)
    kw = {
        "first_hand": fh,
        "positions": np.array([[0, 0], [4, 4], [5, 5]]),
        "bases": np.array([[0, 5], [1, 5], [2, 5]]),
        "hearing": 1,
    }
    for said in ([-1, -1, -1], [-1, 3, 2], [-1, 1, -1]):  # 0 cannot hear 1 or 2
        ge = update_beliefs(beliefs, said=np.array(said), mode="ge", **kw)
        ce = update_beliefs(beliefs, said=np.array(said), mode="ce", **kw)
        want = fh.copy()
        want[2, 1] = True  # 2 heard piece 1 from 1
        want[1, 2] = True  # 1 heard piece 2 from 2
        np.testing.assert_array_equal(ge[0], want)
        np.testing.assert_array_equal(ce[0], fh)
    # nothing new for anyone in range: GE assumes no piece was shared
    full = beliefs.copy()
    full[0, 1:, :] = True
    ge = update_beliefs(full, said=np.array([-1, -1, -1]), mode="ge", **kw)
    np.testing.assert_array_equal(ge[0], full[0])


def test_recharge_forgets_when_believed_complete():
    """An agent standing on its base that the observer believes complete keeps only first-hand."""
    n, c = 3, 3
    fh = _fh(n, c)
    beliefs = np.repeat(fh[None], n, axis=0)
    beliefs[0, 1] = True  # observer 0 believes agent 1 knows everything
    beliefs[0, 2, 0] = True  # and agent 2 knows pieces 0 and 2 (not complete)
    positions = np.array([[0, 0], [3, 3], [5, 0]])
    bases = np.array([[0, 5], [3, 3], [5, 0]])  # 1 and 2 on their bases
    out = update_beliefs(
        beliefs,
        first_hand=fh,
        positions=positions,
        bases=bases,
        said=np.array([-1, -1, -1]),
        hearing=1,
        mode="ce",
    )
    np.testing.assert_array_equal(out[0, 1], fh[1])  # forgot
    np.testing.assert_array_equal(out[0, 2], [True, False, True])  # not complete: kept


def test_out_of_range_utterances_are_not_read():
    fh = _fh(3, 3)
    beliefs = np.repeat(fh[None], 3, axis=0)
    kw = {
        "first_hand": fh,
        "positions": np.array([[0, 0], [4, 4], [5, 5]]),
        "bases": np.array([[0, 5], [1, 5], [2, 5]]),
        "hearing": 1,
    }
    a = update_beliefs(beliefs, said=np.array([-1, 1, 2]), mode="ce", **kw)
    b = update_beliefs(beliefs, said=np.array([-1, -1, -1]), mode="ce", **kw)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[1], b[1])  # agent 1 did hear agent 2


def test_features_layout_matches_the_oracle_block():
    """Row k: own row first, then the others in index order, like the oracle observation."""
    env = SymmToMEnv(3, 6, 3, oracle=True)
    env.reset(seed=4)
    tracker = KnowledgeTracker("ce")
    tracker.reset(env.first_hand, env.knowledge)
    tracker.beliefs = np.repeat(env.knowledge[None], 3, axis=0)  # pretend exact beliefs
    np.testing.assert_array_equal(tracker.features(), env.observe_all()[:, -9:])


def test_validation():
    with pytest.raises(ValueError, match="belief mode"):
        KnowledgeTracker("ee")
    fh = _fh(3, 3)
    for depth, mode, match in ((2, "ce", "shapes"), (3, "xx", "belief mode")):
        with pytest.raises(ValueError, match=match):
            update_beliefs(
                np.zeros((3, 3, depth), dtype=bool),
                first_hand=fh,
                positions=np.zeros((3, 2), dtype=int),
                bases=np.zeros((3, 2), dtype=int),
                said=np.full(3, -1),
                hearing=1,
                mode=mode,
            )
