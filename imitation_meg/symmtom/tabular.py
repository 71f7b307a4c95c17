"""SymmToM with two agents as a tabular MDP for agent 0, the other agent's policy fixed (for MEG).

State ``s = (pos0, pos1, k0, k1, r)``: the two agents' distinct cells, ``k0`` = agent 0 knows piece
1 (agent 0 owns piece 0), ``k1`` = agent 1 knows piece 0 (agent 1 owns piece 1), ``r`` = agent 0
recharged at the step that led here. Bases are fixed. Actions are agent 0's ``(move, piece)``
flattened as ``a = move * c + piece`` (``A = 5 c = 10``). The transition branches over the other
agent's action (drawn from its fixed policy) and, when both target one cell, the tie-break (1/2 each):
``next_state (S, A, K)`` and ``prob (S, A, K)`` with ``K = 2 * A``. The step is computed by
:func:`imitation_meg.symmtom.env.transition`, the same function the environment uses.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import numpy as np

from imitation_meg.symmtom.agents import central_cells, step_towards
from imitation_meg.symmtom.dynamics import MOVES, resolve_moves, transition

__all__ = ["SymmToMTabular", "build_tabular", "markov_heuristic", "uniform_policy"]


@dataclasses.dataclass(frozen=True)
class SymmToMTabular:
    """Arrays of the tabular two-agent SymmToM (see the module docstring).

    Attributes:
        states: ``(S, 7)`` ints ``(x0, y0, x1, y1, k0, k1, r)``.
        next_state, prob: ``(S, A, K)`` fixed-branching transition.
        reward: ``(S, A)`` expected reward of agent 0.
        initial_state_dist: ``(S,)`` uniform over distinct positions, first-hand knowledge, ``r = 0``.
        targets: name -> ``(S,)`` int target variable (``own_knowledge``, ``other_knowledge``,
            ``recharged``).
        horizon: ``5 w``.
        width, bases: the layout.
    """

    states: np.ndarray
    next_state: np.ndarray
    prob: np.ndarray
    reward: np.ndarray
    initial_state_dist: np.ndarray
    targets: dict[str, np.ndarray]
    horizon: int
    width: int
    bases: np.ndarray

    def to_mdp(self):
        """The :class:`imitation_meg.TabularMDP` with agent 0's expected reward as utility."""
        from imitation_meg.core.mdp import TabularMDP

        return TabularMDP(
            (self.next_state, self.prob),
            utility=self.reward,
            horizon=self.horizon,
            initial_state_dist=self.initial_state_dist,
            discount=1.0,
            name="symmtom_n2_w4_c2",
        )


def uniform_policy(states: np.ndarray, n_pieces: int = 2) -> np.ndarray:
    """``(S, 5 c)`` uniform policy."""
    return np.full((len(states), 5 * n_pieces), 1.0 / (5 * n_pieces))


def markov_heuristic(states: np.ndarray, agent: int, width: int, bases: np.ndarray) -> np.ndarray:
    """``(S, 10)`` Markov version of :class:`~imitation_meg.symmtom.agents.HeuristicPolicy` for n = c = 2.

    Moves as the heuristic (centre until complete, then the own base); the round-robin speech
    needs memory, so the piece is drawn uniformly among the known pieces instead.
    """
    pol = np.zeros((len(states), 10))
    centre = central_cells(width)
    for s, (x0, y0, x1, y1, k0, k1, _) in enumerate(states):
        pos = np.array([x0, y0] if agent == 0 else [x1, y1])
        other = (x1, y1) if agent == 0 else (x0, y0)
        knows_other_piece = k0 if agent == 0 else k1
        known = [agent] + ([1 - agent] if knows_other_piece else [])
        if knows_other_piece:
            move = step_towards(pos, bases[agent])
        elif (int(pos[0]), int(pos[1])) in centre:
            move = 0
        else:
            free = [c for c in centre if c != other] or centre
            dist = [abs(c[0] - pos[0]) + abs(c[1] - pos[1]) for c in free]
            move = step_towards(pos, free[int(np.argmin(dist))])
        for p in known:
            pol[s, move * 2 + p] = 1.0 / len(known)
    return pol


def build_tabular(
    other_policy: str | Callable[[np.ndarray], np.ndarray] = "heuristic",
    *,
    width: int = 4,
    bases: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (3, 3)),
) -> SymmToMTabular:
    """Enumerate the two-agent, two-piece SymmToM for agent 0.

    Args:
        other_policy: ``"heuristic"`` (:func:`markov_heuristic`), ``"random"`` (uniform), or a
            function ``states (S, 7) -> (S, 10)`` giving agent 1's action probabilities.
        width: grid width ``w`` (``w >= 4``).
        bases: base cells of agent 0 and agent 1.

    Returns:
        :class:`SymmToMTabular`.
    """
    if width < 4:
        raise ValueError(f"width={width} needs 2*1+1 < width; use width >= 4.")
    _n, c, A = 2, 2, 10
    cells = [(x, y) for x in range(width) for y in range(width)]
    states = np.array(
        [
            (*p0, *p1, k0, k1, r)
            for p0, p1 in itertools.permutations(cells, 2)
            for k0, k1, r in itertools.product((0, 1), repeat=3)
        ],
        dtype=np.int64,
    )
    index = {tuple(s): i for i, s in enumerate(states.tolist())}
    bases_arr = np.array(bases, dtype=np.int64)
    if other_policy == "heuristic":
        pi1 = markov_heuristic(states, 1, width, bases_arr)
    elif other_policy == "random":
        pi1 = uniform_policy(states)
    elif callable(other_policy):
        pi1 = np.asarray(other_policy(states), dtype=float)
    else:
        raise ValueError(f"other_policy={other_policy!r}; use 'heuristic', 'random' or a function.")
    first_hand = np.array([[True, False], [False, True]])
    S, K = len(states), 2 * A
    next_state = np.zeros((S, A, K), dtype=np.int64)
    prob = np.zeros((S, A, K))
    reward = np.zeros((S, A))
    cache: dict[tuple, tuple[list[int], list[float], float]] = {}
    for s, st in enumerate(states.tolist()):
        x0, y0, x1, y1, k0, k1, _ = st
        key0 = (x0, y0, x1, y1, k0, k1)
        pos = np.array([[x0, y0], [x1, y1]])
        know = np.array([[True, bool(k0)], [bool(k1), True]])
        for a0 in range(A):
            for a1 in range(A):
                p1 = pi1[s, a1]
                if p1 == 0.0:
                    continue
                ck = (key0, a0, a1)
                if ck not in cache:
                    moves = np.array([a0 // c, a1 // c])
                    pieces = np.array([a0 % c, a1 % c])
                    first, conflicts = resolve_moves(pos, moves, width, None)
                    outcomes = [first]
                    if conflicts:  # two agents, one contested cell: the other agent may win instead
                        alt = pos.copy()
                        alt[1] = pos[1] + MOVES[moves[1]]
                        outcomes = [first, alt]
                    nxt, pr, rew = [], [], 0.0
                    for new_pos in outcomes:
                        out = transition(
                            pos,
                            know,
                            first_hand,
                            bases_arr,
                            moves,
                            pieces,
                            width=width,
                            hearing=1,
                            rng=None,
                            new_positions=new_pos,
                        )
                        nk = out["knowledge"]
                        ns = (
                            *out["positions"][0],
                            *out["positions"][1],
                            int(nk[0, 1]),
                            int(nk[1, 0]),
                            int(out["correct_base_use"][0]),
                        )
                        nxt.append(index[tuple(int(v) for v in ns)])
                        pr.append(1.0 / len(outcomes))
                        rew += out["reward"][0] / len(outcomes)
                    cache[ck] = (nxt, pr, rew)
                nxt, pr, rew = cache[ck]
                for k, (ns_i, q) in enumerate(zip(nxt, pr, strict=True)):
                    next_state[s, a0, 2 * a1 + k] = ns_i
                    prob[s, a0, 2 * a1 + k] += p1 * q
                reward[s, a0] += p1 * rew
    p0 = ((states[:, 4] == 0) & (states[:, 5] == 0) & (states[:, 6] == 0)).astype(float)
    p0 /= p0.sum()
    targets = {
        "own_knowledge": states[:, 4].copy(),
        "other_knowledge": states[:, 5].copy(),
        "recharged": states[:, 6].copy(),
    }
    return SymmToMTabular(
        states, next_state, prob, reward, p0, targets, 5 * width, width, bases_arr
    )
