"""The empirical MDP of observed episodes: one state per distinct flat observation (plus
absorbing states for terminated episodes), the observed frequencies as transitions, the mean
observed reward as utility, rebuildable under episode weights for the bootstrap
(:class:`EmpiricalMDP`); and the one-hot features of every utility of the observation. How the
estimate uses it is in :mod:`imitation_meg.approx.empirical`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.core.mdp import TabularMDP

__all__ = ["EmpiricalMDP", "NotTabular", "canonical_observations", "observation_features"]


class NotTabular(Exception):
    """The data do not admit an empirical MDP (the reason is the message).

    ``few``: the observations were few, but the empirical MDP cannot be built from the data
    (pairs it needs were never tried, or one transition paid two rewards).
    """

    def __init__(self, message: str, *, few: bool = False) -> None:
        super().__init__(message)
        self.few = few


def canonical_observations(x: np.ndarray) -> np.ndarray:
    """``(N, d)`` flat observations as the empirical MDP tells them apart: contiguous float32,
    ``-0`` as ``0`` (each row's bytes are then its key)."""
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(len(x), -1) + 0.0)


def _observation_index(x: np.ndarray, x_next: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Indices of distinct flat observations: ``(index of x (N,), index of x_next (N,), S)``."""
    both = canonical_observations(np.concatenate([x, x_next]))
    keys = both.view(np.dtype((np.void, both.dtype.itemsize * both.shape[1]))).ravel()
    _, inverse = np.unique(keys, return_inverse=True)
    inverse = inverse.reshape(-1)
    n = x.shape[0]
    return inverse[:n], inverse[n:], int(inverse.max()) + 1


class EmpiricalMDP:
    """The empirical MDP of a set of episodes (see the module docstring), rebuildable under
    episode weights for the bootstrap.

    Args:
        data: the episodes (``N`` rows), with the scored policy's probabilities at every row
            (``probs (N, A)``; collected with ``scored=``).
        n_actions: ``|A|``.
        horizon: ``H``.
        terminal_states: one absorbing state per distinct observation that a terminated
            episode ends on (what a utility of the observation needs: a goal and a hole then
            differ), instead of one absorbing state for all of them (what the known utility
            needs: every absorbing state is worth 0 there).

    Raises:
        ValueError: ``data`` without the scored policy's probabilities.

    Attributes:
        n_states: distinct observations ``S`` (the MDP has ``S + n_absorbing`` states, the last
            ``n_absorbing`` absorbing).
        n_absorbing: absorbing states (1 without ``terminal_states``, else the distinct
            terminal observations, at least 1).
        absorbing_obs: ``(n_absorbing,)`` the observation index of each absorbing state (-1:
            none, for the single shared one).
        observations: ``(S, d)`` the distinct flat observations, in state order.
        policy: ``(S + n_absorbing, A)`` the scored policy at each observation (uniform where no
            decision was seen, and in the absorbing states).
        missing: ``(state, action)`` pairs the empirical MDP can reach before the horizon but
            the data never tried (or never saw a transition of, where a decision follows).
        reward_varies: some transition ``(s, a, s')`` paid different rewards at two visits.
    """

    def __init__(
        self, data: Rollouts, n_actions: int, horizon: int, *, terminal_states: bool = False
    ) -> None:
        if data.probs is None:
            raise ValueError(
                "the empirical MDP needs the scored policy's probabilities at every row: collect "
                "the data with scored=<the policy> (Rollouts.probs is None)."
            )
        A, H = n_actions, horizon
        s, s_next, S = _observation_index(data.x, data.x_next)
        self.n_states, self.n_actions, self.horizon = S, A, H
        first = np.unique(np.concatenate([s, s_next]), return_index=True)[1]
        self.observations = np.concatenate([data.x, data.x_next])[first]
        self.episode = data.episode
        self.n_episodes = data.n_episodes
        self.sa = s * A + data.a
        self.r = data.r
        # transitions: every decision but an episode's last one at the horizon (whose `done`
        # only says the horizon came); a terminated episode enters an absorbing state (S, or
        # with terminal_states the one of its last observation)
        self.trans = data.t < H - 1
        terminal = data.done & self.trans
        if terminal_states:
            ends = np.unique(s_next[terminal])
            self.absorbing_obs = ends if ends.size else np.full(1, -1)
            target = np.where(terminal, S + np.searchsorted(ends, s_next), s_next)
        else:
            self.absorbing_obs = np.full(1, -1)
            target = np.where(terminal, S, s_next)
        self.n_absorbing = N = len(self.absorbing_obs)
        key = self.sa[self.trans] * (S + N) + target[self.trans]
        support, self.key_of_row = np.unique(key, return_inverse=True)
        self.key_of_row = self.key_of_row.reshape(-1)
        self.key_sa, self.key_next = support // (S + N), support % (S + N)
        # slots: each (s, a)'s observed successors side by side, padded to the widest (the
        # support is sorted by key, so by (s, a) first: a pair's successors are consecutive)
        per_sa = np.bincount(self.key_sa, minlength=S * A)
        self.width = max(1, int(per_sa.max()) if per_sa.size else 1)
        starts = np.concatenate([[0], np.cumsum(per_sa)[:-1]])
        self.key_slot = np.arange(len(support)) - starts[self.key_sa]
        # the reward of one transition (s, a, s') must not vary: a reward that does depends on
        # the time step (or is random), which a stationary empirical MDP cannot hold
        tkey = self.sa * S + s_next
        order_r = np.lexsort((data.r, tkey))
        k_sorted, r_sorted = tkey[order_r], data.r[order_r]
        starts_r = np.flatnonzero(np.r_[True, k_sorted[1:] != k_sorted[:-1]])
        spread = np.maximum.reduceat(r_sorted, starts_r) - np.minimum.reduceat(r_sorted, starts_r)
        # relative to the rewards' own scale (an absolute floor would hide tiny rewards' drift)
        scale = float(np.abs(data.r).max()) if data.r.size else 0.0
        self.reward_varies = bool(spread.size and spread.max() > 1e-9 * scale)
        self.first = data.t == 0
        self.s0 = s[self.first]
        self.ep0 = data.episode[self.first]
        policy = np.full((S + N, A), 1.0 / A)
        seen, at = np.unique(s, return_index=True)
        policy[seen] = np.asarray(data.probs, dtype=np.float64)[at]
        self.policy = policy / policy.sum(1, keepdims=True)
        self.full = self._estimates(np.ones(data.n_episodes))
        self.missing = self._missing()

    def _estimates(self, w_ep: np.ndarray) -> dict[str, np.ndarray]:
        """Counts and frequencies under episode weights ``w_ep (n_episodes,)``."""
        S, A = self.n_states, self.n_actions
        w = w_ep[self.episode]
        n_sa = np.bincount(self.sa, weights=w, minlength=S * A)
        r_sum = np.bincount(self.sa, weights=w * self.r, minlength=S * A)
        wt = w[self.trans]
        n_key = np.bincount(self.key_of_row, weights=wt, minlength=len(self.key_sa))
        n_trans = np.bincount(self.key_sa, weights=n_key, minlength=S * A)
        p0 = np.bincount(self.s0, weights=w_ep[self.ep0], minlength=S + self.n_absorbing)
        return {"n_sa": n_sa, "r_sum": r_sum, "n_key": n_key, "n_trans": n_trans, "p0": p0}

    def _missing(self) -> list[tuple[int, int]]:
        """Pairs the empirical MDP needs and the data lack (see the class docstring)."""
        S, A, H = self.n_states, self.n_actions, self.horizon
        n = S + self.n_absorbing
        est = self.full
        adj = sp.csr_matrix(
            (np.ones(len(self.key_sa)), (self.key_sa // A, self.key_next)), shape=(n, n)
        )
        adjt = adj.T.tocsr()
        reach = est["p0"] > 0
        decide = reach.copy()  # reachable at some t <= H - 1
        follow = reach.copy() if H >= 2 else np.zeros(n, dtype=bool)  # some t <= H - 2
        for t in range(1, H):
            reach = (adjt @ reach.astype(np.float64)) > 0
            reach[S:] = False
            decide |= reach
            if t <= H - 2:
                follow |= reach
        decide[S:] = follow[S:] = False
        tried = (est["n_sa"] > 0).reshape(S, A)
        moved = (est["n_trans"] > 0).reshape(S, A)
        need = ~tried & decide[:S, None] | ~moved & follow[:S, None]
        return [(int(i), int(j)) for i, j in zip(*np.nonzero(need), strict=True)]

    def mdp(self, w_ep: np.ndarray | None = None) -> TabularMDP:
        """The empirical MDP (under episode weights ``w_ep``; pairs they leave without data keep
        the full data's frequencies)."""
        S, A, H, B = self.n_states, self.n_actions, self.horizon, self.width
        n = S + self.n_absorbing
        est = self.full if w_ep is None else self._estimates(w_ep)
        full = self.full
        n_sa = np.where(est["n_sa"] > 0, est["n_sa"], full["n_sa"])
        r_sum = np.where(est["n_sa"] > 0, est["r_sum"], full["r_sum"])
        utility = np.zeros((n, A))
        utility[:S] = (r_sum / np.maximum(n_sa, 1e-300)).reshape(S, A)
        # replicate's transition counts, or the full data's where the replicate has none
        has = est["n_trans"][self.key_sa] > 0
        n_key = np.where(has, est["n_key"], full["n_key"])
        tot = np.bincount(self.key_sa, weights=n_key, minlength=S * A)
        nxt = np.zeros((n, A, B), dtype=np.int64)
        prob = np.zeros((n, A, B))
        idle = tot == 0  # never moved (needed by no decision): stays put
        nxt[:S, :, 0] = np.repeat(np.arange(S), A).reshape(S, A)
        prob[:S, :, 0] = idle.reshape(S, A)
        nxt[S:, :, 0] = np.arange(S, n)[:, None]
        prob[S:, :, 0] = 1.0
        si, ai = self.key_sa // A, self.key_sa % A
        nxt[si, ai, self.key_slot] = self.key_next
        prob[si, ai, self.key_slot] = n_key / tot[self.key_sa]
        p0 = est["p0"] if est["p0"].sum() > 0 else full["p0"]
        return TabularMDP(
            (nxt, prob),
            utility=utility,
            horizon=H,
            initial_state_dist=p0 / p0.sum(),
            name="empirical MDP",
        )


def observation_features(model: EmpiricalMDP) -> np.ndarray:
    """``(S + n_absorbing, S)`` features of the class of every utility of the observation: each
    state's observation as a one-hot (an absorbing state has its terminal observation's, the
    shared absorbing state none)."""
    S = model.n_states
    phi = np.zeros((S + model.n_absorbing, S))
    phi[np.arange(S), np.arange(S)] = 1.0
    ends = np.flatnonzero(model.absorbing_obs >= 0)
    phi[S + ends, model.absorbing_obs[ends]] = 1.0
    return phi
