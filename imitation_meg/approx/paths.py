"""Known-utility MEG in a deterministic environment, from the soft-optimal model's paths.

Where every transition is deterministic (the next state a function of the state and the
action), the finite-horizon soft-optimal model of rationality ``beta`` (terminal states worth 0,
no discount, the uniform policy at ``beta = 0``; :mod:`imitation_meg.approx.known`) gives the
actions of a whole episode from its start ``s0`` the probability
``|A|^-T exp(beta R) / Z_beta(s0)``, where ``R`` is the episode's return, ``T`` its number of
decisions (until it terminates or reaches ``H``) and

    Z_beta(s0) = E_uniform[ exp(beta R) | s0 ]

the mean over uniformly random actions (the soft value: ``log Z_beta = beta V_beta``). So along
every episode of every policy ``sum_t (log pi_beta(a_t | s_t) + log|A|) = beta R -
log Z_beta(s0)``, exactly, and

    MEG = sup_beta  beta E_pi[R] - E_s0[ log Z_beta(s0) ].

The scored policy enters only through its mean return; everything else is a property of the
environment: the upper tail of the returns of uniformly random actions. Where surviving is what
the reward pays for (CartPole), long episodes of random actions are rare (for a policy that
always balances, ``Z`` is dominated by the sequences that survive all ``H`` steps, a share
``e^-40`` of them or less at ``H = 500``), so ``Z`` is estimated by splitting: ``n_particles``
copies of the start take uniformly random actions in lockstep, those that terminate leave, and
the survivors are copied back up to the population's size at every step (a sequential Monte
Carlo estimate, unbiased for ``Z`` at every ``beta`` at once). The curve above is concave in
``beta`` (``log Z`` is a log-sum-exp of lines), so its maximum is found by a scan and golden
sections.

This needs a simulator of the environment that steps many states at once and whose dynamics are
known to be deterministic: :func:`~imitation_meg.approx.simulators.dynamics_for` has one for
gymnasium's ``CartPoleEnv`` (its equations of motion, on arrays; every score checks it against
the environment by replaying episodes there). Environments whose goal is a rare early end (Acrobot, MountainCar: random
actions almost never reach the goal) are not covered: splitting on survival does not sample
them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from imitation_meg.approx.curve import CurveInfo, SoftValueCurve, beta_grid, curve_of_populations
from imitation_meg.approx.simulators import Dynamics

__all__ = [
    "MAX_ENUMERATED",
    "EnumeratedPaths",
    "PathSums",
    "curve_from_sums",
    "enumerate_paths",
    "log_partition",
    "split_paths",
]

#: The longest horizon :func:`enumerate_paths` follows (``|A|^H`` sequences at most).
MAX_ENUMERATED = 24
#: Fewest particles that must carry the weight of ``Z`` at the optimum (its effective sample
#: size, summed over the starts' populations) before the estimate counts as settled.
_MIN_ESS = 100.0


# ------------------------------------------------------------------------------ splitting
class PathSums(NamedTuple):
    """What splitting found from each start: the weighted ends of the particles' paths.

    ``Z_beta`` of population ``g`` is ``sum_i exp(log_weight_i + beta * ret_i)`` over the items
    ``i`` with ``group_i == g`` (:func:`log_partition`).

    Attributes:
        group: ``(n,)`` the population of each item (``start * n_split + split``).
        ret: ``(n,)`` the return of the paths the item stands for.
        log_weight: ``(n,)`` ``log`` of their probability mass under uniform actions.
        n_paths: ``(n,)`` the particles the item gathers.
        n_groups: populations (``starts * n_split``).
        extinct: ``(n_groups,)`` populations in which every particle terminated before ``H``.
        steps: particle steps taken.
    """

    group: np.ndarray
    ret: np.ndarray
    log_weight: np.ndarray
    n_paths: np.ndarray
    n_groups: int
    extinct: np.ndarray
    steps: int


def split_paths(
    dyn: Dynamics,
    starts: np.ndarray,
    horizon: int,
    n_particles: int,
    rng: np.random.Generator,
    *,
    n_split: int = 2,
    on_step: Callable[[int], None] | None = None,
) -> PathSums:
    """Estimate ``Z_beta(s0)`` for each start by splitting on survival (module docstring).

    Each start gets ``n_split`` independent populations of ``n_particles // n_split`` particles
    (their disagreement measures the estimate's noise). At each of the ``H`` steps every
    particle takes a uniformly random action; the paths that terminate become items, and the
    survivors are copied back to the population's size (systematic resampling), each now
    standing for ``survivors / size`` of the mass one stood for before. The survivors at ``H``
    are items too.

    Args:
        dyn: the simulator.
        starts: ``(K, d)`` start states.
        horizon: ``H``.
        n_particles: particles per start (at least ``n_split``).
        rng: draws the actions and the resampling.
        n_split: independent populations per start.
        on_step: called with the particles stepped (progress bars).

    Returns:
        :class:`PathSums` with ``K * n_split`` populations.

    Raises:
        ValueError: fewer particles than populations, no start, or a horizon below 1.
    """
    _check_split(n_particles, n_split, len(starts), horizon)
    size = n_particles // n_split
    n_groups = len(starts) * n_split
    group = np.repeat(np.arange(n_groups), size)
    state = np.repeat(np.asarray(starts, dtype=np.float64), n_split * size, axis=0)
    ret = np.zeros(len(group))
    log_mass = np.full(n_groups, -math.log(size))  # each particle's share of the mass
    extinct = np.zeros(n_groups, dtype=bool)
    items: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    steps = 0
    for t in range(1, horizon + 1):
        if len(group) == 0:
            break
        steps += len(group)
        acts = rng.integers(0, dyn.n_actions, size=len(group))
        state, r, term = dyn.step(state, acts)
        ret = ret + r
        if on_step is not None:
            on_step(len(group))
        ended = term if t < horizon else np.ones(len(group), dtype=bool)
        if ended.any():
            items.append(_items(group[ended], ret[ended], log_mass))
        if t == horizon:
            break
        idx, log_mass = _survivors(group, ~ended, log_mass, extinct, size, rng)
        group, state, ret = group[idx], state[idx], ret[idx]
    g, rr, lw, c = (np.concatenate(p) for p in zip(*items, strict=True))
    return PathSums(g, rr, lw, c, n_groups, extinct, steps)


def _check_split(n_particles: int, n_split: int, n_starts: int, horizon: int) -> None:
    """Raise ``ValueError`` for fewer particles than populations, no start, or ``H < 1``."""
    if n_particles < n_split or n_starts == 0 or horizon < 1:
        raise ValueError(
            f"split_paths needs at least n_split={n_split} particles per start, a start and a "
            f"horizon >= 1; got n_particles={n_particles}, {n_starts} starts, "
            f"horizon={horizon}."
        )


def _survivors(
    group: np.ndarray,
    alive: np.ndarray,
    log_mass: np.ndarray,
    extinct: np.ndarray,
    size: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """One resampling step: the indices ``(n_groups * size,)`` at most of the particles (of
    populations ``group (n,)``, ``alive (n,)``) copied back to ``size`` per population, and
    each particle's new share of the mass ``log_mass (n_groups,)``; populations that died out
    now are marked in ``extinct (n_groups,)`` (in place)."""
    n_groups = len(log_mass)
    counts = np.bincount(group[alive], minlength=n_groups)
    extinct |= (counts == 0) & (np.bincount(group, minlength=n_groups) > 0)
    with np.errstate(divide="ignore"):
        log_mass = log_mass + np.log(counts / size)
    keep = np.flatnonzero(alive)
    pick = _systematic(group[keep], counts, size, rng)
    return keep[pick], log_mass


def _items(
    group: np.ndarray, ret: np.ndarray, log_mass: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One item per (population, return) among paths that just ended."""
    keys, counts = np.unique(np.stack([group.astype(np.float64), ret]), axis=1, return_counts=True)
    g = keys[0].astype(np.int64)
    return g, keys[1], log_mass[g] + np.log(counts), counts


def _systematic(
    group: np.ndarray, counts: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Indices into ``group`` (sorted by population) that copy each population back to
    ``size`` particles, each survivor ``size / count`` times up to one (systematic)."""
    order = np.argsort(group, kind="stable")
    live = np.flatnonzero(counts)
    first = np.concatenate([[0], np.cumsum(counts[live])[:-1]])
    u = (np.arange(size)[None, :] + rng.random((len(live), 1))) / size  # (G, size) in [0, 1)
    pick = first[:, None] + np.floor(u * counts[live][:, None]).astype(np.int64)
    return order[pick.ravel()]


def log_partition(sums: PathSums, betas: np.ndarray) -> np.ndarray:
    """``log Z_beta`` ``(n_groups, G)`` of every population at every rationality ``(G,)``
    (``-inf`` for an extinct population)."""
    betas = np.asarray(betas, dtype=np.float64)
    out = np.full((sums.n_groups, len(betas)), -np.inf)
    for k, z, top, _, _ in _tilted(sums, betas):
        out[k] = top + np.log(np.exp(z - top).sum(0))
    return out


def _tilted(
    sums: PathSums, betas: np.ndarray
) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per population ``k`` with items: the exponents ``z = log w + beta R`` of its items
    ``(n_k, G)`` at ``betas (G,)``, their maximum over the items ``(G,)``, and the items'
    returns and particle counts ``(n_k,)``."""
    order = np.argsort(sums.group, kind="stable")
    g, r, w, n = (a[order] for a in (sums.group, sums.ret, sums.log_weight, sums.n_paths))
    bounds = np.searchsorted(g, np.arange(sums.n_groups + 1))
    for k in range(sums.n_groups):
        lo, hi = bounds[k], bounds[k + 1]
        if hi > lo:
            z = w[lo:hi, None] + r[lo:hi, None] * betas[None, :]
            yield k, z, z.max(0), r[lo:hi], n[lo:hi]


class EnumeratedPaths(NamedTuple):
    """Every action sequence from one start, followed to its end (:func:`enumerate_paths`).

    Attributes:
        expected_return: the policy's expected return (NaN when no policy was given).
        ends: ``(n, 2)`` one row per distinct (length, return) end: ``log`` of the probability
            of reaching it with uniformly random actions, and the return.
    """

    expected_return: float
    ends: np.ndarray

    def log_partition(self, betas: np.ndarray) -> np.ndarray:
        """``log Z_beta = log E_uniform[exp(beta R)]`` exactly, ``(G,)`` for ``betas (G,)``."""
        b = np.asarray(betas, dtype=np.float64)
        z = self.ends[:, :1] + self.ends[:, 1:] * b[None, :]  # (n, G)
        return np.logaddexp.reduce(z, axis=0)


def enumerate_paths(
    dyn: Dynamics,
    start: np.ndarray,
    horizon: int,
    probs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> EnumeratedPaths:
    """Follow every action sequence from ``start`` (``(d,)``) to its end or ``horizon``: the
    exact ``Z_beta`` of the start, and with ``probs`` (observations ``(n, ...)`` to ``(n, A)``)
    the policy's exact expected return. An exact reference for the splitting, at horizons where
    the live sequences fit in memory.

    Raises:
        ValueError: a horizon outside ``1 .. MAX_ENUMERATED``, or a start that is not one state.
    """
    states = _checked_enumerable(start, horizon)
    A = dyn.n_actions
    log_pi = np.zeros(1)  # the policy's log-probability of each live sequence
    ret = np.zeros(1)
    expected, mass = 0.0, 0.0
    ends: dict[tuple[int, float], int] = {}
    for t in range(1, horizon + 1):
        if probs is not None:
            with np.errstate(divide="ignore"):
                log_pi = np.repeat(log_pi, A) + np.log(probs(dyn.observe(states))).ravel()
        states = np.repeat(states, A, axis=0)
        ret = np.repeat(ret, A)
        states, r, term = dyn.step(states, np.tile(np.arange(A), len(states) // A))
        ret = ret + r
        ended = term if t < horizon else np.ones(len(ret), dtype=bool)
        if probs is not None:
            weight = np.exp(log_pi[ended])
            expected += float((weight * ret[ended]).sum())
            mass += float(weight.sum())
            log_pi = log_pi[~ended]
        _count_ends(ends, t, ret[ended])
        states, ret = states[~ended], ret[~ended]
    rows = np.array([[math.log(c) - t * math.log(A), v] for (t, v), c in ends.items()])
    # the policy's probabilities of all sequences sum to 1 up to rounding: divided out, so that
    # a constant return is exactly that return
    return EnumeratedPaths(expected / mass if probs is not None else math.nan, rows)


def _checked_enumerable(start: np.ndarray, horizon: int) -> np.ndarray:
    """The start as the one live state ``(1, d)``, float64.

    Raises:
        TypeError: a horizon that is not an integer.
        ValueError: a horizon outside ``1 .. MAX_ENUMERATED``, or a start that is not one state.
    """
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)):
        raise TypeError(f"horizon must be an integer, got {horizon!r}.")
    if not 1 <= horizon <= MAX_ENUMERATED:
        raise ValueError(
            f"horizon must be between 1 and {MAX_ENUMERATED} to follow every action sequence "
            f"(|A|^H of them), got {horizon}."
        )
    states = np.asarray(start, dtype=np.float64)
    if states.ndim != 1:
        raise ValueError(f"start must be one state of shape (d,), got shape {states.shape}.")
    return states[None].copy()


def _count_ends(ends: dict[tuple[int, float], int], t: int, returns: np.ndarray) -> None:
    """Add the sequences that ended after ``t`` decisions with ``returns (n,)`` to ``ends``
    (their count per (length, return), in place)."""
    for value, count in zip(*np.unique(returns, return_counts=True), strict=True):
        ends[(t, float(value))] = ends.get((t, float(value)), 0) + int(count)


# ------------------------------------------------------------------------------ the curve
def _group_curves(sums: PathSums, betas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per population, at every rationality ``(G,)``: ``log Z_beta`` (``-inf`` for none), the
    tilted mean return (the slope of ``log Z``) and the effective sample size of the weights
    ``(sum w)^2 / sum w^2`` over its particles; each ``(n_groups, G)``."""
    G = len(betas)
    log_z = np.full((sums.n_groups, G), -np.inf)
    slope = np.zeros((sums.n_groups, G))
    ess = np.zeros((sums.n_groups, G))
    for k, z, top, r, n in _tilted(sums, betas):
        e = np.exp(z - top)  # an item's weight; its particles share it
        total = e.sum(0)
        log_z[k] = top + np.log(total)
        slope[k] = (e * r[:, None]).sum(0) / total
        ess[k] = total**2 / (e**2 / n[:, None]).sum(0)
    return log_z, slope, ess


def curve_from_sums(sums: PathSums, info: CurveInfo, *, n_split: int = 2) -> SoftValueCurve:
    """The environment's soft-value curve from :func:`split_paths`' sums: per start, ``log`` of
    the mean of its populations' ``Z`` and its slope; the bias allowance half the variance of a
    start's pooled ``log Z`` (the log of an unbiased estimate is low by about that), measured by
    its populations' disagreement; the effective sample size summed over the populations; the
    mean over starts of the lowest and highest returns found (beyond them the curve has no
    limit)."""
    scale = float(max(np.abs(sums.ret).max(initial=0.0), 1e-12))
    betas = beta_grid(scale)
    lz, sl, ess = _group_curves(sums, betas)
    K, G = sums.n_groups // n_split, len(betas)
    lz, sl = lz.reshape(K, n_split, G), sl.reshape(K, n_split, G)
    best = np.full(sums.n_groups, -np.inf)
    np.maximum.at(best, sums.group, sums.ret)
    worst = np.full(sums.n_groups, np.inf)
    np.minimum.at(worst, sums.group, sums.ret)
    problems = []
    if sums.extinct.any():
        problems.append(
            f"{int(sums.extinct.sum())} of {sums.n_groups} particle populations died out "
            "before H (no random action sequence found that goes on)"
        )
    return curve_of_populations(
        betas,
        lz,
        sl,
        info,
        ess=ess.sum(0),
        # the mean over starts of the worst and best returns found (a policy's mean return
        # beyond them lies where the curve has no limit)
        returns_found=(
            float(worst.reshape(K, n_split).min(1).mean()),
            float(best.reshape(K, n_split).max(1).mean()),
        ),
        min_ess=_MIN_ESS,
        problems=tuple(problems),
    )
