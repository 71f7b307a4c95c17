"""A soft Q-network that takes the action as input, for every rationality: Box actions.

The model family is the finite-horizon soft-optimal one of the exact reference
(:mod:`imitation_meg.continuous.known`), with episodes that end early treated as the discrete
estimator treats them (the state entered on termination is worth 0). In utility units,

    q_t(s, a) = r(s, a) + E[ m_beta(q_{t+1}(s', .)) ],   q_H = 0,   q = 0 after termination,
    m_beta(y)  = (1 / beta) log int u(a) exp(beta y(a)) da   (mean at 0, max / min at +-inf),
    log(pi_beta,t(a | s) / u(a)) = beta (q_t(s, a) - m_beta(q_t(s, .))).

The integral ``m_beta`` is a rule over the box (:class:`ActionGrid`): tensor-product
Gauss-Legendre in 1 and 2 dimensions, scrambled Sobol points (quasi-Monte Carlo, i.e. importance
sampling with the uniform proposal) beyond. :class:`BoxSoftQModel` predicts ``f = q / q_scale``
from the standardised observation, the time features and rationality features of the discrete
estimator (:mod:`imitation_meg.approx.soft_q`) and the action scaled to ``[-1, 1]``; it is
trained by fitted soft Q-iteration on a fixed set of transitions, each row with its own
normalised rationality ``b = beta * q_scale`` drawn from a :class:`~imitation_meg.approx.
BetaPrior`, so one network serves every beta. Several models are trained as one batched network
(the discrete estimator's stacked layers).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch as th
from torch import nn

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import (
    _MLP,
    BetaPrior,
    TimeTable,
    _adam_step,
    _average_into,
    _Fit,
    _stacked_forward,
    _stacked_params,
    _write_back,
    beta_features,
    is_null_problem,
    returns_scale,
    standardisation,
)
from imitation_meg.continuous.quadrature import box_rule
from imitation_meg.continuous.soft_vi import soft_mean

__all__ = ["ActionGrid", "BoxSoftQModel", "action_grid", "fit_box_soft_q", "row_soft_mean"]

#: Rows (times grid points) per forward pass of the frozen networks.
_CHUNK = 1 << 16
#: Rows per model whose targets an iteration computes; its minibatches are drawn from them.
TARGET_POOL = 8192


class ActionGrid(NamedTuple):
    """A rule for ``int u(a) f(a) da`` on the box scaled to ``[-1, 1]^d``.

    Attributes:
        points: ``(N, d)`` float32 in ``[-1, 1]``.
        log_w: ``(N,)`` float64 log probability weights (summing to 1).
        kind: ``"gauss-legendre"`` or ``"sobol"``.
    """

    points: th.Tensor
    log_w: th.Tensor
    kind: str


def action_grid(d: int, n: int | None = None, *, seed: int = 0) -> ActionGrid:
    """The rule of the estimator: ``n`` Gauss-Legendre points per dimension in 1-D (default 16)
    and 2-D (default 10, so 100), ``n`` scrambled Sobol points beyond (default 256).

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
    v = soft_mean(y.unsqueeze(1), log_w, bf)[0][:, 0]
    v = th.where(b == math.inf, y.amax(-1), v)
    return th.where(b == -math.inf, y.amin(-1), v).to(out_dtype)


class BoxSoftQModel:
    """A beta-conditioned soft Q-network with the action as input (module docstring).

    Attributes:
        horizon, action_dim, q_scale, obs_mean, obs_std, low, high, last_steps, nets
        (``{"cont": MLP}``, scalar output), null (no reward that could prefer an action: every
        value is 0, so every model is uniform).
    """

    def __init__(
        self,
        obs_dim: int,
        low: np.ndarray,
        high: np.ndarray,
        horizon: int,
        *,
        q_scale: float,
        obs_mean: np.ndarray,
        obs_std: np.ndarray,
        hidden: tuple[int, ...] = (64, 64),
        seed: int = 0,
        last_steps: int = 3,
    ) -> None:
        self.horizon = int(horizon)
        self.low = th.as_tensor(np.asarray(low), dtype=th.float32).reshape(-1)
        self.high = th.as_tensor(np.asarray(high), dtype=th.float32).reshape(-1)
        self.action_dim = int(self.low.numel())
        self.q_scale = float(q_scale)
        self.obs_mean = th.as_tensor(obs_mean, dtype=th.float32)
        self.obs_std = th.as_tensor(obs_std, dtype=th.float32)
        self.last_steps = int(last_steps)
        self._times: TimeTable | None = None
        self.null = False
        self.split = False  # no exact one-step utility (the discrete estimator's fitting rows)
        from imitation_meg.approx.soft_q import BETA_SCALES, TIME_SCALES

        n_in = obs_dim + 1 + len(TIME_SCALES) + self.last_steps + len(BETA_SCALES) + self.action_dim
        with th.random.fork_rng(devices=[]):
            th.manual_seed(seed)
            self.nets = nn.ModuleDict({"cont": _MLP(n_in, 1, hidden)})

    def scale_actions(self, a: th.Tensor) -> th.Tensor:
        """Actions in the box -> ``[-1, 1]``."""
        return 2.0 * (a.to(th.float32) - self.low) / (self.high - self.low) - 1.0

    def state_inputs(self, x: th.Tensor, t: th.Tensor, b: th.Tensor) -> th.Tensor:
        """``(n, n_in - d)``: standardised observations, time and rationality features."""
        if self._times is None:
            self._times = TimeTable(self.horizon, self.last_steps)
        return th.cat([(x - self.obs_mean) / self.obs_std, self._times(t), beta_features(b)], 1)

    def f_points(
        self,
        x: th.Tensor,
        t: th.Tensor,
        b: th.Tensor,
        points: th.Tensor,
        params: list[th.Tensor] | None = None,
    ) -> th.Tensor:
        """Normalised values ``(n, P)`` at per-row points ``points (n, P, d)`` in ``[-1, 1]`` (or
        shared ``(P, d)``); 0 for ``t >= H``. ``params``: stacked weights of one model (the
        frozen copy while fitting)."""
        n = x.shape[0]
        if self.null:
            return th.zeros(n, points.shape[-2])
        z = self.state_inputs(x, t, b)
        P = points.shape[-2]
        pts = points.expand(n, P, -1) if points.dim() == 2 else points
        rows = th.cat([z.unsqueeze(1).expand(n, P, -1), pts.to(th.float32)], 2).reshape(n * P, -1)
        if params is None:
            out = self.nets["cont"](rows)
        else:
            out = _stacked_forward(params, rows.unsqueeze(0))[0]
        out = out.reshape(n, P)
        return th.where((t >= self.horizon).reshape(-1, 1), th.zeros_like(out), out)

    def copy(self) -> BoxSoftQModel:
        return copy.deepcopy(self)


def new_box_model(
    data: Rollouts,
    low: np.ndarray,
    high: np.ndarray,
    horizon: int,
    *,
    hidden: tuple[int, ...],
    seed: int,
    last_steps: int,
) -> BoxSoftQModel:
    """An untrained model whose scales are read from ``data`` (null when the data hold no
    reward that could prefer one action to another: all 0, or one constant with no episode
    ending early)."""
    scale = returns_scale(data)
    mean, std = standardisation(np.concatenate([data.x, data.x_next]))
    model = BoxSoftQModel(
        data.x.shape[1],
        low,
        high,
        horizon,
        q_scale=scale if scale > 0 else 1.0,
        obs_mean=mean,
        obs_std=std,
        hidden=hidden,
        seed=seed,
        last_steps=last_steps,
    )
    model.null = is_null_problem(data, horizon, scale)
    return model


class _Rows(NamedTuple):
    z: th.Tensor  # (n, n_in) inputs at the taken actions
    target: th.Tensor  # (n,)


class _BoxFit(_Fit):
    """One model's data, draws and clipping bounds during :func:`fit_box_soft_q` (the discrete
    estimator's, with the actions scaled to ``[-1, 1]``)."""

    def __init__(self, model: BoxSoftQModel, data: Rollouts, prior: BetaPrior, seed: int) -> None:
        super().__init__(model, data, prior, seed)  # type: ignore[arg-type]
        self.a = model.scale_actions(th.as_tensor(data.a))
        self.box_model = model

    def box_rows(self, n: int, frozen: list[th.Tensor], grid: ActionGrid) -> _Rows:
        """``n`` rows with their rationalities, inputs and clipped soft Bellman targets."""
        m = self.box_model
        idx = th.randint(0, self.x.shape[0], (n,), generator=self.gen)
        b = self.prior.sample(n, self.gen)
        target = th.empty(n)
        per = max(1, _CHUNK // grid.points.shape[0])
        with th.no_grad():
            for lo in range(0, n, per):
                i, bb = idx[lo : lo + per], b[lo : lo + per]
                y = m.f_points(self.xn[i], self.t[i] + 1, bb, grid.points, frozen)
                cont = self.live[i] * row_soft_mean(y, grid.log_w, bb)
                target[lo : lo + per] = th.minimum(
                    th.maximum(self.r[i] + cont, self.q_lo[i]), self.q_hi[i]
                )
            z = th.cat([m.state_inputs(self.x[idx], self.t[idx], b), self.a[idx]], 1)
        return _Rows(z, target)


def fit_box_soft_q(
    models: list[BoxSoftQModel],
    datas: list[Rollouts],
    grid: ActionGrid,
    *,
    iterations: int,
    steps_per_iteration: int,
    batch_size: int = 256,
    lr: float = 3e-3,
    priors: list[BetaPrior] | None = None,
    seeds: list[int] | None = None,
    average: float = 0.5,
    on_iteration: Callable[[int], None] | None = None,
    target_pool: int = TARGET_POOL,
) -> list[list[float]]:
    """Fitted soft Q-iteration for several models at once (one batched network), each on its
    own data, prior and seed; returns each model's loss per iteration.

    Each iteration freezes the (averaged) weights, draws ``steps_per_iteration * batch_size``
    rows and rationalities per model, computes their soft Bellman targets
    ``r / q_scale + (1 - done) m_b(f_frozen(x', t + 1, b, .))`` over the action grid, clipped to
    the range every soft value lies in, and takes ``steps_per_iteration`` Adam steps on the
    squared error at the taken actions (gradient norm clipped to 10 per model; learning rate
    cosine-decayed to a tenth). The iteration's result is the average of its last
    ``average`` share of steps' weights.
    """
    K = len(models)
    priors = priors if priors is not None else [BetaPrior()] * K
    seeds = seeds if seeds is not None else list(range(K))
    losses: list[list[float]] = [[0.0] * iterations if m.null else [] for m in models]
    active = [k for k in range(K) if not models[k].null]
    if not active:
        return losses
    fits = [_BoxFit(models[k], datas[k], priors[k], seeds[k]) for k in active]
    params = _stacked_params([f.box_model for f in fits])  # type: ignore[misc]
    opt = th.optim.Adam(params, lr=lr)
    total = iterations * steps_per_iteration
    sched = th.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(k / max(total, 1), 1.0)))
    )
    avg_from = steps_per_iteration - round(float(average) * steps_per_iteration)
    avg = [p.detach().clone() for p in params]
    for it in range(iterations):
        frozen = [p.clone() for p in avg]
        n_avg = 0
        pool = min(int(target_pool), steps_per_iteration * batch_size)
        parts = [f.box_rows(pool, [p[j : j + 1] for p in frozen], grid) for j, f in enumerate(fits)]
        z = th.stack([p.z for p in parts])
        target = th.stack([p.target for p in parts])
        picks = th.randint(0, pool, (steps_per_iteration, batch_size), generator=fits[0].gen)
        acc = th.zeros(len(fits))
        for k in range(steps_per_iteration):
            sl = picks[k]
            pred = _stacked_forward(params, z[:, sl])[..., 0]
            per_model = th.mean((pred - target[:, sl]) ** 2, dim=1)
            _adam_step(opt, sched, params, per_model)
            acc += per_model.detach()
            if k >= avg_from:
                n_avg += 1
                _average_into(avg, params, n_avg)
        if n_avg == 0:
            avg = [p.detach().clone() for p in params]
        for j, k in enumerate(active):
            losses[k].append(float(acc[j]) / steps_per_iteration)
        if on_iteration is not None:
            on_iteration(it)
    _write_back([f.box_model for f in fits], avg)  # type: ignore[misc]
    return losses


def bellman_residual_box(
    model: BoxSoftQModel, data: Rollouts, grid: ActionGrid, b: float
) -> tuple[float, float]:
    """Mean and RMS soft Bellman residual at normalised ``b`` on ``data`` (utility units)."""
    x, xn = th.as_tensor(data.x), th.as_tensor(data.x_next)
    t = th.as_tensor(data.t)
    a = model.scale_actions(th.as_tensor(data.a))
    bb = th.full((x.shape[0],), float(b))
    with th.no_grad():
        q = model.f_points(x, t, bb, a.unsqueeze(1))[:, 0]
        nxt = row_soft_mean(model.f_points(xn, t + 1, bb, grid.points), grid.log_w, bb)
    r = th.as_tensor(data.r / model.q_scale, dtype=th.float32)
    res = (q - r - th.as_tensor(~data.done, dtype=th.float32) * nxt).double() * model.q_scale
    return float(res.mean()), float(res.pow(2).mean().sqrt())
