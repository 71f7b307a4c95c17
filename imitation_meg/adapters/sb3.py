"""The ``(S, A)`` policy table of a stable-baselines3 / sb3-contrib policy object.

:func:`sb3_policy_table` reads actor-critic policies (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO)
through their action distribution, in one batched forward pass, and argmax policies (DQN, QR-DQN,
ARS) as epsilon-greedy over their action values; the sb3-contrib specifics live in
:mod:`imitation_meg.adapters.contrib`. Saved models (the algorithm read from the zip) are in
:mod:`imitation_meg.adapters.saved_models`, ``VecNormalize`` statistics in
:mod:`imitation_meg.adapters.vec_normalize`; their public names are re-exported here.

The dispatcher for every kind of policy is :func:`imitation_meg.adapters.policy_table`;
stable_baselines3 is imported only inside these functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import is_loaded_instance
from imitation_meg.adapters.observations import (
    DEFAULT_BATCH,
    ObservationAliasingWarning,
    check_actions,
    no_epsilon,
    resolve_mdp,
    state_observations,
)
from imitation_meg.adapters.saved_models import (
    SB3_ALGOS,
    SavedModelInfo,
    algorithm_class,
    algorithm_names,
    load_model,
    read_model_info,
)
from imitation_meg.adapters.vec_normalize import (
    UnusedStatisticsWarning,
    resolve_vec_normalize,
    stats_beside,
    vec_normalize_for_file,
    vec_normalize_of,
)
from imitation_meg.mdp import TabularMDP

__all__ = [
    "SB3_ALGOS",
    "ObservationAliasingWarning",
    "SavedModelInfo",
    "UnusedStatisticsWarning",
    "algorithm_class",
    "algorithm_names",
    "epsilon_greedy_rows",
    "is_sb3_algorithm",
    "is_sb3_policy",
    "load_model",
    "read_model_info",
    "resolve_mdp",
    "resolve_vec_normalize",
    "sb3_policy_table",
    "state_observations",
    "stats_beside",
    "vec_normalize_for_file",
    "vec_normalize_of",
]


def is_sb3_algorithm(obj: Any) -> bool:
    """Whether ``obj`` is an SB3 ``BaseAlgorithm`` (SB3 is not imported to find out)."""
    return is_loaded_instance(obj, "stable_baselines3.common.base_class", "BaseAlgorithm")


def is_sb3_policy(obj: Any) -> bool:
    """Whether ``obj`` is an SB3 ``BasePolicy`` (SB3 is not imported to find out)."""
    return is_loaded_instance(obj, "stable_baselines3.common.policies", "BasePolicy")


# ------------------------------------------------------------------------ policy tables
def _argmax_kind(policy: Any) -> str | None:
    """'dqn', 'qrdqn' or 'ars' for the policies that act by argmax, else None."""
    if hasattr(policy, "get_distribution"):
        return None
    if hasattr(policy, "quantile_net"):
        return "qrdqn"
    if hasattr(policy, "q_net"):
        return "dqn"
    if is_loaded_instance(policy, "sb3_contrib.ars.policies", "ARSPolicy"):
        return "ars"
    return None


def epsilon_greedy_rows(values: th.Tensor, epsilon: float) -> th.Tensor:
    """``(1 - epsilon) * greedy + epsilon * uniform`` over action values ``(N, A)``; tied
    maxima share the greedy mass evenly."""
    v = values.to(th.float64)
    greedy = (v == v.amax(-1, keepdim=True)).to(th.float64)
    greedy = greedy / greedy.sum(-1, keepdim=True)
    return (1.0 - epsilon) * greedy + epsilon / v.shape[-1]


def sb3_policy_table(
    policy: Any,
    mdp: TabularMDP,
    *,
    epsilon: float | None = None,
    observations: Any = None,
    vec_normalize: Any = None,
    action_masks: Any = None,
    batch_size: int = DEFAULT_BATCH,
) -> th.Tensor:
    """``(S, A)`` policy table of an SB3 / sb3-contrib policy object in a tabular MDP.

    Args:
        policy: the model's ``.policy``.
        mdp: the MDP.
        epsilon: for argmax policies: required for DQN / QR-DQN (whose exploration rate is a
            training schedule, not part of the learned policy), default 0 for ARS (which is
            deterministic).
        observations: explicit ``(S, ...)`` observations.
        vec_normalize: a ``VecNormalize`` with the training statistics, or None.
        action_masks: MaskablePPO only: ``(S, A)`` booleans or a callable ``s -> (A,)``
            (:func:`imitation_meg.adapters.contrib.as_masks`); None scores the unmasked
            distribution with an ``ActionMaskWarning``, False without it.
        batch_size: states per forward pass.

    Raises:
        TypeError: non-Discrete actions, or a policy with neither a distribution nor action
            values.
        ValueError: DQN / QR-DQN without ``epsilon``, ``epsilon`` for a policy with its own
            distribution, masks for a policy that takes none.

    Warns:
        RecurrentPolicyWarning: RecurrentPPO (scored at its fresh recurrent state).
    """
    from imitation_meg.adapters import contrib

    what = f"the SB3 policy {type(policy).__name__}"
    check_actions(policy.action_space, mdp, what)
    kind = _argmax_kind(policy)
    if kind in ("dqn", "qrdqn") and epsilon is None:
        name = "a DQN" if kind == "dqn" else "a QR-DQN"
        raise ValueError(
            f"{name} has no action distribution, only action values: pass epsilon= (e.g. "
            "epsilon=model.exploration_final_eps, or 0.0 for the greedy policy; CLI: --epsilon) "
            "to score its epsilon-greedy policy."
        )
    if kind is None:
        if not hasattr(policy, "get_distribution"):
            raise TypeError(
                f"{what} exposes neither get_distribution (actor-critic) nor action values "
                "(q_net, quantile_net, ARS); wrap it in a callable obs -> probs."
            )
        no_epsilon(epsilon, what)
    maskable = contrib.is_maskable(policy)
    if action_masks is not None and action_masks is not False and not maskable:
        raise ValueError(
            f"action_masks= applies to MaskablePPO policies; {what} takes no masks. Drop it."
        )
    if maskable and action_masks is not None and action_masks is not False:
        action_masks = contrib.as_masks(action_masks, mdp)
    elif maskable:
        if action_masks is None:
            contrib.warn_no_masks(what)
        action_masks = None
    recurrent = contrib.is_recurrent(policy)
    if recurrent:
        contrib.warn_recurrent(policy)

    obs = state_observations(mdp, policy.observation_space, observations=observations)
    if vec_normalize is not None:
        obs = np.asarray(vec_normalize.normalize_obs(obs.astype(np.float32)), dtype=np.float32)

    was_training = policy.training
    policy.set_training_mode(False)
    rows = []
    try:
        with th.no_grad():
            for i in range(0, obs.shape[0], batch_size):
                obs_t, _ = policy.obs_to_tensor(obs[i : i + batch_size])
                if kind is not None:
                    values = contrib.action_values(policy, obs_t, kind)
                    rows.append(epsilon_greedy_rows(values, float(epsilon or 0.0)))
                    continue
                if recurrent:
                    dist = contrib.fresh_state_distribution(policy, obs_t)
                elif maskable:
                    masks = None if action_masks is None else action_masks[i : i + batch_size]
                    dist = policy.get_distribution(obs_t, action_masks=masks)
                else:
                    dist = policy.get_distribution(obs_t)
                probs = getattr(dist.distribution, "probs", None)
                if probs is None:
                    raise TypeError(
                        f"{what} has a {type(dist.distribution).__name__} distribution without "
                        ".probs; policy_table needs a Categorical (Discrete action) distribution."
                    )
                rows.append(probs.detach().to(th.float64))
    finally:
        policy.set_training_mode(was_training)
    pi = th.cat(rows).cpu()
    return (pi / pi.sum(-1, keepdim=True)).to(device=mdp.device, dtype=mdp.dtype)
