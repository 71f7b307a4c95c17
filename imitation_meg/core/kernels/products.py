"""The action-major products of one transition operator, and the elementwise steps of the passes.

:class:`Products` is a :class:`~imitation_meg.core.kernels.operators.TransitionOperator`'s
product for ``k`` columns along one path (dense, CSR, scipy's CSR loops or strided state-major
views), with one :meth:`Products.backup` and one :meth:`Products.push` whatever the path;
:class:`Kernels` holds the elementwise steps that run beside it (numpy ufuncs on views where
the products run through scipy, torch otherwise). Both are re-exported from
:mod:`imitation_meg.core.kernels.operators`, which builds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

try:  # scipy's compiled CSR loops: a few microseconds less per call than torch's sparse kernels
    from scipy.sparse import _sparsetools as _spt
except ImportError:  # pragma: no cover - scipy is a dependency; torch's kernels are the fallback
    _spt = None

__all__ = ["NUMPY_KERNELS", "TORCH_KERNELS", "Array", "Kernels", "Operands", "Products"]

# Per-step views are made once up to this many steps (each costs ~0.2 kB); beyond, per access.
_MAX_VIEW_STEPS = 1 << 12

Array = Any  # a torch tensor, or a numpy view of one in the numpy paths
#: Per-step operands, indexed by step: a list of views, or an array / tensor whose rows are.
Operands = list[Any] | np.ndarray | th.Tensor


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The elementwise steps of the passes, for torch tensors or numpy views of them.

    Every function writes into its last argument ``out``; the reductions run over the leading
    (action) axis and keep it (``(A, S, k) -> (1, S, k)``). numpy's ufuncs cost about 1 us less
    per call than torch's on small blocks and its ``exp`` / ``log`` are about twice as fast, so
    the passes run them wherever their products run through scipy (:attr:`Products.numpy`).
    """

    amax0: Callable[[Any, Any], Any]
    sum0: Callable[[Any, Any], Any]
    add: Callable[[Any, Any, Any], Any]
    sub: Callable[[Any, Any, Any], Any]
    mul: Callable[[Any, Any, Any], Any]
    div: Callable[[Any, Any, Any], Any]
    exp: Callable[[Any, Any], Any]
    log: Callable[[Any, Any], Any]
    copy: Callable[[Any, Any], Any]


def _np_amax0(x: np.ndarray, out: np.ndarray) -> None:
    np.maximum.reduce(x, 0, None, out, True)


def _np_sum0(x: np.ndarray, out: np.ndarray) -> None:
    np.add.reduce(x, 0, None, out, True)


def _np_copy(x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, x)


def _th_amax0(x: th.Tensor, out: th.Tensor) -> None:
    th.amax(x, 0, True, out=out)


def _th_sum0(x: th.Tensor, out: th.Tensor) -> None:
    th.sum(x, 0, True, out=out)


def _th_copy(x: th.Tensor, out: th.Tensor) -> None:
    out.copy_(x)


def _th_binary(op: Callable[..., th.Tensor]) -> Callable[[Any, Any, Any], Any]:
    def f(a: th.Tensor, b: th.Tensor, out: th.Tensor) -> None:
        op(a, b, out=out)

    return f


def _th_unary(op: Callable[..., th.Tensor]) -> Callable[[Any, Any], Any]:
    def f(a: th.Tensor, out: th.Tensor) -> None:
        op(a, out=out)

    return f


# The fields in :class:`Kernels`' order: amax0, sum0, add, sub, mul, div, exp, log, copy.
#: numpy ufuncs take ``out`` positionally.
NUMPY_KERNELS = Kernels(
    _np_amax0, _np_sum0, np.add, np.subtract, np.multiply, np.divide, np.exp, np.log, _np_copy
)
TORCH_KERNELS = Kernels(
    _th_amax0,
    _th_sum0,
    _th_binary(th.add),
    _th_binary(th.sub),
    _th_binary(th.mul),
    _th_binary(th.div),
    _th_unary(th.exp),
    _th_unary(th.log),
    _th_copy,
)


class Products:
    """Products with one MDP's transitions in the action-major layout, for ``k`` columns.

    ``backup(out, x, c, alpha)``: ``out = c + alpha * M @ x`` with ``M (A * S, S)`` (row
    ``a * S + s``), ``x (S, k)`` / ``(S,)`` and ``out, c (A * S, k)`` / ``(A * S,)``.
    ``push(out, x)``: ``out = M^T @ x`` for a mass ``x (A, S, k)`` made by :meth:`sa_buffer`
    and ``out (S, k)`` / ``(S,)``.

    The path is chosen once, at construction: a dense matrix (one BLAS call), an action-major
    CSR matrix through torch's kernels, the same through scipy's CSR loops (:attr:`numpy`), or,
    on large MDPs, the state-major CSR pair through strided views. With :attr:`numpy` every
    argument may also be a flat numpy view of a C-contiguous buffer (what the passes hand over,
    made once per buffer with :meth:`view`).
    """

    def __init__(
        self,
        n_states: int,
        n_actions: int,
        M: th.Tensor,
        MT: th.Tensor,
        *,
        state_major: bool = False,
        use_scipy: bool = False,
    ) -> None:
        self.n_states, self.n_actions = n_states, n_actions
        self._M, self._MT = M, MT
        self._state_major = state_major
        self._np: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        self._scaled: dict[tuple[int, float], np.ndarray] = {}
        self._alpha, self._alpha_data = 1.0, np.empty(0)
        if use_scipy:
            self._np = (
                (M.crow_indices().numpy(), M.col_indices().numpy(), M.values().numpy(), *M.shape),
                (
                    MT.crow_indices().numpy(),
                    MT.col_indices().numpy(),
                    MT.values().numpy(),
                    *MT.shape,
                ),
            )
            self._alpha_data = self._np[0][2]
            self.backup = self._backup_scipy  # type: ignore[method-assign]
            self.push = self._push_scipy  # type: ignore[method-assign]
        elif state_major:
            self.backup = self._backup_state_major  # type: ignore[method-assign]
            self.push = self._push_state_major  # type: ignore[method-assign]

    @property
    def numpy(self) -> bool:
        """Whether the products run through scipy's loops on numpy views (CPU, small MDPs);
        the passes then run their elementwise steps with :data:`NUMPY_KERNELS` too."""
        return self._np is not None

    @property
    def kernels(self) -> Kernels:
        """The elementwise kernels that match :attr:`numpy`."""
        return NUMPY_KERNELS if self._np is not None else TORCH_KERNELS

    @property
    def is_sparse(self) -> bool:
        """Whether the operator is a CSR matrix (else dense)."""
        return bool(self._M.is_sparse_csr)

    def view(self, t: th.Tensor) -> Array:
        """``t`` as the products and kernels take it: a numpy view with :attr:`numpy`, else ``t``."""
        return t.numpy() if self._np is not None else t

    def flat(self, t: th.Tensor) -> Array:
        """A C-contiguous ``t`` as the flat argument the scipy path takes, else ``t``."""
        return t.numpy().reshape(-1) if self._np is not None else t

    def operands(self, buf: th.Tensor, k: int) -> Operands:
        """The per-step operands of a C-contiguous buffer ``(n, ..., k)`` (``n`` steps of
        ``(A, S, k)`` rows or ``(S, k)`` carries), in the form :meth:`backup` and :meth:`push`
        take them, indexed by step: flat numpy rows with :attr:`numpy`, else ``(rows,)`` for
        ``k = 1`` and ``(rows, k)`` tensors (made once per step up to ``_MAX_VIEW_STEPS``
        steps, a view per access beyond, so that memory does not grow with long horizons)."""
        n = buf.shape[0]
        if self._np is not None:
            return buf.numpy().reshape(n, -1)
        v = buf.view(n, -1) if k == 1 else buf.view(n, -1, k)
        return list(v.unbind(0)) if n <= _MAX_VIEW_STEPS else v

    def sa_buffer(self, k: int, like: th.Tensor) -> th.Tensor:
        """An empty ``(A, S, k)`` state-action mass for :meth:`push` (on large MDPs a transposed
        view of a state-major buffer, so that the product reads it without a copy)."""
        A, S = self.n_actions, self.n_states
        if self._state_major:
            return like.new_empty(S, A, k).transpose(0, 1)
        return like.new_empty(A, S, k)

    def dense_matrix(self) -> th.Tensor:
        """The action-major operator ``M (A * S, S)`` as a dense tensor (for tests and checks)."""
        S, A = self.n_states, self.n_actions
        M = self._M.to_dense() if self._M.is_sparse_csr else self._M
        if self._state_major:
            return M.view(S, A, S).transpose(0, 1).reshape(A * S, S)
        return M

    # ------------------------------------------------------------------ the products
    def backup(self, out: Array, x: Array, c: Array, alpha: float = 1.0) -> None:
        """``out = c + alpha * M @ x``."""
        if out.ndim == 1:
            th.addmv(c, self._M, x, alpha=alpha, out=out)
        else:
            th.addmm(c, self._M, x, alpha=alpha, out=out)

    def push(self, out: Array, x: Array) -> None:
        """``out = M^T @ x`` for a mass ``x (A, S, k)`` (flat with :attr:`numpy`)."""
        A, S = self.n_actions, self.n_states
        if out.ndim == 1 or out.shape[-1] == 1:
            th.mv(self._MT, x.view(A * S), out=out.view(S))
        else:
            th.mm(self._MT, x.view(A * S, -1), out=out)

    def scaled(self, alpha: float, which: int = 0) -> np.ndarray:
        """The stored values of ``alpha * M`` (``which=1``: of ``M^T``), cached per ``alpha``
        (scipy path)."""
        assert self._np is not None
        data = self._np[which][2]
        if alpha == 1.0:
            return data
        scaled = self._scaled.get((which, alpha))
        if scaled is None:
            scaled = self._scaled[(which, alpha)] = data * alpha
        return scaled

    def _backup_scipy(self, out: Array, x: Array, c: Array, alpha: float = 1.0) -> None:
        if not isinstance(out, np.ndarray):  # tensors: flat numpy views of them
            if not out.is_contiguous():  # pragma: no cover - the passes hand contiguous blocks
                Products.backup(self, out, x, c, alpha)
                return
            out, x, c = out.numpy().reshape(-1), x.numpy().reshape(-1), c.numpy().reshape(-1)
        np.copyto(out, c)
        if alpha != self._alpha:  # the scaled values of the last alpha are kept at hand
            self._alpha, self._alpha_data = alpha, self.scaled(alpha, 0)
        indptr, indices, _, n_row, n_col = self._np[0]  # type: ignore[index]
        k = out.shape[0] // n_row
        if k == 1:
            _spt.csr_matvec(n_row, n_col, indptr, indices, self._alpha_data, x, out)
        else:
            _spt.csr_matvecs(n_row, n_col, k, indptr, indices, self._alpha_data, x, out)

    def _push_scipy(self, out: Array, x: Array) -> None:
        if not isinstance(out, np.ndarray):
            out, x = out.numpy().reshape(-1), x.numpy().reshape(-1)
        out.fill(0.0)
        indptr, indices, data, n_row, n_col = self._np[1]  # type: ignore[index]
        k = out.shape[0] // n_row
        if k == 1:
            _spt.csr_matvec(n_row, n_col, indptr, indices, data, x, out)
        else:
            _spt.csr_matvecs(n_row, n_col, k, indptr, indices, data, x, out)

    def _backup_state_major(self, out: Array, x: Array, c: Array, alpha: float = 1.0) -> None:
        S, A = self.n_states, self.n_actions
        if x.ndim == 1 or x.shape[-1] == 1:
            k, nxt = 1, self._M @ x.reshape(S)
        else:
            k, nxt = x.shape[-1], self._M @ x
        th.add(
            c.view(A, S, k), nxt.view(S, A, k).transpose(0, 1), alpha=alpha, out=out.view(A, S, k)
        )

    def _push_state_major(self, out: Array, x: Array) -> None:
        S, A = self.n_states, self.n_actions
        sm = x.transpose(0, 1)  # (S, A, k), contiguous when made by sa_buffer
        if out.ndim == 1 or out.shape[-1] == 1:
            out.view(S).copy_(self._MT @ sm.reshape(S * A))
        else:
            out.copy_(self._MT @ sm.reshape(S * A, -1))
