"""The records and the protocol of the 1-D solve in beta (see :mod:`imitation_meg.core.beta.solver`)."""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol, runtime_checkable

import torch as th

__all__ = ["BetaEvaluation", "BetaObjective", "BetaSolution", "LimitValue"]


class BetaEvaluation(NamedTuple):
    """``L``, ``dL/dbeta``, ``d2L/dbeta2`` and the model's expected utility at ``K`` betas.

    Attributes:
        L: ``(K,)`` log-likelihoods ``L(beta)``.
        dL: ``(K,)`` first derivatives.
        d2L: ``(K,)`` second derivatives (NaN where not computed).
        model_eu: ``(K,)`` expected total utility of the soft-optimal model ``pi_beta``.
        dmodel_eu: ``(K,)`` its derivative in beta (optional; None or NaN when unknown). With
            it the solver reports the root from a last Newton / Hermite estimate without a
            confirming pass (the expected utility is corrected to second order).
    """

    L: th.Tensor
    dL: th.Tensor
    d2L: th.Tensor
    model_eu: th.Tensor
    dmodel_eu: th.Tensor | None = None


class LimitValue(NamedTuple):
    """The limit at ``beta = +inf`` or ``-inf``.

    Attributes:
        L: the limit of ``L(beta)`` as ``beta`` tends to the end (``-inf`` when the behaviour
            leaves the limit policy's support). MEG's members at ``beta = +-inf`` are the limits
            of the soft-optimal policies (paper Definition 3.1: the highest-entropy policy of
            the best attainable utility), so this is also ``L`` of the limit policy, whose
            tied actions are weighted by the causal entropy after them.
        model_eu: the limit policy's expected utility.
        dL: the limit of ``dL/dbeta`` at the end. When ``sign * dL >= 0`` there (MEG: the
            behaviour only takes the limit policy's actions), ``L`` increases all the way and
            the supremum is the limit, found without a search; when ``< 0`` there is an
            interior optimum. NaN when unknown.
    """

    L: float
    model_eu: float
    dL: float = math.nan


@runtime_checkable
class BetaObjective(Protocol):
    """A concave ``L(beta)`` with exact derivatives, as :func:`solve_beta` needs it.

    See the module docstring for the meaning of each member; :class:`imitation_meg.core.known.
    MEGObjective` is the known-utility implementation, and ``tests/core/beta/test_solver.py`` holds a
    one-decision objective in closed form.
    """

    @property
    def scale(self) -> float:
        """The natural unit of ``1 / beta`` (``> 0``; ``0`` means a constant utility)."""

    @property
    def utility_scale(self) -> float:
        """The natural size of expected total utilities (the unit of ``dL/dbeta``)."""

    @property
    def expected_utility(self) -> float:
        """The behaviour's expected total utility."""

    @property
    def L0(self) -> float:
        """``L(0)``, the uniform model's log-likelihood."""

    @property
    def betas_per_pass(self) -> int:
        """How many betas one pass should evaluate."""

    # Optional: ``eps``, the relative precision of the evaluations (float32 objectives: 1.2e-7);
    # the solver then stops at 10 * eps instead of 1e-11. Read with ``getattr`` (default:
    # float64's).

    def evaluate_zero(self) -> BetaEvaluation:
        """The evaluation at ``beta = 0`` (``(1,)`` tensors)."""

    def evaluate_batch(self, betas: th.Tensor, *, second: bool = True) -> BetaEvaluation:
        """Evaluate finite ``betas (K,)`` (float64)."""

    def evaluate_limit(self, sign: float) -> LimitValue:
        """The limits of ``L(beta)``, of the model's expected utility and of ``dL/dbeta`` as
        ``beta -> sign * inf`` (exact)."""

    def limit_upper_bound(self) -> float:
        """An upper bound on ``L`` at both limits (``inf`` when none is known)."""


class BetaSolution(NamedTuple):
    """The maximiser of ``L`` over ``beta in R u {+-inf}``.

    Attributes:
        beta: the maximising rationality (``+-inf`` when the supremum is the exact limit).
        L: the supremum of ``L``.
        grad: ``dL/dbeta`` at ``beta`` (NaN at ``+-inf``).
        model_eu: the model's expected utility at ``beta``.
        uniform_eu: the uniform model's (``beta = 0``) expected utility.
        expected_utility: the behaviour's expected utility.
        converged: the solve met its tolerance, or the supremum is an exact limit.
        at_boundary: the supremum lies at ``beta = +-inf`` (or beyond ``beta * scale = 1e6``,
            where ``L`` has saturated to rounding).
        evaluations: betas evaluated (the ``beta = 0`` pass counts one).
        passes: calls to the objective's evaluations, limit passes included.
    """

    beta: float
    L: float
    grad: float
    model_eu: float
    uniform_eu: float
    expected_utility: float
    converged: bool
    at_boundary: bool
    evaluations: int
    passes: int
