"""The causal log-likelihood of soft-optimal models, the building block of every utility class.

For a per-step reward ``r (S, A)`` (rationality absorbed), ``L(r) = E_w[sum_t log pi_r,t(a | s)]``
with ``pi_r`` the soft-optimal policy of ``r`` at ``beta = 1`` and ``w (H, S, A)`` the scored
behaviour's state-action occupancy. Unknown-utility MEG over a class is ``sup_r L(r) + H log|A|``:
:mod:`imitation_meg.unknown` maximises it exactly over linear classes and
:mod:`imitation_meg.algorithm2` by gradient ascent over differentiable ones. Both build their
results here, with the Gibbs certificate that bounds them all.
"""

from __future__ import annotations

import math
from typing import Any

import torch as th

from imitation_meg._validation import as_sa_occupancy
from imitation_meg.known import MEGResult, sa_occupancy_of
from imitation_meg.mdp import TabularMDP
from imitation_meg.soft_vi import occupancy_measures, soft_value_iteration
from imitation_meg.type_aliases import ArrayLike, PolicyLike

__all__ = ["behaviour_occupancy", "class_result", "gibbs_certificate", "log_likelihood"]


def behaviour_occupancy(
    mdp: TabularMDP, policy: PolicyLike | None, sa_occupancy: ArrayLike | None
) -> th.Tensor:
    """The ``(H, S, A)`` occupancy of the scored behaviour: ``sa_occupancy`` validated, or the
    policy's own in the MDP's dynamics."""
    if sa_occupancy is not None:
        return as_sa_occupancy(sa_occupancy, mdp)
    if policy is None:
        raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
    return sa_occupancy_of(mdp, policy)


def gibbs_certificate(mdp: TabularMDP, sa_occupancy: th.Tensor) -> float:
    """Upper bound on every MEG of a behaviour: ``sum_t E[log|A| - H(pi_t(. | s_t))]``.

    By Gibbs' inequality no model's log-likelihood exceeds the behaviour's own, so this bounds
    known- and unknown-utility MEG alike. ``pi_t`` is read off the occupancy
    ``w[t, s, a] / sum_a w[t, s, a]``.

    Args:
        mdp: the MDP.
        sa_occupancy: ``(H, S, A)`` state-action occupancy.
    """
    w = sa_occupancy
    ws = w.sum(-1, keepdim=True)
    cond = th.where(ws > 0, w / ws.clamp_min(1e-300), th.zeros_like(w))
    own = th.where(w > 0, w * cond.clamp_min(1e-300).log(), th.zeros_like(w)).sum()
    return float(mdp.horizon * math.log(mdp.n_actions) + own)


def log_likelihood(mdp: TabularMDP, reward_sa: th.Tensor, sa_occupancy: th.Tensor) -> th.Tensor:
    """``E[sum_t log pi_t(a_t | s_t)]`` of the soft-optimal policy of ``reward_sa`` (beta = 1).

    Differentiable with respect to ``reward_sa (S, A)``.

    Args:
        mdp: the MDP.
        reward_sa: ``(S, A)`` per-step reward.
        sa_occupancy: ``(H, S, A)`` behaviour occupancy.

    Returns:
        A scalar tensor.
    """
    log_pi = soft_value_iteration(mdp, 1.0, utility=reward_sa).log_pi[0]
    return (sa_occupancy * log_pi).sum()


def class_result(
    mdp: TabularMDP,
    w: th.Tensor,
    reward: th.Tensor,
    L: float,
    *,
    grad_norm: float,
    converged: bool,
    at_boundary: bool,
    evaluations: int,
    extra: dict[str, Any],
) -> MEGResult:
    """The :class:`MEGResult` of a utility class's best model ``reward (S, A)`` (rationality
    absorbed) with log-likelihood ``L``: the value clipped to ``[0, H log|A|]``, the expected
    utilities of the behaviour, the model and the uniform policy under ``reward``, and the Gibbs
    certificate in ``extra``."""
    H, A = mdp.horizon, mdp.n_actions
    bound = H * math.log(A)
    value = min(max(L + bound, 0.0), bound)
    if value <= 1e-12 * max(1.0, bound):  # rounding of L + H log|A| around 0
        value = 0.0
    r = reward.detach()
    spread = float(r.max() - r.min())
    gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
    eu = float((gam.view(H, 1, 1) * w * r).sum())
    sv = soft_value_iteration(mdp, [1.0, 0.0], utility=r)
    pis = sv.pi  # (2, H, S, A)
    D = occupancy_measures(mdp, pis)[:, :-1]  # (2, H, S)
    eus = (gam.view(1, H, 1, 1) * D.unsqueeze(-1) * pis * r).sum((1, 2, 3))
    return MEGResult(
        meg=float(value),
        beta=spread,
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=eu,
        model_expected_utility=float(eus[0]),
        uniform_expected_utility=float(eus[1]),
        log_likelihood=float(L),
        grad=float(grad_norm),
        converged=bool(converged),
        at_boundary=bool(at_boundary),
        evaluations=evaluations,
        extra=dict(extra, utility=r.cpu(), certificate=gibbs_certificate(mdp, w)),
    )
