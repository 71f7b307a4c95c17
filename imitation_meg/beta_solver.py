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
- ``evaluate_limit(sign)``: :class:`LimitValue` ``(L, model_eu, L_approach)`` at
  ``beta = sign * inf`` (``L = -inf`` when the behaviour leaves the limit policy's support;
  ``L_approach`` the limit of ``L(beta)``, NaN if unknown);
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
# A refinement pass evaluates only the Hermite root once the bracket is this narrow (relative).
_SINGLE_PROBE_REL = 1e-3


class BetaEvaluation(NamedTuple):
    """``L``, ``dL/dbeta``, ``d2L/dbeta2`` and the model's expected utility at ``K`` betas.

    Attributes:
        L: ``(K,)`` log-likelihoods ``L(beta)``.
        dL: ``(K,)`` first derivatives.
        d2L: ``(K,)`` second derivatives (NaN where not computed).
        model_eu: ``(K,)`` expected total utility of the soft-optimal model ``pi_beta``.
    """

    L: th.Tensor
    dL: th.Tensor
    d2L: th.Tensor
    model_eu: th.Tensor


class LimitValue(NamedTuple):
    """The limit at ``beta = +inf`` or ``-inf``.

    Attributes:
        L: ``L`` of the limit policy itself (``-inf`` when the behaviour leaves its support).
        model_eu: the limit policy's expected utility.
        L_approach: the limit of ``L(beta)`` as ``beta`` tends to the end; it may exceed ``L``
            where the limit of the soft policies differs from the limit policy (MEG: hard
            Q-values tie, and finite betas break the ties by future entropy rather than
            evenly). NaN when unknown (the solver then approaches it by large finite betas).
    """

    L: float
    model_eu: float
    L_approach: float = math.nan


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
    """One evaluated beta."""

    beta: float
    L: float
    dL: float
    model_eu: float
    d2L: float


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

    def run(self, xs: list[float], light: bool = False) -> list[tuple[float, float, float]]:
        """Evaluate ``x`` values in one batched pass; update the bracket and the points.

        ``light``: a pass without second derivatives (inside a finite bracket); ``f'`` at each
        point is then interpolated from the bracket's ends (it only scales the Newton decrement).

        Returns:
            ``(x, f(x), f'(x))`` for each distinct ``x``, in increasing order.
        """
        br, sign = self.bracket, self.sign
        xs = sorted(set(xs))
        pts = th.tensor([sign * x for x in xs], dtype=th.float64)
        ev = self.obj.evaluate_batch(pts, second=not light)
        self.evaluations += len(xs)
        self.passes += 1
        Lp, dLp, d2Lp, eup = (v.tolist() for v in ev)
        out = []
        for j, x in enumerate(xs):
            Lj, dj, d2j = Lp[j], dLp[j], d2Lp[j]
            if light:
                d2j = br.fp_lo + (br.fp_hi - br.fp_lo) * (x - br.lo) / (br.hi - br.lo)
            if Lj > self.best.L:
                self.best = _Point(sign * x, Lj, dj, eup[j], d2j)
            if abs(dj) < abs(self.flat.dL):
                self.flat = _Point(sign * x, Lj, dj, eup[j], d2j)
            fj = sign * dj
            if abs(dj) <= self.d_tol:
                self.converged = True
            if fj > 0 and x > br.lo:
                br.lo, br.f_lo, br.fp_lo = x, fj, d2j
            elif fj <= 0 and x < br.hi:
                br.hi, br.f_hi, br.fp_hi = x, fj, d2j
            out.append((x, fj, d2j))
        return out

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
        """The exact limit at ``beta = sign * inf`` (one pass; the objective caches it)."""
        self.passes += 1
        return self.obj.evaluate_limit(self.sign)

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
    _bracket(st, scale)
    root_hit = st.converged and abs(st.flat.beta) * scale < _SATURATED_X  # dL = 0 at finite beta
    if math.isinf(st.bracket.hi) and not root_hit:
        return _increasing_to_the_limit(st, scale)
    _refine(st)
    return _compare_with_the_limit(st, scale)


def _bracket(st: _Solver, scale: float) -> None:
    """Find ``hi`` with ``f(hi) <= 0``, from the Newton step at ``beta = 0`` (``x0``): a log
    grid around ``x0`` (batched passes), or a safeguarded Newton expansion (one beta per pass).
    Stops early when ``L`` has saturated, the grid reached ``x_max``, or a root was hit."""
    br = st.bracket
    x0 = br.f_lo / -br.fp_lo if br.fp_lo < 0 and math.isfinite(br.f_lo / -br.fp_lo) else 1.0 / scale
    x0 = min(max(x0, 1e-8 / scale), st.x_max)
    if st.n > 1:
        # A log grid around x0 (the root is usually within a factor of a few of it).
        top = math.log10(st.x_max)
        lo_dec = math.log10(x0) + _GRID_AROUND[0]
        hi_dec = min(math.log10(x0) + _GRID_AROUND[1], top)
        while math.isinf(br.hi):
            st.run(list(np.logspace(lo_dec, hi_dec, st.n).tolist()))
            if not math.isinf(br.hi) or st.saturated() or hi_dec >= top or st.converged:
                break
            lo_dec, hi_dec = hi_dec, min(hi_dec + 6.0, top)
        return
    x = x0
    while math.isinf(br.hi) and not st.converged:
        x = min(max(x, 1e-8 / scale), st.x_max)
        ((_, fx, fpx),) = st.run([x])
        if not math.isinf(br.hi) or st.saturated() or x >= st.x_max:
            break
        cand = x - fx / fpx if fpx < 0 else math.nan
        x = cand if math.isfinite(cand) and x < cand <= 100.0 * x else 10.0 * x


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
        at_inf = _Point(st.sign * math.inf, L_inf, math.nan, lim.model_eu, math.nan)
        value = L_inf if plateau else max(L_inf, candidate.L)
        return st.solution(at_inf, value, converged=True, at_boundary=True)
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
            c = (
                cn
                if lo < cn < hi
                else (math.sqrt(lo * hi) if lo > 0 and hi > 4 * lo else 0.5 * (lo + hi))
            )
        rel = (hi - lo) / c
        if lo < cn < hi and cn != c:
            rel = min(rel, 4.0 * abs(cn - c) / c)
        if n >= 3 and (rel > _SINGLE_PROBE_REL or single_tried):
            k = (n - 1) // 2
            # Offsets from rel down to rel**2 (the error of the next estimate), at least 1e-13.
            top = math.log10(max(rel, 1e-12))
            offs = np.logspace(max(-13.0, min(2.0 * top, top - 2.0)), top, k)
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
        st.run(xs, light=n >= 3 and len(xs) == 1)
        if n < 3 and br.hi - br.lo > 0.5 * old:
            # The single estimate did not halve the bracket: bisect once (geometric when wide).
            lo, hi = br.lo, br.hi
            m = math.sqrt(lo * hi) if lo > 0 and hi > 4 * lo else 0.5 * (lo + hi)
            st.run([m])
            if abs(br.f_lo) <= st.d_tol or abs(br.f_hi) <= st.d_tol:
                st.converged = True
    if not st.converged and br.hi - br.lo <= _BRACKET_RTOL * br.hi:
        st.converged = True


def _compare_with_the_limit(st: _Solver, scale: float) -> BetaSolution:
    """The interior optimum against the exact limit at ``beta = sign * inf``.

    The limit wins when it is at least as good. A root on the saturated plateau (see
    :func:`_is_flat`) is where ``L`` has reached the limit of ``L(beta)`` to rounding: then the
    exact limit is reported. Otherwise an interior root beats the limit of ``L(beta)`` (``L`` is
    concave) and only ``L(sign * inf)`` itself can win (where hard Q-values tie, ``L(beta)``
    does not tend to it); that limit pass is skipped when ``limit_upper_bound()`` proves that
    it cannot win.
    """
    best, flat = st.best, st.flat
    tol_best = 1e-12 * max(1.0, abs(best.L))
    if _is_flat(flat, scale) or st.obj.limit_upper_bound() >= best.L - tol_best:
        # A best point on the plateau carries rounding: the limit is compared with the root.
        cand = best if not _is_flat(best, scale) else flat
        won = _limit_or(st, cand, scale)
        if won is not None:
            return won
    # Near the root L is flat to rounding: report the root estimate when its L ties the best.
    eps = np.finfo(np.float64).eps
    pick = flat if best.L - 8 * eps * max(1.0, abs(best.L)) <= flat.L else best
    # A "root" beyond beta * scale = 1e6 is where dL has vanished to rounding while L still
    # tends to its beta -> sign * inf limit (tied hard Q-values): the supremum lies at infinity.
    return st.solution(
        pick,
        max(pick.L, best.L),
        converged=st.converged,
        at_boundary=abs(pick.beta) * scale >= _SATURATED_X,
    )


def _cubic_roots_01(c0: float, c1: float, c2: float, c3: float) -> list[float]:
    """Real roots in ``(0, 1)`` of ``c0 + c1 u + c2 u^2 + c3 u^3`` (pure Python, no eigenvalues).

    Splits ``[0, 1]`` at the critical points into monotone pieces and solves each piece with a
    sign change by safeguarded Newton iteration (bisection when a step leaves the piece).
    """

    def p(u: float) -> float:
        return c0 + u * (c1 + u * (c2 + u * c3))

    def dp(u: float) -> float:
        return c1 + u * (2.0 * c2 + 3.0 * u * c3)

    knots = [0.0, 1.0]
    a2, a1, a0 = 3.0 * c3, 2.0 * c2, c1
    if a2 != 0.0:
        disc = a1 * a1 - 4.0 * a2 * a0
        if disc > 0.0:
            sq = math.sqrt(disc)
            knots += [(-a1 - sq) / (2.0 * a2), (-a1 + sq) / (2.0 * a2)]
    elif a1 != 0.0:
        knots.append(-a0 / a1)
    knots = sorted(u for u in knots if 0.0 <= u <= 1.0)
    roots = []
    for a, b in itertools.pairwise(knots):
        pa, pb = p(a), p(b)
        if pa == 0.0 and a > 0.0:
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
            if abs(nu - u) <= 4e-16 * max(1.0, abs(u)) or b - a <= 4e-16:
                u = nu
                break
            u = nu
        if 0.0 < u < 1.0:
            roots.append(u)
    return roots


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
