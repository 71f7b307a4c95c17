"""Reference policies and validation of user policies.

Every builder returns a time-dependent policy ``pi[t, s, a]`` of shape ``(H, S, A)`` in the MDP's
dtype and device. User policies may be stationary ``(S, A)`` or time-dependent ``(H, S, A)``,
numpy or torch; :func:`as_policy` checks them (finite, non-negative, rows summing to 1 within
``1e-5``) and renormalises the rows in the MDP's dtype.
"""

from __future__ import annotations

import torch as th

from imitation_meg._validation import POLICY_ROW_TOL, as_policy, check_horizon_memory
from imitation_meg.mdp import TabularMDP
from imitation_meg.soft_vi import hard_value_iteration, soft_value_iteration
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
    """The uniformly random policy, ``(H, S, A)``."""
    check_horizon_memory(mdp, what="policies.uniform", sa_tables=1)
    return th.full(
        (mdp.horizon, mdp.n_states, mdp.n_actions),
        1.0 / mdp.n_actions,
        dtype=mdp.dtype,
        device=mdp.device,
    )


def _break_ties(pi: th.Tensor, tie_break: str) -> th.Tensor:
    if tie_break == "uniform":
        return pi
    if tie_break == "first":
        # The lowest-index best action, as numpy's argmax picks it.
        first = (pi > 0).to(th.int8).argmax(-1)
        return th.nn.functional.one_hot(first, pi.shape[-1]).to(pi.dtype)
    raise ValueError(f"tie_break must be 'uniform' or 'first', got {tie_break!r}.")


def optimal(
    mdp: TabularMDP, utility: UtilityLike | None = None, *, tie_break: str = "uniform"
) -> th.Tensor:
    """The optimal policy for ``utility`` (default the MDP's), ``(H, S, A)``.

    Args:
        mdp: the MDP.
        utility: utility to maximise; default the MDP's.
        tie_break: ``"uniform"`` splits probability evenly over tied best actions (the
            ``beta = +inf`` limit); ``"first"`` takes the lowest-index best action, giving the
            deterministic policy an argmax-based planner would follow.
    """
    return _break_ties(hard_value_iteration(mdp, utility, sign=1.0)[2].exp(), tie_break)


def anti_optimal(
    mdp: TabularMDP, utility: UtilityLike | None = None, *, tie_break: str = "uniform"
) -> th.Tensor:
    """The policy minimising ``utility`` (default the MDP's), ``(H, S, A)``; ties as in :func:`optimal`."""
    return _break_ties(hard_value_iteration(mdp, utility, sign=-1.0)[2].exp(), tie_break)


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
    """The soft-optimal (Boltzmann-rational) policy with rationality ``beta``, ``(H, S, A)``."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)):
        raise TypeError(f"beta must be a real number (or +-inf), got {beta!r}.")
    return soft_value_iteration(mdp, float(beta), utility).log_pi[0].exp()
