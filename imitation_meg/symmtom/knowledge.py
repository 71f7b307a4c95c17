"""Belief tracking for SymmToM: the knowledge matrix of MADDPG-CE and MADDPG-GE (Sclar et al. 2022, Sec. 4).

Each observer ``k`` keeps ``K[k] (n, c)``: ``K[k, j, p]`` is True when ``k`` believes agent ``j``
knows piece ``p``. (The paper writes the transpose, ``c x n``.) It starts from the first-hand
pieces, which are public, with ``k``'s own row set to ``k``'s actual knowledge. After every step,
with ``H`` the hearing relation at the new positions, ``B_j`` "``j`` stands on its base" and
``E_j`` "``k`` believed ``j`` knew every piece" (the recharge condition, from the previous ``K``):

    ``K[k, j] <- F[j] or ((K[k, j] or S[j]) and not (B_j and E_j))``

where the second-hand pieces ``S`` heard at this step are the union of

* ``S0`` (first order): ``k`` said ``p`` (effectively), so every ``j`` in ``k``'s range heard it;
* ``S1`` (zeroth and first order): ``k`` heard ``l`` say ``p``, so ``k`` and every ``j`` in
  ``l``'s range heard it (``j`` need not be in ``k``'s range);
* ``S2`` (encounters ``k`` did not witness: speakers ``l`` out of ``k``'s range):
  ``"ce"`` (MADDPG-ConservativeEncounter) assumes nothing was shared; ``"ge"``
  (MADDPG-GreedyEncounter) assumes ``l`` said the piece it is believed to know that the most agents
  in its range are believed to lack (the most immediate reward; ties to the lowest piece index;
  nothing when no such piece would be new to anyone), heard by every ``j`` in ``l``'s range.

The tracker reads only what ``k`` observes: every position (perfect vision), the bases, the public
first-hand pieces, the utterances of the agents within its hearing range, and its own utterance
(its actual knowledge only at the start). So ``K[k, k]`` equals ``k``'s actual knowledge at every
step, and when every agent stays within ``k``'s range, all of ``K[k]`` is exact (both tested).
It assumes the paper's speech timing (``speech_timing="fresh"``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BELIEF_MODES", "KnowledgeTracker", "update_beliefs"]

#: ``"ce"``: unseen encounters share nothing; ``"ge"``: unseen speakers say the greedy piece.
BELIEF_MODES = ("ce", "ge")


def update_beliefs(
    beliefs: np.ndarray,
    *,
    first_hand: np.ndarray,
    positions: np.ndarray,
    bases: np.ndarray,
    said: np.ndarray,
    hearing: int,
    mode: str,
) -> np.ndarray:
    """One step of every observer's knowledge matrix (see the module docstring).

    Args:
        beliefs: ``(n, n, c)`` bool, ``beliefs[k, j, p]`` before the step.
        first_hand: ``(n, c)`` bool, the public first-hand pieces ``F``.
        positions: ``(n, 2)`` ints, the positions *after* the step's movement.
        bases: ``(n, 2)`` ints.
        said: ``(n,)`` ints, each agent's effective utterance at the step (``-1``: none). Observer
            ``k`` uses ``said[l]`` only for ``l == k`` and for ``l`` within its hearing range.
        hearing: hearing range ``h``.
        mode: ``"ce"`` or ``"ge"``.

    Returns:
        ``(n, n, c)`` bool, the beliefs after the step.

    Raises:
        ValueError: unknown ``mode`` or inconsistent shapes.
    """
    if mode not in BELIEF_MODES:
        raise ValueError(f"mode={mode!r} is not a belief mode; use 'ce' or 'ge'.")
    beliefs = np.asarray(beliefs, dtype=bool)
    n, c = first_hand.shape
    if beliefs.shape != (n, n, c) or positions.shape != (n, 2) or said.shape != (n,):
        raise ValueError(
            f"shapes do not fit n={n}, c={c}: beliefs {beliefs.shape} (want {(n, n, c)}), "
            f"positions {positions.shape}, said {said.shape}."
        )
    dist = np.abs(positions[:, None, :] - positions[None, :, :]).max(axis=-1)
    near = (dist <= hearing) & ~np.eye(n, dtype=bool)
    speaks = said >= 0
    utter = np.zeros((n, c), dtype=bool)
    utter[np.flatnonzero(speaks), said[speaks]] = True
    # reach[l, j, p]: l said p and j is within l's range
    reach = near[:, :, None] & utter[:, None, :]
    witnessed = near | np.eye(n, dtype=bool)  # witnessed[k, l]: k heard l (or is l)
    heard = np.einsum("kl,ljp->kjp", witnessed.astype(np.int64), reach.astype(np.int64)) > 0
    if mode == "ge":
        # count[k, l, p]: agents in l's range that k believes lack p
        count = np.einsum("lj,kjp->klp", near.astype(np.int64), (~beliefs).astype(np.int64))
        # l can only say what k believes it knows
        own = beliefs[:, np.arange(n), :]  # own[k, l, p] = beliefs[k, l, p]
        score = np.where(own, count, -1)
        piece = score.argmax(axis=-1)  # lowest index among ties
        best = np.take_along_axis(score, piece[..., None], axis=-1)[..., 0]
        guessed = (best > 0) & ~witnessed
        onehot = np.zeros((n, n, c), dtype=np.int64)
        kk, ll = np.nonzero(guessed)
        onehot[kk, ll, piece[kk, ll]] = 1
        heard |= np.einsum("klp,lj->kjp", onehot, near.astype(np.int64)) > 0
    on_base = (positions == bases).all(axis=1)
    forget = beliefs.all(axis=-1) & on_base[None, :]  # (k, j): E_j and B_j
    return first_hand[None, :, :] | ((beliefs | heard) & ~forget[:, :, None])


class KnowledgeTracker:
    """Every agent's knowledge matrix through an episode (for MADDPG-CE / -GE).

    Args:
        mode: ``"ce"`` or ``"ge"``.

    Attributes:
        beliefs: ``(n, n, c)`` bool, ``beliefs[k, j, p]``.
    """

    def __init__(self, mode: str) -> None:
        if mode not in BELIEF_MODES:
            raise ValueError(f"mode={mode!r} is not a belief mode; use 'ce' or 'ge'.")
        self.mode = mode
        self.beliefs = np.zeros((0, 0, 0), dtype=bool)

    def reset(self, first_hand: np.ndarray, knowledge: np.ndarray) -> None:
        """Start of an episode: first-hand pieces for everybody, each observer's own row exact.

        Args:
            first_hand: ``(n, c)`` bool; knowledge: ``(n, c)`` bool, the actual knowledge at reset.
        """
        n = len(first_hand)
        self.beliefs = np.repeat(np.asarray(first_hand, dtype=bool)[None], n, axis=0)
        idx = np.arange(n)
        self.beliefs[idx, idx] = np.asarray(knowledge, dtype=bool)

    def update(
        self,
        *,
        first_hand: np.ndarray,
        positions: np.ndarray,
        bases: np.ndarray,
        said: np.ndarray,
        hearing: int,
    ) -> None:
        """Apply one step (arguments as in :func:`update_beliefs`)."""
        self.beliefs = update_beliefs(
            self.beliefs,
            first_hand=first_hand,
            positions=positions,
            bases=bases,
            said=said,
            hearing=hearing,
            mode=self.mode,
        )

    def features(self) -> np.ndarray:
        """``(n, n c)`` float32: row ``k`` is ``k``'s matrix flattened, ``k``'s own row first, then the
        others in index order (the layout of the oracle observation's knowledge block)."""
        n = self.beliefs.shape[0]
        order = np.array([[k, *[j for j in range(n) if j != k]] for k in range(n)])
        rows = self.beliefs[np.arange(n)[:, None], order]
        return rows.reshape(n, -1).astype(np.float32)
