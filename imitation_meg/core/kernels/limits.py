"""The ``beta -> +-inf`` limit of the soft-optimal policies, decision by decision.

One definition of a tie among hard Q-values (:func:`tie_set`) and of one decision of the limit
(:func:`limit_step`), used by the finite-horizon and discounted solvers, the limit pass of
known-utility MEG, the class limits and the CID backward induction. Pure functions of tensors.
"""

from __future__ import annotations

import math

import torch as th

__all__ = ["TIE_TOL", "limit_step", "tie_set"]

#: Relative tolerance under which hard Q-values count as tied (beta = +-inf).
TIE_TOL = 1e-9


def tie_set(Q: th.Tensor, dim: int = -1, tie_tol: float = TIE_TOL) -> tuple[th.Tensor, th.Tensor]:
    """The tied best actions of hard Q-values: ``(ties, best)``.

    ``ties`` is the boolean mask ``Q >= best - tie_tol * (1 + max |Q|)`` (maxima over the action
    axis ``dim``, kept as a size-1 axis in ``best``); the one definition of a tie used by the
    hard policies, the limit pass and the limit bound of known-utility MEG (package-internal).
    """
    best = Q.amax(dim, keepdim=True)
    tol = tie_tol * (1.0 + Q.abs().amax(dim, keepdim=True))
    return th.ge(Q, best - tol), best


def limit_step(
    Q: th.Tensor, q1: th.Tensor, dim: int = -1, tie_tol: float = TIE_TOL
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """One decision of the ``beta -> +inf`` limit of the soft-optimal policies.

    As ``beta`` grows, ``Q_beta = beta Q* + q1 + o(1)``: the hard values ``Q*`` decide which
    actions survive (the tie set of :func:`tie_set`) and the finite part ``q1``, the causal
    entropy still available after each action, weights the survivors. The limit policy is the
    softmax of ``q1`` over the ties, and ``V_beta = beta V* + v1 + o(1)`` with
    ``v1 = logsumexp`` of ``q1`` over the ties. This is the one definition of the limit used by
    the MDP solvers (finite horizon and discounted), the class limits and the CID backward
    induction; ``beta -> -inf`` is the same step on ``-Q*``.

    Args:
        Q: hard values ``Q*`` to maximise, actions along ``dim``.
        q1: the finite part ``q1`` (same shape): ``gamma E[v1']`` of the next decision.
        dim: the action axis.
        tie_tol: relative tie tolerance (see :func:`tie_set`).

    Returns:
        ``(log_pi, best, v1)``: the limit log-policy (``-inf`` off the ties), ``max Q*`` and
        ``v1``, the last two with a size-1 action axis.
    """
    ties, best = tie_set(Q, dim, tie_tol)
    masked = th.where(ties, q1, th.full_like(q1, -math.inf))
    v1 = th.logsumexp(masked, dim, keepdim=True)
    return masked - v1, best, v1
