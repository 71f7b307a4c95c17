"""The interval of each stage's fits (a bootstrap over episodes, the spread of the fits, and
the refits' moves of the estimate), the stages' curves, whether the fitting stages have
settled, and the estimate against its bounds (normalised, or above the certificate no normalised
model can exceed).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from imitation_meg.approx.ensemble import fit_maxima

__all__ = [
    "SETTLE_SHARE",
    "UNSETTLED_NOTE",
    "exceeds_certificate",
    "fits_spread",
    "normalise",
    "stage_curves",
    "stage_interval",
    "stage_intervals",
    "stages_settled",
]

#: The stages have settled when the last refit moved the estimate by at most its own sampling
#: half-width or this share of the scale (``H log|A|``; the certificate for continuous actions),
#: whichever is larger (:func:`stages_settled`).
SETTLE_SHARE = 0.01
#: What the command line prints under its table when the stages have not settled.
UNSETTLED_NOTE = (
    "The fitting stages had not settled: the last refit still moved the estimate by more than "
    "its sampling error, so the interval may be too narrow. Refit more (refine=4 in Python, "
    "--approx-option refine=4 on the command line) and compare."
)


class _Interval(NamedTuple):
    """One stage's estimate and interval (see :class:`ApproxMEGResult`)."""

    mean: float  # the mean of the fits' maxima, before clipping
    estimate: float  # ``mean`` clipped to ``[0, certificate]``
    low: float
    high: float
    shift: float  # ``mean`` minus the first stage's (0 for the first stage, or with no refits)
    allowance: float  # largest ``|mean - m|`` over the earlier stages' means (0: none)
    sampling: float  # the half-width before the allowance (bootstrap and fits' spread)
    replicates: np.ndarray  # bootstrap replicates of ``mean``
    se_boot: float
    se_models: float
    singles: np.ndarray  # ``(K,)`` the fits' maxima


def stages_settled(stages: Sequence[float], sampling: float, scale: float) -> bool | None:
    """Whether the refits have settled: the last one moved the estimate (``stages``, the
    estimate after the first fit and after each refit) by at most the last stage's sampling
    half-width ``sampling`` or ``SETTLE_SHARE * scale``, whichever is larger. ``None`` with
    fewer than two stages (no refit to compare)."""
    if len(stages) < 2:
        return None
    return bool(abs(float(stages[-1]) - float(stages[-2])) <= _settle_tolerance(sampling, scale))


def _settle_tolerance(sampling: float, scale: float) -> float:
    """The largest last move of settled stages (a NaN sampling half-width counts as 0)."""
    return max(float(sampling) if math.isfinite(sampling) else 0.0, SETTLE_SHARE * float(scale))


def stage_interval(
    mats: dict[str, np.ndarray],
    n_models: int,
    *,
    earlier: Sequence[float],
    certificate: float,
    n_boot: int,
    confidence: float,
    s_boot: np.random.SeedSequence,
) -> _Interval:
    """The estimate of one stage's fits and its interval (``earlier``: the estimates of the
    stages before it, empty for the first; the largest move from them widens the interval)."""
    from statistics import NormalDist

    from scipy.special import stdtrit  # Student t quantile; lighter to import than scipy.stats

    K = n_models
    n = next(iter(mats.values())).shape[0]
    singles = fit_maxima(mats, K)
    mean = float(singles.mean())
    # the same draws at every stage (a fresh generator from the same seed), so each stage's
    # interval is the one a run stopped there reports
    gb = np.random.default_rng(s_boot)
    reps = np.empty(n_boot)
    for i in range(n_boot):
        w = np.bincount(gb.integers(0, n, size=n), minlength=n) / n
        reps[i] = float(fit_maxima(mats, K, w).mean())
    se_boot = float(reps.std(ddof=1)) if n_boot > 1 else math.nan
    se_models = float(singles.std(ddof=1) / math.sqrt(K)) if K > 1 else 0.0
    # The rollout part is a bootstrap over many episodes (normal quantile); the model part is
    # estimated from K fits only (Student t with K - 1 degrees of freedom).
    level = 0.5 + float(confidence) / 2
    z = NormalDist().inv_cdf(level)
    t_q = float(stdtrit(K - 1, level)) if K > 1 else 0.0
    # Error every fit shares is not in the spread of the fits. The refits' moves of the
    # estimate measure how far from converged the fits still were: the largest move from any
    # earlier stage is added as an allowance (the first and last stages may agree while the ones
    # between moved).
    shift = mean - earlier[0] if earlier else 0.0
    allowance = max((abs(mean - m) for m in earlier), default=0.0)
    sampling = math.hypot(z * (se_boot if math.isfinite(se_boot) else 0.0), t_q * se_models)
    half = sampling + allowance
    cert = certificate
    return _Interval(
        mean=mean,
        estimate=min(max(mean, 0.0), cert),
        low=min(max(mean - half, 0.0), cert) if n_boot > 1 else math.nan,
        high=min(max(mean + half, 0.0), cert) if n_boot > 1 else math.nan,
        shift=shift,
        allowance=allowance,
        sampling=sampling,
        replicates=reps,
        se_boot=se_boot,
        se_models=se_models,
        singles=singles,
    )


def _finite(x: float) -> float:
    """``x`` where finite and positive, else 0."""
    return x if math.isfinite(x) and x > 0 else 0.0


def normalise(meg: float, bound: float, certificate: float) -> float:
    """``meg / bound``, or where the bound is infinite (a box) ``meg / certificate`` (0 when
    that is 0, NaN when it is infinite); 0 for a bound of 0."""
    if math.isinf(bound):
        if certificate == 0:
            return 0.0
        return meg / certificate if math.isfinite(certificate) else math.nan
    return float(meg / bound) if bound > 0 else 0.0


def exceeds_certificate(estimate: float, certificate: float) -> bool:
    """Whether a stage's mean maximum (before clipping) lies above the certificate, which no
    normalised model can reach (Gibbs' inequality): the quadrature failed at that beta."""
    return bool(estimate > certificate + 1e-6 * max(1.0, abs(certificate)))


def stage_intervals(
    scans: list[tuple[np.ndarray, dict[str, np.ndarray]]],
    K: int,
    cert: float,
    n_boot: int,
    confidence: float,
    s_boot: np.random.SeedSequence,
) -> list[_Interval]:
    """Each stage's estimate and interval, widened by the moves from the stages before it."""
    interval_of = functools.partial(
        stage_interval,
        n_models=K,
        certificate=cert,
        n_boot=n_boot,
        confidence=confidence,
        s_boot=s_boot,
    )
    intervals: list[_Interval] = []
    for _, stage_mats in scans:
        intervals.append(interval_of(stage_mats, earlier=[i.mean for i in intervals]))
    return intervals


def fits_spread(last: _Interval, K: int) -> tuple[float, float]:
    """The standard deviation of the ``K`` fits' maxima and the standard error of their mean
    (NaN for one fit)."""
    if K > 1:
        return float(last.singles.std(ddof=1)), last.se_models
    return math.nan, math.nan


def stage_curves(
    scans: list[tuple[np.ndarray, dict[str, np.ndarray]]], K: int
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Per stage its rationalities ``(G,)`` and each fit's curve averaged over episodes
    ``(K, G)``."""
    return tuple(
        (np.asarray(b, dtype=float), np.stack([m[str(k)].mean(0) for k in range(K)]))
        for b, m in scans
    )
