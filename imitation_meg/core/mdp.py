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

from typing import Any

import torch as th

from imitation_meg._validation import as_tensor, check_finite
from imitation_meg.core.env_tables import read_env_tables
from imitation_meg.core.kernels.operators import TransitionOperator, promoted_dtype
from imitation_meg.core.mdp_inputs import (
    DISCOUNT_MAX,
    Transitions,
    check_discount,
    check_horizon,
    dense_to_sparse,
    initial_distribution,
    observations,
    transitions,
)
from imitation_meg.type_aliases import ArrayLike, TransitionLike, UtilityLike

__all__ = ["DISCOUNT_MAX", "TabularMDP"]

# Dense conversions above this many entries are refused (8 GiB in float64).
MAX_DENSE_ENTRIES = 1 << 30


class TabularMDP:
    """A tabular MDP held as torch tensors: finite horizon, or discounted infinite horizon.

    Args:
        transition: dense ``T[s, a, s']`` of shape ``(S, A, S)``, or a pair
            ``(next_state, prob)`` of shape ``(S, A, B)`` each (fixed branching ``B``;
            zero-probability padding allowed). Numpy arrays or tensors.
        utility: the environment's utility: ``(S,)`` state utility, ``(S, A)``
            state-action utility or ``(S, A, S)`` transition utility. ``None`` means no
            utility is attached (every MEG call must then pass one).
        horizon: number of decisions ``H >= 1``; ``None`` for the discounted infinite-horizon
            setting (stationary policies, the log-likelihood weighted by the discounted
            occupancy; needs ``discount <= DISCOUNT_MAX = 1 - 1e-8``, see
            :mod:`imitation_meg.core.discounted`).
        initial_state_dist: ``p0 (S,)`` summing to 1. ``None`` means state 0 with probability 1.
        discount: ``gamma`` in ``[0, 1]`` used by the soft Bellman backup (with a finite
            horizon it discounts the utility only; every step's log-likelihood counts fully).
        dtype: float dtype of every float tensor (float64 by default).
        device: torch device for every tensor.
        observation_matrix: optional ``(S, O)`` observation of each state, as seals'
            ``observation_matrix`` (used by adapters and observation-based utility models).
        name: a label for tables and error messages.
        metadata: free-form facts about where the MDP came from (grid shape, goal cells,
            terminal states); copied with the MDP.

    Raises:
        ValueError: on wrong shapes, NaN/inf, negative probabilities, rows not summing to 1
            (tolerance 1e-6), an initial distribution not summing to 1, a horizon below 1, a
            discount outside ``[0, 1]``, or an infinite horizon without a discount of at most
            :data:`DISCOUNT_MAX`.
        TypeError: on non-numeric input or a non-integer horizon.
    """

    def __init__(
        self,
        transition: TransitionLike,
        utility: UtilityLike | None = None,
        horizon: int | None = 1,
        initial_state_dist: ArrayLike | None = None,
        discount: float = 1.0,
        *,
        dtype: th.dtype = th.float64,
        device: th.device | str | None = None,
        observation_matrix: ArrayLike | None = None,
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

        self.horizon: int | None = check_horizon(horizon)
        self.discount = check_discount(discount, self.horizon)

        self._trans = transitions(transition, dtype=dtype, device=device)
        self._operator = TransitionOperator(self._trans.next_state, self._trans.prob)
        S, A, _ = self._trans.next_state.shape
        self.n_states = S
        self.n_actions = A

        self.initial_state_dist = initial_distribution(
            initial_state_dist, S, dtype=dtype, device=device
        )

        self.utility = None if utility is None else self.validate_utility(utility, name="utility")

        self.observation_matrix = observations(observation_matrix, S, device=device)

    # ------------------------------------------------------------------ construction helpers
    @staticmethod
    def dense_to_sparse(T: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Convert a dense ``(S, A, S)`` transition tensor to fixed-branching form.

        Returns:
            ``(next_state, prob)`` each ``(S, A, B)`` with ``B`` the largest number of
            successors; padding points at state 0 with probability 0.
        """
        return dense_to_sparse(T)

    def validate_utility(self, utility: UtilityLike, *, name: str = "utility") -> th.Tensor:
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

    def reward_sa(self, utility: UtilityLike | None = None) -> th.Tensor:
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
    @property
    def operator(self) -> TransitionOperator:
        """The transition operator with its cached fast forms (dense / CSR, action-major,
        scipy loops, workspaces), shared by copies of this MDP on the same device."""
        return self._operator

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
        return self._operator.expect_next(values, promoted_dtype(values.dtype, self.dtype))

    def push_forward(self, sa_mass: th.Tensor) -> th.Tensor:
        """State distribution after one step from a state-action mass ``(..., S, A)``.

        Returns:
            ``(..., S)``: ``d'(s') = sum_{s, a} m(s, a) T[s, a, s']``.
        """
        return self._operator.push_forward(sa_mass, promoted_dtype(sa_mass.dtype, self.dtype))

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
        new.dtype, new.device = dtype, device
        new._trans = Transitions(
            next_state=self.next_state.to(device), prob=self.prob.to(device=device, dtype=dtype)
        )
        # The operator and its caches depend only on the transitions: shared on the same device.
        if device != self.device:
            new._operator = TransitionOperator(new._trans.next_state, self.prob.to(device))
        new.initial_state_dist = self.initial_state_dist.to(device=device, dtype=dtype)
        new.utility = None if self.utility is None else self.utility.to(device=device, dtype=dtype)
        if self.observation_matrix is not None:
            new.observation_matrix = self.observation_matrix.to(device)
        return new

    def with_utility(self, utility: UtilityLike) -> TabularMDP:
        """A copy of this MDP with another utility attached (transitions shared)."""
        new = self.to()
        new.utility = None if utility is None else self.validate_utility(utility)
        return new

    @property
    def steps(self) -> int:
        """The number of decisions ``H`` of a finite-horizon MDP.

        Raises:
            ValueError: for a discounted infinite-horizon MDP (``horizon=None``), which has no
                last step; the finite-horizon computations that read ``steps`` do not apply to
                it (``meg``, ``meg_unknown``, ``meg_target``, the policies and
                :mod:`imitation_meg.core.discounted` do).
        """
        if self.horizon is None:
            raise ValueError(
                f"{self.name} is a discounted infinite-horizon MDP (horizon=None, discount "
                f"{self.discount}); this computation needs a finite horizon: use "
                "mdp.with_horizon(H) for a finite-horizon copy, or the functions that support "
                "the discounted setting (meg, meg_unknown, meg_target, policies)."
            )
        return self.horizon

    @property
    def infinite_horizon(self) -> bool:
        """Whether this is a discounted infinite-horizon MDP (``horizon is None``)."""
        return self.horizon is None

    def with_horizon(self, horizon: int | None, discount: float | None = None) -> TabularMDP:
        """A copy of this MDP with another horizon (``None``: infinite, which needs a discount
        below 1) and optionally another discount (transitions shared)."""
        new = TabularMDP(
            (self.next_state, self.prob),
            self.utility,
            horizon,
            self.initial_state_dist,
            self.discount if discount is None else discount,
            dtype=self.dtype,
            device=self.device,
            observation_matrix=self.observation_matrix,
            # Names made by the builders carry the horizon ("...(H=30, ...)").
            name=self.name.replace(f"H={self.horizon}", f"H={horizon or 'inf'}"),
            metadata=self.metadata,
        )
        new._operator = self._operator
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
