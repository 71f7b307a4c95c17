"""Known-utility MEG's objective ``L(beta)``: the fused passes and the plain reference loop.

:class:`MEGObjective` evaluates ``L``, ``dL/dbeta``, ``d2L/dbeta2`` and the model's expected
utility for a batch of betas in one fused pass
(:mod:`imitation_meg.core.kernels.known_passes`), with the exact limits at ``beta = +-inf``: the
:class:`~imitation_meg.core.beta.solver.BetaObjective` that :func:`imitation_meg.core.known.meg`
hands to the 1-D solver. :func:`objective_reference` computes the same by a plain loop over
time, the reference the passes are tested against. All are re-exported from
:mod:`imitation_meg.core.known`.
"""

from __future__ import annotations

import math

import torch as th

from imitation_meg._validation import as_policy, as_sa_occupancy
from imitation_meg.core.beta.solver import BetaEvaluation, LimitValue
from imitation_meg.core.kernels.known_passes import (
    Behaviour,
    derivative_pass,
    limit_pass,
    zero_pass,
)
from imitation_meg.core.kernels.limits import tie_set
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import occupancy_measures
from imitation_meg.type_aliases import ArrayLike, PolicyLike, UtilityLike

__all__ = ["MEGObjective", "objective_reference", "sa_occupancy_of"]

_BETAS_PER_PASS = 8
# Up to this many state-action pairs a pass over 8 betas costs about as much as one (per-step
# call overhead dominates: 10x4 CliffWorld 1.2 ms against 0.7 ms), and the solver batches; above
# it a pass costs about K times one (100x20: 115 ms against 24 ms for 8 betas) and the solver
# takes one Newton step per pass.
_BATCH_MAX_SA = 1 << 11
# Temporary-memory budget of one batched pass (about 16 (S, A) temporaries per beta).
_BATCH_BYTES = 1 << 28


class MEGObjective:
    """``L(beta)``, its derivatives and the model's expected utility for a fixed behaviour and
    utility: the known-utility :class:`~imitation_meg.core.beta.solver.BetaObjective`.

    The behaviour enters only through its state-action occupancy ``w[t, s, a] = P(s_t = s,
    a_t = a)``: either computed from a policy in the MDP's dynamics, or given directly (for
    example as empirical frequencies of trajectories).

    Args:
        mdp: the MDP.
        policy: ``(S, A)`` or ``(H, S, A)`` policy (validated); ignored if ``sa_occupancy`` is given.
        utility: utility (default the MDP's); reduced to ``r (S, A)``.
        sa_occupancy: optional ``(H, S, A)`` non-negative occupancy, each ``w[t]`` summing to 1.

    Attributes:
        behaviour: the behaviour's occupancy record (state occupancy ``D (H, S)`` and the policy
            or the state-action occupancy).
        expected_utility: ``E[sum_t gamma^t r(s_t, a_t)]`` under that occupancy.
        scale: the spread of ``r`` across actions (the natural unit of ``1 / beta``).
        utility_scale: ``H * scale``.
        L0: ``L(0) = -H log|A|``.
        eps: the relative precision of the passes (the MDP's dtype); the solver's tolerances
            are no finer than 10 of it.
        batch: the largest number of betas one pass evaluates (memory budget).
        evaluations: betas evaluated so far; passes: calls so far.
    """

    def __init__(
        self,
        mdp: TabularMDP,
        policy: PolicyLike | None = None,
        utility: UtilityLike | None = None,
        *,
        sa_occupancy: ArrayLike | None = None,
    ) -> None:
        self.mdp = mdp
        self.r = mdp.reward_sa(utility).detach()
        H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
        if sa_occupancy is not None:
            sa = as_sa_occupancy(sa_occupancy, mdp)
            self.behaviour = Behaviour(D=sa.sum(-1), sa=sa)  # (H, S) state marginals
        elif policy is not None:
            # Memory-lean form: state occupancy (H, S) and the policy, not (H, S, A).
            pi = as_policy(policy, mdp).to(mdp.dtype)
            self.behaviour = Behaviour(D=occupancy_measures(mdp, pi, validate=False)[:-1], pi=pi)
        else:
            raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
        beh = self.behaviour
        gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
        if beh.sa is not None:
            eu = (gam.view(H, 1, 1) * beh.sa * self.r).sum()
        elif beh.pi is not None and beh.pi.ndim == 2:
            eu = ((gam.view(H, 1) * beh.D).sum(0) * (beh.pi * self.r).sum(-1)).sum()
        else:
            assert beh.pi is not None
            eu = (gam.view(H, 1) * beh.D * (beh.pi * self.r).sum(-1)).sum()
        self.expected_utility = float(eu)
        self.scale = _scale(self.r)
        self.utility_scale = H * self.scale
        self.L0 = -H * math.log(A)
        self.eps = float(th.finfo(mdp.dtype).eps)  # the passes' precision (float32: 1.2e-7)
        self.evaluations = 0
        self.passes = 0
        self._limits: dict[float, tuple[float, float, float]] = {}
        self._limit_bound: float | None = None
        per_beta = 16 * S * A * self.r.element_size()
        self.batch = int(max(1, min(64, _BATCH_BYTES // max(per_beta, 1))))

    @property
    def betas_per_pass(self) -> int:
        """Betas per solver pass: at small ``S * A`` a pass costs about the same for 1 or 8
        betas (per-step overhead dominates); above ``_BATCH_MAX_SA`` one (a pass over K betas
        costs about K times one), and the memory budget ``batch`` may cap it further."""
        if self.mdp.n_states * self.mdp.n_actions > _BATCH_MAX_SA:
            return 1
        return max(1, min(self.batch, _BETAS_PER_PASS))

    @property
    def sa_occupancy(self) -> th.Tensor:
        """``(H, S, A)`` state-action occupancy ``w[t, s, a]`` (materialised on request)."""
        return self.behaviour.sa_occupancy()

    def evaluate(self, betas: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Evaluate finite betas ``(K,)`` in batches.

        Returns:
            ``(L (K,), dL (K,), model_expected_utility (K,))``.
        """
        L, dL, _, eu, _ = self.evaluate_batch(betas)
        return L, dL, eu

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """Like :meth:`evaluate`, with the exact second derivative (NaN with ``second=False``,
        a cheaper pass: 9 instead of 12 calls per step).

        Returns:
            :class:`~imitation_meg.core.beta.solver.BetaEvaluation` ``(L, dL, d2L, model_eu,
            dmodel_eu)``, each ``(K,)``.
        """
        betas = betas.to(dtype=self.mdp.dtype, device=self.mdp.device).reshape(-1)
        outs = []
        for i in range(0, betas.numel(), self.batch):
            chunk = betas[i : i + self.batch]
            self.evaluations += chunk.numel()
            self.passes += 1
            outs.append(derivative_pass(self.mdp, self.r, self.behaviour, chunk, second=second))
        if len(outs) == 1:
            return BetaEvaluation(*outs[0])
        return BetaEvaluation(*(th.cat([o[j] for o in outs]) for j in range(5)))

    def evaluate2(
        self, betas: th.Tensor, *, second: bool = True
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """The former form of :meth:`evaluate_batch`: ``(L, dL, d2L, model_expected_utility)``."""
        ev = self.evaluate_batch(betas, second=second)
        return ev.L, ev.dL, ev.d2L, ev.model_eu

    def evaluate_zero(self) -> BetaEvaluation:
        """The pass at ``beta = 0`` (the uniform policy; cheaper than :meth:`evaluate_batch`)."""
        self.evaluations += 1
        self.passes += 1
        return BetaEvaluation(*zero_pass(self.mdp, self.r, self.behaviour))

    def limit_upper_bound(self) -> float:
        """An upper bound on ``L`` at ``beta = +inf`` and ``-inf``, from the behaviour alone.

        By Gibbs' inequality no model's ``L`` exceeds ``sum_t E_w[log pi_t]`` (minus the
        behaviour's causal entropy). The limits are ``-inf`` unless the behaviour stays on each
        limit's tie sets; at the last two steps those cost one product, not a pass
        (``Q*_{H-1} = +-u``, one hard backup for ``H - 2``): a behaviour that puts mass off the
        best actions and off the worst ones there has ``L = -inf`` at both limits (e.g. a
        softmax policy, or an epsilon-greedy one), and the solver skips the limit pass.
        """
        if self._limit_bound is None:
            bound = self.behaviour.entropy_bound()
            # Only where the bound would ask for a hard pass (it beats L(0) = -H log A).
            if bound > self.L0 + 1e-12 * abs(self.L0) and self._leaves_the_last_ties():
                bound = -math.inf
            self._limit_bound = bound
        return self._limit_bound

    def _leaves_the_last_ties(self) -> bool:
        """Whether the behaviour's last two steps put mass off the ties of ``u`` and (maybe at
        another step) off the ties of ``-u``: the tie sets of
        :func:`~imitation_meg.core.kernels.known_passes.limit_pass` at ``t = H - 1`` (``Q* = +-u``) and
        ``t = H - 2`` (one hard backup of both signs: one product, not a pass)."""
        mdp, H = self.mdp, self.mdp.steps
        u = th.stack([self.r, -self.r])  # (2, S, A)
        off = [False, False]
        V: th.Tensor | None = None  # hard values of step t + 1, (2, S)
        for t in range(H - 1, max(H - 3, -1), -1):
            Q = u if V is None else u + mdp.discount * mdp.expect_next(V)
            w, _ = self.behaviour.w(t)
            ties, best = tie_set(Q)
            leaves = ((w > 0) & ~ties).flatten(1).any(-1)  # (2,)
            off = [off[0] or bool(leaves[0]), off[1] or bool(leaves[1])]
            if all(off):
                return True
            V = best.squeeze(-1)
        return False

    def evaluate_limit(self, sign: float) -> LimitValue:
        """The limits of ``L(beta)``, of the model's expected utility and of ``dL/dbeta`` as
        ``beta -> sign * inf``, exact (see :func:`imitation_meg.core.kernels.known_passes.limit_pass`: ties
        weighted by the causal entropy after them, as the soft policies do in the limit).

        Small MDPs compute both signs in one hard backward pass and cache them; large ones
        (bandwidth-bound passes) the requested sign.
        """
        sign = 1.0 if sign > 0 else -1.0
        if sign not in self._limits:
            self.passes += 1
            mdp = self.mdp
            both = mdp.n_states * mdp.n_actions <= _BATCH_MAX_SA
            self._limits.update(
                limit_pass(mdp, self.r, self.behaviour, (1.0, -1.0) if both else (sign,))
            )
        return LimitValue(*self._limits[sign])


def objective_reference(
    mdp: TabularMDP, sa_occupancy: th.Tensor, beta: float, utility: UtilityLike | None = None
) -> tuple[float, float, float, float]:
    """``L``, ``dL/dbeta``, ``d2L/dbeta2`` and the model's expected utility at one finite beta,
    as a plain loop over time: the reference the fast passes are tested against.

    With ``V_H = g_H = h_H = 0``, for ``t = H - 1 .. 0``::

        Q_t   = beta r + gamma E[V_{t+1}]        V_t = logsumexp_a Q_t,   pi_t = softmax_a Q_t
        G_t   = r + gamma E[g_{t+1}]             g_t = E_pi_t[G_t]                 (dQ, dV)
        d2Q_t = gamma E[h_{t+1}]                 h_t = Var_pi_t(G_t) + E_pi_t[d2Q_t]  (d2Q, d2V)
        L    += E_w[Q_t - V_t],   dL += E_w[G_t - g_t],   d2L += E_w[d2Q_t - h_t]

    and the model's expected utility is ``E_p0[g_0]``.

    Args:
        mdp: the MDP.
        sa_occupancy: the behaviour's ``(H, S, A)`` occupancy ``w``.
        beta: a finite rationality.
        utility: utility (default the MDP's).

    Returns:
        ``(L, dL, d2L, model_eu)`` as floats.
    """
    r = mdp.reward_sa(utility)
    S = mdp.n_states
    gamma = mdp.discount
    V, g, h = (r.new_zeros(S) for _ in range(3))
    L = dL = d2L = 0.0
    for t in reversed(range(mdp.steps)):
        Q = beta * r + gamma * mdp.expect_next(V)
        G = r + gamma * mdp.expect_next(g)
        d2Q = gamma * mdp.expect_next(h)
        log_pi = th.log_softmax(Q, -1)
        pi = log_pi.exp()
        V = th.logsumexp(Q, -1)
        g = (pi * G).sum(-1)
        dev = G - g.unsqueeze(-1)
        h = (pi * dev**2).sum(-1) + (pi * d2Q).sum(-1)
        w = sa_occupancy[t]
        L += float((w * log_pi).sum())
        dL += float((w * dev).sum())
        d2L += float((w * d2Q).sum() - (w.sum(-1) * h).sum())
    return L, dL, d2L, float(mdp.initial_state_dist @ g)


def sa_occupancy_of(mdp: TabularMDP, policy: PolicyLike) -> th.Tensor:
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
