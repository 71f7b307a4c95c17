"""The causal log-likelihood of soft-optimal models, the building block of every utility class.

For a per-step reward ``r (S, A)`` (rationality absorbed), ``L(r) = E_w[sum_t log pi_r,t(a | s)]``
with ``pi_r`` the soft-optimal policy of ``r`` at ``beta = 1`` and ``w (H, S, A)`` the scored
behaviour's state-action occupancy. Unknown-utility MEG over a class is ``sup_r L(r) + H log|A|``:
:mod:`imitation_meg.core.unknown` maximises it exactly over linear classes and
:mod:`imitation_meg.core.algorithm2` by gradient ascent over differentiable ones. Both build their
results here, with the Gibbs certificate that bounds them all.

For linear classes, :class:`ClassObjective` evaluates ``L``, its gradient and Hessian-vector
products by explicit passes over the MDP (no autograd): a value is one backward (soft value
iteration) pass, a gradient one more forward pass, a Hessian-vector product one tangent
backward and one tangent forward pass. :func:`maximise` is the damped truncated Newton method
that uses them. Long sums go through numpy's pairwise summation on the CPU, so results are the
same bits in every process and for every torch thread count.

(Over 500 lines: the linear class's passes, its gradient, its Hessian-vector product and the
feature classes share the per-step buffers of one objective and are read together.)
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch as th

from imitation_meg._validation import as_policy, as_sa_occupancy
from imitation_meg.core import discounted
from imitation_meg.core.kernels import fused_class as _fused_class
from imitation_meg.core.known import MEGResult, clipped_meg, meg_upper_bound, sa_occupancy_of
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import occupancy_measures, soft_value_iteration
from imitation_meg.progress import progress as _progress
from imitation_meg.type_aliases import ArrayLike, PolicyLike

__all__ = [
    "ClassFeatures",
    "ClassObjective",
    "LinearClassObjective",
    "behaviour_occupancy",
    "class_result",
    "gibbs_certificate",
    "log_likelihood",
    "maximise",
]

# Transition operators up to this many A * S * S entries are dense matrices (one BLAS call).
_DENSE_OPS_ENTRIES = 1 << 20
# Conjugate-gradient steps per Newton step at most.
_CG_MAX = 2000
# Above this size a trial point's policy is written over the current one (which a rejected step
# then recomputes: one more pass) instead of into a second buffer.
_TRIAL_BUFFER_BYTES = 1 << 27
# Ridge of the diagonal preconditioner, relative to its largest entry.
_RIDGE = 1e-12
# Smallest non-zero damping, relative to the largest curvature.
_LAM_MIN = 1e-6
# Dense classes with more features skip the constant-direction projection (its solve is F^3).
_CONSTANT_DIRECTION_MAX_F = 64
# Smallest fraction of a Newton step that backtracking tries.
_BACKTRACK_MIN = 2.0**-30
# The compiled passes precondition one-hot classes by the one-step curvature plus this much of
# the visits (which bound the curvature of a state's reward from above).
_VISITS_IN_CURVATURE = 1e-3
# Conjugate-gradient pairs kept from earlier solves to precondition later ones (see _Recycled).
_RECYCLE_PAIRS = 16


def _dot(x: th.Tensor, y: th.Tensor) -> float:
    """``sum(x * y)`` (same shapes, any strides) summed in an order that does not depend on the
    number of threads (on the CPU numpy's einsum loop, no BLAS; torch's reductions split long sums
    by thread), so that results are the same bits on every run and every thread count."""
    if x.device.type == "cpu":
        idx = "abcdefgh"[: x.ndim]
        return float(np.einsum(f"{idx},{idx}->", x.detach().numpy(), y.detach().numpy()))
    return float(th.dot(x.reshape(-1), y.reshape(-1)))


def _contract(phi: th.Tensor, v: th.Tensor) -> th.Tensor:
    """``phi^T v`` for ``phi (n, F)``, ``v (n,)``, in a thread-independent order on the CPU."""
    if phi.device.type == "cpu":
        out = np.einsum("nf,n->f", phi.numpy(), v.detach().contiguous().numpy(), optimize=False)
        return th.from_numpy(np.ascontiguousarray(out))
    return phi.T @ v


def _combine(phi: th.Tensor, theta: th.Tensor) -> th.Tensor:
    """``phi @ theta`` for ``phi (..., F)``, in a thread-independent order on the CPU."""
    if phi.device.type == "cpu":
        out = np.einsum("...f,f->...", phi.numpy(), theta.detach().contiguous().numpy())
        return th.from_numpy(np.ascontiguousarray(out))
    return phi @ theta


def behaviour_occupancy(
    mdp: TabularMDP, policy: PolicyLike | None, sa_occupancy: ArrayLike | None
) -> th.Tensor:
    """The ``(H, S, A)`` occupancy of the scored behaviour: ``sa_occupancy`` validated, or the
    policy's own in the MDP's dynamics. For a discounted infinite-horizon MDP ``(1, S, A)``:
    the policy's discounted state-action occupancy (summing to ``1 / (1 - gamma)``)."""
    if sa_occupancy is not None:
        return as_sa_occupancy(sa_occupancy, mdp)
    if policy is None:
        raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
    if mdp.horizon is None:
        pi = as_policy(policy, mdp)
        d = discounted.occupancy(discounted.Dynamics.of(mdp), pi.double().cpu().numpy())
        return (th.from_numpy(d).to(pi).unsqueeze(-1) * pi).unsqueeze(0)
    return sa_occupancy_of(mdp, policy)


def gibbs_certificate(mdp: TabularMDP, sa_occupancy: th.Tensor) -> float:
    """Upper bound on every MEG of a behaviour: ``sum_t E[log|A| - H(pi_t(. | s_t))]``.

    By Gibbs' inequality no model's log-likelihood exceeds the behaviour's own, so this bounds
    known- and unknown-utility MEG alike. ``pi_t`` is read off the occupancy
    ``w[t, s, a] / sum_a w[t, s, a]``.

    Args:
        mdp: the MDP.
        sa_occupancy: ``(H, S, A)`` state-action occupancy (``(1, S, A)`` discounted one for a
            discounted infinite-horizon MDP).
    """
    w = sa_occupancy
    ws = w.sum(-1, keepdim=True)
    cond = th.where(ws > 0, w / ws.clamp_min(1e-300), th.zeros_like(w))
    own = _dot(w, th.where(w > 0, cond.clamp_min(1e-300).log(), th.zeros_like(w)))
    return float(meg_upper_bound(mdp) + own)


def log_likelihood(mdp: TabularMDP, reward_sa: th.Tensor, sa_occupancy: th.Tensor) -> th.Tensor:
    """``E[sum_t log pi_t(a_t | s_t)]`` of the soft-optimal policy of ``reward_sa`` (beta = 1).

    Differentiable with respect to ``reward_sa (S, A)``.

    Args:
        mdp: the MDP.
        reward_sa: ``(S, A)`` per-step reward.
        sa_occupancy: ``(H, S, A)`` behaviour occupancy.

    Returns:
        A scalar tensor.
    """
    log_pi = soft_value_iteration(mdp, 1.0, utility=reward_sa).log_pi[0]
    return (sa_occupancy * log_pi).sum()


def class_result(
    mdp: TabularMDP,
    w: th.Tensor,
    reward: th.Tensor,
    L: float,
    *,
    grad_norm: float,
    converged: bool,
    at_boundary: bool,
    evaluations: int,
    extra: dict[str, Any],
) -> MEGResult:
    """The :class:`MEGResult` of a utility class's best model ``reward (S, A)`` (rationality
    absorbed) with log-likelihood ``L``: the value clipped to ``[0, H log|A|]``, the expected
    utilities of the behaviour, the model and the uniform policy under ``reward``, and the Gibbs
    certificate in ``extra``."""
    H, A = mdp.steps, mdp.n_actions
    bound = H * math.log(A)
    value = clipped_meg(L, bound)
    r = reward.detach()
    spread = float(r.max() - r.min())
    gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
    eu = _dot(gam.view(H, 1, 1) * w, r.expand(H, *r.shape))
    sv = soft_value_iteration(mdp, [1.0, 0.0], utility=r)
    pis = sv.pi  # (2, H, S, A)
    D = occupancy_measures(mdp, pis)[:, :-1]  # (2, H, S)
    eus = (gam.view(1, H, 1, 1) * D.unsqueeze(-1) * pis * r).sum((1, 2, 3))
    return MEGResult(
        meg=float(value),
        beta=spread,
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=eu,
        model_expected_utility=float(eus[0]),
        uniform_expected_utility=float(eus[1]),
        log_likelihood=float(L),
        grad=float(grad_norm),
        converged=bool(converged),
        at_boundary=bool(at_boundary),
        evaluations=evaluations,
        extra=dict(extra, utility=r.cpu(), certificate=gibbs_certificate(mdp, w)),
    )


# --------------------------------------------------------------------------- linear classes
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
            return _combine(self.phi, theta).unsqueeze(0).expand(A, S)
        return _combine(self.phi, theta).T

    def project(self, g: th.Tensor) -> th.Tensor:
        """``phi^T g`` for an action-major ``g (A, S)``: ``(F,)``."""
        if self.kind == "index":
            assert self.labels is not None
            out = g.new_zeros(self.n_features)
            return out.index_add_(0, self.labels, g.sum(0))
        assert self.phi is not None
        if self.kind == "state":
            return _contract(self.phi, g.sum(0))
        return _contract(self.phi.reshape(-1, self.n_features), g.T.reshape(-1))

    def project_squares(self, c: th.Tensor) -> th.Tensor:
        """``(phi ** 2)^T c`` for an action-major ``c (A, S)``: the diagonal preconditioner."""
        if self.kind == "index":
            return self.project(c)
        assert self.phi is not None
        sq = self.phi.square()
        if self.kind == "state":
            return _contract(sq, c.sum(0))
        return _contract(sq.reshape(-1, self.n_features), c.T.reshape(-1))

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


def _int32_csr(csr: th.Tensor) -> th.Tensor:
    """The same CSR matrix with int32 indices when they fit (half the index traffic: about twice
    as fast a product)."""
    if csr.values().numel() >= 2**31 - 1 or max(csr.shape) >= 2**31 - 1:
        return csr
    return th.sparse_csr_tensor(
        csr.crow_indices().to(th.int32),
        csr.col_indices().to(th.int32),
        csr.values(),
        csr.shape,
        check_invariants=False,
    )


class _ActionMajorOps:
    """The transitions as action-major operators: ``expect (A * S, S)`` (row ``a * S + s``) and
    its transpose ``push (S, A * S)``, dense for small MDPs, else CSR (built once per objective)."""

    def __init__(self, mdp: TabularMDP, dtype: th.dtype) -> None:
        S, A = mdp.n_states, mdp.n_actions
        ns, pr = mdp.next_state, mdp.prob.to(dtype)
        B = ns.shape[-1]
        keep = pr.reshape(-1) != 0
        am_row = (
            th.arange(A, device=ns.device).view(1, A, 1) * S
            + th.arange(S, device=ns.device).view(S, 1, 1)
        ).expand(S, A, B)
        am_row = am_row.reshape(-1)
        rows, cols, vals = am_row[keep], ns.reshape(-1)[keep], pr.reshape(-1)[keep]
        if A * S * S <= _DENSE_OPS_ENTRIES:
            M = th.zeros(A * S, S, dtype=dtype, device=ns.device)
            M.index_put_((rows, cols), vals, accumulate=True)
            self.M, self.MT = M, M.T.contiguous()
        else:
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                coo = th.sparse_coo_tensor(th.stack([rows, cols]), vals, (A * S, S)).coalesce()
                self.M = _int32_csr(coo.to_sparse_csr())
                self.MT = _int32_csr(coo.t().coalesce().to_sparse_csr())
        self.S, self.A = S, A

    def expect(self, V: th.Tensor) -> th.Tensor:
        """``E[V(s') | s, a]`` as ``(A, S)`` for ``V (S,)``."""
        return (self.M @ V).view(self.A, self.S)

    def push(self, m: th.Tensor) -> th.Tensor:
        """``sum_{s, a} m[a, s] T[s, a, s']`` ``(S,)`` for an action-major mass ``m (A, S)``."""
        return self.MT @ m.reshape(-1)


class ClassObjective:
    """``L(theta) = E_w[sum_t log pi_theta,t(a | s)]`` of a linear class by exact passes.

    With ``nu_0 = w_0`` and ``nu_t = w_t - gamma * push(w_{t-1})`` (summed over actions; zero for
    ``t >= 1`` when ``w`` is a policy's occupancy and ``gamma = 1``), the telescoped form

        L(theta) = <w, r_theta> - sum_t nu_t . V_t(theta)

    gives the gradient ``phi^T (sum_t w_t - sum_t rho_t pi_t)``, where ``rho`` is the forward
    pass of the model's policy seeded by ``nu`` (for a policy's occupancy: the model's state
    occupancy). A Hessian-vector product is the same two passes in tangent mode. ``L`` is
    concave whenever ``nu >= 0`` (every policy's occupancy); empirical occupancies of a
    stochastic MDP have small negative parts and need not give a concave ``L``.

    ``allowed (H, S, A)`` restricts the model to a face: the model's policy is the softmax over
    the allowed actions only (the limit of ``theta + t d`` for a direction ``d`` whose optimal
    actions are the allowed ones, see :mod:`imitation_meg.core.faces`).

    One value costs a backward pass, a gradient one more forward pass, a Hessian-vector product
    a backward and a forward pass. Arrays are kept action-major ``(H, A, S)``.
    """

    def __init__(
        self,
        mdp: TabularMDP,
        sa_occupancy: th.Tensor,
        features: ClassFeatures,
        *,
        allowed: th.Tensor | None = None,
    ) -> None:
        w = sa_occupancy
        H, S, A = w.shape
        self.H, self.S, self.A = H, S, A
        self.gamma = mdp.discount
        self.features = features
        self._p0 = mdp.initial_state_dist.to(w.dtype)
        self.ops = _ActionMajorOps(mdp, w.dtype)
        self.w = w  # (H, S, A): the caller's, not copied
        self.blocked = None if allowed is None else (~allowed).permute(0, 2, 1).contiguous()
        nu = w.sum(2)  # (H, S)
        for t in range(1, H):
            nu[t].sub_(self.ops.push(w[t - 1].T), alpha=self.gamma)
        self.nu = nu
        self.concave = bool((nu[1:] >= -1e-12).all()) if H > 1 else True
        self.wsum = w.sum(0).T.contiguous()  # (A, S)
        self.pi = w.new_empty(H, A, S)
        self.rho = w.new_empty(H, S)
        self._dV = w.new_empty(H, S)
        self._trial: th.Tensor | None = None  # (H, A, S) policy of a trial point
        self._at: th.Tensor | None = None  # the point whose policy is in self.pi
        self._trial_at: th.Tensor | None = None  # the trial point
        self._saved: th.Tensor | None = None  # the kept point while a trial overwrites it
        self._dQ: th.Tensor | None = None  # (H, A, S) tangent Q-values, made on first use
        self._q = w.new_empty(A, S)
        self._m = w.new_empty(1, S)
        self._z = w.new_empty(1, S)
        self.passes = 0
        # compiled gradient and Hessian-vector passes (numba, large MDPs on CPU)
        self._compiled = (
            _fused_class.ClassPasses(
                mdp, w.dtype, per_state=features.kind != "state_action", horizon=H
            )
            if _fused_class.usable(mdp, w)
            else None
        )
        self._curvature: th.Tensor | None = None  # sum_t |rho_t| pi_t of the compiled pass

    def value(self, theta: th.Tensor, *, commit: bool = True) -> float:
        """``L(theta)``; keeps the model's policy for :meth:`grad` and :meth:`neg_hvp`.

        With ``commit=False`` (a trial point) the policy goes to a second buffer, kept by a later
        :meth:`commit` while the current one stays; above ``_TRIAL_BUFFER_BYTES`` there is no
        second buffer: the trial overwrites the current policy, and :meth:`restore` recomputes it.
        """
        r = self.features.reward(theta, self.S, self.A)
        pi = self.pi
        if commit:
            self._at = theta
        elif self.pi.numel() * self.pi.element_size() <= _TRIAL_BUFFER_BYTES:
            if self._trial is None:
                self._trial = th.empty_like(self.pi)
            pi, self._trial_at = self._trial, theta
        else:
            self._saved, self._at, self._trial_at = self._at, theta, theta
        q, m, z = self._q, self._m, self._z
        Ls = [0.0] * self.H
        V: th.Tensor | None = None
        for t in range(self.H - 1, -1, -1):
            if V is None:
                q.copy_(r)
            else:
                th.add(r, self.ops.expect(V), alpha=self.gamma, out=q)
            if self.blocked is not None:
                q.masked_fill_(self.blocked[t], -math.inf)
            th.amax(q, 0, keepdim=True, out=m)
            q.sub_(m)
            th.exp(q, out=pi[t])
            th.sum(pi[t], 0, keepdim=True, out=z)
            pi[t].div_(z)
            z.log_()
            q.sub_(z)  # log pi_t
            if self.blocked is not None:
                q.clamp_(min=-1e300)  # 0 * log 0 = 0 where the behaviour has no mass
            Ls[t] = _dot(self.w[t], q.T)
            V = m.add_(z).view(-1)  # read by the next step's backup before m is rewritten
        self.passes += 1
        return float(sum(Ls))

    def commit(self) -> None:
        """Keep the trial point of the last ``value(..., commit=False)`` call."""
        if self._at is not self._trial_at:  # the trial's policy is in the second buffer
            assert self._trial is not None
            self.pi, self._trial = self._trial, self.pi
            self._at = self._trial_at
        self._saved = None

    def restore(self) -> None:
        """Drop the trial point: the policy is that of the last kept point again."""
        if self._saved is not None:
            self.value(self._saved)
            self._saved = None

    def grad(self) -> th.Tensor:
        """``dL/dtheta (F,)`` at the point of the last :meth:`value` call."""
        pi, rho, nu = self.pi, self.rho, self.nu
        self.passes += 1
        if self._compiled is not None:
            G, self._curvature = self._compiled.grad(pi, nu, rho, self.wsum)
            return self.features.project(G)
        G = self.wsum.clone()
        rho[0] = nu[0]
        m = self._q
        for t in range(self.H):
            th.mul(rho[t], pi[t], out=m)
            G.sub_(m)
            if t + 1 < self.H:
                th.add(nu[t + 1], self.ops.push(m), alpha=self.gamma, out=rho[t + 1])
        return self.features.project(G)

    def curvature_diagonal(self) -> th.Tensor:
        """``(phi ** 2)^T sum_t |rho_t| pi_t (F,)``: a diagonal preconditioner for the Hessian."""
        if self._compiled is not None:
            assert self._curvature is not None, "call grad() first"
            visits = self.features.project_squares(self._curvature)
            if self.features.kind != "index":
                return visits
            assert self.features.labels is not None
            # the choices of the last step see no later reward
            before_last = self._curvature - self.rho[-1].abs() * self.pi[-1]
            one_step = self._compiled.one_step_curvature(
                self.features.labels, self.features.n_features, before_last.clamp_(min=0.0)
            )
            return one_step.mul_(self.gamma**2).add_(visits, alpha=_VISITS_IN_CURVATURE)
        c = (self.rho.abs().unsqueeze(1) * self.pi).sum(0)
        return self.features.project_squares(c)

    def expected_return(self, r: th.Tensor, pi: th.Tensor | None) -> float:
        """``E[sum_t gamma^t r(s_t, a_t)]`` of a policy ``pi (H, A, S)`` (None: uniform) from
        ``p0``, for an action-major reward ``r (A, S)``."""
        d = self._p0
        total = 0.0
        m = r.new_empty(self.A, self.S)
        for t in range(self.H):
            if pi is None:
                th.mul(d, 1.0 / self.A, out=m[0])
                m[1:] = m[0]
            else:
                th.mul(d, pi[t], out=m)
            total += (self.gamma**t) * _dot(m, r)
            if t + 1 < self.H:
                d = self.ops.push(m)
        return total

    def neg_hvp(self, v: th.Tensor) -> th.Tensor:
        """``-Hessian @ v (F,)`` at the point of the last :meth:`grad` call."""
        u = self.features.reward(v, self.S, self.A)
        self.passes += 2
        if self._compiled is not None:
            return self.features.project(
                self._compiled.hvp(self.pi, self.rho, u[:1] if self._compiled.per_state else u)
            )
        pi, rho, dV = self.pi, self.rho, self._dV
        H, gamma = self.H, self.gamma
        if self._dQ is None:
            self._dQ = pi.new_empty(H, self.A, self.S)
        dQ, tmp = self._dQ, self._q
        for t in range(H - 1, -1, -1):  # tangent backward: dV_t = sum_a pi_t dQ_t
            if t == H - 1:
                dQ[t].copy_(u)
            else:
                th.add(u, self.ops.expect(dV[t + 1]), alpha=gamma, out=dQ[t])
            th.mul(dQ[t], pi[t], out=tmp)
            th.sum(tmp, 0, out=dV[t])
        drho = th.zeros_like(rho[0])
        dG = th.zeros_like(self.wsum)
        for t in range(H):  # tangent forward of rho_t pi_t
            dq = dQ[t]
            dq.sub_(dV[t]).mul_(rho[t]).add_(drho).mul_(pi[t])
            dG.add_(dq)
            if t + 1 < H:
                drho = self.ops.push(dq)
                if gamma != 1.0:
                    drho.mul_(gamma)
        return self.features.project(dG)


# --------------------------------------------------------------------------- the solver
class LinearClassObjective(Protocol):
    """What :func:`maximise` needs of a class's objective: :class:`ClassObjective` (finite
    horizon) or :class:`imitation_meg.core.discounted.DiscountedClassObjective`."""

    features: ClassFeatures
    w: th.Tensor  # its dtype and device are the parameters'
    passes: int

    def value(self, theta: th.Tensor, *, commit: bool = True) -> float: ...

    def commit(self) -> None: ...

    def restore(self) -> None: ...

    def grad(self) -> th.Tensor: ...

    def curvature_diagonal(self) -> th.Tensor: ...

    def neg_hvp(self, v: th.Tensor) -> th.Tensor: ...


def maximise(
    obj: LinearClassObjective,
    *,
    tol: float,
    max_iter: int,
    theta0: th.Tensor | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Maximise a class's log-likelihood by a damped (Levenberg-Marquardt) truncated Newton method.

    Each step solves ``(B + lam I) p = g`` (``B = -Hess``, ``g`` the gradient) by conjugate
    gradients with exact Hessian-vector products (:meth:`ClassObjective.neg_hvp`) and the
    diagonal preconditioner ``diag(B) + lam`` (:meth:`ClassObjective.curvature_diagonal`), to a
    relative residual ``min(0.5, sqrt(|g| / |g0|))`` (superlinear convergence). The damping
    ``lam`` follows the ratio of the actual rise of ``L`` to the rise the quadratic model
    predicted (a trust region in the features' Euclidean norm): far from the optimum, where
    nearly deterministic models make the curvature vanish in some directions, it keeps steps
    short; near the optimum it vanishes and the steps are Newton's. A step is taken when ``L``
    rises. Undamped, the Newton decrement ``lambda^2 = g . p`` estimates the remaining gap
    ``sup L - L`` as ``lambda^2 / 2``: the solve stops when that is at most
    ``tol * max(1, |L|)`` (after taking that last step), or when ``L`` no longer rises at
    rounding level.

    Returns:
        dict with ``theta``, ``L``, ``grad`` (its norm), ``decrement`` (the last ``lambda^2``),
        ``converged``, ``iterations`` (Newton steps), ``cg_iterations``, ``passes``, ``seconds``
        and ``trace`` (per step: seconds since the start, ``L``, ``g . p``, CG steps, the
        damping and whether the step was taken).
    """
    F = obj.features.n_features
    keep_out = _without_null_direction(obj)
    theta = (
        th.zeros(F, dtype=obj.w.dtype, device=obj.w.device) if theta0 is None else theta0.clone()
    )
    start = time.perf_counter()
    L = obj.value(theta)
    g = obj.grad()
    trace: list[dict[str, float]] = []
    out: dict[str, Any] = {"iterations": 0, "cg_iterations": 0, "decrement": math.inf}
    converged = F == 0
    g0 = None
    lam = 0.0
    diag = None
    recycled = _Recycled(_RECYCLE_PAIRS)
    steps = _progress(range(max_iter), enabled=progress, desc="MEG (Newton)")
    for k in steps:
        if converged or not math.isfinite(L):
            break
        if diag is None:
            diag, dmax = _preconditioner(obj)
        gM = math.sqrt(_dot(g, g / diag))
        g0 = gM if g0 is None else g0
        eta = min(0.5, math.sqrt(gM / g0)) if g0 > 0 else 0.5
        p, Bp, n_cg = _damped_newton_step(obj, g, diag, lam, eta, keep_out, recycled)
        out["cg_iterations"] += n_cg
        gp = _dot(g, p)
        pred = gp - 0.5 * (_dot(p, Bp) - lam * _dot(p, p))  # the undamped model's rise
        scale = max(1.0, abs(L))
        out["iterations"] = k + 1
        if lam == 0.0:
            out["decrement"] = gp
        trace.append(
            {
                "seconds": time.perf_counter() - start,
                "L": L,
                "decrement": gp,
                "cg": n_cg,
                "damping": lam,
            }
        )
        if not pred > 1e-16 * scale and lam == 0.0:
            if gp / 2 <= max(tol, 1e-8) * scale:
                converged = True  # no ascent left at rounding level
                break
            # A truncated CG step on a badly conditioned Hessian: the model promises nothing,
            # though the Newton decrement says there is ascent left. Damp and solve again.
            lam = _LAM_MIN * dmax
            trace[-1]["taken"] = 0.0
            continue
        last = lam == 0.0 and gp / 2 <= tol * scale
        cand, Lc, ratio = _candidate(obj, theta, p, L, pred, backtrack=lam == 0.0 and not last)
        lam = _next_damping(lam, ratio, _LAM_MIN * dmax)
        taken = Lc > L
        trace[-1]["taken"] = float(taken)
        if taken:
            obj.commit()
            theta, L = cand, Lc
            g = obj.grad()
            diag = None
            if last:
                converged = True
        else:
            obj.restore()
        if not taken and (last or Lc == L):
            # The model's last refinement does not register in L: the gap is at rounding level.
            converged = gp / 2 <= max(tol, 1e-8) * scale
            break
    out.update(
        theta=theta,
        L=L,
        grad=float(g.norm()),
        converged=converged,
        passes=obj.passes,
        trace=trace,
        seconds=time.perf_counter() - start,
    )
    return out


def _without_null_direction(obj: LinearClassObjective) -> Callable[[th.Tensor], th.Tensor]:
    """The projection (in place) of a parameter vector off the class's constant-reward
    direction, a null direction of ``L`` (the identity when the class has none)."""
    F = obj.features.n_features
    null = obj.features.constant_direction() if F > 0 else None
    if null is not None:
        null = null.to(dtype=obj.w.dtype, device=obj.w.device)

    def keep_out(v: th.Tensor) -> th.Tensor:
        """``v`` without its component along the constant-reward direction (a null direction)."""
        return v if null is None else v.sub_(null, alpha=_dot(v, null))

    return keep_out


def _preconditioner(obj: LinearClassObjective) -> tuple[th.Tensor, float]:
    """The diagonal preconditioner ``diag(B)`` plus a ridge of ``_RIDGE`` times its largest
    entry, and that entry (the damping's unit)."""
    diag = obj.curvature_diagonal()
    dmax = float(diag.max().clamp_min(1e-300))
    return diag + _RIDGE * dmax, dmax


def _damped_newton_step(
    obj: LinearClassObjective,
    g: th.Tensor,
    diag: th.Tensor,
    lam: float,
    eta: float,
    keep_out: Callable[[th.Tensor], th.Tensor],
    recycled: _Recycled,
) -> tuple[th.Tensor, th.Tensor, int]:
    """``(p, B p, CG steps)``: the solution of ``(B + lam I) p = g`` by preconditioned
    conjugate gradients to the relative residual ``eta`` (off the null direction)."""

    def damped(v: th.Tensor, lam: float = lam) -> th.Tensor:
        return obj.neg_hvp(v).add_(v, alpha=lam) if lam > 0 else obj.neg_hvp(v)

    recycled.start(lam)
    F = obj.features.n_features
    return _pcg(
        damped,
        keep_out(g.clone()),
        diag + lam,
        eta,
        max(50, min(4 * F, _CG_MAX)),
        keep_out,
        recycled if _RECYCLE_PAIRS > 0 else None,
    )


def _candidate(
    obj: LinearClassObjective,
    theta: th.Tensor,
    p: th.Tensor,
    L: float,
    pred: float,
    *,
    backtrack: bool,
) -> tuple[th.Tensor, float, float]:
    """``(theta + p, L there, the ratio of the actual rise to the predicted one)``, left
    uncommitted; with ``backtrack`` a full step that does not raise ``L`` is shortened (the
    direction was right: the ratio counts as 0.5)."""
    cand = theta + p
    Lc = obj.value(cand, commit=False)
    ratio = (Lc - L) / pred if math.isfinite(Lc) and pred > 0 else -math.inf
    if backtrack and not Lc > L:
        shorter = _backtrack(obj, theta, p, L)
        if shorter is not None:
            cand, Lc, ratio = *shorter, 0.5  # keep lam = 0: the direction was right
    return cand, Lc, ratio


def _backtrack(
    obj: LinearClassObjective, theta: th.Tensor, p: th.Tensor, L: float
) -> tuple[th.Tensor, float] | None:
    """``(theta + a p, L there)`` for the largest ``a = 1/2, 1/4, ...`` above
    ``_BACKTRACK_MIN`` where ``L`` rises, or None (the last trial point is left uncommitted).

    The Newton step overshoots where directions of tiny curvature (e.g. utilities of states the
    behaviour almost never visits) get huge components: backtracking along it comes before
    damping, which would crawl along those directions.
    """
    a = 0.5
    while a > _BACKTRACK_MIN:
        obj.restore()
        trial = theta + a * p
        Lt = obj.value(trial, commit=False)
        if Lt > L:
            return trial, Lt
        a *= 0.5
    return None


def _next_damping(lam: float, ratio: float, smallest: float) -> float:
    """The Levenberg-Marquardt damping after a step whose actual rise was ``ratio`` times the
    model's: raised (at least to ``smallest``) below 1/4, lowered above 3/4 (to 0 from near
    ``smallest``)."""
    if ratio < 0.25:
        return max(16.0 * lam, smallest)
    if ratio > 0.75:
        return lam / 8.0 if lam > 8.0 * smallest else 0.0
    return lam


def _pcg(
    matvec: Any,
    g: th.Tensor,
    diag: th.Tensor,
    eta: float,
    max_iter: int,
    keep_out: Any = None,
    pre: _Recycled | None = None,
) -> tuple[th.Tensor, th.Tensor, int]:
    """Preconditioned conjugate gradients for ``B p = g`` (``B p = matvec(p)``), to relative
    residual ``eta`` in the norm of the diagonal ``diag``; stops early on non-positive
    curvature (then the iterate so far, or the preconditioned gradient first). The
    preconditioner is ``pre`` (the diagonal refined by earlier solves' pairs) or ``diag``, and
    ``pre`` gains this solve's pairs. ``keep_out`` (in place) removes a null direction of ``B``
    from every search direction (projected CG), so rounding in ``g`` cannot grow into a huge
    step along it.

    Returns:
        ``(p, B p, CG steps)``.
    """
    x = th.zeros_like(g)
    Bx = th.zeros_like(g)
    project = keep_out if keep_out is not None else (lambda v: v)

    def precondition(r: th.Tensor) -> th.Tensor:
        return project(r / diag if pre is None else pre.apply(r, diag))

    r = g.clone()
    z = precondition(r)
    p = z.clone()
    rz = _dot(r, z)
    target = eta * math.sqrt(_dot(r, r / diag))
    n = 0
    for n in range(1, max_iter + 1):
        Bp = matvec(p)
        pBp = _dot(p, Bp)
        if not pBp > 0:
            if n == 1:
                x, Bx = p, Bp
            break
        if pre is not None:
            pre.add(p, Bp)
        a = rz / pBp
        x.add_(p, alpha=a)
        Bx.add_(Bp, alpha=a)
        r.sub_(Bp, alpha=a)
        if math.sqrt(max(_dot(r, r / diag), 0.0)) <= target:
            break
        z = precondition(r)
        rz_new = _dot(r, z)
        if not rz_new > 0:
            # the preconditioned residual has no component along the residual (it fell into
            # the projected-out direction, or below rounding): no further CG direction exists
            break
        p = z.add_(p, alpha=rz_new / rz)
        rz = rz_new
    return x, Bx, n


class _Recycled:
    """A preconditioner that learns from the conjugate-gradient steps of earlier solves.

    Successive Newton steps solve systems with nearly the same Hessian. Each CG step gives a
    pair ``(p, B p)``; the last :data:`_RECYCLE_PAIRS` pairs define a limited-memory BFGS
    inverse with the diagonal preconditioner as its initial matrix (automatic preconditioning,
    Morales and Nocedal, SIAM J. Optim. 10(4), 2000): exact on the span of the pairs where the
    Hessian has not moved, the diagonal elsewhere. Pairs from damped solves are shifted to the
    damping of the next solve. It changes only how fast CG reaches the same stopping test.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.pairs: list[tuple[th.Tensor, th.Tensor]] = []  # (s, B s undamped) in use
        self._new: list[tuple[th.Tensor, th.Tensor]] = []  # this solve's, used from the next
        self.lam = 0.0

    def start(self, lam: float) -> None:
        """Begin a solve with the matrix ``B + lam I``: the pairs of the solves before it
        (CG needs one fixed preconditioner per solve)."""
        self.pairs = (self.pairs + self._new)[-self.size :] if self.size > 0 else []
        self._new = []
        self.lam = lam

    def add(self, s: th.Tensor, Bs: th.Tensor) -> None:
        """Keep a CG step's pair (``Bs`` of this solve's damped matrix) for later solves."""
        if self.size <= 0:
            return
        y = Bs.sub(s, alpha=self.lam) if self.lam > 0 else Bs.clone()
        self._new.append((s.clone(), y))
        del self._new[: -self.size]

    def apply(self, r: th.Tensor, diag: th.Tensor) -> th.Tensor:
        """``M^{-1} r`` by the two-loop recursion over the pairs (damped by :attr:`lam`),
        starting from ``diag``."""
        q = r.clone()
        used = []
        for s, y0 in reversed(self.pairs):
            y = y0.add(s, alpha=self.lam) if self.lam > 0 else y0
            sy = _dot(s, y)
            if not sy > 0:
                continue
            a = _dot(s, q) / sy
            q.sub_(y, alpha=a)
            used.append((s, y, sy, a))
        z = q.div_(diag)
        for s, y, sy, a in reversed(used):
            b = _dot(y, z) / sy
            z.add_(s, alpha=a - b)
        return z
