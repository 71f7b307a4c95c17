"""One soft Q-network for every rationality: fitted soft Q-iteration conditioned on beta and time.

The model family is the finite-horizon soft-optimal one of the exact code, with episodes that
end early treated as the tabular converters treat them (the state entered on termination is
absorbing and worth nothing). In utility units, with ``m_b`` the exponential mean over actions::

    q_t(s, a) = r(s, a) + E[ m_beta(q_{t+1}(s', .)) ],     q_H = 0,   q = 0 after termination,
    m_beta(y)  = (1 / beta) log( (1/|A|) sum_a exp(beta y_a) )   (mean at 0, max / min at +-inf),
    pi_beta,t  = softmax(beta q_t(s, .)).

This is the paper's soft value iteration ``V = (1/beta) logsumexp(beta Q)`` with the constant
``(H - t) log|A| / beta`` removed, so it stays finite at ``beta = 0`` and gives the same policies;
subtracting ``log|A|`` makes an absorbing (terminated) state worth 0 for every beta, exactly
as an absorbing state with zero utility is in :class:`~imitation_meg.TabularMDP`. No discount.

The model (:class:`SoftQModel`) predicts ``f = q / q_scale`` as a one-step reward network of the
observation plus ``(H - t - 1) / H`` times a continuation network of the standardised flat
observation, the time-to-go fraction ``tau = (H - t) / H`` and bounded features
``b / (c + |b|)`` of the normalised rationality ``b = beta * q_scale``. It is trained on a fixed
set of transitions by regression on targets from a periodically frozen copy (fitted
Q-iteration), each sample with its own ``b`` drawn from a prior over ``0``, ``+-inf`` and a
log-uniform range, so one network serves every beta. The next-state expectation is a regression
target (one sampled ``s'`` per row); the soft mean over actions is computed exactly.

**Box actions.** With a bounded ``Box`` the reference is the uniform density ``u`` on the box,
``m_beta(y) = (1 / beta) log int u(a) exp(beta y(a)) da`` and
``log(pi_beta,t(a | s) / u(a)) = beta (q_t(s, a) - m_beta(q_t(s, .)))``. The second model class,
:class:`BoxSoftQModel`, takes the action (scaled to ``[-1, 1]``) as an input beside the same
observation, time and rationality features and predicts one value; ``m_beta`` is a rule over the
box (:class:`ActionGrid`: tensor-product Gauss-Legendre in 1 and 2 dimensions, scrambled Sobol
points beyond). Both classes are fitted by the same loop (:func:`fit_soft_q_ensemble`: batched
networks, rationality priors, clipped targets, weight averaging); the Box fits compute each
iteration's targets for a pool of rows and draw their minibatches from it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch as th
from torch import nn

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.continuous.quadrature import box_rule
from imitation_meg.continuous.soft_vi import soft_mean as weighted_soft_mean

__all__ = [
    "ActionGrid",
    "BetaPrior",
    "BoxSoftQModel",
    "SoftQModel",
    "action_grid",
    "bellman_residual",
    "beta_features",
    "fit_soft_q",
    "fit_soft_q_ensemble",
    "new_model",
    "row_soft_mean",
    "soft_mean",
    "target_pool",
]

#: Largest gradient norm of one fitting step.
_GRAD_CLIP = 10.0
#: Rows per forward pass of the frozen network when computing an iteration's targets.
_TARGET_CHUNK = 1 << 15
#: Input floats of the training rows prepared at once (all models of a batched fit).
_BLOCK_FLOATS = 1 << 24
#: Rows (times grid points) per forward pass of a Box model's frozen network.
_BOX_CHUNK = 1 << 16
#: Rows per Box model whose targets an iteration computes, on long horizons (``H >= 100``) and
#: short ones; the iteration's minibatches are drawn from them.
_POOL_LONG, _POOL_SHORT = 2048, 8192
#: Candidate uniform actions per decision when sampling a Box model's soft-optimal policy.
_RESAMPLE = 32
_CPU = th.device("cpu")

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
            out = _stacked_forward(params, rows.unsqueeze(0))[0]
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


def fit_soft_q(
    model: SoftQModel,
    data: Rollouts,
    *,
    iterations: int,
    steps_per_iteration: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    prior: BetaPrior | None = None,
    seed: int = 0,
    on_iteration: Callable[[int], None] | None = None,
    average: float = 0.0,
    device: th.device | str = "cpu",
) -> list[float]:
    """Fitted soft Q-iteration on ``data``, in place: returns the loss of each iteration.

    Each iteration freezes a copy of the network, then takes ``steps_per_iteration`` Adam
    steps on the squared error to the soft Bellman targets
    ``r / q_scale + (1 - done) * m_b(f_frozen(x', t + 1, b))``, each row with its own ``b``
    drawn from ``prior``. ``H`` iterations propagate values over the whole horizon. Targets are
    clipped to the range every soft value lies in (``r_lo + (H - t - 1) min(r_lo, 0)`` to
    ``r_hi + (H - t - 1) max(r_hi, 0)``, with the per-step reward range seen in the data) and
    gradients to norm 10, against the divergence of fitted Q-iteration on long horizons.

    Args:
        model: the model to train (from :func:`new_model`, or a previous fit to continue).
        data: the transitions.
        iterations: target-network refreshes.
        steps_per_iteration: gradient steps between refreshes.
        batch_size: rows per step.
        lr: Adam's learning rate (cosine-decayed to a tenth over the run).
        prior: the rationalities to train on (default :class:`BetaPrior`).
        seed: seeds the batches and the rationality draws.
        on_iteration: called after each iteration with its index (progress bars).
        average: the share of each iteration's last steps whose weights are averaged (see
            :func:`fit_soft_q_ensemble`; ``0``: the last step's weights).
        device: where the fit runs (see :func:`fit_soft_q_ensemble`).
    """
    return fit_soft_q_ensemble(
        [model],
        [data],
        iterations=iterations,
        steps_per_iteration=steps_per_iteration,
        batch_size=batch_size,
        lr=lr,
        priors=[prior or BetaPrior()],
        seeds=[seed],
        on_iteration=on_iteration,
        average=average,
        device=device,
    )[0]


class _FitRows(NamedTuple):
    """One model's training rows of an iteration: network inputs, actions, targets, and the
    exact one-step utility and continuation weight of a split model (0 and 1 otherwise)."""

    z: th.Tensor  # (n, n_in)
    a: th.Tensor  # (n,)
    target: th.Tensor  # (n,)
    base: th.Tensor  # (n,)
    weight: th.Tensor  # (n,)


class _Fit:
    """One model's data and draws during :func:`fit_soft_q_ensemble`."""

    def __init__(
        self,
        model: SoftQModel,
        data: Rollouts,
        prior: BetaPrior,
        seed: int,
        device: th.device = _CPU,
    ) -> None:
        self.model = model
        self.prior = prior
        self.device = device
        # The draws come from a CPU generator whatever the device: the same rows and
        # rationalities on every device.
        self.gen = th.Generator().manual_seed(int(seed))
        x = th.as_tensor(data.x)
        xn = th.as_tensor(data.x_next)
        t = th.as_tensor(data.t)
        # The one-step utility of every row (and, for a split model, of every next observation):
        # the model's own (exact) utility of a split model, computed once per fit on the CPU
        # (its reward_fn may hold CPU weights), else the normalised rewards seen.
        if model.split:
            with th.no_grad():
                r, r_next = model.reward(x)[:, 0], model.reward(xn)[:, 0]
                seen = th.cat([r, r_next])
            rn: th.Tensor | None = r_next
        else:
            r, rn = th.as_tensor(data.r / model.q_scale, dtype=th.float32), None
            seen = r
        # Every soft value lies between these bounds (first reward, then any mix of rewards
        # and termination): targets are clipped to them, which stops fitted Q-iteration from
        # diverging through extrapolation on long horizons. The per-step range is the one seen.
        r_lo, r_hi = float(seen.min()), float(seen.max())
        left = (model.horizon - 1 - t).clamp(min=0).to(th.float32)
        self.x, self.xn, self.t = x.to(device), xn.to(device), t.to(device)
        self.a = th.as_tensor(data.a).to(device)
        self.live = th.as_tensor(~data.done, dtype=th.float32).to(device)
        self.r = r.to(device)
        self.rn = rn.to(device) if rn is not None else None
        self.q_lo = (r_lo + left * min(r_lo, 0.0)).to(device)
        self.q_hi = (r_hi + left * max(r_hi, 0.0)).to(device)

    def draw(self, n: int) -> tuple[th.Tensor, th.Tensor]:
        """``n`` rows and rationalities (in this order from the model's own generator), on the
        fit's device."""
        idx = th.randint(0, self.x.shape[0], (n,), generator=self.gen)
        b = self.prior.sample(n, self.gen)
        return idx.to(self.device), b.to(self.device)

    def rows(self, idx: th.Tensor, b: th.Tensor, frozen: list[th.Tensor]) -> _FitRows:
        """Inputs and clipped soft Bellman targets of rows ``idx`` under the frozen weights."""
        m, dev = self.model, self.device
        target = th.empty(idx.shape[0], device=dev)
        with th.no_grad():
            for lo in range(0, idx.shape[0], _TARGET_CHUNK):
                i, bb = idx[lo : lo + _TARGET_CHUNK], b[lo : lo + _TARGET_CHUNK]
                tn = self.t[i] + 1
                out = _stacked_forward(frozen, m.inputs(self.xn[i], tn, bb).unsqueeze(0))[0]
                rn = self.rn[i] if self.rn is not None else None
                cont = self.live[i] * soft_mean(m.assemble(self.xn[i], tn, out, rn), bb)
                target[lo : lo + _TARGET_CHUNK] = th.minimum(
                    th.maximum(self.r[i] + cont, self.q_lo[i]), self.q_hi[i]
                )
            if m.split:
                base = self.r[idx]
                weight = m.continuation_weight(self.t[idx])
            else:
                base = th.zeros(idx.shape[0], device=dev)
                weight = th.ones(idx.shape[0], device=dev)
            z = m.inputs(self.x[idx], self.t[idx], b)
        return _FitRows(z, self.a[idx], target, base, weight)


class _BoxFit(_Fit):
    """One Box model's data and draws during :func:`fit_soft_q_ensemble` (the actions scaled
    to ``[-1, 1]``)."""

    def __init__(self, model: BoxSoftQModel, data: Rollouts, prior: BetaPrior, seed: int) -> None:
        super().__init__(model, data, prior, seed)  # type: ignore[arg-type]
        self.a = model.scale_actions(th.as_tensor(data.a))
        self.box = model

    def pool(self, n: int, frozen: list[th.Tensor]) -> tuple[th.Tensor, th.Tensor]:
        """``n`` rows with their rationalities: the network's inputs at the taken actions and
        the clipped soft Bellman targets over the action grid."""
        m = self.box
        idx = th.randint(0, self.x.shape[0], (n,), generator=self.gen)
        b = self.prior.sample(n, self.gen)
        target = th.empty(n)
        per = max(1, _BOX_CHUNK // m.grid.points.shape[0])
        with th.no_grad():
            for lo in range(0, n, per):
                i, bb = idx[lo : lo + per], b[lo : lo + per]
                cont = self.live[i] * m.soft_value(self.xn[i], self.t[i] + 1, bb, frozen)
                target[lo : lo + per] = th.minimum(
                    th.maximum(self.r[i] + cont, self.q_lo[i]), self.q_hi[i]
                )
            z = th.cat([m.inputs(self.x[idx], self.t[idx], b), self.a[idx]], 1)
        return z, target


def _fit_of(
    model: SoftQModel | BoxSoftQModel, data: Rollouts, prior: BetaPrior, seed: int, dev: th.device
) -> _Fit:
    """One model's fit (a Box model's on the CPU)."""
    if isinstance(model, BoxSoftQModel):
        return _BoxFit(model, data, prior, seed)
    return _Fit(model, data, prior, seed, dev)


class _Batch(NamedTuple):
    """One step's rows of every model: inputs ``(K, n, n_in)``, targets ``(K, n)`` and, for
    ``Discrete`` actions, the actions taken, the exact utility and the continuation weight
    (None for a box, whose network has one output: the value at the taken action)."""

    z: th.Tensor
    target: th.Tensor
    a: th.Tensor | None = None
    base: th.Tensor | None = None
    weight: th.Tensor | None = None

    def predict(self, out: th.Tensor) -> th.Tensor:
        """The fitted values ``(K, n)`` from the networks' output ``out (K, n, n_out)``."""
        if self.a is None or self.base is None or self.weight is None:
            return out[..., 0]
        return self.base + self.weight * out.gather(2, self.a.unsqueeze(2)).squeeze(2)


def _frozen_of(frozen: list[th.Tensor], j: int) -> list[th.Tensor]:
    """Model ``j``'s frozen weights from the stacked ones."""
    return [p[j : j + 1] for p in frozen]


def _batches(
    fits: list[_Fit], frozen: list[th.Tensor], steps: int, batch_size: int
) -> Iterator[_Batch]:
    """An iteration's steps of ``Discrete`` fits: every step's rows, rationalities and targets
    drawn at once (the frozen copy is fixed for the whole iteration: a few large forward passes
    instead of one small one per step), prepared in blocks of bounded memory."""
    n_in = frozen[0].shape[2]
    block = max(1, min(steps, _BLOCK_FLOATS // (batch_size * n_in * len(fits))))
    draws = [f.draw(steps * batch_size) for f in fits]
    for s0 in range(0, steps, block):
        n_steps = min(block, steps - s0)
        sl = slice(s0 * batch_size, (s0 + n_steps) * batch_size)
        parts = [
            f.rows(idx[sl], b[sl], _frozen_of(frozen, j))
            for j, (f, (idx, b)) in enumerate(zip(fits, draws, strict=True))
        ]
        z, a, target, base, weight = (th.stack(v) for v in zip(*parts, strict=True))
        for k in range(n_steps):
            rows = slice(k * batch_size, (k + 1) * batch_size)
            yield _Batch(z[:, rows], target[:, rows], a[:, rows], base[:, rows], weight[:, rows])


def target_pool(horizon: int) -> int:
    """Rows per Box model whose targets an iteration computes (fewer on long horizons, which
    have more iterations of fewer steps each)."""
    return _POOL_LONG if horizon >= 100 else _POOL_SHORT


def _box_batches(
    fits: list[_BoxFit], frozen: list[th.Tensor], steps: int, batch_size: int
) -> Iterator[_Batch]:
    """An iteration's steps of Box fits: the targets of a pool of rows per model (their soft
    mean over the action grid is the cost), each step's minibatch drawn from the pool."""
    pool = min(target_pool(fits[0].box.horizon), steps * batch_size)
    parts = [f.pool(pool, _frozen_of(frozen, j)) for j, f in enumerate(fits)]
    z = th.stack([p[0] for p in parts])
    target = th.stack([p[1] for p in parts])
    picks = th.randint(0, pool, (steps, batch_size), generator=fits[0].gen)
    for k in range(steps):
        yield _Batch(z[:, picks[k]], target[:, picks[k]])


def check_average(average: Any) -> None:
    """Raise ``ValueError`` unless ``average`` is a number in ``[0, 1]``."""
    if (
        isinstance(average, bool)
        or not isinstance(average, (int, float, np.floating))
        or not 0.0 <= float(average) <= 1.0
    ):
        raise ValueError(
            f"average must be a number from 0 (no averaging) to 1 (all of each iteration's "
            f"steps), got {average!r}."
        )


def check_lr(lr: Any) -> None:
    """Raise ``ValueError`` unless ``lr`` is a positive finite number (not a bool)."""
    if (
        isinstance(lr, bool)
        or not isinstance(lr, (int, float, np.floating))
        or not 0.0 < float(lr) < math.inf
    ):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}.")


def check_device(device: Any) -> str:
    """``device`` as torch names it (``"cpu"``, ``"cuda:0"``, ...).

    Raises:
        TypeError: not a string or a ``torch.device``.
        ValueError: a name torch does not know, or a CUDA device where torch sees none (or
            fewer than its index needs).
    """
    if not isinstance(device, (str, th.device)):
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda', got {device!r}.")
    try:
        dev = th.device(device)
    except RuntimeError as e:
        raise ValueError(
            f"device must be a torch device such as 'cpu', 'cuda' or 'cuda:1', got {device!r}."
        ) from e
    if dev.type == "cuda":
        count = th.cuda.device_count() if th.cuda.is_available() else 0
        if count == 0 or (dev.index is not None and dev.index >= count):
            raise ValueError(
                f"device={device!r}, but torch sees {count} CUDA device(s) "
                f"(torch {th.__version__}, torch.cuda.is_available() is "
                f"{th.cuda.is_available()}): pass device='cpu', or install a CUDA build of torch "
                "on a machine with a GPU."
            )
    elif dev.type == "meta":
        raise ValueError(
            "device='meta' holds shapes, not numbers: the fits cannot run there; pass "
            "device='cpu' or a GPU such as 'cuda'."
        )
    elif dev.type != "cpu":
        # mps, xpu, ...: accepted when torch can place a tensor there
        try:
            th.zeros(1, device=dev)
        except (RuntimeError, AssertionError) as e:
            raise ValueError(
                f"device={device!r} is not usable here ({e}); pass device='cpu'."
            ) from e
    return str(dev)


def _check_int(name: str, v: Any, lo: int) -> None:
    """Raise ``ValueError`` unless ``v`` is an integer (not a bool) ``>= lo``."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}.")


def _linears(model: SoftQModel) -> list[nn.Linear]:
    """The continuation network's linear layers, input first."""
    return [mod for mod in model.nets["cont"].modules() if isinstance(mod, nn.Linear)]


def _stacked_params(models: list[SoftQModel], device: th.device = _CPU) -> list[th.Tensor]:
    """The continuation networks of ``models`` as ``(K, ...)`` weight and bias leaves on
    ``device``."""
    layers = [_linears(m) for m in models]
    shapes = [[tuple(lin.weight.shape) for lin in ls] for ls in layers]
    if any(sh != shapes[0] for sh in shapes):
        raise ValueError(
            f"models fitted together need networks of one shape, got layer shapes {shapes}: "
            "build them with the same hidden sizes, observations and actions."
        )
    out = []
    for i in range(len(layers[0])):
        for name in ("weight", "bias"):
            p = th.stack([getattr(ls[i], name).detach() for ls in layers]).to(device).clone()
            out.append(p.requires_grad_(True))
    return out


def _write_back(models: list[SoftQModel], params: list[th.Tensor]) -> None:
    """Copy the batched weights back into each model's own network."""
    for k, m in enumerate(models):
        linears = _linears(m)
        with th.no_grad():
            for i, lin in enumerate(linears):
                lin.weight.copy_(params[2 * i][k])
                lin.bias.copy_(params[2 * i + 1][k])


def _stacked_forward(params: list[th.Tensor], z: th.Tensor) -> th.Tensor:
    """``K`` MLPs (SiLU between layers) at once: ``z (K, n, n_in)`` -> ``(K, n, n_out)``."""
    n_layers = len(params) // 2
    for i in range(n_layers):
        w, bias = params[2 * i], params[2 * i + 1]
        z = th.baddbmm(bias.unsqueeze(1), z, w.transpose(1, 2))
        if i < n_layers - 1:
            z = nn.functional.silu(z)
    return z


def _clip_each(params: list[th.Tensor], max_norm: float) -> None:
    """Scale each model's gradient to norm at most ``max_norm`` (as ``clip_grad_norm_`` does
    for one model)."""
    sq = sum(p.grad.reshape(p.shape[0], -1).pow(2).sum(1) for p in params if p.grad is not None)
    coef = (max_norm / (th.as_tensor(sq).sqrt() + 1e-6)).clamp(max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coef.reshape(-1, *([1] * (p.dim() - 1))))


def _adam_step(opt: Any, sched: Any, params: list[th.Tensor], per_model: th.Tensor) -> None:
    """One optimiser step on the stacked models' summed losses ``per_model (K,)``, each
    model's gradient clipped on its own."""
    opt.zero_grad()
    per_model.sum().backward()
    _clip_each(params, _GRAD_CLIP)
    opt.step()
    sched.step()


def _average_into(avg: list[th.Tensor], params: list[th.Tensor], n_avg: int) -> None:
    """Fold the current parameters into the running mean ``avg`` of ``n_avg`` iterates."""
    with th.no_grad():
        for mean, p in zip(avg, params, strict=True):
            mean.lerp_(p, 1.0 / n_avg)


def fit_soft_q_ensemble(
    models: Sequence[SoftQModel | BoxSoftQModel],
    datas: list[Rollouts],
    *,
    iterations: int,
    steps_per_iteration: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    priors: list[BetaPrior] | None = None,
    seeds: list[int] | None = None,
    on_iteration: Callable[[int], None] | None = None,
    average: float = 0.0,
    device: th.device | str = "cpu",
) -> list[list[float]]:
    """:func:`fit_soft_q` for several models at once, each on its own data: returns each model's
    losses per iteration.

    The models' networks (same layer sizes) are trained together as one batched network, one
    Adam step for all of them per step, which on a CPU costs little more than one model's step
    (the small matrix products are overhead-bound). Each model keeps everything of its own: its
    rows and rationalities (drawn from its own generator, seeded by ``seeds[k]``, in the same
    order as a fit of that model alone), its prior, targets, clipping bounds, gradient norm
    clipping and Adam moments, so the result is what fitting each model alone gives, up to
    floating-point rounding. Null models (no reward to fit) are skipped.

    Box models (:class:`BoxSoftQModel`, all of one kind) are fitted by the same loop; each
    iteration computes the targets of a pool of :func:`target_pool` rows per model (their soft
    means over the action grid are the cost) and draws every step's minibatch from it (the
    draws of the first model's generator), so a Box fit depends on its companions' number.

    Args:
        models, datas: the models and their transitions (same length).
        iterations, steps_per_iteration, batch_size, lr: as for :func:`fit_soft_q`.
        priors: each model's rationality prior (default :class:`BetaPrior` for all).
        seeds: each model's seed of its batches and rationality draws (default ``0, 1, ...``).
        on_iteration: called after each iteration (of all models) with its index.
        average: the share of each iteration's last steps whose weights are averaged
            (Polyak-Ruppert averaging): the average is the next iteration's frozen network and,
            after the last iteration, the fitted one. ``0`` keeps the last step's weights.
            Averaging removes most of the noise the last steps' minibatches leave in the
            weights, which at large rationalities decides near-tied actions (docs/approx.md).
        device: where the networks are trained (``"cpu"``, ``"cuda"``, ...): the data, the
            stacked weights and Adam's moments live there, the draws still come from each
            model's CPU generator (the same rows and rationalities on every device), and the
            fitted weights are written back into the models, which stay where they were.
            Results on two devices agree up to floating-point rounding, which fitted
            Q-iteration's many steps can grow; one device gives the same result for the same
            seeds. Box models are fitted on the CPU.

    Raises:
        ValueError: bad settings, lists of different lengths, networks of different shapes,
            models of both kinds, or Box models on another device than the CPU.
    """
    _check_int("iterations", iterations, 1)
    check_average(average)
    _check_int("steps_per_iteration", steps_per_iteration, 1)
    _check_int("batch_size", batch_size, 1)
    check_lr(lr)

    dev = th.device(check_device(device))
    K = len(models)
    priors = priors if priors is not None else [BetaPrior()] * K
    seeds = seeds if seeds is not None else list(range(K))
    if not (len(datas) == len(priors) == len(seeds) == K):
        raise ValueError(
            f"models ({K}), datas ({len(datas)}), priors ({len(priors)}) and seeds "
            f"({len(seeds)}) must have the same length."
        )
    kinds = {isinstance(m, BoxSoftQModel) for m in models}
    if len(kinds) > 1:
        raise ValueError(
            "models fitted together need one kind of action: got SoftQModel and BoxSoftQModel; "
            "fit each kind on its own."
        )
    box = kinds == {True}
    losses: list[list[float]] = [[0.0] * iterations if m.null else [] for m in models]
    active = [k for k in range(K) if not models[k].null]
    if not active:
        return losses
    if box and dev.type != "cpu":
        raise ValueError(
            f"the Box-action soft Q-fits run on the CPU, got device={device!r}; pass device='cpu'."
        )
    fits = [_fit_of(models[k], datas[k], priors[k], seeds[k], dev) for k in active]
    params = _stacked_params([f.model for f in fits], dev)
    # one kernel per tensor for the Discrete fits (~10% of a step); the Box fits keep the plain
    # loop, which rounds differently in the last bits (their validated numbers are its)
    opt = th.optim.Adam(params, lr=lr, fused=None if box else True)
    total = iterations * steps_per_iteration
    sched = th.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(k / max(total, 1), 1.0)))
    )
    batches = _box_batches if box else _batches
    # Weights averaged over each iteration's steps from avg_from on (none with average 0: then
    # the "average" is the last step's weights); the average is the next frozen copy.
    avg_from = steps_per_iteration - round(float(average) * steps_per_iteration)
    avg = [p.detach().clone() for p in params]
    for it in range(iterations):
        frozen = [p.clone() for p in avg]
        n_avg = 0
        acc = th.zeros(len(fits), device=dev)
        steps = batches(fits, frozen, steps_per_iteration, batch_size)  # type: ignore[arg-type]
        for k, batch in enumerate(steps):
            pred = batch.predict(_stacked_forward(params, batch.z))
            per_model = th.mean((pred - batch.target) ** 2, dim=1)
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
    _write_back([f.model for f in fits], avg)
    return losses


def bellman_residual(model: Any, data: Rollouts, b: float) -> tuple[float, float]:
    """Mean and root-mean-square soft Bellman residual at normalised ``b`` on ``data``, in
    utility units (a :class:`SoftQModel`, a :class:`BoxSoftQModel`, or a model answering
    ``f``, ``q_scale`` as the first does).

    The residual ``q(s, a) - r - m_b(q(s', .))`` of each row includes the spread of the sampled
    next state, so in stochastic environments its RMS is not zero even for the exact ``q``; its
    mean is (up to sampling noise).
    """
    x = th.as_tensor(data.x)
    xn = th.as_tensor(data.x_next)
    t = th.as_tensor(data.t)
    r = th.as_tensor(data.r / model.q_scale, dtype=th.float32)
    live = th.as_tensor(~data.done, dtype=th.float32)
    bb = th.full((x.shape[0],), float(b))
    with th.no_grad():
        if isinstance(model, BoxSoftQModel):
            a = model.scale_actions(th.as_tensor(data.a)).unsqueeze(1)
            q = model.f_points(x, t, bb, a)[:, 0]
            nxt = model.soft_value(xn, t + 1, bb)
        else:
            a = th.as_tensor(data.a)
            q = model.f(x, t, bb).gather(1, a.reshape(-1, 1)).squeeze(1)
            nxt = soft_mean(model.f(xn, t + 1, bb), bb)
        res = q - r - live * nxt
    res = res.double() * model.q_scale
    return float(res.mean()), float(res.pow(2).mean().sqrt())
