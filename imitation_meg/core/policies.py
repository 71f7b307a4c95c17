"""Reference policies and validation of user policies.

Every builder returns a time-dependent policy ``pi[t, s, a]`` of shape ``(H, S, A)`` in the MDP's
dtype and device (a stationary ``(S, A)`` one for a discounted infinite-horizon MDP). User policies may be stationary ``(S, A)`` or time-dependent ``(H, S, A)``,
numpy or torch; :func:`as_policy` checks them (finite, non-negative, rows summing to 1 within
``1e-5``) and renormalises the rows in the MDP's dtype.
"""

from __future__ import annotations

import math

import numpy as np
import torch as th

from imitation_meg._validation import POLICY_ROW_TOL, as_policy, check_horizon_memory
from imitation_meg.core import discounted
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import (
    hard_value_iteration,
    limit_value_iteration,
    soft_value_iteration,
)
from imitation_meg.type_aliases import UtilityLike

__all__ = [
    "POLICY_ROW_TOL",
    "anti_optimal",
    "as_policy",
    "epsilon_greedy",
    "optimal",
    "soft_optimal",
    "uniform",
]


def uniform(mdp: TabularMDP) -> th.Tensor:
    """The uniformly random policy, ``(H, S, A)`` (``(S, A)`` for a discounted MDP)."""
    check_horizon_memory(mdp, what="policies.uniform", sa_tables=1)
    steps = () if mdp.horizon is None else (mdp.horizon,)
    return th.full(
        (*steps, mdp.n_states, mdp.n_actions),
        1.0 / mdp.n_actions,
        dtype=mdp.dtype,
        device=mdp.device,
    )


_TIE_BREAKS = ("uniform", "first", "max_entropy")


def _hard_policy(
    mdp: TabularMDP, utility: UtilityLike | None, sign: float, tie_break: str
) -> th.Tensor:
    """The optimal (``sign=+1``) or anti-optimal (``-1``) policy with the given tie rule."""
    if tie_break not in _TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {_TIE_BREAKS}, got {tie_break!r}.")
    if mdp.horizon is None:
        pi = _stationary_hard_policy(mdp, utility, sign, tie_break)
    elif tie_break == "max_entropy":
        return limit_value_iteration(mdp, utility, sign=sign)[2].exp()
    else:
        pi = hard_value_iteration(mdp, utility, sign=sign)[2].exp()
    if tie_break == "first":
        # The lowest-index best action, as numpy's argmax picks it.
        first = (pi > 0).to(th.int8).argmax(-1)
        return th.nn.functional.one_hot(first, pi.shape[-1]).to(pi.dtype)
    return pi


def _stationary_hard_policy(
    mdp: TabularMDP, utility: UtilityLike | None, sign: float, tie_break: str
) -> th.Tensor:
    """The stationary optimal (anti-optimal) policy of a discounted MDP, ``(S, A)``: the limit
    policy for ``"max_entropy"``, else ties split evenly (``"first"`` keeps the first)."""
    dyn = discounted.Dynamics.of(mdp)
    r = mdp.reward_sa(utility).detach().cpu().double().numpy()
    if tie_break == "max_entropy":
        lp = discounted.limit_policy(dyn, r, sign)[0]
    else:
        Q, _ = discounted.hard_values(dyn, sign * r)
        tied = th.from_numpy(discounted.ties(Q))
        n = tied.sum(-1, keepdim=True)
        lp = th.where(tied, -n.double().log(), -math.inf).numpy()
    return th.from_numpy(np.exp(lp)).to(dtype=mdp.dtype, device=mdp.device)


def optimal(
    mdp: TabularMDP, utility: UtilityLike | None = None, *, tie_break: str = "uniform"
) -> th.Tensor:
    """The optimal policy for ``utility`` (default the MDP's), ``(H, S, A)``.

    Args:
        mdp: the MDP.
        utility: utility to maximise; default the MDP's.
        tie_break: ``"uniform"`` splits probability evenly over tied best actions;
            ``"first"`` takes the lowest-index best action, giving the deterministic policy an
            argmax-based planner would follow; ``"max_entropy"`` weights tied actions by the
            causal entropy still available after them: the optimal policy of highest causal
            entropy, which is the ``beta = +inf`` limit of the soft-optimal policies and MEG's
            model there (:func:`imitation_meg.core.soft_vi.limit_value_iteration`).

    Raises:
        ValueError: an unknown ``tie_break``.
    """
    return _hard_policy(mdp, utility, 1.0, tie_break)


def anti_optimal(
    mdp: TabularMDP, utility: UtilityLike | None = None, *, tie_break: str = "uniform"
) -> th.Tensor:
    """The policy minimising ``utility`` (default the MDP's), ``(H, S, A)``; ties as in :func:`optimal`."""
    return _hard_policy(mdp, utility, -1.0, tie_break)


def epsilon_greedy(
    mdp: TabularMDP,
    epsilon: float,
    utility: UtilityLike | None = None,
    *,
    tie_break: str = "uniform",
) -> th.Tensor:
    """``(1 - epsilon) * optimal + epsilon * uniform``, ``(H, S, A)``.

    Raises:
        ValueError: if ``epsilon`` is not in ``[0, 1]`` or ``tie_break`` is unknown.
    """
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise TypeError(f"epsilon must be a float in [0, 1], got {epsilon!r}.")
    if not 0.0 <= float(epsilon) <= 1.0:
        raise ValueError(f"epsilon must lie in [0, 1], got {epsilon}.")
    return (1.0 - epsilon) * optimal(mdp, utility, tie_break=tie_break) + epsilon * uniform(mdp)


def soft_optimal(mdp: TabularMDP, beta: float, utility: UtilityLike | None = None) -> th.Tensor:
    """The soft-optimal (Boltzmann-rational) policy with rationality ``beta``, ``(H, S, A)``
    (``(S, A)`` for a discounted MDP); ``beta = +-inf`` gives the limits of these policies."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)):
        raise TypeError(f"beta must be a real number (or +-inf), got {beta!r}.")
    if math.isnan(beta):
        raise ValueError("beta must be a real number or +-inf, got nan.")
    if mdp.horizon is None:
        if math.isinf(beta):
            return _stationary_hard_policy(mdp, utility, 1.0 if beta > 0 else -1.0, "max_entropy")
        r = mdp.reward_sa(utility).detach().cpu().double().numpy()
        lp = discounted.soft_values(discounted.Dynamics.of(mdp), r, float(beta)).log_pi
        return th.from_numpy(np.exp(lp)).to(dtype=mdp.dtype, device=mdp.device)
    return soft_value_iteration(mdp, float(beta), utility).log_pi[0].exp()
