"""Typed experiment configs: YAML mappings loaded into frozen dataclasses.

A config is a YAML mapping whose top-level key ``experiment`` names a driver file
``experiments/<experiment>.py`` beside the ``configs/`` folder. The driver defines a frozen
dataclass ``Config`` and a function ``main(cfg: Config) -> dict``. Every other key of the YAML
becomes a field of ``Config``; unknown keys raise ``ValueError`` so that typos never pass silently.

A driver's ``Config`` checks its values in ``__post_init__`` (:func:`check_values`), so a bad
value, in the YAML or from ``--set``, is refused when the config is loaded, before any unit runs.
A folder a study writes besides its results (its checkpoints) defaults to a subfolder of
``results_dir`` (:func:`follow_results_dir`), so ``--set results_dir=X`` moves it too.

Result writers live in :mod:`imitation_meg.results`; running a config in
:mod:`imitation_meg.runners`.

Example:
    >>> from imitation_meg.runners import run_config
    >>> results = run_config("configs/cliffworld_epsilon_fast.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import pathlib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["check_values", "follow_results_dir", "load_config", "load_yaml", "parse_yaml_value"]

C = TypeVar("C")


def load_yaml(path: str | pathlib.Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path``.

    Raises:
        ValueError: if the file does not exist or does not hold a mapping.
    """
    import yaml  # optional dependency (extra "experiments")

    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist; pass the path of a YAML file.")
    with path.open() as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ValueError(
                f"config file {str(path)!r} is not valid YAML: {_yaml_problem(e)}"
            ) from e
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 - the file's content is a bad value
            f"config file {str(path)!r} must hold a YAML mapping, got {type(data).__name__}."
        )
    return data


def _yaml_problem(e: Exception) -> str:
    """One line on a YAML syntax error: where (1-based line and column), what, and the fix."""

    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = at(mark) if mark is not None else "an unknown place"
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    context_mark = getattr(e, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        context = f"{context} started at {at(context_mark)}"
    what = f"{problem} ({context})" if context else problem
    return (
        f"{what} at {where}; fix the syntax there (indent nested keys evenly, write "
        "'key: value' with a space after the colon, close every [ and {, quote values that "
        "hold ': ' or '#')."
    )


def parse_yaml_value(text: str, *, where: str = "value") -> Any:
    """Read one value written in YAML (``3``, ``[Q, PPO]``, ``{n_steps: 128}``, ``false``).

    Raises:
        ValueError: malformed YAML, with the column and the fix.
    """
    import yaml

    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:
        raise ValueError(f"{where} is not valid YAML: {_yaml_problem(e)}") from e


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML value to the annotated type ``tp`` (dataclasses, tuples, optionals)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(value, tp, where)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return load_config(_mapping(value, where, f" for {tp.__name__}"), tp, where=where)
    if _is_sequence_type(tp, origin):
        return _coerce_sequence(value, tp, where)
    if _is_mapping_type(tp, origin):
        return dict(_mapping(value, where, ""))
    if tp in _SCALARS:
        return _SCALARS[tp](value, where)
    if origin is typing.Literal and value not in typing.get_args(tp):
        raise ValueError(f"{where}: {value!r} is not one of {typing.get_args(tp)}.")
    return value


def _is_sequence_type(tp: Any, origin: Any) -> bool:
    """``tuple[...]``, ``Sequence[...]``, ``list[...]`` or a bare ``tuple`` / ``list``."""
    return origin in (tuple, Sequence, list) or tp in (tuple, list)


def _is_mapping_type(tp: Any, origin: Any) -> bool:
    """``dict[...]``, ``Mapping[...]`` or a bare ``dict``."""
    return origin in (dict, Mapping) or tp is dict


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    """``value`` where a mapping is expected (``what``: `` for Config``, say).

    Raises:
        TypeError: it is not a mapping.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected a mapping{what}, got {value!r}.")
    return value


def _coerce_union(value: Any, tp: Any, where: str) -> Any:
    """The first member of a union (``X | None`` included) that takes the value."""
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _coerce(value, arg, where)
        except (TypeError, ValueError) as e:
            errors.append(str(e))
    raise TypeError(f"{where}: {value!r} matches none of {tp}: {'; '.join(errors)}")


def _coerce_sequence(value: Any, tp: Any, where: str) -> tuple[Any, ...]:
    """A YAML list as a tuple: ``tuple[X, ...]``, fixed-length ``tuple[X, Y]``, or a list."""
    _check_list(value, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is tuple and args:
        return _coerce_fixed(value, args, where)
    inner = args[0] if args else Any
    return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))


def _check_list(value: Any, where: str) -> None:
    """A YAML list (a sequence that is not a string).

    Raises:
        TypeError: anything else.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{where}: expected a list, got {value!r}.")


def _coerce_fixed(value: Sequence[Any], args: tuple[Any, ...], where: str) -> tuple[Any, ...]:
    """A YAML list as a fixed-length ``tuple[X, Y, ...]``, entry by entry.

    Raises:
        ValueError: the list has another length.
    """
    if len(args) != len(value):
        raise ValueError(f"{where}: expected {len(args)} entries, got {len(value)}.")
    return tuple(
        _coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True))
    )


def _as_float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "-inf", "nan"):
            return float(value)
        raise TypeError(f"{where}: expected a number, got {value!r}.")
    return float(value)


def _as_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: expected an integer, got {value!r}.")
    return value


def _as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: expected true or false, got {value!r}.")
    return value


def _as_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where}: expected a string, got {value!r}.")
    return value


# The scalar annotations a config field may carry, each with its check.
_SCALARS: dict[Any, Callable[[Any, str], Any]] = {
    float: _as_float,
    int: _as_int,
    bool: _as_bool,
    str: _as_str,
}


def load_config(
    data: Mapping[str, Any] | str | pathlib.Path, cls: type[C], *, where: str = "config"
) -> C:
    """Build the frozen dataclass ``cls`` from a mapping or a YAML file.

    Args:
        data: a mapping of field names to values, or the path of a YAML file holding one.
            The key ``experiment`` is ignored (it names the driver, see :func:`run_config`).
        cls: a dataclass type; nested dataclass fields are built recursively and list
            values become tuples.
        where: prefix for error messages.

    Returns:
        An instance of ``cls``.

    Raises:
        ValueError: unknown keys, missing required keys, or values of the wrong shape.
        TypeError: ``cls`` is not a dataclass, or a value has the wrong type.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"load_config needs a dataclass type, got {cls!r}.")
    if isinstance(data, (str, pathlib.Path)):
        data = load_yaml(data)
    data = {k: v for k, v in data.items() if k != "experiment"}
    hints = typing.get_type_hints(cls)
    _check_keys(data, cls, where)
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:  # the dataclass's own checks (__post_init__)
        raise type(e)(f"{where}: {e}") from e


def _check_keys(data: Mapping[str, Any], cls: type, where: str) -> None:
    """Every key a field of ``cls``, every field without a default given.

    Raises:
        ValueError: unknown keys, or missing required keys.
    """
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(
            f"{where}: unknown keys {unknown} for {cls.__name__}; valid keys are {sorted(fields)}."
        )
    missing = [
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{where}: missing required keys {missing} for {cls.__name__}.")


def _entries(name: str, value: Any) -> list[tuple[str, Any]]:
    """``(label, value)`` of a scalar field, or of each entry of a sequence field."""
    if isinstance(value, (list, tuple)):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return [(name, value)]


def check_values(
    cfg: Any,
    *,
    positive: Sequence[str] = (),
    non_negative: Sequence[str] = (),
    probabilities: Sequence[str] = (),
    choices: Mapping[str, Sequence[Any]] | None = None,
) -> None:
    """Check a config's values (call it from the ``Config``'s ``__post_init__``).

    Each named field is a number or a sequence of numbers (each entry is checked); a field
    that is ``None`` is skipped (an optional setting left to its default).

    Args:
        cfg: the config dataclass instance.
        positive: fields that must be > 0 (counts, horizons, learning rates).
        non_negative: fields that must be >= 0 (seeds, counts where 0 switches a part off).
        probabilities: fields that must lie in ``[0, 1]``.
        choices: fields whose value (or each entry) must be one of the given values.

    Raises:
        ValueError: the first bad value, named with its field and the fix (the config's value
            or ``--set``).
    """
    rules: list[tuple[Sequence[str], Any, str]] = [
        (positive, lambda v: v > 0, "must be > 0"),
        (non_negative, lambda v: v >= 0, "must be >= 0"),
        (probabilities, lambda v: 0 <= v <= 1, "must lie in [0, 1] (a probability)"),
    ]
    for names, ok, rule in rules:
        for name in names:
            for label, v in _entries(name, getattr(cfg, name)):
                if v is not None and not ok(v):
                    raise ValueError(
                        f"{label} = {v!r} {rule}; fix it in the config file or with "
                        f"--set {name}=..."
                    )
    for name, allowed in (choices or {}).items():
        for label, v in _entries(name, getattr(cfg, name)):
            if v not in allowed:
                raise ValueError(
                    f"{label} = {v!r} is not one of {list(allowed)}; fix it in the config file "
                    f"or with --set {name}=..."
                )


def follow_results_dir(cfg: Any, **subfolders: str) -> None:
    """Put the folder fields left at None under the config's ``results_dir``.

    Call it from a ``Config``'s ``__post_init__``. Each keyword names a folder field whose
    default is None, with the subfolder of ``results_dir`` it takes then: with
    ``follow_results_dir(self, checkpoint_dir="checkpoints")`` a config with ``results_dir: X``
    and no ``checkpoint_dir`` writes its checkpoints to ``X/checkpoints``, so two runs with
    different ``--set results_dir=...`` never share a folder. A value given in the YAML or with
    ``--set checkpoint_dir=...`` is kept as given.

    Args:
        cfg: the config dataclass instance (frozen dataclasses included); it must have a
            ``results_dir`` field.
        **subfolders: field name -> subfolder of ``results_dir``.

    Raises:
        ValueError: a named field that the config lacks (a bug in the driver).
    """
    for name, subfolder in subfolders.items():
        if not hasattr(cfg, name):
            raise ValueError(
                f"{type(cfg).__name__} has no field {name!r} to put under results_dir; "
                "name one of its folder fields."
            )
        if getattr(cfg, name) is None:
            # frozen dataclasses included: the field is resolved once, while the config is built
            object.__setattr__(cfg, name, str(pathlib.Path(cfg.results_dir) / subfolder))
