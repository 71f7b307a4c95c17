"""RL Baselines3 Zoo run folders: the model, its ``VecNormalize`` statistics and the environment.

``python -m rl_zoo3.train --algo ppo --env ENV`` writes ``logs/ppo/<EnvName>_<n>/`` with

- ``<EnvName>.zip``: the final model (``best_model.zip`` and ``rl_model_<k>_steps.zip`` with
  evaluation or checkpoints),
- ``<EnvName>/config.yml``: the hyperparameters (``normalize``, ``n_envs``, ``env_wrapper``, ...),
- ``<EnvName>/args.yml``: the command line (``env`` is the gymnasium id, ``algo``, ``env_kwargs``),
- ``<EnvName>/vecnormalize.pkl``: the observation statistics when ``normalize`` is set,

where ``<EnvName>`` is the id with ``/`` replaced by ``-`` (``seals/CliffWorld7x4-v0`` ->
``seals-CliffWorld7x4-v0``). :func:`read_zoo_run` reads such a folder; the YAML files are read with
a safe loader that understands only the ``OrderedDict`` and tuple tags RL Zoo writes (never
arbitrary Python objects). rl_zoo3 itself is not needed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import warnings
from typing import Any

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.type_aliases import PathLike

__all__ = ["ZooRun", "ZooWrapperWarning", "is_zoo_run", "read_zoo_run"]


#: The RL Zoo's Atari wrapper (with a 4-frame stack: the MDP imitation_meg.approx.ale plays).
_ZOO_ATARI = "stable_baselines3.common.atari_wrappers.AtariWrapper"


class ZooWrapperWarning(ImitationMEGWarning):
    """The run's ``config.yml`` wraps the environment; the policy table uses the MDP's own
    observations, which the wrapper may change (then pass ``observations=``)."""


@dataclasses.dataclass(frozen=True)
class ZooRun:
    """What an RL Zoo run folder holds.

    Attributes:
        folder: the run folder ``logs/<algo>/<EnvName>_<n>``.
        model: the ``.zip`` chosen (the final model by default).
        vec_normalize: the statistics file when the run normalised observations, else None.
        env_id: the gymnasium id (``args.yml``'s ``env``), or None if unrecorded.
        env_kwargs: keyword arguments the run made the environment with.
        algo: the algorithm's RL Zoo name (``ppo``, ``qrdqn``, ``ppo_mask``, ...), or None.
        config: the hyperparameters of ``config.yml``.
    """

    folder: pathlib.Path
    model: pathlib.Path
    vec_normalize: pathlib.Path | None
    env_id: str | None
    env_kwargs: dict[str, Any]
    algo: str | None
    config: dict[str, Any]

    def make_env(self) -> Any:
        """The environment the run trained on (``gym.make(env_id, **env_kwargs)``).

        Raises:
            ValueError: the run did not record its environment id.
        """
        import gymnasium as gym

        if self.env_id is None:
            raise ValueError(
                f"the RL Zoo run {str(self.folder)!r} records no environment id (args.yml "
                "missing); pass the environment (--env / mdp_or_env=)."
            )
        if self.env_id.startswith("seals/"):
            import seals  # noqa: F401 (registers the seals environment ids)
        try:
            return gym.make(self.env_id, **self.env_kwargs)
        except Exception as e:  # gymnasium raises many kinds for unknown ids and bad kwargs
            raise ValueError(
                f"could not make the RL Zoo run's environment {self.env_id!r} with "
                f"{self.env_kwargs}: {type(e).__name__}: {e}"
            ) from e


def _ordered_dict(loader: Any, node: Any) -> dict[str, Any]:
    (pairs,) = loader.construct_sequence(node, deep=True) or ([],)
    return dict(pairs)


def _tuple(loader: Any, node: Any) -> tuple[Any, ...]:
    return tuple(loader.construct_sequence(node, deep=True))


def _opaque(loader: Any, suffix: str, node: Any) -> str:
    return f"<python object: {suffix}>"


@functools.cache
def _loader() -> type:
    """A safe YAML loader for RL Zoo's files: OrderedDict and tuple tags become dicts / tuples;
    any other Python tag becomes the string ``"<python object: tag>"`` (never constructed)."""
    import yaml

    class ZooLoader(yaml.SafeLoader):
        pass

    ZooLoader.add_constructor(
        "tag:yaml.org,2002:python/object/apply:collections.OrderedDict", _ordered_dict
    )
    ZooLoader.add_constructor("tag:yaml.org,2002:python/tuple", _tuple)
    ZooLoader.add_multi_constructor("tag:yaml.org,2002:python/", _opaque)
    return ZooLoader


def _read_yaml(path: pathlib.Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.load(path.read_text(), Loader=_loader())  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ValueError(f"{str(path)!r} is not valid YAML: {' '.join(str(e).split())}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 - the file's content is a bad value
            f"{str(path)!r} should hold a mapping, got {type(data).__name__}."
        )
    return data


def _params_dir(folder: pathlib.Path) -> pathlib.Path | None:
    subdirs = [
        d
        for d in sorted(folder.iterdir())
        if d.is_dir() and ((d / "config.yml").is_file() or (d / "args.yml").is_file())
    ]
    return subdirs[0] if len(subdirs) == 1 else None


#: What an RL Zoo run folder holds, for messages about folders that are not one.
RUN_FOLDER = (
    "an RL Zoo run folder (logs/<algo>/<EnvName>_<n>, as python -m rl_zoo3.train writes it) "
    "holds the model <EnvName>.zip and one subfolder <EnvName>/ with config.yml or args.yml, "
    "which record the environment and hyperparameters"
)


def not_a_run(path: PathLike) -> str:
    """Why the folder ``path`` is not an RL Zoo run folder, and what one holds (for messages)."""
    folder = pathlib.Path(path)
    subdirs = [d.name for d in sorted(folder.iterdir()) if d.is_dir()] if folder.is_dir() else []
    params = [
        d for d in subdirs if any((folder / d / f).is_file() for f in ("config.yml", "args.yml"))
    ]
    if len(params) > 1:
        found = f"it has {len(params)} subfolders with config.yml / args.yml ({params[:3]})"
    else:
        zips = sorted(p.name for p in folder.glob("*.zip"))[:3]
        found = f"it has no subfolder with config.yml or args.yml (zips: {zips or 'none'})"
    return f"{str(folder)!r} is not an RL Zoo run folder: {found}; {RUN_FOLDER}"


def is_zoo_run(path: PathLike) -> bool:
    """Whether ``path`` is an RL Zoo run folder (one subfolder with ``config.yml`` / ``args.yml``)."""
    p = pathlib.Path(path)
    return p.is_dir() and _params_dir(p) is not None


def _normalize_kwargs(value: Any) -> dict[str, Any] | None:
    """RL Zoo's ``normalize`` hyperparameter as VecNormalize kwargs, or None when off."""
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):  # "dict(norm_obs=True, norm_reward=False)"
        parsed = _parse_setting(value)
        if isinstance(parsed, dict):
            return parsed
        if isinstance(parsed, bool):
            return {} if parsed else None
    raise ValueError(
        f"cannot read RL Zoo's normalize setting {value!r}; expected true/false or "
        "'dict(norm_obs=..., norm_reward=...)'."
    )


def _parse_setting(value: str) -> Any:
    """A YAML string setting as Python: ``dict(k=v, ...)`` calls and literals; None when it is
    neither."""
    try:
        call = ast.parse(value, mode="eval").body
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "dict"
            and not call.args
        ):
            return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        return ast.literal_eval(value)
    except (SyntaxError, ValueError):
        return None


def read_zoo_run(path: PathLike, *, model: str | int = "final") -> ZooRun:
    """Read an RL Zoo run folder.

    Args:
        path: ``logs/<algo>/<EnvName>_<n>`` (the folder ``rl_zoo3.train`` prints as "Log path").
        model: ``"final"`` (``<EnvName>.zip``), ``"best"`` (``best_model.zip``) or a number of
            steps ``k`` (the checkpoint ``rl_model_<k>_steps.zip``).

    Returns:
        :class:`ZooRun`; ``vec_normalize`` is the statistics file to use for ``model`` (for a
        checkpoint its own ``rl_model_vecnormalize_<k>_steps.pkl`` when saved, else the run's).

    Raises:
        FileNotFoundError: no such folder, or the chosen model is missing.
        ValueError: not an RL Zoo run folder, malformed YAML, or a run that normalised
            observations without saving the statistics.

    Warns:
        ZooWrapperWarning: ``config.yml`` names an ``env_wrapper`` or ``frame_stack`` (but
            the Zoo's Atari setting, ``AtariWrapper`` and 4 frames, which the ALE simulator
            plays itself).
    """
    folder = pathlib.Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"no RL Zoo run folder at {str(folder)!r}.")
    params = _params_dir(folder)
    if params is None:
        raise ValueError(f"{not_a_run(folder)}.")
    config = _read_yaml(params / "config.yml") if (params / "config.yml").is_file() else {}
    args = _read_yaml(params / "args.yml") if (params / "args.yml").is_file() else {}
    chosen = _chosen_model(folder, params.name, model)
    vec_normalize = _statistics(folder, params, config, model)
    _warn_wrappers(folder, config)
    env_kwargs = _env_kwargs(config, args)
    env_id = args.get("env")
    algo = args.get("algo") or (folder.parent.name or None)
    return ZooRun(
        folder=folder,
        model=chosen,
        vec_normalize=vec_normalize,
        env_id=str(env_id) if env_id else None,
        env_kwargs=env_kwargs,
        algo=str(algo) if algo else None,
        config=config,
    )


def _chosen_model(folder: pathlib.Path, name: str, model: str | int) -> pathlib.Path:
    """The zip of ``model`` (``"final"``, ``"best"`` or a checkpoint's steps) in the run."""
    if model == "final":
        chosen = folder / f"{name}.zip"
    elif model == "best":
        chosen = folder / "best_model.zip"
    elif isinstance(model, int) and not isinstance(model, bool):
        chosen = folder / f"rl_model_{model}_steps.zip"
    else:
        raise ValueError(f"model must be 'final', 'best' or a number of steps, got {model!r}.")
    if not chosen.is_file():
        zips = sorted(p.name for p in folder.glob("*.zip"))
        raise FileNotFoundError(
            f"the RL Zoo run {str(folder)!r} has no {chosen.name} (it holds {zips or 'no zip'}); "
            "pick another model ('final', 'best' or a checkpoint's steps) or pass a .zip."
        )
    return chosen


def _env_kwargs(config: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """The environment's keyword arguments: ``config.yml``'s, updated by ``args.yml``'s."""
    env_kwargs: dict[str, Any] = {}
    for source in (config.get("env_kwargs"), args.get("env_kwargs")):
        if isinstance(source, dict):
            env_kwargs.update(source)
    return env_kwargs


def _statistics(
    folder: pathlib.Path, params: pathlib.Path, config: dict[str, Any], model: str | int
) -> pathlib.Path | None:
    """The VecNormalize statistics of ``model`` when the run normalised observations: a
    checkpoint's own file when saved, else the run's (refused when missing)."""
    norm = _normalize_kwargs(config.get("normalize"))
    if norm is None or not norm.get("norm_obs", True):
        return None
    if isinstance(model, int):
        own = folder / f"rl_model_vecnormalize_{model}_steps.pkl"
        if own.is_file():
            return own
    stats = params / "vecnormalize.pkl"
    if not stats.is_file():
        raise ValueError(
            f"the RL Zoo run {str(folder)!r} normalised observations (normalize: "
            f"{config.get('normalize')!r}) but {str(stats)!r} is missing; the policy "
            "cannot be scored without its statistics."
        )
    return stats


def _warn_wrappers(folder: pathlib.Path, config: dict[str, Any]) -> None:
    """A :class:`ZooWrapperWarning` for each observation wrapper the run trained with, except
    the Zoo's Atari setting (its ``AtariWrapper`` and 4 stacked frames: the MDP of the ALE
    simulator, :mod:`imitation_meg.approx.ale`)."""
    atari = config.get("env_wrapper") == [_ZOO_ATARI] and config.get("frame_stack") == 4
    for key in ("env_wrapper", "frame_stack"):
        if config.get(key) and not atari:
            warnings.warn(
                f"the RL Zoo run {str(folder)!r} trained with {key}={config[key]!r}; the policy "
                "table feeds the environment's own observations, which that wrapper may change. "
                "Pass observations= with what the policy saw if it does.",
                ZooWrapperWarning,
                stacklevel=3,
            )
