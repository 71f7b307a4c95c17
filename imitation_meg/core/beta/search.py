"""The search of the 1-D solve in beta: its state and the two strategies.

:class:`Solver` holds the objective, the bracket and the points evaluated; :func:`newton` (one
beta per pass, large MDPs) and :func:`grid` / :func:`refine` (batched passes, small MDPs) move
the bracket to the root of ``f = sign * dL/dbeta``. :mod:`imitation_meg.core.beta.solver` runs them and
compares the result with the limits at ``beta = +-inf``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch as th

from imitation_meg.core.beta.hermite import (
    cubic_hermite,
    hermite_root,
    hermite_secant,
    quintic_hermite,
    tangents,
)
from imitation_meg.core.beta.protocol import BetaObjective, BetaSolution, LimitValue

__all__ = [
    "MAX_DECADES",
    "RTOL",
    "SATURATED_X",
    "Bracket",
    "Point",
    "Solver",
    "grid",
    "newton",
    "refine",
]

# Grid and stopping settings of the 1-D solver.
_GRID_AROUND = (-0.8, 0.8)  # first grid: x0 * 10**-0.8 .. x0 * 10**0.8 around the Newton step at 0
MAX_DECADES = 15.0  # extend the grid up to beta * scale = 1e15
# beta * scale beyond which a soft policy counts as saturated (its limit reached to rounding).
SATURATED_X = 1e6
RTOL = 1e-11  # the root's relative tolerance for float64 objectives
# A refinement pass evaluates only the Hermite root once the bracket is this narrow (relative).
_SINGLE_PROBE_REL = 1e-3


@dataclasses.dataclass
class Point:
    """One evaluated beta (or a Taylor estimate at the root)."""

    beta: float
    L: float
    dL: float
    model_eu: float
    d2L: float
    dmodel_eu: float = math.nan
    light: bool = False  # d2L interpolated (a pass without second derivatives)


@dataclasses.dataclass
class Bracket:
    """``[lo, hi]`` in ``x`` with ``f(lo) > 0 >= f(hi)``, with ``f`` and ``f'`` at both ends."""

    lo: float
    f_lo: float
    fp_lo: float
    hi: float = math.inf
    f_hi: float = math.nan
    fp_hi: float = math.nan


@dataclasses.dataclass
class Solver:
    """The solve's state: the objective, the bracket, the best and flattest points seen."""

    obj: BetaObjective
    sign: float
    d_tol: float  # |dL| below which a point counts as a root
    rtol: float  # relative tolerance on the root (1e-11, looser for low-precision objectives)
    n: int  # betas per pass
    x_max: float
    best: Point  # the largest L seen
    flat: Point  # the smallest |dL| seen (the root estimate)
    bracket: Bracket
    zero: Point  # beta = 0 (the uniform model)
    converged: bool = False
    evaluations: int = 1  # the beta = 0 pass
    passes: int = 1
    recent: list[tuple[float, float, float]] = dataclasses.field(default_factory=list)
    points: dict[float, Point] = dataclasses.field(default_factory=dict)  # by x
    estimate: Point | None = None  # the root from a last estimate, without a confirming pass
    _limit: LimitValue | None = None

    def run(self, xs: list[float], light: bool = False) -> list[tuple[float, float, float, float]]:
        """Evaluate ``x`` values in one batched pass; update the bracket and the points.

        ``light``: a pass without second derivatives (inside a finite bracket); ``f'`` at each
        point is then interpolated from the bracket's ends (it only scales the Newton decrement).

        Returns:
            ``(x, f(x), f'(x), L(x))`` for each distinct ``x``, in increasing order.
        """
        br, sign = self.bracket, self.sign
        xs = sorted(set(xs))
        pts = th.tensor([sign * x for x in xs], dtype=th.float64)
        ev = self.obj.evaluate_batch(pts, second=not light)
        self.evaluations += len(xs)
        self.passes += 1
        Lp, dLp, d2Lp, eup = (v.tolist() for v in ev[:4])
        deus = ev.dmodel_eu.tolist() if ev.dmodel_eu is not None else [math.nan] * len(xs)
        out = []
        for j, x in enumerate(xs):
            d2j = d2Lp[j]
            if light:
                d2j = br.fp_lo + (br.fp_hi - br.fp_lo) * (x - br.lo) / (br.hi - br.lo)
            pt = Point(sign * x, Lp[j], dLp[j], eup[j], d2j, math.nan if light else deus[j], light)
            fj = self._record(x, pt)
            out.append((x, fj, d2j, pt.L))
            if not light:
                self.recent = [*self.recent[-1:], (x, fj, d2j)]
        return out

    def _record(self, x: float, pt: Point) -> float:
        """Keep the point evaluated at ``x``: the best and flattest points, convergence and the
        bracket's ends follow it. Returns ``f(x) = sign * dL``."""
        br = self.bracket
        self.points[x] = pt
        if pt.L > self.best.L:
            self.best = pt
        if abs(pt.dL) < abs(self.flat.dL):
            self.flat = pt
        fj = self.sign * pt.dL
        if abs(pt.dL) <= self.d_tol:
            self.converged = True
        if fj > 0 and x > br.lo:
            br.lo, br.f_lo, br.fp_lo = x, fj, pt.d2L
        elif fj <= 0 and x < br.hi:
            br.hi, br.f_hi, br.fp_hi = x, fj, pt.d2L
        return fj

    def settle(self, x_root: float, xs: tuple[float, ...]) -> bool:
        """Report ``x_root`` (two estimates of the root agree) without a confirming pass.

        From evaluated points around it (``xs``, with the model's expected-utility derivative):
        with two points ``a < x_root < b``, ``L`` by quintic Hermite interpolation (``L``,
        ``dL``, ``d2L`` at both ends; error ~ width**6) and the expected utility by cubic
        Hermite interpolation (error ~ width**4); with one point, Taylor steps (``L`` to third
        order with ``d2L``'s slope between the newest points). Returns whether it did.
        """
        pts = [self.points[x] for x in xs if x in self.points]
        pts = [
            p for p in pts if math.isfinite(p.dmodel_eu) and math.isfinite(p.d2L) and not p.light
        ]
        estimate = self._interpolate(pts, self.sign * x_root)
        if estimate is None:
            return False
        self.estimate = estimate
        self.converged = True
        return True

    def _interpolate(self, pts: list[Point], b: float) -> Point | None:
        """The point at ``b`` from the nearest evaluated points on either side of it (Hermite
        interpolation), else from the nearest one (Taylor steps); None without points."""
        lo = [p for p in pts if (p.beta - b) * self.sign <= 0]
        hi = [p for p in pts if (p.beta - b) * self.sign > 0]
        if lo and hi:
            pa = max(lo, key=lambda p: self.sign * p.beta)
            pb = min(hi, key=lambda p: self.sign * p.beta)
            return _hermite_point(pb, pa, b) if pa.beta > pb.beta else _hermite_point(pa, pb, b)
        if pts:
            p = min(pts, key=lambda q: abs(q.beta - b))
            return _taylor_point(p, b, self.curvature_slope())
        return None

    def settle_light(self, x: float, fp: float) -> bool:
        """After a pass without second derivatives at ``x``: when the Newton step from it (with
        ``f'`` interpolated over the bracket) is below ``1e-9`` relative and its error (the
        step times the interpolation's relative error) below ``rtol``, report it (``L``
        to second order, the expected utility to first order with the slope of the nearest
        point that has it)."""
        p = self.points.get(x)
        br = self.bracket
        if p is None or not fp < 0 or not (br.fp_lo < 0 and br.fp_hi < 0):
            return False
        dx = -self.sign * p.dL / fp  # the Newton step in x
        # The interpolated f' is off by at most the spread of f' over the bracket.
        spread = abs(br.fp_hi - br.fp_lo) / min(abs(br.fp_lo), abs(br.fp_hi))
        if abs(dx) * (spread + abs(dx) / x) > self.rtol * x or abs(dx) > max(1e-9, self.rtol) * x:
            return False
        db = self.sign * dx
        # The expected utility's slope from the nearest point that has it.
        full = [q for q in self.points.values() if math.isfinite(q.dmodel_eu)]
        slope = min(full, key=lambda q: abs(q.beta - p.beta)).dmodel_eu if full else 0.0
        eu = p.model_eu + slope * db
        self.estimate = Point(p.beta + db, p.L + 0.5 * p.dL * db, 0.0, eu, fp, slope)
        self.converged = True
        return True

    def newton_error(self, dec: float) -> float:
        """The predicted error of the Newton step of length ``dec`` from the newest point,
        ``|f''| / (2 |f'|) dec^2`` (times 10 for safety), with ``f''`` from the two newest points
        when they are within 1% of each other; ``inf`` when it cannot be predicted."""
        if len(self.recent) < 2:
            return math.inf
        (a, _, da), (b, _, db) = self.recent
        if not (0 < abs(b - a) <= 1e-2 * max(a, b)) or not db < 0:
            return math.inf
        return 10.0 * abs((db - da) / (b - a)) / (2.0 * abs(db)) * dec * dec

    def curvature_slope(self) -> float:
        """``d3L/dbeta3`` from the second derivatives at the two newest points (0 if unknown)."""
        if len(self.recent) < 2:
            return 0.0
        (a, _, da), (b, _, db) = self.recent
        return (db - da) / (self.sign * (b - a)) if b != a else 0.0

    def newton_done(self) -> bool:
        """Newton decrement at the root estimate: its step ``|f / f'|`` is the distance to the
        root to first order, and the next step would be quadratically smaller."""
        x, d, d2 = self.sign * self.flat.beta, self.flat.dL, self.flat.d2L
        br = self.bracket
        return x > 0 and d2 < 0 and abs(d / d2) <= self.rtol * x and br.lo <= x <= br.hi

    def stalled(self, x: float) -> bool:
        """No bracket will come from beyond ``x``: ``L`` has saturated, or ``x`` is the
        largest ``x`` searched."""
        return self.saturated() or x >= self.x_max

    def saturated(self) -> bool:
        """``L`` has stopped increasing to rounding at the largest beta seen (``dL`` vanishes)."""
        return abs(self.best.dL) <= self.d_tol

    def limit(self) -> LimitValue:
        """The exact limit at ``beta = sign * inf`` (one pass, once)."""
        if self._limit is None:
            self.passes += 1
            self._limit = self.obj.evaluate_limit(self.sign)
        return self._limit

    def limit_is_below(self) -> bool:
        """Whether the limit is known to lie below an interior optimum: ``dL/dbeta`` tends to a
        value of the wrong sign, so ``L`` turns down (for MEG: the behaviour leaves the limit
        policy's support, and both limits are ``-inf``)."""
        lim = self._limit
        return lim is not None and self.sign * lim.dL < -self.d_tol

    def solution(self, p: Point, L: float, *, converged: bool, at_boundary: bool) -> BetaSolution:
        """The result at point ``p`` with supremum ``L``."""
        return BetaSolution(
            beta=p.beta,
            L=L,
            grad=p.dL,
            model_eu=p.model_eu,
            uniform_eu=self.zero.model_eu,
            expected_utility=self.obj.expected_utility,
            converged=converged,
            at_boundary=at_boundary,
            evaluations=self.evaluations,
            passes=self.passes,
        )


def _hermite_point(pa: Point, pb: Point, b: float) -> Point:
    """The point at ``b`` between ``pa.beta < b <= pb.beta``: ``L`` by quintic Hermite
    interpolation, ``dL`` and the expected utility by cubic Hermite, ``d2L`` and the expected
    utility's slope linearly."""
    h = pb.beta - pa.beta
    t = (b - pa.beta) / h
    L = quintic_hermite(pa.L, pa.dL, pa.d2L, pb.L, pb.dL, pb.d2L, h, t)
    eu = cubic_hermite(pa.model_eu, pa.dmodel_eu, pb.model_eu, pb.dmodel_eu, h, t)
    dL = cubic_hermite(pa.dL, pa.d2L, pb.dL, pb.d2L, h, t)
    d2L = pa.d2L + t * (pb.d2L - pa.d2L)
    return Point(b, L, dL, eu, d2L, pa.dmodel_eu + t * (pb.dmodel_eu - pa.dmodel_eu))


def _taylor_point(p: Point, b: float, d3: float) -> Point:
    """The point at ``b`` by Taylor steps from ``p``: ``L`` to third order (``d3``:
    ``d3L/dbeta3``), ``dL`` and the expected utility to first."""
    db = b - p.beta
    L = p.L + p.dL * db + 0.5 * p.d2L * db * db + d3 * db**3 / 6.0
    return Point(b, L, p.dL + p.d2L * db, p.model_eu + p.dmodel_eu * db, p.d2L, p.dmodel_eu)


def _x0(st: Solver, scale: float) -> float:
    """The Newton step from ``beta = 0`` (the analytic first estimate), within
    ``[1e-8, 1e2] / scale`` (a nearly flat start would send it anywhere; beyond ``1e2 / scale``
    the search expands outwards)."""
    br = st.bracket
    x0 = br.f_lo / -br.fp_lo if br.fp_lo < 0 and math.isfinite(br.f_lo / -br.fp_lo) else 1.0 / scale
    return min(max(x0, 1e-8 / scale), 1e2 / scale, st.x_max)


def _bisect(lo: float, hi: float) -> float:
    """The bisection point of ``[lo, hi]``: geometric when the bracket is wide (from ``hi / 16``
    when ``lo`` is 0), arithmetic otherwise."""
    if lo <= 0:
        return hi / 16.0
    return math.sqrt(lo * hi) if hi > 4 * lo else 0.5 * (lo + hi)


def newton(st: Solver, scale: float) -> None:
    """Safeguarded Newton on ``f = sign * dL/dbeta`` from the analytic step at ``beta = 0``, one
    beta per pass, with the exact ``f'``.

    Outside a bracket it steps outwards (Newton, at least 4x when ``f`` fell by less than half:
    a flattening ``f`` whose root lies beyond a step, as where the model's route changes).
    Inside ``[lo, hi]`` the candidates are, in order: the root of the cubic Hermite interpolant
    of the two newest points (order ~2.7) and the Newton step from the newest point, each taken
    when it stays inside and at least halves the previous step; else the intersection of the
    tangents of the concave ``L`` at ``lo`` and ``hi`` (exact at a kink of ``L``, where ``f``
    jumps); bisection when the bracket did not halve in two steps. Once the Newton decrement
    predicts an error below ``1e-12`` (quadratic convergence), the last pass skips the second
    derivative, and the decrement confirms convergence.
    """
    br = st.bracket
    x = _x0(st, scale)
    f_prev = br.f_lo
    step_old = math.inf
    light = False
    fp_last = br.fp_lo
    L_at = {0.0: st.zero.L}
    for _ in range(200):
        ((x, f, fp, L_at[x]),) = st.run([x], light=light)
        if light:
            fp = fp_last  # the interpolated f' only scales the decrement: keep the exact one
        fp_last = fp
        dec, cn = _newton_step(x, f, fp)
        if st.converged or _decrement_done(st, x, dec):
            return
        ch = hermite_secant(st.recent, x, br.lo, min(br.hi, 64.0 * x))
        if not light and _newton_settles(st, x, dec, cn, ch):
            return  # Newton's predicted error is negligible, and the Hermite root agrees
        if math.isinf(br.hi):
            if st.stalled(x):
                return
            c = _outward_step(x, f, f_prev, dec, cn, ch)
            f_prev, x = f, min(c, 64.0 * x, st.x_max)
            continue
        if br.hi - br.lo <= st.rtol * br.hi:
            st.converged = True
            return
        c = _inner_step(br, x, ch, cn, step_old, L_at)
        step_old = abs(c - x)
        # Quadratic convergence: a decrement of 1e-6 relative leaves ~1e-12 after this step.
        light = dec <= 1e-6 * x
        x = c


def _newton_step(x: float, f: float, fp: float) -> tuple[float, float]:
    """The Newton decrement ``|f / f'|`` at ``x`` (the distance to the root; inf where ``f'``
    is not negative) and the Newton step (NaN there)."""
    if fp < 0:
        return abs(f / fp), x - f / fp
    return math.inf, math.nan


def _decrement_done(st: Solver, x: float, dec: float) -> bool:
    """Converged when the Newton decrement at ``x`` is below ``rtol`` relative."""
    if dec <= st.rtol * x:
        st.converged = True
        return True
    return False


def _newton_settles(st: Solver, x: float, dec: float, cn: float, ch: float) -> bool:
    """Settle between the Newton step ``cn`` and the Hermite root ``ch`` from ``x`` when they
    agree to ``rtol`` inside the bracket and Newton's predicted error is below it."""
    br = st.bracket
    return (
        br.lo < cn < br.hi
        and abs(ch - cn) <= st.rtol * x
        and st.newton_error(dec) <= st.rtol * x
        and st.settle(0.5 * (ch + cn), (x,))
    )


def _outward_step(x: float, f: float, f_prev: float, dec: float, cn: float, ch: float) -> float:
    """The next point beyond ``x`` while no bracket is found: Newton undershoots a flattening
    ``f``, so the worse the last step did (``f`` fell by less than 3/4), the further the next
    one reaches (twice the Newton step; 4x the point when ``f`` fell by less than half); the
    Hermite root ``ch`` refines Newton's ``cn`` (order ~2.7 from the same side) when they are
    close."""
    c = x + (2.0 if f > 0.25 * f_prev else 1.0) * dec if math.isfinite(dec) else 16.0 * x
    if f > 0.5 * f_prev:
        c = max(c, 4.0 * x)
    elif x < ch < 64.0 * x and abs(ch - cn) <= 0.5 * dec:
        c = ch
    return c


def _inner_step(
    br: Bracket, x: float, ch: float, cn: float, step_old: float, L_at: dict[float, float]
) -> float:
    """The next point inside the bracket: the Hermite root ``ch`` or the Newton step ``cn``
    when it stays inside and at least halves the previous step; else the intersection of the
    tangents of the concave ``L`` at the ends (a kink of ``L``), or bisection."""
    lo, hi = br.lo, br.hi
    for cand in (ch, cn):
        if lo < cand < hi and abs(cand - x) <= 0.5 * step_old:
            return cand
    c = tangents(lo, L_at.get(lo), br.f_lo, hi, L_at.get(hi), br.f_hi)
    margin = 0.01 * (hi - lo)
    if not (lo + margin < c < hi - margin):
        c = _bisect(lo, hi)
    return c


def grid(st: Solver, scale: float) -> None:
    """Find ``hi`` with ``f(hi) <= 0``, from the Newton step at ``beta = 0`` (``x0``): a log
    grid around ``x0`` (batched passes). Stops early when ``L`` has saturated, the grid reached
    ``x_max``, or a root was hit."""
    br = st.bracket
    x0 = _x0(st, scale)
    top = math.log10(st.x_max)
    lo_dec = math.log10(x0) + _GRID_AROUND[0]
    hi_dec = min(math.log10(x0) + _GRID_AROUND[1], top)
    while math.isinf(br.hi):
        st.run(list(np.logspace(lo_dec, hi_dec, st.n).tolist()))
        if not math.isinf(br.hi) or hi_dec >= top or st.converged:
            break
        if st.saturated() and not st.limit_is_below():
            break
        lo_dec, hi_dec = hi_dec, min(hi_dec + 6.0, top)


def refine(st: Solver) -> None:
    """Shrink the bracket around the root of ``f``: Hermite root plus geometric probes."""
    br = st.bracket
    single_tried = False
    for _ in range(60):
        if st.converged or br.hi - br.lo <= st.rtol * br.hi or st.newton_done():
            st.converged = True
            break
        c, cn = _root_estimates(br)
        if _estimates_agree(st, c, cn) and st.settle(0.5 * (c + cn), (br.lo, br.hi)):
            break  # the Hermite root and Newton agree: no confirming pass
        xs, single_tried = _refine_batch(st, c, cn, single_tried)
        if _refine_pass(st, xs):
            break
    if not st.converged and br.hi - br.lo <= st.rtol * br.hi:
        st.converged = True


def _root_estimates(br: Bracket) -> tuple[float, float]:
    """``(c, cn)``: the root of the cubic Hermite interpolant of the bracket (else ``cn``,
    else bisection) and Newton's step from the end with the shorter step (NaN if none): the
    scale of the estimate's error."""
    c = hermite_root(br.lo, br.f_lo, br.fp_lo, br.hi, br.f_hi, br.fp_hi)
    steps = [
        (abs(f / fp), x - f / fp)
        for x, f, fp in ((br.lo, br.f_lo, br.fp_lo), (br.hi, br.f_hi, br.fp_hi))
        if fp < 0 and math.isfinite(f / fp)
    ]
    cn = min(steps)[1] if steps else math.nan
    lo, hi = br.lo, br.hi
    if not (lo < c < hi):
        c = cn if lo < cn < hi else _bisect(lo, hi)
    return c, cn


def _estimates_agree(st: Solver, c: float, cn: float) -> bool:
    """Both ends exact (second derivatives evaluated), the two estimates within ``rtol`` of
    each other, and the bracket narrower than ``1e-4`` relative."""
    lo, hi = st.bracket.lo, st.bracket.hi
    exact = not any(st.points[e].light for e in (lo, hi) if e in st.points)
    return exact and lo < cn < hi and abs(cn - c) <= st.rtol * c and hi - lo <= 1e-4 * c


def _refine_batch(st: Solver, c: float, cn: float, single_tried: bool) -> tuple[list[float], bool]:
    """The betas (as ``x``) of the next refinement pass, and whether a single-point pass has
    been tried: around ``c`` at offsets ``rel, rel / 10, ...`` (``rel`` estimates the error of
    ``c``, so the root falls between two probes a decade apart, where Hermite roots of nested
    brackets can be compared), the Newton estimate filling the batch; on a bracket tight
    enough, ``c`` alone (the Hermite root is then exact to rounding, its error shrinking like
    the fourth power of the width: one beta, a cheaper pass, and the Newton decrement confirms
    it), once, after that the probes again."""
    lo, hi, n = st.bracket.lo, st.bracket.hi, st.n
    rel = (hi - lo) / c
    if lo < cn < hi and cn != c:
        rel = min(rel, 4.0 * abs(cn - c) / c)
    if not (n >= 3 and (rel > _SINGLE_PROBE_REL or single_tried)):
        return [c], single_tried or n >= 3
    return _probes(st.bracket, c, cn, rel, n), single_tried


def _probes(br: Bracket, c: float, cn: float, rel: float, n: int) -> list[float]:
    """``c`` and ``(n - 1) // 2`` probes on either side of it at offsets ``rel``, ``rel / 10``,
    ... relative, with the Newton estimate ``cn`` filling the batch; those inside the bracket."""
    k = (n - 1) // 2
    top = math.log10(max(rel, 1e-12))
    offs = np.logspace(max(-13.0, top - (k - 1)), top, k)
    xs = [c] + [c * (1 - o) for o in offs] + [c * (1 + o) for o in offs]
    if len(xs) < n and br.lo < cn < br.hi and cn not in xs:
        xs.append(cn)  # the Newton estimate fills the batch (same pass size as the grid)
    return [x for x in xs if br.lo < x < br.hi]


def _refine_pass(st: Solver, xs: list[float]) -> bool:
    """Evaluate ``xs``; whether the search is done (a single point settled by its Newton
    decrement, or nested Hermite roots agreeing). With fewer than 3 betas per pass, a pass
    that did not halve the bracket is followed by one bisection (geometric when wide)."""
    br, n = st.bracket, st.n
    old = br.hi - br.lo
    light = n >= 3 and len(xs) == 1
    out = st.run(xs, light=light)
    if light and st.settle_light(out[0][0], out[0][2]):
        return True
    if len(xs) > 1 and _nested_hermite_agree(st):
        return True
    if n < 3 and br.hi - br.lo > 0.5 * old:
        st.run([_bisect(br.lo, br.hi)])
        if abs(br.f_lo) <= st.d_tol or abs(br.f_hi) <= st.d_tol:
            st.converged = True
    return False


def _nested_hermite_agree(st: Solver) -> bool:
    """Settle at the Hermite root of the tightest bracket of evaluated points when it agrees to
    ``rtol / 10`` with the Hermite root of a bracket one point wider (whose error, shrinking
    like the fourth power of the width, bounds the tighter one's)."""
    pts = sorted((x, p) for x, p in st.points.items() if math.isfinite(p.d2L) and not p.light)
    fs = [(x, st.sign * p.dL, p.d2L) for x, p in pts]
    for i in range(len(fs) - 1):
        if fs[i][1] > 0 >= fs[i + 1][1]:
            return _settle_nested(st, fs, i)
    return False


def _settle_nested(st: Solver, fs: list[tuple[float, float, float]], i: int) -> bool:
    """Settle at the Hermite root of the bracket ``fs[i], fs[i + 1]`` when it is narrower than
    ``1e-3`` relative and a wider bracket's root agrees with it to ``rtol / 10``."""
    (a, fa, da), (b, fb, db) = fs[i], fs[i + 1]
    c1 = hermite_root(a, fa, da, b, fb, db)
    good = [c2 for c2 in _wider_roots(fs, i) if abs(c2 - c1) <= 0.1 * st.rtol * c1]
    if math.isfinite(c1) and good and b - a <= 1e-3 * c1:
        return st.settle(c1, (a, b))
    return False


def _wider_roots(fs: list[tuple[float, float, float]], i: int) -> list[float]:
    """The Hermite roots of the brackets one point wider than ``fs[i], fs[i + 1]`` (``(x, f,
    f')`` points in increasing ``x``), on each side where there is one."""
    (a, fa, da), (b, fb, db) = fs[i], fs[i + 1]
    wider = []
    if i > 0:
        wider.append(hermite_root(*fs[i - 1], b, fb, db))
    if i + 2 < len(fs):
        wider.append(hermite_root(a, fa, da, *fs[i + 2]))
    return wider
