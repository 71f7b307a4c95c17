"""Scoring a policy against a soft-value curve: the score's record (:class:`CurveScore`), the
check of the policy's returns, the pairing of its episodes with the curve's starts (a control
variate), the bootstrap replicates of the maximum, and the allowances for float64 rounding and for
returns no episode showed. :meth:`~imitation_meg.approx.curve.SoftValueCurve.score` puts them
together; every function here takes the curve's arrays: ``betas (G,)``, ``log_z`` and ``slopes``
``(K, G)``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from imitation_meg.approx.curve_conjugate import _ROUNDING, conjugate_on_grid
from imitation_meg.type_aliases import ArrayLike

__all__ = ["CurveScore"]


class CurveScore(NamedTuple):
    """MEG of one policy from a curve and the policy's returns (:meth:`SoftValueCurve.score`).

    Attributes:
        meg: the estimate, clipped to ``[0, certificate]`` (nats).
        low, high: the interval (``z`` bootstrap standard errors and Student's quantile of
            ``curve_se`` on one degree of freedom per unit, added in quadrature, plus the
            curve's bias allowance and rounding at ``beta``), clipped the same way.
        beta: the maximiser (utility units; 0 for a policy whose return is the uniform one's).
        raw: the maximum before clipping.
        bootstrap_se: the bootstrap standard error (the policy's episodes and the curve's
            units drawn again, independently).
        bias: the curve's bias allowance at ``beta``.
        expected_return: the policy's mean return ``J``.
        return_se: its standard error.
        at_edge: the maximum lies at the grid's end (beyond the curve: not trusted).
        in_range: ``J`` lies where the curve is trusted (:meth:`SoftValueCurve.trusted_returns`).
        ess: the curve's effective sample size at ``beta`` (inf for an exact curve).
        replicates: ``(n_boot,)`` bootstrap replicates of the maximum.
        start_return: the policy's mean return over the curve's own starts, from the episodes
            that began there (NaN without them): where the start decides much of the return,
            this, not ``expected_return``, is what the curve's returns found compare with.
        curve_se: the noise of the curve at ``beta`` that its populations show and the
            bootstrap over its units does not see (0 with many units that spread more than
            their noise, or an exact curve; see ``SoftValueCurve._noise_beyond_units``).
    """

    meg: float
    low: float
    high: float
    beta: float
    raw: float
    bootstrap_se: float
    bias: float
    expected_return: float
    return_se: float
    at_edge: bool
    in_range: bool
    ess: float
    replicates: np.ndarray
    start_return: float = math.nan
    curve_se: float = 0.0


def _checked_returns(returns: ArrayLike | float, confidence: float) -> np.ndarray:
    """The episodes' returns ``(n,)`` as float64, checked with the confidence.

    Raises:
        ValueError: no or non-finite returns, a confidence outside ``(0, 1)``.
    """
    r = np.atleast_1d(np.asarray(returns, dtype=np.float64)).reshape(-1)
    if r.size == 0 or not np.all(np.isfinite(r)):
        raise ValueError(
            f"score needs the finite returns of at least one episode, got {r.size} values"
            + ("" if r.size == 0 else f" ({int((~np.isfinite(r)).sum())} not finite)")
            + "."
        )
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")
    return r


def _check_n_boot(n_boot: Any, noiseless: bool) -> None:
    """Raise unless ``n_boot`` is an integer, at least 2 where the score has noise.

    Raises:
        TypeError: not an integer.
        ValueError: fewer than 2 replicates for a noisy score.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)):
        raise TypeError(f"n_boot must be an integer, got {n_boot!r}.")
    if not noiseless and n_boot < 2:
        raise ValueError(
            f"n_boot={n_boot}: an interval needs at least 2 bootstrap replicates (500 by default)."
        )


class _Paired(NamedTuple):
    """Episodes that began at a curve's starts: their indices per start, the starts' mean
    returns ``(K,)``, and the indices of the episodes from fresh starts."""

    groups: list[np.ndarray]
    means: np.ndarray
    fresh: np.ndarray


def paired_units(units: Any, r: np.ndarray, K: int) -> _Paired | None:
    """The episodes (returns ``r (n,)``) that began at the ``K`` starts of a curve, per start
    (None without any).

    Raises:
        ValueError: units of the wrong shape or range, or a start with no episode.
    """
    if units is None:
        return None
    u = _checked_units(units, r, K)
    if not (u >= 0).any():
        return None
    groups = [np.flatnonzero(u == k) for k in range(K)]
    if any(len(g) == 0 for g in groups):
        raise ValueError("units: every start of the curve needs an episode, or none does.")
    means = np.array([r[g].mean() for g in groups])
    return _Paired(groups, means, np.flatnonzero(u < 0))


def _checked_units(units: Any, r: np.ndarray, K: int) -> np.ndarray:
    """``units`` as an integer array of ``r``'s shape ``(n,)`` with values in ``[-1, K)``.

    Raises:
        ValueError: units of the wrong shape, kind or range.
    """
    u = np.asarray(units)
    if u.shape != r.shape or u.dtype.kind not in "iu" or u.min() < -1 or u.max() >= K:
        raise ValueError(
            f"units must give each of the {r.size} episodes its start, an integer in "
            f"[0, {K}) or -1 for a fresh start; got shape {u.shape}."
        )
    return u


def adjusted(
    log_z: np.ndarray, slopes: np.ndarray, w: np.ndarray, h: np.ndarray, J: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``Lambda`` and its slope ``(B, G)`` with the control variate: unit weights
    ``w (B, K)`` (rows summing to 1), the units' mean returns ``h (B, K)``, the policy's
    mean return ``J (B,)``."""
    gbar, sbar = w @ log_z, w @ slopes
    hbar = (w * h).sum(1)
    dh = w * (h - hbar[:, None])
    var = (dh * (h - hbar[:, None])).sum(1)
    safe = np.where(var > 0, var, 1.0)[:, None]
    b = np.where(var[:, None] > 0, (dh @ log_z) / safe, 0.0)
    bs = np.where(var[:, None] > 0, (dh @ slopes) / safe, 0.0)
    gap = (hbar - J)[:, None]
    return gbar - b * gap, sbar - bs * gap


def paired_bootstrap(
    betas: np.ndarray,
    log_z: np.ndarray,
    slopes: np.ndarray,
    r: np.ndarray,
    paired: _Paired,
    n_boot: int,
    seed: int,
) -> np.ndarray:
    """Replicates ``(n_boot,)`` of the maximum with the control variate: the starts drawn again
    (for the curve and the policy together), the episodes within each start, and the fresh
    episodes."""
    rng = np.random.default_rng([int(seed), 11])
    K = log_z.shape[0]
    counts = rng.multinomial(K, np.full(K, 1.0 / K), size=n_boot)  # (B, K)
    h = np.stack(
        [rng.multinomial(len(g), np.full(len(g), 1.0 / len(g)), size=n_boot) @ r[g] / len(g)
         for g in paired.groups],
        axis=1,
    )  # fmt: skip
    sizes = np.array([len(g) for g in paired.groups])
    total = (counts * sizes * h).sum(1)
    n = (counts * sizes).sum(1).astype(np.float64)
    f = paired.fresh
    if len(f):
        total = total + rng.multinomial(len(f), np.full(len(f), 1.0 / len(f)), size=n_boot) @ r[f]
        n = n + len(f)
    lam, slope = adjusted(log_z, slopes, counts / K, h, total / n)
    return conjugate_on_grid(betas, lam, slope, total / n).meg


def bootstrap(
    betas: np.ndarray,
    log_z: np.ndarray,
    slopes: np.ndarray,
    r: np.ndarray,
    n_boot: int,
    seed: int,
    exact_return: bool,
) -> np.ndarray:
    """Replicates ``(n_boot,)`` of the maximum: the episodes and the units drawn again."""
    rng = np.random.default_rng([int(seed), 7])
    n, K = r.size, log_z.shape[0]
    if exact_return or n == 1:
        Jb = np.full(n_boot, r.mean())
    else:
        Jb = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot) @ r / n
    if K > 1:
        w = rng.multinomial(K, np.full(K, 1.0 / K), size=n_boot) / K  # (B, K)
        lam, slope = w @ log_z, w @ slopes
    else:
        lam = np.broadcast_to(log_z.mean(0), (n_boot, len(betas)))
        slope = np.broadcast_to(slopes.mean(0), (n_boot, len(betas)))
    return conjugate_on_grid(betas, lam, slope, Jb).meg


def rounding(returns_found: tuple[float, float], J: float, beta: float, lam_at: float) -> float:
    """The float64 rounding of the conjugate's sums at ``beta`` (terms as large as
    ``|beta| x`` the returns, and the curve's value ``lam_at`` there)."""
    scale = float(max(abs(returns_found[0]), abs(returns_found[1]), abs(J), 1e-300))
    out = _ROUNDING * (1.0 + (abs(beta) if math.isfinite(beta) else 0.0) * scale)
    return out + _ROUNDING * abs(lam_at)


def unseen(
    betas: np.ndarray,
    returns_found: tuple[float, float],
    r: np.ndarray,
    confidence: float,
    exact_return: bool,
    lam: np.ndarray,
    slope: np.ndarray,
) -> float | None:
    """Where all ``n`` episodes returned the same, the maximum (curve ``lam``, ``slope``
    ``(1, G)``) at the return the policy may still have: with the chance of an episode ending
    otherwise at its upper confidence bound ``1 - ((1 - confidence) / 2)^(1/n)`` (none in
    ``n``), and that episode ending at the other end of the returns the curve found (None where
    the returns spread, or are exact)."""
    if exact_return or r.size < 2 or np.ptp(r) > 0:
        return None
    J = float(r[0])
    lo, hi = returns_found
    other = lo if abs(J - hi) <= abs(J - lo) else hi
    if other == J:
        return None
    p = 1.0 - ((1.0 - float(confidence)) / 2.0) ** (1.0 / r.size)
    shifted = np.array([J + p * (other - J)])
    return float(conjugate_on_grid(betas, lam, slope, shifted).meg[0])


def clipped(raw: float, low: float, high: float, certificate: float) -> tuple[float, float, float]:
    """The estimate and its interval clipped to ``[0, certificate]`` (the interval's ends with
    a relative ``1e-9`` of slack above the certificate)."""
    top = max(float(certificate), 0.0)
    ceiling = top + 1e-9 * max(1.0, top) if math.isfinite(top) else math.inf
    return (
        float(min(max(raw, 0.0), top)),
        float(min(max(low, 0.0), ceiling)),
        float(min(max(high, 0.0), ceiling)),
    )
