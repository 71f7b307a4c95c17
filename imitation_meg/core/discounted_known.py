"""Known-utility MEG in a discounted infinite-horizon MDP: the objective ``L(beta)``.

:class:`DiscountedMEGObjective` is the :class:`~imitation_meg.core.beta.solver.BetaObjective`
of a stationary behaviour in a discounted MDP, built on the stationary soft values, policy
evaluations and limit policies of :mod:`imitation_meg.core.discounted`;
:func:`imitation_meg.core.known.meg` hands it to the 1-D solver.
"""

from __future__ import annotations

import math

import numpy as np
import torch as th

from imitation_meg.core.beta.solver import BetaEvaluation, LimitValue
from imitation_meg.core.discounted import (
    Dynamics,
    _wlog,
    limit_policy,
    occupancy,
    soft_values,
)
from imitation_meg.core.mdp import TabularMDP

__all__ = ["DiscountedMEGObjective"]


class DiscountedMEGObjective:
    """``L(beta)`` of a stationary behaviour in a discounted MDP: the
    :class:`~imitation_meg.core.beta.solver.BetaObjective` of known-utility MEG in this setting.

    Args:
        mdp: a discounted MDP (``horizon=None``).
        policy: ``(S, A)`` stationary behaviour (validated by the caller).
        r: ``(S, A)`` the (normalised) per-step reward.
    """

    betas_per_pass = 1
    eps = 1e-13  # relative precision of the Newton fixed points and linear solves

    def __init__(self, mdp: TabularMDP, policy: np.ndarray, r: np.ndarray) -> None:
        self.dyn = Dynamics.of(mdp)
        self.pi_b, self.r = policy, r
        self.d = occupancy(self.dyn, policy)  # (S,) sums to 1 / (1 - gamma)
        self.w = self.d[:, None] * policy  # (S, A) discounted state-action occupancy
        self.expected_utility = float((self.w * r).sum())
        spread = float((r.max(-1) - r.min(-1)).max()) if r.size else 0.0
        self.scale = spread if spread > 1e-9 * float(np.ptp(r)) else float(np.ptp(r))
        self.utility_scale = self.scale / (1.0 - self.dyn.gamma)
        self.L0 = -math.log(self.dyn.A) / (1.0 - self.dyn.gamma)
        self.evaluations = 0
        self.passes = 1
        self._V: np.ndarray | None = None  # warm start: the last beta's values
        self._beta = 0.0
        self._limits: dict[float, LimitValue] = {}

    def _one(self, beta: float, second: bool) -> tuple[float, float, float, float, float]:
        dyn = self.dyn
        V0 = None
        if self._V is not None and self._beta != 0.0:  # values scale about linearly in beta
            V0 = self._V * (beta / self._beta) if beta * self._beta > 0 else None
        sv = soft_values(dyn, self.r, beta, V0=V0)
        self._V, self._beta = sv.V, beta
        pi = np.exp(sv.log_pi)
        solver = dyn.solver(pi)
        g = solver.solve((pi * self.r).sum(-1))  # dV/dbeta: the model's discounted return
        G = self.r + dyn.gamma * dyn.expect(g)  # dQ/dbeta
        L = _wlog(self.w, sv.log_pi)
        dL = float((self.w * (G - g[:, None])).sum())
        eu = float(dyn.p0 @ g)
        if not second:
            return L, dL, math.nan, eu, math.nan
        var = (pi * (G - g[:, None]) ** 2).sum(-1)
        h = solver.solve(var)  # d2V/dbeta2
        eu2 = float(dyn.p0 @ h)
        return L, dL, -eu2, eu, eu2

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """Finite ``betas (K,)`` -> :class:`~imitation_meg.core.beta.solver.BetaEvaluation`."""
        vals = [self._one(float(b), second) for b in betas.reshape(-1).tolist()]
        self.evaluations += len(vals)
        self.passes += len(vals)
        out = th.tensor(vals, dtype=th.float64).reshape(-1, 5)
        return BetaEvaluation(out[:, 0], out[:, 1], out[:, 2], out[:, 3], out[:, 4])

    def evaluate_zero(self) -> BetaEvaluation:
        """``beta = 0``: the uniform model (``L(0) = L0`` exactly)."""
        ev = self.evaluate_batch(th.zeros(1, dtype=th.float64))
        return BetaEvaluation(th.full_like(ev.L, self.L0), ev.dL, ev.d2L, ev.model_eu, ev.dmodel_eu)

    def evaluate_limit(self, sign: float) -> LimitValue:
        """The limits of ``L``, of the model's expected utility and of ``dL/dbeta`` at
        ``beta = sign * inf`` (exact: policy iteration, then the tie-weighting soft values)."""
        sign = 1.0 if sign > 0 else -1.0
        if sign not in self._limits:
            self.passes += 1
            lp, Q, V = limit_policy(self.dyn, self.r, sign)
            adv = float((self.w * (Q - V[:, None])).sum())  # <= 0: the hard advantage
            self._limits[sign] = LimitValue(
                _wlog(self.w, lp), sign * float(self.dyn.p0 @ V), sign * adv
            )
        return self._limits[sign]

    def limit_upper_bound(self) -> float:
        """Gibbs: no model's ``L`` exceeds the behaviour's own, ``sum d pi log pi``."""
        return _wlog(self.w, np.log(np.where(self.pi_b > 0, self.pi_b, 1.0)))
