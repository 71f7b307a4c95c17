"""Reference policies of the SymmToM theory-of-mind tests (:mod:`imitation_meg.symmtom.tom`).

:class:`GrayPolicy` is the immobile scripted agent of the layouts; :class:`BeliefGreedyPolicy`,
:class:`MeetPredictedPolicy` and :class:`ProbabilisticSpeakerPolicy` are the correct agents of the
tests and, with other ``belief`` or ``second_order`` settings, the wrong ones each test must
fail. They read the environment's state as the module docstring of each class says.
"""

from __future__ import annotations

import numpy as np

from imitation_meg.symmtom.agents import step_towards
from imitation_meg.symmtom.env import SymmToMEnv

__all__ = [
    "BeliefGreedyPolicy",
    "GrayPolicy",
    "MeetPredictedPolicy",
    "ProbabilisticSpeakerPolicy",
    "moves_to_range",
]

NONE, PX, MX, PY, MY = range(5)


def moves_to_range(a: np.ndarray, b: np.ndarray, hearing: int) -> int:
    """Fewest axis moves that bring cell ``a`` within Chebyshev distance ``hearing`` of cell ``b``."""
    dx, dy = abs(int(a[0]) - int(b[0])), abs(int(a[1]) - int(b[1]))
    return max(0, dx - hearing) + max(0, dy - hearing)


class GrayPolicy:
    """Immobile; says its lowest first-hand piece at every step."""

    def reset(self, env: SymmToMEnv, i: int) -> None:
        """Stateless."""

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        own = np.flatnonzero(env.first_hand[i])
        return np.array([NONE, int(own[0]) if len(own) else 0], dtype=np.int64)


def _greedy_target(
    i: int, belief: np.ndarray, positions: np.ndarray, hearing: int
) -> tuple[int, float]:
    """Best agent for ``i`` to meet: the largest believed gain / (moves to range + 1); ``-1`` if none."""
    best, best_rate = -1, 0.0
    for j in range(len(positions)):
        if j == i:
            continue
        gain = int((belief[j] & ~belief[i]).sum() + (belief[i] & ~belief[j]).sum())
        rate = gain / (moves_to_range(positions[i], positions[j], hearing) + 1)
        if rate > best_rate:
            best, best_rate = j, rate
    return best, best_rate


class BeliefGreedyPolicy:
    """Scripted agent that meets the agent with the best believed gain rate and says what is new.

    Gain of meeting ``j`` = pieces ``j`` is believed to know that ``i`` does not + pieces ``i``
    knows that ``j`` is believed not to; rate = gain / (moves to hearing range + 1).

    Args:
        belief: ``"true"`` (its own memory and the others' knowledge exact: the correct agent of
            the zeroth- and first-order tests), ``"no_memory"`` (it believes everybody, itself
            included, knows only first-hand pieces), or ``"no_others"`` (own knowledge exact, the
            others' first-hand only: no first-order model).
    """

    def __init__(self, belief: str = "true") -> None:
        if belief not in ("true", "no_memory", "no_others"):
            raise ValueError(f"belief={belief!r}; use 'true', 'no_memory' or 'no_others'.")
        self.belief = belief

    def reset(self, env: SymmToMEnv, i: int) -> None:
        """Stateless."""

    def _beliefs(self, env: SymmToMEnv, i: int) -> np.ndarray:
        if self.belief == "true":
            return env.knowledge.copy()
        b = env.first_hand.copy()
        if self.belief == "no_others":
            b[i] = env.knowledge[i]
        return b

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        b = self._beliefs(env, i)
        target, _ = _greedy_target(i, b, env.positions, env.hearing)
        move = NONE
        if target >= 0 and moves_to_range(env.positions[i], env.positions[target], env.hearing) > 0:
            move = step_towards(env.positions[i], env.positions[target])
        known = np.flatnonzero(b[i])
        near = env.in_range()[i]
        value = [int((near & ~b[:, p]).sum()) for p in known]
        piece = int(known[int(np.argmax(value))]) if len(known) else 0
        return np.array([move, piece], dtype=np.int64)


class MeetPredictedPolicy:
    """Scripted agent that predicts where agent ``mover`` is heading and walks there.

    The prediction is made once, at the first decision after ``reset``.

    The prediction is ``mover``'s greedy choice (see :class:`BeliefGreedyPolicy`) under a model of
    ``mover``'s beliefs: its own knowledge exact and the others' either first-hand only
    (``second_order=True``: what ``mover`` can know) or exact (``second_order=False``: the
    predicting agent projects its own knowledge onto ``mover``). When the prediction is the agent
    itself it waits; once ``mover`` stands within range of its predicted target, it walks to
    ``mover`` directly.
    """

    def __init__(self, *, second_order: bool = True, mover: int = 1) -> None:
        self.second_order = second_order
        self.mover = mover

    def reset(self, env: SymmToMEnv, i: int) -> None:
        self.target: int | None = None

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        m = self.mover
        if getattr(self, "target", None) is None:  # predict once, at the first decision
            b = env.first_hand.copy() if self.second_order else env.knowledge.copy()
            b[m] = env.knowledge[m]
            self.target, _ = _greedy_target(m, b, env.positions, env.hearing)
        target = self.target
        assert target is not None
        move = NONE
        if moves_to_range(env.positions[i], env.positions[m], env.hearing) == 0:
            move = NONE
        elif target >= 0 and target != i:
            # walk to where the mover is heading; once it has arrived, walk to the mover itself
            arrived = moves_to_range(env.positions[m], env.positions[target], env.hearing) == 0
            goal = env.positions[m] if arrived else env.positions[target]
            move = step_towards(env.positions[i], goal)
        own = np.flatnonzero(env.knowledge[i])
        return np.array([move, int(own[0])], dtype=np.int64)


class ProbabilisticSpeakerPolicy:
    """Walks to ``listener`` and tells it every piece of its own knowledge the listener may lack.

    Candidates are the pieces the agent knows minus the listener's first-hand pieces and minus the
    pieces it has already said within the listener's hearing range (the listener heard those; a
    missing reward for such an utterance tells the agent, retroactively, that the listener had the
    piece already). Reads its own knowledge and last utterance, the listener's first-hand pieces
    and both positions.

    Args:
        belief: ``"uncertain"`` (the correct agent: the unheard exchange may have taught the
            listener any of the candidates, so it says them one by one and drops each once said),
            ``"no_deduction"`` (wrong: never drops a said piece, so it repeats its first candidate)
            or ``"certain"`` (wrong: treats the unheard exchange as certain, assuming ``messenger``
            told the listener the messenger's first-hand pieces, and never says those).
        listener: the agent to inform (green).
        messenger: the agent whose unheard exchange with ``listener`` is modelled (blue).
        seed: ``None`` says the lowest candidate first (deterministic); otherwise a uniformly random
            candidate from the policy's own generator.

    Raises:
        ValueError: unknown ``belief``.
    """

    def __init__(
        self,
        *,
        belief: str = "uncertain",
        listener: int = 2,
        messenger: int = 1,
        seed: int | None = None,
    ) -> None:
        if belief not in ("uncertain", "no_deduction", "certain"):
            raise ValueError(f"belief={belief!r}; use 'uncertain', 'no_deduction' or 'certain'.")
        self.belief = belief
        self.listener = listener
        self.messenger = messenger
        self.rng = None if seed is None else np.random.default_rng(seed)
        self.said: set[int] = set()

    def reset(self, env: SymmToMEnv, i: int) -> None:
        self.said = set()

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        j = self.listener
        # where the agent stands now is where its last utterance was heard (speech uses post-move cells)
        if env.in_range()[i, j] and env.last_said[i] >= 0:
            self.said.add(int(env.last_said[i]))
        move = NONE
        if moves_to_range(env.positions[i], env.positions[j], env.hearing) > 0:
            move = step_towards(env.positions[i], env.positions[j])
        return np.array([move, self._piece(env, i)], dtype=np.int64)

    def _candidates(self, env: SymmToMEnv, i: int) -> list[int]:
        """The pieces the listener may lack, under this policy's ``belief``."""
        excluded = env.first_hand[self.listener].copy()
        if self.belief == "certain":
            excluded |= env.first_hand[self.messenger]
        cands = [int(p) for p in np.flatnonzero(env.knowledge[i] & ~excluded)]
        if self.belief != "no_deduction":
            cands = [p for p in cands if p not in self.said]
        return cands

    def _piece(self, env: SymmToMEnv, i: int) -> int:
        cands = self._candidates(env, i)
        if cands:
            return cands[0] if self.rng is None else int(self.rng.choice(cands))
        if self.said:  # nothing left to tell: repeat a piece already said (no new information)
            return min(self.said)
        return int(np.flatnonzero(env.knowledge[i])[0])
