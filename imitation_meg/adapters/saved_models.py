"""Saved SB3 / sb3-contrib models: which algorithm saved a ``.zip``, and loading it.

:func:`read_model_info` reads a ``.zip`` written by ``model.save()`` without loading the networks:
the policy class, the action and observation spaces, ``num_timesteps`` and the algorithm that
saved it. SB3 stores no algorithm name, so it is inferred with SB3's own ``policy_aliases``
(which algorithms use the saved policy class) and the saved attributes (every constructor
argument of an algorithm is stored, apart from a few listed in ``_UNSTORED``): the algorithm with
the most stored arguments, all present, wins, so a PPO zip (``clip_range``, ``n_epochs``) is told
from an A2C or TRPO zip of the same policy class. :func:`load_model` loads any SB3 / sb3-contrib
algorithm (``algo=None`` reads it from the zip; a contradicting ``algo=`` is an error).

stable_baselines3 (and sb3_contrib, when the zip needs it) is imported only inside functions.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import pathlib
import pickle
import warnings
import zipfile
import zlib
from typing import Any

from imitation_meg.type_aliases import PathLike

__all__ = [
    "SB3_ALGOS",
    "SavedModelInfo",
    "algorithm_class",
    "algorithm_names",
    "load_model",
    "read_model_info",
]

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
        policy_kwargs: the saved keyword arguments of the policy.
    """

    path: pathlib.Path
    algo: str | None
    candidates: tuple[str, ...]
    policy_class: type
    num_timesteps: int | None
    action_space: Any
    observation_space: Any
    policy_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def _read_data(path: pathlib.Path) -> tuple[dict[str, Any], str]:
    """The raw JSON entries of a model zip and its text (SB3's ``data`` member)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"no SB3 model file at {str(path)!r}; pass the .zip written by model.save()."
        )
    _check_archive(path)
    try:
        with zipfile.ZipFile(path) as archive:
            _check_starts_at_zero(path, archive)
            names = archive.namelist()
            if "data" not in names:
                shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
                raise ValueError(
                    f"{str(path)!r} is a zip file but holds no SB3 model (no 'data' entry; it "
                    f"contains {shown or 'nothing'}); pass the .zip written by model.save()."
                )
            text = archive.read("data").decode()
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{str(path)!r} is a damaged zip archive ({type(e).__name__}: {e}); save the model "
            "again, or copy it again if it was copied."
        ) from e
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


#: A zip archive's first bytes (a member's local header), and its end record's.
_ZIP_START = b"PK\x03\x04"
_ZIP_END = b"PK\x05\x06"
#: The end record's size without its comment, and the most a comment adds.
_END_SIZE, _MAX_COMMENT = 22, 65_535


def _check_archive(path: pathlib.Path) -> None:
    """Refuse a file that is not a whole zip archive: another format, an empty file, or a
    truncated zip (one cut short in a copy or a download keeps its start but loses the central
    directory at its end; SB3 stores the torch archives inside uncompressed, so the end record
    of one of them can then pass for the file's own).

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(len(_ZIP_START))
            f.seek(max(0, size - _END_SIZE - _MAX_COMMENT))
            tail = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {str(path)!r}: {e.strerror or e}.") from e
    if size == 0:
        raise ValueError(
            f"{str(path)!r} is empty (0 bytes); pass the .zip written by an SB3 model's save()."
        )
    if head not in (_ZIP_START, _ZIP_END):  # an archive's first member, or an empty archive
        raise ValueError(
            f"{str(path)!r} is not a zip file (it starts with {head!r}); pass the .zip written "
            "by an SB3 model's save()."
        )
    if not _ends_in_end_record(tail):
        raise ValueError(
            f"{str(path)!r} is a truncated zip archive ({size} bytes): it starts like one but "
            "its end (the central directory) is missing, as when a copy or a download is cut "
            "short. Save the model again, or copy the whole file again."
        )


def _check_starts_at_zero(path: pathlib.Path, archive: zipfile.ZipFile) -> None:
    """The archive the end record describes starts at the file's first byte; one that starts
    further in is an archive stored inside a truncated file (the end record found is its)."""
    first = min((info.header_offset for info in archive.infolist()), default=0)
    if first > 0:
        raise ValueError(
            f"{str(path)!r} is a truncated zip archive ({path.stat().st_size} bytes): its end "
            f"(the central directory) is missing, and the end record found belongs to an "
            f"archive stored inside it (from byte {first}), as when a copy or a download is "
            "cut short. Save the model again, or copy the whole file again."
        )


def _ends_in_end_record(tail: bytes) -> bool:
    """Whether ``tail`` (a file's last bytes) ends with a zip end record and its comment."""
    at = tail.rfind(_ZIP_END)
    while at >= 0:
        if len(tail) - at >= _END_SIZE:
            comment = int.from_bytes(tail[at + 20 : at + 22], "little")
            if at + _END_SIZE + comment == len(tail):
                return True
        at = tail.rfind(_ZIP_END, 0, at)
    return False


def _policy_module(raw: dict[str, Any]) -> str:
    entry = raw.get("policy_class")
    return str(entry.get("__module__", "")) if isinstance(entry, dict) else ""


def read_model_info(path: PathLike) -> SavedModelInfo:
    """Read a saved SB3 model's policy class, spaces, ``num_timesteps`` and algorithm.

    Uses SB3's ``json_to_data`` for the three serialised entries it needs (the others are left
    unread), so nothing but those classes is unpickled and no network is loaded.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a zip, an empty, truncated or damaged zip, a zip without an SB3 model,
            or one saved by a library that is not installed (sb3-contrib).
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
    wanted = ("policy_class", "action_space", "observation_space", "policy_kwargs")
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
        policy_kwargs=dict(data.get("policy_kwargs") or {}),
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


class _InertOptimizer:
    """Stands in for a loaded model's optimizer when the model is only scored: building a torch
    optimizer imports ``torch._dynamo`` (about 1.5 s of CPU at start-up), and scoring never
    takes a step."""

    def __init__(self, params: Any, lr: Any = 0.0, **kwargs: Any) -> None:
        self.param_groups = [{"params": list(params), "lr": lr, **kwargs}]

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any, **kwargs: Any) -> None:
        """The saved optimizer state is not needed to score."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to reset."""

    def step(self, closure: Any = None) -> None:
        raise RuntimeError(
            "this model was loaded for scoring (load_model(..., for_training=False)) and has no "
            "optimizer; load it with load_model(..., for_training=True) or stable_baselines3 to "
            "train it."
        )


def load_model(
    path: PathLike,
    algo: str | type | None = None,
    *,
    device: str = "cpu",
    for_training: bool = False,
) -> Any:
    """Load an SB3 / sb3-contrib model saved with ``model.save(path)``.

    Args:
        path: the ``.zip`` file (or a folder holding ``model.zip``).
        algo: the algorithm's name (``"ppo"``, ``"qrdqn"``, RL Zoo's ``"ppo_mask"`` ...) or
            class; None reads it from the zip (:func:`read_model_info`).
        device: torch device to load onto.
        for_training: build the model's optimizer (and load its state) so that it can go on
            learning; by default the optimizer is an inert stand-in (scoring needs only the
            policy's networks, and a torch optimizer costs about 1.5 s of start-up).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not an SB3 model (a truncated or damaged zip among them), an ``algo``
            that contradicts the zip, an unknown ``algo``, or a file SB3 cannot load.
    """
    p = pathlib.Path(path)
    if p.is_dir():
        p = p / "model.zip"
    info = read_model_info(p)
    cls = _resolve_algo(info, algo)
    custom: dict[str, Any] = {}
    if not for_training and "optimizer_class" in _init_params(info.policy_class):
        custom["policy_kwargs"] = {**info.policy_kwargs, "optimizer_class": _InertOptimizer}
    try:
        with warnings.catch_warnings():
            # SB3 warns about schedules pickled under another Python; they do not matter here.
            warnings.filterwarnings("ignore", message=".*Could not deserialize.*")
            model = cls.load(p, device=device, custom_objects=custom or None)
    except (
        KeyError,
        ValueError,
        RuntimeError,
        pickle.UnpicklingError,
        AttributeError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
    ) as e:
        raise ValueError(
            f"could not load {str(p)!r} as {cls.__name__} ({type(e).__name__}: {e}); the file "
            "may be damaged or written by an incompatible stable-baselines3: save the model "
            "again."
        ) from e
    if not for_training:  # a scoring copy: evaluation mode once, not per batch
        model.policy.set_training_mode(False)
    return model
