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

The empirical MDP itself is built in :mod:`~imitation_meg.approx.empirical_mdp` (its names are
importable from here too).

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
import torch as th

from imitation_meg.approx.core import Run, collect_data, policy_behaviour
from imitation_meg.approx.empirical_mdp import (
    EmpiricalMDP,
    NotTabular,
    _observation_index,
    canonical_observations,
    observation_features,
)
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning, no_fits
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


class _Round(NamedTuple):
    """One round's estimate (bias-corrected), interval, bootstrap spread and replicates, and the
    plain solve of its empirical MDP."""

    meg: float
    low: float
    high: float
    se: float
    replicates: np.ndarray
    plain: MEGResult


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
    _probe(run)
    while total < budget:
        part = _round_data(
            run, len(parts), min(FIRST_STEPS if not parts else total, budget - total)
        )
        parts.append(part)
        total += part.n_steps
        data = Rollouts.concat(parts)
        model = EmpiricalMDP(data, A, H, terminal_states=unknown)
        _check_tabular(model, data, opts.max_states)
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
    _check_tried(model, total)
    if rounds[-1].replicates.size < opts.n_boot:  # the rounds' rule used ROUND_BOOT of them
        rounds[-1] = _solve(model, run, opts.n_boot, rng, _solver(model, unknown))
    # without replicates (n_boot < 2) nothing says whether the rounds settled
    result = _result(
        run, model, data, rounds, settled if opts.n_boot >= 2 else None, bound, unknown=unknown
    )
    return EmpiricalFit(result, model, rounds[-1].plain)


def _probe(run: Run) -> None:
    """Turn away continuous observations: :data:`PROBE_STEPS` steps of the scored policy that
    meet more distinct observations than :data:`PROBE_NEW` times their number.

    Raises:
        NotTabular: the observations do not repeat.
    """
    probe = collect(
        run.source,
        policy_behaviour(run.pol),
        None,
        np.random.default_rng([run.model_seeds[0], 99]),
        min_steps=PROBE_STEPS,
        n_envs=run.opts.n_envs,
        on_step=run.count,
    )
    _, _, n_probe = _observation_index(probe.x, probe.x_next)
    if n_probe > PROBE_NEW * probe.n_steps:
        raise NotTabular(
            f"{probe.n_steps} steps met {n_probe} distinct observations (continuous "
            "observations, or too many states for an empirical MDP)"
        )


def _round_data(run: Run, k: int, n_new: int) -> Rollouts:
    """Round ``k``'s ``n_new`` data steps (a third each from the scored policy, its mix with
    uniform actions and the uniform policy), counted on the progress bar."""
    part = collect_data(
        run.source,
        run.pol,
        n_new,
        np.random.default_rng([run.model_seeds[0], 100 + k]),
        n_envs=run.opts.n_envs,
        on_step=run.count,
        scored=run.pol,
    )
    run.bar.update(part.n_steps)
    return part


def _check_tabular(model: EmpiricalMDP, data: Rollouts, max_states: int) -> None:
    """Raise :class:`NotTabular` where the data do not admit an empirical MDP: too many distinct
    observations, too few visits of each, or a transition that paid two rewards."""
    if model.n_states > max_states or data.n_steps < MIN_VISITS * model.n_states:
        raise NotTabular(
            f"{data.n_steps} data steps met {model.n_states} distinct observations "
            f"(the empirical MDP needs at most max_states={max_states}, each met "
            f"{MIN_VISITS} times on average)"
        )
    if model.reward_varies:
        raise NotTabular(
            "the reward of one transition (observation, action, next observation) differed "
            "between visits: it depends on the time step or is random, which the empirical "
            "MDP (a stationary model) cannot hold",
            few=True,
        )


def _check_tried(model: EmpiricalMDP, total: int) -> None:
    """Raise :class:`NotTabular` where pairs the empirical MDP can reach were never tried after
    ``total`` data steps."""
    if model.missing:
        s, a = model.missing[0]
        raise NotTabular(
            f"after {total} data steps, {len(model.missing)} (observation, action) pairs that "
            f"the empirical MDP can reach before the horizon were never tried (e.g. action {a} "
            f"in observation {s} of {model.n_states}; more data, n_data_steps=, may try them)",
            few=True,
        )


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
    certificate, mean_length = _certificate(model, occ, pi)
    estimate, low, high = _clipped(last, certificate)
    if data.truncated_early:
        warnings.warn(
            f"{data.truncated_early} of {data.n_episodes} data episodes were cut by the "
            f"environment before the horizon H={run.source.horizon} without terminating; the "
            "empirical MDP continues them. Pass horizon= no larger than the environment's limit.",
            ApproxMEGWarning,
            stacklevel=4,
        )
    if settled is False:
        _warn_unsettled(estimate, low, high, data.n_steps, unknown)
    log_a = math.log(model.n_actions)
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
        **no_fits(),
        bootstrap_se=last.se,
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


def _certificate(model: EmpiricalMDP, occ: th.Tensor, pi: th.Tensor) -> tuple[float, float]:
    """The Gibbs certificate ``E[sum_t (log|A| - H(pi(. | s_t)))]`` of the scored policy ``pi``
    ``(S + n_absorbing, A)`` in the empirical MDP, from its state occupancies ``occ``
    ``(H, S + n_absorbing)``, and its mean episode length (decisions outside absorbing states)."""
    ent = -(pi * th.log(pi.clamp_min(1e-300))).sum(1)
    log_a = math.log(model.n_actions)
    certificate = float((occ * (log_a - ent)).sum())
    return certificate, float(occ[:, : model.n_states].sum())


def _clipped(last: _Round, certificate: float) -> tuple[float, float, float]:
    """The last round's estimate clipped to ``[0, certificate]`` and its interval's ends clipped
    to ``[0, certificate]`` less the solver's rounding (NaN ends stay NaN)."""
    cert = max(certificate, 0.0)
    # where MEG attains the certificate (every policy of a tree MDP is soft-optimal for some
    # utility of the state), the certificate, summed another way, can lie an ulp below the
    # exact value
    top = cert + ROUNDING * max(1.0, cert)
    low, high = (v if math.isnan(v) else min(max(v, 0.0), top) for v in (last.low, last.high))
    return min(max(last.meg, 0.0), cert), low, high


def _warn_unsettled(estimate: float, low: float, high: float, n_steps: int, unknown: bool) -> None:
    """Warn that the data budget (``n_steps``) ran out before the interval was narrow enough."""
    warnings.warn(
        f"the empirical MDP's estimate {estimate:.4g} has an interval half-width "
        f"{(high - low) / 2:.3g} after the data budget of {n_steps} steps "
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
        stacklevel=5,
    )
