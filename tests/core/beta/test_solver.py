"""The 1-D solver through its protocol: a one-decision objective in closed form, cubic roots."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.core.beta.hermite import cubic_roots
from imitation_meg.core.beta.solver import BetaEvaluation, BetaObjective, LimitValue, solve_beta
from imitation_meg.core.known import MEGObjective


class OneDecision:
    """MEG of one decision with utilities ``U (D,)`` and decision probabilities ``p (D,)``, in
    closed form: ``L(beta) = sum_d p_d log softmax(beta U)_d`` (the example of the protocol's
    documentation in ``imitation_meg.core.known``)."""

    def __init__(self, U, p):
        self.U = th.as_tensor(U, dtype=th.float64)
        self.p = th.as_tensor(p, dtype=th.float64)
        self.scale = float(self.U.max() - self.U.min())
        self.utility_scale = self.scale
        self.expected_utility = float(self.p @ self.U)
        self.L0 = -math.log(len(U))
        self.betas_per_pass = 8
        self.calls = 0

    def evaluate_batch(self, betas, *, second=True):
        self.calls += 1
        logits = betas.view(-1, 1) * self.U
        log_q = th.log_softmax(logits, -1)
        q = log_q.exp()
        L = (self.p * th.where(self.p > 0, log_q, 0.0)).sum(-1)
        mean = q @ self.U
        d2L = -(q * self.U**2).sum(-1) + mean**2
        return BetaEvaluation(L, self.p @ self.U - mean, d2L if second else d2L * math.nan, mean)

    def evaluate_zero(self):
        return self.evaluate_batch(th.zeros(1, dtype=th.float64))

    def evaluate_limit(self, sign):
        best = sign * self.U == (sign * self.U).max()
        q = best.double() / best.sum()
        with np.errstate(divide="ignore"):
            L = float((self.p * th.where(self.p > 0, q.log(), 0.0)).sum())
        if bool(((self.p > 0) & ~best).any()):
            L = -math.inf
        return LimitValue(L, float(q @ self.U))

    def limit_upper_bound(self):
        return math.inf


def test_the_example_satisfies_the_protocol():
    assert isinstance(OneDecision([1.0, -1.0], [0.8, 0.2]), BetaObjective)
    assert isinstance(
        MEGObjective(im.envs.cliff_world(horizon=3), np.full((40, 4), 0.25)), BetaObjective
    )


@pytest.mark.parametrize("p", [0.6, 0.8, 0.95])
def test_mouse_closed_form(p):
    # Two options with U = +1 / -1: the optimum is beta = atanh(2p - 1) = log(p / (1 - p)) / 2.
    obj = OneDecision([1.0, -1.0], [p, 1 - p])
    sol = solve_beta(obj)
    beta = 0.5 * math.log(p / (1 - p))
    assert sol.converged and not sol.at_boundary
    assert sol.beta == pytest.approx(beta, rel=1e-10)
    assert pytest.approx(p * math.log(p) + (1 - p) * math.log(1 - p), rel=1e-12) == sol.L
    assert sol.model_eu == pytest.approx(2 * p - 1, rel=1e-10)  # Theorem 5.1
    assert sol.uniform_eu == 0.0 and sol.expected_utility == pytest.approx(2 * p - 1)
    assert sol.passes >= obj.calls  # the zero pass and every batch count


def test_three_options_with_different_counts_and_the_limits():
    # A decision with three options; the policy on the best option only: the supremum is the
    # limit at +inf (L = 0), found without iterating to huge betas.
    sol = solve_beta(OneDecision([2.0, 0.5, -1.0], [1.0, 0.0, 0.0]))
    assert sol.beta == math.inf and sol.at_boundary and sol.converged and sol.L == 0.0
    anti = solve_beta(OneDecision([2.0, 0.5, -1.0], [0.0, 0.0, 1.0]))
    assert anti.beta == -math.inf and anti.L == 0.0
    # Uniform behaviour: beta = 0 is optimal, L = -log 3.
    flat = solve_beta(OneDecision([2.0, 0.5, -1.0], [1 / 3] * 3))
    assert flat.beta == 0.0 and pytest.approx(-math.log(3), rel=1e-15) == flat.L


def test_solver_agrees_with_meg_one_step():
    U, p = [1.0, 0.3, -0.4, -2.0], [0.5, 0.3, 0.15, 0.05]
    ours = solve_beta(OneDecision(U, p))
    ref = im.meg_one_step(p, U)
    assert ours.L + math.log(4) == pytest.approx(ref.meg, rel=1e-11)
    assert ours.beta == pytest.approx(ref.beta, rel=1e-9)


def test_cubic_roots_on_the_unit_interval_match_numpy(rng):
    for _ in range(2000):
        c = rng.standard_normal(4) * 10.0 ** rng.uniform(-3, 3, 4)
        ref = sorted(
            float(z.real)
            for z in np.roots(c[::-1])
            if abs(z.imag) <= 1e-9 * max(1.0, abs(z)) and 0.0 < z.real < 1.0
        )
        ours = sorted(cubic_roots(*c))
        assert len(ours) == len(ref)
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-7)


class Kink:
    """A concave ``L`` whose slope steps down steeply near ``x_s``:
    ``f(x) = a - b tanh(k (x - x_s))`` (``L`` its integral), the shape of MEG's derivative where
    the soft-optimal route changes (CliffWorld 100x20, epsilon 0.1). Root in closed form:
    ``x_s + atanh(a / b) / k``."""

    def __init__(self, a, b, k, x_s, per_pass):
        self.a, self.b, self.k, self.x_s = a, b, k, x_s
        self.scale = 1.0
        self.utility_scale = 1.0
        self.expected_utility = 0.0
        self.L0 = self._L(th.zeros(1, dtype=th.float64))[0].item()
        self.betas_per_pass = per_pass
        self.passes = 0

    def _L(self, x):
        z = self.k * (x - self.x_s)
        logcosh = z.abs() + th.log1p(th.exp(-2 * z.abs())) - math.log(2.0)
        return self.a * x - self.b / self.k * logcosh

    def evaluate_batch(self, betas, *, second=True):
        self.passes += 1
        x = betas.double()
        t = th.tanh(self.k * (x - self.x_s))
        f = self.a - self.b * t
        fp = -self.b * self.k * (1 - t * t)
        return BetaEvaluation(self._L(x), f, fp if second else fp * math.nan, -f, -fp)

    def evaluate_zero(self):
        return self.evaluate_batch(th.zeros(1, dtype=th.float64))

    def evaluate_limit(self, sign):
        return LimitValue(-math.inf, math.nan, -(self.a + self.b) * sign)

    def limit_upper_bound(self):
        return -math.inf


@pytest.mark.parametrize("per_pass", [1, 8])
@pytest.mark.parametrize("k", [1.0, 30.0])
def test_steep_slope_is_found_in_few_passes(per_pass, k):
    obj = Kink(0.35, 5.7, k, 14.5, per_pass)
    sol = solve_beta(obj)
    root = 14.5 + math.atanh(0.35 / 5.7) / k
    assert sol.converged and not sol.at_boundary
    assert sol.beta == pytest.approx(root, rel=1e-10)
    assert pytest.approx(float(obj._L(th.tensor([root], dtype=th.float64))[0]), rel=1e-13) == sol.L
    assert sol.passes <= 13 and obj.passes == sol.passes


@pytest.mark.parametrize("per_pass", [1, 8])
def test_one_decision_in_both_modes(per_pass):
    obj = OneDecision([1.0, 0.3, -0.4, -2.0], [0.5, 0.3, 0.15, 0.05])
    obj.betas_per_pass = per_pass
    ref = im.meg_one_step([0.5, 0.3, 0.15, 0.05], [1.0, 0.3, -0.4, -2.0])
    sol = solve_beta(obj)
    assert sol.L + math.log(4) == pytest.approx(ref.meg, rel=1e-11)
    assert sol.beta == pytest.approx(ref.beta, rel=1e-9)
    assert sol.model_eu == pytest.approx(sol.expected_utility, rel=1e-10)  # Theorem 5.1


def test_behaviour_on_the_ties_needs_no_search():
    # The optimal policy of CliffWorld: dL/dbeta stays positive up to the limit (its limit is
    # 0), so the supremum is the exact limit after the beta = 0 pass and one limit pass.
    from imitation_meg.core.known import MEGObjective

    mdp = im.envs.cliff_world(horizon=12)
    obj = MEGObjective(mdp, im.policies.optimal(mdp))
    sol = solve_beta(obj)
    assert sol.beta == math.inf and sol.converged and sol.passes == 2
    assert obj.evaluate_limit(1.0).dL == 0.0
