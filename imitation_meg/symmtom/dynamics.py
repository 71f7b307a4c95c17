"""The pure step function of SymmToM: movement, speech, rewards and recharge (numpy only).

:class:`~imitation_meg.symmtom.env.SymmToMEnv` calls :func:`transition` once per step; the tabular
builder (:mod:`imitation_meg.symmtom.tabular`) calls it to enumerate outcomes. The rules are written
out in the module docstring of :mod:`imitation_meg.symmtom.env`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LOG_KEYS", "MOVES", "MOVE_NAMES", "SPEECH_TIMINGS", "resolve_moves", "transition"]

#: Displacements ``(dx, dy)`` of the five moves ``none, +x, -x, +y, -y``.
MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.int64)
MOVE_NAMES = ("none", "+x", "-x", "+y", "-y")

#: What an agent may say: ``"fresh"`` (the paper's rule and our default: the knowledge at the start
#: of the step) or ``"stale"`` (the original code's timing: the knowledge at the start of the
#: *previous* step, so a piece heard at step t can be said from t + 2, and a piece forgotten at a
#: recharge can still be said at the next step).
SPEECH_TIMINGS = ("fresh", "stale")

#: Per-agent, per-step quantities logged in ``info[agent]`` (and summed in ``info[agent]["totals"]``).
LOG_KEYS = (
    "reward",
    "listen_reward",
    "speak_reward",
    "recharge_reward",
    "correct_base_use",
    "incorrect_base_use",
    "useless_move",
    "wrong_speech",
    "useless_speech",
)


def resolve_moves(
    positions: np.ndarray, moves: np.ndarray, width: int, rng: np.random.Generator | None
) -> tuple[np.ndarray, list[tuple[list[int], list[float]]]]:
    """Apply the movement rules of one step.

    A move into a wall is cancelled. Then, until nothing changes: a move into the cell of an agent
    that does not move is cancelled; when several moving agents target one cell, one of them (drawn
    uniformly) moves and the others stay. Groups are visited in the order of their lowest-indexed
    member, one draw ``rng.integers(len(group))`` per group.

    Args:
        positions: ``(n, 2)`` int cells before the step (distinct).
        moves: ``(n,)`` ints in ``0..4`` (see :data:`MOVES`).
        width: grid width ``w``.
        rng: generator for collision tie-breaks. ``None`` resolves every tie in favour of the
            lowest-indexed contender (used only to enumerate outcomes, see ``conflicts``).

    Returns:
        ``(new_positions (n, 2), conflicts)`` where ``conflicts`` lists every tie-break made as
        ``(contenders, [1/len] * len)`` in the order it was drawn.
    """
    n = len(positions)
    old = [(int(p[0]), int(p[1])) for p in positions]
    target: list[tuple[int, int]] = []
    for (x, y), m in zip(old, np.asarray(moves).tolist(), strict=True):
        dx, dy = _DISPLACEMENTS[m]
        tx, ty = x + dx, y + dy
        target.append((tx, ty) if 0 <= tx < width and 0 <= ty < width else (x, y))
    conflicts: list[tuple[list[int], list[float]]] = []
    changed = True
    while changed:
        changed = False
        moving = [target[i] != old[i] for i in range(n)]
        standing = {old[j] for j in range(n) if not moving[j]}
        for i in range(n):
            if moving[i] and target[i] in standing:
                target[i] = old[i]
                changed = True
        if changed:
            continue
        movers = [i for i in range(n) if target[i] != old[i]]
        seen: set[tuple[int, int]] = set()
        for i in movers:
            cell = target[i]
            if cell in seen:
                continue
            seen.add(cell)
            group = [j for j in movers if target[j] == cell]
            if len(group) > 1:
                winner = group[0] if rng is None else group[int(rng.integers(len(group)))]
                conflicts.append((group, [1.0 / len(group)] * len(group)))
                for j in group:
                    if j != winner:
                        target[j] = old[j]
                changed = True
    return np.array(target, dtype=np.int64).reshape(n, 2), conflicts


_DISPLACEMENTS = [tuple(int(v) for v in d) for d in MOVES]


def transition(
    positions: np.ndarray,
    knowledge: np.ndarray,
    first_hand: np.ndarray,
    bases: np.ndarray,
    moves: np.ndarray,
    pieces: np.ndarray,
    *,
    width: int,
    hearing: int,
    rng: np.random.Generator | None,
    new_positions: np.ndarray | None = None,
    speak_knowledge: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """One step of SymmToM (see the module docstring of :mod:`imitation_meg.symmtom.env`).

    Args:
        positions, bases: ``(n, 2)`` ints; knowledge, first_hand: ``(n, c)`` bool (start of step).
        moves: ``(n,)`` ints in ``0..4``; pieces: ``(n,)`` ints in ``0..c-1``.
        width, hearing: grid width ``w`` and hearing range ``h``.
        rng: collision tie-break generator (see :func:`resolve_moves`).
        new_positions: skip movement and use these positions (for enumerating tie outcomes).
        speak_knowledge: ``(n, c)`` bool, what each agent may say (``None``: ``knowledge``, the
            paper's rule; the env passes the previous step's knowledge for
            ``speech_timing="stale"``). Newness, rewards and recharge always use ``knowledge``.

    Returns:
        dict with ``positions (n, 2)``, ``knowledge (n, c)`` (next step), ``said (n,)`` (effective
        utterances, -1 none) and one ``(n,)`` float array per key of :data:`LOG_KEYS`.
    """
    n, c = knowledge.shape
    if new_positions is None:
        new_positions, _ = resolve_moves(positions, moves, width, rng)
    can_say = knowledge if speak_knowledge is None else speak_knowledge
    full = knowledge.all(axis=1)
    idx = np.arange(n)
    said = np.where(can_say[idx, pieces], pieces, -1)
    dist = np.abs(new_positions[:, None, :] - new_positions[None, :, :]).max(axis=-1)
    near = (dist <= hearing) & ~np.eye(n, dtype=bool)
    speaks = said >= 0
    # told[i, j]: speaker i's utterance reached j and was new to j
    told = near & speaks[:, None] & ~knowledge[:, np.where(speaks, said, 0)].T
    listen = told.sum(axis=0).astype(float)
    speak = told.sum(axis=1).astype(float)
    new_k = knowledge.copy()
    spk, lst = np.nonzero(told)
    new_k[lst, said[spk]] = True
    # useless speech: nothing new reached anyone in range though i knew a piece someone there lacked
    could = (knowledge[:, None, :] & ~knowledge[None, :, :] & near[:, :, None]).any(axis=(1, 2))
    useless_speech = (speaks & (speak == 0) & near.any(axis=1) & could).astype(float)
    on_base = (new_positions == bases).all(axis=1)
    recharge = on_base & full
    new_k[recharge] = first_hand[recharge]
    recharge_reward = recharge * float(c * (n - 1))
    moved = (new_positions != positions).any(axis=1)
    arrived = on_base & (positions != bases).any(axis=1)
    return {
        "positions": new_positions,
        "knowledge": new_k,
        "said": said,
        "reward": listen + speak + recharge_reward,
        "listen_reward": listen,
        "speak_reward": speak,
        "recharge_reward": recharge_reward,
        "correct_base_use": recharge.astype(float),
        "incorrect_base_use": (arrived & ~full).astype(float),
        "useless_move": ((moves != 0) & ~moved).astype(float),
        "wrong_speech": (said < 0).astype(float),
        "useless_speech": useless_speech,
    }
