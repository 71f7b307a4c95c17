"""Saved and live stable-baselines3 models: which algorithm saved a ``.zip``, loading it, its
``VecNormalize`` statistics, and the ``(S, A)`` policy table of its policy.

- :func:`read_model_info` reads a ``.zip`` written by ``model.save()`` without loading the
  networks: the policy class, the action and observation spaces, ``num_timesteps`` and the
  algorithm that saved it. SB3 stores no algorithm name, so it is inferred with SB3's own
  ``policy_aliases`` (which algorithms use the saved policy class) and the saved attributes
  (every constructor argument of an algorithm is stored, apart from a few listed in
  ``_UNSTORED``): the most specific algorithm whose arguments are all present wins, so a PPO
  zip (``clip_range``, ``n_epochs``) is told from an A2C or TRPO zip of the same policy class.
- :func:`load_model` loads any SB3 / sb3-contrib algorithm (``algo=None`` reads it from the
  zip; a contradicting ``algo=`` is an error).
- :func:`sb3_policy_table`: actor-critic policies (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO)
  through their action distribution, argmax policies (DQN, QR-DQN, ARS) as epsilon-greedy over
  their action values; the sb3-contrib specifics live in :mod:`imitation_meg.adapters.contrib`.
- :func:`stats_beside` finds ``VecNormalize`` statistics saved next to a model (RL Zoo and
  ``CheckpointCallback`` layouts), so that a model scored without them is a warning.

The dispatcher for every kind of policy is :func:`imitation_meg.adapters.policy_table`
(``imitation_meg.adapters.sb3.policy_table`` remains as an alias). stable_baselines3 is imported
only inside these functions.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import pathlib
import pickle
import re
import sys
import warnings
import zipfile
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.adapters.observations import (
    DEFAULT_BATCH,
    ObservationAliasingWarning,
    check_actions,
    no_epsilon,
    resolve_mdp,
    state_observations,
)
from imitation_meg.mdp import TabularMDP
from imitation_meg.type_aliases import PathLike

__all__ = [
    "SB3_ALGOS",
    "ObservationAliasingWarning",
    "SavedModelInfo",
    "UnusedStatisticsWarning",
    "algorithm_class",
    "algorithm_names",
    "load_model",
    "read_model_info",
    "resolve_mdp",
    "resolve_vec_normalize",
    "sb3_policy_table",
    "state_observations",
    "stats_beside",
]

#: The algorithms of stable-baselines3 itself (sb3-contrib adds ARS, QR-DQN, TRPO, MaskablePPO,
#: RecurrentPPO, TQC, ...): see :func:`algorithm_names` for what is installed.
SB3_ALGOS = ("a2c", "ddpg", "dqn", "ppo", "sac", "td3")

#: RL Baselines3 Zoo's names for sb3-contrib algorithms.
_ZOO_NAMES = {"ppo_mask": "maskableppo", "ppo_lstm": "recurrentppo"}

#: Constructor arguments that SB3 does not store under their own name in a saved model.
_UNSTORED = frozenset(
    {
        "self",
        "policy",
        "env",
        "device",
        "_init_setup_model",
        "stats_window_size",  # stored as _stats_window_size
        "rms_prop_eps",  # A2C: only in policy_kwargs
        "use_rms_prop",
        "delta_std",  # ARS: stored as delta_std_schedule
    }
)


class UnusedStatisticsWarning(ImitationMEGWarning):
    """``VecNormalize`` statistics lie beside the model but were not used.

    A policy trained on normalised observations acts differently on raw ones, so its MEG without
    the statistics is another policy's. Pass ``vec_normalize=`` (``"auto"`` takes the file
    found beside the model; ``--vec-normalize auto`` on the command line), or
    ``vec_normalize=False`` if the model was trained without them.
    """


def _module_class(obj: Any, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing ``module`` (it is loaded if obj is one)."""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(obj, cls)


def is_sb3_algorithm(obj: Any) -> bool:
    """Whether ``obj`` is an SB3 ``BaseAlgorithm`` (SB3 is not imported to find out)."""
    return _module_class(obj, "stable_baselines3.common.base_class", "BaseAlgorithm")


def is_sb3_policy(obj: Any) -> bool:
    """Whether ``obj`` is an SB3 ``BasePolicy`` (SB3 is not imported to find out)."""
    return _module_class(obj, "stable_baselines3.common.policies", "BasePolicy")


# ---------------------------------------------------------------------------- algorithms
def _algorithms_of(module_name: str) -> dict[str, type]:
    import importlib

    from stable_baselines3.common.base_class import BaseAlgorithm

    module = importlib.import_module(module_name)
    out = {}
    for name in getattr(module, "__all__", dir(module)):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseAlgorithm):
            out[name.lower()] = cls
    return out


def _contrib_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("sb3_contrib") is not None


def algorithm_names() -> list[str]:
    """Lower-case names of the installed SB3 and sb3-contrib algorithms (``ppo``, ``qrdqn``, ...)."""
    names = set(_algorithms_of("stable_baselines3"))
    if _contrib_installed():
        names |= set(_algorithms_of("sb3_contrib"))
    return sorted(names)


def algorithm_class(algo: str | type) -> Any:
    """The SB3 / sb3-contrib algorithm class of a name (case-insensitive; RL Zoo's ``ppo_mask`` and
    ``ppo_lstm`` too), or the class itself.

    Raises:
        ValueError: an unknown name, or an sb3-contrib name while sb3-contrib is not installed.
        TypeError: neither a name nor an algorithm class.
    """
    if isinstance(algo, type):
        if not hasattr(algo, "load") or not hasattr(algo, "policy_aliases"):
            raise TypeError(f"algo must be an SB3 algorithm class, got {algo!r}.")
        return algo
    if not isinstance(algo, str):
        raise TypeError(f"algo must be an algorithm name or an SB3 class, got {algo!r}.")
    key = algo.lower().replace("-", "_")
    key = _ZOO_NAMES.get(key, key).replace("_", "")
    sb3 = _algorithms_of("stable_baselines3")
    if key in sb3:
        return sb3[key]
    if _contrib_installed():
        contrib = _algorithms_of("sb3_contrib")
        if key in contrib:
            return contrib[key]
        known = sorted({*sb3, *contrib})
        raise ValueError(f"unknown algorithm {algo!r}; installed: {known}.")
    raise ValueError(
        f"unknown algorithm {algo!r}; stable-baselines3 has {sorted(sb3)} (sb3-contrib, which "
        "adds ars, qrdqn, trpo, maskableppo, recurrentppo, ..., is not installed: pip install "
        "'imitation-meg[contrib]')."
    )


@dataclasses.dataclass(frozen=True)
class SavedModelInfo:
    """What a saved SB3 model says about itself (read from the zip, networks not loaded).

    Attributes:
        path: the ``.zip``.
        algo: the algorithm that saved it (lower-case class name), or None when the saved data
            do not single one out (then ``candidates`` lists those that fit).
        candidates: every installed algorithm consistent with the saved data.
        policy_class: the saved policy class.
        num_timesteps: training steps when it was saved (None if not stored).
        action_space: the saved action space.
        observation_space: the saved observation space.
    """

    path: pathlib.Path
    algo: str | None
    candidates: tuple[str, ...]
    policy_class: type
    num_timesteps: int | None
    action_space: Any
    observation_space: Any


def _read_data(path: pathlib.Path) -> tuple[dict[str, Any], str]:
    """The raw JSON entries of a model zip and its text (SB3's ``data`` member)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"no SB3 model file at {str(path)!r}; pass the .zip written by model.save()."
        )
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{str(path)!r} is not a zip file; pass the .zip written by an SB3 model's save()."
        )
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        if "data" not in names:
            shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
            raise ValueError(
                f"{str(path)!r} is a zip file but holds no SB3 model (no 'data' entry; it "
                f"contains {shown or 'nothing'}); pass the .zip written by model.save()."
            )
        text = archive.read("data").decode()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{str(path)!r} has a corrupt SB3 'data' entry ({e}); save the model again."
        ) from e
    if not isinstance(raw, dict) or "policy_class" not in raw:
        raise ValueError(
            f"{str(path)!r} holds no SB3 model (its 'data' entry has no policy_class); pass the "
            ".zip written by model.save()."
        )
    return raw, text


def _policy_module(raw: dict[str, Any]) -> str:
    entry = raw.get("policy_class")
    return str(entry.get("__module__", "")) if isinstance(entry, dict) else ""


def read_model_info(path: PathLike) -> SavedModelInfo:
    """Read a saved SB3 model's policy class, spaces, ``num_timesteps`` and algorithm.

    Uses SB3's ``json_to_data`` for the three serialised entries it needs (the others are left
    unread), so nothing but those classes is unpickled and no network is loaded.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a zip, a zip without an SB3 model, or one saved by a library that is
            not installed (sb3-contrib).
    """
    from stable_baselines3.common.save_util import json_to_data

    p = pathlib.Path(path)
    raw, text = _read_data(p)
    module = _policy_module(raw)
    if module.startswith("sb3_contrib") and not _contrib_installed():
        raise ValueError(
            f"{str(p)!r} was saved by an sb3-contrib algorithm (policy from {module}); install "
            "it: pip install 'imitation-meg[contrib]'."
        )
    wanted = ("policy_class", "action_space", "observation_space")
    skip = {
        k: None
        for k, v in raw.items()
        if k not in wanted and isinstance(v, dict) and ":serialized:" in v
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SB3 warns when a skipped entry fails to unpickle
            data = json_to_data(text, custom_objects=skip)
    except (ModuleNotFoundError, AttributeError, ValueError) as e:
        raise ValueError(
            f"could not read the policy class of {str(p)!r} ({type(e).__name__}: {e}); is the "
            "library that saved it installed?"
        ) from e
    policy_class = data.get("policy_class")
    if not isinstance(policy_class, type):
        raise ValueError(  # noqa: TRY004 - the file's content is a bad value
            f"{str(p)!r}: the saved policy class could not be restored ({policy_class!r}); "
            "save the model again with the installed stable-baselines3."
        )
    keys = set(raw)
    candidates = _candidates(policy_class, keys, contrib=module.startswith("sb3_contrib"))
    algo = _most_specific(candidates)
    steps = raw.get("num_timesteps")
    return SavedModelInfo(
        path=p,
        algo=algo,
        candidates=tuple(sorted(candidates)),
        policy_class=policy_class,
        num_timesteps=int(steps) if isinstance(steps, int) else None,
        action_space=data.get("action_space"),
        observation_space=data.get("observation_space"),
    )


def _init_params(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls).parameters) - _UNSTORED


def _candidates(policy_class: type, keys: set[str], *, contrib: bool) -> dict[str, type]:
    """Installed algorithms that use ``policy_class`` and whose arguments all lie in ``keys``."""
    algos = dict(_algorithms_of("stable_baselines3"))
    if contrib or _contrib_installed():
        algos.update(_algorithms_of("sb3_contrib"))
    aliases: dict[str, list[type]] = {
        n: list(getattr(c, "policy_aliases", {}).values()) for n, c in algos.items()
    }
    exact = {n: c for n, c in algos.items() if policy_class in aliases[n]}
    if not exact:  # a user subclass of a registered policy class
        exact = {
            n: c for n, c in algos.items() if any(issubclass(policy_class, v) for v in aliases[n])
        }
    return {n: c for n, c in exact.items() if _init_params(c) <= keys}


def _most_specific(candidates: dict[str, type]) -> str | None:
    """The candidate with the most stored constructor arguments (PPO and TRPO over A2C, whose
    arguments every actor-critic zip stores), if unique."""
    sizes = {n: len(_init_params(c)) for n, c in candidates.items()}
    if not sizes:
        return None
    top = max(sizes.values())
    tops = [n for n, k in sizes.items() if k == top]
    return tops[0] if len(tops) == 1 else None


def _resolve_algo(info: SavedModelInfo, algo: str | type | None) -> Any:
    """The class to load ``info``'s model with; ``algo`` must agree with the zip."""
    if algo is None:
        if info.algo is None:
            if not info.candidates:
                raise ValueError(
                    f"no installed algorithm uses the policy class {info.policy_class.__name__} "
                    f"saved in {str(info.path)!r}; pass algo= (or --algo) with its class."
                )
            raise ValueError(
                f"{str(info.path)!r} could have been saved by any of {list(info.candidates)} "
                "(same policy class and attributes); pass algo= (or --algo) to choose."
            )
        return algorithm_class(info.algo)
    cls = algorithm_class(algo)
    name = cls.__name__.lower()
    if info.algo is not None and name != info.algo:
        raise ValueError(
            f"{str(info.path)!r} was saved by {info.algo.upper()} (policy "
            f"{info.policy_class.__name__}), not {cls.__name__}: drop algo= / --algo (it is "
            f"read from the zip) or pass {info.algo!r}."
        )
    if info.algo is None and name not in info.candidates:
        raise ValueError(
            f"{str(info.path)!r} was not saved by {cls.__name__} (its policy class "
            f"{info.policy_class.__name__} and attributes fit {list(info.candidates)})."
        )
    return cls


def load_model(path: PathLike, algo: str | type | None = None, *, device: str = "cpu") -> Any:
    """Load an SB3 / sb3-contrib model saved with ``model.save(path)``.

    Args:
        path: the ``.zip`` file (or a folder holding ``model.zip``).
        algo: the algorithm's name (``"ppo"``, ``"qrdqn"``, RL Zoo's ``"ppo_mask"`` ...) or
            class; None reads it from the zip (:func:`read_model_info`).
        device: torch device to load onto.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not an SB3 model, an ``algo`` that contradicts the zip, an unknown
            ``algo``, or a file SB3 cannot load.
    """
    p = pathlib.Path(path)
    if p.is_dir():
        p = p / "model.zip"
    info = read_model_info(p)
    cls = _resolve_algo(info, algo)
    try:
        with warnings.catch_warnings():
            # SB3 warns about schedules pickled under another Python; they do not matter here.
            warnings.filterwarnings("ignore", message=".*Could not deserialize.*")
            return cls.load(p, device=device)
    except (KeyError, ValueError, RuntimeError, pickle.UnpicklingError, AttributeError) as e:
        raise ValueError(
            f"could not load {str(p)!r} as {cls.__name__}: {type(e).__name__}: {e}."
        ) from e


# ------------------------------------------------------------------------ VecNormalize
_CHECKPOINT = re.compile(r"^(?P<prefix>.*)_(?P<steps>\d+)_steps$")


def stats_beside(model_path: PathLike) -> pathlib.Path | None:
    """``VecNormalize`` statistics saved next to a model, in the layouts SB3 and RL Zoo write.

    - ``<dir>/<name>/vecnormalize.pkl`` beside ``<dir>/<name>.zip`` (RL Zoo's final model);
    - ``<dir>/<prefix>_vecnormalize_<n>_steps.pkl`` beside ``<dir>/<prefix>_<n>_steps.zip``
      (``CheckpointCallback(save_vecnormalize=True)``);
    - ``<dir>/vecnormalize.pkl`` or ``<dir>/<env>/vecnormalize.pkl`` for any other zip of an
      RL Zoo run folder (``best_model.zip``: RL Zoo saves the statistics there with it).

    Returns:
        The path, or None when there is none.
    """
    p = pathlib.Path(model_path)
    if p.is_dir():
        p = p / "model.zip"
    folder, stem = p.parent, p.stem
    options = [folder / stem / "vecnormalize.pkl"]
    m = _CHECKPOINT.match(stem)
    if m:
        options.append(folder / f"{m['prefix']}_vecnormalize_{m['steps']}_steps.pkl")
    options.append(folder / "vecnormalize.pkl")
    subdirs = [d for d in folder.iterdir() if d.is_dir() and (d / "vecnormalize.pkl").is_file()]
    if len(subdirs) == 1 and (subdirs[0] / "config.yml").is_file():  # an RL Zoo run folder
        options.append(subdirs[0] / "vecnormalize.pkl")
    return next((o for o in options if o.is_file()), None)


def vec_normalize_of(model: Any) -> Any:
    """The ``VecNormalize`` wrapping a live model's environment, or None."""
    from stable_baselines3.common.vec_env import unwrap_vec_normalize

    env = model.get_env() if hasattr(model, "get_env") else None
    return None if env is None else unwrap_vec_normalize(env)


def resolve_vec_normalize(vec_normalize: Any) -> Any:
    """A ``VecNormalize`` (object or saved path) with observation statistics, or None.

    Raises:
        FileNotFoundError: a path that does not exist.
        TypeError: an object (or pickle) that is not a ``VecNormalize``.
        ValueError: a ``VecNormalize`` that never saw an observation.
    """
    if vec_normalize is None or vec_normalize is False:
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


def vec_normalize_for_file(model_path: PathLike, vec_normalize: Any) -> Any:
    """The statistics to use for a model loaded from ``model_path``.

    ``"auto"`` takes the file :func:`stats_beside` finds (an error if there is none); None
    uses none but warns when statistics lie beside the model; False uses none silently; a path
    or a ``VecNormalize`` is used as given.

    Raises:
        ValueError: ``"auto"`` with no statistics beside the model.

    Warns:
        UnusedStatisticsWarning: statistics beside the model, left unused.
    """
    if isinstance(vec_normalize, str) and vec_normalize == "auto":
        found = stats_beside(model_path)
        if found is None:
            raise ValueError(
                f"vec_normalize='auto' found no VecNormalize statistics beside "
                f"{str(model_path)!r} (looked for <name>/vecnormalize.pkl, "
                "<prefix>_vecnormalize_<n>_steps.pkl and vecnormalize.pkl); pass the file."
            )
        return found
    if vec_normalize is None:
        found = stats_beside(model_path)
        if found is not None:
            warnings.warn(
                f"VecNormalize statistics lie beside {str(model_path)!r} ({str(found)!r}) but "
                "are not used: a policy trained on normalised observations is then scored on "
                "raw ones. Pass vec_normalize='auto' (CLI: --vec-normalize auto) to use them, "
                "or vec_normalize=False if the model was trained without normalisation.",
                UnusedStatisticsWarning,
                stacklevel=4,
            )
    return vec_normalize


# ------------------------------------------------------------------------ policy tables
def _argmax_kind(policy: Any) -> str | None:
    """'dqn', 'qrdqn' or 'ars' for the policies that act by argmax, else None."""
    if hasattr(policy, "get_distribution"):
        return None
    if hasattr(policy, "quantile_net"):
        return "qrdqn"
    if hasattr(policy, "q_net"):
        return "dqn"
    if _module_class(policy, "sb3_contrib.ars.policies", "ARSPolicy"):
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


def __getattr__(name: str) -> Any:
    # ``imitation_meg.adapters.sb3.policy_table`` was the dispatcher's home before the adapters
    # were split by what they adapt; it now lives in imitation_meg.adapters.dispatch and is
    # resolved here on first use (a run-time alias, so the import layers stay acyclic).
    if name == "policy_table":
        import importlib

        return importlib.import_module("imitation_meg.adapters.dispatch").policy_table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
