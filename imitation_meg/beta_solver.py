"""The exact 1-D solve in the rationality ``beta``, for any objective of MEG's form.

Known-utility MEG maximises ``L(beta) = E_pi[sum_t log pi_beta,t(a_t | s_t)]`` over
``beta in R u {+-inf}``; ``L`` is concave with exact first and second derivatives, and the
supremum may be a limit at ``beta = +-inf``. Any objective with the same structure (for example
MEG of a decision in a causal influence diagram, whose decisions may have different numbers of
actions) reuses this solver by implementing :class:`BetaObjective`:

- ``scale``: the natural unit of ``1 / beta`` (the spread of the utility across actions);
- ``utility_scale``: the natural size of expected total utilities (the unit of ``dL/dbeta``);
- ``expected_utility``: the behaviour's expected total utility;
- ``L0``: ``L(0)`` (the uniform model's log-likelihood);
- ``betas_per_pass``: how many betas one pass should evaluate (1 where a pass costs ``K`` times
  one beta, more where a batched pass costs about the same as one beta);
- ``evaluate_zero()`` and ``evaluate_batch(betas, second=...)``: ``L``, ``dL/dbeta``,
  ``d2L/dbeta2`` and the model's expected utility as a :class:`BetaEvaluation` of ``(K,)``
  tensors (``d2L`` may be NaN when ``second=False``);
- ``evaluate_limit(sign)``: :class:`LimitValue` ``(L, model_eu, L_approach, dL)`` at
  ``beta = sign * inf`` (``L = -inf`` when the behaviour leaves the limit policy's support;
  ``L_approach`` and ``dL`` the limits of ``L(beta)`` and ``dL/dbeta``, NaN if unknown);
- ``limit_upper_bound()``: an upper bound on both limits' ``L`` (``inf`` if none is known), which
  lets the solver skip the limit pass when an interior optimum provably beats it.

:func:`solve_beta` returns a :class:`BetaSolution`. The solver works in ``x = sign * beta >= 0``,
where ``f(x) = sign * dL/dbeta`` decreases from ``f(0) > 0`` (``sign`` is the sign of
``dL/dbeta`` at 0). Bracketing: a log grid of batched betas around the Newton step at 0, or a
safeguarded Newton expansion at one beta per pass. Refinement: the root of the cubic Hermite
interpolant of ``f`` on the bracket (fourth-order accurate), surrounded by probes at
geometrically spaced relative offsets that shrink the bracket to the estimate's error in one
pass; on a tight bracket the Hermite root alone (a pass without second derivatives), confirmed
by the Newton decrement. It stops when the bracket is ``1e-11`` relative or the decrement is
below that, and compares the interior optimum with the exact limit at ``beta = sign * inf``
unless ``limit_upper_bound()`` shows that the limit cannot win.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch as th

__all__ = [
    "BetaEvaluation",
    "BetaObjective",
    "BetaSolution",
    "LimitValue",
    "solve_beta",
]

# Grid and stopping settings of the 1-D solver.
_GRID_AROUND = (-0.8, 0.8)  # first grid: x0 * 10**-0.8 .. x0 * 10**0.8 around the Newton step at 0
_MAX_DECADES = 15.0  # extend the grid up to beta * scale = 1e15
# beta * scale beyond which a soft policy counts as saturated (its limit reached to rounding).
_SATURATED_X = 1e6
_BRACKET_RTOL = 1e-11
# Two estimates of the root (Hermite, Newton) agreeing to this are reported without a new pass.
_AGREE_RTOL = 1e-11
# A refinement pass evaluates only the Hermite root once the bracket is this narrow (relative).
_SINGLE_PROBE_REL = 1e-3


class BetaEvaluation(NamedTuple):
    """``L``, ``dL/dbeta``, ``d2L/dbeta2`` and the model's expected utility at ``K`` betas.

    Attributes:
        L: ``(K,)`` log-likelihoods ``L(beta)``.
        dL: ``(K,)`` first derivatives.
        d2L: ``(K,)`` second derivatives (NaN where not computed).
        model_eu: ``(K,)`` expected total utility of the soft-optimal model ``pi_beta``.
        dmodel_eu: ``(K,)`` its derivative in beta (optional; None or NaN when unknown). With
            it the solver reports the root from a last Newton / Hermite estimate without a
            confirming pass (the expected utility is corrected to second order).
    """

    L: th.Tensor
    dL: th.Tensor
    d2L: th.Tensor
    model_eu: th.Tensor
    dmodel_eu: th.Tensor | None = None


class LimitValue(NamedTuple):
    """The limit at ``beta = +inf`` or ``-inf``.

    Attributes:
        L: ``L`` of the limit policy itself (``-inf`` when the behaviour leaves its support).
        model_eu: the limit policy's expected utility.
        L_approach: the limit of ``L(beta)`` as ``beta`` tends to the end; it may exceed ``L``
            where the limit of the soft policies differs from the limit policy (MEG: hard
            Q-values tie, and finite betas break the ties by future entropy rather than
            evenly). NaN when unknown (the solver then approaches it by large finite betas).
        dL: the limit of ``dL/dbeta`` at the end. When ``sign * dL >= 0`` there (MEG: the
            behaviour only takes the limit policy's actions), ``L`` increases all the way and
            the supremum is the limit, found without a search; when ``< 0`` there is an
            interior optimum. NaN when unknown.
    """

    L: float
    model_eu: float
    L_approach: float = math.nan
    dL: float = math.nan


@runtime_checkable
class BetaObjective(Protocol):
    """A concave ``L(beta)`` with exact derivatives, as :func:`solve_beta` needs it.

    See the module docstring for the meaning of each member; :class:`imitation_meg.known.
    MEGObjective` is the known-utility implementation, and ``tests/test_beta_solver.py`` holds a
    one-decision objective in closed form.
    """

    @property
    def scale(self) -> float:
        """The natural unit of ``1 / beta`` (``> 0``; ``0`` means a constant utility)."""

    @property
    def utility_scale(self) -> float:
        """The natural size of expected total utilities (the unit of ``dL/dbeta``)."""

    @property
    def expected_utility(self) -> float:
        """The behaviour's expected total utility."""

    @property
    def L0(self) -> float:
        """``L(0)``, the uniform model's log-likelihood."""

    @property
    def betas_per_pass(self) -> int:
        """How many betas one pass should evaluate."""

    def evaluate_zero(self) -> BetaEvaluation:
        """The evaluation at ``beta = 0`` (``(1,)`` tensors)."""

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """Evaluate finite ``betas (K,)`` (float64)."""

    def evaluate_limit(self, sign: float) -> LimitValue:
        """``(L, model_eu)`` at ``beta = sign * inf``."""

    def limit_upper_bound(self) -> float:
        """An upper bound on ``L`` at both limits (``inf`` when none is known)."""


class BetaSolution(NamedTuple):
    """The maximiser of ``L`` over ``beta in R u {+-inf}``.

    Attributes:
        beta: the maximising rationality (``+-inf`` when the supremum is the exact limit).
        L: the supremum of ``L``.
        grad: ``dL/dbeta`` at ``beta`` (NaN at ``+-inf``).
        model_eu: the model's expected utility at ``beta``.
        uniform_eu: the uniform model's (``beta = 0``) expected utility.
        expected_utility: the behaviour's expected utility.
        converged: the solve met its tolerance, or the supremum is an exact limit.
        at_boundary: the supremum lies at ``beta = +-inf`` (or beyond ``beta * scale = 1e6``,
            where ``L`` has saturated to rounding).
        evaluations: betas evaluated (the ``beta = 0`` pass counts one).
        passes: calls to the objective's evaluations, limit passes included.
    """

    beta: float
    L: float
    grad: float
    model_eu: float
    uniform_eu: float
    expected_utility: float
    converged: bool
    at_boundary: bool
    evaluations: int
    passes: int


@dataclasses.dataclass
class _Point:
    """One evaluated beta (or a Taylor estimate at the root)."""

    beta: float
    L: float
    dL: float
    model_eu: float
    d2L: float
    dmodel_eu: float = math.nan
    light: bool = False  # d2L interpolated (a pass without second derivatives)


@dataclasses.dataclass
class _Bracket:
    """``[lo, hi]`` in ``x`` with ``f(lo) > 0 >= f(hi)``, with ``f`` and ``f'`` at both ends."""

    lo: float
    f_lo: float
    fp_lo: float
    hi: float = math.inf
    f_hi: float = math.nan
    fp_hi: float = math.nan


@dataclasses.dataclass
class _Solver:
    """The solve's state: the objective, the bracket, the best and flattest points seen."""

    obj: BetaObjective
    sign: float
    d_tol: float  # |dL| below which a point counts as a root
    n: int  # betas per pass
    x_max: float
    best: _Point  # the largest L seen
    flat: _Point  # the smallest |dL| seen (the root estimate)
    bracket: _Bracket
    zero: _Point  # beta = 0 (the uniform model)
    converged: bool = False
    evaluations: int = 1  # the beta = 0 pass
    passes: int = 1
    recent: list[tuple[float, float, float]] = dataclasses.field(default_factory=list)
    points: dict[float, _Point] = dataclasses.field(default_factory=dict)  # by x
    estimate: _Point | None = None  # the root from a last estimate, without a confirming pass
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
            Lj, dj, d2j = Lp[j], dLp[j], d2Lp[j]
            if light:
                d2j = br.fp_lo + (br.fp_hi - br.fp_lo) * (x - br.lo) / (br.hi - br.lo)
            pt = _Point(sign * x, Lj, dj, eup[j], d2j, math.nan if light else deus[j], light)
            self.points[x] = pt
            if Lj > self.best.L:
                self.best = pt
            if abs(dj) < abs(self.flat.dL):
                self.flat = pt
            fj = sign * dj
            if abs(dj) <= self.d_tol:
                self.converged = True
            if fj > 0 and x > br.lo:
                br.lo, br.f_lo, br.fp_lo = x, fj, d2j
            elif fj <= 0 and x < br.hi:
                br.hi, br.f_hi, br.fp_hi = x, fj, d2j
            out.append((x, fj, d2j, Lj))
            if not light:
                self.recent = [*self.recent[-1:], (x, fj, d2j)]
        return out

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
        b = self.sign * x_root
        lo = [p for p in pts if (p.beta - b) * self.sign <= 0]
        hi = [p for p in pts if (p.beta - b) * self.sign > 0]
        if lo and hi:
            pa, pb = (
                max(lo, key=lambda p: self.sign * p.beta),
                min(hi, key=lambda p: self.sign * p.beta),
            )
            if pa.beta > pb.beta:
                pa, pb = pb, pa
            h = pb.beta - pa.beta
            t = (b - pa.beta) / h
            L = _quintic_hermite(pa.L, pa.dL, pa.d2L, pb.L, pb.dL, pb.d2L, h, t)
            eu = _cubic_hermite(pa.model_eu, pa.dmodel_eu, pb.model_eu, pb.dmodel_eu, h, t)
            dL = _cubic_hermite(pa.dL, pa.d2L, pb.dL, pb.d2L, h, t)
            d2L = pa.d2L + t * (pb.d2L - pa.d2L)
            self.estimate = _Point(
                b, L, dL, eu, d2L, pa.dmodel_eu + t * (pb.dmodel_eu - pa.dmodel_eu)
            )
        elif pts:
            p = min(pts, key=lambda q: abs(q.beta - b))
            db = b - p.beta
            d3 = self.curvature_slope()
            L = p.L + p.dL * db + 0.5 * p.d2L * db * db + d3 * db**3 / 6.0
            self.estimate = _Point(
                b, L, p.dL + p.d2L * db, p.model_eu + p.dmodel_eu * db, p.d2L, p.dmodel_eu
            )
        else:
            return False
        self.converged = True
        return True

    def settle_light(self, x: float, fp: float) -> bool:
        """After a pass without second derivatives at ``x``: when the Newton step from it (with
        ``f'`` interpolated over the bracket) is below ``1e-9`` relative and its error (the
        step times the interpolation's relative error) below ``_AGREE_RTOL``, report it (``L``
        to second order, the expected utility to first order with the slope of the nearest
        point that has it)."""
        p = self.points.get(x)
        br = self.bracket
        if p is None or not fp < 0 or not (br.fp_lo < 0 and br.fp_hi < 0):
            return False
        dx = -self.sign * p.dL / fp  # the Newton step in x
        # The interpolated f' is off by at most the spread of f' over the bracket.
        spread = abs(br.fp_hi - br.fp_lo) / min(abs(br.fp_lo), abs(br.fp_hi))
        if abs(dx) * (spread + abs(dx) / x) > _AGREE_RTOL * x or abs(dx) > 1e-9 * x:
            return False
        db = self.sign * dx
        # The expected utility's slope from the nearest point that has it.
        full = [q for q in self.points.values() if math.isfinite(q.dmodel_eu)]
        slope = min(full, key=lambda q: abs(q.beta - p.beta)).dmodel_eu if full else 0.0
        eu = p.model_eu + slope * db
        self.estimate = _Point(p.beta + db, p.L + 0.5 * p.dL * db, 0.0, eu, fp, slope)
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
        return x > 0 and d2 < 0 and abs(d / d2) <= _BRACKET_RTOL * x and br.lo <= x <= br.hi

    def saturated(self) -> bool:
        """``L`` has stopped increasing to rounding at the largest beta seen (``dL`` vanishes).

        Reaching ``L(sign * inf)`` is not enough: where hard Q-values tie, finite betas break the
        ties by future entropy and ``L(beta)`` can rise past ``L(sign * inf)`` towards another
        limit.
        """
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

    def solution(self, p: _Point, L: float, *, converged: bool, at_boundary: bool) -> BetaSolution:
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


def solve_beta(obj: BetaObjective) -> BetaSolution:
    """Maximise the concave ``L(beta)`` of ``obj`` over ``beta in R u {+-inf}`` (see the module
    docstring); deterministic, accurate to about ``1e-11`` relative in ``beta``."""
    scale = float(obj.scale)
    ev0 = obj.evaluate_zero()
    L0 = float(obj.L0)
    dL0, d2L0, eu_uniform = float(ev0.dL[0]), float(ev0.d2L[0]), float(ev0.model_eu[0])
    zero = _Point(0.0, L0, dL0, eu_uniform, d2L0)
    # Tolerance on the derivative below which beta = 0 is optimal (utility gives no signal).
    d_tol = 1e-12 * max(1.0, abs(obj.expected_utility), abs(eu_uniform), obj.utility_scale)
    sign = 1.0 if dL0 > 0 else -1.0
    st = _Solver(
        obj=obj,
        sign=sign,
        d_tol=d_tol,
        n=max(1, int(obj.betas_per_pass)),
        x_max=10.0**_MAX_DECADES / scale if scale > 0 else math.inf,
        best=dataclasses.replace(zero),
        flat=dataclasses.replace(zero),
        bracket=_Bracket(lo=0.0, f_lo=sign * dL0, fp_lo=d2L0),
        zero=zero,
    )
    if scale == 0.0 or abs(dL0) <= d_tol:
        return st.solution(zero, L0, converged=True, at_boundary=False)
    if obj.limit_upper_bound() > L0 + 1e-12 * max(1.0, abs(L0)):
        # The behaviour may live on the limit policy's support: one limit pass first. If dL/dbeta
        # keeps the sign of dL(0) up to the limit, L increases all the way: no search at all.
        lim = st.limit()
        if not math.isnan(lim.dL) and sign * lim.dL >= -d_tol:
            return _the_limit(st, lim)
    if st.n >= 3:  # batched passes cost about one: grid, then Hermite root with probes
        _bracket(st, scale)
    else:  # one beta per pass: safeguarded Newton
        _newton(st, scale)
    root_hit = st.converged and abs(st.flat.beta) * scale < _SATURATED_X  # dL = 0 at finite beta
    if math.isinf(st.bracket.hi) and not root_hit:
        return _increasing_to_the_limit(st, scale)
    if st.n >= 3:
        _refine(st)
    return _compare_with_the_limit(st, scale)


def _the_limit(st: _Solver, lim: LimitValue) -> BetaSolution:
    """The supremum at ``beta = sign * inf``: the larger of ``L`` there and the limit of
    ``L(beta)``, exact."""
    L_inf = lim.L if math.isnan(lim.L_approach) else max(lim.L, lim.L_approach)
    at_inf = _Point(st.sign * math.inf, L_inf, math.nan, lim.model_eu, math.nan)
    return st.solution(at_inf, L_inf, converged=True, at_boundary=True)


def _x0(st: _Solver, scale: float) -> float:
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


def _newton(st: _Solver, scale: float) -> None:
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
        if st.converged:
            return
        dec = abs(f / fp) if fp < 0 else math.inf  # Newton decrement: distance to the root
        if dec <= _BRACKET_RTOL * x:
            st.converged = True
            return
        lo, hi = br.lo, br.hi
        cn = x - f / fp if fp < 0 else math.nan
        ch = _hermite_secant(st.recent, x, lo, min(hi, 64.0 * x))
        if (
            not light
            and lo < cn < hi
            and abs(ch - cn) <= _AGREE_RTOL * x
            and st.newton_error(dec) <= _AGREE_RTOL * x
            and st.settle(0.5 * (ch + cn), (x,))
        ):
            return  # Newton's predicted error is negligible, and the Hermite root agrees
        if math.isinf(hi):
            if st.saturated() or x >= st.x_max:
                return
            # Newton undershoots a flattening f: the worse the last step did (f fell by less
            # than 3/4), the further the next one reaches (twice the Newton step; 4x the point).
            c = x + (2.0 if f > 0.25 * f_prev else 1.0) * dec if math.isfinite(dec) else 16.0 * x
            if f > 0.5 * f_prev:
                c = max(c, 4.0 * x)
            elif x < ch < 64.0 * x and abs(ch - cn) <= 0.5 * dec:
                c = ch  # the Hermite root refines Newton's (order ~2.7 from the same side)
            f_prev, x = f, min(c, 64.0 * x, st.x_max)
            continue
        if hi - lo <= _BRACKET_RTOL * hi:
            st.converged = True
            return
        c = math.nan
        for cand in (ch, cn):
            if lo < cand < hi and abs(cand - x) <= 0.5 * step_old:
                c = cand
                break
        if math.isnan(c):  # no fast step: a kink of L, or bisection
            c = _tangents(lo, L_at.get(lo), br.f_lo, hi, L_at.get(hi), br.f_hi)
            margin = 0.01 * (hi - lo)
            if not (lo + margin < c < hi - margin):
                c = _bisect(lo, hi)
        step_old = abs(c - x)
        # Quadratic convergence: a decrement of 1e-6 relative leaves ~1e-12 after this step.
        light = dec <= 1e-6 * x
        x = c


def _hermite_secant(
    recent: list[tuple[float, float, float]], x: float, lo: float, hi: float
) -> float:
    """Root in ``(lo, hi)`` nearest ``x`` of the cubic Hermite interpolant of the two newest
    points (interpolating or extrapolating: order ~2.7 near the root), or NaN. NaN too where the
    slopes are much flatter than the secant (``f`` steps between the points: the cubic is no
    model of it)."""
    if len(recent) < 2:
        return math.nan
    (a, fa, da), (b, fb, db) = sorted(recent)
    h = b - a
    if not (h > 0) or not all(map(math.isfinite, (fa, da, fb, db))):
        return math.nan
    m = (fb - fa) / h
    if abs(da) < 0.1 * abs(m) and abs(db) < 0.1 * abs(m):
        return math.nan
    m0, m1 = da * h, db * h
    c2 = 3 * (fb - fa) - 2 * m0 - m1
    c3 = 2 * (fa - fb) + m0 + m1
    roots = _cubic_roots_01(fa, m0, c2, c3, (lo - a) / h, (hi - a) / h)
    if not roots:
        return math.nan
    return a + h * min(roots, key=lambda u: abs(a + h * u - x))


def _tangents(
    lo: float, L_lo: float | None, f_lo: float, hi: float, L_hi: float | None, f_hi: float
) -> float:
    """Where the tangents of the concave ``L`` at ``lo`` and ``hi`` meet (NaN if unknown)."""
    if L_lo is None or L_hi is None or not (f_lo > f_hi):
        return math.nan
    return (L_hi - L_lo - f_hi * hi + f_lo * lo) / (f_lo - f_hi)


def _bracket(st: _Solver, scale: float) -> None:
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


def _is_flat(p: _Point, scale: float) -> bool:
    """Whether ``L`` has flattened to rounding at ``p`` (the soft policies have saturated):
    beyond ``beta * scale = 1e6``, or a negligible curvature ``|d2L| beta^2``. There ``L``
    carries rounding of order ``eps * beta * scale`` per step and the exact limit of ``L(beta)``
    is the better value."""
    x = abs(p.beta)
    return x * scale >= _SATURATED_X or (
        x > 0 and math.isfinite(p.d2L) and abs(p.d2L) * x * x <= 1e-9 * max(1.0, abs(p.L))
    )


def _limit_or(st: _Solver, candidate: _Point, scale: float) -> BetaSolution | None:
    """The limit at ``beta = sign * inf`` if it is at least as good as ``candidate``, else None.

    Its value is the larger of ``L(sign * inf)`` and the limit of ``L(beta)`` (when the objective
    knows it; then it is exact and preferred over a candidate on the saturated plateau).
    """
    lim = st.limit()
    known = not math.isnan(lim.L_approach)
    L_inf = max(lim.L, lim.L_approach) if known else lim.L
    tol = 1e-12 * max(1.0, abs(candidate.L))
    plateau = known and _is_flat(candidate, scale)
    if math.isfinite(L_inf) and (plateau or L_inf >= candidate.L - tol):
        if plateau:
            return _the_limit(st, lim)
        at_inf = _Point(st.sign * math.inf, L_inf, math.nan, lim.model_eu, math.nan)
        return st.solution(at_inf, max(L_inf, candidate.L), converged=True, at_boundary=True)
    return None


def _increasing_to_the_limit(st: _Solver, scale: float) -> BetaSolution:
    """``dL`` keeps the sign of ``dL(0)`` up to the largest beta: ``L`` increases towards
    ``beta = sign * inf``. The supremum is the larger of ``L(sign * inf)`` and the limit of
    ``L(beta)``: both exact when the objective knows ``L_approach``; else the last betas reach
    the latter once ``dL`` vanishes to rounding (``saturated``)."""
    won = _limit_or(st, st.best, scale)
    if won is not None:
        return won
    return st.solution(st.best, st.best.L, converged=st.saturated(), at_boundary=True)


def _refine(st: _Solver) -> None:
    """Shrink the bracket around the root of ``f``: Hermite root plus geometric probes."""
    br = st.bracket
    single_tried = False
    n = st.n
    for _ in range(60):
        if st.converged or br.hi - br.lo <= _BRACKET_RTOL * br.hi or st.newton_done():
            st.converged = True
            break
        c = _hermite_root(br.lo, br.f_lo, br.fp_lo, br.hi, br.f_hi, br.fp_hi)
        # Newton from the end point with the shorter step: the scale of the estimate's error.
        steps = [
            (abs(f / fp), x - f / fp)
            for x, f, fp in ((br.lo, br.f_lo, br.fp_lo), (br.hi, br.f_hi, br.fp_hi))
            if fp < 0 and math.isfinite(f / fp)
        ]
        cn = min(steps)[1] if steps else math.nan
        lo, hi = br.lo, br.hi
        if not (lo < c < hi):
            c = cn if lo < cn < hi else _bisect(lo, hi)
        exact = not any(st.points[e].light for e in (lo, hi) if e in st.points)
        agree = exact and lo < cn < hi and abs(cn - c) <= _AGREE_RTOL * c and hi - lo <= 1e-4 * c
        if agree and st.settle(0.5 * (c + cn), (lo, hi)):
            break  # the Hermite root and Newton agree: no confirming pass
        rel = (hi - lo) / c
        if lo < cn < hi and cn != c:
            rel = min(rel, 4.0 * abs(cn - c) / c)
        if n >= 3 and (rel > _SINGLE_PROBE_REL or single_tried):
            k = (n - 1) // 2
            # Offsets rel, rel / 10, ... (rel estimates the error of c): the root falls between
            # two probes a decade apart, where Hermite roots of nested brackets can be compared.
            top = math.log10(max(rel, 1e-12))
            offs = np.logspace(max(-13.0, top - (k - 1)), top, k)
            xs = [c] + [c * (1 - o) for o in offs] + [c * (1 + o) for o in offs]
            if len(xs) < n and lo < cn < hi and cn not in xs:
                xs.append(cn)  # the Newton estimate fills the batch (same pass size as the grid)
            xs = [x for x in xs if lo < x < hi]
        else:
            # On a bracket this tight the Hermite root is exact to rounding (its error shrinks
            # like the fourth power of the width): one beta (a cheaper pass) and the Newton
            # decrement confirms it; once, after that the probes again.
            single_tried = single_tried or n >= 3
            xs = [c]
        old = hi - lo
        light = n >= 3 and len(xs) == 1
        out = st.run(xs, light=light)
        if light and st.settle_light(out[0][0], out[0][2]):
            break
        if len(xs) > 1 and _nested_hermite_agree(st):
            break
        if n < 3 and br.hi - br.lo > 0.5 * old:
            # The single estimate did not halve the bracket: bisect once (geometric when wide).
            st.run([_bisect(br.lo, br.hi)])
            if abs(br.f_lo) <= st.d_tol or abs(br.f_hi) <= st.d_tol:
                st.converged = True
    if not st.converged and br.hi - br.lo <= _BRACKET_RTOL * br.hi:
        st.converged = True


def _nested_hermite_agree(st: _Solver) -> bool:
    """Settle at the Hermite root of the tightest bracket of evaluated points when it agrees to
    ``_AGREE_RTOL`` with the Hermite root of a bracket one point wider (whose error, shrinking
    like the fourth power of the width, bounds the tighter one's)."""
    pts = sorted((x, p) for x, p in st.points.items() if math.isfinite(p.d2L) and not p.light)
    fs = [(x, st.sign * p.dL, p.d2L) for x, p in pts]
    for i in range(len(fs) - 1):
        (a, fa, da), (b, fb, db) = fs[i], fs[i + 1]
        if not (fa > 0 >= fb):
            continue
        c1 = _hermite_root(a, fa, da, b, fb, db)
        wider = []
        if i > 0:
            wider.append(_hermite_root(*fs[i - 1], b, fb, db))
        if i + 2 < len(fs):
            wider.append(_hermite_root(a, fa, da, *fs[i + 2]))
        good = [c2 for c2 in wider if abs(c2 - c1) <= 0.1 * _AGREE_RTOL * c1]
        if math.isfinite(c1) and good and b - a <= 1e-3 * c1:
            return st.settle(c1, (a, b))
        return False
    return False


def _compare_with_the_limit(st: _Solver, scale: float) -> BetaSolution:
    """The interior optimum against the exact limit at ``beta = sign * inf``.

    The limit wins when it is at least as good. A root on the saturated plateau (see
    :func:`_is_flat`) is where ``L`` has reached the limit of ``L(beta)`` to rounding: then the
    exact limit is reported. Otherwise an interior root beats the limit of ``L(beta)`` (``L`` is
    concave) and only ``L(sign * inf)`` itself can win (where hard Q-values tie, ``L(beta)``
    does not tend to it); that limit pass is skipped when the limit's ``dL`` showed that ``L``
    turns down before it, or when ``limit_upper_bound()`` proves that it cannot win.
    """
    best, flat = st.best, st.flat
    tol_best = 1e-12 * max(1.0, abs(best.L))
    if not st.limit_is_below() and (
        _is_flat(flat, scale) or st.obj.limit_upper_bound() >= best.L - tol_best
    ):
        # A best point on the plateau carries rounding: the limit is compared with the root.
        cand = best if not _is_flat(best, scale) else flat
        won = _limit_or(st, cand, scale)
        if won is not None:
            return won
    if st.estimate is not None:  # the root from agreeing estimates, L by a Taylor step
        est = st.estimate
        return st.solution(est, max(est.L, best.L), converged=True, at_boundary=False)
    # At a converged root report the root (L is flat to rounding there: the largest L seen may
    # be a neighbour's rounding); else the largest L seen.
    x = abs(flat.beta)
    dec = abs(flat.dL / flat.d2L) if flat.d2L < 0 else math.inf
    at_root = abs(flat.dL) <= st.d_tol or dec <= 1e-9 * x
    pick = flat if at_root else best
    L = pick.L + 0.5 * abs(flat.dL) * dec if at_root and math.isfinite(dec) else pick.L
    # A "root" beyond beta * scale = 1e6 is where dL has vanished to rounding while L still
    # tends to its beta -> sign * inf limit (tied hard Q-values): the supremum lies at infinity.
    return st.solution(
        pick,
        L,
        converged=st.converged,
        at_boundary=abs(pick.beta) * scale >= _SATURATED_X,
    )


def _cubic_roots_01(
    c0: float, c1: float, c2: float, c3: float, u0: float = 0.0, u1: float = 1.0
) -> list[float]:
    """Real roots in ``(u0, u1)`` (default ``(0, 1)``) of ``c0 + c1 u + c2 u^2 + c3 u^3`` (pure
    Python, no eigenvalues).

    Splits ``[u0, u1]`` at the critical points into monotone pieces and solves each piece with a
    sign change by safeguarded Newton iteration (bisection when a step leaves the piece).
    """

    def p(u: float) -> float:
        return c0 + u * (c1 + u * (c2 + u * c3))

    def dp(u: float) -> float:
        return c1 + u * (2.0 * c2 + 3.0 * u * c3)

    knots = [u0, u1]
    a2, a1, a0 = 3.0 * c3, 2.0 * c2, c1
    if a2 != 0.0:
        disc = a1 * a1 - 4.0 * a2 * a0
        if disc > 0.0:
            sq = math.sqrt(disc)
            knots += [(-a1 - sq) / (2.0 * a2), (-a1 + sq) / (2.0 * a2)]
    elif a1 != 0.0:
        knots.append(-a0 / a1)
    knots = sorted(u for u in knots if u0 <= u <= u1)
    roots = []
    for a, b in itertools.pairwise(knots):
        pa, pb = p(a), p(b)
        if pa == 0.0 and a > u0:
            roots.append(a)
            continue
        if not (b > a) or pa * pb > 0.0:
            continue
        u = a - pa * (b - a) / (pb - pa)  # start at the secant root
        for _ in range(100):
            pu = p(u)
            if pu == 0.0:
                break
            if (pu > 0.0) == (pa > 0.0):
                a, pa = u, pu
            else:
                b = u
            d = dp(u)
            nu = u - pu / d if d != 0.0 else math.nan
            if not (a < nu < b):
                nu = 0.5 * (a + b)
            if abs(nu - u) <= 4e-16 * max(1.0, abs(u)) or b - a <= 4e-16 * max(1.0, abs(u)):
                u = nu
                break
            u = nu
        if u0 < u < u1:
            roots.append(u)
    return roots


def _cubic_hermite(y0: float, d0: float, y1: float, d1: float, h: float, t: float) -> float:
    """The cubic Hermite interpolant of ``(y, y')`` at ``0`` and ``h``, at ``t * h``."""
    t2, t3 = t * t, t * t * t
    return (
        y0 * (2 * t3 - 3 * t2 + 1)
        + h * d0 * (t3 - 2 * t2 + t)
        + y1 * (-2 * t3 + 3 * t2)
        + h * d1 * (t3 - t2)
    )


def _quintic_hermite(
    y0: float, d0: float, s0: float, y1: float, d1: float, s1: float, h: float, t: float
) -> float:
    """The quintic Hermite interpolant of ``(y, y', y'')`` at ``0`` and ``h``, at ``t * h``."""
    t3, t4, t5 = t**3, t**4, t**5
    return (
        y0 * (1 - 10 * t3 + 15 * t4 - 6 * t5)
        + h * d0 * (t - 6 * t3 + 8 * t4 - 3 * t5)
        + h * h * s0 * (0.5 * t * t - 1.5 * t3 + 1.5 * t4 - 0.5 * t5)
        + h * h * s1 * (0.5 * t3 - t4 + 0.5 * t5)
        + h * d1 * (-4 * t3 + 7 * t4 - 3 * t5)
        + y1 * (10 * t3 - 15 * t4 + 6 * t5)
    )


def _hermite_root(a: float, fa: float, da: float, b: float, fb: float, db: float) -> float:
    """Root in ``(a, b)`` of the cubic Hermite interpolant of ``f`` (``fa > 0 > fb``), or nan."""
    h = b - a
    if not (h > 0) or not all(map(math.isfinite, (fa, da, fb, db))):
        return math.nan
    # f(a + u h) = c0 + c1 u + c2 u^2 + c3 u^3 on u in [0, 1].
    m0, m1 = da * h, db * h
    c0, c1 = fa, m0
    c2 = 3 * (fb - fa) - 2 * m0 - m1
    c3 = 2 * (fa - fb) + m0 + m1
    real = _cubic_roots_01(c0, c1, c2, c3)
    if not real:
        return math.nan
    # The interpolant may have several roots in (0, 1); take the one nearest the secant root.
    sec = fa / (fa - fb)
    u = min(real, key=lambda v: abs(v - sec))
    return a + u * h
