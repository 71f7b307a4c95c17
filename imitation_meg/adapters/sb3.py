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

import contextlib
from collections.abc import Callable, Iterator
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
from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "SB3_ALGOS",
    "ObservationAliasingWarning",
    "SB3ActionProbs",
    "SavedModelInfo",
    "UnusedStatisticsWarning",
    "algorithm_class",
    "algorithm_names",
    "epsilon_greedy_rows",
    "is_sb3_algorithm",
    "is_sb3_policy",
    "load_model",
    "obs_preparer",
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


def obs_preparer(policy: Any, vec_normalize: Any) -> Callable[[Any], th.Tensor]:
    """``obs -> tensor`` for an SB3 policy: a batch of raw observations, normalised by
    ``vec_normalize``'s statistics where it normalises observations, through the policy's own
    ``obs_to_tensor``."""
    if vec_normalize is not None and not getattr(vec_normalize, "norm_obs", True):
        vec_normalize = None

    def prepare(obs: Any) -> th.Tensor:
        o = np.asarray(obs)
        if vec_normalize is not None:
            o = np.asarray(vec_normalize.normalize_obs(o.astype(np.float32)), dtype=np.float32)
        obs_t, _ = policy.obs_to_tensor(o)
        return obs_t

    return prepare


class SB3ActionProbs:
    """Action probabilities of an SB3 / sb3-contrib policy on batches of raw observations.

    The one reader of SB3 policies: :func:`sb3_policy_table` applies it to every state's
    observation, :func:`imitation_meg.approx.as_policy_fn` to observations met in rollouts.
    Actor-critic policies (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO at its fresh recurrent
    state) give their distribution's probabilities; argmax policies (DQN, QR-DQN, ARS) give
    ``(1 - epsilon) * greedy + epsilon * uniform`` over their action values.

    Args:
        policy: the model's ``.policy``.
        epsilon: for argmax policies: required for DQN / QR-DQN (whose exploration rate is a
            training schedule, not part of the learned policy), default 0 for ARS (which is
            deterministic); refused for a policy with its own distribution.
        vec_normalize: a ``VecNormalize`` with the training statistics, or None.

    Attributes:
        n_actions: ``|A|``.
        name: a label for tables (the policy's class, with its epsilon).

    Raises:
        TypeError: non-Discrete actions, or a policy with neither a distribution nor action
            values.
        ValueError: DQN / QR-DQN without ``epsilon``, ``epsilon`` for a policy with its own
            distribution.

    Warns:
        RecurrentPolicyWarning: RecurrentPPO (scored at its fresh recurrent state).
    """

    def __init__(self, policy: Any, *, epsilon: float | None = None, vec_normalize: Any = None):
        import gymnasium as gym

        from imitation_meg.adapters import contrib

        what = f"the SB3 policy {type(policy).__name__}"
        if not isinstance(policy.action_space, gym.spaces.Discrete):
            raise TypeError(
                f"{what} has a {type(policy.action_space).__name__} action space "
                f"({policy.action_space}); MEG of these policies needs Discrete actions (Box "
                "actions: imitation_meg.continuous)."
            )
        kind = _argmax_kind(policy)
        if kind in ("dqn", "qrdqn") and epsilon is None:
            name = "a DQN" if kind == "dqn" else "a QR-DQN"
            raise ValueError(
                f"{name} has no action distribution, only action values: pass epsilon= (e.g. "
                "epsilon=model.exploration_final_eps, or 0.0 for the greedy policy; CLI: "
                "--epsilon) to score its epsilon-greedy policy."
            )
        if kind is None:
            if not hasattr(policy, "get_distribution"):
                raise TypeError(
                    f"{what} exposes neither get_distribution (actor-critic) nor action values "
                    "(q_net, quantile_net, ARS); wrap it in a callable obs -> probs."
                )
            no_epsilon(epsilon, what)
        self.recurrent = contrib.is_recurrent(policy)
        if self.recurrent:
            contrib.warn_recurrent(policy)
        self.maskable = contrib.is_maskable(policy)
        self.policy = policy
        self.kind = kind
        self.epsilon = float(epsilon or 0.0)
        self._prepare = obs_preparer(policy, vec_normalize)
        self.n_actions = int(policy.action_space.n)
        self.what = what
        self.name = type(policy).__name__ + (f" (epsilon {self.epsilon:g})" if kind else "")

    def __call__(self, obs: Any, masks: np.ndarray | None = None) -> th.Tensor:
        """``(n, A)`` float64 probabilities for a batch of ``n`` raw observations (``masks``:
        MaskablePPO's ``(n, A)`` booleans)."""
        from imitation_meg.adapters import contrib

        with self._eval():
            obs_t = self._prepare(obs)
            if self.kind is not None:
                values = contrib.action_values(self.policy, obs_t, self.kind)
                return epsilon_greedy_rows(values, self.epsilon).cpu()
            if self.recurrent:
                dist = contrib.fresh_state_distribution(self.policy, obs_t)
            elif self.maskable:
                dist = self.policy.get_distribution(obs_t, action_masks=masks)
            else:
                dist = self.policy.get_distribution(obs_t)
            probs = getattr(dist.distribution, "probs", None)
            if probs is None:
                raise TypeError(
                    f"{self.what} has a {type(dist.distribution).__name__} distribution without "
                    ".probs; MEG needs a Categorical (Discrete action) distribution."
                )
            p = probs.detach().to(th.float64).cpu()
        return p / p.sum(-1, keepdim=True)

    def features(self, obs: Any) -> th.Tensor:
        """The policy's last hidden layer ``(n, F)`` (float32) for a batch of raw observations.

        Raises:
            ValueError: a policy without an MLP actor or Q-network (ARS, QR-DQN, RecurrentPPO).
        """
        with self._eval():
            obs_t = self._prepare(obs)
            if not self.has_features:
                raise ValueError(
                    f"{self.what} exposes no hidden layer this library reads; agent features "
                    "need PPO / A2C / DQN with an MLP."
                )
            if self.kind == "dqn":
                net = self.policy.q_net
                h = net.extract_features(obs_t, net.features_extractor)
                for layer in list(net.q_net)[:-1]:  # all but the output layer
                    h = layer(h)
            else:
                h = self.policy.extract_features(obs_t, self.policy.pi_features_extractor)
                h = self.policy.mlp_extractor.forward_actor(h)
        return h.to(th.float32).cpu()

    @property
    def has_features(self) -> bool:
        """Whether :meth:`features` can read a hidden layer (a DQN's Q-network, or the MLP
        actor of a non-recurrent actor-critic)."""
        if self.kind == "dqn":
            return True
        return self.kind is None and not self.recurrent and hasattr(self.policy, "mlp_extractor")

    @contextlib.contextmanager
    def _eval(self) -> Iterator[None]:
        """Evaluation mode without gradients; the policy's own mode afterwards (switched only
        when it was training: switching walks every submodule, a cost per batch that added
        up to 3% of a CartPole score)."""
        was_training = self.policy.training
        if was_training:
            self.policy.set_training_mode(False)
        try:
            with th.no_grad():
                yield
        finally:
            if was_training:
                self.policy.set_training_mode(True)


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
        epsilon: for argmax policies (see :class:`SB3ActionProbs`).
        observations: explicit ``(S, ...)`` observations.
        vec_normalize: a ``VecNormalize`` with the training statistics, or None.
        action_masks: MaskablePPO only: ``(S, A)`` booleans or a callable ``s -> (A,)``
            (:func:`imitation_meg.adapters.contrib.as_masks`); None scores the unmasked
            distribution with an ``ActionMaskWarning``, False without it.
        batch_size: states per forward pass.

    Raises:
        TypeError: non-Discrete actions, or a policy with neither a distribution nor action
            values.
        ValueError: actions that do not match the MDP, DQN / QR-DQN without ``epsilon``,
            ``epsilon`` for a policy with its own distribution, masks for a policy that takes
            none.

    Warns:
        RecurrentPolicyWarning: RecurrentPPO (scored at its fresh recurrent state).
    """
    from imitation_meg.adapters import contrib

    what = f"the SB3 policy {type(policy).__name__}"
    check_actions(policy.action_space, mdp, what)
    reader = SB3ActionProbs(policy, epsilon=epsilon, vec_normalize=vec_normalize)
    if action_masks is not None and action_masks is not False and not reader.maskable:
        raise ValueError(
            f"action_masks= applies to MaskablePPO policies; {what} takes no masks. Drop it."
        )
    if reader.maskable and action_masks is not None and action_masks is not False:
        action_masks = contrib.as_masks(action_masks, mdp)
    else:
        if reader.maskable and action_masks is None:
            contrib.warn_no_masks(what)
        action_masks = None
    obs = state_observations(mdp, policy.observation_space, observations=observations)
    rows = []
    for i in range(0, obs.shape[0], batch_size):
        masks = None if action_masks is None else action_masks[i : i + batch_size]
        rows.append(reader(obs[i : i + batch_size], masks))
    pi = th.cat(rows)
    return (pi / pi.sum(-1, keepdim=True)).to(device=mdp.device, dtype=mdp.dtype)
