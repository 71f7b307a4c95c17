"""Scored policies for the approximate estimators: action probabilities on batches of observations.

:func:`as_policy_fn` turns what a user trained into a :class:`PolicyFn`: a callable from a batch
of raw environment observations to action probabilities ``(n, A)``, optionally with the agent's
own hidden features (for the unknown-utility bound over utilities of the agent's hidden state).

Accepted policies: an SB3 algorithm (PPO, A2C, DQN, ...) or its ``.policy``; the path of an SB3
``.zip`` (loaded with :func:`imitation_meg.adapters.sb3.load_model`); a callable mapping a batch
of observations to probabilities. DQN has no action distribution: it is scored as the
epsilon-greedy policy over its Q-values with an explicit ``epsilon`` (as
:func:`imitation_meg.adapters.policy_table` does). stable-baselines3 is imported only when an
SB3 object has to be handled.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import is_loaded_instance
from imitation_meg.type_aliases import PathLike, PolicySource, VecNormalizeLike

__all__ = ["PolicyFn", "as_policy_fn"]

#: Row-sum tolerance for probabilities returned by callables.
_ROW_TOL = 1e-4


class PolicyFn:
    """A policy on raw observations: ``probs(obs_batch) -> (n, A)`` float64 rows summing to 1.

    Attributes:
        n_actions: ``|A|``.
        name: a label for tables.
        has_features: whether :meth:`features` gives the agent's hidden features.
    """

    def __init__(
        self,
        probs_fn: Callable[[Any], np.ndarray],
        n_actions: int,
        *,
        name: str,
        features_fn: Callable[[Any], np.ndarray] | None = None,
    ) -> None:
        self._probs_fn = probs_fn
        self._features_fn = features_fn
        self.n_actions = int(n_actions)
        self.name = name

    @property
    def has_features(self) -> bool:
        return self._features_fn is not None

    def probs(self, obs: Any) -> np.ndarray:
        """Action probabilities ``(n, A)`` for a batch of ``n`` raw observations.

        Raises:
            ValueError: the policy returned a wrong shape, negative entries or rows not summing
                to 1.
        """
        p = np.asarray(self._probs_fn(obs), dtype=np.float64)
        n = len(obs)
        if p.shape != (n, self.n_actions):
            raise ValueError(
                f"policy {self.name} must map a batch of {n} observations to probabilities of "
                f"shape ({n}, {self.n_actions}), got {p.shape}."
            )
        if not np.all(np.isfinite(p)) or p.min() < -1e-12:
            raise ValueError(f"policy {self.name} returned negative or non-finite probabilities.")
        s = p.sum(-1)
        if np.abs(s - 1.0).max() > _ROW_TOL:
            raise ValueError(
                f"policy {self.name} returned rows summing to {s.min():.6g}..{s.max():.6g}, not 1; "
                "return probabilities (apply a softmax to logits)."
            )
        p = np.clip(p, 0.0, None)
        return p / p.sum(-1, keepdims=True)

    def features(self, obs: Any) -> np.ndarray:
        """The agent's hidden features ``(n, F)`` (its last hidden layer) for a batch.

        Raises:
            ValueError: the policy exposes no hidden layer (a plain callable).
        """
        if self._features_fn is None:
            raise ValueError(
                f"policy {self.name} exposes no hidden layer; agent features need an SB3 model "
                "(PPO / A2C / DQN with an MLP)."
            )
        return np.asarray(self._features_fn(obs), dtype=np.float32)


def _load_zip(path: PathLike, algo: str | None) -> Any:
    """The one place that loads an SB3 ``.zip``: the algorithm is read from the zip unless
    ``algo`` names it (a contradiction is an error)."""
    from imitation_meg.adapters.saved_models import load_model

    return load_model(path, algo)


def as_policy_fn(
    policy: PolicySource,
    *,
    n_actions: int,
    algo: str | None = None,
    epsilon: float | None = None,
    vec_normalize: VecNormalizeLike = None,
) -> PolicyFn:
    """Wrap a policy as a :class:`PolicyFn`.

    Args:
        policy: an SB3 algorithm or policy, the path of an SB3 ``.zip`` (with ``algo``), a
            :class:`PolicyFn`, or a callable mapping a batch of raw observations to ``(n, A)``
            probabilities.
        n_actions: the environment's ``|A|``.
        algo: ``"ppo"``, ``"a2c"`` or ``"dqn"`` for a ``.zip`` path.
        epsilon: DQN only (required there): score ``(1 - epsilon) * greedy + epsilon * uniform``.
        vec_normalize: a ``VecNormalize`` whose observation statistics the model was trained
            with (default: the model's own env's, when it is one).

    Raises:
        TypeError: an object that is not a policy, or a non-Discrete action space.
        ValueError: mismatched action counts, DQN without ``epsilon`` (or ``epsilon`` for a
            policy with its own distribution), a ``.zip`` without ``algo``.
        FileNotFoundError: a missing model file.
    """
    if epsilon is not None and (
        isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon <= 1
    ):
        raise ValueError(f"epsilon must be a float in [0, 1], got {epsilon!r}.")
    obj = policy
    if isinstance(obj, PolicyFn):
        _no_epsilon(epsilon, "a PolicyFn")
        if obj.n_actions != n_actions:
            raise ValueError(f"policy has {obj.n_actions} actions, the environment {n_actions}.")
        return obj
    if isinstance(obj, (str, os.PathLike)):
        obj = _load_zip(obj, algo)
    elif algo is not None:
        raise ValueError("algo= only applies to a .zip path; the model is already loaded.")
    if is_loaded_instance(obj, "stable_baselines3.common.base_class", "BaseAlgorithm"):
        model: Any = obj  # an SB3 algorithm (checked above)
        if vec_normalize is None and model.get_env() is not None:
            from stable_baselines3.common.vec_env import unwrap_vec_normalize

            vec_normalize = unwrap_vec_normalize(model.get_env())
        obj = model.policy
    if is_loaded_instance(obj, "stable_baselines3.common.policies", "BasePolicy"):
        return _sb3_policy_fn(obj, n_actions, epsilon, vec_normalize)
    if callable(obj):
        _no_epsilon(epsilon, "a callable policy")
        name = getattr(obj, "__name__", type(obj).__name__)
        return PolicyFn(obj, n_actions, name=str(name))
    raise TypeError(
        f"cannot read a policy from {type(obj).__name__}; pass an SB3 model or policy, a .zip "
        "path with algo=, or a callable obs_batch -> (n, A) probabilities."
    )


def _no_epsilon(epsilon: float | None, what: str) -> None:
    if epsilon is not None:
        raise ValueError(
            f"epsilon= applies only to DQN (epsilon-greedy over Q-values); {what} already defines "
            "its action probabilities. Drop epsilon=."
        )


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


def _sb3_policy_fn(
    policy: Any, n_actions: int, epsilon: float | None, vec_normalize: Any
) -> PolicyFn:
    import gymnasium as gym

    space = policy.action_space
    if not isinstance(space, gym.spaces.Discrete):
        raise TypeError(
            f"the SB3 policy has a {type(space).__name__} action space ({space}); MEG needs "
            "Discrete actions."
        )
    if int(space.n) != n_actions:
        raise ValueError(
            f"the SB3 policy chooses among {int(space.n)} actions but the environment has "
            f"{n_actions}; score it in the environment it was trained on."
        )
    is_dqn = hasattr(policy, "q_net") and not hasattr(policy, "get_distribution")
    if is_dqn and epsilon is None:
        raise ValueError(
            "a DQN has no action distribution, only Q-values: pass epsilon= (e.g. "
            "model.exploration_final_eps, or 0.0 for the greedy policy) to score its "
            "epsilon-greedy policy."
        )
    if not is_dqn:
        _no_epsilon(epsilon, f"the SB3 policy {type(policy).__name__}")
    prepare = obs_preparer(policy, vec_normalize)

    def probs(obs: Any) -> np.ndarray:
        policy.set_training_mode(False)
        with th.no_grad():
            obs_t = prepare(obs)
            if is_dqn:
                q = policy.q_net(obs_t).to(th.float64)
                greedy = (q == q.amax(-1, keepdim=True)).to(th.float64)
                greedy = greedy / greedy.sum(-1, keepdim=True)
                eps = float(epsilon)  # type: ignore[arg-type]
                p = (1.0 - eps) * greedy + eps / q.shape[-1]
            else:
                p = policy.get_distribution(obs_t).distribution.probs.to(th.float64)
        return p.cpu().numpy()

    def features(obs: Any) -> np.ndarray:
        policy.set_training_mode(False)
        with th.no_grad():
            obs_t = prepare(obs)
            if is_dqn:
                net = policy.q_net
                h = net.extract_features(obs_t, net.features_extractor)
                layers = list(net.q_net)[:-1]  # all but the output layer
                for layer in layers:
                    h = layer(h)
            else:
                h = policy.extract_features(obs_t, policy.pi_features_extractor)
                h = policy.mlp_extractor.forward_actor(h)
        return h.to(th.float32).cpu().numpy()

    name = type(policy).__name__ + (f" (epsilon {epsilon:g})" if is_dqn else "")
    return PolicyFn(probs, n_actions, name=name, features_fn=features)
