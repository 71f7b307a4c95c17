"""A linear utility class ``r_theta(s, a) = phi(s, a) @ theta`` and the products its solver needs.

:class:`ClassFeatures` holds one of three layouts (one-hot state labels, state features, or
state-action features) and maps a parameter vector to a reward and a per-step gradient back
to the parameters, in a thread-independent summation order. :func:`class_features` builds the
normalised class of a user's features (columns scaled to ``[0, 1]``, constant columns dropped,
one-hot state features turned into an index map); it is re-exported from
:mod:`imitation_meg.core.unknown`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch as th

from imitation_meg._validation import as_tensor
from imitation_meg.core.kernels.reductions import combine, contract
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import ArrayLike

__all__ = ["ClassFeatures", "class_features"]

# Dense classes with more features skip the constant-direction projection (its solve is F^3).
_CONSTANT_DIRECTION_MAX_F = 64


@dataclasses.dataclass(frozen=True)
class ClassFeatures:
    """A linear utility class ``r_theta(s, a) = phi(s, a) @ theta`` in one of three layouts.

    Attributes:
        kind: ``"index"`` (one-hot state features given by ``labels (S,)``, values ``0 .. F-1``:
            every utility of the state, or of a target), ``"state"`` (``phi (S, F)``) or
            ``"state_action"`` (``phi (S, A, F)``).
        n_features: ``F``.
        labels: ``(S,)`` int64 for ``"index"``.
        phi: ``(S, F)`` or ``(S, A, F)`` for the dense kinds.
    """

    kind: str
    n_features: int
    labels: th.Tensor | None = None
    phi: th.Tensor | None = None

    def reward(self, theta: th.Tensor, S: int, A: int) -> th.Tensor:
        """The per-step reward of ``theta (F,)`` as an action-major ``(A, S)`` tensor (a view
        broadcast over actions for state features)."""
        if self.kind == "index":
            assert self.labels is not None
            return theta[self.labels].unsqueeze(0).expand(A, S)
        assert self.phi is not None
        if self.kind == "state":
            return combine(self.phi, theta).unsqueeze(0).expand(A, S)
        return combine(self.phi, theta).T

    def project(self, g: th.Tensor) -> th.Tensor:
        """``phi^T g`` for an action-major ``g (A, S)``: ``(F,)``."""
        if self.kind == "index":
            assert self.labels is not None
            out = g.new_zeros(self.n_features)
            return out.index_add_(0, self.labels, g.sum(0))
        assert self.phi is not None
        if self.kind == "state":
            return contract(self.phi, g.sum(0))
        return contract(self.phi.reshape(-1, self.n_features), g.T.reshape(-1))

    def project_squares(self, c: th.Tensor) -> th.Tensor:
        """``(phi ** 2)^T c`` for an action-major ``c (A, S)``: the diagonal preconditioner."""
        if self.kind == "index":
            return self.project(c)
        assert self.phi is not None
        sq = self.phi.square()
        if self.kind == "state":
            return contract(sq, c.sum(0))
        return contract(sq.reshape(-1, self.n_features), c.T.reshape(-1))

    def utility(self, theta: th.Tensor, S: int, A: int) -> th.Tensor:
        """The state-major ``(S, A)`` per-step reward of ``theta``."""
        return self.reward(theta, S, A).T.contiguous()

    def constant_direction(self) -> th.Tensor | None:
        """The unit ``theta`` whose reward is the same constant everywhere, if the class holds one.

        Adding a constant to every reward shifts every action's soft Q-value at a step by the same
        amount, so no policy changes: this is a null direction of ``L``'s Hessian, in which the
        gradient is zero only up to rounding. The solver keeps its steps out of it.
        """
        if self.kind == "index":
            assert self.labels is not None
            ones = th.ones(self.n_features, dtype=th.float64, device=self.labels.device)
            return ones / math.sqrt(self.n_features)
        assert self.phi is not None
        F = self.n_features
        X = self.phi.reshape(-1, F).detach().cpu().double().numpy()
        if X.shape[0] < F or F > _CONSTANT_DIRECTION_MAX_F:
            return None
        # Least squares X c = 1 through the normal equations, summed by numpy's own loops (no
        # threaded BLAS) so that the direction, and every result after it, is the same bits on
        # any number of threads.
        gram = np.einsum("nf,ng->fg", X, X)
        c = np.linalg.lstsq(gram, np.einsum("nf->f", X), rcond=None)[0]
        if not np.isfinite(c).all() or not np.abs(X @ c - 1.0).max() <= 1e-9:
            return None
        norm = float(np.sqrt(np.einsum("f,f->", c, c)))
        if norm == 0.0:
            return None
        return th.from_numpy(c / norm).to(self.phi.device)


@dataclasses.dataclass(frozen=True)
class _Coordinates:
    """How the normalised parameters map back to the user's features:
    ``theta_user[kept] = theta / scale`` (other entries 0), up to an additive constant in the
    reward."""

    n_user: int
    kept: th.Tensor  # (F,) int64
    scale: th.Tensor  # (F,)

    def to_user(self, theta: th.Tensor) -> th.Tensor:
        out = theta.new_zeros(self.n_user)
        out[self.kept] = theta / self.scale
        return out


def _reduce_features(mdp: TabularMDP, features: ArrayLike) -> th.Tensor:
    """Features as ``(S, F)`` state or ``(S, A, F)`` per-step state-action features."""
    phi = as_tensor(features, name="features", dtype=mdp.dtype, device=mdp.device)
    S, A = mdp.n_states, mdp.n_actions
    if not bool(th.isfinite(phi).all()):
        bad = (~th.isfinite(phi)).nonzero()[:3].tolist()
        raise ValueError(
            f"features contain NaN or infinite values (first at {bad}); pass finite features."
        )
    if phi.ndim == 2 and phi.shape[0] == S:
        return phi
    if phi.ndim == 3 and phi.shape[:2] == (S, A):
        return phi
    if phi.ndim == 4 and phi.shape[:3] == (S, A, S):
        F = phi.shape[-1]
        # Expected feature of the next state: scale first so that huge values cannot overflow.
        m = phi.abs().amax((0, 1, 2)).clamp_min(1e-300)
        flat = (phi / m).reshape(S * A, S, F)
        sa = (th.arange(S, device=mdp.device).view(S, 1, 1) * A).add(
            th.arange(A, device=mdp.device).view(1, A, 1)
        )
        vals = flat[sa.expand_as(mdp.next_state).reshape(-1), mdp.next_state.reshape(-1)]
        return (vals.view(*mdp.prob.shape, F) * mdp.prob.unsqueeze(-1)).sum(-2) * m
    raise ValueError(
        f"features must have shape (S, F), (S, A, F) or (S, A, S, F) with S={S}, A={A}; "
        f"got {tuple(phi.shape)}."
    )


def class_features(mdp: TabularMDP, features: ArrayLike | None) -> ClassFeatures:
    """The normalised linear class of ``features`` (``None``: every utility of the state).

    Columns are scaled to ``[0, 1]`` (largest magnitude, then spread), constant columns dropped
    and one-hot state features turned into an index map; see the module docstring.

    Raises:
        ValueError: bad shape or non-finite values.
    """
    return _class_features(mdp, features)[0]


def _class_features(
    mdp: TabularMDP, features: ArrayLike | None
) -> tuple[ClassFeatures, _Coordinates]:
    S, A = mdp.n_states, mdp.n_actions
    if features is None:
        ar = th.arange(S, device=mdp.device)
        ones = th.ones(S, dtype=mdp.dtype, device=mdp.device)
        return ClassFeatures("index", S, labels=ar), _Coordinates(S, ar, ones)
    phi = _reduce_features(mdp, features)
    if phi.ndim == 3 and bool((phi == phi[:, :1]).all()):
        phi = phi[:, 0]  # the same for every action: state features
    F_user = phi.shape[-1]
    X = phi.reshape(-1, F_user)
    m = X.abs().amax(0)
    X = X / m.clamp_min(1e-300)  # in [-1, 1]: spreads and differences cannot overflow
    lo, hi = X.amin(0), X.amax(0)
    spread = hi - lo
    keep = (spread > 0).nonzero().flatten()
    Xn = (X[:, keep] - lo[keep]) / spread[keep]
    coords = _Coordinates(F_user, keep, m[keep] * spread[keep])
    F = int(keep.numel())
    if phi.ndim == 2:
        if bool(((Xn == 0) | (Xn == 1)).all()) and bool((Xn.sum(1) == 1).all()):
            return ClassFeatures("index", F, labels=Xn.argmax(1)), coords
        return ClassFeatures("state", F, phi=Xn.contiguous()), coords
    return ClassFeatures("state_action", F, phi=Xn.reshape(S, A, F).contiguous()), coords
