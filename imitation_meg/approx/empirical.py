"""Known-utility MEG through an empirical MDP, for environments whose observations take few values.

When the observations of an environment take few distinct values (a gridworld seen through its
coordinates, a toy-text environment through one-hot features), each distinct observation can
serve as a state: the transitions counted in off-policy data give an empirical MDP (certainty
equivalence), and the exact known-utility solver (:func:`imitation_meg.meg`) gives its MEG in
milliseconds. This is what :func:`~imitation_meg.approx.meg_approx` does by default
(``method="auto"``) when the data show at most ``max_states`` distinct observations, each met
:data:`MIN_VISITS` times on average; otherwise it fits soft Q-networks.

1. **Data**, in rounds (after :data:`PROBE_STEPS` steps of the scored policy that turn away
   continuous observations: more distinct observations than :data:`PROBE_NEW` times the steps): :data:`FIRST_STEPS` environment steps, then as many again as all rounds
   before (doubling the total) up to ``n_models x n_data_steps`` (the data the soft Q-fits
   would collect); a third of every round each from the scored policy, the scored policy mixed
   half-and-half with uniform actions, and the uniform policy (whole episodes).
2. **The empirical MDP**: one state per distinct flat observation plus an absorbing state that
   every terminated episode enters (worth 0, as ``TabularMDP.from_env`` builds it);
   ``P(s' | s, a)`` the observed frequencies (the last decision of an episode at the horizon
   says nothing about termination and is not counted), the utility ``r(s, a)`` the mean reward
   observed, the start distribution the observed first observations, the scored policy's own
   probabilities at each observation. The MDP is stationary: the environment's dynamics must
   not depend on the time step except through the observation.
3. **Checks**: the reward of a transition (observation, action, next observation) must be the
   same at every visit (a reward that varies depends on the time step or is random, which a
   stationary model cannot hold: ``"auto"`` then fits soft Q-networks, with a warning); every
   action must have been tried in every observation from which the empirical
   MDP can take a decision before the horizon (and have a counted transition where a decision
   follows); rounds continue until it has.
4. **Estimate and interval**: the exact MEG of the empirical MDP, ``m``, corrected for its bias
   by the bootstrap (episodes resampled with Poisson(1) weights, the empirical MDP rebuilt and
   solved for each replicate ``m*``; a pair that a replicate leaves without data keeps the full
   data's estimate): the estimate is ``2 m - mean(m*)``. The plug-in value is biased low: noise
   in the estimated dynamics and utility moves the soft-optimal models away from the scored
   policy, and the replicates, which add that noise once more, measure by how much. The interval
   is the estimate plus or minus ``z`` standard deviations of the replicates (at least
   :data:`ROUNDING` of ``max(1, |estimate|)``, the solver's rounding), clipped to
   ``[0, certificate]``. The replicates are solved side by side on the caller's torch threads
   (:func:`imitation_meg.core.kernels.threads.parallel_map`): the same values as one after another.
5. **Stopping**: after each round, when coverage holds and the half-width is at most
   :data:`PRECISION_SHARE` of the estimate or :data:`PRECISION_BOUND` of ``H log|A|``, whichever
   is larger (``settled=True``); a call that reaches the data budget first reports
   ``settled=False`` with an :class:`~imitation_meg.approx.evaluate.ApproxMEGWarning`. With
   ``n_boot`` below 2 there is no interval (NaN ends, the plain value as the estimate), the
   rounds run to the budget and ``settled`` is None, as the soft Q-fits report without one.

The same rounds, bootstrap and stopping rule give unknown-utility MEG over every utility of the
observation (:func:`empirical_fit` with ``unknown=True``, behind
``meg_approx_unknown(..., utility="observation")``): every observation a terminated episode ends
on is then an absorbing state of its own, and each empirical MDP is solved by
:func:`imitation_meg.meg_unknown` with the observations' one-hot features.

What the interval does not cover: states the data never reached (the empirical MDP has no
transition to them, so no model there can use them), and observations that do not determine the
state (two states with one observation merge into one empirical state, which averages their
dynamics; the soft Q-fits, functions of the observation, share the limitation).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import torch as th

from imitation_meg.approx.core import Run, collect_data, policy_behaviour
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning
from imitation_meg.approx.rollouts import Rollouts, collect
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import MEGResult, meg
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import occupancy_measures
from imitation_meg.core.unknown import meg_unknown

__all__ = [
    "FIRST_STEPS",
    "MIN_VISITS",
    "PRECISION_BOUND",
    "PRECISION_SHARE",
    "PROBE_NEW",
    "PROBE_STEPS",
    "ROUNDING",
    "ROUND_BOOT",
    "EmpiricalFit",
    "EmpiricalMDP",
    "NotTabular",
    "canonical_observations",
    "data_budget",
    "empirical_estimate",
    "empirical_fit",
    "observation_features",
]

#: Steps of the scored policy that decide first whether the observations repeat at all ...
PROBE_STEPS = 1000
#: ... (not when they meet more distinct observations than this share of their number:
#: continuous observations).
PROBE_NEW = 0.9
#: Environment steps of the first round of data (later rounds double the total).
FIRST_STEPS = 20_000
#: The observations count as "few" when the data meet each distinct one this often on average.
MIN_VISITS = 5
#: Rounds stop once the interval's half-width is at most this share of the estimate ...
PRECISION_SHARE = 0.025
#: ... or this share of ``H log|A|``, whichever is larger.
PRECISION_BOUND = 0.005
#: Bootstrap replicates of the rounds before the last (the last uses ``n_boot``).
ROUND_BOOT = 200
#: The interval's least half-width, relative to ``max(1, |estimate|)``: the exact solver's
#: rounding (with deterministic dynamics and start every replicate is the same MDP).
ROUNDING = 1e-9
#: Bootstrap replicates whose episode weights are held at once (solved side by side).
_BOOT_BLOCK = 32


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


class _Round(NamedTuple):
    """One round's estimate (bias-corrected), interval, bootstrap spread and replicates, and the
    plain solve of its empirical MDP."""

    meg: float
    low: float
    high: float
    se: float
    replicates: np.ndarray
    plain: MEGResult


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


def _solver(model: EmpiricalMDP, unknown: bool) -> Callable[[TabularMDP], MEGResult]:
    """The exact MEG of the scored policy in an empirical MDP: known (the observed reward) or
    unknown over every utility of the observation."""
    if not unknown:
        return lambda mdp: meg(model.policy, mdp)
    phi = observation_features(model)
    return lambda mdp: meg_unknown(model.policy, mdp, features=phi)


def _solve(
    model: EmpiricalMDP,
    run: Run,
    n_boot: int,
    rng: np.random.Generator,
    solve: Callable[[TabularMDP], MEGResult],
) -> _Round:
    """The empirical MDP's MEG (``solve``), bias-corrected by its bootstrap replicates, and its
    interval."""
    z = statistics.NormalDist().inv_cdf(0.5 + run.opts.confidence / 2)
    plain = solve(model.mdp())
    value = plain.meg
    # independent solves: side by side on the caller's torch threads, each on one (the same
    # bits as one after another), the weights drawn in the same order in blocks
    out: list[float] = []
    while len(out) < n_boot:
        block = min(_BOOT_BLOCK, n_boot - len(out))
        weights = [rng.poisson(1.0, model.n_episodes).astype(float) for _ in range(block)]
        out += _threads.parallel_map(lambda w: solve(model.mdp(w)).meg, weights)
    reps = np.array(out)
    if n_boot < 2:  # no spread to measure: no bias correction and no interval
        return _Round(value, math.nan, math.nan, math.nan, reps, plain)
    se = float(reps.std(ddof=1))
    value = 2.0 * value - float(reps.mean())  # the bootstrap's bias correction
    # never narrower than the exact solver's rounding (identical replicates: a point interval)
    half = max(z * se, ROUNDING * max(1.0, abs(value)))
    return _Round(value, value - half, value + half, se, reps, plain)


def data_budget(n_models: int, n_data_steps: int) -> int:
    """The empirical MDP's data budget in environment steps (its progress bar's total)."""
    return max(FIRST_STEPS, n_models * n_data_steps)


class EmpiricalFit(NamedTuple):
    """An empirical-MDP estimate with what it was solved on: the result, the last empirical MDP,
    and the exact solve of that MDP (for an unknown utility its ``extra["theta"]`` is the
    fitted utility of each observation)."""

    result: ApproxMEGResult
    model: EmpiricalMDP
    plain: MEGResult


def empirical_estimate(run: Run) -> ApproxMEGResult:
    """Known-utility MEG of ``run``'s policy through the empirical MDP (module docstring).

    Args:
        run: the call's environment, policy, settings (``max_states``, ``n_models x
            n_data_steps`` steps at most, ``n_boot``, ``confidence``) and seeds.

    Raises:
        NotTabular: more than ``max_states`` distinct observations, fewer than
            :data:`MIN_VISITS` data steps per observation, or untried pairs left when the
            data budget is spent (the message says which).
    """
    return empirical_fit(run).result


def empirical_fit(run: Run, *, unknown: bool = False) -> EmpiricalFit:
    """:func:`empirical_estimate`, or with ``unknown`` the unknown-utility MEG over every
    utility of the observation (the exact :func:`imitation_meg.meg_unknown` of each empirical
    MDP, whose terminal observations are absorbing states of their own; the same rounds,
    bootstrap and stopping rule), with the last empirical MDP and its exact solve.

    Args:
        run: as :func:`empirical_estimate`.
        unknown: the unknown-utility MEG instead of the known.

    Raises:
        NotTabular: as :func:`empirical_estimate`.
    """
    opts = run.opts
    assert opts.n_data_steps is not None
    H, A = run.source.horizon, run.source.n_actions
    bound = H * math.log(A)
    budget = data_budget(opts.n_models, opts.n_data_steps)
    rng = np.random.default_rng(run.s_boot)
    parts: list[Rollouts] = []
    total = 0
    rounds: list[_Round] = []
    settled = False
    model: EmpiricalMDP | None = None
    probe = collect(
        run.source,
        policy_behaviour(run.pol),
        None,
        np.random.default_rng([run.model_seeds[0], 99]),
        min_steps=PROBE_STEPS,
        n_envs=opts.n_envs,
        on_step=run.count,
    )
    _, _, n_probe = _observation_index(probe.x, probe.x_next)
    if n_probe > PROBE_NEW * probe.n_steps:
        raise NotTabular(
            f"{probe.n_steps} steps met {n_probe} distinct observations (continuous "
            "observations, or too many states for an empirical MDP)"
        )
    while total < budget:
        n_new = min(FIRST_STEPS if not parts else total, budget - total)
        part = collect_data(
            run.source,
            run.pol,
            n_new,
            np.random.default_rng([run.model_seeds[0], 100 + len(parts)]),
            n_envs=opts.n_envs,
            on_step=run.count,
            scored=run.pol,
        )
        parts.append(part)
        total += part.n_steps
        run.bar.update(part.n_steps)
        data = Rollouts.concat(parts)
        model = EmpiricalMDP(data, A, H, terminal_states=unknown)
        if model.n_states > opts.max_states or data.n_steps < MIN_VISITS * model.n_states:
            raise NotTabular(
                f"{data.n_steps} data steps met {model.n_states} distinct observations "
                f"(the empirical MDP needs at most max_states={opts.max_states}, each met "
                f"{MIN_VISITS} times on average)"
            )
        if model.reward_varies:
            raise NotTabular(
                "the reward of one transition (observation, action, next observation) differed "
                "between visits: it depends on the time step or is random, which the empirical "
                "MDP (a stationary model) cannot hold",
                few=True,
            )
        if model.missing:
            continue
        last = total >= budget
        solve = _solver(model, unknown)
        rnd = _solve(model, run, opts.n_boot if last else min(opts.n_boot, ROUND_BOOT), rng, solve)
        rounds.append(rnd)
        half = (rnd.high - rnd.low) / 2  # NaN without replicates: the rounds run to the budget
        if half <= max(PRECISION_SHARE * rnd.meg, PRECISION_BOUND * bound):
            settled = True
            break
    assert model is not None
    if model.missing:
        s, a = model.missing[0]
        raise NotTabular(
            f"after {total} data steps, {len(model.missing)} (observation, action) pairs that "
            f"the empirical MDP can reach before the horizon were never tried (e.g. action {a} "
            f"in observation {s} of {model.n_states}; more data, n_data_steps=, may try them)",
            few=True,
        )
    if rounds[-1].replicates.size < opts.n_boot:  # the rounds' rule used ROUND_BOOT of them
        rounds[-1] = _solve(model, run, opts.n_boot, rng, _solver(model, unknown))
    # without replicates (n_boot < 2) nothing says whether the rounds settled
    result = _result(
        run, model, data, rounds, settled if opts.n_boot >= 2 else None, bound, unknown=unknown
    )
    return EmpiricalFit(result, model, rounds[-1].plain)


def _result(
    run: Run,
    model: EmpiricalMDP,
    data: Rollouts,
    rounds: list[_Round],
    settled: bool | None,
    bound: float,
    *,
    unknown: bool = False,
) -> ApproxMEGResult:
    """The estimate of the last round as an :class:`ApproxMEGResult` (``expected_return`` is
    the observed reward's, also for an unknown utility)."""
    opts = run.opts
    last = rounds[-1]
    exact = last.plain
    pi = th.as_tensor(model.policy)
    mdp = model.mdp()
    occ = occupancy_measures(mdp, pi)[:-1].double()  # (H, S + n_absorbing)
    ent = -(pi * th.log(pi.clamp_min(1e-300))).sum(1)
    log_a = math.log(model.n_actions)
    certificate = float((occ * (log_a - ent)).sum())
    mean_length = float(occ[:, : model.n_states].sum())
    cert = max(certificate, 0.0)
    # the interval's ends are clipped to [0, certificate] less the solver's rounding: where MEG
    # attains the certificate (every policy of a tree MDP is soft-optimal for some utility of the
    # state), the certificate, summed another way, can lie an ulp below the exact value
    top = cert + ROUNDING * max(1.0, cert)
    low, high = (v if math.isnan(v) else min(max(v, 0.0), top) for v in (last.low, last.high))
    estimate = min(max(last.meg, 0.0), cert)
    if data.truncated_early:
        warnings.warn(
            f"{data.truncated_early} of {data.n_episodes} data episodes were cut by the "
            f"environment before the horizon H={run.source.horizon} without terminating; the "
            "empirical MDP continues them. Pass horizon= no larger than the environment's limit.",
            ApproxMEGWarning,
            stacklevel=4,
        )
    if settled is False:
        warnings.warn(
            f"the empirical MDP's estimate {estimate:.4g} has an interval half-width "
            f"{(high - low) / 2:.3g} after the data budget of {data.n_steps} steps "
            f"(n_models x n_data_steps): more than {PRECISION_SHARE:.1%} of the estimate and "
            f"{PRECISION_BOUND:.1%} of H log|A|. On the validation cases such estimates were "
            "the ones off by more than that (near-deterministic optima, where small errors in "
            "the estimated dynamics move the estimate): raise n_data_steps=, or score with "
            + (
                "utility='mlp' (a lower bound from soft Q-fits; docs/approx.md)."
                if unknown
                else "method='soft_q' (docs/approx.md)."
            ),
            ApproxMEGWarning,
            stacklevel=4,
        )
    length_bound = mean_length * log_a
    return ApproxMEGResult(
        meg=estimate,
        low=low,
        high=high,
        confidence=opts.confidence,
        beta=float(exact.beta),
        upper_bound=bound,
        normalized=estimate / bound if bound > 0 else 0.0,
        length_bound=length_bound,
        length_normalized=estimate / length_bound if length_bound > 0 else 0.0,
        certificate=certificate,
        horizon=run.source.horizon,
        mean_length=mean_length,
        # the observed reward's: the known solve's, or (unknown) from the occupancy above
        expected_return=float(
            (occ * (pi * mdp.reward_sa().double()).sum(1)).sum()
            if unknown
            else exact.expected_utility
        ),
        n_env_steps=run.n_env_steps,
        n_eval_episodes=0,
        ensemble=math.nan,
        models=[],
        seed_std=math.nan,
        model_se=math.nan,
        bootstrap_se=last.se,
        residual_rms=math.nan,
        at_boundary=bool(exact.at_boundary),
        q_scale=math.nan,
        replicates=last.replicates,
        wall_time_s=time.perf_counter() - run.t_start,
        first_stage=rounds[0].meg if len(rounds) > 1 else math.nan,
        refine_shift=last.meg - rounds[0].meg if len(rounds) > 1 else 0.0,
        stages=tuple(r.meg for r in rounds),
        stage_intervals=tuple((r.meg, r.low, r.high) for r in rounds),
        settled=settled,
        method="empirical",
        n_states=model.n_states,
    )
