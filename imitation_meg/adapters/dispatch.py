"""One front door for every kind of policy: :func:`resolve_policy`, and its table :func:`policy_table`.

:func:`resolve_policy` turns whatever a user has (a live model, a saved ``.zip``, an RL Zoo run
folder, an imitation name, a callable, an array) into the policy object to read, with the
statistics, environment and algorithm that came with it. Every path that scores a policy goes
through it: :func:`policy_table` (tabular MEG, the CLI, :mod:`imitation_meg.scoring`, the
callback), :func:`imitation_meg.approx.as_policy_fn` (MEG beyond tabular) and
:func:`imitation_meg.continuous.as_continuous_policy` (``Box`` actions). It recognises what it
is given and hands it to the adapter of that kind:

- SB3 and sb3-contrib models and policies (:mod:`imitation_meg.adapters.sb3`,
  :mod:`imitation_meg.adapters.contrib`), live or saved as ``.zip`` (the algorithm read from the
  zip), RL Zoo run folders (:mod:`imitation_meg.adapters.zoo`);
- imitation's ``TabularPolicy``, ``RandomPolicy`` / ``ZeroPolicy`` and ``load_policy`` names
  (:mod:`imitation_meg.adapters.imitation`); imitation's BC / DAgger / GAIL / AIRL policies are
  SB3 policies and need nothing else;
- plain callables from observations to probabilities, and ready ``(S, A)`` / ``(H, S, A)``
  arrays (:mod:`imitation_meg.adapters.observations`).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch as th

from imitation_meg._validation import as_policy, is_loaded_instance
from imitation_meg.adapters import contrib, sb3, zoo
from imitation_meg.adapters.observations import (
    DEFAULT_BATCH,
    callable_table,
    no_epsilon,
    resolve_mdp,
)
from imitation_meg.adapters.sources import check_source
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import (
    ArrayLike,
    EnvLike,
    PolicySource,
    VecNormalizeLike,
)

__all__ = ["ResolvedPolicy", "policy_table", "resolve_policy", "resolve_source"]


def resolve_source(
    source: str | os.PathLike[str],
    mdp_or_env: Any = None,
    *,
    horizon: int | None = None,
    need_env: bool = True,
) -> tuple[pathlib.Path, Any, Any, str | None]:
    """For a path: the model file, the MDP (or env) to score in, the statistics, and RL Zoo's
    algorithm name.

    ``need_env=False`` accepts a model file without an environment (the caller brings its own,
    as the estimators beyond tabular do). An RL Zoo run folder gives its final model, its environment (when ``mdp_or_env`` is None)
    and its ``vecnormalize.pkl``; a folder with ``model.zip`` gives that file.

    Raises:
        FileNotFoundError: nothing at ``source``.
        ValueError: a folder that holds neither an RL Zoo run nor ``model.zip``; no environment.
    """
    p = pathlib.Path(source)
    if p.is_dir():
        if zoo.is_zoo_run(p):
            run = zoo.read_zoo_run(p)
            env = mdp_or_env if mdp_or_env is not None else run.make_env()
            stats = run.vec_normalize if run.vec_normalize is not None else False
            return run.model, env, stats, run.algo
        if (p / "model.zip").is_file():
            p = p / "model.zip"
        else:
            raise ValueError(
                f"{str(p)!r} is a folder but neither an RL Zoo run folder (<EnvName>/config.yml) "
                "nor one holding model.zip; pass the model's .zip."
            )
    if mdp_or_env is None and need_env:
        raise ValueError(
            f"scoring {str(p)!r} needs the environment: pass mdp_or_env= (CLI: --env or "
            "--cliff-world); only RL Zoo run folders record theirs."
        )
    return p, mdp_or_env, None, None


class ResolvedPolicy(NamedTuple):
    """A policy source read by :func:`resolve_policy`.

    Attributes:
        policy: the object to read probabilities from: an SB3 / sb3-contrib ``BasePolicy`` (an
            algorithm's ``.policy``, imitation's BC / GAIL / ``load_policy`` policies among
            them), imitation's ``TabularPolicy`` or ``NonTrainablePolicy``, a callable, or an
            array, as given.
        vec_normalize: the ``VecNormalize`` whose observation statistics the policy expects,
            or None.
        mdp_or_env: where to score it: as given, or the environment an RL Zoo run records.
        algo: the algorithm's class name (``"PPO"``) when the source was an algorithm, live or
            saved; else the name given or RL Zoo's folder's; None for a policy object.
        model_path: the model file for a saved model, else None.
        statistics_path: the statistics file used, when they were read from one.
    """

    policy: Any
    vec_normalize: Any
    mdp_or_env: Any
    algo: str | None
    model_path: pathlib.Path | None
    statistics_path: pathlib.Path | None


def resolve_policy(
    model_or_policy: PolicySource,
    mdp_or_env: TabularMDP | EnvLike | None = None,
    *,
    algo: str | type | None = None,
    env: EnvLike | None = None,
    horizon: int | None = None,
    vec_normalize: VecNormalizeLike = None,
    load_kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
) -> ResolvedPolicy:
    """Read a policy source: load what is saved, unwrap algorithms, find the statistics.

    This is the one place that recognises sources; :func:`policy_table` and the estimators
    beyond tabular read probabilities from what it returns.

    Args:
        model_or_policy: see :func:`policy_table`.
        mdp_or_env: the MDP or environment to score in, if known (an RL Zoo run folder brings
            its own when this is None).
        algo: for ``.zip`` paths: the algorithm's name or class (default read from the zip).
        env: the environment (or id) for imitation ``load_policy`` names, when ``mdp_or_env``
            is a ready MDP.
        horizon: horizon of an RL Zoo run's environment.
        vec_normalize: see :func:`policy_table`.
        load_kwargs: keyword arguments for imitation's ``load_policy``.
        device: torch device for loading.

    Returns:
        A :class:`ResolvedPolicy`.

    Raises:
        ValueError: options that apply only to saved models given with a live one, an
            ``algo`` that contradicts the zip, an unknown name, a name without an environment,
            an empty name, an array that is not ``(S, A)`` / ``(H, S, A)`` probabilities (NaN,
            infinite or negative entries, another number of dimensions, no entries).
        FileNotFoundError: a missing model or statistics file.
        TypeError: a source of no kind above (None, a number, bytes, a list, a class, ...);
            statistics that are not a ``VecNormalize``.

    Warns:
        UnusedStatisticsWarning: a saved model resolved without the statistics beside it.
    """
    check_source(model_or_policy)
    obj = model_or_policy
    model_path = stats_path = None
    if isinstance(obj, (str, os.PathLike)) and _is_file_source(obj):
        if load_kwargs:
            raise ValueError("load_kwargs= applies to imitation load_policy names, not models.")
        model_path, mdp_or_env, zoo_stats, zoo_algo = resolve_source(
            obj, mdp_or_env, horizon=horizon, need_env=False
        )
        algo = algo if algo is not None else zoo_algo
        if vec_normalize is None and zoo_stats is not None:
            vec_normalize = zoo_stats
        else:
            vec_normalize = sb3.vec_normalize_for_file(model_path, vec_normalize)
        stats_path = _statistics_file(vec_normalize)
        obj = sb3.load_model(model_path, algo, device=device)
    else:
        _check_live_source(obj, algo, vec_normalize)
        stats_path = _statistics_file(vec_normalize)
    if isinstance(obj, (str, os.PathLike)):
        name_env = env if env is not None else _env_of(mdp_or_env)
        obj = _load_imitation_name(
            os.fspath(obj), env=name_env, where=mdp_or_env, load_kwargs=load_kwargs
        )
    if sb3.is_sb3_algorithm(obj):
        if vec_normalize is None:
            vec_normalize = sb3.vec_normalize_of(obj)
        algo = type(obj).__name__
        obj = getattr(obj, "policy")  # noqa: B009 (an SB3 algorithm, whatever its static type)
    return ResolvedPolicy(
        policy=obj,
        vec_normalize=sb3.resolve_vec_normalize(vec_normalize),
        mdp_or_env=mdp_or_env,
        algo=algo if isinstance(algo, str) or algo is None else algo.__name__,
        model_path=model_path,
        statistics_path=stats_path,
    )


def _statistics_file(vec_normalize: object) -> pathlib.Path | None:
    if isinstance(vec_normalize, (str, os.PathLike)) and os.fspath(vec_normalize) != "auto":
        return pathlib.Path(vec_normalize)
    return None


def _env_of(mdp_or_env: object) -> Any:
    """The environment (or id) ``mdp_or_env`` names, or None for a ready MDP."""
    if mdp_or_env is None or isinstance(mdp_or_env, TabularMDP):
        return None
    return mdp_or_env


def policy_table(
    model_or_policy: PolicySource,
    mdp_or_env: TabularMDP | EnvLike | None = None,
    *,
    epsilon: float | None = None,
    algo: str | type | None = None,
    env: EnvLike | None = None,
    horizon: int | None = None,
    observations: ArrayLike | None = None,
    vec_normalize: VecNormalizeLike = None,
    action_masks: ArrayLike | Callable[[int], ArrayLike] | bool | None = None,
    load_kwargs: dict[str, Any] | None = None,
    batch_size: int = DEFAULT_BATCH,
    device: str = "cpu",
) -> th.Tensor:
    """The policy ``pi[s, a]`` of a trained model (or other policy object) in a tabular MDP.

    Args:
        model_or_policy: an SB3 / sb3-contrib algorithm (PPO, A2C, DQN, QR-DQN, TRPO, ARS,
            MaskablePPO, RecurrentPPO, ...) or its ``.policy`` (imitation's BC / DAgger / GAIL /
            AIRL policies are such policies); the path of a saved ``.zip`` (its algorithm read
            from the zip); an RL Zoo run folder (model, statistics and environment read from
            it); an imitation ``load_policy`` name (``"ppo"`` with
            ``load_kwargs={"path": ...}``, ``"random"``, ``"zero"``, ...); imitation's
            ``TabularPolicy``; a callable mapping a batch of observations ``(S, ...)`` (see
            :func:`imitation_meg.adapters.observations.state_observations`) to probabilities
            ``(S, A)``; or an ``(S, A)`` / ``(H, S, A)`` array.
        mdp_or_env: a :class:`TabularMDP`, or a gymnasium environment / registered id from
            which one is built with :meth:`TabularMDP.from_env`. May be None for an RL Zoo
            run folder (its recorded environment is used).
        epsilon: argmax policies: ``pi = (1 - epsilon) * greedy + epsilon * uniform``, the
            greedy part split evenly over tied maxima. Required for DQN and QR-DQN (over its
            quantile means); ARS defaults to 0 (it is deterministic).
        algo: for ``.zip`` paths: the algorithm's name or class; default read from the zip
            (a contradiction is a ``ValueError``).
        env: the environment (or id) for imitation ``load_policy`` names, or for MaskablePPO's
            masks, when ``mdp_or_env`` is a ready MDP.
        horizon: horizon of the MDP built from an environment (default the environment's).
        observations: explicit ``(S, ...)`` observations, overriding the MDP's mapping.
        vec_normalize: the ``VecNormalize`` statistics the policy was trained with: an object,
            the path of its pickle, ``"auto"`` (the file saved beside a ``.zip``, see
            :func:`imitation_meg.adapters.sb3.stats_beside`), or False (none, and no warning).
            Default: the model's own ``VecNormalize`` env for a live model; none for a file,
            with an :class:`~imitation_meg.adapters.sb3.UnusedStatisticsWarning` when
            statistics lie beside it; the run's for an RL Zoo folder.
        action_masks: MaskablePPO: ``(S, A)`` booleans or a callable ``s -> (A,)``; default
            read from the environment's ``action_masks()`` state by state when it has one;
            False scores the unmasked distribution silently.
        load_kwargs: keyword arguments for imitation's ``load_policy``.
        batch_size: states per forward pass.
        device: torch device for loading and the forward pass.

    Returns:
        ``(S, A)`` float64 tensor whose rows sum to 1 (``(H, S, A)`` for time-dependent
        inputs such as imitation's ``TabularPolicy``).

    Raises:
        TypeError: continuous or non-Discrete actions, an unsupported observation space, or an
            object that is not a policy.
        ValueError: action or observation spaces that do not match the MDP, DQN / QR-DQN
            without ``epsilon`` (or ``epsilon`` for a policy that has a distribution), a
            VecNormalize without statistics, an ``algo`` that contradicts the zip, a zip that
            holds no model, bad probabilities from a callable.
        FileNotFoundError: a missing model or statistics file.

    Warns:
        ObservationAliasingWarning: several states share one observation.
        UnusedStatisticsWarning: a saved model scored without the statistics beside it.
        RecurrentPolicyWarning: a RecurrentPPO, scored at its fresh recurrent state.
        ActionMaskWarning: a MaskablePPO scored without masks.

    Example:
        >>> import imitation_meg as im
        >>> from imitation_meg.adapters import policy_table
        >>> mdp = im.envs.cliff_world(width=4, height=2, horizon=3)
        >>> pi = policy_table(lambda obs: th.full((len(obs), 4), 0.25), mdp)
        >>> tuple(pi.shape)
        (8, 4)
    """
    _check_table_options(epsilon, batch_size)
    resolved = resolve_policy(
        model_or_policy,
        mdp_or_env,
        algo=algo,
        env=env,
        horizon=horizon,
        vec_normalize=vec_normalize,
        load_kwargs=load_kwargs,
        device=device,
    )
    if resolved.mdp_or_env is None:
        what = "policy_table" if resolved.model_path is None else repr(str(resolved.model_path))
        raise ValueError(
            f"scoring {what} needs the environment: pass mdp_or_env= (a TabularMDP, a gymnasium "
            "env or id; CLI: --env or --cliff-world); only RL Zoo run folders record theirs."
        )
    mdp, source_env = resolve_mdp(resolved.mdp_or_env, horizon=horizon)
    env = env if env is not None else source_env
    return table_of(
        resolved,
        mdp,
        env=env,
        epsilon=epsilon,
        observations=observations,
        action_masks=action_masks,
        batch_size=batch_size,
    )


def table_of(
    resolved: ResolvedPolicy,
    mdp: TabularMDP,
    *,
    env: EnvLike | None = None,
    epsilon: float | None = None,
    observations: ArrayLike | None = None,
    action_masks: ArrayLike | Callable[[int], ArrayLike] | bool | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> th.Tensor:
    """The ``(S, A)`` table of a policy :func:`resolve_policy` read (see :func:`policy_table`
    for the arguments)."""
    _check_table_options(epsilon, batch_size)
    obj = resolved.policy
    # imitation's policies first: they are SB3 policies too, with tables of their own.
    if _is_imitation_policy(obj) or not sb3.is_sb3_policy(obj):
        return _other_table(obj, mdp, epsilon, observations, batch_size)
    if action_masks is None and contrib.is_maskable(obj) and env is not None:
        action_masks = _masks_from_env(env, mdp)
    return sb3.sb3_policy_table(
        obj,
        mdp,
        epsilon=epsilon,
        observations=observations,
        vec_normalize=resolved.vec_normalize,
        action_masks=action_masks,
        batch_size=batch_size,
    )


def _check_table_options(epsilon: object, batch_size: object) -> None:
    if epsilon is not None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating)):
            raise TypeError(f"epsilon must be a float in [0, 1], got {epsilon!r}.")
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"epsilon must lie in [0, 1], got {epsilon}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")


def _is_imitation_policy(obj: object) -> bool:
    return is_loaded_instance(
        obj, "imitation.algorithms.mce_irl", "TabularPolicy"
    ) or is_loaded_instance(obj, "imitation.policies.base", "NonTrainablePolicy")


def _check_live_source(obj: PolicySource, algo: str | type | None, vec_normalize: object) -> None:
    """Options that only apply to saved models, refused for a live object or a name."""
    if isinstance(vec_normalize, str) and vec_normalize == "auto":
        raise ValueError(
            "vec_normalize='auto' looks for statistics beside a saved model; pass a .zip "
            "path, or the VecNormalize (or its file) for a live model."
        )
    if algo is not None and isinstance(obj, (str, os.PathLike)):
        raise FileNotFoundError(
            f"no SB3 model file at {os.fspath(obj)!r}; pass the .zip written by model.save()."
        )
    if algo is not None:
        raise ValueError("algo= only applies to a .zip path; the model is already loaded.")


def _other_table(
    obj: object,
    mdp: TabularMDP,
    epsilon: float | None,
    observations: ArrayLike | None,
    batch_size: int,
) -> th.Tensor:
    """The table of an object that is no SB3 policy: an array, imitation's TabularPolicy or
    NonTrainablePolicy, or a callable on observations."""
    if isinstance(obj, (th.Tensor, np.ndarray)):
        no_epsilon(epsilon, "an explicit policy array")
        return as_policy(obj, mdp)
    if is_loaded_instance(obj, "imitation.algorithms.mce_irl", "TabularPolicy"):
        from imitation_meg.adapters.imitation import tabular_policy_table

        no_epsilon(epsilon, "imitation's TabularPolicy")
        return tabular_policy_table(obj, mdp)
    if is_loaded_instance(obj, "imitation.policies.base", "NonTrainablePolicy"):
        from imitation_meg.adapters.imitation import nontrainable_policy_table

        no_epsilon(epsilon, type(obj).__name__)
        return nontrainable_policy_table(obj, mdp)
    if callable(obj):
        no_epsilon(epsilon, "a callable policy")
        return callable_table(obj, mdp, observations=observations, batch_size=batch_size)
    raise TypeError(
        f"cannot read a policy from {type(obj).__name__}; pass an SB3 model or policy, a .zip "
        "path, an RL Zoo run folder, an imitation TabularPolicy or load_policy name, a callable "
        "obs -> probs, or an (S, A) array."
    )


def _is_file_source(name: str | os.PathLike[str]) -> bool:
    text = os.fspath(name)
    return text.endswith(".zip") or os.sep in text or pathlib.Path(text).exists()


def _masks_from_env(env: Any, mdp: TabularMDP) -> Any:
    """MaskablePPO masks from ``env`` (an id is made first); None when it has none."""
    if isinstance(env, str):
        import gymnasium as gym

        if env.startswith("seals/"):
            import seals  # noqa: F401 (registers the seals environment ids)
        env = gym.make(env)
    return contrib.env_masks(env, mdp)


def _load_imitation_name(
    text: str, *, env: Any, where: object, load_kwargs: dict[str, Any] | None
) -> Any:
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
            f"(the MDP {getattr(where, 'name', where)} alone does not give the spaces)."
        )
    return load_policy(text, env, **(load_kwargs or {}))
