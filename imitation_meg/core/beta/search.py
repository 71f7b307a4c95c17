"""The search of the 1-D solve in beta: its state and the two strategies.

:class:`Solver` holds the objective, the bracket and the points evaluated; :func:`newton` (one
beta per pass, large MDPs) and :func:`~imitation_meg.core.beta.batched.grid` /
:func:`~imitation_meg.core.beta.batched.refine` (batched passes, small MDPs, in
:mod:`imitation_meg.core.beta.batched`) move the bracket to the root of ``f = sign * dL/dbeta``. :mod:`imitation_meg.core.beta.solver` runs them and
compares the result with the limits at ``beta = +-inf``.
"""

from __future__ import annotations

import dataclasses
import math

import torch as th

from imitation_meg.core.beta.hermite import (
    cubic_hermite,
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
    "newton",
]

# Grid and stopping settings of the 1-D solver.
MAX_DECADES = 15.0  # extend the grid up to beta * scale = 1e15
# beta * scale beyond which a soft policy counts as saturated (its limit reached to rounding).
SATURATED_X = 1e6
RTOL = 1e-11  # the root's relative tolerance for float64 objectives


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
