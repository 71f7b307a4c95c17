"""Reading user tables into validated float64 arrays: finite domains, conditional probability
tables (arrays, callables of the parents' values, mappings) and utility tables."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["CPD_SUM_TOL", "as_domain", "distribution_table", "utility_table"]

#: Tolerance on the sums of conditional probability tables and decision rules (then renormalised).
CPD_SUM_TOL = 1e-6


def _is_continuous(domain: object) -> bool:
    """Whether a domain argument describes a continuous variable (an interval, a type, a
    distribution object) rather than a finite list of labels."""
    if isinstance(domain, type):
        return True
    if hasattr(domain, "rvs") or hasattr(domain, "pdf") or hasattr(domain, "log_prob"):
        return True
    return isinstance(domain, float)


def as_domain(name: str, domain: object) -> tuple[Hashable, ...]:
    if _is_continuous(domain):
        raise TypeError(
            f"variable {name!r} has a continuous domain ({domain!r}); only finite domains are "
            "supported: discretise it into a list of values (e.g. domain=[0.0, 0.5, 1.0])."
        )
    if isinstance(domain, (bool, np.bool_)):
        raise TypeError(
            f"domain of {name!r} must be a sequence of values or a size, got {domain!r}."
        )
    if isinstance(domain, (int, np.integer)):
        if domain < 1:
            raise ValueError(f"domain size of {name!r} must be >= 1, got {domain}.")
        return tuple(range(int(domain)))
    if isinstance(domain, (str, bytes)) or not isinstance(domain, Iterable):
        raise TypeError(
            f"domain of {name!r} must be a finite sequence of values or a size n, got "
            f"{type(domain).__name__} {domain!r}."
        )
    if not hasattr(domain, "__len__"):
        raise TypeError(
            f"domain of {name!r} must be a finite sequence (a list or tuple), got an iterator "
            f"{type(domain).__name__}; pass list(...) of its values."
        )
    values = tuple(domain)
    if not values:
        raise ValueError(f"domain of {name!r} is empty; give at least one value.")
    try:
        distinct = len(set(values)) == len(values)
    except TypeError as err:
        raise TypeError(f"domain values of {name!r} must be hashable, got {values!r}.") from err
    if not distinct:
        raise ValueError(f"domain of {name!r} has repeated values: {values!r}.")
    return values


def _table_from_callable(
    fn: Callable[..., Any],
    parents: Sequence[str],
    domains: Mapping[str, tuple[Hashable, ...]],
    *,
    what: str,
    out: tuple[Hashable, ...] | None,
) -> np.ndarray:
    """Evaluate ``fn(**parent_values)`` on every parent configuration: a distribution over
    ``out`` (``out`` given) or a number (``out`` None)."""
    shape = tuple(len(domains[p]) for p in parents)
    tail = () if out is None else (len(out),)
    table = np.zeros(shape + tail)
    index = {v: i for i, v in enumerate(out)} if out is not None else {}
    for idx in itertools.product(*(range(n) for n in shape)):
        kwargs = {p: domains[p][i] for p, i in zip(parents, idx, strict=True)}
        try:
            val = fn(**kwargs)
        except TypeError as err:
            raise TypeError(
                f"{what}: calling the table function with the parents' values as keyword "
                f"arguments {sorted(kwargs)} failed ({err}); its arguments must be named like "
                "the parents."
            ) from err
        if out is None:
            if isinstance(val, (bool, np.bool_)) or not isinstance(val, (int, float, np.number)):
                raise TypeError(f"{what} returned {val!r} for {kwargs}; it must return a number.")
            table[idx] = float(val)
        elif isinstance(val, Mapping):
            for k, pr in val.items():
                if k not in index:
                    raise ValueError(
                        f"{what} puts probability on {k!r} for {kwargs}, which is not in the "
                        f"domain {out!r}; add it to the domain."
                    )
                pos = (*idx, index[k])
                table[pos] = float(pr)
        elif _hashable_in(val, index):
            pos = (*idx, index[val])
            table[pos] = 1.0
        else:
            try:
                arr = np.asarray(val, dtype=float)
            except (TypeError, ValueError):
                arr = np.zeros(0)
            if arr.shape != (len(out),):
                raise ValueError(
                    f"{what} returned {val!r} for {kwargs}: not a value of the domain {out!r}, "
                    "a mapping {value: probability} or a probability vector of the domain's size."
                )
            table[idx] = arr
    return table


def _hashable_in(val: object, index: Mapping[Hashable, int]) -> bool:
    try:
        return val in index
    except TypeError:  # unhashable (a list or an array of probabilities)
        return False


def _as_array(x: object, what: str) -> np.ndarray:
    try:
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        raw = np.asarray(x)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} must be numeric, got {type(x).__name__}: {err}.") from err
    if raw.dtype.kind not in "biuf":  # complex, strings, objects: no silent conversion
        raise TypeError(
            f"{what} must be numeric (real numbers), got dtype {raw.dtype} "
            f"({type(x).__name__}); pass an array of probabilities or values."
        )
    return raw.astype(np.float64)


def _check_distribution(table: np.ndarray, name: str, what: str) -> np.ndarray:
    """Check a ``(*parents, |V|)`` table of distributions and return it renormalised."""
    if not np.isfinite(table).all():
        raise ValueError(f"{what} of {name!r} contains NaN or infinite entries.")
    if (table < 0).any():
        idx = [tuple(int(i) for i in r) for r in np.argwhere(table < 0)[:5]]
        raise ValueError(f"{what} of {name!r} has negative probabilities at {idx}.")
    sums = table.sum(-1)
    bad = np.abs(sums - 1.0) > CPD_SUM_TOL
    if bad.any():
        idx = [tuple(int(i) for i in r) for r in np.argwhere(bad)[:5]]
        vals = [round(float(sums[i]), 8) for i in idx]
        raise ValueError(
            f"{what} of {name!r} does not sum to 1 over the variable's values at parent "
            f"configurations {idx} (sums {vals}; tolerance {CPD_SUM_TOL}); the last axis must hold "
            "a distribution for every parent configuration."
        )
    return table / sums[..., None]


def distribution_table(
    spec: object,
    name: str,
    parents: Sequence[str],
    domains: Mapping[str, tuple[Hashable, ...]],
    *,
    what: str = "cpd",
) -> np.ndarray:
    """A validated ``(*parent sizes, |V|)`` table from an array, callable or mapping."""
    out = domains[name]
    label = f"{what} of {name!r}"
    if (
        callable(spec)
        and not isinstance(spec, (np.ndarray, Mapping))
        and not hasattr(spec, "shape")
    ):
        table = _table_from_callable(spec, parents, domains, what=label, out=out)
    elif isinstance(spec, Mapping):
        if parents:
            raise TypeError(
                f"{label}: a mapping {{value: probability}} describes a variable without parents; "
                f"{name!r} has parents {tuple(parents)}: pass an array or a callable of them."
            )
        table = _table_from_callable(lambda: spec, (), domains, what=label, out=out)
    else:
        table = _as_array(spec, label)
    shape = (*tuple(len(domains[p]) for p in parents), len(out))
    if table.shape != shape:
        raise ValueError(
            f"{label} must have shape {shape} (parents {tuple(parents)} then the variable), got "
            f"{table.shape}."
        )
    return _check_distribution(table, name, what)


def utility_table(
    spec: object, name: str, parents: Sequence[str], domains: Mapping[str, tuple[Hashable, ...]]
) -> np.ndarray:
    label = f"utility table of {name!r}"
    shape = tuple(len(domains[p]) for p in parents)
    if callable(spec) and not isinstance(spec, np.ndarray) and not hasattr(spec, "shape"):
        table = _table_from_callable(spec, parents, domains, what=label, out=None)
    else:
        if isinstance(spec, (bool, np.bool_, str, bytes)):
            raise TypeError(f"{label} must hold numbers, got {spec!r}.")
        table = _as_array(spec, label)
        if table.ndim == 0:
            table = np.full(shape, float(table))
    if table.shape != shape:
        raise ValueError(
            f"{label} must have shape {shape} (one number per configuration of the parents "
            f"{tuple(parents)}), got {table.shape}."
        )
    if not np.isfinite(table).all():
        raise ValueError(f"{label} contains NaN or infinite values; utilities must be finite.")
    return table
