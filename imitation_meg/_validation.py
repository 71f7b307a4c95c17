"""Turning user input into checked tensors: the lowest layer of the package.

Every public function validates its arguments here, at the boundary, and raises ``TypeError``
(wrong kind) or ``ValueError`` (wrong value or shape) with the offending values and a remedy.
Nothing in this module imports another module of the package, so every layer may use it.

The MDP-dependent checks take any object with the shape attributes of a
:class:`~imitation_meg.core.mdp.TabularMDP` (:class:`MDPShape`), so that this module stays below it.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Protocol

import numpy as np
import torch as th

from imitation_meg.type_aliases import ArrayLike

__all__ = [
    "POLICY_ROW_TOL",
    "BetaRangeWarning",
    "ImitationMEGWarning",
    "MDPShape",
    "as_betas",
    "as_policy",
    "as_sa_occupancy",
    "as_tensor",
    "check_finite",
    "check_horizon_memory",
    "horizon_bytes",
    "is_loaded_instance",
]

#: Tolerance on the row sums of user policies (rows are renormalised after the check).
POLICY_ROW_TOL = 1e-5
#: Tolerance on the step sums of a state-action occupancy.
OCCUPANCY_SUM_TOL = 1e-6
#: Below this many bytes a finite-horizon call is not checked against the free memory.
MEMORY_CHECK_BYTES = 1 << 28


class ImitationMEGWarning(UserWarning):
    """Base class of every warning this package raises (allowed but suspicious input).

    The test suite turns it into an error, so that no test passes while one is raised unnoticed.
    """


class BetaRangeWarning(ImitationMEGWarning):
    """The fitted rationality ``beta`` is finite but beyond float64's range in the caller's
    utility units (a utility of spread below about ``1e-308``): it is reported as NaN, with
    its value for the utility scaled to spread 1 in ``extra["beta_normalized"]``."""


class MDPShape(Protocol):
    """What the checks need of an MDP: its sizes, horizon, dtype, device and name."""

    n_states: int
    n_actions: int
    horizon: int | None
    dtype: th.dtype
    device: th.device
    name: str


def as_tensor(
    x: ArrayLike,
    *,
    name: str,
    dtype: th.dtype | None = None,
    device: th.device | str | None = None,
) -> th.Tensor:
    """Convert a numpy array, tensor, list or scalar to a tensor, with a clear error otherwise.

    Args:
        x: the value to convert.
        name: the argument's name, used in error messages.
        dtype: target dtype (``None`` keeps the input's).
        device: target device (``None`` keeps the input's, CPU for non-tensors).

    Returns:
        A tensor on ``device`` with ``dtype``.

    Raises:
        TypeError: if ``x`` cannot be read as a numeric array, or holds complex numbers.
    """
    if isinstance(x, th.Tensor):
        t = x
        if t.is_complex():
            raise TypeError(_complex_message(name, t.dtype))
    else:
        t = th.as_tensor(_numeric_array(x, name))
    return t.to(device=device if device is not None else t.device, dtype=dtype or t.dtype)


def _numeric_array(x: Any, name: str) -> np.ndarray:
    """``x`` as a numpy array of real numbers or booleans (a copy when ``x`` is read-only)."""
    try:
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            arr = np.array(x, copy=True)
        else:
            arr = np.asarray(x)
    except Exception as e:
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}: {e}") from e
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(
            f"{name} must be a numeric array or tensor, got dtype {arr.dtype} "
            f"({type(x).__name__}); pass a numpy array or torch tensor of numbers."
        )
    if arr.dtype.kind == "c":
        raise TypeError(_complex_message(name, arr.dtype))
    return arr


def _complex_message(name: str, dtype: Any) -> str:
    return (
        f"{name} holds complex numbers (dtype {dtype}); MEG needs real values: pass x.real if "
        "the imaginary parts are zero."
    )


def check_finite(t: th.Tensor, name: str) -> None:
    """Raise ``ValueError`` naming the first offending indices if ``t`` holds NaN or inf."""
    if t.is_floating_point() and not bool(th.isfinite(t).all()):
        bad = (~th.isfinite(t)).nonzero()[:5].tolist()
        raise ValueError(
            f"{name} contains NaN or infinite values (first offending indices {bad}); "
            "replace them with finite numbers."
        )


def as_policy(policy: ArrayLike, mdp: MDPShape, *, name: str = "policy") -> th.Tensor:
    """Validate a policy against an MDP and return it as a renormalised tensor.

    Args:
        policy: ``(S, A)`` stationary or ``(H, S, A)`` time-dependent probabilities.
        mdp: the MDP the policy acts in.
        name: argument name for messages.

    Returns:
        A tensor of the same shape in ``mdp.dtype`` on ``mdp.device`` whose rows sum to 1.

    Raises:
        TypeError: non-numeric input.
        ValueError: wrong shape, NaN/inf, negative entries, rows not summing to 1 within 1e-5,
            or a horizon whose per-step tables cannot fit in memory
            (:func:`check_horizon_memory`).
    """
    pi = as_tensor(policy, name=name, dtype=th.float64, device=mdp.device)
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    if H is None and tuple(pi.shape) != (S, A):
        raise ValueError(
            f"{name} must have shape ({S}, {A}) for {mdp.name}, a discounted infinite-horizon "
            f"MDP, whose policies are stationary; got {tuple(pi.shape)}"
            + (" (time-dependent)." if pi.ndim == 3 else ".")
        )
    if tuple(pi.shape) not in ((S, A), (H, S, A)):
        raise ValueError(
            f"{name} must have shape ({S}, {A}) (stationary) or ({H}, {S}, {A}) "
            f"(time-dependent, horizon {H}) for {mdp.name}, got {tuple(pi.shape)}."
        )
    # the solvers hold the policy's copy (time-dependent) and occupancies per step
    check_horizon_memory(
        mdp, what=f"a call with {name} {tuple(pi.shape)}", sa_tables=2 * (pi.ndim - 2), s_tables=2
    )
    if not bool(th.isfinite(pi).all()):
        raise ValueError(f"{name} contains NaN or infinite entries; pass probabilities.")
    if bool((pi < 0).any()):
        idx = (pi < 0).nonzero()[:5].tolist()
        raise ValueError(f"{name} has negative probabilities at {idx}; entries must be >= 0.")
    sums = pi.sum(-1)
    bad = (sums - 1).abs() > POLICY_ROW_TOL
    if bool(bad.any()):
        idx = bad.nonzero()[:5].tolist()
        vals = [round(float(sums[tuple(i)]), 8) for i in idx]
        raise ValueError(
            f"{name} rows {idx} sum to {vals}, not 1 (tolerance {POLICY_ROW_TOL}); each "
            "pi[..., s, :] must be a distribution over actions (normalise with pi / pi.sum(-1))."
        )
    return (pi / sums.unsqueeze(-1)).to(mdp.dtype)


def as_betas(betas: ArrayLike, *, dtype: th.dtype, device: th.device) -> th.Tensor:
    """Read a scalar or 1-D sequence of rationality parameters as a ``(K,)`` tensor.

    Raises:
        ValueError: NaN entries, an empty sequence or more than one dimension.
        TypeError: non-numeric input.
    """
    b = as_tensor(betas, name="betas", dtype=dtype, device=device)
    if b.ndim == 0:
        b = b.reshape(1)
    if b.ndim != 1:
        raise ValueError(f"betas must be a scalar or a 1-D sequence, got shape {tuple(b.shape)}.")
    if bool(th.isnan(b).any()):
        raise ValueError("betas contains NaN; pass real numbers or +-inf.")
    if b.numel() == 0:
        raise ValueError("betas is empty; pass at least one rationality parameter.")
    return b


def as_sa_occupancy(w: ArrayLike, mdp: MDPShape, *, name: str = "sa_occupancy") -> th.Tensor:
    """Validate an ``(H, S, A)`` state-action occupancy (non-negative, each step summing to 1).

    Raises:
        ValueError: wrong shape, negative or non-finite entries, or a step not summing to 1
            (tolerance 1e-6).
    """
    if mdp.horizon is None:
        raise ValueError(
            f"{name} is a per-step (H, S, A) occupancy, and {mdp.name} is a discounted "
            "infinite-horizon MDP with no steps to count; pass the stationary policy instead "
            "(or score a finite-horizon copy, mdp.with_horizon(H))."
        )
    t = as_tensor(w, name=name, dtype=mdp.dtype, device=mdp.device)
    shape = (mdp.horizon, mdp.n_states, mdp.n_actions)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}.")
    check_horizon_memory(mdp, what=f"a call with {name} {shape}", sa_tables=1, s_tables=2)
    if not bool(th.isfinite(t).all()) or bool((t < 0).any()):
        raise ValueError(f"{name} must be finite and non-negative.")
    sums = t.sum((-1, -2))
    bad = (sums - 1).abs() > OCCUPANCY_SUM_TOL
    if bool(bad.any()):
        raise ValueError(
            f"{name} steps {bad.nonzero().flatten()[:5].tolist()} sum to "
            f"{sums[bad][:5].tolist()}, not 1; each w[t] must be a distribution over (s, a)."
        )
    return t


def is_loaded_instance(obj: Any, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing ``module``.

    Optional libraries (SB3, sb3-contrib, imitation) are never imported to answer: an object of
    one of their classes can only exist once its module is loaded, so a module that is not in
    ``sys.modules`` means False.
    """
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return cls is not None and isinstance(obj, cls)


def horizon_bytes(
    horizon: int,
    n_states: int,
    n_actions: int,
    branching: int = 1,
    *,
    itemsize: int = 8,
    sa_tables: int = 0,
    s_tables: int = 1,
) -> int:
    """Bytes of the per-step tables a finite-horizon call holds at once.

    ``sa_tables`` tables of shape ``(H, S, A)`` (a time-dependent policy, ``Q``, log-policies),
    ``s_tables`` of shape ``(H + 1, S)`` (occupancies, values) and the per-step work space of
    the sparse products, four ``(S, A, B)`` tables: ``itemsize * ((H + 1) * S * (sa_tables * A
    + s_tables) + 4 * S * A * B)``. A lower estimate: the solvers hold a few more small
    temporaries per step.

    Example:
        >>> horizon_bytes(10**9, 40, 4, 2, sa_tables=1)  # uniform (H, S, A) policy, CliffWorld
        1600000011840
    """
    per_step = n_states * (sa_tables * n_actions + s_tables)
    return itemsize * ((horizon + 1) * per_step + 4 * n_states * n_actions * branching)


def free_memory(device: th.device | str = "cpu") -> int | None:
    """Bytes a new allocation may take on ``device``: free GPU memory, or on Linux the available
    memory plus free swap (``/proc/meminfo``); ``None`` where it cannot be read."""
    device = th.device(device)
    if device.type == "cuda":
        free, _ = th.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            info = {k.strip(): v.split() for k, _, v in (line.partition(":") for line in f)}
        return 1024 * (int(info["MemAvailable"][0]) + int(info.get("SwapFree", ["0"])[0]))
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _size(n: float) -> str:
    """``1.6 TB``, ``512.0 MB``: a byte count in decimal units."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError  # pragma: no cover - the loop returns


def check_horizon_memory(
    mdp: MDPShape,
    *,
    what: str,
    sa_tables: int = 0,
    s_tables: int = 1,
    free: int | None = None,
) -> None:
    """Refuse a finite-horizon call whose per-step tables cannot fit in the free memory.

    The estimate is :func:`horizon_bytes` of the MDP's horizon, sizes and float dtype; only
    calls above 256 MiB are checked against :func:`free_memory`.

    Args:
        mdp: the MDP (an MDP without a finite horizon is not checked).
        what: the call, for the message (``"meg"``, ``"policies.uniform"``).
        sa_tables: ``(H, S, A)`` tables the call holds.
        s_tables: ``(H + 1, S)`` tables the call holds.
        free: the free bytes (default :func:`free_memory` of the MDP's device).

    Raises:
        ValueError: the estimate exceeds the free memory; the message gives both figures, the
            largest horizon that fits and the remedies.
    """
    H = mdp.horizon
    if H is None:
        return
    S, A, B = mdp.n_states, mdp.n_actions, int(getattr(mdp, "branching", 1))
    itemsize = th.empty((), dtype=mdp.dtype).element_size()
    sizes = {"itemsize": itemsize, "sa_tables": sa_tables, "s_tables": s_tables}
    need = horizon_bytes(H, S, A, B, **sizes)
    if need < MEMORY_CHECK_BYTES:
        return
    free = free_memory(mdp.device) if free is None else free
    if free is None or need <= free:
        return
    per_step = max(horizon_bytes(1, S, A, B, **sizes) - horizon_bytes(0, S, A, B, **sizes), 1)
    fits = max(math.floor((free - horizon_bytes(0, S, A, B, **sizes)) / per_step), 0)
    stationary = (
        "a stationary (S, A) policy where a time-dependent one is passed or built (it needs no "
        "(H, S, A) table), "
        if sa_tables
        else ""
    )
    raise ValueError(
        f"{what} on {mdp.name} with horizon H={H} (S={S}, A={A}) needs about {_size(need)} "
        f"of memory for its per-step tables, but {_size(free)} are free on {mdp.device}; use a "
        f"smaller horizon (H <= {fits} fits), {stationary}or the discounted infinite-horizon "
        "setting (horizon=None with a discount < 1)."
    )
