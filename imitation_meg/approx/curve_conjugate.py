"""The grid of rationalities a soft-value curve lives on, and the convex conjugate on it:
``sup_beta beta J - Lambda(beta)`` for many curves at once, refined between grid points by the
exact maximum of the cubic Hermite interpolant (:mod:`imitation_meg.approx.curve`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["GRID_DECADES", "GRID_STEP", "Conjugate", "beta_grid", "conjugate_on_grid"]

#: Decades of ``|beta| * scale`` the grid spans on each side of 0 (``scale`` the utility unit of
#: the curve: the largest return), and its step in decades.
GRID_DECADES = (-4.0, 6.0)
GRID_STEP = 0.02
#: Relative rounding of the curve's float64 sums (an allowance at large ``|beta| * scale``).
_ROUNDING = 64 * float(np.finfo(np.float64).eps)


def beta_grid(scale: float) -> np.ndarray:
    """The rationalities of a curve of utility unit ``scale``: 0 and ``+-10^d / scale`` for
    ``d`` in :data:`GRID_DECADES`, :data:`GRID_STEP` apart, ascending ``(G,)``.

    Raises:
        ValueError: a scale that is not a positive finite number.
    """
    if not (isinstance(scale, (int, float, np.floating)) and 0 < float(scale) < math.inf):
        raise ValueError(f"a curve's scale must be a positive finite number, got {scale!r}.")
    n = round((GRID_DECADES[1] - GRID_DECADES[0]) / GRID_STEP)
    ups = 10.0 ** np.linspace(GRID_DECADES[0], GRID_DECADES[1], n + 1) / float(scale)
    return np.concatenate([-ups[::-1], [0.0], ups])


class Conjugate(NamedTuple):
    """``sup_beta beta J - Lambda(beta)`` on a grid, for ``B`` curves at once.

    Attributes:
        meg: ``(B,)`` the maxima.
        beta: ``(B,)`` the maximisers.
        below: ``(B,)`` the grid point nearest each maximiser from below.
        at_edge: ``(B,)`` whether the maximum lies at the grid's first or last point (the
            supremum lies beyond the grid).
    """

    meg: np.ndarray
    beta: np.ndarray
    below: np.ndarray
    at_edge: np.ndarray


def conjugate_on_grid(
    betas: np.ndarray, lam: np.ndarray, slope: np.ndarray, J: np.ndarray
) -> Conjugate:
    """``sup_beta beta J_b - Lambda_b(beta)`` for curves ``lam (B, G)`` with slopes
    ``slope (B, G)`` on ``betas (G,)``, at returns ``J (B,)``.

    The grid's best point, then the exact maximum of the cubic Hermite interpolant (values and
    slopes) on the two intervals beside it: where ``Lambda`` is smooth its error is of fourth
    order in the grid's step, and a maximum is insensitive to first order in where it lies.
    """
    lam = np.atleast_2d(lam)
    slope = np.atleast_2d(slope)
    J = np.broadcast_to(np.asarray(J, dtype=np.float64), (lam.shape[0],))
    G = len(betas)
    f = betas[None, :] * J[:, None] - lam
    best = np.argmax(f, axis=1)
    rows = np.arange(lam.shape[0])
    # ties with beta = 0 (a return no model distinguishes from the uniform one's, a constant
    # reward) go to 0: the maximum there is exactly 0, and no rationality does better
    zero = int(np.searchsorted(betas, 0.0))
    tol = _ROUNDING * (np.abs(betas[best] * J) + np.abs(lam[rows, best]) + 1.0)
    best = np.where(f[rows, best] > f[rows, zero] + tol, best, zero)
    meg, beta = f[rows, best].copy(), betas[best].copy()
    for lo in (best - 1, best):
        ok = (lo >= 0) & (lo + 1 < G)
        i0 = np.clip(lo, 0, G - 2)
        i1 = i0 + 1
        val, arg = _hermite_max(
            betas[i0], betas[i1], lam[rows, i0], lam[rows, i1], slope[rows, i0], slope[rows, i1], J
        )
        better = ok & (val > meg)
        meg = np.where(better, val, meg)
        beta = np.where(better, arg, beta)
    below = np.clip(np.searchsorted(betas, beta, side="right") - 1, 0, G - 1)
    at_edge = (best == 0) | (best == G - 1)
    return Conjugate(meg, beta, below, at_edge)


def _hermite_max(
    b0: np.ndarray,
    b1: np.ndarray,
    L0: np.ndarray,
    L1: np.ndarray,
    S0: np.ndarray,
    S1: np.ndarray,
    J: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The maximum over ``[b0, b1]`` of ``b J - H(b)``, ``H`` the cubic Hermite interpolant of
    values ``L`` and slopes ``S`` at the ends, and where it lies (vectorised)."""
    h = b1 - b0
    # f'(t) / 1 for b = b0 + t h: h J - H'(t) = a t^2 + b t + c
    qa = -(6 * L0 + 3 * h * S0 - 6 * L1 + 3 * h * S1)
    qb = -(-6 * L0 - 4 * h * S0 + 6 * L1 - 2 * h * S1)
    qc = h * (J - S0)

    def f(t: np.ndarray) -> np.ndarray:
        h00 = 2 * t**3 - 3 * t**2 + 1
        h10 = t**3 - 2 * t**2 + t
        h01 = -2 * t**3 + 3 * t**2
        h11 = t**3 - t**2
        H = h00 * L0 + h10 * h * S0 + h01 * L1 + h11 * h * S1
        return (b0 + t * h) * J - H

    cands = [np.zeros_like(h), np.ones_like(h)]
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = qb * qb - 4 * qa * qc
        root = np.sqrt(np.maximum(disc, 0.0))
        small = np.abs(qa) <= 1e-14 * (np.abs(qb) + np.abs(qc))
        lin = np.where(qb != 0, -qc / qb, 0.5)
        # the numerically stable pair of roots
        qq = -0.5 * (qb + np.copysign(root, qb))
        r1 = np.where(small, lin, np.where(qa != 0, qq / qa, 0.5))
        r2 = np.where(small, lin, np.where(qq != 0, qc / qq, 0.5))
    for r in (r1, r2):
        r = np.where(np.isfinite(r) & (disc >= 0) | small, r, 0.5)
        cands.append(np.clip(r, 0.0, 1.0))
    vals = np.stack([f(t) for t in cands])  # (4, B)
    k = np.argmax(vals, axis=0)
    cols = np.arange(vals.shape[1])
    t_best = np.stack(cands)[k, cols]
    return vals[k, cols], b0 + t_best * h
