"""Finite-state MDPs whose actions fill a bounded box: the exact continuous-action reference.

A :class:`ContinuousMDP` has ``S`` states, an action box ``[low, high]`` of ``d`` dimensions, a
horizon ``H`` and an initial distribution ``p0 (S,)``. Its transitions and utility are
functions of the state and the action, evaluated at whatever actions a quadrature rule asks for:

- ``transition(states (M,), actions (M, d)) -> (M, S)``: the law of the next state;
- ``utility(states (M,), actions (M, d)) -> (M,)``: the utility ``r(s, a)`` received at each
  step, or a state utility ``U (S,)`` (``r(s, a) = U(s)``, the discrete code's convention).

Conventions are the tabular ones (finite horizon, no discount,
``Q_t(s, a) = r(s, a) + E_{s' ~ T(s, a)}[V_{t+1}(s')]``, ``V_H = 0``); for integrals over the
box to converge fast, the functions should be smooth (analytic) in the action, as
:class:`SmoothTransition` and :class:`QuadraticUtility` are.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch as th

from imitation_meg._validation import as_tensor
from imitation_meg.type_aliases import ArrayLike

__all__ = [
    "BoxUtility",
    "ContinuousMDP",
    "QuadraticUtility",
    "SmoothTransition",
    "StateUtility",
    "action_features",
]

#: Tolerance on the row sums of transition laws.
ROW_SUM_TOL = 1e-9

Fn = Callable[[th.Tensor, th.Tensor], th.Tensor]
#: A utility on a continuous-action MDP: a callable ``(states (M,), actions (M, d)) -> (M,)``
#: or a state utility ``U (S,)``.
BoxUtility = Fn | ArrayLike


def numeric(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as a float64 array; complex, object, string and ragged values are a ``TypeError``
    naming ``name`` (never cast)."""
    return as_tensor(x, name=name, dtype=th.float64).cpu().numpy()


def action_features(a: th.Tensor) -> th.Tensor:
    """Smooth features of normalised actions ``a (M, d)`` in ``[-1, 1]``: ``(M, 2d)`` the
    coordinates and their squares (with ``d = 2`` also the product, ``(M, 5)``)."""
    feats = [a, a * a]
    if a.shape[1] == 2:
        feats.append((a[:, 0] * a[:, 1]).unsqueeze(1))
    return th.cat(feats, dim=1)


def _normalise(a: th.Tensor, low: th.Tensor, high: th.Tensor) -> th.Tensor:
    return 2.0 * (a - low) / (high - low) - 1.0


class SmoothTransition:
    """``T(s' | s, a) = softmax_s'(W0[s, s'] + sum_f W[s, s', f] phi_f(a))`` with ``phi`` the
    :func:`action_features` of the action normalised to ``[-1, 1]``: positive, and analytic in
    the action.

    Args:
        W0: ``(S, S)`` base logits.
        W: ``(S, S, F)`` action slopes (``F = 2d``, ``5`` for ``d = 2``).
        low, high: ``(d,)`` the box.
    """

    def __init__(self, W0: ArrayLike, W: ArrayLike, low: ArrayLike, high: ArrayLike) -> None:
        self.W0 = th.as_tensor(np.asarray(W0), dtype=th.float64)
        self.W = th.as_tensor(np.asarray(W), dtype=th.float64)
        self.low = th.as_tensor(np.asarray(low), dtype=th.float64).reshape(-1)
        self.high = th.as_tensor(np.asarray(high), dtype=th.float64).reshape(-1)

    def __call__(self, states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        phi = action_features(_normalise(actions, self.low, self.high))  # (M, F)
        logits = self.W0[states] + th.einsum("muf,mf->mu", self.W[states], phi)
        return th.softmax(logits, dim=-1)

    def one(self, s: int, a: np.ndarray) -> np.ndarray:
        """``(S,)`` the law at one state and action ``(d,)`` (numpy; for stepping an env)."""
        if not hasattr(self, "_np"):
            self._np = (self.W0.numpy(), self.W.numpy(), self.low.numpy(), self.high.numpy())
        W0, W, lo, hi = self._np
        x = 2.0 * (a - lo) / (hi - lo) - 1.0
        phi = np.concatenate([x, x * x, [x[0] * x[1]]] if x.size == 2 else [x, x * x])
        z = W0[s] + W[s] @ phi
        z = np.exp(z - z.max())
        return z / z.sum()


class QuadraticUtility:
    """``r(s, a) = c[s] + g[s] . x - sum_k h[s, k] (x_k - m[s, k])^2`` with ``x`` the action
    normalised to ``[-1, 1]``.

    Args:
        c: ``(S,)``; g, h, m: ``(S, d)``; low, high: ``(d,)``.
    """

    def __init__(
        self,
        c: ArrayLike,
        g: ArrayLike,
        h: ArrayLike,
        m: ArrayLike,
        low: ArrayLike,
        high: ArrayLike,
    ) -> None:
        f64 = th.float64
        self.c = th.as_tensor(np.asarray(c), dtype=f64)
        self.g = th.as_tensor(np.asarray(g), dtype=f64)
        self.h = th.as_tensor(np.asarray(h), dtype=f64)
        self.m = th.as_tensor(np.asarray(m), dtype=f64)
        self.low = th.as_tensor(np.asarray(low), dtype=f64).reshape(-1)
        self.high = th.as_tensor(np.asarray(high), dtype=f64).reshape(-1)

    def __call__(self, states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        x = _normalise(actions, self.low, self.high)
        quad = (self.h[states] * (x - self.m[states]) ** 2).sum(-1)
        return self.c[states] + (self.g[states] * x).sum(-1) - quad

    def one(self, s: int, a: np.ndarray) -> float:
        """The utility at one state and action ``(d,)`` (numpy; for stepping an env)."""
        if not hasattr(self, "_np"):
            self._np = tuple(
                v.numpy() for v in (self.c, self.g, self.h, self.m, self.low, self.high)
            )
        c, g, h, m, lo, hi = self._np
        x = 2.0 * (a - lo) / (hi - lo) - 1.0
        return float(c[s] + g[s] @ x - h[s] @ (x - m[s]) ** 2)


class StateUtility:
    """``r(s, a) = U[s]``: a utility of the state alone (received at every step)."""

    def __init__(self, U: ArrayLike) -> None:
        self.U = th.as_tensor(np.asarray(U), dtype=th.float64).reshape(-1)

    def __call__(self, states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        return self.U[states]


class ContinuousMDP:
    """A finite-horizon MDP with ``S`` states and actions in a bounded box.

    Args:
        n_states: ``S >= 1``.
        low, high: ``(d,)`` bounds of the action box (``low < high``, finite).
        horizon: decisions ``H >= 1``.
        transition: ``(states (M,) int64, actions (M, d) float64) -> (M, S)`` probabilities.
        utility: ``(states, actions) -> (M,)``, or a state utility ``(S,)``; None: no utility
            attached (every MEG call must then pass one).
        initial_state_dist: ``p0 (S,)``; default state 0.
        observations: optional ``(S, F)`` observation of each state (for gymnasium wrappers
            and observation-based policies).
        name: a label.

    Raises:
        ValueError / TypeError: bad sizes, bounds, an initial distribution not summing to 1, or
            functions whose output has the wrong shape or is not a probability law (checked on
            a probe of a few actions).
    """

    def __init__(
        self,
        n_states: int,
        low: ArrayLike,
        high: ArrayLike,
        horizon: int,
        transition: Fn,
        utility: BoxUtility | None = None,
        initial_state_dist: ArrayLike | None = None,
        *,
        observations: ArrayLike | None = None,
        name: str = "ContinuousMDP",
    ) -> None:
        for nm, v in (("n_states", n_states), ("horizon", horizon)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{nm} must be a positive integer, got {v!r}.")
        self.n_states = int(n_states)
        self.horizon = int(horizon)
        lo = numeric(low, "low").reshape(-1)
        hi = numeric(high, "high").reshape(-1)
        if lo.shape != hi.shape or lo.size == 0:
            raise ValueError(f"low and high must be (d,) of one shape, got {lo.shape}, {hi.shape}.")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
            raise ValueError(
                f"the action box must be bounded with low < high, got low={lo}, high={hi}; MEG "
                "against the uniform density needs a box of finite volume."
            )
        self.low, self.high = lo, hi
        self.action_dim = int(lo.size)
        self.log_volume = float(np.log(hi - lo).sum())
        if not callable(transition):
            raise TypeError(
                f"transition must be a callable (states, actions) -> (M, S), got "
                f"{type(transition).__name__}."
            )
        self._transition = transition
        self.utility = None if utility is None else self._as_utility(utility)
        S = self.n_states
        if initial_state_dist is None:
            p0 = th.zeros(S, dtype=th.float64)
            p0[0] = 1.0
        else:
            p0 = th.as_tensor(numeric(initial_state_dist, "initial_state_dist"))
            if p0.shape != (S,) or bool((p0 < 0).any()) or abs(float(p0.sum()) - 1.0) > 1e-9:
                raise ValueError(
                    f"initial_state_dist must be (S,) = ({S},) non-negative summing to 1, got "
                    f"shape {tuple(p0.shape)} summing to {float(p0.sum()):.6g}."
                )
        self.initial_state_dist = p0
        self.observations = (
            None
            if observations is None
            else numeric(observations, "observations").astype(np.float32)
        )
        if self.observations is not None and (
            self.observations.ndim != 2 or self.observations.shape[0] != S
        ):
            raise ValueError(
                f"observations must be (S, F) with S = {S}, got {self.observations.shape}."
            )
        self.name = name
        self._probe()

    def _as_utility(self, utility: BoxUtility) -> Fn:
        if callable(utility):
            return utility
        U = numeric(utility, "utility")
        if U.shape != (self.n_states,) or not np.all(np.isfinite(U)):
            raise ValueError(
                f"a utility must be a callable (states, actions) -> (M,) or a finite state "
                f"utility (S,) = ({self.n_states},), got an array of shape {U.shape}."
            )
        return StateUtility(U)

    def _probe(self) -> None:
        """Check the functions' outputs on every state at the box's corners and centre."""
        S, d = self.n_states, self.action_dim
        corners = np.array(np.meshgrid(*[[0.0, 0.5, 1.0]] * d, indexing="ij")).reshape(d, -1).T
        acts = th.as_tensor(self.low + corners * (self.high - self.low))
        states = th.arange(S).repeat_interleave(acts.shape[0])
        self.transition(states, acts.repeat(S, 1))
        if self.utility is not None:
            self.reward(states, acts.repeat(S, 1))

    @property
    def volume(self) -> float:
        """The box's volume (the uniform density is its inverse)."""
        return math.exp(self.log_volume)

    def transition(self, states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        """``(M, S)`` next-state laws at ``states (M,)`` and ``actions (M, d)``.

        Raises:
            ValueError: the transition function returned a wrong shape or not a law.
        """
        P = th.as_tensor(self._transition(states, actions), dtype=th.float64)
        M = states.shape[0]
        if P.shape != (M, self.n_states):
            raise ValueError(
                f"{self.name}: transition(states, actions) must return (M, S) = "
                f"({M}, {self.n_states}), got {tuple(P.shape)}."
            )
        if not bool(th.isfinite(P).all()) or bool((P < 0).any()):
            raise ValueError(
                f"{self.name}: the transition returned negative or non-finite entries."
            )
        err = float((P.sum(-1) - 1.0).abs().max()) if M else 0.0
        if err > ROW_SUM_TOL:
            raise ValueError(
                f"{self.name}: transition rows must sum to 1 (within {ROW_SUM_TOL}), off by {err:.3g}."
            )
        return P

    def reward(
        self, states: th.Tensor, actions: th.Tensor, utility: BoxUtility | None = None
    ) -> th.Tensor:
        """``(M,)`` utility ``r(s, a)`` of ``utility`` (default the MDP's).

        Raises:
            ValueError: no utility, or a utility function with a wrong output.
        """
        fn = self.utility if utility is None else self._as_utility(utility)
        if fn is None:
            raise ValueError(f"{self.name} has no utility attached: pass utility=.")
        r = th.as_tensor(fn(states, actions), dtype=th.float64).reshape(-1)
        if r.shape != (states.shape[0],) or not bool(th.isfinite(r).all()):
            raise ValueError(
                f"{self.name}: the utility must return finite (M,) = ({states.shape[0]},) values, "
                f"got shape {tuple(r.shape)}."
            )
        return r

    def with_horizon(self, horizon: int) -> ContinuousMDP:
        """The same MDP with another horizon."""
        return ContinuousMDP(
            self.n_states,
            self.low,
            self.high,
            horizon,
            self._transition,
            self.utility,
            self.initial_state_dist.numpy(),
            observations=self.observations,
            name=self.name,
        )

    def __repr__(self) -> str:
        return (
            f"ContinuousMDP({self.name!r}, S={self.n_states}, box={self.low.tolist()}.."
            f"{self.high.tolist()}, H={self.horizon})"
        )
