"""Exact unknown-utility MEG over a linear class of utilities on a :class:`ContinuousMDP`.

For utilities ``U_theta(s, a) = phi(s, a) . theta`` (features ``phi``, ``theta in R^F``) the
rationality is absorbed into ``theta`` and

    MEG_Phi(pi) = sup_theta L(theta),   L(theta) = E_pi[ sum_t log(pi_theta,t(a_t | s_t) / u(a_t)) ],

with ``pi_theta`` the soft-optimal policy (``beta = 1``) of ``U_theta``. **It stays concave**, as
in the discrete case: with ``q_t = phi . theta + E[v_{t+1}]`` and ``v_t = log int u exp(q_t)``,
the behaviour's own dynamics telescope ``L`` to
``theta . E_pi[sum_t phi] - E_{s_0 ~ p0}[v_0(s_0; theta)]``, and ``v_0`` is convex in ``theta``
(by induction: ``q_t`` is ``theta``-linear plus a non-negative mixture of convex ``v_{t+1}``, and
``log int u exp(.)`` of convex functions is convex; the integral over the box changes nothing
in the argument). The gradient is ``E_pi[sum_t phi] - E_{pi_theta}[sum_t phi]`` and the Hessian
``-sum_t E_{pi_theta}[Cov_{a ~ pi_theta,t}(G_t(s, a))]`` with ``G_t`` the feature-to-go of
``pi_theta``, both computed exactly (for the problem at one quadrature rule). Newton's method with
a backtracking line search (pseudo-inverse on the flat directions, e.g. a feature that does not
vary) maximises it.

**The supremum is attained** for a behaviour with a density: along any direction ``d`` whose
utility varies with the action at a state the behaviour visits, the models concentrate and
``L(theta + t d) -> -inf`` (see :mod:`imitation_meg.continuous.known`); along the others ``L`` is
constant. So no limit directions arise (unlike the discrete case, where a behaviour on the
argmax of some utility has its supremum at infinity); a solve that does not converge in
``max_iter`` Newton steps is reported (``converged=False`` with a warning).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import torch as th

from imitation_meg.continuous.known import (
    ContinuousMEGWarning,
    _at,
    _behaviour_tables,
    _occupancy,
    check_accuracy,
    check_problem,
)
from imitation_meg.continuous.mdp import ContinuousMDP, Fn, numeric
from imitation_meg.continuous.policies import ContinuousPolicy, TabularRule
from imitation_meg.continuous.soft_vi import model_tables, soft_mean
from imitation_meg.results import fields_dict
from imitation_meg.type_aliases import ArrayLike

__all__ = ["ContinuousUnknownResult", "LinearClassObjective", "meg_continuous_unknown"]

#: Features of a linear utility class: ``"state"`` (one-hot), a state-feature table ``(S, F)``
#: or a callable ``(states (M,), actions (M, d)) -> (M, F)``.
FeaturesLike = str | ArrayLike | Fn


class _Features:
    """Features as a utility-like callable returning ``(M, F)``."""

    def __init__(self, fn: FeaturesLike, n_states: int) -> None:
        if isinstance(fn, str):
            if fn != "state":
                raise ValueError(
                    f"features must be 'state', an (S, F) array or a callable, got {fn!r}."
                )
            fn = np.eye(n_states)
        if callable(fn):
            self.fn = fn
        else:
            table = th.as_tensor(numeric(fn, "features"))
            if table.ndim != 2 or table.shape[0] != n_states:
                raise ValueError(
                    f"state features must be (S, F) with S = {n_states}, got {tuple(table.shape)}."
                )
            self.fn = lambda s, a: table[s]

    def __call__(self, states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        out = th.as_tensor(self.fn(states, actions), dtype=th.float64)
        if out.ndim == 1:
            out = out.unsqueeze(1)
        if out.shape[0] != states.shape[0] or not bool(th.isfinite(out).all()):
            raise ValueError(
                f"features must return finite (M, F) = ({states.shape[0]}, F), got {tuple(out.shape)}."
            )
        return out


class LinearClassObjective:
    """``L(theta)`` with its exact gradient and Hessian at one quadrature rule.

    Features are rescaled to unit spread (``theta`` is reported in the caller's units);
    features constant over every state and action are dropped (they change no policy).

    Args:
        mdp, policy: as for :class:`~imitation_meg.continuous.ContinuousMEGObjective`.
        features: ``(states, actions) -> (M, F)``, a state-feature table ``(S, F)``, or
            ``"state"`` (one-hot: every utility of the state).
        level: the quadrature refinement.
    """

    def __init__(
        self,
        mdp: ContinuousMDP,
        policy: ContinuousPolicy,
        features: FeaturesLike,
        *,
        level: int = 0,
    ) -> None:
        check_problem(policy, mdp, "LinearClassObjective", "imitation_meg.meg_unknown")
        feats = _Features(features, mdp.n_states)
        S = mdp.n_states
        rule = policy.rule(mdp, level)
        rule = TabularRule(
            rule.points.to(th.float64), rule.weights.to(th.float64), rule.kl.to(th.float64), True
        )
        # the model and behaviour tables of each feature, as utilities
        _, Tm, log_w, points = model_tables(mdp, lambda s, a: th.zeros(s.shape[0]), level)
        N = points.shape[0]
        phim = feats(th.arange(S).repeat_interleave(N), points.repeat(S, 1))
        F = phim.shape[1]
        phim = phim.view(S, N, F)
        pts = (
            rule.points[:1]
            if rule.points.shape[0] > 1 and rule.points.stride(0) == 0
            else rule.points
        )
        Tn, _, M, d = pts.shape
        phib = feats(th.arange(S).repeat_interleave(M).repeat(Tn), pts.reshape(-1, d)).view(
            Tn, S, M, F
        )
        _, Tb = _behaviour_tables(mdp, rule, lambda s, a: th.zeros(s.shape[0]))
        spread = (phim.amax((0, 1)) - phim.amin((0, 1))).numpy()
        self.keep = np.flatnonzero(spread > 0)
        self.n_features = F
        self.col_scale = th.as_tensor(spread[self.keep])
        self.phim = phim[..., self.keep] / self.col_scale
        self.phib = phib[..., self.keep] / self.col_scale
        self.Tm, self.log_w, self.Tb = Tm, log_w, Tb
        self.pb = rule.weights
        self.D = _occupancy(mdp, rule.weights, Tb)
        self.mdp = mdp
        H = mdp.horizon
        self.own = sum(
            (
                self.D[t].view(-1, 1) * (_at(self.pb, t).unsqueeze(-1) * _at(self.phib, t)).sum(1)
            ).sum(0)
            for t in range(H)
        )
        self.certificate = sum(float(self.D[t] @ _at(rule.kl, t)) for t in range(H))
        self.n_model_points = int(N)

    def evaluate(
        self, theta: th.Tensor, *, hessian: bool = True
    ) -> tuple[float, th.Tensor, th.Tensor]:
        """``L``, the gradient ``(F',)`` and the Hessian ``(F', F')`` (NaN without
        ``hessian``) at ``theta (F',)`` in the rescaled feature units."""
        one = th.ones(1, dtype=th.float64)
        rm = self.phim @ theta  # (S, N)
        S = self.mdp.n_states
        Fk = theta.shape[0]
        V = th.zeros(S, dtype=th.float64)
        G = th.zeros(S, Fk, dtype=th.float64)
        K = th.zeros(S, Fk, Fk, dtype=th.float64)
        L = 0.0
        for t in reversed(range(self.mdp.horizon)):
            Q = rm + self.Tm @ V
            Vt, logp = soft_mean(Q.unsqueeze(0), self.log_w, one)
            Vt, p = Vt[0], logp[0].exp()  # (S,), (S, N)
            Qb = _at(self.phib, t) @ theta + _at(self.Tb, t) @ V
            L += float(self.D[t] @ (_at(self.pb, t) * (Qb - Vt.unsqueeze(-1))).sum(-1))
            Gm = self.phim + th.einsum("snu,uf->snf", self.Tm, G)  # (S, N, F)
            Gt = (p.unsqueeze(-1) * Gm).sum(1)
            if hessian:
                dev = Gm - Gt.unsqueeze(1)
                Km = th.einsum("snu,ufg->snfg", self.Tm, K)
                K = th.einsum("sn,snfg->sfg", p, dev.unsqueeze(-1) * dev.unsqueeze(-2) + Km)
            G, V = Gt, Vt
        p0 = self.mdp.initial_state_dist
        grad = self.own - p0 @ G
        hess = -th.einsum("s,sfg->fg", p0, K) if hessian else th.full((Fk, Fk), math.nan)
        return L, grad, hess


@dataclasses.dataclass(frozen=True)
class ContinuousUnknownResult:
    """Unknown-utility MEG over a linear class.

    Attributes:
        meg: ``sup_theta L(theta)`` (nats, ``>= 0``).
        theta: ``(F,)`` the maximiser in the caller's feature units (0 for dropped constant
            features; defined up to the flat directions of ``L``).
        certificate: as for :class:`~imitation_meg.continuous.ContinuousMEGResult`.
        normalized: as for :class:`~imitation_meg.continuous.ContinuousMEGResult`.
        grad_norm: the gradient's norm at ``theta`` (rescaled units).
        converged: Newton's decrement fell below tolerance and the quadrature met ``tol``.
        iterations: Newton steps at the last level.
        quadrature_error: MEG difference between the last two rules.
        level: the rule's refinement level.
    """

    meg: float
    theta: np.ndarray
    certificate: float
    normalized: float
    grad_norm: float
    converged: bool
    iterations: int
    quadrature_error: float
    level: int

    to_dict = fields_dict


def _newton(obj: LinearClassObjective, max_iter: int) -> tuple[float, th.Tensor, float, bool, int]:
    """Maximise the concave ``L`` from ``theta = 0``: damped Newton steps (pseudo-inverse of
    ``-H`` with eigenvalues below ``1e-12`` of the largest treated as flat), halving the step
    until ``L`` rises. Converged when the Newton decrement ``g' (-H)^+ g / 2`` is below
    ``1e-13 max(1, |L|)``."""
    theta = th.zeros(len(obj.keep), dtype=th.float64)
    if theta.numel() == 0:
        return 0.0, theta, 0.0, True, 0
    L, g, Hm = obj.evaluate(theta)
    for it in range(1, max_iter + 1):
        w, U = th.linalg.eigh(-Hm)
        big = w > 1e-12 * max(float(w.max()), 1e-300)
        step = U[:, big] @ ((U[:, big].T @ g) / w[big])
        dec = 0.5 * float(g @ step)
        if dec <= 1e-13 * max(1.0, abs(L)):
            return L, theta, float(g.norm()), True, it - 1
        t = 1.0
        for _ in range(60):
            L_new, g_new, H_new = obj.evaluate(theta + t * step)
            if L_new >= L - 1e-15 * max(1.0, abs(L)):
                break
            t *= 0.5
        theta = theta + t * step
        L, g, Hm = L_new, g_new, H_new
    return L, theta, float(g.norm()), False, max_iter


def meg_continuous_unknown(
    policy: ContinuousPolicy,
    mdp: ContinuousMDP,
    features: FeaturesLike = "state",
    *,
    tol: float = 1e-10,
    max_level: int = 3,
    max_iter: int = 100,
) -> ContinuousUnknownResult:
    """Unknown-utility MEG of ``policy`` over the linear utilities of ``features``.

    Args:
        policy: a :class:`ContinuousPolicy` with densities.
        mdp: the MDP.
        features: ``"state"`` (every utility of the state), a state-feature table ``(S, F)``,
            or a callable ``(states (M,), actions (M, d)) -> (M, F)``.
        tol: the quadrature accuracy asked (relative to ``max(1, MEG)``), as in
            :func:`~imitation_meg.continuous.meg_continuous`.
        max_level: the most refinements of the rules.
        max_iter: Newton steps per level.

    Returns:
        :class:`ContinuousUnknownResult`.

    Raises:
        TypeError: an MDP that is no :class:`ContinuousMDP` (a ``TabularMDP`` is scored with
            :func:`imitation_meg.meg_unknown`), a policy that is no :class:`ContinuousPolicy`.
        ValueError: a non-positive ``tol``, ``max_level < 1``, ``max_iter < 1``; features,
            a policy or a utility that do not fit the MDP.

    Warns:
        ContinuousMEGWarning: Newton did not converge, or the quadrature did not reach ``tol``.
    """
    check_problem(policy, mdp, "meg_continuous_unknown", "imitation_meg.meg_unknown")
    check_accuracy(tol, max_level)
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}.")
    prev = math.nan
    err = math.inf
    for level in range(max_level + 1):
        obj = LinearClassObjective(mdp, policy, features, level=level)
        L, theta, gnorm, ok, iters = _newton(obj, max_iter)
        if level > 0:
            err = abs(L - prev)
            if err <= tol * max(1.0, abs(L)):
                break
        prev = L
    quad_ok = err <= tol * max(1.0, abs(L))
    if not (ok and quad_ok):
        why = (
            f"Newton did not converge in {max_iter} steps (gradient norm {gnorm:.3g})"
            if not ok
            else f"the last two quadrature rules differ by {err:.3g} nats"
        )
        warnings.warn(
            f"unknown-utility MEG of {policy.name}: {why}. Raise max_iter= / max_level=.",
            ContinuousMEGWarning,
            stacklevel=2,
        )
    full = np.zeros(obj.n_features)
    full[obj.keep] = (theta / obj.col_scale).numpy()
    cert = obj.certificate
    finite = math.isfinite(cert) and cert > 0
    return ContinuousUnknownResult(
        meg=max(L, 0.0),
        theta=full,
        certificate=cert,
        normalized=max(L, 0.0) / cert if finite else (math.nan if cert == math.inf else 0.0),
        grad_norm=gnorm,
        converged=bool(ok and quad_ok),
        iterations=iters,
        quadrature_error=float(err),
        level=level,
    )
