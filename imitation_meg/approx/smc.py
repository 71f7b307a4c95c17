"""The soft-value curve of a deterministic environment by twisted sequential Monte Carlo.

In a deterministic environment ``Z_beta(s0) = E_uniform[exp(beta R) | s0]`` and
``Lambda(beta) = E_s0[log Z_beta(s0)]`` (:mod:`imitation_meg.approx.curve`). Where the reward
pays for surviving, splitting on survival samples the rare long episodes
(:mod:`imitation_meg.approx.paths`); where it pays along the way (Pendulum) or for reaching a
goal that random actions almost never reach (MountainCar, Acrobot), the paths that carry ``Z``
at a large ``beta`` are rare for another reason, and this module samples them with a *twist*:

1. **A guess of the soft values.** ``psi_t(s) ~ W_t(s) = log mean_a exp(beta r(s, a) +
   W_{t+1}(s'))`` by soft value iteration on a regular grid over the simulator's state box
   (:class:`StateGrid`: the successors of the grid's points interpolated multilinearly, angles
   periodic; Box actions through Gauss-Legendre nodes), at a ladder of rationalities.
2. **Twisted SMC at each rationality of the ladder.** ``n_particles`` copies of each start (two
   independent populations) look one step ahead: every action (or ``candidates`` uniform draws
   from the box) is tried on the simulator, the particle moves to one with probability
   ``proportional to exp(beta r + psi_{t+1}(s'))`` and its weight is multiplied by
   ``mean_a exp(beta r + psi_{t+1}(s')) / exp(psi_t(s))``; populations are resampled when
   their weights degenerate. For every twist ``psi`` the product of the weights' means is an
   unbiased estimate of ``Z_beta(s0)``; the better ``psi``, the smaller its variance (with the
   exact soft values every weight is 1). So the grid's error costs variance, not bias, and the
   two populations' disagreement measures it. Each rung also runs with no twist (the
   look-ahead sees the next reward only) and keeps the run whose estimate is the larger: an
   unbiased estimate falls short where its proposal missed paths, or where its weights spread
   (a grid's errors weigh ``beta`` times at a large ``beta``).
3. **The curve between the rungs.** A rung's weighted paths give ``Z`` at any nearby ``beta``
   by reweighting with ``exp((beta' - beta) R)``; each point of the curve's grid takes the rung
   whose reweighted sample is the largest (effective sample size).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse

from imitation_meg.approx.curve import CurveInfo, SoftValueCurve, beta_grid, curve_of_populations

__all__ = [
    "FlatTwist",
    "GridTwist",
    "SMCSums",
    "StateGrid",
    "curve_from_smc",
    "grid_twist",
    "look_aheads",
    "particles_for",
    "smc_curve",
    "state_grid",
    "twisted_smc",
]

#: Most time slices of a twist kept (the others interpolated linearly in time).
_MAX_SLICES = 64
#: Gauss-Legendre nodes per dimension of a Box for the grid's soft value iteration.
_BOX_NODES = 8
#: Uniform candidate actions per particle and step in a Box (the SMC's one-step look-ahead).
_CANDIDATES = 8
#: Resample a population when its effective sample size falls below this share of its size.
_RESAMPLE_AT = 0.5
#: Look-ahead steps per rung that set the default particles (:func:`particles_for`).
RUNG_BUDGET = 2_000_000
#: Rungs a curve is costed at before it runs (the first ladder has 13; refinement adds some).
CURVE_RUNGS = 16
#: Particles per start and rung below which :func:`particles_for` does not go.
MIN_PARTICLES = 8
#: Points of the twist's grid over the state box.
_CELLS = 10_000
#: Rungs added by one round of refinement, at most.
_MAX_NEW = 8
#: Rungs a curve may add beyond its ladder to reach a policy's return (``target``).
_EXTEND = 6
#: Random paths, and their steps, that find the reward's unit without a state grid.
_UNIT_PATHS, _UNIT_STEPS = 64, 64


# ------------------------------------------------------------------------------ the grid
class StateGrid:
    """A regular grid over a box of states, with multilinear interpolation.

    Args:
        low, high: ``(d,)`` the box (for a periodic dimension, one period ``[low, high)``).
        periodic: ``(d,)`` which dimensions wrap around (angles).
        shape: ``(d,)`` points per dimension (at least 2).
    """

    def __init__(self, low: Any, high: Any, periodic: Any, shape: Any) -> None:
        self.low = np.asarray(low, dtype=np.float64)
        self.high = np.asarray(high, dtype=np.float64)
        self.periodic = np.asarray(periodic, dtype=bool)
        self.shape = tuple(int(n) for n in shape)
        d = len(self.shape)
        if (
            not (self.low.shape == self.high.shape == self.periodic.shape == (d,))
            or min(self.shape) < 2
        ):
            raise ValueError(
                f"a state grid needs (d,) bounds and >= 2 points a dimension, got {shape}."
            )
        span = self.high - self.low
        self.step = np.where(self.periodic, span / self.shape, span / (np.array(self.shape) - 1))
        self.strides = np.cumprod((1, *self.shape[:0:-1]))[::-1].astype(np.int64)
        self.size = int(np.prod(self.shape))

    def points(self) -> np.ndarray:
        """``(C, d)`` every grid point, in the order of the flat index."""
        axes = [self.low[i] + self.step[i] * np.arange(n) for i, n in enumerate(self.shape)]
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def corners(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``2^d`` grid points around each of ``x (n, d)`` and their interpolation
        weights, each ``(n, 2^d)`` (outside the box: the nearest face)."""
        u = (np.asarray(x, dtype=np.float64) - self.low) / self.step
        n_pts = np.array(self.shape)
        u = np.where(self.periodic, np.mod(u, n_pts), np.clip(u, 0.0, n_pts - 1.0))
        i0 = np.floor(u).astype(np.int64)
        i0 = np.where(self.periodic, i0 % n_pts, np.minimum(i0, n_pts - 2))
        f = u - i0
        i1 = np.where(self.periodic, (i0 + 1) % n_pts, i0 + 1)
        d = len(self.shape)
        idx = np.zeros((len(u), 2**d), dtype=np.int64)
        w = np.ones((len(u), 2**d))
        for c in range(2**d):
            for k in range(d):
                up = (c >> k) & 1
                idx[:, c] += (i1[:, k] if up else i0[:, k]) * self.strides[k]
                w[:, c] *= f[:, k] if up else 1.0 - f[:, k]
        return idx, w

    def operator(self, x: np.ndarray) -> scipy.sparse.csr_matrix:
        """The interpolation ``(n, C)`` of grid values at ``x (n, d)``."""
        idx, w = self.corners(x)
        n, m = idx.shape
        rows = np.repeat(np.arange(n), m)
        return scipy.sparse.csr_matrix((w.ravel(), (rows, idx.ravel())), shape=(n, self.size))


def state_grid(dyn: Any, cells: int) -> StateGrid:
    """A grid of about ``cells`` points over the states of a simulator that declares its box
    (``dyn.state_box() -> (low, high, periodic)``), the same number of points a dimension
    except where the box says otherwise.

    Raises:
        ValueError: a simulator without a state box.
    """
    box = getattr(dyn, "state_box", None)
    if box is None:
        raise ValueError(f"the simulator of {dyn.name} declares no state box for a twist grid.")
    low, high, periodic = box()
    d = len(low)
    n = max(2, round(cells ** (1.0 / d)))
    return StateGrid(low, high, periodic, (n,) * d)


# ------------------------------------------------------------------------------ the twist
def _box_nodes(actions: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes ``(m, k)`` of a box and their weights ``(m,)`` (summing to 1: the
    mean over the box), a tensor product over its dimensions."""
    x, w = np.polynomial.legendre.leggauss(n)
    x, w = (x + 1.0) / 2.0, w / 2.0
    grids = np.meshgrid(*([x] * actions.dim), indexing="ij")
    wgrid = np.meshgrid(*([w] * actions.dim), indexing="ij")
    nodes = np.stack([g.ravel() for g in grids], axis=1)
    weights = np.prod(np.stack([g.ravel() for g in wgrid], axis=1), axis=1)
    return actions.low + (actions.high - actions.low) * nodes, weights


class GridTwist:
    """``psi_t(s)`` at a ladder of rationalities, from soft value iteration on a grid.

    Attributes:
        grid: the :class:`StateGrid`.
        betas: ``(L,)`` the ladder.
        times: ``(m,)`` the decision times whose values are kept (others interpolated).
        values: ``(m, C, L)`` float32 ``psi`` at those times.
        horizon: ``H`` (``psi_H = 0``).
    """

    def __init__(
        self,
        grid: StateGrid,
        betas: np.ndarray,
        times: np.ndarray,
        values: np.ndarray,
        horizon: int,
    ) -> None:
        self.grid, self.betas, self.times, self.values = grid, betas, times, values
        self.horizon = int(horizon)

    def at(self, t: int, x: np.ndarray, rung: np.ndarray) -> np.ndarray:
        """``psi_t`` at states ``x (n, d)``, each at its own rung ``(n,)``; 0 at ``t = H``."""
        if t >= self.horizon:
            return np.zeros(len(x))
        j = int(np.searchsorted(self.times, t, side="right")) - 1
        j = min(max(j, 0), len(self.times) - 1)
        idx, w = self.grid.corners(x)
        v0 = (self.values[j][idx, rung[:, None]] * w).sum(1)
        if j + 1 < len(self.times) and self.times[j] != t:
            t0, t1 = self.times[j], self.times[j + 1]
            v1 = (self.values[j + 1][idx, rung[:, None]] * w).sum(1)
            a = (t - t0) / (t1 - t0)
            return (1.0 - a) * v0 + a * v1
        return v0


class FlatTwist:
    """No twist (``psi = 0``) at a ladder of rationalities ``betas (L,)``: the SMC of a
    simulator without a state box, whose look-ahead sees the next reward only."""

    def __init__(self, betas: np.ndarray) -> None:
        self.betas = np.asarray(betas, dtype=np.float64)

    def at(self, t: int, x: np.ndarray, rung: np.ndarray) -> np.ndarray:
        """0 at states ``x (n, d)``."""
        return np.zeros(len(x))


def grid_twist(
    dyn: Any,
    grid: StateGrid,
    horizon: int,
    betas: np.ndarray,
    *,
    box_nodes: int = _BOX_NODES,
) -> GridTwist:
    """Soft value iteration on ``grid`` for every rationality of ``betas (L,)``: the grid's
    points' successors under every action (Box: Gauss-Legendre nodes) interpolated, terminal
    successors worth 0, ``psi_H = 0``; :data:`_MAX_SLICES` time slices kept."""
    pts = grid.points()
    C = len(pts)
    if dyn.actions.is_box:
        acts, aw = _box_nodes(dyn.actions, box_nodes)
    else:
        acts, aw = np.arange(dyn.n_actions), np.full(dyn.n_actions, 1.0 / dyn.n_actions)
    A = len(acts)
    rep = np.repeat(pts, A, axis=0)
    act = np.tile(acts, (C, 1)) if acts.ndim == 2 else np.tile(acts, C)
    nxt, r, term = dyn.step(rep, act)
    P = grid.operator(nxt)  # (C A, C)
    live = (~np.asarray(term, dtype=bool)).reshape(C, A, 1)
    r = np.asarray(r, dtype=np.float64).reshape(C, A, 1)
    logw = np.log(aw)[None, :, None]
    b = np.asarray(betas, dtype=np.float64)[None, None, :]
    every = max(1, -(-horizon // _MAX_SLICES))
    keep = sorted(set(range(0, horizon, every)) | set(range(max(0, horizon - 8), horizon)))
    store: dict[int, np.ndarray] = {}
    psi = np.zeros((C, len(betas)))
    for t in range(horizon - 1, -1, -1):
        nxt_v = (P @ psi).reshape(C, A, len(betas))
        g = b * r + np.where(live, nxt_v, 0.0) + logw
        top = g.max(1)
        psi = top + np.log(np.exp(g - top[:, None, :]).sum(1))
        if t in keep:
            store[t] = psi.astype(np.float32)
    times = np.array(sorted(store))
    return GridTwist(grid, np.asarray(betas), times, np.stack([store[t] for t in times]), horizon)


# ------------------------------------------------------------------------------ the SMC
class SMCSums:
    """What twisted SMC found: per population (rung, start, population), ``log Z`` at its
    rung and its final weighted paths.

    Attributes:
        betas: ``(L,)`` the rungs.
        n_starts, n_split: starts, and populations per start and rung.
        log_z: ``(L, K, n_split)`` each population's ``log Z`` estimate at its rung.
        ret: ``(L, K, n_split, P)`` each final particle's return.
        log_w: ``(L, K, n_split, P)`` its normalised log weight within its population.
        steps: simulator steps taken (look-ahead included).
    """

    def __init__(
        self,
        betas: np.ndarray,
        log_z: np.ndarray,
        ret: np.ndarray,
        log_w: np.ndarray,
        steps: int,
    ) -> None:
        self.betas, self.log_z, self.ret, self.log_w, self.steps = betas, log_z, ret, log_w, steps
        _L, K, S, _ = ret.shape
        self.n_starts, self.n_split = K, S


def twisted_smc(
    dyn: Any,
    starts: np.ndarray,
    horizon: int,
    twist: GridTwist | FlatTwist,
    n_particles: int,
    rng: np.random.Generator,
    *,
    flat: bool = False,
    n_split: int = 2,
    candidates: int = _CANDIDATES,
    on_step: Callable[[int], None] | None = None,
) -> SMCSums:
    """Twisted SMC (module docstring) from each start ``(K, d)`` at every rung of ``twist``,
    ``n_split`` independent populations of ``n_particles // n_split`` particles each; with
    ``flat`` the twist is 0 (the look-ahead sees the next reward only).

    Raises:
        ValueError: fewer particles than populations, no start, or a horizon below 1.
    """
    if n_particles < 2 * n_split or len(starts) == 0 or horizon < 1:
        raise ValueError(
            f"twisted SMC needs at least 2 particles per population, a start and a horizon >= "
            f"1; got n_particles={n_particles}, {len(starts)} starts, horizon={horizon}."
        )
    betas = twist.betas
    L, K, P = len(betas), len(starts), n_particles // n_split
    G = L * K * n_split
    rung = np.repeat(np.arange(L), K * n_split * P)
    start = np.tile(np.repeat(np.arange(K), n_split * P), L)
    group = np.repeat(np.arange(G), P)
    x = np.asarray(starts, dtype=np.float64)[start]
    beta = betas[rung]
    ret = np.zeros(len(x))
    live = np.ones(len(x), dtype=bool)
    log_w = np.zeros(len(x))

    def psi(t: int, states: np.ndarray, which: np.ndarray) -> np.ndarray:
        return np.zeros(len(states)) if flat else twist.at(t, states, which)

    log_z = psi(0, x, rung).reshape(G, P)[:, 0].astype(np.float64)
    box = dyn.actions.is_box
    steps = 0
    psi_now = psi(0, x, rung)
    for t in range(horizon):
        idx = np.flatnonzero(live)
        if len(idx) == 0:
            break
        n = len(idx)
        m = candidates if box else dyn.n_actions
        rep = np.repeat(x[idx], m, axis=0)
        if box:
            acts = dyn.actions.sample(rng, n * m)
        else:
            acts = np.tile(np.arange(m), n)
        nxt, r, term = dyn.step(rep, acts)
        steps += n * m
        r = np.asarray(r, dtype=np.float64)
        term = np.asarray(term, dtype=bool)
        psi_next = np.where(term, 0.0, psi(t + 1, nxt, np.repeat(rung[idx], m)))
        g = (np.repeat(beta[idx], m) * r + psi_next).reshape(n, m)
        top = g.max(1)
        e = np.exp(g - top[:, None])
        total = e.sum(1)
        log_w[idx] += top + np.log(total / m) - psi_now[idx]
        # move each particle to one look-ahead, with probability proportional to exp(g)
        u = rng.random(n) * total
        pick = np.minimum((np.cumsum(e, axis=1) < u[:, None]).sum(1), m - 1)
        chosen = np.arange(n) * m + pick
        x[idx] = nxt[chosen]
        ret[idx] += r[chosen]
        ended = term[chosen]
        live[idx[ended]] = False
        psi_now[idx] = psi_next[chosen]
        if on_step is not None:
            on_step(n * m)
        if t + 1 < horizon:
            log_z += _resample(group, G, P, log_w, rng, (x, ret, live, psi_now))
    lw = log_w.reshape(G, P)
    top = lw.max(1)
    log_z += top + np.log(np.exp(lw - top[:, None]).mean(1))
    norm = lw - (top + np.log(np.exp(lw - top[:, None]).sum(1)))[:, None]
    shape = (L, K, n_split, P)
    return SMCSums(
        betas, log_z.reshape(L, K, n_split), ret.reshape(shape), norm.reshape(shape), steps
    )


def _resample(
    group: np.ndarray,
    G: int,
    P: int,
    log_w: np.ndarray,
    rng: np.random.Generator,
    arrays: tuple[np.ndarray, ...],
) -> np.ndarray:
    """Resample (systematic) the populations whose weights degenerated; their weights become
    equal and the log of their mean goes to ``log Z``. Returns each population's ``log Z``
    increment ``(G,)`` (0 where not resampled)."""
    lw = log_w.reshape(G, P)
    top = lw.max(1)
    w = np.exp(lw - top[:, None])
    s = w.sum(1)
    ess = s**2 / (w**2).sum(1)
    due = ess < _RESAMPLE_AT * P
    inc = np.zeros(G)
    if not due.any():
        return inc
    gs = np.flatnonzero(due)
    inc[gs] = top[gs] + np.log(s[gs] / P)
    cdf = np.cumsum(w[gs], axis=1) / s[gs, None]
    u = (np.arange(P)[None, :] + rng.random((len(gs), 1))) / P
    # searchsorted row by row in one call: each row shifted by its index (cdf in [0, 1])
    rows = np.arange(len(gs))[:, None]
    pick = np.searchsorted((cdf + rows).ravel(), (u + rows).ravel()).reshape(len(gs), P)
    pick = np.minimum(pick - rows * P, P - 1)
    src = (gs[:, None] * P + pick).ravel()
    dst = (gs[:, None] * P + np.arange(P)[None, :]).ravel()
    for a in arrays:
        a[dst] = a[src]
    log_w[dst] = 0.0
    return inc


# ------------------------------------------------------------------------------ the curve
def _reweighted(sums: SMCSums, rung: int, betas: np.ndarray) -> tuple[np.ndarray, ...]:
    """Rung ``rung``'s paths reweighted to ``betas (G,)``: per start and population ``log Z``
    and the mean return ``(K, S, G)``, and the effective sample size summed ``(G,)``."""
    d = betas[None, None, :, None] - sums.betas[rung]
    z = sums.log_w[rung][:, :, None, :] + d * sums.ret[rung][:, :, None, :]  # (K, S, G, P)
    top = z.max(-1)
    e = np.exp(z - top[..., None])
    tot = e.sum(-1)
    lz = sums.log_z[rung][:, :, None] + top + np.log(tot)
    slope = (e * sums.ret[rung][:, :, None, :]).sum(-1) / tot
    ess = (tot**2 / (e**2).sum(-1)).sum((0, 1))
    return lz, slope, ess


def curve_from_smc(sums: SMCSums, info: CurveInfo, *, min_ess: float = 100.0) -> SoftValueCurve:
    """The curve on :func:`~imitation_meg.approx.curve.beta_grid`: a point between two rungs
    takes whichever of the two gives the larger reweighted sample (beyond the last rung, the
    last rung), per start and population; the populations pooled per start; the bias allowance
    half the variance of a start's pooled ``log Z`` (from the populations' disagreement)."""
    L = sums.ret.shape[0]
    scale = float(max(np.abs(sums.ret).max(initial=0.0), 1e-12))
    betas = beta_grid(scale)
    order = np.argsort(sums.betas)
    rungs = sums.betas[order]
    # the rungs below and above each grid point (the same one beyond the ends)
    above = np.clip(np.searchsorted(rungs, betas), 0, L - 1)
    below = np.clip(above - 1, 0, L - 1)
    below = np.where(rungs[above] == betas, above, below)
    parts = [_reweighted(sums, int(order[i]), betas) for i in range(L)]
    cols = np.arange(len(betas))
    ess_all = np.stack([p[2] for p in parts])  # (L, G)
    lam_all = np.stack([p[0].mean((0, 1)) for p in parts])  # (L, G)
    # each rung's reweighting is unbiased for Z but misses what its paths never reached: of the
    # two rungs around a point, the one that sees more of Z
    choice = np.where(lam_all[above, cols] > lam_all[below, cols], above, below)
    lz = np.stack([p[0] for p in parts])[choice, :, :, cols]  # (G, K, S)
    sl = np.stack([p[1] for p in parts])[choice, :, :, cols]
    lz, sl = np.moveaxis(lz, 0, -1), np.moveaxis(sl, 0, -1)
    ess_out = ess_all[choice, cols]
    return curve_of_populations(
        betas, lz, sl, info, ess=ess_out, returns_found=_found(sums), min_ess=min_ess
    )


def _gaps(sums: SMCSums, share: float, tol: float) -> list[float]:
    """Geometric midpoints of neighbouring rungs (of one sign) where the two rungs' reweighted
    estimates of ``Lambda`` differ by more than ``tol`` nats (plus 3 times their noise), or
    neither keeps ``share`` of its particles: the curve needs a rung there. The worst first."""
    order = np.argsort(sums.betas)
    rungs = sums.betas[order]
    K, S, P = sums.ret.shape[1:]
    need: list[tuple[float, float]] = []
    for i in range(len(rungs) - 1):
        lo, hi = float(rungs[i]), float(rungs[i + 1])
        if lo * hi <= 0:  # across 0: the zero rung is exact
            continue
        mid = math.copysign(math.sqrt(lo * hi), lo)
        both = [_reweighted(sums, int(order[j]), np.array([mid])) for j in (i, i + 1)]
        ess = max(float(b[2][0]) for b in both)
        lam = [float(b[0].mean()) for b in both]
        # the populations' disagreement at each rung: the noise of the two estimates
        noise = sum(float(sums.log_z[int(order[j])].var(1, ddof=1).mean()) / K for j in (i, i + 1))
        gap = abs(lam[0] - lam[1]) - tol - 3.0 * math.sqrt(noise)
        if ess < share * K * S * P or gap > 0:
            need.append((max(gap, 0.0) + (ess < share * K * S * P), mid))
    return [mid for _, mid in sorted(need, reverse=True)]


def _larger(a: SMCSums, b: SMCSums) -> SMCSums:
    """At each rung, the run (of two from the same starts) whose estimate of ``Lambda`` (its
    mean ``log Z``) is the larger. Both are unbiased for every start's ``Z``; what one misses
    (paths its proposal never reached) makes it small, and where the twist misleads (it is a
    grid's guess: at a large ``beta`` its errors weigh ``beta`` times) its weights' spread makes
    it small too, so the larger one is the one that found more of ``Z``."""
    pick = a.log_z.mean((1, 2)) >= b.log_z.mean((1, 2))  # (L,)
    sel = pick[:, None, None]
    return SMCSums(
        a.betas,
        np.where(sel, a.log_z, b.log_z),
        np.where(sel[..., None], a.ret, b.ret),
        np.where(sel[..., None], a.log_w, b.log_w),
        a.steps + b.steps,
    )


def _found(sums: SMCSums) -> tuple[float, float]:
    """The lowest and highest returns the paths found, each start's over all rungs, averaged
    over the starts (what :class:`SoftValueCurve`'s ``returns_found`` holds)."""
    per_start = np.moveaxis(sums.ret, 1, 0).reshape(sums.n_starts, -1)
    return float(per_start.min(1).mean()), float(per_start.max(1).mean())


def _merge(a: SMCSums, b: SMCSums) -> SMCSums:
    """Two SMC runs' rungs as one (the same starts, populations and particles)."""
    return SMCSums(
        np.concatenate([a.betas, b.betas]),
        np.concatenate([a.log_z, b.log_z]),
        np.concatenate([a.ret, b.ret]),
        np.concatenate([a.log_w, b.log_w]),
        a.steps + b.steps,
    )


def reward_unit(
    dyn: Any, grid: StateGrid | None, rng: np.random.Generator, starts: np.ndarray
) -> float:
    """The largest ``|r|`` of random actions at random grid points, or (a simulator without a
    state box) along :data:`_UNIT_PATHS` random paths of :data:`_UNIT_STEPS` steps from the
    starts ``(K, d)``: the unit of the rungs."""
    if grid is not None:
        pts = grid.points()
        pick = pts[rng.integers(0, len(pts), size=4096)]
        acts = dyn.actions.sample(rng, len(pick))
        _, r, _ = dyn.step(pick, acts)
        return float(max(np.abs(np.asarray(r)).max(initial=0.0), 1e-12))
    x = np.asarray(starts, dtype=np.float64)[rng.integers(0, len(starts), size=_UNIT_PATHS)]
    top = 0.0
    for _ in range(_UNIT_STEPS):
        x, r, term = dyn.step(x, dyn.actions.sample(rng, len(x)))
        top = max(top, float(np.abs(np.asarray(r, dtype=np.float64)).max(initial=0.0)))
        x = x[~np.asarray(term, dtype=bool)]
        if len(x) == 0:
            break
    return max(top, 1e-12)


def look_aheads(dyn: Any) -> int:
    """The simulator steps one particle tries per step: every action, or for a box
    ``_CANDIDATES`` (8) uniform draws."""
    return _CANDIDATES if dyn.actions.is_box else int(dyn.n_actions)


def particles_for(dyn: Any, n_starts: int, horizon: int) -> int:
    """Particles per start and rung by the budget: about :data:`RUNG_BUDGET` look-ahead steps
    per rung (``n_starts x particles x horizon x look-aheads``; a simulator may declare its
    own ``rung_budget``, a slow one a smaller), between 8 and 512, even."""
    m = look_aheads(dyn)
    p = getattr(dyn, "rung_budget", RUNG_BUDGET) / max(1, n_starts * horizon * m)
    return int(min(512, max(MIN_PARTICLES, 2 * round(p / 2))))


def smc_curve(
    dyn: Any,
    starts: np.ndarray,
    horizon: int,
    n_particles: int | None,
    rng: np.random.Generator,
    info: CurveInfo,
    *,
    cells: int = _CELLS,
    rounds: int = 4,
    target: float | None = None,
    on_step: Callable[[int], None] | None = None,
) -> SoftValueCurve:
    """The curve of a simulated deterministic environment (module docstring); a simulator
    without a state box runs the SMC without a twist (the look-ahead sees the next reward).

    Rungs ``0``, ``4^k / unit`` for ``k = -5 .. 3`` and ``-4^k / unit`` for ``k = -1, 1, 3``
    (``unit`` the largest ``|r|`` seen); then, up to 4 times, a rung 4 times above the top one
    while the top one's slope falls short of the highest returns found by more than 1% of their
    range; then, ``rounds`` times, a rung between any two whose reweighted estimates disagree
    (at most :data:`_MAX_NEW` a round, the worst first). Each rung: a grid twist and twisted
    SMC from ``starts`` with ``n_particles`` per start (default :func:`particles_for`).

    ``target``: a policy's mean return the curve must reach: the ladder climbs (or descends,
    for a return below what random actions find) up to :data:`_EXTEND` rungs more until the
    returns its paths found, on the mean over the starts, reach it (a curve that extends itself
    for an agent better than anything it found).
    """
    grid = state_grid(dyn, cells) if hasattr(dyn, "state_box") else None
    unit = reward_unit(dyn, grid, rng, starts)
    P = n_particles or particles_for(dyn, len(starts), horizon)

    def run(ladder: np.ndarray) -> SMCSums:
        if grid is None:  # no grid for a twist: the look-ahead sees the next reward only
            none = FlatTwist(ladder)
            return twisted_smc(dyn, starts, horizon, none, P, rng, flat=True, on_step=on_step)
        twist = grid_twist(dyn, grid, horizon, ladder)
        both = [
            twisted_smc(dyn, starts, horizon, twist, P, rng, flat=flat, on_step=on_step)
            for flat in (False, True)
        ]
        return _larger(*both)

    ups = 4.0 ** np.arange(-5, 4) / unit
    downs = -(4.0 ** np.array([3, 1, -1])) / unit
    sums = run(np.concatenate([downs, [0.0], ups]))
    for _ in range(4 + (_EXTEND if target is not None else 0)):
        top = int(np.argmax(sums.betas))
        rise = float(sums.ret[top].max(-1).mean()) - float(
            (np.exp(sums.log_w[top]) * sums.ret[top]).sum(-1).mean()
        )
        span = float(sums.ret.max(-1).mean((1, 2)).max() - sums.ret[sums.betas == 0].mean())
        settled = span <= 1e-9 * unit or rise <= 0.01 * span
        if settled and (target is None or _found(sums)[1] >= target):
            break
        sums = _merge(sums, run(np.array([4.0 * sums.betas[top]])))
    for _ in range(_EXTEND if target is not None else 0):
        if _found(sums)[0] <= target:  # type: ignore[operator]
            break
        low = int(np.argmin(sums.betas))
        sums = _merge(sums, run(np.array([4.0 * sums.betas[low]])))
    for _ in range(rounds):
        gaps = _gaps(sums, 0.3, 0.05)
        if not gaps:
            break
        sums = _merge(sums, run(np.array(gaps[:_MAX_NEW])))
    curve = curve_from_smc(sums, info)
    curve.info.settings["n_particles"] = P
    curve.particle_steps = sums.steps  # type: ignore[attr-defined]
    curve.rungs = np.sort(sums.betas)  # type: ignore[attr-defined]
    return curve
