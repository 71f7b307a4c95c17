"""sb3-contrib policies as policy tables: QR-DQN, ARS, MaskablePPO and RecurrentPPO.

TRPO uses SB3's ``ActorCriticPolicy`` and needs nothing here. The definitions:

- **QR-DQN**: the action values are the means of its quantiles (what its own ``predict`` takes
  the argmax of); the policy is epsilon-greedy over them with an explicit ``epsilon``, as DQN.
- **ARS**: its discrete policy is the argmax of its action network's outputs (deterministic);
  ``epsilon`` defaults to 0.
- **MaskablePPO**: the masked action distribution, masks given per state (``(S, A)``
  booleans), or read from an environment that provides ``action_masks()`` by setting its state
  to each ``s`` (seals tabular envs: ``state``; gymnasium toy-text: ``s``). Masked actions get
  probability 0; the MDP keeps every action for the comparison models.
- **RecurrentPPO**: a recurrent policy is not a map from states to actions; it is scored as
  the policy of its fresh recurrent state (zero LSTM state, episode start), i.e. what the agent
  does in ``s`` as the first step of an episode, with a :class:`RecurrentPolicyWarning`.

sb3-contrib is never imported here: its classes are recognised by module and name.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning, is_loaded_instance
from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "ActionMaskWarning",
    "RecurrentPolicyWarning",
    "action_values",
    "as_masks",
    "env_masks",
    "fresh_state_distribution",
    "is_maskable",
    "is_recurrent",
]


class RecurrentPolicyWarning(ImitationMEGWarning):
    """A recurrent policy was scored as the policy of its fresh recurrent state.

    Its actions depend on its memory as well as the state, so it is not a Markov policy; the
    table is what it does in each state at the start of an episode (zero LSTM state). MEG of that
    table is exact for that policy, not for the agent's behaviour later in an episode.
    """


class ActionMaskWarning(ImitationMEGWarning):
    """A MaskablePPO was scored without action masks (none given, none from the environment)."""


def is_maskable(policy: Any) -> bool:
    """Whether ``policy`` is sb3-contrib's ``MaskableActorCriticPolicy`` (or a subclass)."""
    return is_loaded_instance(
        policy, "sb3_contrib.common.maskable.policies", "MaskableActorCriticPolicy"
    )


def is_recurrent(policy: Any) -> bool:
    """Whether ``policy`` is sb3-contrib's ``RecurrentActorCriticPolicy`` (or a subclass)."""
    return is_loaded_instance(
        policy, "sb3_contrib.common.recurrent.policies", "RecurrentActorCriticPolicy"
    )


def warn_recurrent(policy: Any) -> None:
    """Emit the :class:`RecurrentPolicyWarning` for ``policy``."""
    warnings.warn(
        f"{type(policy).__name__} is recurrent, so its actions depend on its memory and it is "
        "not a Markov policy; it is scored as the policy of its fresh recurrent state (zero LSTM "
        "state, episode start) in every state. Silence this warning with "
        "warnings.simplefilter('ignore', RecurrentPolicyWarning) once that definition is the "
        "one you want.",
        RecurrentPolicyWarning,
        stacklevel=5,
    )


def action_values(policy: Any, obs: th.Tensor, kind: str) -> th.Tensor:
    """Action values ``(N, A)`` of an argmax policy: DQN's Q-values, QR-DQN's quantile means, or
    ARS's action-network outputs."""
    if kind == "dqn":
        return policy.q_net(obs)
    if kind == "qrdqn":
        return policy.quantile_net(obs).mean(dim=1)  # (N, n_quantiles, A) -> (N, A)
    if kind == "ars":
        return policy.action_net(policy.extract_features(obs, policy.features_extractor))
    raise ValueError(f"unknown argmax policy kind {kind!r}.")


def fresh_state_distribution(policy: Any, obs: th.Tensor) -> Any:
    """The action distribution of a RecurrentPPO policy at a fresh recurrent state.

    The LSTM state is zero and ``episode_starts`` is 1 for every observation, as at the first
    step of an episode (what ``model.predict(obs, state=None, episode_start=[True])`` uses).
    """
    n = obs.shape[0]
    lstm = policy.lstm_actor
    shape = (lstm.num_layers, n, lstm.hidden_size)
    zeros = th.zeros(shape, device=obs.device, dtype=obs.dtype)
    states = (zeros, zeros.clone())
    starts = th.ones(n, device=obs.device, dtype=obs.dtype)
    dist, _ = policy.get_distribution(obs, states, starts)
    return dist


def as_masks(masks: Any, mdp: TabularMDP) -> np.ndarray:
    """Validated ``(S, A)`` boolean masks from an array or a callable ``s -> (A,)`` booleans.

    Raises:
        ValueError: another shape, or a state without any allowed action.
        TypeError: a mask that is not boolean (0/1 integers are accepted).
    """
    S, A = mdp.n_states, mdp.n_actions
    if callable(masks):
        fn: Callable[[int], Any] = masks
        masks = np.stack([np.asarray(fn(s)) for s in range(S)])
    arr = np.asarray(masks.cpu() if isinstance(masks, th.Tensor) else masks)
    if arr.shape != (S, A):
        raise ValueError(f"action_masks must have shape (S, A) = ({S}, {A}), got {arr.shape}.")
    if arr.dtype != np.bool_:
        if not np.isin(arr, (0, 1)).all():
            raise TypeError(
                f"action_masks must be booleans (True = allowed), got values of {arr.dtype}."
            )
        arr = arr.astype(bool)
    empty = np.flatnonzero(~arr.any(axis=1))
    if empty.size:
        raise ValueError(
            f"action_masks allow no action in states {empty[:10].tolist()}; every state needs "
            "at least one allowed action."
        )
    return arr


def _state_setter(env: Any) -> Callable[[int], None] | None:
    base = env.unwrapped
    prop = getattr(type(base), "state", None)
    if isinstance(prop, property) and prop.fset is not None:  # seals' BaseTabularModelPOMDP

        def set_seals(s: int) -> None:
            base.state = s

        return set_seals
    if hasattr(base, "s") and hasattr(base, "P"):  # gymnasium toy-text

        def set_toy(s: int) -> None:
            base.s = s

        return set_toy
    return None


def _masks_method(env: Any) -> Callable[[], Any] | None:
    for obj in (env, getattr(env, "unwrapped", None)):
        if obj is not None and callable(getattr(type(obj), "action_masks", None)):
            method: Callable[[], Any] = obj.action_masks
            return method
    if hasattr(env, "get_wrapper_attr"):
        try:
            fn = env.get_wrapper_attr("action_masks")
        except AttributeError:
            return None
        return fn if callable(fn) else None
    return None


def env_masks(env: Any, mdp: TabularMDP) -> np.ndarray | None:
    """``(S, A)`` masks read from an environment's ``action_masks()`` in every state, or None
    when it provides none.

    The environment (a gymnasium env, possibly wrapped in sb3-contrib's ``ActionMasker``) is
    reset once, then put in each state ``s`` (seals: ``env.unwrapped.state = s``; toy-text:
    ``env.unwrapped.s = s``) and asked for its mask.

    Raises:
        ValueError: an environment with masks whose state cannot be set (pass the masks).
    """
    method = _masks_method(env)
    if method is None:
        return None
    setter = _state_setter(env)
    if setter is None:
        raise ValueError(
            f"{type(env.unwrapped).__name__} provides action_masks() but its state cannot be set "
            "(neither seals' state nor toy-text's s), so its masks per state are unknown; pass "
            "action_masks=(S, A) booleans (CLI: --action-masks FILE.npy)."
        )
    env.reset(seed=0)
    rows = []
    for s in range(mdp.n_states):
        setter(s)
        rows.append(np.asarray(method()).reshape(-1))
    return as_masks(np.stack(rows), mdp)


def warn_no_masks(what: str) -> None:
    """Emit :class:`ActionMaskWarning` for a maskable policy scored without masks."""
    warnings.warn(
        f"{what} is a MaskablePPO policy scored without action masks (none given and the "
        "environment provides none): its unmasked distribution may put mass on actions it was "
        "never allowed to take. Pass action_masks=(S, A) booleans (CLI: --action-masks "
        "FILE.npy) or an environment with action_masks().",
        ActionMaskWarning,
        stacklevel=5,
    )
