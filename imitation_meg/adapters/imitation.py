"""imitation's policy objects as policy tables: ``TabularPolicy``, non-trainable policies, ``load_policy``.

(MCE-IRL and reward networks live in :mod:`imitation_meg.adapters.mce_irl`.)

imitation is imported only inside these functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from imitation_meg.core.mdp import TabularMDP

__all__ = ["load_policy", "nontrainable_policy_table", "policy_names", "tabular_policy_table"]


def _check_spaces(policy: Any, mdp: TabularMDP, what: str) -> None:
    import gymnasium as gym

    act = policy.action_space
    if not isinstance(act, gym.spaces.Discrete):
        raise TypeError(
            f"{what} has a {type(act).__name__} action space; MEG needs Discrete actions."
        )
    if int(act.n) != mdp.n_actions:
        raise ValueError(
            f"{what} chooses among {int(act.n)} actions but {mdp.name} has {mdp.n_actions}."
        )


def tabular_policy_table(policy: Any, mdp: TabularMDP) -> th.Tensor:
    """The time-dependent ``pi[t, s, a]`` ``(H, S, A)`` of imitation's ``TabularPolicy``.

    imitation's ``TabularPolicy`` (what ``MCEIRL`` trains) observes the state index and acts
    with ``pi[t, s]`` at decision ``t``. Its table may cover more steps than the MDP's
    horizon; the first ``H`` are the ones the MDP's decisions use.

    Raises:
        ValueError: the state or action count differs from the MDP, or ``pi`` covers fewer
            than ``H`` steps.
    """
    what = "imitation's TabularPolicy"
    _check_spaces(policy, mdp, what)
    pi = np.asarray(policy.pi, dtype=np.float64)
    n_obs = int(getattr(policy.observation_space, "n", -1))
    if pi.ndim != 3 or pi.shape[1:] != (mdp.n_states, mdp.n_actions) or n_obs != mdp.n_states:
        raise ValueError(
            f"{what} has pi of shape {pi.shape} over {n_obs} states; {mdp.name} needs "
            f"(H, {mdp.n_states}, {mdp.n_actions})."
        )
    if pi.shape[0] < mdp.steps:
        raise ValueError(
            f"{what} covers {pi.shape[0]} steps but {mdp.name} has horizon {mdp.steps}; "
            f"score it with mdp.with_horizon({pi.shape[0]})."
        )
    from imitation_meg._validation import as_policy

    return as_policy(pi[: mdp.steps], mdp, name="TabularPolicy.pi")


def nontrainable_policy_table(policy: Any, mdp: TabularMDP) -> th.Tensor:
    """``(S, A)`` table of imitation's ``RandomPolicy`` (uniform) or ``ZeroPolicy`` (action 0).

    Raises:
        TypeError: another non-trainable policy, whose choices are opaque.
    """
    from imitation.policies.base import RandomPolicy, ZeroPolicy

    _check_spaces(policy, mdp, f"imitation's {type(policy).__name__}")
    S, A = mdp.n_states, mdp.n_actions
    if isinstance(policy, RandomPolicy):
        return th.full((S, A), 1.0 / A, dtype=mdp.dtype, device=mdp.device)
    if isinstance(policy, ZeroPolicy):
        pi = th.zeros(S, A, dtype=mdp.dtype, device=mdp.device)
        pi[:, 0] = 1.0
        return pi
    raise TypeError(
        f"{type(policy).__name__} chooses actions by code that exposes no probabilities; wrap "
        "it in a callable obs -> probs."
    )


def policy_names() -> list[str]:
    """The names imitation's ``load_policy`` accepts (``"ppo"``, ``"random"``, ...)."""
    from imitation.policies.serialize import policy_registry

    return list(policy_registry.keys())


def load_policy(policy_type: str, env: Any, **kwargs: Any) -> Any:
    """imitation's ``load_policy(policy_type, venv, **kwargs)`` with the vector env built for you.

    Args:
        policy_type: a name from :func:`policy_names` (e.g. ``"ppo"`` with ``path=...``,
            ``"random"``, ``"zero"``).
        env: a gymnasium environment, a registered id, or a ready SB3 ``VecEnv``.
        **kwargs: forwarded to imitation's loader (``path=`` for ``"ppo"``).

    Returns:
        An SB3 ``BasePolicy``.

    Raises:
        ValueError: unknown name, or the loader rejected its arguments.
    """
    import gymnasium as gym
    from imitation.policies.serialize import load_policy as _load
    from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

    names = policy_names()
    if policy_type not in names:
        raise ValueError(f"unknown imitation policy name {policy_type!r}; known: {sorted(names)}.")
    if isinstance(env, VecEnv):
        venv = env
    elif isinstance(env, str):
        if env.startswith("seals/"):
            import seals  # noqa: F401 (registers the seals environment ids)

        venv = DummyVecEnv([lambda: gym.make(env)])
    else:
        venv = DummyVecEnv([lambda: env])
    try:
        return _load(policy_type, venv, **kwargs)
    except TypeError as e:
        raise ValueError(
            f"imitation could not load {policy_type!r} with arguments {sorted(kwargs)}: {e} "
            "(e.g. 'ppo' needs load_kwargs={'path': 'model.zip'})."
        ) from e
