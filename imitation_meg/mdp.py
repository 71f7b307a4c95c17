"""Validated finite-horizon tabular MDPs with sparse (fixed-branching) transitions.

Conventions follow seals / imitation: ``T[s, a, s']``, decisions at ``t = 0 .. H-1``, a state
utility ``U (S,)`` received at every step (``Q_t(s, a) = U(s) + gamma * E[V_{t+1}(s')]``),
state-action utilities ``(S, A)`` and transition utilities ``(S, A, S)`` reduced to
``r(s, a) = E_{s'}[U(s, a, s')]``.

Transitions are always held in a fixed-branching sparse form: ``next_state (S, A, B)`` (int64) and
``prob (S, A, B)``, where ``B`` is the largest number of successors of any state-action pair and
padding entries have probability 0. A million-state MDP with a handful of successors per action
therefore never materialises an ``S x A x S`` array. Dense ``(S, A, S)`` input is accepted and
converted.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import torch as th

from imitation_meg._env_tables import read_env_tables
from imitation_meg._validation import as_tensor, check_finite

try:  # scipy's compiled CSR loops: a few microseconds less per call than torch's sparse kernels
    from scipy.sparse import _sparsetools as _spt
except ImportError:  # pragma: no cover - scipy is a dependency; torch's kernels are the fallback
    _spt = None

__all__ = ["TabularMDP"]

ROW_SUM_TOL = 1e-6
# Dense conversions above this many entries are refused (8 GiB in float64).
MAX_DENSE_ENTRIES = 1 << 30
# Below this many S * A * S entries the backup uses a cached dense matrix (one BLAS call).
DENSE_FAST_PATH_ENTRIES = 1 << 20
# Up to this many state-action pairs the internal passes use cached action-major operators.
AM_MAX_SA = 1 << 20
# CPU products with at most this many multiply-adds (stored entries x columns) use scipy's CSR
# loops, whose per-call cost is a few microseconds below torch's sparse kernels; above it the
# call cost no longer matters and torch's kernels are as fast or faster.
SCIPY_MAX_WORK = 1 << 17


@dataclasses.dataclass(frozen=True, eq=False)
class _Transitions:
    next_state: th.Tensor  # (S, A, B) int64
    prob: th.Tensor  # (S, A, B) float


class TabularMDP:
    """A finite-horizon tabular MDP held as torch tensors.

    Args:
        transition: dense ``T[s, a, s']`` of shape ``(S, A, S)``, or a pair
            ``(next_state, prob)`` of shape ``(S, A, B)`` each (fixed branching ``B``;
            zero-probability padding allowed). Numpy arrays or tensors.
        utility: the environment's utility: ``(S,)`` state utility, ``(S, A)``
            state-action utility or ``(S, A, S)`` transition utility. ``None`` means no
            utility is attached (every MEG call must then pass one).
        horizon: number of decisions ``H >= 1``.
        initial_state_dist: ``p0 (S,)`` summing to 1. ``None`` means state 0 with probability 1.
        discount: ``gamma`` in ``[0, 1]`` used by the soft Bellman backup.
        dtype: float dtype of every float tensor (float64 by default).
        device: torch device for every tensor.
        observation_matrix: optional ``(S, O)`` observation of each state, as seals'
            ``observation_matrix`` (used by adapters and observation-based utility models).
        name: a label for tables and error messages.
        metadata: free-form facts about where the MDP came from (grid shape, goal cells,
            terminal states); copied with the MDP.

    Raises:
        ValueError: on wrong shapes, NaN/inf, negative probabilities, rows not summing to 1
            (tolerance 1e-6), an initial distribution not summing to 1, a horizon below 1 or a
            discount outside ``[0, 1]``.
        TypeError: on non-numeric input or a non-integer horizon.
    """

    def __init__(
        self,
        transition: Any,
        utility: Any = None,
        horizon: int = 1,
        initial_state_dist: Any = None,
        discount: float = 1.0,
        *,
        dtype: th.dtype = th.float64,
        device: th.device | str | None = None,
        observation_matrix: Any = None,
        name: str = "TabularMDP",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if dtype not in (th.float64, th.float32):
            raise TypeError(f"dtype must be th.float64 or th.float32, got {dtype}.")
        device = th.device(device) if device is not None else th.device("cpu")
        self.dtype = dtype
        self.device = device
        self.name = name
        self.metadata: dict[str, Any] = dict(metadata or {})

        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)):
            raise TypeError(
                f"horizon must be an integer number of decisions, got {horizon!r} "
                f"({type(horizon).__name__})."
            )
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}; pass the number of decisions.")
        self.horizon = int(horizon)

        if isinstance(discount, bool) or not isinstance(discount, (int, float, np.floating)):
            raise TypeError(f"discount must be a float in [0, 1], got {discount!r}.")
        if not (0.0 <= float(discount) <= 1.0) or math.isnan(float(discount)):
            raise ValueError(f"discount must lie in [0, 1], got {discount}.")
        self.discount = float(discount)

        self._trans = self._build_transitions(transition)
        S, A, _ = self._trans.next_state.shape
        self.n_states = S
        self.n_actions = A

        if initial_state_dist is None:
            p0 = th.zeros(S, dtype=dtype, device=device)
            p0[0] = 1.0
        else:
            p0 = as_tensor(
                initial_state_dist, name="initial_state_dist", dtype=dtype, device=device
            )
            if p0.shape != (S,):
                raise ValueError(
                    f"initial_state_dist must have shape ({S},) to match the {S} states, "
                    f"got {tuple(p0.shape)}."
                )
            check_finite(p0, "initial_state_dist")
            if bool((p0 < 0).any()):
                raise ValueError(
                    "initial_state_dist has negative entries at states "
                    f"{(p0 < 0).nonzero().flatten()[:5].tolist()}; probabilities must be >= 0."
                )
            total = float(p0.sum())
            if abs(total - 1.0) > ROW_SUM_TOL:
                raise ValueError(
                    f"initial_state_dist sums to {total:.8g}, not 1 (tolerance {ROW_SUM_TOL}); "
                    "normalise it (p0 / p0.sum())."
                )
        self.initial_state_dist = p0

        self.utility = None if utility is None else self.validate_utility(utility, name="utility")

        if observation_matrix is None:
            self.observation_matrix = None
        else:
            obs = as_tensor(observation_matrix, name="observation_matrix", device=device)
            if obs.ndim < 1 or obs.shape[0] != S:
                raise ValueError(
                    f"observation_matrix must have one row per state ({S}), got shape "
                    f"{tuple(obs.shape)}."
                )
            self.observation_matrix = obs

    # ------------------------------------------------------------------ construction helpers
    def _build_transitions(self, transition: Any) -> _Transitions:
        dtype, device = self.dtype, self.device
        if isinstance(transition, (tuple, list)) and len(transition) == 2:
            ns = as_tensor(transition[0], name="transition next_state", device=device)
            pr = as_tensor(transition[1], name="transition prob", dtype=dtype, device=device)
            if ns.is_floating_point() and not bool((ns == ns.round()).all()):
                raise TypeError("transition next_state must hold integer state indices.")
            ns = ns.to(th.int64)
            if ns.ndim != 3 or pr.shape != ns.shape:
                raise ValueError(
                    "sparse transition must be a pair (next_state, prob) of equal shape "
                    f"(S, A, B); got {tuple(ns.shape)} and {tuple(pr.shape)}."
                )
            S = ns.shape[0]
            check_finite(pr, "transition prob")
            if bool(((ns < 0) | (ns >= S)).any()):
                outside = ns[(ns < 0) | (ns >= S)][:5].tolist()
                raise ValueError(
                    f"transition next_state has indices outside [0, {S}): {outside}; "
                    "every successor must be a valid state index."
                )
        else:
            T = as_tensor(transition, name="transition", dtype=dtype, device=device)
            if T.ndim != 3 or T.shape[0] != T.shape[2]:
                raise ValueError(
                    f"dense transition must have shape (S, A, S), got {tuple(T.shape)}; "
                    "or pass a pair (next_state, prob) of shape (S, A, B)."
                )
            check_finite(T, "transition")
            ns, pr = self.dense_to_sparse(T)
        if bool((pr < 0).any()):
            neg = (pr < 0).nonzero()[:5].tolist()
            raise ValueError(
                f"transition has negative probabilities at (s, a, k) {neg}; probabilities must be >= 0."
            )
        sums = pr.sum(-1)
        bad = (sums - 1).abs() > ROW_SUM_TOL
        if bool(bad.any()):
            idx = bad.nonzero()[:5].tolist()
            vals = [float(sums[s, a]) for s, a in idx]
            raise ValueError(
                f"transition rows (s, a) {idx} sum to {vals}, not 1 (tolerance {ROW_SUM_TOL}); "
                "each T[s, a, :] must be a probability distribution."
            )
        if ns.shape[0] == 0 or ns.shape[1] == 0:
            raise ValueError(
                f"the MDP needs at least one state and one action, got {tuple(ns.shape[:2])}."
            )
        return _Transitions(next_state=ns.contiguous(), prob=pr.contiguous())

    @staticmethod
    def dense_to_sparse(T: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Convert a dense ``(S, A, S)`` transition tensor to fixed-branching form.

        Returns:
            ``(next_state, prob)`` each ``(S, A, B)`` with ``B`` the largest number of
            successors; padding points at state 0 with probability 0.
        """
        nz = T != 0
        B = max(int(nz.sum(-1).max()), 1)
        # Sort so that non-zero entries come first, keep the first B.
        order = th.argsort(nz.to(th.int8), dim=-1, descending=True, stable=True)[..., :B]
        prob = th.gather(T, -1, order)
        next_state = th.where(prob != 0, order, th.zeros_like(order))
        return next_state, prob

    def validate_utility(self, utility: Any, *, name: str = "utility") -> th.Tensor:
        """Check a utility's shape and values and return it as a tensor of this MDP's dtype.

        Args:
            utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)`` array or tensor.
            name: argument name for messages.

        Raises:
            ValueError: wrong shape or non-finite values.
            TypeError: non-numeric input.
        """
        u = as_tensor(utility, name=name, dtype=self.dtype, device=self.device)
        S, A = self.n_states, self.n_actions
        if tuple(u.shape) not in ((S,), (S, A), (S, A, S)):
            raise ValueError(
                f"{name} must have shape ({S},), ({S}, {A}) or ({S}, {A}, {S}) for this MDP, "
                f"got {tuple(u.shape)}."
            )
        check_finite(u, name)
        return u

    # ------------------------------------------------------------------ properties
    @property
    def next_state(self) -> th.Tensor:
        """Successor indices ``(S, A, B)`` (int64)."""
        return self._trans.next_state

    @property
    def prob(self) -> th.Tensor:
        """Successor probabilities ``(S, A, B)``."""
        return self._trans.prob

    @property
    def branching(self) -> int:
        """The fixed branching factor ``B``."""
        return int(self._trans.next_state.shape[-1])

    def dense_transition(self) -> th.Tensor:
        """Materialise ``T[s, a, s']`` ``(S, A, S)``; refused for very large MDPs.

        Raises:
            ValueError: if ``S * A * S`` exceeds 2**30 entries.
        """
        S, A = self.n_states, self.n_actions
        if S * A * S > MAX_DENSE_ENTRIES:
            raise ValueError(
                f"a dense transition tensor for S={S}, A={A} would hold {S * A * S:.3g} entries; "
                "use the sparse next_state / prob form instead."
            )
        T = th.zeros(S, A, S, dtype=self.dtype, device=self.device)
        T.scatter_add_(-1, self.next_state, self.prob)
        return T

    def reward_sa(self, utility: Any = None) -> th.Tensor:
        """Reduce a utility to the per-step state-action reward ``r(s, a)`` ``(S, A)``.

        ``(S,)`` gives ``r(s, a) = U(s)``; ``(S, A, S)`` gives ``sum_s' T[s, a, s'] U(s, a, s')``.
        Differentiable with respect to ``utility``.

        Args:
            utility: a utility of shape ``(S,)``, ``(S, A)`` or ``(S, A, S)``; ``None`` uses the
                MDP's own.

        Raises:
            ValueError: if ``utility`` is None and the MDP has none, or on a bad shape.
        """
        if utility is None:
            if self.utility is None:
                raise ValueError(
                    f"{self.name} has no utility attached; pass utility=... (shape (S,), (S, A) "
                    "or (S, A, S))."
                )
            u = self.utility
        elif isinstance(utility, th.Tensor) and utility.requires_grad:
            # Keep the autograd graph: check the detached copy, use the original.
            self.validate_utility(utility.detach(), name="utility")
            u = utility.to(device=self.device, dtype=self.dtype)
        else:
            u = self.validate_utility(utility)
        S, A = self.n_states, self.n_actions
        if u.ndim == 1:
            return u.unsqueeze(1).expand(S, A)
        if u.ndim == 2:
            return u
        sa = th.arange(S, device=self.device).view(S, 1, 1) * A + th.arange(
            A, device=self.device
        ).view(1, A, 1)
        flat = u.reshape(S * A, S)
        vals = flat[sa.expand_as(self.next_state).reshape(-1), self.next_state.reshape(-1)]
        return (vals.view_as(self.prob) * self.prob).sum(-1)

    # ------------------------------------------------------------------ dynamics
    def _cache(self) -> dict[Any, Any]:
        cache = self.__dict__.get("_op_cache")
        if cache is None:
            cache = {}
            self.__dict__["_op_cache"] = cache
        return cache

    def _dense_flat(self, dtype: th.dtype | None = None) -> th.Tensor | None:
        """Cached ``T`` as ``(S * A, S)`` for small MDPs (``S * A * S <= 2**20``), else None."""
        S, A = self.n_states, self.n_actions
        if S * A * S > DENSE_FAST_PATH_ENTRIES:
            return None
        dtype = dtype or self.dtype
        cache = self._cache()
        key = ("dense", dtype, self.device)
        if key not in cache:
            cache[key] = self.dense_transition().reshape(S * A, S).to(dtype)
        return cache[key]

    def _csr(self, dtype: th.dtype | None = None) -> tuple[th.Tensor, th.Tensor]:
        """Cached sparse CSR matrices ``P (S * A, S)`` and ``P^T (S, S * A)`` of the transitions.

        Duplicate successors are summed and zero-probability padding is dropped; indices are
        int32 when they fit (half the index traffic of int64).
        """
        dtype = dtype or self.dtype
        cache = self._cache()
        key = ("csr", dtype, self.device)
        if key not in cache:
            S, A, B = self.n_states, self.n_actions, self.branching
            keep = self.prob.reshape(-1) != 0
            rows = th.arange(S * A, device=self.device).repeat_interleave(B)[keep]
            cols = self.next_state.reshape(-1)[keep]
            vals = self.prob.reshape(-1)[keep].to(dtype)
            idx_dtype = th.int32 if max(S * A, rows.numel()) < 2**31 - 1 else th.int64
            cache[key] = (
                _csr_matrix(rows, cols, vals, (S * A, S), idx_dtype),
                _csr_matrix(cols, rows, vals, (S, S * A), idx_dtype),
            )
        return cache[key]

    def _am_operators(self, dtype: th.dtype, k: int) -> tuple[th.Tensor, th.Tensor] | None:
        """Action-major operators ``(M (A * S, S), M^T (S, A * S))`` (row ``a * S + s``) for
        passes over ``k`` value vectors, or None above ``AM_MAX_SA`` state-action pairs.

        The internal passes keep arrays as ``(..., A, S)`` so that sums and maxima over the few
        actions and broadcasts of state values run over contiguous runs of states. The operator
        is the dense matrix on small MDPs when a dense product is cheaper than the sparse one for
        ``k`` columns (dense costs about 0.1 ns per multiply-add, CSR about 2.5 us more per call
        plus 0.5 ns per stored entry and column; with scipy's loops of :class:`AMProduct`,
        used wherever they apply, about 0.5 us per call), else an int32 CSR matrix. Both are
        cached.
        """
        S, A = self.n_states, self.n_actions
        if S * A > AM_MAX_SA:
            return None
        cache = self._cache()
        dense = self._dense_flat(dtype)
        if dense is not None:
            nnz = self._am_nnz()
            call = 500.0 if self._scipy_ok(nnz * k) else 2500.0
            if 0.1 * (S * A * S) * k <= call + 0.5 * nnz * k:
                key = ("dense_am", dtype, self.device)
                if key not in cache:
                    Mam = dense.view(S, A, S).transpose(0, 1).reshape(A * S, S).contiguous()
                    cache[key] = (Mam, Mam.T)
                return cache[key]
        key = ("csr_am", dtype, self.device)
        if key not in cache:
            P, _PT = self._csr(dtype)
            perm = th.arange(S * A, device=self.device).view(S, A).T.reshape(-1)  # am row -> sm row
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                rows = P.to_sparse_coo().coalesce()
            r, c = rows.indices()
            inv = th.empty_like(perm)
            inv[perm] = th.arange(S * A, device=self.device)
            ram = inv[r]
            idx_dtype = P.col_indices().dtype
            cache[key] = (
                _csr_matrix(ram, c, rows.values(), (A * S, S), idx_dtype),
                _csr_matrix(c, ram, rows.values(), (S, A * S), idx_dtype),
            )
        return cache[key]

    def _am_product(self, dtype: th.dtype, k: int) -> AMProduct | None:
        """The backup / push-forward products of :meth:`_am_operators` for ``k`` columns
        (scipy's CSR loops for small sparse CPU operators), or None above ``AM_MAX_SA``."""
        ops = self._am_operators(dtype, k)
        if ops is None:
            return None
        cache = self._cache()
        use_scipy = ops[0].is_sparse_csr and self._scipy_ok(self._am_nnz() * k)
        key = ("am_product", dtype, self.device, ops[0].is_sparse_csr, use_scipy)
        if key not in cache:
            cache[key] = AMProduct(ops[0], ops[1], use_scipy=use_scipy)
        return cache[key]

    def _scipy_ok(self, work: int) -> bool:
        """Whether a CSR product of ``work`` multiply-adds goes through scipy's loops (CPU, small)."""
        return _spt is not None and self.device.type == "cpu" and work <= SCIPY_MAX_WORK

    def _am_nnz(self) -> int:
        """Number of non-zero transition entries (cached)."""
        cache = self._cache()
        if "nnz" not in cache:
            cache["nnz"] = int((self.prob != 0).sum())
        return cache["nnz"]

    def _operators(self, dtype: th.dtype) -> tuple[bool, th.Tensor, th.Tensor]:
        """``(is_dense, M, M^T)`` for the backup ``(S * A, S)`` and push-forward ``(S, S * A)``."""
        cache = self._cache()
        key = ("ops", dtype, self.device)
        ops = cache.get(key)
        if ops is None:
            dense = self._dense_flat(dtype)
            if dense is not None:
                ops = (True, dense, dense.T)
            else:
                P, PT = self._csr(dtype)
                ops = (False, P, PT)
            cache[key] = ops
        return ops

    def _op_dtype(self, x: th.Tensor) -> th.dtype:
        if x.dtype == self.dtype:
            return x.dtype
        dt = th.promote_types(x.dtype, self.dtype)
        return dt if dt in (th.float32, th.float64) else self.dtype

    def expect_next(self, values: th.Tensor) -> th.Tensor:
        """Expected next-state value ``E_{s' ~ T(s, a)}[v(s')]`` for a batch of value vectors.

        Small MDPs use one dense matrix product with a cached ``(S * A, S)`` transition matrix;
        larger ones a sparse CSR product (``O(S * A * B)`` work and memory). Both run on any
        device and are differentiable with respect to ``values``.

        Args:
            values: ``(..., S)`` values of the next step.

        Returns:
            ``(..., S, A)`` in the promoted dtype of ``values`` and the MDP.
        """
        lead = values.shape[:-1]
        S, A = self.n_states, self.n_actions
        dt = self._op_dtype(values)
        dense, M, _ = self._operators(dt)
        v = values.reshape(-1, S)
        if v.dtype != dt:
            v = v.to(dt)
        if dense:
            return (v @ M.T).view(*lead, S, A)
        if v.shape[0] == 1:
            return (M @ v[0]).view(*lead, S, A)
        return (M @ v.T).T.reshape(*lead, S, A)

    def push_forward(self, sa_mass: th.Tensor) -> th.Tensor:
        """State distribution after one step from a state-action mass ``(..., S, A)``.

        Returns:
            ``(..., S)``: ``d'(s') = sum_{s, a} m(s, a) T[s, a, s']``.
        """
        lead = sa_mass.shape[:-2]
        S, A = self.n_states, self.n_actions
        dt = self._op_dtype(sa_mass)
        dense, M, MT = self._operators(dt)
        flat = sa_mass.reshape(-1, S * A)
        if flat.dtype != dt:
            flat = flat.to(dt)
        if dense:
            return (flat @ M).view(*lead, S)
        if flat.shape[0] == 1:
            return (MT @ flat[0]).view(*lead, S)
        return (MT @ flat.T).T.reshape(*lead, S)

    # ------------------------------------------------------------------ conversions
    def to(
        self, device: th.device | str | None = None, dtype: th.dtype | None = None
    ) -> TabularMDP:
        """A copy of this MDP on another device and/or float dtype."""
        new = object.__new__(TabularMDP)
        new.__dict__.update(self.__dict__)
        new.metadata = dict(self.metadata)
        dtype = dtype or self.dtype
        device = th.device(device) if device is not None else self.device
        if dtype not in (th.float64, th.float32):
            raise TypeError(f"dtype must be th.float64 or th.float32, got {dtype}.")
        # Operator caches depend only on the transitions: share them on the same device.
        if device != self.device:
            new.__dict__["_op_cache"] = {}
        else:
            new.__dict__["_op_cache"] = self._cache()
        new.dtype, new.device = dtype, device
        new._trans = _Transitions(
            next_state=self.next_state.to(device), prob=self.prob.to(device=device, dtype=dtype)
        )
        new.initial_state_dist = self.initial_state_dist.to(device=device, dtype=dtype)
        new.utility = None if self.utility is None else self.utility.to(device=device, dtype=dtype)
        if self.observation_matrix is not None:
            new.observation_matrix = self.observation_matrix.to(device)
        return new

    def with_utility(self, utility: Any) -> TabularMDP:
        """A copy of this MDP with another utility attached (transitions shared)."""
        new = self.to()
        new.utility = None if utility is None else self.validate_utility(utility)
        return new

    def with_horizon(self, horizon: int) -> TabularMDP:
        """A copy of this MDP with another horizon (transitions shared)."""
        new = TabularMDP(
            (self.next_state, self.prob),
            self.utility,
            horizon,
            self.initial_state_dist,
            self.discount,
            dtype=self.dtype,
            device=self.device,
            observation_matrix=self.observation_matrix,
            name=self.name,
            metadata=self.metadata,
        )
        new.__dict__["_op_cache"] = self._cache()
        return new

    def __repr__(self) -> str:
        u = None if self.utility is None else tuple(self.utility.shape)
        return (
            f"TabularMDP(name={self.name!r}, S={self.n_states}, A={self.n_actions}, "
            f"B={self.branching}, horizon={self.horizon}, discount={self.discount}, utility={u}, "
            f"dtype={self.dtype}, device={self.device})"
        )

    # ------------------------------------------------------------------ environments
    @classmethod
    def from_env(
        cls,
        env_or_id: Any,
        *,
        horizon: int | None = None,
        dtype: th.dtype = th.float64,
        device: th.device | str | None = None,
        **make_kwargs: Any,
    ) -> TabularMDP:
        """Build a tabular MDP from a seals tabular environment or a gymnasium toy-text one.

        seals environments (``TabularModelPOMDP`` and relatives) are read through
        ``env.unwrapped``: ``transition_matrix``, ``reward_matrix`` (state utility),
        ``initial_state_dist``, ``observation_matrix``. Gymnasium toy-text environments exposing
        ``P`` (FrozenLake, CliffWalking, Taxi) are converted with the expected reward
        ``r(s, a)`` as utility; states entered on a terminating transition become absorbing
        with no further utility.

        Args:
            env_or_id: an environment instance or a registered id (``"seals/CliffWorld7x4-v0"``,
                ``"FrozenLake-v1"``); ids are built with ``gymnasium.make(id, **make_kwargs)``.
            horizon: number of decisions; default the environment's ``horizon``, else
                ``env.spec.max_episode_steps``.
            dtype: float dtype of the MDP.
            device: torch device of the MDP.
            **make_kwargs: forwarded to ``gymnasium.make`` when an id is given.

        Raises:
            ValueError: non-tabular environment, missing horizon.
            TypeError: non-Discrete action space, or an argument of the wrong kind.
        """
        t = read_env_tables(env_or_id, horizon=horizon, **make_kwargs)
        return cls(
            t.transition,
            t.utility,
            t.horizon,
            t.initial_state_dist,
            1.0,
            dtype=dtype,
            device=device,
            observation_matrix=t.observation_matrix,
            name=t.name,
            metadata=t.metadata,
        )


class AMProduct:
    """Products with one MDP's action-major operators ``M (A * S, S)`` and ``M^T (S, A * S)``.

    ``backup(out, x, c, alpha)``: ``out = c + alpha * M @ x``; ``push(out, x)``: ``out = M^T @ x``,
    for ``x`` of shape ``(n,)`` or ``(n, k)``. Dense operators use one BLAS call; small sparse
    operators on CPU (``uses_numpy``) run scipy's compiled CSR loops on numpy views of the
    tensors (no copies; the scaled values ``alpha * M`` are cached per ``alpha``), and
    :meth:`backup_np` takes numpy views made once by a caller that loops; others use torch's
    sparse kernels (any device).
    """

    def __init__(self, M: th.Tensor, MT: th.Tensor, *, use_scipy: bool = False) -> None:
        self.M, self.MT = M, MT
        self._np: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
        if use_scipy:
            self._np = tuple(  # type: ignore[assignment]
                (m.crow_indices().numpy(), m.col_indices().numpy(), m.values().numpy(), *m.shape)
                for m in (M, MT)
            )
        self._scaled: dict[tuple[int, float], np.ndarray] = {}

    @property
    def uses_numpy(self) -> bool:
        """Whether the products run through scipy's loops (CPU, small sparse operators)."""
        return self._np is not None

    def backup(self, out: th.Tensor, x: th.Tensor, c: th.Tensor, alpha: float = 1.0) -> None:
        """``out = c + alpha * M @ x``."""
        if self._np is not None and out.is_contiguous():
            self._scipy(0, out.numpy(), x.numpy(), c.numpy(), alpha)
        elif out.ndim == 1:
            th.addmv(c, self.M, x, alpha=alpha, out=out)
        else:
            th.addmm(c, self.M, x, alpha=alpha, out=out)

    def backup_np(self, out: np.ndarray, x: np.ndarray, c: np.ndarray, data: np.ndarray) -> None:
        """:meth:`backup` on flat numpy views made once by a caller that loops (``uses_numpy``
        only): ``out (n * k,)`` (a view of a C-contiguous ``(n, k)`` block) ``= c + M_alpha @ x``
        with ``data = scaled(alpha)``."""
        np.copyto(out, c)
        self._accumulate(0, out, x, data)

    def push_np(self, out: np.ndarray, x: np.ndarray) -> None:
        """:meth:`push` on flat numpy views (``uses_numpy`` only): ``out (S * k,) = M^T @ x``."""
        out.fill(0.0)
        self._accumulate(1, out, x, self.scaled(1.0, 1))

    def scaled(self, alpha: float, which: int = 0) -> np.ndarray:
        """The stored values of ``alpha * M`` (``which=1``: of ``M^T``), cached per ``alpha``."""
        assert self._np is not None
        data = self._np[which][2]
        if alpha == 1.0:
            return data
        scaled = self._scaled.get((which, alpha))
        if scaled is None:
            scaled = self._scaled[(which, alpha)] = data * alpha
        return scaled

    def push(self, out: th.Tensor, x: th.Tensor) -> None:
        """``out = M^T @ x``."""
        if self._np is not None and out.is_contiguous():
            self._scipy(1, out.numpy(), x.numpy(), None, 1.0)
        elif out.ndim == 1:
            th.mv(self.MT, x, out=out)
        else:
            th.mm(self.MT, x, out=out)

    def _scipy(
        self, which: int, y: np.ndarray, x: np.ndarray, c: np.ndarray | None, alpha: float
    ) -> None:
        """``y = c + alpha * (M or M^T) @ x`` (``c=None`` for zero) on C-contiguous numpy ``y``."""
        assert y.flags.c_contiguous
        if c is None:
            y.fill(0.0)
        else:
            np.copyto(y, c)
        self._accumulate(which, y.reshape(-1), x.reshape(-1), self.scaled(alpha, which))

    def _accumulate(self, which: int, ys: np.ndarray, xs: np.ndarray, data: np.ndarray) -> None:
        """``ys += (M or M^T with values data) @ xs`` on flat row-major ``(n, k)`` / ``(m, k)``
        views, through scipy's ``csr_matvec`` (``k = 1``) or ``csr_matvecs``."""
        assert self._np is not None and _spt is not None
        indptr, indices, _, n_row, n_col = self._np[which]
        k = ys.shape[0] // n_row
        if k == 1:
            _spt.csr_matvec(n_row, n_col, indptr, indices, data, xs, ys)
        else:
            _spt.csr_matvecs(n_row, n_col, k, indptr, indices, data, xs, ys)


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
