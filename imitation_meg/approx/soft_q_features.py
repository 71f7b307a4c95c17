"""What a soft Q-network sees and how it averages: the time and rationality features of its
inputs, the prior over rationalities it is trained on, and the soft means over actions (exact
over a finite set, a rule over a bounded box).

The model family these serve is described in :mod:`imitation_meg.approx.soft_q`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
import torch as th

from imitation_meg.continuous.quadrature import box_rule
from imitation_meg.continuous.soft_vi import soft_mean as weighted_soft_mean

__all__ = [
    "BETA_SCALES",
    "TIME_SCALES",
    "ActionGrid",
    "BetaPrior",
    "TimeTable",
    "action_grid",
    "beta_features",
    "row_soft_mean",
    "soft_mean",
    "time_features",
]

#: Scales (decisions) of the time-to-go features ``exp(-(H - t - 1) / c)``.
TIME_SCALES = (1.0, 3.0, 10.0)

#: Scales ``c`` of the rationality features ``b / (c + |b|)`` (normalised units).
BETA_SCALES = (0.03, 0.3, 3.0, 30.0, 300.0, 3000.0)


def time_features(t: th.Tensor, horizon: int, last_steps: int = 0) -> th.Tensor:
    """``(n, 1 + len(TIME_SCALES) + last_steps)``: the time-to-go fraction ``(H - t) / H``,
    ``exp(-(H - t - 1) / c)``, which resolve the last decisions, where soft-optimal policies
    change fastest with time, whatever the horizon, and indicators of the last ``last_steps``
    decisions (``H - t - 1 = 0, 1, ...``), which let a network change its values from one of
    them to the next without smoothing the change over its neighbours."""
    left = (horizon - t).to(th.float32).reshape(-1, 1)
    c = th.tensor(TIME_SCALES, dtype=th.float32, device=t.device)
    feats = [left / horizon, th.exp(-(left - 1).clamp(min=0) / c)]
    if last_steps:
        last = th.arange(last_steps, dtype=th.float32, device=t.device)
        feats.append((left - 1 == last).to(th.float32))
    return th.cat(feats, dim=1)


class TimeTable:
    """:func:`time_features` of every decision ``t = 0..H`` computed once, looked up per row
    (the same numbers: the features are elementwise in ``t``). Times outside ``[0, H]`` or
    non-integer times are computed directly."""

    def __init__(self, horizon: int, last_steps: int = 0) -> None:
        self.horizon, self.last_steps = int(horizon), int(last_steps)
        self.table = time_features(th.arange(self.horizon + 1), self.horizon, self.last_steps)

    def __call__(self, t: th.Tensor) -> th.Tensor:
        if t.is_floating_point() or (
            t.numel() and (int(t.min()) < 0 or int(t.max()) > self.horizon)
        ):
            return time_features(t, self.horizon, self.last_steps)
        return self.table.to(t.device)[t.reshape(-1)]


def beta_features(b: th.Tensor) -> th.Tensor:
    """Bounded features ``(n, len(BETA_SCALES))`` of normalised rationalities ``b (n,)`` (+-inf ok)."""
    b = b.reshape(-1, 1)
    c = th.tensor(BETA_SCALES, dtype=b.dtype, device=b.device)
    inf = th.isinf(b)
    bf = th.where(inf, th.zeros_like(b), b)
    return th.where(inf, th.sign(b).expand(-1, c.numel()), bf / (c + bf.abs()))


def soft_mean(y: th.Tensor, b: th.Tensor) -> th.Tensor:
    """``m_b(y) = (1/b) log mean_a exp(b y_a)`` per row: ``y (n, A)``, ``b (n,)`` -> ``(n,)``.

    Exact limits: the mean at ``b = 0``, the max at ``+inf``, the min at ``-inf``. Small
    ``|b| * spread`` uses ``log1p(mean(expm1(.)))``; the work is done in float64 (the result has
    ``y``'s dtype).
    """
    out_dtype = y.dtype
    y = y.double()
    b = b.reshape(-1, 1).double()
    mean = y.mean(-1, keepdim=True)
    d = y - mean
    finite = th.isfinite(b)
    bf = th.where(finite, b, th.zeros_like(b))
    z = bf * d
    small = (z.abs().amax(-1, keepdim=True) < 1.0).expand_as(z)
    safe_b = th.where(bf == 0, th.ones_like(bf), bf).squeeze(-1)
    zs = th.where(small, z, th.zeros_like(z))
    s_small = th.log1p(th.expm1(zs).mean(-1)) / safe_b
    zl = th.where(small, th.zeros_like(z), z)
    m = zl.amax(-1, keepdim=True)
    s_large = (m.squeeze(-1) + th.log(th.exp(zl - m).mean(-1))) / safe_b
    out = mean.squeeze(-1) + th.where(small[:, 0], s_small, s_large)
    out = th.where(bf.squeeze(-1) == 0, mean.squeeze(-1), out)
    b1 = b.squeeze(-1)
    out = th.where(b1 == math.inf, y.amax(-1), out)
    return th.where(b1 == -math.inf, y.amin(-1), out).to(out_dtype)


@dataclasses.dataclass(frozen=True)
class BetaPrior:
    """The distribution of normalised rationalities ``b`` the network is trained on.

    A mixture: point masses at ``0``, ``+inf``, ``-inf``; ``|b|`` log-uniform on
    ``[10**log_lo, 10**log_hi]`` with a negative sign with probability ``p_negative``; and,
    when ``focus`` is set, a share ``p_focus`` drawn around ``b = focus`` (log-normal with
    ``focus_width`` decades, same sign), which sharpens the fit near the optimum found so far.
    """

    log_lo: float = -1.5
    log_hi: float = 4.5
    p_zero: float = 0.05
    p_pos_inf: float = 0.1
    p_neg_inf: float = 0.05
    p_negative: float = 0.25
    focus: float | None = None
    focus_width: float = 0.4
    p_focus: float = 0.5

    def sample(self, n: int, gen: th.Generator) -> th.Tensor:
        """``n`` draws (float32, may contain +-inf)."""
        u = th.rand(n, generator=gen)
        logs = self.log_lo + (self.log_hi - self.log_lo) * th.rand(n, generator=gen)
        sign = th.where(th.rand(n, generator=gen) < self.p_negative, -1.0, 1.0)
        b = sign * th.pow(10.0, logs)
        if self.focus is not None and self.focus != 0 and math.isfinite(self.focus):
            g = math.log10(abs(self.focus)) + self.focus_width * th.randn(n, generator=gen)
            bf = math.copysign(1.0, self.focus) * th.pow(10.0, g)
            b = th.where(th.rand(n, generator=gen) < self.p_focus, bf, b)
        c0 = self.p_zero
        c1 = c0 + self.p_pos_inf
        c2 = c1 + self.p_neg_inf
        b = th.where(u < c0, th.zeros_like(b), b)
        b = th.where((u >= c0) & (u < c1), th.full_like(b, math.inf), b)
        return th.where((u >= c1) & (u < c2), th.full_like(b, -math.inf), b)


class ActionGrid(NamedTuple):
    """A rule for ``int u(a) f(a) da`` on the box scaled to ``[-1, 1]^k``.

    Attributes:
        points: ``(N, k)`` float32 in ``[-1, 1]``.
        log_w: ``(N,)`` float64 log probability weights (summing to 1).
        kind: ``"gauss-legendre"`` or ``"sobol"``.
    """

    points: th.Tensor
    log_w: th.Tensor
    kind: str

    @property
    def describe(self) -> str:
        """``"gauss-legendre, 16 points"``."""
        return f"{self.kind}, {self.points.shape[0]} points"


def action_grid(d: int, n: int | None = None, *, seed: int = 0) -> ActionGrid:
    """The rule of the Box fits: ``n`` Gauss-Legendre points per dimension in 1-D (default 16)
    and 2-D (default 10, so 100), ``n`` scrambled Sobol points beyond (default 256, drawn with
    ``seed``).

    Raises:
        ValueError: ``d < 1`` or ``n < 2``.
    """
    if d < 1:
        raise ValueError(f"the action box needs at least one dimension, got {d}.")
    if d <= 2:
        n = n or (16 if d == 1 else 10)
        if n < 2:
            raise ValueError(f"the action grid needs at least 2 points per dimension, got {n}.")
        box = box_rule(-np.ones(d), np.ones(d), nodes=n, panels=1)
        w = box.weights / box.weights.sum()
        return ActionGrid(box.points.to(th.float32), w.log(), "gauss-legendre")
    from scipy.stats import qmc

    n = n or 256
    pts = qmc.Sobol(d, scramble=True, seed=seed).random(n) * 2.0 - 1.0
    return ActionGrid(
        th.as_tensor(pts, dtype=th.float32), th.full((n,), -math.log(n), dtype=th.float64), "sobol"
    )


def row_soft_mean(y: th.Tensor, log_w: th.Tensor, b: th.Tensor) -> th.Tensor:
    """``m_b(y) = (1/b) log sum_j w_j exp(b y_j)`` per row: ``y (n, N)``, ``b (n,)`` (``+-inf``
    allowed: the max / min) -> ``(n,)`` in ``y``'s dtype."""
    out_dtype = y.dtype
    y = y.double()
    b = b.double()
    finite = th.isfinite(b)
    bf = th.where(finite, b, th.zeros_like(b))
    v = weighted_soft_mean(y.unsqueeze(1), log_w, bf)[0][:, 0]
    v = th.where(b == math.inf, y.amax(-1), v)
    return th.where(b == -math.inf, y.amin(-1), v).to(out_dtype)
