"""The batched strategy of the 1-D solve in beta: a grid in decades, then refinement.

Where a pass over several betas costs about as much as one (small MDPs), :func:`grid` brackets
the root of ``f = sign * dL/dbeta`` on a logarithmic grid of betas and :func:`refine` shrinks
the bracket by passes that evaluate the Hermite root with geometric probes around it. Both move
the state of a :class:`~imitation_meg.core.beta.search.Solver`.
"""

from __future__ import annotations

import math

import numpy as np

from imitation_meg.core.beta.hermite import hermite_root
from imitation_meg.core.beta.search import Bracket, Solver, _bisect, _x0

__all__ = ["grid", "refine"]

# First grid: x0 * 10**-0.8 .. x0 * 10**0.8 around the Newton step at 0.
_GRID_AROUND = (-0.8, 0.8)
# A refinement pass evaluates only the Hermite root once the bracket is this narrow (relative).
_SINGLE_PROBE_REL = 1e-3


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
