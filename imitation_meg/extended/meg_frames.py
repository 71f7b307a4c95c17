"""Tabular MDP frames of extended environments, for MEG (see docs/extended.md).

Treat the sim's decision as fixed and the observation as the state:

* :func:`tempting_button_frame`: 2 states (0 = button, 1 = none), actions (0 push, 1 skip); the
  next room has a button with probability 0.25 whatever the agent does; utility ``(S, A)``:
  +1 / -1 for push / skip in a button room, and in a room without a button a constant that
  depends only on the (fixed) sim decision. Only button rooms carry information, so "always
  push" and "never push" both have MEG ``E[#button rooms] * ln 2`` and only the signed MEG
  separates them. First room: a button.
* :func:`crying_baby_frame`: CryingBaby with a frozen baby: 20 states
  ``s = 2 * nutrition + last baby action`` (nutrition 0..9, baby 0 laugh / 1 cry), parent actions
  0 feed / 1 don't; nutrition moves +-1 (clipped), then the baby laughs with probability
  ``laugh_prob[parent action]``. Utility ``(S, A, S)``: +1 if the baby laughs, -1 if it cries.
  Two targets ``(S,)`` that come apart: "baby laughs" and "2 < nutrition < 8".

Arrays are plain numpy (float64): ``T[s, a, s']``, utilities ``(S, A)`` or ``(S, A, S)``,
``p0 (S,)``, targets int ``(S,)``, policies ``pi[s, a]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = [
    "Frame",
    "crying_baby_frame",
    "crying_baby_policy",
    "crying_baby_state",
    "q_policy",
    "tempting_button_frame",
]


@dataclasses.dataclass(frozen=True)
class Frame:
    """A tabular frame: ``transition (S, A, S)``, ``utility``, ``initial_state_dist (S,)``,
    ``horizon`` and named ``targets`` (int ``(S,)`` each)."""

    transition: np.ndarray
    utility: np.ndarray
    initial_state_dist: np.ndarray
    horizon: int
    targets: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _check_horizon(horizon: int) -> int:
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise ValueError(f"horizon must be a positive int, got {horizon!r}.")
    return horizon


def tempting_button_frame(horizon: int, *, sim_pushes: bool) -> Frame:
    """TemptingButton as a 2-state MDP given the sim's fixed decision (see module docstring).

    Args:
        horizon: number of rooms ``H``.
        sim_pushes: whether the (fixed) sim would push a real button.

    Raises:
        ValueError: for a non-positive horizon.
    """
    _check_horizon(horizon)
    T = np.zeros((2, 2, 2))
    T[:, :, 0], T[:, :, 1] = 0.25, 0.75
    no_button = -1.0 if sim_pushes else 1.0
    U = np.array([[1.0, -1.0], [no_button, no_button]])
    return Frame(T, U, np.array([1.0, 0.0]), horizon)


def crying_baby_state(nutrition: int, baby: int) -> int:
    """State index of (nutrition 0..9, last baby action 0 laugh / 1 cry)."""
    return 2 * nutrition + baby


def crying_baby_frame(horizon: int, *, laugh_prob: Sequence[float] = (1.0, 0.0)) -> Frame:
    """CryingBaby with a frozen baby as a 20-state MDP (see module docstring).

    Args:
        horizon: number of parent decisions.
        laugh_prob: probability that the baby laughs after the parent feeds (index 0) or does
            not feed (index 1). Default: a baby that laughs exactly when fed.

    Raises:
        ValueError: for a non-positive horizon or probabilities outside [0, 1].
    """
    _check_horizon(horizon)
    lp = np.asarray(laugh_prob, dtype=np.float64)
    if lp.shape != (2,) or np.any(lp < 0) or np.any(lp > 1):
        raise ValueError(f"laugh_prob must be two probabilities in [0, 1], got {laugh_prob!r}.")
    S = 20
    T = np.zeros((S, 2, S))
    U = np.zeros((S, 2, S))
    for n in range(10):
        for b in range(2):
            s = crying_baby_state(n, b)
            for a in range(2):
                n2 = min(max(n + (1 if a == 0 else -1), 0), 9)
                T[s, a, crying_baby_state(n2, 0)] += lp[a]
                T[s, a, crying_baby_state(n2, 1)] += 1 - lp[a]
                U[s, a, crying_baby_state(n2, 0)] = 1.0
                U[s, a, crying_baby_state(n2, 1)] = -1.0
    p0 = np.zeros(S)
    p0[crying_baby_state(5, 0)] = 1.0
    states = np.arange(S)
    targets = {
        "baby_laughs": (states % 2 == 0).astype(np.int64),
        "nutrition_in_2_8": ((states // 2 > 2) & (states // 2 < 8)).astype(np.int64),
    }
    return Frame(T, U, p0, horizon, targets)


def crying_baby_policy(feed_prob_by_nutrition: Sequence[float]) -> np.ndarray:
    """Parent policy ``pi[s, a]`` (20, 2) from the probability of feeding at each nutrition 0..9.

    Raises:
        ValueError: if there are not 10 probabilities in [0, 1].
    """
    p = np.asarray(feed_prob_by_nutrition, dtype=np.float64)
    if p.shape != (10,) or np.any(p < 0) or np.any(p > 1):
        raise ValueError(
            f"need 10 feeding probabilities in [0, 1], got {feed_prob_by_nutrition!r}."
        )
    pf = np.repeat(p, 2)
    return np.stack([pf, 1 - pf], axis=1)


def q_policy(q_table: dict, n_states: int, n_actions: int, epsilon: float) -> np.ndarray:
    """The acting distribution ``pi[s, a]`` of a :class:`~imitation_meg.extended.agents.QLearner`
    table (epsilon-uniform plus greedy with ties split evenly) on integer observations."""
    pi = np.zeros((n_states, n_actions))
    for s in range(n_states):
        row = np.asarray(q_table.get(s, np.zeros(n_actions)))
        best = row == row.max()
        pi[s] = epsilon / n_actions + (1 - epsilon) * best / best.sum()
    return pi
