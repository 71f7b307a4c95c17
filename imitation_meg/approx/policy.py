"""Scored policies for the approximate estimators: action probabilities on batches of observations.

:func:`as_policy_fn` turns what a user trained into a :class:`PolicyFn`: a callable from a batch
of raw environment observations to action probabilities ``(n, A)``, optionally with the agent's
own hidden features (for the unknown-utility bound over utilities of the agent's hidden state).

Sources are read by :func:`imitation_meg.adapters.resolve_policy`, the front door of every
scoring path, so the approximate estimators accept what :func:`imitation_meg.adapters.policy_table`
accepts, less what only has a meaning in a table (arrays, imitation's ``TabularPolicy``). Argmax
policies (DQN, QR-DQN, ARS) are scored as epsilon-greedy over their action values with an
explicit ``epsilon``. stable-baselines3 is imported only when an SB3 object has to be handled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg._validation import is_loaded_instance
from imitation_meg.adapters.observations import no_epsilon
from imitation_meg.type_aliases import EnvLike, GymEnv, PolicySource, VecNormalizeLike

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


def as_policy_fn(
    policy: PolicySource,
    *,
    n_actions: int,
    algo: str | None = None,
    epsilon: float | None = None,
    vec_normalize: VecNormalizeLike = None,
    env: EnvLike | Callable[[], GymEnv] | None = None,
) -> PolicyFn:
    """Wrap a policy as a :class:`PolicyFn`.

    The source is read by :func:`imitation_meg.adapters.resolve_policy`, the front door the
    tabular path uses too, and an SB3 policy by
    :class:`imitation_meg.adapters.sb3.SB3ActionProbs`: every algorithm
    :func:`~imitation_meg.adapters.policy_table` accepts is accepted here.

    Args:
        policy: an SB3 / sb3-contrib algorithm or policy, the path of an SB3 ``.zip`` (its
            algorithm read from the zip unless ``algo`` names it) or of an RL Zoo run folder,
            an imitation ``load_policy`` name (with ``env``), a :class:`PolicyFn`, or a
            callable mapping a batch of raw observations to ``(n, A)`` probabilities.
        n_actions: the environment's ``|A|``.
        algo: the algorithm of a ``.zip``.
        epsilon: argmax policies (DQN, QR-DQN required; ARS default 0): score
            ``(1 - epsilon) * greedy + epsilon * uniform``.
        vec_normalize: the ``VecNormalize`` statistics the model was trained with (an object,
            a path, ``"auto"`` or False; default: a live model's own, none for a file, with a
            warning when statistics lie beside it).
        env: the environment (an id, an env, or a factory, which is not called here), for
            imitation ``load_policy`` names.

    Raises:
        TypeError: an object that is not a policy, a non-Discrete action space.
        ValueError: mismatched action counts, DQN without ``epsilon`` (or ``epsilon`` for a
            policy with its own distribution), options for saved models given with a live one.
        FileNotFoundError: a missing model file.
    """
    _check_epsilon(epsilon)
    if isinstance(policy, PolicyFn):
        no_epsilon(epsilon, "a PolicyFn")
        if policy.n_actions != n_actions:
            raise ValueError(f"policy has {policy.n_actions} actions, the environment {n_actions}.")
        return policy
    from imitation_meg.adapters import resolve_policy
    from imitation_meg.adapters.sb3 import is_sb3_policy

    where = None if callable(env) else env
    resolved = resolve_policy(policy, where, algo=algo, vec_normalize=vec_normalize)
    obj = resolved.policy
    if is_loaded_instance(obj, "imitation.algorithms.mce_irl", "TabularPolicy"):
        raise TypeError(
            "imitation's TabularPolicy is a table over state indices; score it exactly with "
            "imitation_meg.meg(policy_table(policy, mdp), mdp), not from observations."
        )
    if is_sb3_policy(obj):
        reader = _sb3_reader(obj, n_actions, epsilon, resolved.vec_normalize)
        if reader.maskable:  # warned from here: the warning names the caller's line
            from imitation_meg.adapters.contrib import warn_no_masks

            warn_no_masks(reader.what)
        return PolicyFn(
            lambda obs: reader(obs).numpy(),
            n_actions,
            name=reader.name,
            features_fn=_features_of(reader),
        )
    if callable(obj):
        no_epsilon(epsilon, "a callable policy")
        name = getattr(obj, "__name__", type(obj).__name__)
        return PolicyFn(obj, n_actions, name=str(name))
    raise TypeError(
        f"cannot read a policy from {type(obj).__name__}; pass an SB3 model or policy, a .zip "
        "path, or a callable obs_batch -> (n, A) probabilities."
    )


def _check_epsilon(epsilon: Any) -> None:
    """Raise ``ValueError`` unless ``epsilon`` is None or a number in ``[0, 1]``."""
    if epsilon is not None and (
        isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon <= 1
    ):
        raise ValueError(f"epsilon must be a float in [0, 1], got {epsilon!r}.")


def _sb3_reader(obj: Any, n_actions: int, epsilon: float | None, vec_normalize: Any) -> Any:
    """An SB3 policy's reader of action probabilities and hidden features
    (:class:`~imitation_meg.adapters.sb3.SB3ActionProbs`).

    Raises:
        ValueError: a policy over another number of actions.
    """
    from imitation_meg.adapters.sb3 import SB3ActionProbs

    reader = SB3ActionProbs(obj, epsilon=epsilon, vec_normalize=vec_normalize)
    if reader.n_actions != n_actions:
        raise ValueError(
            f"the SB3 policy chooses among {reader.n_actions} actions but the environment "
            f"has {n_actions}; score it in the environment it was trained on."
        )
    return reader


def _features_of(reader: Any) -> Callable[[Any], np.ndarray] | None:
    """The reader's hidden features, when it has a layer to read (PPO / A2C / DQN MLPs)."""
    return (lambda obs: reader.features(obs).numpy()) if reader.has_features else None
