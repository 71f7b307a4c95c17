"""Sums in an order that does not depend on the number of threads.

On the CPU these go through numpy's own loops (no threaded BLAS): torch's reductions split long
sums by thread, so their last bits depend on the thread count. Results built on these are the
same bits on every run and every thread count; on other devices they are torch's products.
"""

from __future__ import annotations

import numpy as np
import torch as th

__all__ = ["combine", "contract", "dot"]


def dot(x: th.Tensor, y: th.Tensor) -> float:
    """``sum(x * y)`` (same shapes, any strides) summed in an order that does not depend on the
    number of threads (on the CPU numpy's einsum loop, no BLAS; torch's reductions split long sums
    by thread), so that results are the same bits on every run and every thread count."""
    if x.device.type == "cpu":
        idx = "abcdefgh"[: x.ndim]
        return float(np.einsum(f"{idx},{idx}->", x.detach().numpy(), y.detach().numpy()))
    return float(th.dot(x.reshape(-1), y.reshape(-1)))


def contract(phi: th.Tensor, v: th.Tensor) -> th.Tensor:
    """``phi^T v`` for ``phi (n, F)``, ``v (n,)``, in a thread-independent order on the CPU."""
    if phi.device.type == "cpu":
        out = np.einsum("nf,n->f", phi.numpy(), v.detach().contiguous().numpy(), optimize=False)
        return th.from_numpy(np.ascontiguousarray(out))
    return phi.T @ v


def combine(phi: th.Tensor, theta: th.Tensor) -> th.Tensor:
    """``phi @ theta`` for ``phi (..., F)``, in a thread-independent order on the CPU."""
    if phi.device.type == "cpu":
        out = np.einsum("...f,f->...", phi.numpy(), theta.detach().contiguous().numpy())
        return th.from_numpy(np.ascontiguousarray(out))
    return phi @ theta
