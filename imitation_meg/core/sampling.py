"""Sampling trajectories of a tabular policy, and the random generators of the estimates.

:func:`sample_trajectories` rolls a policy out in a finite-horizon
:class:`~imitation_meg.core.mdp.TabularMDP` (every sampled step possible by construction); its
output feeds :func:`imitation_meg.core.trajectories.meg_from_trajectories`, which re-exports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imitation_meg._validation import as_policy
from imitation_meg.core.mdp import TabularMDP

__all__ = ["sample_trajectories"]


def sample_trajectories(
    mdp: TabularMDP, policy: Any, n: int, *, rng: np.random.Generator | int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Roll out a tabular policy in the MDP for its full horizon.

    Args:
        mdp: the MDP (initial distribution, dynamics, horizon ``H``).
        policy: ``(S, A)`` or ``(H, S, A)`` probabilities.
        n: number of trajectories.
        rng: generator or seed (default seed 0).

    Returns:
        ``(states (n, H + 1), actions (n, H))`` int64 arrays, ready for
        :func:`meg_from_trajectories` as a ``(states, actions)`` pair.
    """

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of trajectories, got {n!r}.")
    _refuse_infinite_horizon(mdp)
    gen = _generator(rng)
    pi = np.asarray(as_policy(policy, mdp).cpu(), dtype=np.float64)
    H = mdp.steps
    ns = np.asarray(mdp.next_state.cpu())
    pr = np.asarray(mdp.prob.cpu(), dtype=np.float64)
    p0 = np.asarray(mdp.initial_state_dist.cpu(), dtype=np.float64)
    states = np.empty((n, H + 1), dtype=np.int64)
    actions = np.empty((n, H), dtype=np.int64)
    states[:, 0] = _choice_rows(np.broadcast_to(p0, (n, p0.size)), gen)
    for t in range(H):
        s = states[:, t]
        rows = pi[t, s] if pi.ndim == 3 else pi[s]
        a = _choice_rows(rows, gen)
        actions[:, t] = a
        k = _choice_rows(pr[s, a], gen)
        states[:, t + 1] = ns[s, a, k]
    return states, actions


def _refuse_infinite_horizon(mdp: TabularMDP) -> None:
    """Trajectory estimates are finite-horizon: sampled episodes end, while the discounted
    infinite-horizon MEG weights every step of an endless episode."""
    if mdp.horizon is None:
        raise ValueError(
            f"{mdp.name} is a discounted infinite-horizon MDP: trajectory estimates need a "
            "finite horizon (sampled episodes end, and a truncated discounted sum is another "
            "quantity). Score the stationary policy exactly with meg / meg_unknown, or use "
            "mdp.with_horizon(H) for a finite-horizon copy."
        )


def _choice_rows(p: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """One index per row of probabilities ``p (n, k)``."""
    c = np.cumsum(p, axis=1)
    u = gen.random(p.shape[0]) * c[:, -1]
    return np.minimum((c < u[:, None]).sum(1), p.shape[1] - 1)


def _generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng(0)
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator or an integer seed, got {type(rng).__name__}.")
