"""The fast passes of known-utility MEG: ``L``, ``dL/dbeta``, ``d2L/dbeta2`` in one fused pass.

The math is :func:`imitation_meg.core.known.objective_reference` (a plain loop, the reference these
passes are tested against): with ``Q_t = beta r + gamma E[V_{t+1}]`` and ``log pi_t = Q_t - V_t``,
the derivatives of the soft values obey

    G_t   = dQ_t/dbeta  = r + gamma E[g_{t+1}],     g_t = dV_t/dbeta   = E_pi_beta[G_t],
    d2Q_t = gamma E[h_{t+1}],                        h_t = d2V_t/dbeta2 = Var_pi_beta(G_t) + E_pi_beta[d2Q_t],

and ``L = sum_t E_w[log pi_t]``, ``dL = sum_t E_w[G_t - g_t]``, ``d2L = sum_t E_w[d2Q_t - h_t]``
over the behaviour's state-action occupancy ``w``. Here the carry ``[V | g | h] (S, 3K)`` of
``K`` betas goes through one product per step (the transition operator's action-major
:meth:`~imitation_meg.core.kernels.operators.Products.backup`, which also adds the constant
``[beta r | r | 0]``), every temporary is a preallocated buffer of a :class:`PassBuffers` record
(kept on the operator for the next pass of the same shape on small MDPs), and on small MDPs every
step's rows are kept so that the accumulations against the occupancy are batched products after
the loop. The passes at ``beta = 0`` and at ``beta = +-inf`` are special cases with fewer
columns.
"""

from __future__ import annotations

import dataclasses
import math

import torch as th

from imitation_meg.core.kernels import fused as _fused
from imitation_meg.core.kernels.limits import limit_step
from imitation_meg.core.kernels.operators import PassMDP
from imitation_meg.core.kernels.products import Array, Operands, Products
from imitation_meg.progress import long_pass, progress

__all__ = ["Behaviour", "PassBuffers", "derivative_pass", "limit_pass", "zero_pass"]

# The (H, S * A) occupancy is cached for the backward passes up to this size.
_W_BYTES = 1 << 27
# Pass workspaces up to this size are kept (per MDP) for the next pass with the same batch size.
_WS_KEEP_BYTES = 1 << 22
# Passes keep every step's rows when they fit in this many bytes (cache-sized: beyond, writing
# the history costs more memory traffic than the per-step accumulations cost calls).
_HIST_BYTES = 1 << 22
# Passes keep every step's rows (and per-step views, ~2 kB a step) up to this many steps.
_HIST_MAX_STEPS = 1 << 12


@dataclasses.dataclass(eq=False)
class Behaviour:
    """The scored behaviour as the passes read it.

    Attributes:
        D: ``(H, S)`` state occupancy at decision times.
        pi: the policy ``(S, A)`` or ``(H, S, A)`` (None when given as an occupancy).
        sa: the state-action occupancy ``(H, S, A)`` (None when given as a policy).
    """

    D: th.Tensor
    pi: th.Tensor | None = None
    sa: th.Tensor | None = None
    _W: th.Tensor | None = None
    _W_lean: bool = False
    _entropy_bound: float | None = None

    def sa_occupancy(self) -> th.Tensor:
        """``(H, S, A)`` state-action occupancy ``w[t, s, a]`` (materialised on request)."""
        if self.sa is not None:
            return self.sa
        assert self.pi is not None
        pi = self.pi if self.pi.ndim == 3 else self.pi.unsqueeze(0)
        return self.D.unsqueeze(-1) * pi

    def w(self, t: int) -> tuple[th.Tensor, th.Tensor]:
        """``(w[t] (S, A), its state marginal (S,))``."""
        if self.sa is not None:
            return self.sa[t], self.D[t]
        assert self.pi is not None
        pi = self.pi if self.pi.ndim == 2 else self.pi[t]
        return self.D[t].unsqueeze(-1) * pi, self.D[t]

    def weights(self) -> th.Tensor | None:
        """Cached action-major ``(H, A * S)`` occupancy (column ``a * S + s``) when it fits in
        ``_W_BYTES``, else None (computed per step)."""
        if self._W is None and not self._W_lean:
            H, S = self.D.shape
            src = self.pi if self.pi is not None else self.sa
            assert src is not None
            A = src.shape[-1]
            if H * S * A * self.D.element_size() <= _W_BYTES:
                self._W = self.sa_occupancy().transpose(-1, -2).reshape(H, A * S).contiguous()
            else:
                self._W_lean = True
        return self._W

    def w_am(self, t: int) -> tuple[th.Tensor, th.Tensor]:
        """``(w[t]`` action-major ``(A * S,)``, its state marginal ``(S,))``."""
        W = self.weights()
        if W is not None:
            return W[t], self.D[t]
        w, wS = self.w(t)
        return w.T.reshape(-1), wS

    def entropy_bound(self) -> float:
        """``sum_t E_w[log pi_t(a | s)]``, minus the behaviour's causal entropy: by Gibbs'
        inequality no model's ``L`` exceeds it (see
        :meth:`imitation_meg.core.known.MEGObjective.limit_upper_bound`)."""
        if self._entropy_bound is None:
            # From the policy (no (H, S, A) occupancy is formed) or from the occupancy.
            if self.pi is not None:
                p = self.pi
                plogp = th.where(p > 0, p * p.log(), p.new_zeros(())).sum(-1)  # (S,) or (H, S)
                D = self.D if plogp.ndim == 2 else self.D.sum(0)
                self._entropy_bound = float((D * plogp).sum(dtype=th.float64))
            else:
                assert self.sa is not None
                w, D = self.sa, self.D.unsqueeze(-1)
                ratio = th.where(w > 0, w / th.where(D > 0, D, 1.0), 1.0)
                self._entropy_bound = float((w * ratio.log()).sum(dtype=th.float64))
        return self._entropy_bound


@dataclasses.dataclass(eq=False)
class PassBuffers:
    """Buffers and per-step views of a fused pass over ``K`` betas (``R = 3K`` or ``2K`` columns).

    Small MDPs (``hist``) keep every step's rows ``(H, A * S, R)`` and carries
    ``(H + 1, S, R)``; otherwise one slot of each is reused and accumulated per step.
    """

    hist: bool
    prod: Products
    C: th.Tensor  # (A * S, R) the constant of the backup: [beta r | r | 0]
    Qh: th.Tensor  # (n, A * S, R): [Q | G | d2Q] of step t, then [Q | G - g | d2Q]
    Xh: th.Tensor  # (n + 1, S, R): carries [V | g | h] (slot n is never read)
    LPh: th.Tensor  # (n, A, S, K): log pi of step t
    P: th.Tensor  # (A, S, K) probabilities of the step
    T: th.Tensor  # (A, S, K) temporary
    m: th.Tensor  # (1, S, K) max over actions
    z: th.Tensor  # (1, S, K) max log pi
    acc: th.Tensor  # (R,): [L | dL | first part of d2L]
    Q: list[th.Tensor]  # per step (A * S, R)
    q: list[th.Tensor]  # per step (A, S, K) views: Q
    G: list[th.Tensor]  # per step (A, S, K) views: G
    d2Q: list[th.Tensor] | None  # per step (A, S, K) views: d2Q
    X: list[th.Tensor]  # per step (S, R) carries
    V: list[th.Tensor]  # per step (1, S, K) views: V
    g: list[th.Tensor]  # per step (1, S, K) views: g
    h: list[th.Tensor] | None  # per step (1, S, K) views: h
    Q_ops: Operands  # the rows as the products take them
    X_ops: Operands  # the carries as the products take them
    C_op: Array  # the constant as the products take it


def _wsum(acc: th.Tensor, M: th.Tensor, w: th.Tensor, alpha: float = 1.0) -> None:
    """``acc += alpha * w @ M`` for ``M (n, c)``, ``w (n,)``, accumulated in ``acc``'s float64
    whatever ``M``'s dtype: float32 sums of ~1e5 terms drift by ~1e-3 relative (0.1 nat of L on
    a 2e4-state MDP)."""
    if M.dtype == acc.dtype:
        acc.addmv_(M.T, w, alpha=alpha)
    else:
        acc.add_((M * w.unsqueeze(-1)).sum(0, dtype=acc.dtype), alpha=alpha)


def _wsum_steps(W: th.Tensor, X: th.Tensor, acc_dtype: th.dtype) -> th.Tensor:
    """``sum_t W[t] @ X[t]`` for ``W (H, n)``, ``X (H, n, c)``: ``(c,)`` in ``acc_dtype``."""
    if X.dtype == acc_dtype:
        return th.bmm(W.unsqueeze(1), X).sum(0).view(-1)
    return (W.unsqueeze(-1) * X).sum((0, 1), dtype=acc_dtype)


def _dot64(p: th.Tensor, x: th.Tensor) -> th.Tensor:
    """``p @ x`` accumulated in float64 (``(S,)`` with ``(S, c)``)."""
    if x.dtype == th.float64:
        return p @ x
    return (p.unsqueeze(-1) * x).sum(0, dtype=th.float64)


def _pass_buffers(
    mdp: PassMDP, r: th.Tensor, W: th.Tensor | None, K: int, second: bool
) -> PassBuffers:
    """The buffers of a pass over ``K`` betas; kept on the MDP's operator for the next pass with
    the same ``K`` when small (creating them costs about as much as a few steps)."""
    H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
    blocks = 3 if second else 2  # [Q | G | d2Q] or [Q | G]
    SA, R = S * A, blocks * K
    hist = (
        W is not None
        and H <= _HIST_MAX_STEPS
        and H * R * (SA + S) * r.element_size() <= _HIST_BYTES
    )
    # Kept per operator (shared by copies with another horizon: H is in the key), layout and
    # dtype (the operator adds the thread); the buffers are overwritten by every pass and the
    # constant's utility block is refilled by each pass.
    key = ("meg_pass", H, K, second, hist, r.dtype)
    ws = mdp.operator.workspace(key)
    if ws is not None:
        return ws
    n = H if hist else 1
    prod = mdp.operator.products(r.dtype, R)
    C = r.new_zeros(SA, R)
    Qh = r.new_empty(n, SA, R)
    Xh = r.new_empty(n + 1, S, R)
    Qv = Qh.view(n, A, S, R)
    Xv = Xh.view(n + 1, 1, S, R)
    LPh = r.new_empty(n, A, S, K)

    def cols(v: th.Tensor, c: int) -> list[th.Tensor]:
        return list(v[..., c * K : (c + 1) * K].unbind(0))

    ws = PassBuffers(
        hist=hist,
        prod=prod,
        C=C,
        Qh=Qh,
        Xh=Xh,
        LPh=LPh,
        P=r.new_empty(A, S, K),
        T=r.new_empty(A, S, K),
        m=r.new_empty(1, S, K),
        z=r.new_empty(1, S, K),
        acc=th.empty(R, dtype=th.float64, device=r.device),
        Q=list(Qh.unbind(0)),
        q=cols(Qv, 0),
        G=cols(Qv, 1),
        d2Q=cols(Qv, 2) if second else None,
        X=list(Xh.unbind(0)),
        V=cols(Xv, 0),
        g=cols(Xv, 1),
        h=cols(Xv, 2) if second else None,
        Q_ops=prod.operands(Qh, R),
        X_ops=prod.operands(Xh, R),
        C_op=prod.operands(C.unsqueeze(0), R)[0],
    )
    if hist and (Qh.numel() + Xh.numel() + LPh.numel()) * r.element_size() <= _WS_KEEP_BYTES:
        mdp.operator.keep_workspace(key, ws)
    return ws


def derivative_pass(
    mdp: PassMDP, r: th.Tensor, beh: Behaviour, betas: th.Tensor, *, second: bool = True
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """One fused backward pass for finite ``betas (K,)``: ``(L, dL, d2L, model_eu, dmodel_eu)``,
    each ``(K,)`` (``d2L`` and ``dmodel_eu`` NaN and no ``d2Q`` / ``h`` columns when ``second``
    is False: 9 instead of 12 calls per step).

    ``log pi`` is one ``log_softmax`` into its own buffer (``V`` is ``Q`` minus it at the best
    action: ``max Q - max log pi``), and the columns ``[G | d2Q]`` become ``[G - g | d2Q]`` in
    place, so that products with the occupancy accumulate ``L``, ``dL`` and the first part of
    ``d2L``. Rows are action-major (``(A, S, 3K)`` blocks, reductions over the leading action
    axis).
    """
    if _fused.usable(mdp, r):  # numba on CPU: large sparse MDPs (a loop per step) or small ones
        return _fused.derivative_pass(mdp, r, beh, betas, second=second)
    return _torch_derivative_pass(mdp, r, beh, betas, second)


def _torch_derivative_pass(
    mdp: PassMDP, r: th.Tensor, beh: Behaviour, betas: th.Tensor, second: bool
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """:func:`derivative_pass` in torch's kernels."""
    K = betas.numel()
    H = mdp.steps
    W = beh.weights()
    ws = _pass_buffers(mdp, r, W, K, second)
    prod, C, acc = ws.prod, ws.C, ws.acc
    P, T, m, z = ws.P, ws.T, ws.m, ws.z
    rf = r.T.reshape(-1, 1)
    C[:, :K] = rf * betas.view(1, K)
    C[:, K : 2 * K] = rf
    acc.zero_()
    d2L_acc = acc[2 * K :]
    gamma = mdp.discount
    steps = progress(
        range(H - 1, -1, -1), enabled=_long(mdp, 3 * K), desc=f"MEG pass ({K} betas)", total=H
    )
    for t in steps:
        i, j = (t, t + 1) if ws.hist else (0, 0)  # this step's slot, the carry's slot
        Qb, q, G = ws.Q[i], ws.q[i], ws.G[i]
        if t == H - 1:
            Qb.copy_(C)
        else:
            prod.backup(ws.Q_ops[i], ws.X_ops[j], ws.C_op, gamma)
        lp = ws.LPh[i]
        th.amax(q, 0, keepdim=True, out=m)
        th.log_softmax(q, 0, out=lp)
        th.exp(lp, out=P)
        # The best action's log-probability is -log sum_a exp(q - m): V = m - max_a log pi.
        th.amax(lp, 0, keepdim=True, out=z)
        th.sub(m, z, out=ws.V[i])
        th.mul(G, P, out=T)
        g = ws.g[i]
        th.sum(T, 0, keepdim=True, out=g)  # g = E_pi[G]
        G.sub_(g)  # G - g
        if second:
            assert ws.d2Q is not None and ws.h is not None
            th.addcmul(ws.d2Q[i], G, G, out=T)
            T.mul_(P)
            th.sum(T, 0, keepdim=True, out=ws.h[i])  # h = E_pi[d2Q] + Var_pi(G)
        if not ws.hist:
            wf, wS = (W[t], beh.D[t]) if W is not None else beh.w_am(t)
            _wsum(acc[K:], Qb[:, K:], wf)
            _wsum(acc[:K], lp.view(-1, K), wf)
            if second:
                assert ws.h is not None
                _wsum(d2L_acc, ws.h[i][0], wS, alpha=-1.0)
    if ws.hist:
        assert W is not None
        acc[K:] += _wsum_steps(W, ws.Qh[..., K:], acc.dtype)
        acc[:K] += _wsum_steps(W, ws.LPh.view(H, -1, K), acc.dtype)
        if second:
            d2L_acc -= _wsum_steps(beh.D, ws.Xh[:H, :, 2 * K :], acc.dtype)
    p0 = mdp.initial_state_dist
    model_eu = _dot64(p0, ws.Xh[0, :, K : 2 * K])  # E_p0[g_0] = E_p0[dV_0 / dbeta]
    out = acc.clone()  # the workspace is reused by the next pass
    nan = th.full_like(out[:K], math.nan)
    d2L = out[2 * K : 3 * K] if second else nan
    deu = _dot64(p0, ws.Xh[0, :, 2 * K : 3 * K]) if second else nan  # E_p0[h_0]
    return out[:K], out[K : 2 * K], d2L, model_eu, deu


def zero_pass(
    mdp: PassMDP, r: th.Tensor, beh: Behaviour
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """The pass at ``beta = 0`` (the uniform policy): ``log pi = -log A`` needs no softmax.

    Carries ``[h | g] (S, 2)`` only: ``G = r + gamma E[g']``, ``g = mean_a G``, ``d2Q = gamma
    E[h']`` and ``h = mean_a (G - g)^2 + mean_a d2Q``. Same outputs as :func:`derivative_pass`.
    The carries hold sums over actions, ``[A h | A g]``, so that the means are plain sums (the
    backup and the accumulation take the ``1 / A`` as a factor).
    """
    if _fused.usable(mdp, r):  # the fused derivative pass at beta = 0 costs about the same
        return _fused.derivative_pass(mdp, r, beh, r.new_zeros(1), second=True)
    return _torch_zero_pass(mdp, r, beh)


def _torch_zero_pass(
    mdp: PassMDP, r: th.Tensor, beh: Behaviour
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """:func:`zero_pass` in torch's kernels."""
    H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
    SA = S * A
    W = beh.weights()
    hist = W is not None and H <= _HIST_MAX_STEPS
    n = H if hist else 1
    C = r.new_zeros(SA, 2)  # [0 | r] (action-major)
    C[:, 1] = r.T.reshape(SA)
    Qh = r.new_empty(n, SA, 2)  # [d2Q | G], then [d2Q | G - g]
    Xh = r.new_zeros(n + 1, S, 2)  # carries [A h | A g]
    T = r.new_empty(A, S)
    acc = th.zeros(2, dtype=th.float64, device=r.device)  # [first part of d2L | dL]
    Qv, Xv = Qh.view(n, A, S, 2), Xh.view(n + 1, 1, S, 2)
    Qs, d2Qs, Gs = Qh.unbind(0), Qv[..., 0].unbind(0), Qv[..., 1].unbind(0)
    Xs, hs, gs = Xh.unbind(0), Xv[..., 0].unbind(0), Xv[..., 1].unbind(0)
    gamma, inv_a = mdp.discount / A, 1.0 / A
    prod = mdp.operator.products(r.dtype, 2)
    Q_ops, X_ops = prod.operands(Qh, 2), prod.operands(Xh, 2)
    C_op = prod.operands(C.unsqueeze(0), 2)[0]
    steps = progress(
        range(H - 1, -1, -1), enabled=_long(mdp, 2), desc="MEG pass (beta = 0)", total=H
    )
    for t in steps:
        i, j = (t, t + 1) if hist else (0, 0)  # this step's slot, the carry's slot
        Qb, G, g = Qs[i], Gs[i], gs[i]
        if t == H - 1:
            Qb.copy_(C)
        else:
            prod.backup(Q_ops[i], X_ops[j], C_op, gamma)
        th.sum(G, 0, keepdim=True, out=g)
        G.sub_(g, alpha=inv_a)
        th.addcmul(d2Qs[i], G, G, out=T)
        th.sum(T, 0, keepdim=True, out=hs[i])  # A h = sum_a d2Q + sum_a (G - g)^2
        if not hist:
            wf, wS = beh.w_am(t)
            _wsum(acc, Qb, wf)
            _wsum(acc[0:1], Xs[i][:, 0:1], wS, alpha=-inv_a)
    if hist:
        assert W is not None
        acc += _wsum_steps(W, Qh, acc.dtype)
        acc[0:1] -= inv_a * _wsum_steps(beh.D, Xh[:H, :, 0:1], acc.dtype)
    L = (-math.log(A)) * beh.D.sum(dtype=th.float64).reshape(1)  # sum_t sum_s D_t(s) log(1/A)
    p0 = mdp.initial_state_dist
    return (
        L,
        acc[1:2],
        acc[0:1],
        _dot64(p0, Xh[0, :, 1:2]) * inv_a,
        _dot64(p0, Xh[0, :, 0:1]) * inv_a,
    )


def limit_pass(
    mdp: PassMDP, r: th.Tensor, beh: Behaviour, signs: tuple[float, ...] = (1.0, -1.0)
) -> dict[float, tuple[float, float, float]]:
    """The limits at ``beta = sign * inf`` in one hard backward pass (both signs as columns).

    For ``u = sign * r``, ``Q_beta,t = beta Q*_t + q1_t + o(1)`` with hard values ``Q*``, the
    tie sets ``T_t(s)`` of :func:`~imitation_meg.core.kernels.limits.tie_set` and the finite part
    ``q1_t = gamma E[v1_{t+1}]``, ``v1_t = logsumexp_{a in T_t} q1_t`` (``v1_H = 0``): the step
    :func:`~imitation_meg.core.kernels.limits.limit_step`, whose reference loop is
    :func:`~imitation_meg.core.soft_vi.limit_value_iteration`. So the soft policies tend to
    ``softmax(q1_t)`` over the ties (ties weighted by the causal entropy after them), and

    - ``L``, the limit of ``L(beta)``: ``sum_t E_w[log softmax_T(q1_t)]`` (``-inf`` when ``w``
      leaves the ties);
    - the model's expected utility ``sign * E_p0[V*_0]`` (the limit policies are optimal for
      ``u``);
    - the limit of ``dL/dbeta``: ``G_t`` tends to ``Q*_t`` and ``g_t`` to ``V*_t``, so
      ``sign * dL/dbeta -> sum_t E_w[Q*_t - V*_t]`` (the behaviour's hard advantage, ``<= 0``; 0
      on the ties). It is 0 exactly when the behaviour stays on the ties, and then ``L``
      increases all the way to the limit.

    The carries ``[V* | v1]`` of the signs go through one product per step.

    Returns:
        ``{sign: (L, model_eu, dL)}``.
    """
    H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
    m = len(signs)
    sg = r.new_tensor(signs)
    C = r.new_zeros(A * S, 2 * m)  # [sign r ... | 0 ...] action-major
    C[:, :m] = r.T.reshape(A * S, 1) * sg
    Q = r.new_empty(A * S, 2 * m)
    X = r.new_zeros(S, 2 * m)  # carries [V* | v1] of step t + 1
    Qv, Xv = Q.view(A, S, 2 * m), X.view(1, S, 2 * m)
    Qh, q1 = Qv[..., :m], Qv[..., m:]
    acc = th.zeros(2 * m, dtype=th.float64, device=r.device)  # [L | advantage]
    W = beh.weights()
    prod = mdp.operator.products(r.dtype, 2 * m)
    steps = progress(range(H - 1, -1, -1), enabled=_long(mdp, 2 * m), desc="MEG limits", total=H)
    for t in steps:
        if t == H - 1:
            Q.copy_(C)
        else:
            prod.backup(Q, X, C, mdp.discount)
        lp_lim, best, v1 = limit_step(Qh, q1, 0)
        adv = th.where(th.isfinite(lp_lim), 0.0, Qh - best)
        Xv[..., :m] = best
        Xv[..., m:] = v1
        wf = W[t] if W is not None else beh.w_am(t)[0]
        lps = th.cat([lp_lim, adv], -1).view(A * S, 2 * m)
        lps.masked_fill_((wf == 0).unsqueeze(-1), 0.0)  # 0 * -inf: no mass, no term
        _wsum(acc, lps, wf)
    eus = _dot64(mdp.initial_state_dist, X[:, :m])
    return {
        s: (float(acc[j]), s * float(eus[j]), s * float(acc[m + j])) for j, s in enumerate(signs)
    }


def _long(mdp: PassMDP, columns: int) -> bool:
    """Whether a pass over ``columns`` value columns is long enough for a progress bar."""
    H = mdp.steps
    return long_pass(H, H * mdp.n_states * mdp.n_actions * columns)
