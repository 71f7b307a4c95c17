"""The fast paths of the transition operator, in one object per MDP (and device).

Every pass of the package multiplies by the transition matrix in one of two directions:

- the *backup* ``E_{s' ~ T(s, a)}[x(s')]`` of value columns ``x (S, k)`` (soft value iteration,
  MEG's derivative passes), and
- the *push-forward* ``sum_{s, a} m(s, a) T[s, a, s']`` of state-action masses (occupancies).

How these products run is this module's business and nobody else's:

- **dense or sparse.** Small MDPs (``S * A * S <= 2**20``) keep a dense ``(S * A, S)`` matrix
  (one BLAS call); the others an int32 CSR matrix and its transpose (``O(S * A * B)`` work and
  memory).
- **action-major layout.** The internal passes hold their ``(S, A)`` arrays as ``(A, S)``
  blocks (row ``a * S + s``), so that sums and maxima over the few actions reduce over a leading
  axis and broadcasts of state values run over contiguous memory. Up to ``AM_MAX_SA`` state-action
  pairs the operator keeps action-major copies, dense or CSR by a cost rule for the number of
  columns; above it the state-major CSR pair is used through strided views (no second copy of a
  large operator).
- **scipy's CSR loops.** On CPU, products with at most ``SCIPY_MAX_WORK`` multiply-adds run
  scipy's compiled ``csr_matvec(s)`` on numpy views of the cached tensors (a few microseconds
  less per call than torch's sparse kernels); the passes then also run their elementwise steps
  as numpy ufuncs on views of the same buffers (:data:`NUMPY_KERNELS`).
- **workspaces.** Buffers of a pass can be kept per operator (per key and thread) for the next
  pass of the same shape.
- **device.** Everything lives on the MDP's device; scipy's loops only on CPU.

:class:`TransitionOperator` holds these caches for one set of transitions on one device (copies
of an MDP with another dtype or horizon share it); :class:`Products` is its action-major
product for ``k`` columns, with one :meth:`Products.backup` and one :meth:`Products.push` whatever
the path. Callers use only the public methods below.

:class:`Products` and the elementwise :class:`Kernels` live in
:mod:`imitation_meg.core.kernels.products` and are re-exported here.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

import numpy as np
import torch as th

from imitation_meg.core.kernels.products import (
    NUMPY_KERNELS,
    TORCH_KERNELS,
    Kernels,
    Operands,
    Products,
    _spt,
)

__all__ = [
    "AM_MAX_SA",
    "DENSE_FAST_PATH_ENTRIES",
    "LAYOUT_OVERRIDE",
    "NUMPY_KERNELS",
    "SCIPY_MAX_WORK",
    "TORCH_KERNELS",
    "Kernels",
    "Operands",
    "PassMDP",
    "Products",
    "TransitionOperator",
    "promoted_dtype",
]

# Below this many S * A * S entries the operator is a cached dense matrix (one BLAS call).
DENSE_FAST_PATH_ENTRIES = 1 << 20
# Up to this many state-action pairs the passes use cached action-major operators.
AM_MAX_SA = 1 << 20
# CPU products with at most this many multiply-adds (stored entries x columns) use scipy's CSR
# loops, whose per-call cost is a few microseconds below torch's sparse kernels; above it the
# call cost no longer matters and torch's kernels are as fast or faster.
SCIPY_MAX_WORK = 1 << 17
# Tests set this to force one path of :meth:`TransitionOperator.products` on fresh operators:
# "dense", "csr" (torch's kernels), "scipy" or "state_major"; None chooses by the rules above.
LAYOUT_OVERRIDE: str | None = None

W = TypeVar("W")


class PassMDP(Protocol):
    """A finite-horizon MDP as the compiled and fused passes read it (a
    :class:`~imitation_meg.core.mdp.TabularMDP` is one): its sizes, its number of decisions, its
    discount, ``p0 (S,)`` and its :class:`TransitionOperator`."""

    @property
    def n_states(self) -> int: ...

    @property
    def n_actions(self) -> int: ...

    @property
    def steps(self) -> int: ...

    @property
    def discount(self) -> float: ...

    @property
    def initial_state_dist(self) -> th.Tensor: ...

    @property
    def operator(self) -> TransitionOperator: ...


def promoted_dtype(x: th.dtype, own: th.dtype) -> th.dtype:
    """The float dtype of a product of ``x``-typed values with an MDP of dtype ``own``."""
    if x == own:
        return x
    dt = th.promote_types(x, own)
    return dt if dt in (th.float32, th.float64) else own


class TransitionOperator:
    """The transition operator of one MDP on one device, with every cached form of it.

    Built from the fixed-branching transitions ``next_state, prob (S, A, B)``; copies of the MDP
    with another dtype or horizon share it (its caches are keyed by dtype).

    Args:
        next_state: ``(S, A, B)`` successor indices (int64).
        prob: ``(S, A, B)`` successor probabilities (the MDP's own dtype; other dtypes are cast
            from it).
    """

    def __init__(self, next_state: th.Tensor, prob: th.Tensor) -> None:
        self._next_state, self._prob = next_state, prob
        self.n_states, self.n_actions = int(next_state.shape[0]), int(next_state.shape[1])
        self.branching = int(next_state.shape[2])  # stored successors per state-action pair
        self.device = next_state.device
        self._cache: dict[Hashable, Any] = {}
        self._nnz: int | None = None

    # ------------------------------------------------------------------ cached forms
    def _get(self, key: Hashable, build: Callable[[], W]) -> W:
        val = self._cache.get(key)
        if val is None:
            val = self._cache[key] = build()
        return val

    def dense(self, dtype: th.dtype) -> th.Tensor | None:
        """Cached ``T`` as ``(S * A, S)`` for small MDPs (``S * A * S <= 2**20``), else None."""
        S, A = self.n_states, self.n_actions
        if S * A * S > DENSE_FAST_PATH_ENTRIES:
            return None

        def build() -> th.Tensor:
            T = th.zeros(S, A, S, dtype=dtype, device=self.device)
            T.scatter_add_(-1, self._next_state, self._prob.to(dtype))
            return T.reshape(S * A, S)

        return self._get(("dense", dtype), build)

    def csr(self, dtype: th.dtype) -> tuple[th.Tensor, th.Tensor]:
        """Cached sparse CSR matrices ``P (S * A, S)`` and ``P^T (S, S * A)`` of the transitions.

        Duplicate successors are summed and zero-probability padding is dropped; indices are
        int32 when they fit (half the index traffic of int64).
        """

        def build() -> tuple[th.Tensor, th.Tensor]:
            S, A, B = self._next_state.shape
            keep = self._prob.reshape(-1) != 0
            rows = th.arange(S * A, device=self.device).repeat_interleave(B)[keep]
            cols = self._next_state.reshape(-1)[keep]
            vals = self._prob.reshape(-1)[keep].to(dtype)
            idx_dtype = th.int32 if max(S * A, rows.numel()) < 2**31 - 1 else th.int64
            return (
                _csr_matrix(rows, cols, vals, (S * A, S), idx_dtype),
                _csr_matrix(cols, rows, vals, (S, S * A), idx_dtype),
            )

        return self._get(("csr", dtype), build)

    def branching_arrays(self, dtype: th.dtype) -> tuple[np.ndarray, np.ndarray]:
        """``(next_state, prob)``: numpy ``(S * A, B)`` arrays of the fixed-branching
        transitions (row ``s * A + a``; unsigned 32-bit indices when they fit, probabilities in
        ``dtype``; zero-probability padding kept), for compiled loops on CPU (cached).

        The indices are unsigned because numba then skips the negative-index check of every
        load: a third of a gather's time (a random 1e5-state MDP, 4 actions, 4 successors, one
        thread: 2.5-3.0 ms per gather of all successors with int32 indices, 1.8-2.3 ms with
        uint32, torch's CSR product 1.8-2.3 ms).
        """

        def build() -> tuple[np.ndarray, np.ndarray]:
            S, A, B = self._next_state.shape
            idx = np.uint32 if S <= 2**32 - 1 else np.uint64
            nxt = self._next_state.reshape(S * A, B).cpu().numpy().astype(idx)
            return nxt, self._prob.reshape(S * A, B).to(dtype).contiguous().numpy()

        return self._get(("branching", dtype), build)

    @property
    def nnz(self) -> int:
        """Number of non-zero transition entries."""
        if self._nnz is None:
            self._nnz = int((self._prob != 0).sum())
        return self._nnz

    def _state_major(self, dtype: th.dtype) -> tuple[bool, th.Tensor, th.Tensor]:
        """``(is_dense, M, M^T)`` for the backup ``(S * A, S)`` and push-forward ``(S, S * A)``."""

        def build() -> tuple[bool, th.Tensor, th.Tensor]:
            dense = self.dense(dtype)
            if dense is not None:
                return (True, dense, dense.T)
            P, PT = self.csr(dtype)
            return (False, P, PT)

        return self._get(("ops", dtype), build)

    def _scipy_ok(self, work: int) -> bool:
        """Whether a CSR product of ``work`` multiply-adds goes through scipy's loops."""
        return _spt is not None and self.device.type == "cpu" and work <= SCIPY_MAX_WORK

    def _am_matrices(
        self, dtype: th.dtype, k: int, forced: str | None = None
    ) -> tuple[th.Tensor, th.Tensor] | None:
        """Action-major ``(M (A * S, S), M^T (S, A * S))`` for passes over ``k`` columns, or
        None above ``AM_MAX_SA`` state-action pairs.

        Dense on small MDPs when a dense product is cheaper than the sparse one for ``k`` columns
        (dense costs about 0.1 ns per multiply-add, CSR about 2.5 us more per call plus 0.5 ns per
        stored entry and column; with scipy's loops about 0.5 us per call), else int32 CSR.
        """
        S, A = self.n_states, self.n_actions
        if S * A > AM_MAX_SA or forced == "state_major":
            return None
        dense = self.dense(dtype)
        if dense is not None and forced not in ("csr", "scipy"):
            nnz = self.nnz
            call = 500.0 if self._scipy_ok(nnz * k) else 2500.0
            if forced == "dense" or 0.1 * (S * A * S) * k <= call + 0.5 * nnz * k:

                def build_dense() -> tuple[th.Tensor, th.Tensor]:
                    Mam = dense.view(S, A, S).transpose(0, 1).reshape(A * S, S).contiguous()
                    return (Mam, Mam.T)

                return self._get(("dense_am", dtype), build_dense)

        def build_csr() -> tuple[th.Tensor, th.Tensor]:
            P, _PT = self.csr(dtype)
            perm = th.arange(S * A, device=self.device).view(S, A).T.reshape(-1)  # am -> sm row
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                rows = P.to_sparse_coo().coalesce()
            r, c = rows.indices()
            inv = th.empty_like(perm)
            inv[perm] = th.arange(S * A, device=self.device)
            ram = inv[r]
            idx_dtype = P.col_indices().dtype
            return (
                _csr_matrix(ram, c, rows.values(), (A * S, S), idx_dtype),
                _csr_matrix(c, ram, rows.values(), (S, A * S), idx_dtype),
            )

        return self._get(("csr_am", dtype), build_csr)

    # ------------------------------------------------------------------ public products
    def products(self, dtype: th.dtype, k: int) -> Products:
        """The action-major products for passes over ``k`` columns in ``dtype`` (cached)."""
        forced = LAYOUT_OVERRIDE
        ops = self._am_matrices(dtype, k, forced)
        if ops is None:
            _dense, P, PT = self._state_major(dtype)
            return self._get(
                ("products_sm", dtype),
                lambda: Products(self.n_states, self.n_actions, P, PT, state_major=True),
            )
        use_scipy = ops[0].is_sparse_csr and (
            (forced == "scipy" and _spt is not None and self.device.type == "cpu")
            or (forced is None and self._scipy_ok(self.nnz * k))
        )
        key = ("products", dtype, ops[0].is_sparse_csr, use_scipy)
        return self._get(
            key,
            lambda: Products(self.n_states, self.n_actions, ops[0], ops[1], use_scipy=use_scipy),
        )

    def expect_next(self, values: th.Tensor, dtype: th.dtype) -> th.Tensor:
        """``E_{s' ~ T(s, a)}[v(s')]`` for value vectors ``(..., S)``: ``(..., S, A)`` in ``dtype``.

        Differentiable with respect to ``values``.
        """
        lead = values.shape[:-1]
        S, A = self.n_states, self.n_actions
        dense, M, _ = self._state_major(dtype)
        v = values.reshape(-1, S)
        if v.dtype != dtype:
            v = v.to(dtype)
        if dense:
            return (v @ M.T).view(*lead, S, A)
        if v.shape[0] == 1:
            return (M @ v[0]).view(*lead, S, A)
        return (M @ v.T).T.reshape(*lead, S, A)

    def push_forward(self, sa_mass: th.Tensor, dtype: th.dtype) -> th.Tensor:
        """``d'(s') = sum_{s, a} m(s, a) T[s, a, s']`` for masses ``(..., S, A)``: ``(..., S)``."""
        lead = sa_mass.shape[:-2]
        S, A = self.n_states, self.n_actions
        dense, M, MT = self._state_major(dtype)
        flat = sa_mass.reshape(-1, S * A)
        if flat.dtype != dtype:
            flat = flat.to(dtype)
        if dense:
            return (flat @ M).view(*lead, S)
        if flat.shape[0] == 1:
            return (MT @ flat[0]).view(*lead, S)
        return (MT @ flat.T).T.reshape(*lead, S)

    def has_dense(self, dtype: th.dtype) -> bool:
        """Whether this operator uses the cached dense matrix (small MDPs)."""
        return self.dense(dtype) is not None

    # ------------------------------------------------------------------ workspaces
    def workspace(self, key: Hashable) -> Any:
        """A workspace kept by :meth:`keep_workspace` under ``key`` in this thread, or None."""
        return self._cache.get(("workspace", key, threading.get_ident()))

    def keep_workspace(self, key: Hashable, ws: Any) -> None:
        """Keep ``ws`` for the next pass with the same ``key`` in this thread."""
        self._cache[("workspace", key, threading.get_ident())] = ws


def _csr_matrix(
    rows: th.Tensor, cols: th.Tensor, vals: th.Tensor, shape: tuple[int, int], idx_dtype: th.dtype
) -> th.Tensor:
    """A CSR matrix from COO triplets (duplicates summed) with ``idx_dtype`` indices."""
    with warnings.catch_warnings():  # "CSR support is in beta" and friends
        warnings.simplefilter("ignore", UserWarning)
        csr = (
            th.sparse_coo_tensor(th.stack([rows, cols]), vals, shape, check_invariants=False)
            .coalesce()
            .to_sparse_csr()
        )
        return th.sparse_csr_tensor(
            csr.crow_indices().to(idx_dtype),
            csr.col_indices().to(idx_dtype),
            csr.values(),
            shape,
            check_invariants=False,
        )
