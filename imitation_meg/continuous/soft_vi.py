"""Soft value iteration over a quadrature rule of the action box (the exact reference's core).

- :func:`model_rule`: the box rule of the soft-optimal models at a refinement level;
- :func:`soft_mean`: ``(1/beta) log sum_j w_j exp(beta Q_j)`` and the model's log-probabilities,
  with full relative precision as ``beta -> 0``;
- :func:`model_tables`: the utility and the transitions at the rule's points;
- :func:`soft_values`: ``V (H + 1, S)`` of one rationality.
"""

from __future__ import annotations

import torch as th

from imitation_meg.continuous.mdp import BoxUtility, ContinuousMDP
from imitation_meg.continuous.quadrature import BoxRule, box_rule

__all__ = ["model_rule", "model_tables", "soft_mean", "soft_values"]


def model_rule(mdp: ContinuousMDP, level: int = 0) -> BoxRule:
    """The box rule at refinement ``level``: 16 Gauss-Legendre points per panel, ``4 * 2**level``
    panels per dimension in 1-D, ``3 * 2**level`` in 2-D and ``2 * 2**level`` in 3-D."""
    panels = {1: 4, 2: 3}.get(mdp.action_dim, 2) * 2 ** int(level)
    return box_rule(mdp.low, mdp.high, nodes=16, panels=panels)


def soft_mean(Q: th.Tensor, log_w: th.Tensor, beta: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """The soft mean over a rule and the model's log-probabilities at its points.

    Args:
        Q: ``(K, S, N)`` values at ``N`` points, for ``K`` rationalities.
        log_w: ``(N,)`` log probability weights of the reference law (``logsumexp = 0``).
        beta: ``(K,)`` rationalities (0 allowed: the mean).

    Returns:
        ``V (K, S) = (1/beta) log sum_j w_j exp(beta Q_j)`` and ``log p (K, S, N) = log w +
        beta (Q - V)``. Small ``|beta| * spread`` uses ``log1p`` of centred values, so ``V`` keeps
        full relative precision as ``beta -> 0``.
    """
    w = log_w.exp()
    b = beta.view(-1, 1, 1)
    mean = (Q * w).sum(-1, keepdim=True)
    z = b * (Q - mean)
    small = z.abs().amax(-1, keepdim=True) < 1.0
    lse_small = th.log1p((w * th.expm1(th.where(small, z, th.zeros_like(z)))).sum(-1))
    lse_large = th.logsumexp(log_w + th.where(small, th.zeros_like(z), z), dim=-1)
    lse = th.where(small.squeeze(-1), lse_small, lse_large)  # log sum w exp(beta (Q - mean))
    safe = th.where(beta == 0, th.ones_like(beta), beta).view(-1, 1)
    V = mean.squeeze(-1) + th.where(beta.view(-1, 1) == 0, th.zeros_like(lse), lse / safe)
    return V, log_w + z - lse.unsqueeze(-1)


def model_tables(
    mdp: ContinuousMDP, utility: BoxUtility | None, level: int
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """Utility ``(S, N)``, transitions ``(S, N, S)``, log weights ``(N,)`` and points ``(N, d)``
    of the box rule at ``level`` (utility in the caller's units)."""
    box = model_rule(mdp, level)
    S, N = mdp.n_states, box.points.shape[0]
    states = th.arange(S).repeat_interleave(N)
    acts = box.points.repeat(S, 1)
    rm = mdp.reward(states, acts, utility).view(S, N)
    Tm = mdp.transition(states, acts).view(S, N, S)
    log_w = (box.weights / box.weights.sum()).log()
    return rm, Tm, log_w, box.points


def soft_values(
    mdp: ContinuousMDP, beta: float, utility: BoxUtility | None = None, *, level: int = 3
) -> th.Tensor:
    """Soft values ``V (H + 1, S)`` (utility units, ``V[H] = 0``) of rationality ``beta`` by the
    box rule at ``level``."""
    rm, Tm, log_w, _ = model_tables(mdp, utility, level)
    b = th.tensor([float(beta)], dtype=th.float64)
    V = [th.zeros(mdp.n_states, dtype=th.float64)]
    for _ in range(mdp.horizon):
        Q = rm + Tm @ V[0]
        V.insert(0, soft_mean(Q.unsqueeze(0), log_w, b)[0][0])
    return th.stack(V)
