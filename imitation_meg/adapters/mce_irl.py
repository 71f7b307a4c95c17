"""Goal-directedness scores for imitation's reward nets and MCE-IRL runs.

- :func:`reward_net_sa` evaluates an imitation ``RewardNet`` on every ``(s, a, s')`` of a tabular
  MDP (observations from ``observation_matrix``, one-hot actions, ``done = False``) and reduces it
  to the per-step reward ``r(s, a)``, keeping gradients with respect to the net's parameters.
- :func:`score_mce_irl` takes a trained ``imitation.algorithms.mce_irl.MCEIRL`` and reports
  (a) the demonstrator's known-utility MEG with respect to the reward MCE-IRL learned, and (b) the
  unknown-utility MEG of the demonstrations over the reward net's class, with the gap between
  MCE-IRL's own fit and the optimum of that class.

This module imports imitation; import it explicitly (``import imitation_meg.adapters.mce_irl``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import torch as th
from torch import nn

from imitation_meg._validation import as_sa_occupancy
from imitation_meg.core.algorithm2 import check_reward_net, reward_net_sa
from imitation_meg.core.known import MEGResult, meg, sa_occupancy_of
from imitation_meg.core.likelihood import log_likelihood
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.unknown import meg_unknown

__all__ = ["MCEIRLScore", "linear_features", "reward_net_sa", "score_mce_irl"]


def linear_features(reward_net: Any, mdp: TabularMDP) -> th.Tensor | None:
    """The feature matrix ``(S, A, F)`` of a reward net that is linear in its inputs, else None.

    imitation's ``BasicRewardNet(hid_sizes=[])`` is one affine layer over the concatenated
    inputs, so its class is exactly ``{Phi @ theta}`` with ``Phi`` the per-step expectation of
    those inputs plus a constant.
    """
    check_reward_net(reward_net)
    linears = [m for m in reward_net.modules() if isinstance(m, nn.Linear)]
    others = [
        m
        for m in reward_net.modules()
        if not isinstance(m, (nn.Linear, nn.Sequential, nn.Flatten))
        and m is not reward_net
        and type(m).__name__ != "SqueezeLayer"
    ]
    if len(linears) != 1 or others:
        return None
    lin = linears[0]
    # The net is affine: evaluate its inputs through a probe copy whose layer is the identity.
    probe = copy.deepcopy(reward_net)
    F = lin.in_features
    _S, _A = mdp.n_states, mdp.n_actions
    cols = []
    with th.no_grad():
        target = next(m for m in probe.modules() if isinstance(m, nn.Linear))
        for j in range(F + 1):  # F unit vectors and the bias
            target.weight.zero_()
            target.bias.zero_()
            if j < F:
                target.weight[0, j] = 1.0
            else:
                target.bias[0] = 1.0
            cols.append(reward_net_sa(probe, mdp).detach())
    return th.stack(cols, -1)  # (S, A, F + 1)


@dataclasses.dataclass(frozen=True)
class MCEIRLScore:
    """Goal-directedness report of an MCE-IRL run.

    Attributes:
        known: demonstrator's known-utility MEG w.r.t. the reward MCE-IRL learned.
        unknown: unknown-utility MEG of the demonstrations over the reward net's class (exact for
            linear nets, a lower bound from Algorithm 2 otherwise).
        all_state_utilities: exact unknown-utility MEG over every utility of the state (an
            upper reference for any state-only class).
        mce_irl_fit: ``E[sum_t log pi_theta] + H log|A|`` at MCE-IRL's own parameters (beta = 1).
        gap: ``unknown.meg - mce_irl_fit``: how far MCE-IRL's fit is from the class optimum.
        exact: whether ``unknown`` is exact (linear class) rather than a lower bound.
    """

    known: MEGResult
    unknown: MEGResult
    all_state_utilities: MEGResult
    mce_irl_fit: float
    gap: float
    exact: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return {
            "known": self.known.to_dict(),
            "unknown": self.unknown.to_dict(),
            "all_state_utilities": self.all_state_utilities.to_dict(),
            "mce_irl_fit": self.mce_irl_fit,
            "gap": self.gap,
            "exact": self.exact,
        }


def score_mce_irl(
    mce_irl: Any,
    *,
    expert_policy: Any = None,
    sa_occupancy: Any = None,
    mdp: TabularMDP | None = None,
    steps: int = 300,
    lr: float = 0.01,
    restarts: int = 3,
    seed: int = 0,
) -> MCEIRLScore:
    """Score an MCE-IRL run: known-utility MEG of the learned reward, unknown-utility MEG of its class.

    MCE-IRL keeps only a time-summed state occupancy of its demonstrations, which does not
    determine the causal likelihood; pass the demonstrator's policy (``(H, S, A)`` or
    ``(S, A)``) or its state-action occupancy (``(H, S, A)``, e.g. from
    :func:`imitation_meg.core.trajectories` counts).

    Args:
        mce_irl: a trained ``imitation.algorithms.mce_irl.MCEIRL``.
        expert_policy: the demonstrator's policy.
        sa_occupancy: or the demonstrations' ``(H, S, A)`` state-action occupancy.
        mdp: the tabular MDP; default ``TabularMDP.from_env(mce_irl.env)`` with MCE-IRL's
            discount.
        steps, lr, restarts, seed: Algorithm 2 settings for non-linear reward nets.

    Returns:
        :class:`MCEIRLScore`.

    Raises:
        TypeError: if ``mce_irl`` is not an ``MCEIRL``.
        ValueError: if neither ``expert_policy`` nor ``sa_occupancy`` is given.
    """
    from imitation.algorithms.mce_irl import MCEIRL

    if not isinstance(mce_irl, MCEIRL):
        raise TypeError(f"expected an imitation MCEIRL, got {type(mce_irl).__name__}.")
    if mdp is None:
        mdp = TabularMDP.from_env(mce_irl.env)
        if mce_irl.discount != 1.0:
            mdp = TabularMDP(
                (mdp.next_state, mdp.prob),
                mdp.utility,
                mdp.steps,
                mdp.initial_state_dist,
                mce_irl.discount,
                observation_matrix=mdp.observation_matrix,
                name=mdp.name,
            )
    if sa_occupancy is not None:
        w = as_sa_occupancy(sa_occupancy, mdp)
    elif expert_policy is not None:
        w = sa_occupancy_of(mdp, expert_policy)
    else:
        raise ValueError(
            "pass expert_policy=(H, S, A) or sa_occupancy=(H, S, A): MCE-IRL's stored state "
            "occupancy does not determine the demonstrations' likelihood."
        )
    net = mce_irl.reward_net
    with th.no_grad():
        learned = reward_net_sa(net, mdp).detach()
    known = meg(None, mdp, learned, sa_occupancy=w)
    fit = float(log_likelihood(mdp, learned, w)) + mdp.steps * math.log(mdp.n_actions)
    phi = linear_features(net, mdp)
    if phi is not None:
        unknown = meg_unknown(None, mdp, features=phi, sa_occupancy=w)
        exact = True
    else:
        unknown = meg_unknown(
            None,
            mdp,
            sa_occupancy=w,
            utility_model=copy.deepcopy(net).double(),
            steps=steps,
            lr=lr,
            restarts=restarts,
            seed=seed,
        )
        exact = False
    all_states = meg_unknown(None, mdp, sa_occupancy=w)
    return MCEIRLScore(
        known=known,
        unknown=unknown,
        all_state_utilities=all_states,
        mce_irl_fit=fit,
        gap=unknown.meg - fit,
        exact=exact,
    )
