"""The soft Q-networks: :class:`SoftQModel` (``Discrete`` actions, one output per action) and
:class:`BoxSoftQModel` (a bounded ``Box``, the action an input), the batched evaluation of
several networks at once, and :func:`new_model`, which reads a new model's scales from the data.

The model family is described in :mod:`imitation_meg.approx.soft_q`; the fits are there too.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q_features import (
    BETA_SCALES,
    TIME_SCALES,
    ActionGrid,
    TimeTable,
    action_grid,
    beta_features,
    row_soft_mean,
)

__all__ = [
    "BoxSoftQModel",
    "SoftQModel",
    "is_null_problem",
    "new_model",
    "returns_scale",
    "stacked_forward",
    "standardisation",
]

#: Candidate uniform actions per decision when sampling a Box model's soft-optimal policy.
_RESAMPLE = 32


def stacked_forward(params: list[th.Tensor], z: th.Tensor) -> th.Tensor:
    """``K`` MLPs (SiLU between layers) at once: ``z (K, n, n_in)`` -> ``(K, n, n_out)``."""
    n_layers = len(params) // 2
    for i in range(n_layers):
        w, bias = params[2 * i], params[2 * i + 1]
        z = th.baddbmm(bias.unsqueeze(1), z, w.transpose(1, 2))
        if i < n_layers - 1:
            z = nn.functional.silu(z)
    return z


class _MLP(nn.Module):
    def __init__(self, n_in: int, n_out: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last = n_in
        for h in hidden:
            layers += [nn.Linear(last, h), nn.SiLU()]
            last = h
        layers.append(nn.Linear(last, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, z: th.Tensor) -> th.Tensor:
        return self.net(z)


class _SoftQNetwork:
    """What both model classes share: the horizon, the utility unit, the standardisation of
    observations, and the network's inputs (observation, time and rationality features)."""

    horizon: int
    last_steps: int
    q_scale: float
    obs_mean: th.Tensor
    obs_std: th.Tensor
    nets: nn.ModuleDict
    null: bool
    split: bool

    def _setup(
        self,
        horizon: int,
        q_scale: float,
        obs_mean: np.ndarray,
        obs_std: np.ndarray,
        last_steps: int,
    ) -> None:
        self.horizon = int(horizon)
        self.last_steps = int(last_steps)
        self._times: TimeTable | None = None
        self.q_scale = float(q_scale)
        self.obs_mean = th.as_tensor(obs_mean, dtype=th.float32)
        self.obs_std = th.as_tensor(obs_std, dtype=th.float32)
        #: no reward in the data: every value is 0 (see :func:`new_model`)
        self.null = False

    def _build(self, n_in: int, n_out: int, hidden: tuple[int, ...], seed: int) -> None:
        """The network ``{"cont": MLP}`` (its initialisation seeded by ``seed``)."""
        # Layer initialisation draws from torch's global generator: fork it so that the
        # caller's random state is left as it was.
        with th.random.fork_rng(devices=[]):
            th.manual_seed(seed)
            self.nets = nn.ModuleDict({"cont": _MLP(n_in, n_out, hidden)})

    def state_width(self, obs_dim: int) -> int:
        """Inputs of the observation, time and rationality features."""
        return obs_dim + 1 + len(TIME_SCALES) + self.last_steps + len(BETA_SCALES)

    def standardise(self, x: th.Tensor) -> th.Tensor:
        return (x - self.obs_mean.to(x.device)) / self.obs_std.to(x.device)

    def inputs(self, x: th.Tensor, t: th.Tensor, b: th.Tensor) -> th.Tensor:
        """The network's input rows ``(n, n_in)``: standardised observations ``x (n, d)``,
        time features of ``t (n,)`` and rationality features of normalised ``b (n,)`` (a Box
        model appends the action)."""
        if self._times is None:
            self._times = TimeTable(self.horizon, self.last_steps)
        return th.cat([self.standardise(x), self._times(t), beta_features(b)], 1)

    def copy(self) -> Any:
        return copy.deepcopy(self)


class SoftQModel(_SoftQNetwork):
    """A fitted beta-conditioned soft Q-function of ``Discrete`` actions (see the module
    docstring).

    The network predicts the normalised soft Q-value ``f(x, tau, b) = q / q_scale`` of every
    action. When a utility function ``reward_fn`` of the observation is given (the
    unknown-utility bound), the one-step utility is added exactly and the network predicts the
    continuation only:

        f(x, t, b) = reward_fn(x) / q_scale + ((H - t - 1) / H) * c(x, tau, b),

    so the last decision's value is exactly its utility. ``f = 0`` for ``t >= H``. (Splitting
    off a *learned* reward network the same way was tried and measured worse on the validation
    environments: its errors add to the continuation's.)

    Attributes:
        horizon: ``H``.
        n_actions: ``|A|``.
        q_scale: utility units per network unit (``q = q_scale * f``).
        obs_mean, obs_std: ``(d,)`` standardisation of flat observations.
        nets: ``{"cont": network}``.
        reward_fn: a fixed utility ``x (n, d) -> (n,)`` in utility units, or None.
        last_steps: indicator inputs of the last decisions (see :func:`time_features`).
    """

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        horizon: int,
        *,
        q_scale: float,
        obs_mean: np.ndarray,
        obs_std: np.ndarray,
        hidden: tuple[int, ...] = (64, 64),
        seed: int = 0,
        reward_fn: Callable[[th.Tensor], th.Tensor] | None = None,
        last_steps: int = 0,
    ) -> None:
        self._setup(horizon, q_scale, obs_mean, obs_std, last_steps)
        self.n_actions = int(n_actions)
        self.reward_fn = reward_fn
        self.split = reward_fn is not None
        self._build(self.state_width(obs_dim), n_actions, hidden, seed)

    def reward(self, x: th.Tensor) -> th.Tensor:
        """Normalised one-step utility ``(n, A)`` of a given ``reward_fn``."""
        assert self.reward_fn is not None
        r = self.reward_fn(x).reshape(-1, 1) / self.q_scale
        return r.to(th.float32).expand(-1, self.n_actions)

    def continuation_weight(self, t: th.Tensor) -> th.Tensor:
        """``(H - t - 1) / H`` per row ``(n,)``: the weight of a split model's continuation."""
        return (self.horizon - 1 - t).clamp(min=0).to(th.float32) / self.horizon

    def assemble(
        self, x: th.Tensor, t: th.Tensor, out: th.Tensor, reward: th.Tensor | None = None
    ) -> th.Tensor:
        """Normalised soft Q-values ``(n, A)`` from the network's output ``out (n, A)``: the
        exact utility plus the weighted continuation for a split model, and 0 for ``t >= H``.
        ``reward (n,)``: the split model's normalised utility of ``x`` computed beforehand (the
        fits keep it beside their data, on their device), instead of calling ``reward_fn``."""
        if self.split:
            r = self.reward(x) if reward is None else reward.reshape(-1, 1)
            out = r + self.continuation_weight(t).reshape(-1, 1) * out
        return th.where((t >= self.horizon).reshape(-1, 1), th.zeros_like(out), out)

    def f(
        self, x: th.Tensor, t: th.Tensor, b: th.Tensor, nets: nn.ModuleDict | None = None
    ) -> th.Tensor:
        """Normalised soft Q-values ``(n, A)`` at times ``t (n,)`` and rationalities ``b (n,)``."""
        if self.null:
            return th.zeros(x.shape[0], self.n_actions)
        nets = nets if nets is not None else self.nets
        return self.assemble(x, t, nets["cont"](self.inputs(x, t, b)))

    def log_policy(self, x: th.Tensor, t: th.Tensor, b: th.Tensor) -> th.Tensor:
        """``log pi_beta(. | s, t)`` ``(n, A)`` for normalised ``b (n,)`` (finite)."""
        with th.no_grad():
            return th.log_softmax(b.reshape(-1, 1) * self.f(x, t, b), dim=-1)

    def behaviour(self, b: float) -> Callable[[Any, np.ndarray, np.ndarray], np.ndarray]:
        """The soft-optimal policy at normalised rationality ``b`` as a rollout behaviour
        (:func:`~imitation_meg.approx.rollouts.collect`: action probabilities)."""

        def fn(raw: Any, x: np.ndarray, t: np.ndarray) -> np.ndarray:
            bb = th.full((x.shape[0],), float(b))
            lp = self.log_policy(th.as_tensor(x), th.as_tensor(t), bb)
            return lp.exp().double().numpy()

        return fn


class BoxSoftQModel(_SoftQNetwork):
    """A beta-conditioned soft Q-network with the action as input, for a bounded ``Box`` (see
    the module docstring): ``f(x, t, b, a) = q / q_scale``, one output, 0 for ``t >= H``.

    Attributes:
        horizon, q_scale, obs_mean, obs_std, last_steps, nets, null: as for
            :class:`SoftQModel`.
        low, high: ``(k,)`` float32 the box.
        action_dim: ``k``.
        grid: the rule of ``m_beta`` over the box (:class:`ActionGrid`).
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
        grid: ActionGrid | None = None,
        hidden: tuple[int, ...] = (64, 64),
        seed: int = 0,
        last_steps: int = 3,
    ) -> None:
        self._setup(horizon, q_scale, obs_mean, obs_std, last_steps)
        self.low = th.as_tensor(np.asarray(low), dtype=th.float32).reshape(-1)
        self.high = th.as_tensor(np.asarray(high), dtype=th.float32).reshape(-1)
        self.action_dim = int(self.low.numel())
        self.grid = grid if grid is not None else action_grid(self.action_dim)
        self.split = False  # no exact one-step utility
        self._build(self.state_width(obs_dim) + self.action_dim, 1, hidden, seed)

    def scale_actions(self, a: th.Tensor) -> th.Tensor:
        """Actions in the box -> ``[-1, 1]``."""
        return 2.0 * (a.to(th.float32) - self.low) / (self.high - self.low) - 1.0

    def f_points(
        self,
        x: th.Tensor,
        t: th.Tensor,
        b: th.Tensor,
        points: th.Tensor,
        params: list[th.Tensor] | None = None,
    ) -> th.Tensor:
        """Normalised values ``(n, P)`` at per-row points ``points (n, P, k)`` in ``[-1, 1]``
        (or shared ``(P, k)``); 0 for ``t >= H``. ``params``: stacked weights of one model (the
        frozen copy while fitting)."""
        n = x.shape[0]
        if self.null:
            return th.zeros(n, points.shape[-2])
        z = self.inputs(x, t, b)
        P = points.shape[-2]
        pts = points.expand(n, P, -1) if points.dim() == 2 else points
        rows = th.cat([z.unsqueeze(1).expand(n, P, -1), pts.to(th.float32)], 2).reshape(n * P, -1)
        if params is None:
            out = self.nets["cont"](rows)
        else:
            out = stacked_forward(params, rows.unsqueeze(0))[0]
        out = out.reshape(n, P)
        return th.where((t >= self.horizon).reshape(-1, 1), th.zeros_like(out), out)

    def soft_value(
        self, x: th.Tensor, t: th.Tensor, b: th.Tensor, params: list[th.Tensor] | None = None
    ) -> th.Tensor:
        """``m_b(f(x, t, b, .))`` over the grid, ``(n,)``."""
        return row_soft_mean(self.f_points(x, t, b, self.grid.points, params), self.grid.log_w, b)

    def behaviour(
        self, b: float
    ) -> Callable[[Any, np.ndarray, np.ndarray, np.random.Generator], np.ndarray]:
        """Approximately the soft-optimal policy at normalised rationality ``b`` as a rollout
        behaviour (:func:`~imitation_meg.approx.rollouts.collect`: actions): ``_RESAMPLE``
        uniform candidates per decision, one kept with probability ``softmax(b f)`` (importance
        resampling)."""
        lo, hi = self.low.double().numpy(), self.high.double().numpy()

        def fn(raw: Any, x: np.ndarray, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            n, d = x.shape[0], lo.size
            cand = rng.random((n, _RESAMPLE, d)) * 2.0 - 1.0
            with th.no_grad():
                f = self.f_points(
                    th.as_tensor(x), th.as_tensor(t), th.full((n,), b), th.as_tensor(cand)
                ).double()
            p = th.softmax(b * f, -1).numpy()
            k = (p.cumsum(1) < rng.random((n, 1))).sum(1).clip(max=_RESAMPLE - 1)
            return lo + (cand[np.arange(n), k] + 1.0) * 0.5 * (hi - lo)

        return fn


def standardisation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(0)
    std = x.std(0)
    std = np.where(std > 1e-6, std, 1.0)
    return mean.astype(np.float32), std.astype(np.float32)


def returns_scale(data: Rollouts) -> float:
    """Largest absolute return-to-go in the data (the utility unit of the network)."""
    rtg = np.zeros_like(data.r)
    ends = np.cumsum(data.lengths)
    starts = ends - data.lengths
    for s, e in zip(starts, ends, strict=True):
        rtg[s:e] = np.cumsum(data.r[s:e][::-1])[::-1]
    return float(max(np.abs(rtg).max(initial=0.0), np.abs(data.r).max(initial=0.0)))


def new_model(
    data: Rollouts,
    n_actions: Any,
    horizon: int,
    *,
    hidden: tuple[int, ...],
    seed: int,
    reward_fn: Callable[[th.Tensor], th.Tensor] | None = None,
    last_steps: int = 0,
    grid: ActionGrid | None = None,
) -> Any:
    """An untrained model whose scales are read from ``data``: a :class:`SoftQModel`, or a
    :class:`BoxSoftQModel` for a box.

    Args:
        data: the transitions (their rewards set the scale, unless ``reward_fn`` is given).
        n_actions: ``|A|``, or the action space (:class:`~imitation_meg.approx.spaces.
            DiscreteActions` or :class:`~imitation_meg.approx.spaces.BoxActions`).
        horizon: ``H``.
        hidden: hidden layer sizes.
        seed: the initialisation's seed.
        reward_fn: a fixed utility of flat observations ``(n, d) -> (n,)`` replacing the
            environment's reward (then the scale is read from its values on ``data``;
            ``Discrete`` actions).
        last_steps: indicator inputs of the last decisions (see :func:`time_features`).
        grid: a box's rule of ``m_beta`` (default :func:`action_grid`'s).

    When the data show no reward that could prefer one action to another, the model is *null*:
    its soft Q-values are 0, so every soft-optimal model it gives is uniform
    (``new_model(...).null`` is True; the caller warns). That is the case when every reward in
    the data is 0, and when every reward is the same constant and no episode ends before the
    horizon (MountainCar's -1 per step before any episode reached the goal): then every return is
    the same and the exact soft Q-values do not depend on the action, while a fitted network's
    small errors would otherwise be read as preferences at large rationalities.

    Raises:
        ValueError: ``reward_fn`` with a box.
    """
    box = bool(getattr(n_actions, "is_box", False))
    if reward_fn is not None:
        if box:
            raise ValueError("reward_fn= replaces the reward of Discrete-action fits only.")
        with th.no_grad():
            r = reward_fn(th.as_tensor(data.x)).double().numpy().reshape(-1)
        data = dataclasses.replace(data, r=r)
    scale = returns_scale(data)
    mean, std = standardisation(np.concatenate([data.x, data.x_next]))
    scales: dict[str, Any] = {
        "q_scale": scale if scale > 0 else 1.0,
        "obs_mean": mean,
        "obs_std": std,
    }
    model: Any
    if box:
        model = BoxSoftQModel(
            data.x.shape[1],
            n_actions.low,
            n_actions.high,
            horizon,
            **scales,
            hidden=hidden,
            seed=seed,
            last_steps=last_steps,
            grid=grid,
        )
    else:
        model = SoftQModel(
            data.x.shape[1],
            int(getattr(n_actions, "n", n_actions)),
            horizon,
            **scales,
            hidden=hidden,
            seed=seed,
            reward_fn=reward_fn,
            last_steps=last_steps,
        )
    model.null = is_null_problem(data, horizon, scale)
    return model


def is_null_problem(data: Rollouts, horizon: int, scale: float) -> bool:
    """Whether every soft-optimal model is uniform on this data: no return at all, or the same
    reward at every step with no episode ending before ``horizon`` (the Q-values then do not
    depend on the action)."""
    early_end = bool(np.any(data.done & (data.t < horizon - 1)))
    constant = data.r.size > 0 and float(np.ptp(data.r)) == 0.0
    return not scale > 0 or (constant and not early_end)
