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

The class's features live in :mod:`imitation_meg.core.class_features` and the solver in
:mod:`imitation_meg.core.newton`; both are re-exported here.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch as th

from imitation_meg._validation import as_policy, as_sa_occupancy
from imitation_meg.core import discounted
from imitation_meg.core.class_features import ClassFeatures
from imitation_meg.core.kernels import fused_class as _fused_class
from imitation_meg.core.kernels.reductions import dot as _dot
from imitation_meg.core.known import MEGResult, clipped_meg, meg_upper_bound, sa_occupancy_of
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.newton import LinearClassObjective, maximise
from imitation_meg.core.soft_vi import occupancy_measures, soft_value_iteration
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
# Above this size a trial point's policy is written over the current one (which a rejected step
# then recomputes: one more pass) instead of into a second buffer.
_TRIAL_BUFFER_BYTES = 1 << 27
# The compiled passes precondition one-hot classes by the one-step curvature plus this much of
# the visits (which bound the curvature of a state's reward from above).
_VISITS_IN_CURVATURE = 1e-3


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
