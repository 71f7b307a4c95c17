"""Cubic and quintic Hermite interpolation on an interval, and roots of cubics (pure Python).

The 1-D solver (:mod:`imitation_meg.core.beta.solver`) knows ``f``, ``f'`` (and ``L = integral of f``)
at a few points; these helpers turn them into root estimates and interpolated values.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

__all__ = [
    "cubic_hermite",
    "cubic_roots",
    "hermite_root",
    "hermite_secant",
    "quintic_hermite",
    "tangents",
]


def cubic_roots(
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

    knots = _monotone_pieces(c1, c2, c3, u0, u1)
    roots = []
    for a, b in itertools.pairwise(knots):
        pa, pb = p(a), p(b)
        if pa == 0.0 and a > u0:
            roots.append(a)
            continue
        if not (b > a) or pa * pb > 0.0:
            continue
        u = _piece_root(p, dp, a, b, pa, pb)
        if u0 < u < u1:
            roots.append(u)
    return roots


def _monotone_pieces(c1: float, c2: float, c3: float, u0: float, u1: float) -> list[float]:
    """``u0``, ``u1`` and the critical points of ``c0 + c1 u + c2 u^2 + c3 u^3`` between them,
    sorted: the ends of the pieces on which the cubic is monotone."""
    knots = [u0, u1]
    a2, a1, a0 = 3.0 * c3, 2.0 * c2, c1
    if a2 != 0.0:
        disc = a1 * a1 - 4.0 * a2 * a0
        if disc > 0.0:
            sq = math.sqrt(disc)
            knots += [(-a1 - sq) / (2.0 * a2), (-a1 + sq) / (2.0 * a2)]
    elif a1 != 0.0:
        knots.append(-a0 / a1)
    return sorted(u for u in knots if u0 <= u <= u1)


def _piece_root(
    p: Callable[[float], float],
    dp: Callable[[float], float],
    a: float,
    b: float,
    pa: float,
    pb: float,
) -> float:
    """The root of ``p`` on a monotone piece ``[a, b]`` with a sign change (``pa = p(a)``,
    ``pb = p(b)``): safeguarded Newton from the secant root, bisection when a step leaves the
    shrinking bracket, until the step or the bracket is below ``4e-16`` relative."""
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
    return u


def cubic_hermite(y0: float, d0: float, y1: float, d1: float, h: float, t: float) -> float:
    """The cubic Hermite interpolant of ``(y, y')`` at ``0`` and ``h``, at ``t * h``."""
    t2, t3 = t * t, t * t * t
    return (
        y0 * (2 * t3 - 3 * t2 + 1)
        + h * d0 * (t3 - 2 * t2 + t)
        + y1 * (-2 * t3 + 3 * t2)
        + h * d1 * (t3 - t2)
    )


def quintic_hermite(
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


def hermite_root(a: float, fa: float, da: float, b: float, fb: float, db: float) -> float:
    """Root in ``(a, b)`` of the cubic Hermite interpolant of ``f`` (``fa > 0 > fb``), or nan."""
    h = b - a
    if not (h > 0) or not all(map(math.isfinite, (fa, da, fb, db))):
        return math.nan
    # f(a + u h) = c0 + c1 u + c2 u^2 + c3 u^3 on u in [0, 1].
    m0, m1 = da * h, db * h
    c0, c1 = fa, m0
    c2 = 3 * (fb - fa) - 2 * m0 - m1
    c3 = 2 * (fa - fb) + m0 + m1
    real = cubic_roots(c0, c1, c2, c3)
    if not real:
        return math.nan
    # The interpolant may have several roots in (0, 1); take the one nearest the secant root.
    sec = fa / (fa - fb)
    u = min(real, key=lambda v: abs(v - sec))
    return a + u * h


def hermite_secant(
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
    roots = cubic_roots(fa, m0, c2, c3, (lo - a) / h, (hi - a) / h)
    if not roots:
        return math.nan
    return a + h * min(roots, key=lambda u: abs(a + h * u - x))


def tangents(
    lo: float, L_lo: float | None, f_lo: float, hi: float, L_hi: float | None, f_hi: float
) -> float:
    """Where the tangents of the concave ``L`` at ``lo`` and ``hi`` meet (NaN if unknown)."""
    if L_lo is None or L_hi is None or not (f_lo > f_hi):
        return math.nan
    return (L_hi - L_lo - f_hi * hi + f_lo * lo) / (f_lo - f_hi)
