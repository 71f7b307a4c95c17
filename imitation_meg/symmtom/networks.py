"""Ensemble networks for the multi-agent learners (:mod:`imitation_meg.symmtom.maddpg`).

``m`` agents' networks are held as one module whose parameters have the agent first, so that all
agents run in one batched matrix product: ``(m, B, in) -> (m, B, out)``. Agent ``i`` reads only
slice ``i`` of every parameter.
"""

from __future__ import annotations

import math

import torch as th
from torch import nn

__all__ = [
    "Actors",
    "EnsembleLSTM",
    "EnsembleLinear",
    "EnsembleMLP",
    "clip_per_agent",
    "relaxed_actions",
    "soft_update",
    "straight_through",
]


class EnsembleLinear(nn.Module):
    """``m`` independent linear layers applied at once: ``(m, B, in) -> (m, B, out)``."""

    def __init__(self, m: int, n_in: int, n_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)
        self.weight = nn.Parameter(th.empty(m, n_in, n_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(th.empty(m, 1, n_out).uniform_(-bound, bound))

    def forward(self, x: th.Tensor) -> th.Tensor:
        return th.baddbmm(self.bias, x, self.weight)


class EnsembleMLP(nn.Module):
    """``m`` two-hidden-layer ReLU MLPs: ``(m, B, in) -> (m, B, out)``."""

    def __init__(self, m: int, n_in: int, hidden: int, n_out: int) -> None:
        super().__init__()
        self.l1 = EnsembleLinear(m, n_in, hidden)
        self.l2 = EnsembleLinear(m, hidden, hidden)
        self.l3 = EnsembleLinear(m, hidden, n_out)

    def forward(self, x: th.Tensor) -> th.Tensor:
        return self.l3(th.relu(self.l2(th.relu(self.l1(x)))))


class EnsembleLSTM(nn.Module):
    """``m`` independent LSTMs over ``(m, B, T, in)``; state ``(h, c)``, each ``(m, B, hidden)``."""

    def __init__(self, m: int, n_in: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.x2g = EnsembleLinear(m, n_in, 4 * hidden)
        self.h2g = EnsembleLinear(m, hidden, 4 * hidden)
        bound = 1.0 / math.sqrt(hidden)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(
        self, x: th.Tensor, state: tuple[th.Tensor, th.Tensor] | None
    ) -> tuple[th.Tensor, tuple[th.Tensor, th.Tensor]]:
        m, b, t, _ = x.shape
        gx = self.x2g(x.reshape(m, b * t, -1)).reshape(m, b, t, -1)
        if state is None:
            h = c = x.new_zeros(m, b, self.hidden)
        else:
            h, c = state
        outs = []
        for k in range(t):
            i, f, g, o = (gx[:, :, k] + self.h2g(h)).chunk(4, dim=-1)
            c = th.sigmoid(f) * c + th.sigmoid(i) * th.tanh(g)
            h = th.sigmoid(o) * th.tanh(c)
            outs.append(h)
        return th.stack(outs, dim=2), (h, c)


class Actors(nn.Module):
    """The ``n`` actors of one run: ``(n, B, T, in) -> (n, B, T, 5 + c)`` logits.

    Feed-forward actors ignore ``state``; recurrent ones carry the LSTM state ``(h, c)``, each
    ``(n, B, hidden)`` (``None``: zero state), and return the new state. Every parameter has the
    agent first: actor ``i`` reads only slice ``i``.
    """

    def __init__(
        self, n_agents: int, n_in: int, hidden: int, n_out: int, *, recurrent: bool = False
    ) -> None:
        super().__init__()
        n, h = n_agents, hidden
        self.recurrent = recurrent
        if self.recurrent:
            self.inp = EnsembleLinear(n, n_in, h)
            self.lstm = EnsembleLSTM(n, h, h)
            self.out = EnsembleLinear(n, h, n_out)
        else:
            self.mlp = EnsembleMLP(n, n_in, h, n_out)

    def forward(
        self, x: th.Tensor, state: tuple[th.Tensor, th.Tensor] | None = None
    ) -> tuple[th.Tensor, tuple[th.Tensor, th.Tensor] | None]:
        m, b, t, _ = x.shape
        if not self.recurrent:
            return self.mlp(x.reshape(m, b * t, -1)).reshape(m, b, t, -1), None
        z = th.relu(self.inp(x.reshape(m, b * t, -1))).reshape(m, b, t, -1)
        y, new_state = self.lstm(z, state)
        return self.out(y.reshape(m, b * t, -1)).reshape(m, b, t, -1), new_state


def straight_through(logits: th.Tensor, gen: th.Generator) -> th.Tensor:
    """Straight-through Gumbel-softmax over the last axis (one-hot forward, softmax backward)."""
    u = th.rand(logits.shape, generator=gen).clamp_(1e-20, 1.0)
    soft = th.softmax(logits - th.log(-th.log(u)), dim=-1)
    hard = nn.functional.one_hot(soft.argmax(dim=-1), logits.shape[-1]).float()
    return hard - soft.detach() + soft


def relaxed_actions(logits: th.Tensor, gen: th.Generator, *, split: int = 5) -> th.Tensor:
    """Straight-through Gumbel-softmax of two categorical parts: ``logits[..., :split]`` (the move)
    and ``logits[..., split:]`` (the piece), concatenated."""
    return th.cat(
        [straight_through(logits[..., :split], gen), straight_through(logits[..., split:], gen)],
        dim=-1,
    )


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    with th.no_grad():
        for pt, ps in zip(target.parameters(), source.parameters(), strict=True):
            pt.mul_(1.0 - tau).add_(ps, alpha=tau)


def clip_per_agent(module: nn.Module, n: int, max_norm: float) -> None:
    """Clip each agent's gradient norm separately (ensemble parameters have the agent first)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    norms = th.sqrt(th.stack([g.reshape(n, -1).pow(2).sum(dim=1) for g in grads]).sum(dim=0))
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.reshape(n, *([1] * (g.dim() - 1))))
