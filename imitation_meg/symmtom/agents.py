"""Scripted SymmToM agents (uniform random, the paper's heuristic) and an episode runner.

A *policy* here is any object with ``reset(env, i)`` (called after every ``env.reset``) and
``__call__(obs, env, i) -> (move, piece)``, where ``obs`` is agent ``i``'s observation vector and
``env`` the live :class:`~imitation_meg.symmtom.env.SymmToMEnv`. Scripted agents may read the
environment's state; what each one reads is written in its docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from imitation_meg.symmtom.dynamics import LOG_KEYS, MOVES
from imitation_meg.symmtom.env import SymmToMEnv

__all__ = [
    "HeuristicPolicy",
    "Policy",
    "RandomPolicy",
    "ScriptedPolicy",
    "StayPolicy",
    "central_cells",
    "run_episodes",
    "step_towards",
]


class Policy(Protocol):
    """What :func:`run_episodes` and the wrappers call."""

    def reset(self, env: SymmToMEnv, i: int) -> None: ...

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray: ...


class RandomPolicy:
    """Uniform over the ``5 c`` (move, piece) pairs, drawn from its own generator.

    Args:
        seed: seed or generator (``None`` for fresh entropy).
    """

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self, env: SymmToMEnv, i: int) -> None:
        """Stateless."""

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        return np.array([self.rng.integers(5), self.rng.integers(env.n_pieces)], dtype=np.int64)


class StayPolicy:
    """Never moves; says ``piece`` (default 0). Used to immobilise agents in the ToM tests."""

    def __init__(self, piece: int = 0) -> None:
        self.piece = piece

    def reset(self, env: SymmToMEnv, i: int) -> None:
        """Stateless."""

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        return np.array([0, self.piece], dtype=np.int64)


class ScriptedPolicy:
    """Plays a fixed list of (move, piece) actions, then repeats ``after`` (default: stay, piece 0)."""

    def __init__(self, actions: Sequence[tuple[int, int]], after: tuple[int, int] = (0, 0)) -> None:
        self.actions: list[tuple[int, int]] = [(int(a[0]), int(a[1])) for a in actions]
        self.after: tuple[int, int] = (int(after[0]), int(after[1]))
        self.t = 0

    def reset(self, env: SymmToMEnv, i: int) -> None:
        self.t = 0

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        act = self.actions[self.t] if self.t < len(self.actions) else self.after
        self.t += 1
        return np.array(act, dtype=np.int64)


def central_cells(width: int) -> list[tuple[int, int]]:
    """The centre of a ``w x w`` grid: the 2 x 2 block for even ``w``, the single cell for odd ``w``."""
    lo, hi = (width - 1) // 2, width // 2
    return sorted({(x, y) for x in (lo, hi) for y in (lo, hi)})


def step_towards(pos: np.ndarray, target: np.ndarray | tuple[int, int]) -> int:
    """The move (index into :data:`MOVES`) that shortens the Manhattan distance to ``target``.

    The axis with the larger remaining distance goes first (``x`` on ties); 0 when at the target.
    """
    dx, dy = int(target[0] - pos[0]), int(target[1] - pos[1])
    if dx == 0 and dy == 0:
        return 0
    if abs(dx) >= abs(dy):
        return 1 if dx > 0 else 2
    return 3 if dy > 0 else 4


class HeuristicPolicy:
    """The paper's heuristic: go to the centre and say the known pieces round-robin until one knows
    all ``c``; then go straight to the own base (recharge) and come back to the centre.

    Choices the paper's sentence leaves open (ours):
        * "centre" is :func:`central_cells` (the 2 x 2 block for even ``w``); the agent heads for the
          nearest central cell not occupied by another agent (Manhattan distance, ties by cell order),
          and stays once it stands on a central cell;
        * moves follow :func:`step_towards` (longer axis first), with no detours around agents;
        * speech cycles through the pieces the agent knows in increasing index order, continuing
          after the last piece it said, at every step (also on the way to and from the base);
        * with full knowledge the agent walks to its base even when it could still share pieces.

    Reads from the env: its own position, base and current knowledge (all of which a zeroth-order
    agent with memory can track from its observations) and the others' positions (vision).
    """

    def __init__(self) -> None:
        self.last: dict[int, int] = {}

    def reset(self, env: SymmToMEnv, i: int) -> None:
        self.last[i] = -1

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        pos = env.positions[i]
        known = np.flatnonzero(env.knowledge[i])
        if env.knowledge[i].all():
            move = step_towards(pos, env.bases[i])
        else:
            centre = central_cells(env.width)
            if (int(pos[0]), int(pos[1])) in centre:
                move = 0
            else:
                occupied = {(int(x), int(y)) for j, (x, y) in enumerate(env.positions) if j != i}
                free = [cell for cell in centre if cell not in occupied] or centre
                dist = [abs(cell[0] - pos[0]) + abs(cell[1] - pos[1]) for cell in free]
                move = step_towards(pos, free[int(np.argmin(dist))])
        last = self.last.get(i, -1)
        if len(known) == 0:
            piece = 0
        else:
            later = known[known > last]
            piece = int(later[0] if len(later) else known[0])
        self.last[i] = piece
        return np.array([move, piece], dtype=np.int64)


def run_episodes(
    env: SymmToMEnv,
    policies: Policy | Sequence[Policy],
    n_episodes: int,
    *,
    seed: int | None = None,
    callback: Callable[[SymmToMEnv], None] | None = None,
) -> dict[str, np.ndarray]:
    """Play ``n_episodes`` episodes and collect per-agent totals.

    Args:
        env: the environment (its generator is seeded once with ``seed``, then continues).
        policies: one policy for all agents or one per agent (a shared policy object is called
            once per agent per step with that agent's index).
        n_episodes: number of episodes.
        seed: seed of the first ``env.reset``.
        callback: called with the env after every step (e.g. to render).

    Returns:
        dict mapping ``"reward"`` and each key of :data:`LOG_KEYS` to an ``(n_episodes, n)`` array
        of per-episode totals for each agent.
    """
    n = env.n_agents
    if not isinstance(policies, Sequence):
        policies = [policies] * n
    if len(policies) != n:
        raise ValueError(f"got {len(policies)} policies for {n} agents; pass one or one per agent.")
    if not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes={n_episodes!r} must be a positive int.")
    out = {k: np.zeros((n_episodes, n)) for k in LOG_KEYS}
    for e in range(n_episodes):
        obs, _ = env.reset(seed=seed if e == 0 else None)
        for i, pol in enumerate(policies):
            pol.reset(env, i)
        infos: dict = {}
        while env.agents:
            actions = {
                a: policies[env.agent_index[a]](obs[a], env, env.agent_index[a]) for a in env.agents
            }
            obs, _, _, _, infos = env.step(actions)
            if callback is not None:
                callback(env)
        for a, info in infos.items():
            for k in LOG_KEYS:
                out[k][e, env.agent_index[a]] = info["totals"][k]
    return out


_ = MOVES  # re-exported convention: moves index MOVES
