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
- ``evaluate_limit(sign)``: :class:`LimitValue` ``(L, model_eu, dL)``, the exact limits of
  ``L(beta)``, of the model's expected utility and of ``dL/dbeta`` (NaN if unknown) as
  ``beta -> sign * inf`` (``L = -inf`` when the behaviour leaves the limit policy's support);
  MEG's members at ``beta = +-inf`` are these limits (paper Definition 3.1), so the supremum
  over ``R u {+-inf}`` is the supremum over finite betas;
- ``limit_upper_bound()``: an upper bound on both limits' ``L`` (``inf`` if none is known), which
  lets the solver skip the first limit pass when it cannot pay off.

:func:`solve_beta` returns a :class:`BetaSolution`. The solver works in ``x = sign * beta >= 0``,
where ``f(x) = sign * dL/dbeta`` decreases from ``f(0) > 0`` (``sign`` is the sign of
``dL/dbeta`` at 0), from the analytic Newton step at ``beta = 0``:

- when the behaviour may live on the limit policy's support (``limit_upper_bound()`` above
  ``L0``), the limit pass comes first; if ``dL/dbeta`` keeps its sign up to the limit
  (``LimitValue.dL``), ``L`` increases all the way and the supremum is the exact limit;
- with one beta per pass (``betas_per_pass == 1``): safeguarded Newton with the exact ``f'``
  (outwards until bracketed; inside, the Hermite root of the two newest points or Newton when
  it halves the step, else the intersection of the tangents of the concave ``L``, else
  bisection); with batched passes: a log grid around the first step, then probes around the
  root of the cubic Hermite interpolant of the bracket (:mod:`imitation_meg.core.beta.search`);
- it stops when the Newton decrement at an evaluated point is below ``1e-11`` relative, or two
  estimates of the root agree to that with a negligible predicted error (then ``L`` and the
  expected utility at the root are Hermite-interpolated, without a confirming pass);
- a root at a finite beta is the supremum (``L`` is concave, so it beats the limit); a root on
  the saturated plateau (beyond ``beta * scale = 1e6``, or negligible curvature), or a search
  that found ``L`` increasing up to the largest beta, gives way to the exact limit.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from imitation_meg.core.beta.batched import grid, refine
from imitation_meg.core.beta.protocol import BetaEvaluation, BetaObjective, BetaSolution, LimitValue
from imitation_meg.core.beta.search import (
    MAX_DECADES,
    RTOL,
    SATURATED_X,
    Bracket,
    Point,
    Solver,
    newton,
)

__all__ = [
    "BetaEvaluation",
    "BetaObjective",
    "BetaSolution",
    "LimitValue",
    "solve_beta",
]


def solve_beta(obj: BetaObjective) -> BetaSolution:
    """Maximise the concave ``L(beta)`` of ``obj`` over ``beta in R u {+-inf}`` (see the module
    docstring); deterministic, accurate to about ``1e-11`` relative in ``beta``."""
    scale = float(obj.scale)
    st = _start(obj, scale)
    zero = st.zero
    if scale == 0.0 or abs(zero.dL) <= st.d_tol:
        return st.solution(zero, zero.L, converged=True, at_boundary=False)
    at_limit = _limit_first(obj, st)
    if at_limit is not None:
        return at_limit
    if st.n >= 3:  # batched passes cost about one: grid, then Hermite root with probes
        grid(st, scale)
    else:  # one beta per pass: safeguarded Newton
        newton(st, scale)
    root_hit = st.converged and abs(st.flat.beta) * scale < SATURATED_X  # dL = 0 at finite beta
    if math.isinf(st.bracket.hi) and not root_hit:
        return _increasing_to_the_limit(st, scale)
    if st.n >= 3:
        refine(st)
    return _compare_with_the_limit(st, scale)


def _limit_first(obj: BetaObjective, st: Solver) -> BetaSolution | None:
    """The solution at the limit when ``dL/dbeta`` keeps the sign of ``dL(0)`` up to it (``L``
    increases all the way: no search at all), else None. The limit pass runs only where the
    behaviour may live on the limit policy's support (its bound above ``L(0)``)."""
    zero = st.zero
    if not obj.limit_upper_bound() > zero.L + 1e-12 * max(1.0, abs(zero.L)):
        return None
    lim = st.limit()
    if not math.isnan(lim.dL) and st.sign * lim.dL >= -st.d_tol:
        return _the_limit(st, lim)
    return None


def _start(obj: BetaObjective, scale: float) -> Solver:
    """The solve's state after the pass at ``beta = 0``: its point, the search's direction
    (the sign of ``dL(0)``) and tolerances (1e-12 on ``dL``, relative to the expected utilities,
    and ``RTOL`` on the root, or 10 units of the evaluations' precision ``eps`` (float32
    objectives) if that is coarser)."""
    ev0 = obj.evaluate_zero()
    L0 = float(obj.L0)
    dL0, d2L0, eu_uniform = float(ev0.dL[0]), float(ev0.d2L[0]), float(ev0.model_eu[0])
    zero = Point(0.0, L0, dL0, eu_uniform, d2L0)
    eps = float(getattr(obj, "eps", np.finfo(np.float64).eps))
    d_tol = max(1e-12, 10.0 * eps) * max(
        1.0, abs(obj.expected_utility), abs(eu_uniform), obj.utility_scale
    )
    sign = 1.0 if dL0 > 0 else -1.0
    return Solver(
        obj=obj,
        sign=sign,
        d_tol=d_tol,
        rtol=max(RTOL, 10.0 * eps),
        n=max(1, int(obj.betas_per_pass)),
        x_max=10.0**MAX_DECADES / scale if scale > 0 else math.inf,
        best=dataclasses.replace(zero),
        flat=dataclasses.replace(zero),
        bracket=Bracket(lo=0.0, f_lo=sign * dL0, fp_lo=d2L0),
        zero=zero,
    )


def _the_limit(st: Solver, lim: LimitValue) -> BetaSolution:
    """The supremum at ``beta = sign * inf``: the exact limit of ``L(beta)``."""
    at_inf = Point(st.sign * math.inf, lim.L, math.nan, lim.model_eu, math.nan)
    return st.solution(at_inf, lim.L, converged=True, at_boundary=True)


def _is_flat(p: Point, scale: float) -> bool:
    """Whether ``L`` has flattened to rounding at ``p`` (the soft policies have saturated):
    beyond ``beta * scale = 1e6``, or a negligible curvature ``|d2L| beta^2``. There ``L``
    carries rounding of order ``eps * beta * scale`` per step and the exact limit of ``L(beta)``
    is the better value."""
    x = abs(p.beta)
    return x * scale >= SATURATED_X or (
        x > 0 and math.isfinite(p.d2L) and abs(p.d2L) * x * x <= 1e-9 * max(1.0, abs(p.L))
    )


def _limit_or(st: Solver, candidate: Point, scale: float) -> BetaSolution | None:
    """The limit at ``beta = sign * inf`` if it is at least as good as ``candidate``, else None.

    The limit is exact; a candidate on the saturated plateau (see :func:`_is_flat`) carries
    rounding of order ``eps * beta * scale`` per step, so there the limit is reported.
    """
    lim = st.limit()
    tol = 1e-12 * max(1.0, abs(candidate.L))
    plateau = _is_flat(candidate, scale)
    if math.isfinite(lim.L) and (plateau or candidate.L - tol <= lim.L):
        if plateau:
            return _the_limit(st, lim)
        at_inf = Point(st.sign * math.inf, lim.L, math.nan, lim.model_eu, math.nan)
        return st.solution(at_inf, max(lim.L, candidate.L), converged=True, at_boundary=True)
    return None


def _increasing_to_the_limit(st: Solver, scale: float) -> BetaSolution:
    """``dL`` keeps the sign of ``dL(0)`` up to the largest beta: ``L`` increases towards
    ``beta = sign * inf``, and the supremum is the exact limit of ``L(beta)`` (else, if the
    limit is not finite, the last betas, which reach the supremum once ``dL`` vanishes to
    rounding: ``saturated``)."""
    won = _limit_or(st, st.best, scale)
    if won is not None:
        return won
    return st.solution(st.best, st.best.L, converged=st.saturated(), at_boundary=True)


def _compare_with_the_limit(st: Solver, scale: float) -> BetaSolution:
    """The interior optimum, or the exact limit at ``beta = sign * inf`` where the root lies on
    the saturated plateau.

    ``L`` is concave and the limit is the limit of ``L(beta)``, so a root at a finite beta beats
    it and no limit pass is needed. A root on the saturated plateau (see :func:`_is_flat`) is
    where ``L`` has reached its limit to rounding: then the exact limit is reported.
    """
    best, flat = st.best, st.flat
    if not st.limit_is_below() and _is_flat(flat, scale):
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
    # At a root (the Newton step to it negligible) report the root plus that step's
    # second-order gain: L is flat to rounding there, and the largest L seen may be a
    # neighbour's rounding. Else the largest L seen: where L is nearly linear (|d2L| ~ 0) a dL
    # below tolerance says nothing about the distance to the root.
    near = dec <= max(1e-9, st.rtol) * x
    pick = flat if near else best
    L = pick.L + 0.5 * abs(flat.dL) * dec if near else pick.L
    # A "root" beyond beta * scale = 1e6 is where dL has vanished to rounding while L still
    # tends to its beta -> sign * inf limit (tied hard Q-values): the supremum lies at infinity.
    return st.solution(
        pick,
        L,
        converged=st.converged,
        at_boundary=abs(pick.beta) * scale >= SATURATED_X,
    )
