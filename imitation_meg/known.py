"""Exact known-utility maximum entropy goal-directedness (MEG).

For a policy ``pi`` and utility ``U`` (paper Definition 3.1 / 4.1)

    MEG_U(pi) = sup_{beta in R u {+-inf}}  L(beta) + H log|A|,
    L(beta)   = E_pi[ sum_t log pi_beta,t(a_t | s_t) ],

with the expectation over ``pi``'s own state occupancy. ``L`` is concave in ``beta`` and

    dL/dbeta = sum_t E_{(s,a) ~ pi_t}[ G_t(s, a) - E_{a' ~ pi_beta,t}[G_t(s, a')] ],

where ``G_t`` is the (discounted) utility-to-go of ``pi_beta``; with ``discount = 1`` this is
``E_pi[sum_t U] - E_{pi_beta}[sum_t U]``. The solver brackets the root of ``dL/dbeta`` on a
logarithmic grid of ``beta`` evaluated in one batched backward pass, narrows the bracket by
batched grid refinement (or a safeguarded secant step for very large MDPs), and compares the
interior optimum with the exact limits at ``beta = +-inf``. The result is deterministic and
accurate to about 1e-10 relative.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import as_policy, as_sa_occupancy, as_tensor
from imitation_meg.mdp import TabularMDP
from imitation_meg.results import to_jsonable
from imitation_meg.soft_vi import TIE_TOL, _tie_log_policy, occupancy_measures

__all__ = [
    "MEGObjective",
    "MEGResult",
    "as_sa_occupancy",
    "meg",
    "meg_one_step",
    "sa_occupancy_of",
]

# Grid and stopping settings of the 1-D solver.
_GRID_AROUND = (-0.8, 0.8)  # first grid: x0 * 10**-0.8 .. x0 * 10**0.8 around the Newton step at 0
_MAX_DECADES = 15.0  # extend the grid up to beta * scale = 1e15
# beta * scale beyond which a soft policy counts as saturated (its limit reached to rounding).
_SATURATED_X = 1e6
_BRACKET_RTOL = 1e-11
_BETAS_PER_PASS = 8
# A refinement pass evaluates only the Hermite root once the bracket is this narrow (relative).
_SINGLE_PROBE_REL = 1e-3
# Above this many state-action pairs a pass is bandwidth-bound and evaluates one beta.
_BATCH_MAX_SA = 1 << 15
# Temporary-memory budget of one batched pass (about 16 (S, A) temporaries per beta).
_BATCH_BYTES = 1 << 28
# The (H, S * A) occupancy is cached for the backward passes up to this size.
_W_BYTES = 1 << 27
# Pass workspaces up to this size are kept (per MDP) for the next pass with the same batch size.
_WS_KEEP_BYTES = 1 << 22


@dataclasses.dataclass(frozen=True)
class MEGResult:
    """Result of a MEG computation.

    Attributes:
        meg: the maximum entropy goal-directedness (nats); signed if ``signed=True``.
        beta: the maximising rationality (``+inf`` / ``-inf`` when the supremum is a limit).
        upper_bound: ``H log|A|``.
        normalized: ``meg / upper_bound``.
        expected_utility: ``E_pi[sum_t gamma^t U]`` of the scored policy.
        model_expected_utility: the same for the fitted soft-optimal policy ``pi_beta``.
        uniform_expected_utility: the same for the uniform policy.
        log_likelihood: ``L(beta) = E_pi[sum_t log pi_beta,t]`` at the optimum.
        grad: ``dL/dbeta`` at the reported beta (0 at an interior optimum; ``nan`` at +-inf).
        converged: the 1-D solve met its tolerance (or the supremum is an exact limit).
        at_boundary: the supremum lies at ``beta = +-inf``.
        signed: whether ``meg`` carries the sign of ``E_pi[U] - E_uniform[U]``.
        evaluations: number of beta values evaluated.
        extra: additional fields of specialised solvers (unknown-utility MEG and friends).
    """

    meg: float
    beta: float
    upper_bound: float
    normalized: float
    expected_utility: float
    model_expected_utility: float
    uniform_expected_utility: float
    log_likelihood: float
    grad: float
    converged: bool
    at_boundary: bool
    signed: bool = False
    evaluations: int = 0
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (NaN becomes ``None``, infinite floats ``"inf"`` / ``"-inf"``)."""
        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


class MEGObjective:
    """``L(beta)``, ``dL/dbeta`` and the model's expected utility for a fixed behaviour and utility.

    The behaviour enters only through its state-action occupancy ``w[t, s, a] = P(s_t = s,
    a_t = a)``: either computed from a policy in the MDP's dynamics, or given directly (for
    example as empirical frequencies of trajectories).

    Args:
        mdp: the MDP.
        policy: ``(S, A)`` or ``(H, S, A)`` policy (validated); ignored if ``sa_occupancy`` is given.
        utility: utility (default the MDP's); reduced to ``r (S, A)``.
        sa_occupancy: optional ``(H, S, A)`` non-negative occupancy, each ``w[t]`` summing to 1.

    Attributes:
        sa_occupancy: ``(H, S, A)`` state-action occupancy at decision times.
        expected_utility: ``E[sum_t gamma^t r(s_t, a_t)]`` under that occupancy.
    """

    def __init__(
        self, mdp: TabularMDP, policy: Any = None, utility: Any = None, *, sa_occupancy: Any = None
    ) -> None:
        self.mdp = mdp
        self.r = mdp.reward_sa(utility).detach()
        H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
        self._sa: th.Tensor | None = None
        if sa_occupancy is not None:
            self._sa = as_sa_occupancy(sa_occupancy, mdp)
            self._D = self._sa.sum(-1)  # (H, S) state marginals
            self._pi: th.Tensor | None = None
        elif policy is not None:
            # Memory-lean form: state occupancy (H, S) and the policy, not (H, S, A).
            pi = as_policy(policy, mdp).to(mdp.dtype)
            self._pi = pi
            self._D = occupancy_measures(mdp, pi, validate=False)[:-1]
        else:
            raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
        gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
        if self._sa is not None:
            eu = (gam.view(H, 1, 1) * self._sa * self.r).sum()
        elif self._pi is not None and self._pi.ndim == 2:
            eu = ((gam.view(H, 1) * self._D).sum(0) * (self._pi * self.r).sum(-1)).sum()
        else:
            assert self._pi is not None
            eu = (gam.view(H, 1) * self._D * (self._pi * self.r).sum(-1)).sum()
        self.expected_utility = float(eu)
        self.evaluations = 0
        self.passes = 0
        self._W: th.Tensor | None = None
        self._W_lean = False
        self._limits: dict[float, tuple[float, float]] = {}
        self._limit_bound: float | None = None
        per_beta = 16 * S * A * self.r.element_size()
        self.batch = int(max(1, min(64, _BATCH_BYTES // max(per_beta, 1))))

    @property
    def sa_occupancy(self) -> th.Tensor:
        """``(H, S, A)`` state-action occupancy ``w[t, s, a]`` (materialised on request)."""
        if self._sa is not None:
            return self._sa
        assert self._pi is not None
        pi = self._pi if self._pi.ndim == 3 else self._pi.unsqueeze(0)
        return self._D.unsqueeze(-1) * pi

    def _w(self, t: int) -> tuple[th.Tensor, th.Tensor]:
        """``(w[t] (S, A), its state marginal (S,))``."""
        if self._sa is not None:
            return self._sa[t], self._D[t]
        assert self._pi is not None
        pi = self._pi if self._pi.ndim == 2 else self._pi[t]
        return self._D[t].unsqueeze(-1) * pi, self._D[t]

    def evaluate(self, betas: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Evaluate finite betas ``(K,)`` in batches.

        Returns:
            ``(L (K,), dL (K,), model_expected_utility (K,))``.
        """
        L, dL, _, eu = self.evaluate2(betas)
        return L, dL, eu

    def evaluate2(
        self, betas: th.Tensor, *, second: bool = True
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """Like :meth:`evaluate`, with the exact second derivative (NaN with ``second=False``,
        a cheaper pass: 9 instead of 12 calls per step).

        Returns:
            ``(L (K,), dL (K,), d2L (K,), model_expected_utility (K,))``.
        """
        betas = betas.to(dtype=self.mdp.dtype, device=self.mdp.device).reshape(-1)
        outs = [
            self._evaluate(betas[i : i + self.batch], second=second)
            for i in range(0, betas.numel(), self.batch)
        ]
        if len(outs) == 1:
            return outs[0]
        return tuple(th.cat([o[j] for o in outs]) for j in range(4))  # type: ignore[return-value]

    def _weights(self) -> th.Tensor | None:
        """Cached action-major ``(H, A * S)`` occupancy (column ``a * S + s``) when it fits in
        ``_W_BYTES``, else None (computed per step)."""
        if self._W is None and not self._W_lean:
            H, S, A = self.mdp.horizon, self.mdp.n_states, self.mdp.n_actions
            if H * S * A * self.r.element_size() <= _W_BYTES:
                self._W = self.sa_occupancy.transpose(-1, -2).reshape(H, A * S).contiguous()
            else:
                self._W_lean = True
        return self._W

    def _w_am(self, t: int, W: th.Tensor | None) -> tuple[th.Tensor, th.Tensor]:
        """``(w[t]`` action-major ``(A * S,)``, its state marginal ``(S,))``."""
        if W is not None:
            return W[t], self._D[t]
        w, wS = self._w(t)
        return w.T.reshape(-1), wS

    def _backup(self, prod: Any, C: th.Tensor, X: th.Tensor, out: th.Tensor, alpha: float) -> None:
        """``out = C + alpha E[X]`` for columns ``X (S, R)`` into action-major ``out (A * S, R)``
        (``prod``: the MDP's action-major products, or None on large MDPs: state-major CSR)."""
        if prod is not None:
            prod.backup(out, X, C, alpha)
            return
        mdp = self.mdp
        S, A, R = mdp.n_states, mdp.n_actions, X.shape[1]
        nxt = (mdp._operators(X.dtype)[1] @ X).view(S, A, R).transpose(0, 1)
        th.add(C.view(A, S, R), nxt, alpha=alpha, out=out.view(A, S, R))

    def _evaluate(
        self, betas: th.Tensor, *, second: bool = True
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """One fused backward pass for ``K`` betas (without the ``d2`` columns and a NaN ``d2L``
        when ``second`` is False).

        With ``Q_t = beta r + gamma E[V_{t+1}]`` and ``log pi_t = Q_t - V_t``, the derivatives of
        the soft values obey ``G_t = dQ_t/dbeta = r + gamma E[g_{t+1}]``, ``g_t = dV_t/dbeta =
        E_pi_beta[G_t]``, ``d2Q_t = gamma E[h_{t+1}]`` and ``h_t = d2V_t = Var_pi_beta(G_t) +
        E_pi_beta[d2Q_t]``; the carry ``[V | g | h] (S, 3K)`` goes through one backup per step,
        which also adds the constant ``[beta r | r | 0]`` (one sparse product; scipy's CSR loop
        on small CPU MDPs). ``log pi`` is one ``log_softmax`` into its own buffer (``V`` is ``Q``
        minus it at the best action: ``max Q - max log pi``), and the columns ``[G | d2Q]``
        become ``[G - g | d2Q]`` in place, so that products with the occupancy accumulate
        ``L``, ``dL`` and the first part of ``d2L`` (on small MDPs batched products over all
        steps after the loop). Rows are action-major (``(A, S, 3K)`` blocks, reductions over the
        leading action axis), and every temporary is a preallocated buffer (kept on the MDP for
        the next pass with the same ``K`` on small MDPs). 12 calls per step.
        """
        mdp, r = self.mdp, self.r
        K = betas.numel()
        self.evaluations += K
        self.passes += 1
        H, _S = mdp.horizon, mdp.n_states
        W = self._weights()
        ws = self._workspace(K, second)
        hist, prod, C, Qh, Xh, LPh, P, T, m, z, acc, Cn = ws[:12]
        Qs, qs, Gs, d2Qs, Xs, Vs, gs, hs, Qn, Xn = ws[12:]
        rf = r.T.reshape(-1, 1)
        C[:, :K] = rf * betas.view(1, K)
        C[:, K : 2 * K] = rf
        acc.zero_()
        d2L_acc = acc[2 * K :]
        gamma = mdp.discount
        data = prod.scaled(gamma) if Qn is not None else None
        for t in range(H - 1, -1, -1):
            i, j = (t, t + 1) if hist else (0, 0)  # this step's slot, the carry's slot
            Qb, q, G = Qs[i], qs[i], Gs[i]
            if t == H - 1:
                Qb.copy_(C)
            elif Qn is not None:
                prod.backup_np(Qn[i], Xn[j], Cn, data)
            else:
                self._backup(prod, C, Xs[j], Qb, gamma)
            lp = LPh[i]
            th.amax(q, 0, keepdim=True, out=m)
            th.log_softmax(q, 0, out=lp)
            th.exp(lp, out=P)
            # The best action's log-probability is -log sum_a exp(q - m): V = m - max_a log pi.
            th.amax(lp, 0, keepdim=True, out=z)
            th.sub(m, z, out=Vs[i])
            th.mul(G, P, out=T)
            g = gs[i]
            th.sum(T, 0, keepdim=True, out=g)  # g = E_pi[G]
            G.sub_(g)  # G - g
            if second:
                th.addcmul(d2Qs[i], G, G, out=T)
                T.mul_(P)
                th.sum(T, 0, keepdim=True, out=hs[i])  # h = E_pi[d2Q] + Var_pi(G)
            if not hist:
                wf, wS = (W[t], self._D[t]) if W is not None else self._w_am(t, None)
                acc[K:].addmv_(Qb[:, K:].T, wf)
                acc[:K].addmv_(lp.view(-1, K).T, wf)
                if second:
                    d2L_acc.addmv_(hs[i][0].T, wS, alpha=-1.0)
        if hist:
            assert W is not None
            Wb = W.unsqueeze(1)
            acc[K:] += th.bmm(Wb, Qh[..., K:]).sum(0).view(-1)
            acc[:K] += th.bmm(Wb, LPh.view(H, -1, K)).sum(0).view(-1)
            if second:
                d2L_acc -= th.bmm(self._D.unsqueeze(1), Xh[:H, :, 2 * K :]).sum(0).view(K)
        model_eu = mdp.initial_state_dist @ Xh[0, :, K : 2 * K]
        out = acc.clone()  # the workspace is reused by the next pass
        d2L = out[2 * K : 3 * K] if second else th.full_like(out[:K], math.nan)
        return out[:K], out[K : 2 * K], d2L, model_eu

    def _workspace(self, K: int, second: bool = True) -> tuple[Any, ...]:
        """Buffers and per-step views of a pass over ``K`` betas; kept on the MDP for the next
        pass with the same ``K`` when small (creating them costs about as much as a few steps).

        Small MDPs keep every step's rows (H, A * S, 3K) and carries (H + 1, S, 3K), so that the
        accumulations over the occupancy are two batched products after the loop; otherwise one
        slot of each is reused and accumulated per step. With scipy's products the numpy views
        of every slot are made here, once.
        """
        mdp, r = self.mdp, self.r
        H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
        blocks = 3 if second else 2  # [Q | G | d2Q] or [Q | G]
        SA, R = S * A, blocks * K
        W = self._weights()
        hist = W is not None and H * R * (SA + S) * r.element_size() <= _W_BYTES
        # Kept per MDP (whose operator cache copies with another horizon share: H is in the
        # key), layout, dtype and thread; the buffers are overwritten by every pass and the
        # constant's utility block is refilled by each pass.
        key = ("meg_workspace", H, K, second, hist, r.dtype, mdp.device, threading.get_ident())
        cache = mdp._cache()
        ws = cache.get(key)
        if ws is not None:
            return ws
        n = H if hist else 1
        prod = mdp._am_product(r.dtype, R)
        C = r.new_zeros(SA, R)  # the constant of the backup: [beta r | r | 0]
        Qh = r.new_empty(n, SA, R)  # [Q | G | d2Q] of step t, then [Q | G - g | d2Q]
        Xh = r.new_empty(n + 1, S, R)  # carries [V | g | h] (slot n is never read)
        Qv = Qh.view(n, A, S, R)
        Xv = Xh.view(n + 1, 1, S, R)
        numpy_views = prod is not None and prod.uses_numpy
        LPh = r.new_empty(n, A, S, K)  # log pi of step t
        ws = (
            hist,
            prod,
            C,
            Qh,
            Xh,
            LPh,
            r.new_empty(A, S, K),
            r.new_empty(A, S, K),  # P, T
            r.new_empty(1, S, K),
            r.new_empty(1, S, K),  # m, z
            r.new_empty(R),  # acc: [L | dL | first part of d2L]
            C.numpy().reshape(-1) if numpy_views else None,
            Qh.unbind(0),
            *(Qv[..., c * K : (c + 1) * K].unbind(0) if c < blocks else None for c in range(3)),
            Xh.unbind(0),
            *(Xv[..., c * K : (c + 1) * K].unbind(0) if c < blocks else None for c in range(3)),
            list(Qh.numpy().reshape(n, -1)) if numpy_views else None,
            list(Xh.numpy().reshape(n + 1, -1)) if numpy_views else None,
        )
        if hist and (Qh.numel() + Xh.numel() + LPh.numel()) * r.element_size() <= _WS_KEEP_BYTES:
            cache[key] = ws
        return ws

    def _evaluate_zero(self) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """The pass at ``beta = 0`` (the uniform policy): ``log pi = -log A`` needs no softmax.

        Carries ``[h | g] (S, 2)`` only: ``G = r + gamma E[g']``, ``g = mean_a G``, ``d2Q = gamma
        E[h']`` and ``h = mean_a (G - g)^2 + mean_a d2Q``. Same outputs as :meth:`_evaluate`.
        The carries hold sums over actions, ``[A h | A g]``, so that the means are plain sums
        (the backup and the accumulation take the ``1 / A`` as a factor). On small MDPs every
        step's rows and carries are kept and accumulated after the loop, as in
        :meth:`_evaluate`.
        """
        mdp, r = self.mdp, self.r
        self.evaluations += 1
        self.passes += 1
        H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
        SA = S * A
        W = self._weights()
        hist = W is not None
        n = H if hist else 1
        C = r.new_zeros(SA, 2)  # [0 | r] (action-major)
        C[:, 1] = r.T.reshape(SA)
        Qh = r.new_empty(n, SA, 2)  # [d2Q | G], then [d2Q | G - g]
        Xh = r.new_zeros(n + 1, S, 2)  # carries [A h | A g]
        T = r.new_empty(A, S)
        acc = r.new_zeros(2)  # [first part of d2L | dL]
        Qv, Xv = Qh.view(n, A, S, 2), Xh.view(n + 1, 1, S, 2)
        Qs, d2Qs, Gs = Qh.unbind(0), Qv[..., 0].unbind(0), Qv[..., 1].unbind(0)
        Xs, hs, gs = Xh.unbind(0), Xv[..., 0].unbind(0), Xv[..., 1].unbind(0)
        gamma, prod, inv_a = mdp.discount / A, mdp._am_product(r.dtype, 2), 1.0 / A
        flat = prod is not None and prod.uses_numpy
        Cn = C.numpy().reshape(-1) if flat else None
        Qn = list(Qh.numpy().reshape(n, -1)) if flat else None
        Xn = list(Xh.numpy().reshape(n + 1, -1)) if flat else None
        data = prod.scaled(gamma) if prod is not None and flat else None
        for t in range(H - 1, -1, -1):
            i, j = (t, t + 1) if hist else (0, 0)  # this step's slot, the carry's slot
            Qb, G, g = Qs[i], Gs[i], gs[i]
            if t == H - 1:
                Qb.copy_(C)
            elif Qn is not None and Xn is not None:
                assert prod is not None and Cn is not None and data is not None
                prod.backup_np(Qn[i], Xn[j], Cn, data)
            else:
                self._backup(prod, C, Xs[j], Qb, gamma)
            th.sum(G, 0, keepdim=True, out=g)
            G.sub_(g, alpha=inv_a)
            th.addcmul(d2Qs[i], G, G, out=T)
            th.sum(T, 0, keepdim=True, out=hs[i])  # A h = sum_a d2Q + sum_a (G - g)^2
            if not hist:
                wf, wS = self._w_am(t, W)
                acc.addmv_(Qb.T, wf)
                acc[0:1].addmv_(Xs[i][:, 0:1].T, wS, alpha=-inv_a)
        if hist:
            assert W is not None
            acc += th.bmm(W.unsqueeze(1), Qh).sum(0).view(2)
            acc[0:1] -= inv_a * th.bmm(self._D.unsqueeze(1), Xh[:H, :, 0:1]).sum(0).view(1)
        L = (-math.log(A)) * self._D.sum().reshape(1)  # sum_t sum_s D_t(s) log(1 / A)
        return L, acc[1:2], acc[0:1], (mdp.initial_state_dist @ Xh[0, :, 1:2]) * inv_a

    def _store_limits(self, Qh: th.Tensor, eus: th.Tensor) -> None:
        """Cache ``(L, model expected utility)`` at ``beta = +inf`` and ``-inf`` from the hard
        Q-values ``Qh (H, A, S, 2)`` (max and min backups, action-major) and their initial
        values ``eus (2,)``."""
        H, S, A = self.mdp.horizon, self.mdp.n_states, self.mdp.n_actions
        W = self._weights()
        assert W is not None
        w = W.view(H, A, S).transpose(-1, -2)
        for j, sg in enumerate((1.0, -1.0)):
            logp = _tie_log_policy(Qh[..., j].transpose(-1, -2), sg, TIE_TOL)
            L = float(th.where(w > 0, w * logp, th.zeros_like(w)).sum())
            self._limits[sg] = (L, float(eus[j]))

    def _limits_fit(self) -> bool:
        """Whether both limits' hard Q-values ``(H, 2, S, A)`` fit the small-MDP budget."""
        mdp = self.mdp
        size = 2 * mdp.horizon * mdp.n_states * mdp.n_actions * self.r.element_size()
        return self._weights() is not None and size <= _W_BYTES

    def limit_upper_bound(self) -> float:
        """An upper bound on ``L`` at ``beta = +inf`` and ``-inf``, from the behaviour alone.

        The limit policy is uniform over the tied best (worst) actions, so ``L`` there is
        ``-inf`` unless each visited state's tie set contains the behaviour's support, and then
        ``sum_a w log pi_inf <= -D log n`` with ``n`` the support's size:
        ``L(+-inf) <= -sum_t sum_s D_t(s) log n_t(s)``. A behaviour with full support gets the
        ``beta = 0`` value, which an interior optimum beats without a hard pass.
        """
        if self._limit_bound is None:
            # Support sizes from the policy (no (H, S, A) occupancy is formed) or the occupancy.
            src = self._pi if self._pi is not None else self._sa
            assert src is not None
            n = (src > 0).sum(-1).clamp_(min=1).to(self.r.dtype)  # (S,) or (H, S)
            D = self._D if n.ndim == 2 else self._D.sum(0)
            self._limit_bound = float(-(D * n.log_()).sum())
        return self._limit_bound

    def evaluate_limit(self, sign: float) -> tuple[float, float]:
        """``L`` and the model's expected utility at ``beta = sign * inf``.

        Small MDPs compute both limits in one hard backward pass (the tie policies of all steps
        in one vectorised call) and cache them; large ones run the hard backup of the requested
        sign with the tie policy per step.
        """
        sign = 1.0 if sign > 0 else -1.0
        if sign in self._limits:
            return self._limits[sign]
        mdp, r = self.mdp, self.r
        S, H = mdp.n_states, mdp.horizon
        self.passes += 1
        if self._limits_fit():
            # Both signs in one hard pass of U and -U (max backups): two ops per step, the tie
            # policies vectorised.
            A = mdp.n_actions
            rf = th.stack([r.T.reshape(A * S), -r.T.reshape(A * S)], 1)  # action-major (A S, 2)
            Qh = r.new_empty(H, A, S, 2)
            X = r.new_zeros(S, 2)  # hard values of U and -U at step t + 1
            prod = mdp._am_product(r.dtype, 2)
            for t in range(H - 1, -1, -1):
                q = Qh[t].view(A * S, 2)
                if t == H - 1:
                    q.copy_(rf)
                else:
                    self._backup(prod, rf, X, q, mdp.discount)
                th.amax(Qh[t], 0, keepdim=True, out=X.view(1, S, 2))
            Qh[..., 1].neg_()
            X[:, 1].neg_()
            self._store_limits(Qh, mdp.initial_state_dist @ X)
            return self._limits[sign]
        V_next = r.new_zeros(S)
        L = 0.0
        for t in range(H - 1, -1, -1):
            Q = r + mdp.discount * mdp.expect_next(V_next) if t < H - 1 else r
            logp = _tie_log_policy(Q, sign, TIE_TOL)
            w, _ = self._w(t)
            term = th.where(w > 0, w * logp, th.zeros_like(w)).sum()
            L += float(term)
            V_next = Q.amax(-1) if sign > 0 else Q.amin(-1)
        self._limits[sign] = (L, float(V_next @ mdp.initial_state_dist))
        return self._limits[sign]


def sa_occupancy_of(mdp: TabularMDP, policy: Any) -> th.Tensor:
    """State-action occupancy ``w[t, s, a] = P(s_t = s) pi_t(a | s)`` of a policy, ``(H, S, A)``."""
    pi = as_policy(policy, mdp)
    D = occupancy_measures(mdp, pi)[:-1]  # (H, S)
    pi_t = pi if pi.ndim == 3 else pi.unsqueeze(0)
    return D.unsqueeze(-1) * pi_t


def _scale(r: th.Tensor) -> float:
    """Spread of the per-step reward across actions, the natural unit of 1/beta."""
    spread = float((r.amax(-1) - r.amin(-1)).max())
    total = float(r.max() - r.min())
    # A spread at rounding level (a state utility evaluated per transition) is no unit.
    return spread if spread > 1e-9 * total else total


def _cubic_roots_01(c0: float, c1: float, c2: float, c3: float) -> list[float]:
    """Real roots in ``(0, 1)`` of ``c0 + c1 u + c2 u^2 + c3 u^3`` (pure Python, no eigenvalues).

    Splits ``[0, 1]`` at the critical points into monotone pieces and solves each piece with a
    sign change by safeguarded Newton iteration (bisection when a step leaves the piece).
    """

    def p(u: float) -> float:
        return c0 + u * (c1 + u * (c2 + u * c3))

    def dp(u: float) -> float:
        return c1 + u * (2.0 * c2 + 3.0 * u * c3)

    knots = [0.0, 1.0]
    a2, a1, a0 = 3.0 * c3, 2.0 * c2, c1
    if a2 != 0.0:
        disc = a1 * a1 - 4.0 * a2 * a0
        if disc > 0.0:
            sq = math.sqrt(disc)
            knots += [(-a1 - sq) / (2.0 * a2), (-a1 + sq) / (2.0 * a2)]
    elif a1 != 0.0:
        knots.append(-a0 / a1)
    knots = sorted(u for u in knots if 0.0 <= u <= 1.0)
    roots = []
    for a, b in itertools.pairwise(knots):
        pa, pb = p(a), p(b)
        if pa == 0.0 and a > 0.0:
            roots.append(a)
            continue
        if not (b > a) or pa * pb > 0.0:
            continue
        u = a - pa * (b - a) / (pb - pa)  # start at the secant root
        for _ in range(100):
            pu = p(u)
            if pu == 0.0:
                break
            if (pu > 0.0) == (pa > 0.0):
                a, pa = u, pu
            else:
                b = u
            d = dp(u)
            nu = u - pu / d if d != 0.0 else math.nan
            if not (a < nu < b):
                nu = 0.5 * (a + b)
            if abs(nu - u) <= 4e-16 * max(1.0, abs(u)) or b - a <= 4e-16:
                u = nu
                break
            u = nu
        if 0.0 < u < 1.0:
            roots.append(u)
    return roots


def _hermite_root(a: float, fa: float, da: float, b: float, fb: float, db: float) -> float:
    """Root in ``(a, b)`` of the cubic Hermite interpolant of ``f`` (``fa > 0 > fb``), or nan."""
    h = b - a
    if not (h > 0) or not all(map(math.isfinite, (fa, da, fb, db))):
        return math.nan
    # f(a + u h) = c0 + c1 u + c2 u^2 + c3 u^3 on u in [0, 1].
    m0, m1 = da * h, db * h
    c0, c1 = fa, m0
    c2 = 3 * (fb - fa) - 2 * m0 - m1
    c3 = 2 * (fa - fb) + m0 + m1
    real = _cubic_roots_01(c0, c1, c2, c3)
    if not real:
        return math.nan
    # The interpolant may have several roots in (0, 1); take the one nearest the secant root.
    sec = fa / (fa - fb)
    u = min(real, key=lambda v: abs(v - sec))
    return a + u * h


def _solve(obj: MEGObjective) -> dict[str, Any]:
    """Maximise the concave L(beta); returns the fields of MEGResult (unsigned).

    Works in ``x = sign * beta >= 0`` where ``f(x) = sign * dL/dbeta`` decreases from ``f(0) > 0``.
    Every pass evaluates ``L``, ``f`` and the exact ``f'`` for a batch of betas (one fused
    backward pass; the batch size follows the memory budget). Bracketing phase: a log grid
    (batched) or safeguarded Newton expansion (one beta per pass). Refinement phase: the root of
    the cubic Hermite interpolant of ``f`` on the bracket (fourth-order accurate), surrounded by
    probes at geometrically spaced relative offsets that shrink the bracket to the estimate's
    error in one pass (the Newton estimate fills the batch); on a tight bracket the Hermite root
    alone, in a pass without second derivatives, confirmed by the Newton decrement. Stops when
    the bracket is ``1e-11`` relative or the decrement is below that, and compares with the exact
    limit at ``beta = sign * inf`` unless :meth:`MEGObjective.limit_upper_bound` shows the limit
    cannot win.
    """
    mdp = obj.mdp
    dt, dev = mdp.dtype, mdp.device
    H, A = mdp.horizon, mdp.n_actions
    L0 = -H * math.log(A)
    th.zeros(1, dtype=dt, device=dev)
    scale = _scale(obj.r)
    _, dL0_t, d2L0_t, eu0_t = obj._evaluate_zero()
    dL0, d2L0, eu_uniform = float(dL0_t[0]), float(d2L0_t[0]), float(eu0_t[0])
    base = {"uniform_expected_utility": eu_uniform, "expected_utility": obj.expected_utility}
    # Tolerance on the derivative below which beta = 0 is optimal (utility gives no signal).
    d_tol = 1e-12 * max(1.0, abs(obj.expected_utility), abs(eu_uniform), H * scale)
    if scale == 0.0 or abs(dL0) <= d_tol:
        return dict(
            base, beta=0.0, L=L0, grad=dL0, model_eu=eu_uniform, converged=True, at_boundary=False
        )
    sign = 1.0 if dL0 > 0 else -1.0

    def limit() -> tuple[float, float]:
        # The exact limit at beta = sign * inf (one hard pass, cached; computed when first needed).
        return obj.evaluate_limit(sign)

    # Betas per pass: at small S a pass costs about the same for 1 or 8 betas (per-step overhead
    # dominates); at large S one (bandwidth-bound), and the memory budget may cap it further.
    n = max(1, min(obj.batch, _BETAS_PER_PASS))
    if mdp.n_states * mdp.n_actions > _BATCH_MAX_SA:
        # Bandwidth-bound passes cost K times one beta: Newton, one beta per pass.
        n = 1
    x_max = 10.0**_MAX_DECADES / scale
    best = [0.0, L0, dL0, eu_uniform, d2L0]  # beta, L, dL, eu, d2L: the largest L seen
    flat = list(best)  # the smallest |dL| seen (the root estimate)
    # Bracket [lo, hi] in x with f(lo) > 0 >= f(hi); derivatives kept for the interpolant.
    lo, f_lo, fp_lo = 0.0, sign * dL0, d2L0
    hi, f_hi, fp_hi = math.inf, math.nan, math.nan
    converged = False

    def run(xs: list[float], light: bool = False) -> list[tuple[float, float, float]]:
        # light: a pass without second derivatives (inside a finite bracket); f' at each point
        # is then interpolated from the bracket's ends (it only scales the Newton decrement).
        nonlocal lo, f_lo, fp_lo, hi, f_hi, fp_hi, converged
        xs = sorted(set(xs))
        pts = th.tensor([sign * x for x in xs], dtype=dt, device=dev)
        Lp, dLp, d2Lp, eup = (v.tolist() for v in obj.evaluate2(pts, second=not light))
        out = []
        for j, x in enumerate(xs):
            Lj, dj, d2j = Lp[j], dLp[j], d2Lp[j]
            if light:
                d2j = fp_lo + (fp_hi - fp_lo) * (x - lo) / (hi - lo)
            if Lj > best[1]:
                best[:] = [sign * x, Lj, dj, eup[j], d2j]
            if abs(dj) < abs(flat[2]):
                flat[:] = [sign * x, Lj, dj, eup[j], d2j]
            fj = sign * dj
            if abs(dj) <= d_tol:
                converged = True
            if fj > 0 and x > lo:
                lo, f_lo, fp_lo = x, fj, d2j
            elif fj <= 0 and x < hi:
                hi, f_hi, fp_hi = x, fj, d2j
            out.append((x, fj, d2j))
        return out

    def newton_done() -> bool:
        # Newton decrement at the root estimate: its step |f / f'| is the distance to the root
        # to first order, and the next step would be quadratically smaller.
        x, d, d2 = sign * flat[0], flat[2], flat[4]
        return x > 0 and d2 < 0 and abs(d / d2) <= _BRACKET_RTOL * x and lo <= x <= hi

    def saturated() -> bool:
        # L has stopped increasing to rounding at the largest beta seen (dL vanishes there).
        # Reaching L(sign * inf) is not enough: where hard Q-values tie, finite betas break the
        # ties by future entropy and L(beta) can rise past L(sign * inf) towards another limit.
        return abs(best[2]) <= d_tol

    # 1. Bracketing, from the Newton step at beta = 0 (``x0``).
    x0 = f_lo / -fp_lo if fp_lo < 0 and math.isfinite(f_lo / -fp_lo) else 1.0 / scale
    x0 = min(max(x0, 1e-8 / scale), x_max)
    if n > 1:
        # A log grid around x0 (the root is usually within a factor of a few of it).
        top = math.log10(x_max)
        lo_dec = math.log10(x0) + _GRID_AROUND[0]
        hi_dec = min(math.log10(x0) + _GRID_AROUND[1], top)
        while math.isinf(hi):
            run(list(np.logspace(lo_dec, hi_dec, n).tolist()))
            if not math.isinf(hi) or saturated() or hi_dec >= top or converged:
                break
            lo_dec, hi_dec = hi_dec, min(hi_dec + 6.0, top)
    else:
        x = x0
        while math.isinf(hi) and not converged:
            x = min(max(x, 1e-8 / scale), x_max)
            ((_, fx, fpx),) = run([x])
            if not math.isinf(hi) or saturated() or x >= x_max:
                break
            cand = x - fx / fpx if fpx < 0 else math.nan
            x = cand if math.isfinite(cand) and x < cand <= 100.0 * x else 10.0 * x
    root_hit = converged and abs(flat[0]) * scale < _SATURATED_X  # dL = 0 at a finite beta
    if math.isinf(hi) and not root_hit:
        # dL keeps the sign of dL(0) up to the largest beta: L increases towards beta = sign * inf.
        # The supremum is the larger of L(sign * inf) and the limit of L(beta), which the last
        # betas reach once dL vanishes to rounding (``saturated``).
        L_inf, eu_inf = limit()
        if math.isfinite(L_inf) and L_inf >= best[1] - 1e-12 * max(1.0, abs(best[1])):
            return dict(
                base,
                beta=sign * math.inf,
                L=max(L_inf, best[1]),
                grad=math.nan,
                model_eu=eu_inf,
                converged=True,
                at_boundary=True,
            )
        return dict(
            base,
            beta=best[0],
            L=best[1],
            grad=best[2],
            model_eu=best[3],
            converged=saturated(),
            at_boundary=True,
        )

    # 2. Refinement: Hermite root plus geometric probes around it.
    single_tried = False
    for _ in range(60):
        if converged or hi - lo <= _BRACKET_RTOL * hi or newton_done():
            converged = True
            break
        c = _hermite_root(lo, f_lo, fp_lo, hi, f_hi, fp_hi)
        # Newton from the end point with the shorter step: the scale of the estimate's error.
        steps = [
            (abs(f / fp), x - f / fp)
            for x, f, fp in ((lo, f_lo, fp_lo), (hi, f_hi, fp_hi))
            if fp < 0 and math.isfinite(f / fp)
        ]
        cn = min(steps)[1] if steps else math.nan
        if not (lo < c < hi):
            c = (
                cn
                if lo < cn < hi
                else (math.sqrt(lo * hi) if lo > 0 and hi > 4 * lo else 0.5 * (lo + hi))
            )
        rel = (hi - lo) / c
        if lo < cn < hi and cn != c:
            rel = min(rel, 4.0 * abs(cn - c) / c)
        if n >= 3 and (rel > _SINGLE_PROBE_REL or single_tried):
            k = (n - 1) // 2
            # Offsets from rel down to rel**2 (the error of the next estimate), at least 1e-13.
            top = math.log10(max(rel, 1e-12))
            offs = np.logspace(max(-13.0, min(2.0 * top, top - 2.0)), top, k)
            xs = [c] + [c * (1 - o) for o in offs] + [c * (1 + o) for o in offs]
            if len(xs) < n and lo < cn < hi and cn not in xs:
                xs.append(cn)  # the Newton estimate fills the batch (same pass size as the grid)
            xs = [x for x in xs if lo < x < hi]
        else:
            # On a bracket this tight the Hermite root is exact to rounding (its error shrinks
            # like the fourth power of the width): one beta (a cheaper pass) and the Newton
            # decrement confirms it; once, after that the probes again.
            single_tried = single_tried or n >= 3
            xs = [c]
        old = hi - lo
        run(xs, light=n >= 3 and len(xs) == 1)
        if n < 3 and hi - lo > 0.5 * old:
            # The single estimate did not halve the bracket: bisect once (geometric when wide).
            m = math.sqrt(lo * hi) if lo > 0 and hi > 4 * lo else 0.5 * (lo + hi)
            run([m])
            if abs(f_lo) <= d_tol or abs(f_hi) <= d_tol:
                converged = True
    if not converged and hi - lo <= _BRACKET_RTOL * hi:
        converged = True
    # The limit wins when it is at least as good: a finite beta whose soft policy has
    # saturated to the hard one (dL exactly 0) is reported as the exact limit.
    # (Not skipped for an interior root: where hard Q-values tie, L(beta) does not tend to L_inf.)
    # The hard pass is skipped when the limit provably cannot win (see ``limit_upper_bound``).
    tol_best = 1e-12 * max(1.0, abs(best[1]))
    L_inf, eu_inf = (
        limit() if obj.limit_upper_bound() >= best[1] - tol_best else (-math.inf, math.nan)
    )
    if math.isfinite(L_inf) and L_inf >= best[1] - tol_best:
        return dict(
            base,
            beta=sign * math.inf,
            L=max(L_inf, best[1]),
            grad=math.nan,
            model_eu=eu_inf,
            converged=True,
            at_boundary=True,
        )
    # Near the root L is flat to rounding: report the root estimate when its L ties the best.
    pick = (
        flat if flat[1] >= best[1] - 8 * np.finfo(np.float64).eps * max(1.0, abs(best[1])) else best
    )
    # A "root" beyond beta * scale = 1e6 is where dL has vanished to rounding while L still tends
    # to its beta -> sign * inf limit (tied hard Q-values): the supremum lies at infinity.
    return dict(
        base,
        beta=pick[0],
        L=max(pick[1], best[1]),
        grad=pick[2],
        model_eu=pick[3],
        converged=converged,
        at_boundary=abs(pick[0]) * scale >= _SATURATED_X,
    )


def meg(
    policy: Any,
    mdp: TabularMDP,
    utility: Any = None,
    *,
    signed: bool = False,
    sa_occupancy: Any = None,
) -> MEGResult:
    """Known-utility MEG of a policy, solved exactly.

    Args:
        policy: ``(S, A)`` stationary or ``(H, S, A)`` time-dependent probabilities
            (numpy or torch); validated and renormalised.
        mdp: the MDP (dynamics, horizon ``H``, initial distribution, discount).
        utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)``; default ``mdp.utility``.
        signed: multiply by the sign of ``E_pi[U] - E_uniform[U]`` (paper footnote 4), so that
            policies that pursue ``-U`` get negative scores.
        sa_occupancy: optional ``(H, S, A)`` state-action occupancy that replaces the policy's
            own (e.g. empirical frequencies from trajectories); ``policy`` may then be None.

    Returns:
        :class:`MEGResult`. ``0 <= meg <= H log|A|`` when unsigned.

    Raises:
        ValueError / TypeError: on invalid policies or utilities (see :func:`as_policy`).

    Example:
        >>> from imitation_meg import envs, policies
        >>> mdp = envs.cliff_world(horizon=10)
        >>> round(meg(policies.uniform(mdp), mdp).meg, 12)
        0.0
    """
    if not isinstance(mdp, TabularMDP):
        raise TypeError(
            f"mdp must be an imitation_meg.TabularMDP, got {type(mdp).__name__}; build one with "
            "TabularMDP(...) or TabularMDP.from_env(env)."
        )
    obj = MEGObjective(mdp, policy, utility, sa_occupancy=sa_occupancy)
    sol = _solve(obj)
    H, A = mdp.horizon, mdp.n_actions
    bound = H * math.log(A)
    value = max(sol["L"] + bound, 0.0)
    value = min(value, bound)
    diff = sol["expected_utility"] - sol["uniform_expected_utility"]
    tol = 1e-12 * max(1.0, abs(sol["expected_utility"]))
    if signed:
        value = value if diff > tol else (-value if diff < -tol else 0.0)
    return MEGResult(
        meg=float(value),
        beta=float(sol["beta"]),
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=float(sol["expected_utility"]),
        model_expected_utility=float(sol["model_eu"]),
        uniform_expected_utility=float(sol["uniform_expected_utility"]),
        log_likelihood=float(sol["L"]),
        grad=float(sol["grad"]),
        converged=bool(sol["converged"]),
        at_boundary=bool(sol["at_boundary"]),
        signed=signed,
        evaluations=obj.evaluations,
    )


def meg_one_step(
    policy: Any,
    expected_utility: Any,
    state_dist: Any = None,
    *,
    signed: bool = False,
) -> MEGResult:
    """MEG of a single decision given the expected utilities ``E[U | d, s]``.

    This is the paper's setting for one-shot problems such as the mouse of Example 1: the
    decision ``d`` is taken once, in a state ``s`` drawn from ``state_dist``, and
    ``expected_utility[s, d]`` already averages over whatever follows.

    Args:
        policy: ``(S, D)`` or ``(D,)`` decision probabilities.
        expected_utility: ``(S, D)`` or ``(D,)`` values ``E[U | d, s]``.
        state_dist: ``(S,)``; default uniform over the ``S`` states.
        signed: as in :func:`meg`.

    Returns:
        :class:`MEGResult` with ``upper_bound = log D``.

    Example:
        >>> round(meg_one_step([0.8, 0.2], [1.0, -1.0]).meg, 4)
        0.1927
    """
    u = as_tensor(expected_utility, name="expected_utility", dtype=th.float64)
    pi = as_tensor(policy, name="policy", dtype=th.float64)
    if u.ndim == 1:
        u = u.unsqueeze(0)
    if pi.ndim == 1:
        pi = pi.unsqueeze(0)
    if u.ndim != 2:
        raise ValueError(f"expected_utility must be (D,) or (S, D), got shape {tuple(u.shape)}.")
    S, D = u.shape
    if pi.shape != (S, D):
        raise ValueError(
            f"policy must have the shape of expected_utility {(S, D)}, got {tuple(pi.shape)}."
        )
    p0 = th.full((S,), 1.0 / S, dtype=th.float64) if state_dist is None else state_dist
    # One decision; the next state is irrelevant (self-loops).
    nxt = th.arange(S).view(S, 1, 1).expand(S, D, 1)
    mdp = TabularMDP((nxt, th.ones(S, D, 1, dtype=th.float64)), u, 1, p0, name="one-step")
    return meg(pi, mdp, signed=signed)
