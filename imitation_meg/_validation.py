"""Turning user input into checked tensors: the lowest layer of the package.

Every public function validates its arguments here, at the boundary, and raises ``TypeError``
(wrong kind) or ``ValueError`` (wrong value or shape) with the offending values and a remedy.
Nothing in this module imports another module of the package, so every layer may use it.

The MDP-dependent checks take any object with the shape attributes of a
:class:`~imitation_meg.mdp.TabularMDP` (:class:`MDPShape`), so that this module stays below it.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import numpy as np
import torch as th

from imitation_meg.type_aliases import ArrayLike

__all__ = [
    "POLICY_ROW_TOL",
    "ImitationMEGWarning",
    "MDPShape",
    "as_betas",
    "as_policy",
    "as_sa_occupancy",
    "as_tensor",
    "check_finite",
    "is_loaded_instance",
]

#: Tolerance on the row sums of user policies (rows are renormalised after the check).
POLICY_ROW_TOL = 1e-5
#: Tolerance on the step sums of a state-action occupancy.
OCCUPANCY_SUM_TOL = 1e-6


class ImitationMEGWarning(UserWarning):
    """Base class of every warning this package raises (allowed but suspicious input).

    The test suite turns it into an error, so that no test passes while one is raised unnoticed.
    """


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
        TypeError: if ``x`` cannot be read as a numeric array.
    """
    if isinstance(x, th.Tensor):
        t = x
    else:
        try:
            if isinstance(x, np.ndarray) and not x.flags.writeable:
                arr = np.array(x, copy=True)
            else:
                arr = np.asarray(x)
        except Exception as e:
            raise TypeError(f"{name} must be array-like, got {type(x).__name__}: {e}") from e
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
        ):
            raise TypeError(
                f"{name} must be a numeric array or tensor, got dtype {arr.dtype} "
                f"({type(x).__name__}); pass a numpy array or torch tensor of numbers."
            )
        t = th.as_tensor(arr)
    return t.to(device=device if device is not None else t.device, dtype=dtype or t.dtype)


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
        ValueError: wrong shape, NaN/inf, negative entries, or rows not summing to 1 within 1e-5.
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
