"""Known-utility MEG of a policy in a CID: the 1-D objective ``L(beta)`` with exact derivatives.

``L(beta) = E_pi[sum_D log pi_beta,D(D | Pa_D)]`` for the scored policy ``pi`` and the maximum
entropy policies ``pi_beta`` of :mod:`imitation_meg.cid.backward`; MEG is
``sup_{beta in R u {+-inf}} L(beta) + sum_D log |dom D|`` (paper Definitions 3.1-3.2, Theorem 5.1
generalised to CIDs with sufficient recall). :class:`CIDObjective` gives what the project's
1-D solver needs: the pass at ``beta = 0``, batched ``(L, dL, d2L, model expected utility)``,
the exact ``+-inf`` limits (the limits of the maximum entropy policies), an upper bound on the limits, and the natural
scale of ``1 / beta``.
"""

from __future__ import annotations

import math

import numpy as np
import torch as th

from imitation_meg.cid._infer import Factor
from imitation_meg.cid.backward import Engine
from imitation_meg.cid.model import CID, Policy, log_card
from imitation_meg.core.beta.solver import BetaEvaluation, LimitValue

__all__ = ["CIDObjective", "own_log_likelihood"]


def own_log_likelihood(
    cid: CID, family: dict[str, np.ndarray], policy: dict[str, np.ndarray]
) -> float:
    """``sum_D E_pi[log pi_D(D | Pa_D)]`` (minus the causal entropy) from the family marginals
    ``P_pi(Pa_D, D)``: by Gibbs' inequality no model's log-likelihood exceeds it."""
    total = 0.0
    for d in cid.decisions:
        w, p = family[d], policy[d]
        total += float(np.sum(np.where(w > 0, w * np.log(np.where(p > 0, p, 1.0)), 0.0)))
    return total


class CIDObjective:
    """``L(beta)``, ``dL/dbeta``, ``d2L/dbeta2`` and the limits for one policy and utility: a
    :class:`~imitation_meg.core.beta.solver.BetaObjective` for :func:`~imitation_meg.core.beta.solver.
    solve_beta`.

    Args:
        cid: the diagram; its utility variables define ``U`` (their sum).
        policy: decision rules for every decision (see :meth:`CID.validate_policy`).
        engine: a compiled :class:`~imitation_meg.cid.backward.Engine` of ``cid`` to reuse.

    Attributes:
        expected_utility: ``E_pi[U]``.
        uniform_expected_utility: ``E_uniform[U]``.
        upper_bound: ``sum_D log |dom D|``.
        evaluations: number of finite betas evaluated.

    Raises:
        InsufficientRecallError: the diagram cannot be solved by backward induction.
        ValueError / TypeError: an invalid policy.
    """

    def __init__(self, cid: CID, policy: Policy, *, engine: Engine | None = None) -> None:
        self.cid = cid
        self.policy = cid.validate_policy(policy)
        self.engine = engine if engine is not None else Engine(cid)
        eng = self.engine
        self.upper_bound = log_card(cid)
        self._u = [cid.utility_tables[u][..., None] for u in cid.utilities]
        # The scored policy's family marginals P_pi(Pa_D, D) (fixed for every beta).
        self.family = {
            d: eng.marginal(self.policy, eng.fam[d], key=("fam", d))[0] for d in cid.decisions
        }
        self.expected_utility = self._expected_utility(self.policy, "pi")
        self.uniform_expected_utility = self._expected_utility(cid.uniform_policy(), "pi")
        self.evaluations = 0
        self.passes = 0
        self._limits: dict[float, LimitValue] = {}
        self._limit_bound: float | None = None
        self._scale: float | None = None

    def _expected_utility(self, rules: Policy, key: str) -> float:
        eng = self.engine
        _, e = eng.marginal(
            rules,  # type: ignore[arg-type]
            (),
            eng.utility_factors(self._u),
            K=1,
            key=("eu", key),
        )
        return float(e[0])

    def _cross_entropy(self, log_rules: dict[str, np.ndarray]) -> float:
        """``E_pi[sum_D log rule_D]`` (``-inf`` if ``pi`` takes a decision the rule excludes)."""
        total = 0.0
        for d in self.cid.decisions:
            w = self.family[d]
            lr = log_rules[d]
            pos = w > 0
            if np.any(pos & np.isneginf(lr)):
                return -math.inf
            total += float(np.sum(np.where(pos, w * np.where(pos, lr, 0.0), 0.0)))
        return total

    # ------------------------------------------------------------------ one beta
    def soft_rules(self, beta: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
        """``(log_rules, rules, cond)`` of the maximum entropy policy for rationality ``beta``;
        ``cond[d][..., 1]`` is ``W_d(d, pa) = E_{pi_beta}[U_desc | d, pa]``."""
        tables = [np.concatenate([beta * u, u], -1) for u in self._u]
        return self.engine.backward(tables, soft=True)

    def evaluate_one(
        self, beta: float, *, second: bool = True
    ) -> tuple[float, float, float, float]:
        """``(L, dL, d2L, model expected utility)`` at a finite ``beta`` (``d2L`` NaN if not
        ``second``)."""
        self.evaluations += 1
        self.passes += 1
        eng, cid = self.engine, self.cid
        log_rules, rules, cond = self.soft_rules(beta)
        L = self._cross_entropy(log_rules)
        additive = eng.utility_factors([np.concatenate([u, 0 * u], -1) for u in self._u])
        if second:
            for d in cid.decisions:
                W = cond[d][..., 1]
                m = (rules[d] * W).sum(-1, keepdims=True)
                var = (rules[d] * (W - m) ** 2).sum(-1)
                pa = eng.fam[d][:-1]
                e = np.zeros((*var.shape, 2))
                e[..., 1] = var
                additive.append(Factor(pa, None, e))
        _, e = eng.marginal(rules, (), additive, K=2, key=("fwd", second))
        model_eu = float(e[0])
        d2L = -float(e[1]) if second else math.nan
        return L, self.expected_utility - model_eu, d2L, model_eu

    # ------------------------------------------------------------------ solver protocol
    @property
    def L0(self) -> float:
        """``L(0) = -sum_D log |dom D|`` (the uniform model)."""
        return -self.upper_bound

    @property
    def betas_per_pass(self) -> int:
        """One: a pass over ``K`` betas costs ``K`` backward inductions."""
        return 1

    @property
    def utility_scale(self) -> float:
        """Natural size of expected utilities: :attr:`scale` (already a total over decisions)."""
        return self.scale

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """Finite ``betas (K,)`` -> :class:`BetaEvaluation` of ``(K,)`` tensors."""
        vals = [self.evaluate_one(float(b), second=second) for b in betas.reshape(-1).tolist()]
        out = th.tensor(vals, dtype=th.float64).reshape(-1, 4)
        return BetaEvaluation(out[:, 0], out[:, 1], out[:, 2], out[:, 3])

    def evaluate_zero(self) -> BetaEvaluation:
        """The evaluation at ``beta = 0`` (the uniform policy), ``L(0)`` exactly ``L0``."""
        ev = self.evaluate_batch(th.zeros(1, dtype=th.float64))
        return BetaEvaluation(th.full_like(ev.L, self.L0), ev.dL, ev.d2L, ev.model_eu)

    def hard_rules(self, sign: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(log_rules, rules)`` of the ``beta = sign * inf`` limit: the limits of the maximum
        entropy rules, over the tied best (worst) decisions of the hard backward induction,
        weighted by the causal entropy after each (see :mod:`imitation_meg.cid.backward`)."""
        log_rules, rules, _ = self.engine.backward(self._u, soft=False, sign=sign)
        return log_rules, rules

    def evaluate_limit(self, sign: float) -> LimitValue:
        """The limits of ``L``, of the model's expected utility and of ``dL/dbeta`` (``E_pi[U]``
        minus the limit rules' expected utility) at ``beta = sign * inf`` (cached)."""
        sign = 1.0 if sign > 0 else -1.0
        if sign not in self._limits:
            self.passes += 1
            log_rules, rules = self.hard_rules(sign)
            model_eu = self._expected_utility(rules, "limit")
            self._limits[sign] = LimitValue(
                self._cross_entropy(log_rules), model_eu, self.expected_utility - model_eu
            )
        return self._limits[sign]

    def limit_upper_bound(self) -> float:
        """Upper bound on ``L(+-inf)`` (and on every model's ``L``): by Gibbs' inequality,
        ``sum_D E_pi[log pi_D(D | Pa_D)]``, minus the scored policy's causal entropy."""
        if self._limit_bound is None:
            self._limit_bound = own_log_likelihood(self.cid, self.family, self.policy)
        return self._limit_bound

    @property
    def scale(self) -> float:
        """Natural unit of ``1 / beta``: the largest spread over decisions of the expected
        utility ``W`` under the uniform policy (the utility tables' range if that is 0)."""
        if self._scale is None:
            _, _, cond = self.soft_rules(0.0)
            spread = 0.0
            for d in self.cid.decisions:
                W = cond[d][..., 1]
                spread = max(spread, float((W.max(-1) - W.min(-1)).max(initial=0.0)))
            if spread <= 0.0:
                tabs = [t for t in self.cid.utility_tables.values() if t.size]
                spread = max((float(t.max() - t.min()) for t in tabs), default=0.0)
            self._scale = spread
        return self._scale

    @property
    def influenced(self) -> bool:
        """Whether some utility descends from some decision (Proposition 3.3)."""
        return self.engine.influenced
