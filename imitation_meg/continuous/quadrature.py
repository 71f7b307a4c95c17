"""Quadrature rules for integrals over bounded action boxes and over Gaussian action laws.

Everything MEG needs of a continuous action is an integral over the action: the soft value
``(1/beta) log int exp(beta Q(s, a)) u(a) da`` over the box, and expectations
``int pi(a | s) f(a) da`` under the scored policy. This module gives them as rules: points
``(M, d)`` with weights ``(M,)``.

- :func:`box_rule`: composite Gauss-Legendre on a box (``panels`` equal panels per dimension,
  ``nodes`` points each; a tensor product in 2-D and 3-D). The weights sum to the box's volume.
  For an integrand analytic on the box the error falls exponentially with ``nodes``; doubling
  the panels is how the callers measure it (see :func:`imitation_meg.continuous.meg_continuous`).
- :func:`squashed_gaussian_rule`: the law of ``low + (tanh(g) + 1) (high - low) / 2`` with
  ``g ~ N(mean, std^2)`` per dimension (SAC's squashed Gaussian, rescaled to the box): composite
  Gauss-Legendre in the pre-squash variable ``g`` over ``mean +- 8.5 std`` (the mass outside is
  below 2e-17), with panel breaks added at the integers in ``[-9, 9]`` where ``tanh`` still
  varies, so wide and narrow Gaussians are both resolved.
- :func:`clipped_gaussian_rule`: the law of ``clip(g, low, high)`` (PPO's Gaussian as SB3 executes
  it): point masses ``Phi((low - mean) / std)`` at ``low`` and ``Phi((mean - high) / std)`` at
  ``high``, and the density on the inside by composite Gauss-Legendre over the part of
  ``mean +- 8.5 std`` inside the box.

The Gaussian rules are products over dimensions (SB3's Gaussians have diagonal covariances) and
batched over states: ``mean``, ``std`` of shape ``(n, d)`` give points ``(n, M, d)`` and
probability weights ``(n, M)`` that sum to 1.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch as th

from imitation_meg.type_aliases import AnyTensor

__all__ = [
    "GAUSS_RANGE",
    "BoxRule",
    "MeasureRule",
    "box_rule",
    "clipped_gaussian_rule",
    "composite_legendre",
    "gauss_legendre",
    "product_rule",
    "squashed_gaussian_rule",
]

#: Half-width of the pre-squash / pre-clip range covered, in standard deviations.
GAUSS_RANGE = 8.5
#: The integers where ``tanh`` still varies: panel breaks of the squashed rule.
_TANH_BREAKS = np.arange(-9.0, 9.5, 1.0)


class BoxRule(NamedTuple):
    """A rule on a box: ``sum_j weights[j] f(points[j]) ~ int_box f(a) da``.

    Attributes:
        points: ``(N, d)`` float64.
        weights: ``(N,)`` float64, summing to the box's volume.
        panels: panels per dimension.
        nodes: Gauss-Legendre points per panel and dimension.
    """

    points: th.Tensor
    weights: th.Tensor
    panels: int
    nodes: int

    @property
    def volume(self) -> float:
        return float(self.weights.sum())


class MeasureRule(NamedTuple):
    """Probability laws of actions for a batch of ``n`` states as rules:
    ``E[f(a)] ~ sum_k weights[i, k] f(points[i, k])`` for state ``i``.

    Attributes:
        points: ``(n, M, d)`` float64 actions (in the box).
        weights: ``(n, M)`` float64 probabilities, each row summing to 1.
        kl: ``(n,)`` float64 ``KL(pi(. | s) || u)`` against the uniform density ``u`` on the box,
            ``inf`` where the law has point masses (clipped Gaussians).
    """

    points: th.Tensor
    weights: th.Tensor
    kl: th.Tensor


@functools.lru_cache(maxsize=64)
def _leggauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return x, w


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n``-point Gauss-Legendre rule on ``[-1, 1]``: nodes ``(n,)`` and weights ``(n,)``
    (exact for polynomials of degree ``2n - 1``).

    Raises:
        ValueError: ``n < 1``.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the number of Gauss-Legendre nodes must be an integer >= 1, got {n!r}.")
    x, w = _leggauss(int(n))
    return x.copy(), w.copy()


def composite_legendre(breaks: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n``-point Gauss-Legendre on each panel ``[breaks[i], breaks[i + 1]]``.

    Args:
        breaks: ``(P + 1,)`` increasing panel ends.
        n: nodes per panel.

    Returns:
        nodes ``(P n,)`` and weights ``(P n,)`` (summing to ``breaks[-1] - breaks[0]``).
    """
    x, w = gauss_legendre(n)
    b = np.asarray(breaks, dtype=np.float64)
    half = 0.5 * np.diff(b)
    mid = 0.5 * (b[1:] + b[:-1])
    nodes = (mid[:, None] + half[:, None] * x[None, :]).reshape(-1)
    weights = (half[:, None] * w[None, :]).reshape(-1)
    return nodes, weights


def box_rule(low: np.ndarray, high: np.ndarray, *, nodes: int = 16, panels: int = 4) -> BoxRule:
    """Composite Gauss-Legendre on the box ``[low, high]`` (a tensor product over dimensions).

    Args:
        low, high: ``(d,)`` bounds, ``low < high``, ``d <= 3``.
        nodes: Gauss-Legendre points per panel and dimension.
        panels: equal panels per dimension.

    Returns:
        :class:`BoxRule` with ``(panels * nodes) ** d`` points.

    Raises:
        ValueError: bad bounds, ``d > 3`` (the tensor product grows as ``n ** d``; use sampling
            beyond) or bad counts.
    """
    lo = np.asarray(low, dtype=np.float64).reshape(-1)
    hi = np.asarray(high, dtype=np.float64).reshape(-1)
    if lo.shape != hi.shape or lo.size == 0 or not np.all(np.isfinite(lo) & np.isfinite(hi)):
        raise ValueError(f"the box needs finite low / high of one shape (d,), got {lo}, {hi}.")
    if not np.all(hi > lo):
        raise ValueError(f"the box needs low < high in every dimension, got {lo}, {hi}.")
    if lo.size > 3:
        raise ValueError(
            f"a tensor-product rule in {lo.size} dimensions has (panels * nodes) ** {lo.size} "
            "points; the quadrature paths take 1 to 3 action dimensions."
        )
    if isinstance(panels, bool) or not isinstance(panels, (int, np.integer)) or panels < 1:
        raise ValueError(f"panels must be an integer >= 1, got {panels!r}.")
    per_dim = [
        composite_legendre(np.linspace(lo[k], hi[k], int(panels) + 1), nodes)
        for k in range(lo.size)
    ]
    pts, wts = product_rule(
        [th.as_tensor(x).view(1, -1) for x, _ in per_dim],
        [th.as_tensor(w).view(1, -1) for _, w in per_dim],
    )
    return BoxRule(pts[0], wts[0], int(panels), int(nodes))


def product_rule(points: list[th.Tensor], weights: list[th.Tensor]) -> tuple[th.Tensor, th.Tensor]:
    """The tensor product of per-dimension rules, batched over ``n`` rows.

    Args:
        points: ``d`` tensors ``(n, m_k)`` (one per dimension).
        weights: ``d`` tensors ``(n, m_k)``.

    Returns:
        points ``(n, prod m_k, d)`` and weights ``(n, prod m_k)`` (the first dimension varies
        slowest).
    """
    n = points[0].shape[0]
    d = len(points)
    grids = []
    w = th.ones(n, 1, dtype=th.float64)
    for k in range(d):
        grids.append(points[k].to(th.float64))
        w = (w.unsqueeze(2) * weights[k].to(th.float64).unsqueeze(1)).reshape(n, -1)
    sizes = [g.shape[1] for g in grids]
    cols = []
    for k, g in enumerate(grids):
        shape = [n] + [1] * d
        shape[1 + k] = sizes[k]
        cols.append(g.reshape(shape).expand(n, *sizes).reshape(n, -1))
    return th.stack(cols, dim=-1), w


def _normal_pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return np.asarray(ndtr(z), dtype=np.float64)


def _check_gaussian(mean: AnyTensor, std: AnyTensor) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(th.as_tensor(mean, dtype=th.float64).cpu(), dtype=np.float64)
    s = np.asarray(th.as_tensor(std, dtype=th.float64).cpu(), dtype=np.float64)
    if m.ndim != 2 or m.shape != s.shape:
        raise ValueError(f"mean and std must both be (n, d), got {m.shape} and {s.shape}.")
    if not np.all(np.isfinite(m)):
        raise ValueError(
            f"a Gaussian action law needs finite means, got {int(np.sum(np.isnan(m)))} NaN and "
            f"{int(np.sum(np.isinf(m)))} infinite mean(s) of {m.size}; a NaN mean comes from a "
            "NaN observation or a diverged network."
        )
    if not np.all(np.isfinite(s)) or not np.all(s > 0):
        raise ValueError(
            "a Gaussian action law needs positive finite standard deviations, got std in "
            f"[{np.nanmin(s, initial=np.inf):.3g}, {np.nanmax(s, initial=-np.inf):.3g}] "
            f"({int(np.sum(np.isnan(s)))} NaN); a zero std is a deterministic policy, which "
            "has no density (pass noise_std= for a smoothed one)."
        )
    return m, s


def _squashed_1d(
    mu: float, sd: float, n: int, panels: int, extra_breaks: bool = True
) -> tuple[np.ndarray, np.ndarray, float]:
    """Pre-squash nodes ``g``, probability weights, and ``E[log(1 - tanh(g)^2)]``."""
    lo, hi = mu - GAUSS_RANGE * sd, mu + GAUSS_RANGE * sd
    breaks = np.linspace(lo, hi, panels + 1)
    if extra_breaks:
        inner = _TANH_BREAKS[(lo < _TANH_BREAKS) & (hi > _TANH_BREAKS)]
        breaks = np.unique(np.concatenate([breaks, inner]))
    g, w = composite_legendre(breaks, n)
    p = w * _normal_pdf((g - mu) / sd) / sd
    p = p / p.sum()
    a = np.abs(g)
    log_jac = 2.0 * (math.log(2.0) - a - np.log1p(np.exp(-2.0 * a)))  # log(1 - tanh(g)^2)
    return g, p, float(p @ log_jac)


def squashed_gaussian_rule(
    mean: AnyTensor,
    std: AnyTensor,
    low: np.ndarray,
    high: np.ndarray,
    *,
    extra_breaks: bool = True,
    nodes: int = 8,
    panels: int = 16,
) -> MeasureRule:
    """The law of ``low + (tanh(g) + 1) (high - low) / 2``, ``g ~ N(mean, diag(std^2))``.

    Args:
        mean, std: ``(n, d)`` pre-squash Gaussian parameters.
        low, high: ``(d,)`` the box.
        nodes, panels: Gauss-Legendre points per panel, panels over ``mean +- 8.5 std`` (more
            panels are added at the integers of ``[-9, 9]`` inside that range, unless
            ``extra_breaks=False``: a lighter rule for wide Gaussians).

    Returns:
        :class:`MeasureRule`; ``kl`` is ``KL(pi || u) = sum_k (log 2 - h(N(mean_k, std_k^2))
        - E[log(1 - tanh(g_k)^2)])`` (independent of the box's size).
    """

    def one(mu: float, sd: float, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray, float]:
        g, p, e_jac = _squashed_1d(mu, sd, nodes, panels, extra_breaks)
        h_gauss = 0.5 * math.log(2.0 * math.pi * math.e * sd**2)
        x = lo + (np.tanh(g) + 1.0) * 0.5 * (hi - lo)
        return x, p, math.log(2.0) - h_gauss - e_jac

    return _per_dimension(mean, std, low, high, one)


def _clipped_1d(
    mu: float, sd: float, lo: float, hi: float, n: int, panels: int
) -> tuple[np.ndarray, np.ndarray]:
    """Atoms at ``lo`` and ``hi`` and the inside density: points and probability weights."""
    a = max(lo, mu - GAUSS_RANGE * sd)
    b = min(hi, mu + GAUSS_RANGE * sd)
    p_lo = float(_normal_cdf(np.array((lo - mu) / sd)))
    p_hi = float(_normal_cdf(np.array((mu - hi) / sd)))
    if b > a:
        x, w = composite_legendre(np.linspace(a, b, panels + 1), n)
        p = w * _normal_pdf((x - mu) / sd) / sd
    else:  # the whole law lies beyond one bound: two atoms only
        x, p = np.zeros(0), np.zeros(0)
    pts = np.concatenate([[lo], x, [hi]])
    wts = np.concatenate([[p_lo], p, [p_hi]])
    return pts, wts / wts.sum()


def clipped_gaussian_rule(
    mean: AnyTensor,
    std: AnyTensor,
    low: np.ndarray,
    high: np.ndarray,
    *,
    nodes: int = 8,
    panels: int = 16,
) -> MeasureRule:
    """The law of ``clip(g, low, high)``, ``g ~ N(mean, diag(std^2))`` (point masses on the
    bounds). ``kl`` is ``inf``: the law has point masses, so it has no density on the box.

    Args:
        mean, std: ``(n, d)`` in the box's units.
        low, high: ``(d,)`` the box.
        nodes, panels: Gauss-Legendre points per panel, panels over the part of
            ``mean +- 8.5 std`` inside the box.
    """

    def one(mu: float, sd: float, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray, float]:
        x, p = _clipped_1d(mu, sd, lo, hi, nodes, panels)
        return x, p, math.inf

    return _per_dimension(mean, std, low, high, one)


def _per_dimension(
    mean: AnyTensor,
    std: AnyTensor,
    low: np.ndarray,
    high: np.ndarray,
    one: Callable[[float, float, float, float], tuple[np.ndarray, np.ndarray, float]],
) -> MeasureRule:
    """A product over dimensions of 1-D rules ``one(mean, std, low, high) -> (points, weights,
    KL term)``, for every state (the KL terms add up over dimensions)."""
    m, s = _check_gaussian(mean, std)
    lo = np.asarray(low, dtype=np.float64).reshape(-1)
    hi = np.asarray(high, dtype=np.float64).reshape(-1)
    n, d = m.shape
    pts: list[list[np.ndarray]] = [[] for _ in range(d)]
    wts: list[list[np.ndarray]] = [[] for _ in range(d)]
    kl = np.zeros(n)
    for i in range(n):
        for k in range(d):
            x, p, term = one(float(m[i, k]), float(s[i, k]), float(lo[k]), float(hi[k]))
            pts[k].append(x)
            wts[k].append(p)
            kl[i] += term
    return _assemble(pts, wts, th.as_tensor(kl))


def _assemble(
    pts: list[list[np.ndarray]], wts: list[list[np.ndarray]], kl: th.Tensor
) -> MeasureRule:
    """Per-state, per-dimension 1-D rules (padded to a common length with zero weights) as one
    batched product rule."""
    d = len(pts)
    n = len(pts[0])
    cols_p, cols_w = [], []
    for k in range(d):
        m = max(len(x) for x in pts[k])
        P = np.zeros((n, m))
        W = np.zeros((n, m))
        for i in range(n):
            x, w = pts[k][i], wts[k][i]
            P[i, : len(x)] = x
            P[i, len(x) :] = x[-1]  # padding: a repeated point with weight 0
            W[i, : len(w)] = w
        cols_p.append(th.as_tensor(P))
        cols_w.append(th.as_tensor(W))
    points, weights = product_rule(cols_p, cols_w)
    return MeasureRule(points, weights, kl.to(th.float64))
