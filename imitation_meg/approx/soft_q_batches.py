"""The training rows of the batched soft Q-fits: each model's data, draws and clipped soft
Bellman targets (:class:`_Fit`, :class:`_BoxFit`), an iteration's minibatches of every model at
once, and the stacking of several networks' weights into one batched network and back.

The loop that uses them is :func:`imitation_meg.approx.soft_q.fit_soft_q_ensemble`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch as th
from torch import nn

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q_features import BetaPrior, soft_mean
from imitation_meg.approx.soft_q_models import BoxSoftQModel, SoftQModel, stacked_forward

#: Rows per forward pass of the frozen network when computing an iteration's targets.
_TARGET_CHUNK = 1 << 15
#: Input floats of the training rows prepared at once (all models of a batched fit).
_BLOCK_FLOATS = 1 << 24
#: Rows (times grid points) per forward pass of a Box model's frozen network.
_BOX_CHUNK = 1 << 16
#: Rows per Box model whose targets an iteration computes, on long horizons (``H >= 100``) and
#: short ones; the iteration's minibatches are drawn from them.
_POOL_LONG, _POOL_SHORT = 2048, 8192
_CPU = th.device("cpu")


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
                out = stacked_forward(frozen, m.inputs(self.xn[i], tn, bb).unsqueeze(0))[0]
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


def _clip_each(params: list[th.Tensor], max_norm: float) -> None:
    """Scale each model's gradient to norm at most ``max_norm`` (as ``clip_grad_norm_`` does
    for one model)."""
    sq = sum(p.grad.reshape(p.shape[0], -1).pow(2).sum(1) for p in params if p.grad is not None)
    coef = (max_norm / (th.as_tensor(sq).sqrt() + 1e-6)).clamp(max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coef.reshape(-1, *([1] * (p.dim() - 1))))


def _average_into(avg: list[th.Tensor], params: list[th.Tensor], n_avg: int) -> None:
    """Fold the current parameters into the running mean ``avg`` of ``n_avg`` iterates."""
    with th.no_grad():
        for mean, p in zip(avg, params, strict=True):
            mean.lerp_(p, 1.0 / n_avg)
