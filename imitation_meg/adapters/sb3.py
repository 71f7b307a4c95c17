"""Policy tables ``pi[s, a]`` of trained stable-baselines3 models and other policy objects.

:func:`policy_table` turns whatever a user trained into the ``(S, A)`` (or, for time-dependent
tabular policies, ``(H, S, A)``) probabilities that :func:`imitation_meg.meg` scores:

- SB3 actor-critic models (PPO, A2C, any ``ActorCriticPolicy`` with ``Discrete`` actions): the
  action distribution's probabilities ``policy.get_distribution(obs).distribution.probs`` for
  every state, in one batched forward pass.
- SB3 DQN: only with an explicit ``epsilon`` (epsilon-greedy over the Q-values, ties split
  evenly). A Q-network has no action distribution of its own; the exploration rate used while
  collecting data is a training schedule, not part of the learned policy, so it is never guessed.
- imitation's ``TabularPolicy`` (time-dependent ``pi[t, s, a]``), ``RandomPolicy`` / ``ZeroPolicy``,
  policies loaded with imitation's ``load_policy`` names (``"ppo"``, ``"random"``, ...), SB3
  ``.zip`` files (with ``algo=``), plain callables from a batch of observations to probabilities,
  and ready-made ``(S, A)`` / ``(H, S, A)`` arrays.

Observations. Every state ``s`` is mapped to what the policy observes: the index ``s`` for a
``Discrete`` observation space (SB3 one-hot encodes it itself, so the integer is passed, exactly
as the environment emits it: gymnasium toy-text and seals ``TabularModelMDP``); the row
``observation_matrix[s]`` for ``Box`` observation spaces (seals ``CliffWorld*`` and ``Random``,
and :func:`imitation_meg.envs.cliff_world`, whose observation matrix is seals' one-hot). When
several states share one observation the policy cannot tell them apart, and
:class:`ObservationAliasingWarning` says which.

stable_baselines3 and imitation are imported only when an object of theirs has to be handled.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning, as_policy, as_tensor
from imitation_meg.mdp import TabularMDP

__all__ = [
    "SB3_ALGOS",
    "ObservationAliasingWarning",
    "load_model",
    "policy_table",
    "resolve_mdp",
    "state_observations",
]

#: Algorithms ``algo=`` accepts for ``.zip`` files (SB3 class names, lower case).
SB3_ALGOS = ("ppo", "a2c", "dqn")

#: Row-sum tolerance for probabilities returned by callables.
_ROW_TOL = 1e-5
#: States per forward pass (one pass for every tabular environment of practical size).
_DEFAULT_BATCH = 1 << 16


class ObservationAliasingWarning(ImitationMEGWarning):
    """Several states give the same observation, so the policy must act alike in them.

    The policy table is still exact (it is what the policy does in each state); the warning is
    a reminder that goal-directedness is then measured for a policy that cannot distinguish
    those states. Build the environment with distinguishing observations (e.g. seals'
    ``use_xy_obs=False``) or silence the warning with ``warnings.simplefilter``.
    """


def _module_class(obj: Any, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing ``module`` (it is loaded if obj is one)."""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(obj, cls)


def _is_sb3_algorithm(obj: Any) -> bool:
    return _module_class(obj, "stable_baselines3.common.base_class", "BaseAlgorithm")


def _is_sb3_policy(obj: Any) -> bool:
    return _module_class(obj, "stable_baselines3.common.policies", "BasePolicy")


def resolve_mdp(mdp_or_env: Any, *, horizon: int | None = None) -> tuple[TabularMDP, Any]:
    """The MDP to score in, and the environment (or id) it came from (None for a TabularMDP).

    Args:
        mdp_or_env: a :class:`TabularMDP`, a gymnasium environment, or a registered id.
        horizon: horizon for an MDP built from an environment (default the environment's).

    Raises:
        ValueError: a horizon given together with a ready MDP (use ``mdp.with_horizon``).
        TypeError / ValueError: from :meth:`TabularMDP.from_env`.
    """
    if isinstance(mdp_or_env, TabularMDP):
        if horizon is not None and horizon != mdp_or_env.horizon:
            raise ValueError(
                f"horizon={horizon} conflicts with the MDP's horizon {mdp_or_env.horizon}; "
                "pass mdp.with_horizon(H) instead."
            )
        return mdp_or_env, None
    return TabularMDP.from_env(mdp_or_env, horizon=horizon), mdp_or_env


def state_observations(
    mdp: TabularMDP, observation_space: Any = None, *, observations: Any = None, warn: bool = True
) -> np.ndarray:
    """What a policy observes in each state, as a batch ``(S, ...)`` ready for a forward pass.

    Args:
        mdp: the MDP.
        observation_space: the policy's gymnasium observation space, or None (then the
            MDP's ``observation_matrix`` if it has one, else the state indices).
        observations: explicit ``(S, ...)`` observations that override the MDP's.
        warn: emit :class:`ObservationAliasingWarning` when states share an observation.

    Returns:
        ``(S,)`` int64 state indices for a ``Discrete`` space; ``(S, *space.shape)`` float32
        rows otherwise.

    Raises:
        ValueError: the space does not match the MDP (``Discrete(n)`` with ``n != S``, a ``Box``
            whose shape differs from the observation rows, or a ``Box`` and no observations).
        TypeError: an observation space other than ``Discrete`` or ``Box``.
    """
    S = mdp.n_states
    if observations is not None:
        obs = np.asarray(as_tensor(observations, name="observations").cpu())
        if obs.ndim < 1 or obs.shape[0] != S:
            raise ValueError(
                f"observations must have one row per state ({S}), got shape {obs.shape}."
            )
    elif observation_space is None:
        obs = (
            np.arange(S, dtype=np.int64)
            if mdp.observation_matrix is None
            else np.asarray(mdp.observation_matrix.cpu())
        )
    else:
        obs = None

    if observation_space is None:
        assert obs is not None
        if warn and obs.ndim > 1:
            _warn_aliasing(obs, mdp)
        return obs

    import gymnasium as gym

    space = observation_space
    if isinstance(space, gym.spaces.Discrete):
        n, start = int(space.n), int(space.start)
        if start != 0:
            raise ValueError(
                f"the policy observes {space} (start={start}); only Discrete spaces starting at 0 "
                "map to state indices."
            )
        if n != S:
            raise ValueError(
                f"the policy observes Discrete({n}) but {mdp.name} has {S} states; score the "
                "policy in the environment it was trained on (observation spaces mismatch)."
            )
        if obs is not None and obs.ndim != 1:
            raise ValueError(
                f"the policy observes Discrete({n}) state indices, but observations of shape "
                f"{obs.shape} were given; pass (S,) integers or none."
            )
        return np.arange(S, dtype=np.int64) if obs is None else obs.astype(np.int64)
    if isinstance(space, gym.spaces.Box):
        if obs is None:
            if mdp.observation_matrix is None:
                raise ValueError(
                    f"the policy observes {space} vectors but {mdp.name} has no "
                    "observation_matrix (its states are plain indices); build the MDP from the "
                    "environment the policy was trained on (TabularMDP.from_env) or pass "
                    "observations=(S, ...) explicitly."
                )
            obs = np.asarray(mdp.observation_matrix.cpu())
        if tuple(obs.shape[1:]) != tuple(space.shape):
            raise ValueError(
                f"the policy observes {space} (shape {tuple(space.shape)}) but {mdp.name} gives "
                f"observations of shape {tuple(obs.shape[1:])} per state; the observation spaces "
                "mismatch (e.g. seals' use_xy_obs differs between training and scoring)."
            )
        obs = obs.astype(space.dtype if np.issubdtype(space.dtype, np.floating) else np.float32)
        if warn:
            _warn_aliasing(obs, mdp)
        return obs
    raise TypeError(
        f"the policy observes a {type(space).__name__} space ({space}); policy_table supports "
        "Discrete (state index) and Box (observation vector) observation spaces."
    )


def _warn_aliasing(obs: np.ndarray, mdp: TabularMDP) -> None:
    flat = obs.reshape(obs.shape[0], -1)
    _, inverse, counts = np.unique(flat, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    shared = np.flatnonzero(counts > 1)
    if shared.size == 0:
        return
    groups = [np.flatnonzero(inverse == g).tolist() for g in shared[:5]]
    warnings.warn(
        f"{int(counts[shared].sum())} states of {mdp.name} share {shared.size} observations "
        f"(state groups {groups}{' ...' if shared.size > 5 else ''}); the policy cannot tell "
        "them apart, so its table repeats the same row there. Use an environment whose "
        "observations distinguish the states if that is not intended.",
        ObservationAliasingWarning,
        stacklevel=3,
    )


def load_model(path: str | os.PathLike[str], algo: str | type, *, device: str = "cpu") -> Any:
    """Load an SB3 model saved with ``model.save(path)``.

    Args:
        path: the ``.zip`` file (or a folder holding ``model.zip``).
        algo: ``"ppo"``, ``"a2c"``, ``"dqn"`` or an SB3 algorithm class.
        device: torch device to load onto.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unknown ``algo`` or a file SB3 cannot read as that algorithm.
    """
    p = pathlib.Path(path)
    if p.is_dir():
        p = p / "model.zip"
    if not p.is_file():
        raise FileNotFoundError(
            f"no SB3 model file at {str(path)!r}; pass the .zip written by model.save()."
        )
    if isinstance(algo, str):
        key = algo.lower()
        if key not in SB3_ALGOS:
            raise ValueError(
                f"algo must be one of {list(SB3_ALGOS)} (or an SB3 class), got {algo!r}."
            )
        import stable_baselines3 as sb3

        cls: Any = {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN}[key]
    elif isinstance(algo, type) and hasattr(algo, "load"):
        cls = algo
    else:
        raise TypeError(f"algo must be a name in {list(SB3_ALGOS)} or an SB3 class, got {algo!r}.")
    try:
        return cls.load(p, device=device)
    except (KeyError, ValueError, RuntimeError, pickle.UnpicklingError, AttributeError) as e:
        raise ValueError(
            f"could not load {str(p)!r} as {cls.__name__}: {type(e).__name__}: {e}; check --algo / "
            "algo= matches the algorithm that saved it."
        ) from e


def _vec_normalize_of(model: Any) -> Any:
    from stable_baselines3.common.vec_env import unwrap_vec_normalize

    env = model.get_env() if hasattr(model, "get_env") else None
    return None if env is None else unwrap_vec_normalize(env)


def _resolve_vec_normalize(vec_normalize: Any) -> Any:
    """A VecNormalize (object or pickled path) with observation statistics, or None."""
    if vec_normalize is None:
        return None
    if isinstance(vec_normalize, (str, os.PathLike)):
        p = pathlib.Path(vec_normalize)
        if not p.is_file():
            raise FileNotFoundError(
                f"no VecNormalize statistics at {str(p)!r}; pass the file written by "
                "VecNormalize.save()."
            )
        with p.open("rb") as f:
            vec_normalize = pickle.load(f)
    if not hasattr(vec_normalize, "normalize_obs") or not hasattr(vec_normalize, "obs_rms"):
        raise TypeError(
            f"vec_normalize must be a VecNormalize or the path of one saved with "
            f"VecNormalize.save(), got {type(vec_normalize).__name__}."
        )
    if not getattr(vec_normalize, "norm_obs", True):
        return None  # reward-only normalisation: observations reach the policy unchanged
    rms = vec_normalize.obs_rms
    counts = [r.count for r in rms.values()] if isinstance(rms, dict) else [rms.count]
    if max(counts) <= 1e-4 + 1e-12:
        raise ValueError(
            "the VecNormalize has no observation statistics (obs_rms was never updated); the "
            "policy was trained on normalised observations, so scoring needs the training "
            "statistics: load them with VecNormalize.load(path, venv) and pass vec_normalize=."
        )
    return vec_normalize


def policy_table(
    model_or_policy: Any,
    mdp_or_env: Any,
    *,
    epsilon: float | None = None,
    algo: str | type | None = None,
    env: Any = None,
    horizon: int | None = None,
    observations: Any = None,
    vec_normalize: Any = None,
    load_kwargs: dict[str, Any] | None = None,
    batch_size: int = _DEFAULT_BATCH,
    device: str = "cpu",
) -> th.Tensor:
    """The policy ``pi[s, a]`` of a trained model (or other policy object) in a tabular MDP.

    Args:
        model_or_policy: an SB3 algorithm (``PPO``, ``A2C``, ``DQN``, ...) or its ``.policy``;
            the path of an SB3 ``.zip`` (needs ``algo``); an imitation ``load_policy`` name
            (``"ppo"`` with ``load_kwargs={"path": ...}``, ``"random"``, ``"zero"``, ...); imitation's
            ``TabularPolicy``; a callable mapping a batch of observations ``(S, ...)`` (see
            :func:`state_observations`) to probabilities ``(S, A)``; or an ``(S, A)`` /
            ``(H, S, A)`` array.
        mdp_or_env: a :class:`TabularMDP`, or a gymnasium environment / registered id from
            which one is built with :meth:`TabularMDP.from_env`.
        epsilon: DQN only (required there): ``pi = (1 - epsilon) * greedy + epsilon * uniform``,
            the greedy part split evenly over tied maximal Q-values.
        algo: ``"ppo"``, ``"a2c"``, ``"dqn"`` or an SB3 class, for ``.zip`` paths.
        env: the environment (or id) for imitation ``load_policy`` names when ``mdp_or_env``
            is a ready MDP.
        horizon: horizon of the MDP built from an environment (default the environment's).
        observations: explicit ``(S, ...)`` observations, overriding the MDP's mapping.
        vec_normalize: a ``VecNormalize`` (or the path of its pickle) whose observation
            statistics the policy was trained with. Taken from the model's own env when that
            is a ``VecNormalize``.
        load_kwargs: keyword arguments for imitation's ``load_policy``.
        batch_size: states per forward pass.
        device: torch device for loading and the forward pass.

    Returns:
        ``(S, A)`` float64 tensor whose rows sum to 1 (``(H, S, A)`` for time-dependent
        inputs such as imitation's ``TabularPolicy``).

    Raises:
        TypeError: continuous or non-Discrete actions, an unsupported observation space, or an
            object that is not a policy.
        ValueError: action or observation spaces that do not match the MDP, DQN without
            ``epsilon`` (or ``epsilon`` for a policy that has a distribution), a VecNormalize
            without statistics, ``.zip`` without ``algo``, bad probabilities from a callable.
        FileNotFoundError: a missing model or statistics file.

    Warns:
        ObservationAliasingWarning: several states share one observation.

    Example:
        >>> import imitation_meg as im
        >>> from imitation_meg.adapters.sb3 import policy_table
        >>> mdp = im.envs.cliff_world(width=4, height=2, horizon=3)
        >>> pi = policy_table(lambda obs: th.full((len(obs), 4), 0.25), mdp)
        >>> tuple(pi.shape)
        (8, 4)
    """
    mdp, source_env = resolve_mdp(mdp_or_env, horizon=horizon)
    env = env if env is not None else source_env
    if epsilon is not None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating)):
            raise TypeError(f"epsilon must be a float in [0, 1], got {epsilon!r}.")
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"epsilon must lie in [0, 1], got {epsilon}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")

    obj = model_or_policy
    if isinstance(obj, (str, os.PathLike)):
        obj = _load_named(obj, algo=algo, env=env, mdp=mdp, load_kwargs=load_kwargs, device=device)
    elif algo is not None:
        raise ValueError("algo= only applies to a .zip path; the model is already loaded.")

    if isinstance(obj, (th.Tensor, np.ndarray)):
        _no_epsilon(epsilon, "an explicit policy array")
        return as_policy(obj, mdp)

    if _is_sb3_algorithm(obj):
        if vec_normalize is None:
            vec_normalize = _vec_normalize_of(obj)
        obj = obj.policy

    if _module_class(obj, "imitation.algorithms.mce_irl", "TabularPolicy"):
        from imitation_meg.adapters.imitation import tabular_policy_table

        _no_epsilon(epsilon, "imitation's TabularPolicy")
        return tabular_policy_table(obj, mdp)
    if _module_class(obj, "imitation.policies.base", "NonTrainablePolicy"):
        from imitation_meg.adapters.imitation import nontrainable_policy_table

        _no_epsilon(epsilon, type(obj).__name__)
        return nontrainable_policy_table(obj, mdp)
    if _is_sb3_policy(obj):
        return _sb3_policy_table(
            obj,
            mdp,
            epsilon=epsilon,
            observations=observations,
            vec_normalize=_resolve_vec_normalize(vec_normalize),
            batch_size=batch_size,
        )
    if callable(obj):
        _no_epsilon(epsilon, "a callable policy")
        return _callable_table(obj, mdp, observations=observations, batch_size=batch_size)
    raise TypeError(
        f"cannot read a policy from {type(obj).__name__}; pass an SB3 model or policy, a .zip "
        "path with algo=, an imitation TabularPolicy or load_policy name, a callable "
        "obs -> probs, or an (S, A) array."
    )


def _no_epsilon(epsilon: float | None, what: str) -> None:
    if epsilon is not None:
        raise ValueError(
            f"epsilon= applies only to DQN (epsilon-greedy over Q-values); {what} already defines "
            "its action probabilities. Drop epsilon=."
        )


def _load_named(
    name: str | os.PathLike[str],
    *,
    algo: str | type | None,
    env: Any,
    mdp: TabularMDP,
    load_kwargs: dict[str, Any] | None,
    device: str,
) -> Any:
    text = os.fspath(name)
    looks_like_file = text.endswith(".zip") or os.sep in text or pathlib.Path(text).exists()
    if looks_like_file:
        if algo is None:
            raise ValueError(
                f"{text!r} is an SB3 model file: pass algo='ppo', 'a2c' or 'dqn' (the algorithm "
                "that saved it)."
            )
        if load_kwargs:
            raise ValueError("load_kwargs= applies to imitation load_policy names, not .zip files.")
        return load_model(text, algo, device=device)
    if algo is not None:
        raise FileNotFoundError(
            f"no SB3 model file at {text!r}; pass the .zip written by model.save()."
        )
    from imitation_meg.adapters.imitation import load_policy, policy_names

    names = policy_names()
    if text not in names:
        raise ValueError(
            f"{text!r} is neither an existing .zip file nor an imitation load_policy name "
            f"({sorted(names)})."
        )
    if env is None:
        raise ValueError(
            f"loading imitation policy {text!r} needs the environment: pass env=<gym id or env> "
            f"(the MDP {mdp.name} alone does not give the spaces)."
        )
    return load_policy(text, env, **(load_kwargs or {}))


def _check_actions(space: Any, mdp: TabularMDP, what: str) -> None:
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Discrete):
        raise TypeError(
            f"{what} has a {type(space).__name__} action space ({space}); MEG needs Discrete "
            "actions matching the tabular MDP (continuous actions have no policy table)."
        )
    if int(space.n) != mdp.n_actions:
        raise ValueError(
            f"{what} chooses among {int(space.n)} actions but {mdp.name} has {mdp.n_actions}; "
            "score it in the environment it was trained on."
        )


def _sb3_policy_table(
    policy: Any,
    mdp: TabularMDP,
    *,
    epsilon: float | None,
    observations: Any,
    vec_normalize: Any,
    batch_size: int,
) -> th.Tensor:
    what = f"the SB3 policy {type(policy).__name__}"
    _check_actions(policy.action_space, mdp, what)
    is_dqn = hasattr(policy, "q_net") and not hasattr(policy, "get_distribution")
    if is_dqn and epsilon is None:
        raise ValueError(
            "a DQN has no action distribution, only Q-values: pass epsilon= (e.g. "
            "epsilon=model.exploration_final_eps, or 0.0 for the greedy policy) to score its "
            "epsilon-greedy policy."
        )
    if not is_dqn:
        if not hasattr(policy, "get_distribution"):
            raise TypeError(
                f"{what} exposes neither get_distribution (actor-critic) nor q_net (DQN); "
                "wrap it in a callable obs -> probs."
            )
        _no_epsilon(epsilon, what)
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
                if is_dqn:
                    q = policy.q_net(obs_t).to(th.float64)
                    greedy = (q == q.amax(-1, keepdim=True)).to(th.float64)
                    greedy = greedy / greedy.sum(-1, keepdim=True)
                    eps = float(epsilon)  # type: ignore[arg-type]
                    rows.append((1.0 - eps) * greedy + eps / q.shape[-1])
                else:
                    dist = policy.get_distribution(obs_t).distribution
                    probs = getattr(dist, "probs", None)
                    if probs is None:
                        raise TypeError(
                            f"{what} has a {type(dist).__name__} distribution without .probs; "
                            "policy_table needs a Categorical (Discrete action) distribution."
                        )
                    rows.append(probs.detach().to(th.float64))
    finally:
        policy.set_training_mode(was_training)
    pi = th.cat(rows).cpu()
    return (pi / pi.sum(-1, keepdim=True)).to(device=mdp.device, dtype=mdp.dtype)


def _callable_table(
    fn: Callable[[Any], Any], mdp: TabularMDP, *, observations: Any, batch_size: int
) -> th.Tensor:
    obs = state_observations(mdp, None, observations=observations)
    rows = []
    for i in range(0, obs.shape[0], batch_size):
        out = fn(obs[i : i + batch_size])
        rows.append(as_tensor(out, name="callable output", dtype=th.float64).cpu())
    pi = th.cat(rows)
    if tuple(pi.shape) != (mdp.n_states, mdp.n_actions):
        raise ValueError(
            f"the callable must map a batch of {obs.shape[0]} observations (shape {obs.shape}) to "
            f"probabilities ({mdp.n_states}, {mdp.n_actions}), got {tuple(pi.shape)}."
        )
    return as_policy(pi, mdp, name="callable output")
