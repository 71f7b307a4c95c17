"""The discounted, infinite-horizon setting: stationary soft-optimal policies and exact MEG.

This is the setting of the MEG authors' notebook: an MDP with no horizon and a discount
``gamma < 1`` (``TabularMDP(..., horizon=None, discount=0.9)``), stationary policies ``pi[s, a]``,
and the log-likelihood weighted by the behaviour's discounted occupancy
``d(s) = sum_t gamma^t P(s_t = s)`` (which sums to ``1 / (1 - gamma)``)::

    L(beta) = sum_t gamma^t E_pi[log pi_beta(a_t | s_t)] = sum_s d(s) sum_a pi(a | s) log pi_beta(a | s),
    MEG     = sup_beta L(beta) + log|A| / (1 - gamma),      0 <= MEG <= log|A| / (1 - gamma).

The soft-optimal policy of rationality ``beta`` is ``softmax(Q_beta)`` with the stationary soft
Bellman equations ``Q_beta = beta r + gamma P V_beta``, ``V_beta = logsumexp_a Q_beta``. (A
finite-horizon MDP with ``discount < 1`` is a different quantity: it discounts the utility, and
its log-likelihood sums every step with weight 1.)

**Why it is exact.** The log-likelihood telescopes along the behaviour's trajectories:
``L(beta) = beta E_pi[sum_t gamma^t r] - E_p0[V_beta]``, and ``V_beta(s)`` is the maximum over
policies of ``E[sum_t gamma^t (beta r + H(pi(. | s_t)))]``, a maximum of functions affine in
``beta``: convex. So ``L`` is concave, with ``dL/dbeta = E_pi[sum gamma^t r] - E_{pi_beta}[sum
gamma^t r]`` and ``d2L/dbeta2 = -E_p0[h]``, where ``h`` solves the policy evaluation of
``Var_{pi_beta}(G)`` (``G = dQ/dbeta``). The project's 1-D solver
(:func:`imitation_meg.core.beta.solver.solve_beta`) maximises it exactly; the limits at
``beta = +-inf`` are the limits of the soft policies (ties weighted by the causal entropy
after them, :func:`imitation_meg.core.soft_vi.limit_step`). The same argument with ``beta r``
replaced by ``phi @ theta`` makes the linear classes' ``L(theta)`` concave (a maximum of affine
functions of ``theta`` again), which :class:`DiscountedClassObjective` serves to the same
Newton solver as the finite-horizon classes.

**Convergence.** Every fixed point is computed by Newton's method on the Bellman equations
(soft policy iteration: each step a policy evaluation by a linear solve), which converges
quadratically, and stopped when the Bellman residual ``max |B(V) - V|`` is at most ``1e-12``
times one step's reward and entropy (``1 + log|A| + max |beta r|``) plus the rounding floor
``16 eps (1 + max |V|)``; since the Bellman operator is a ``gamma``-contraction, the values
are then within ``residual / (1 - gamma)`` of the fixed point. The largest residual reached,
relative to ``1 + max |V|``, is reported as ``extra["bellman_residual"]``, and a result whose
residual is above ``CONVERGED_RESIDUAL`` says ``converged=False``. Linear solves are sparse LU factorisations (up to
``LU_MAX_STATES`` states) or BiCGSTAB (GMRES, then plain sweeps, where it breaks down) to a
relative residual of ``1e-13``.

**Discounts near 1.** The values grow like ``max |r| / (1 - gamma)`` while the policies turn on
differences of the size of one step's reward, which float64 resolves to about
``eps / (1 - gamma)`` of the values. Hard values count as tied within ``TIE_TOL`` of the
state's advantages plus that rounding floor (:func:`ties`), and an MDP is refused above
``DISCOUNT_MAX = 1 - 1e-8`` (:class:`~imitation_meg.core.mdp.TabularMDP`), where the solves agree
with an extended-precision solve to about 1e-7 relative.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch as th

from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.kernels.limits import TIE_TOL, limit_step
from imitation_meg.core.mdp import DISCOUNT_MAX, TabularMDP

__all__ = [
    "CONVERGED_RESIDUAL",
    "DISCOUNT_MAX",
    "LU_MAX_STATES",
    "DiscountedClassObjective",
    "Dynamics",
    "SoftValues",
    "hard_values",
    "limit_policy",
    "occupancy",
    "policy_values",
    "soft_values",
    "ties",
]

#: Results whose relative Bellman residual exceeds this say ``converged=False``.
CONVERGED_RESIDUAL = 1e-9
#: Sparse LU factorisations up to this many states; Krylov solves beyond.
LU_MAX_STATES = 2_000
# Bellman residual (relative to one step's reward and entropy) at which Newton's method stops,
# and its rounding floor (relative to 1 + max |V|).
_RESIDUAL_RTOL = 1e-12
_ROUNDING = 16 * float(np.finfo(np.float64).eps)
# Newton (soft policy iteration) steps at most.
_NEWTON_MAX = 200
# Relative residual of the Krylov solves (BiCGSTAB, GMRES).
_KRYLOV_RTOL = 1e-13
# A Newton step that no longer halves a Bellman residual below this fraction of one step's
# reward and entropy has reached the rounding floor.
_STALL_STEP_RTOL = 1e-6
# Hard values closer than this times max |Q| are tied: the rounding of policy evaluation.
_TIE_ROUNDING = 1024 * float(np.finfo(np.float64).eps)


@dataclasses.dataclass
class Dynamics:
    """The transitions of a discounted MDP as scipy sparse matrices.

    Attributes:
        S, A: numbers of states and actions.
        gamma: the discount.
        P: ``(S * A, S)`` CSR, row ``s * A + a`` is ``T[s, a, :]``.
        p0: ``(S,)`` initial distribution.
    """

    S: int
    A: int
    gamma: float
    P: sp.csr_matrix
    p0: np.ndarray
    # The largest relative Bellman residual max |B(V) - V| / (1 + max |V|) reached so far.
    residual: float = 0.0

    @classmethod
    def of(cls, mdp: TabularMDP) -> Dynamics:
        """The dynamics of ``mdp`` (cached on its transition operator)."""
        S, A = mdp.n_states, mdp.n_actions

        def build() -> sp.csr_matrix:
            ns = mdp.next_state.cpu().numpy().reshape(S * A, -1)
            pr = mdp.prob.cpu().double().numpy().reshape(S * A, -1)
            rows = np.repeat(np.arange(S * A), ns.shape[1])
            P = sp.csr_matrix((pr.ravel(), (rows, ns.ravel())), shape=(S * A, S))
            P.eliminate_zeros()
            return P

        P = mdp.operator._get(("discounted_csr",), build)
        p0 = mdp.initial_state_dist.cpu().double().numpy()
        return cls(S, A, mdp.discount, P, p0)

    def expect(self, V: np.ndarray) -> np.ndarray:
        """``E_{s' ~ T(s, a)}[V(s')]``: ``(S, A)`` for ``V (S,)``."""
        return np.asarray(self.P @ V).reshape(self.S, self.A)

    def policy_matrix(self, pi: np.ndarray) -> sp.csr_matrix:
        """``P_pi[s, s'] = sum_a pi(a | s) T[s, a, s']`` ``(S, S)`` for ``pi (S, A)``."""
        S, A = self.S, self.A
        D = sp.csr_matrix(
            (pi.ravel(), (np.repeat(np.arange(S), A), np.arange(S * A))), shape=(S, S * A)
        )
        return (D @ self.P).tocsc()

    def solver(self, pi: np.ndarray) -> _PolicySolver:
        """Solves with ``I - gamma P_pi`` and its transpose for the policy ``pi (S, A)``."""
        return _PolicySolver(
            sp.identity(self.S, format="csc") - self.gamma * self.policy_matrix(pi)
        )


class _PolicySolver:
    """``(I - gamma P_pi) x = b`` and ``(I - gamma P_pi)^T x = b``: a sparse LU factorisation for
    small MDPs (reused for every right-hand side), BiCGSTAB for large ones."""

    def __init__(self, M: sp.csc_matrix) -> None:
        import scipy.sparse.linalg as spla  # only where a discounted MDP is solved (~0.15 s)

        self.lu = spla.splu(M) if M.shape[0] <= LU_MAX_STATES else None
        self._M = {False: M.tocsr(), True: M.T.tocsr()} if self.lu is None else {}

    def solve(self, b: np.ndarray, *, transpose: bool = False) -> np.ndarray:
        if self.lu is not None:
            return self.lu.solve(b, trans="T" if transpose else "N")
        import scipy.sparse.linalg as spla

        M = self._M[transpose]
        x, info = spla.bicgstab(M, b, rtol=_KRYLOV_RTOL, atol=0.0, maxiter=2000)
        if info != 0:  # a breakdown: GMRES, then Neumann sweeps (a contraction) if it stalls
            x, info = spla.gmres(M, b, x0=x, rtol=_KRYLOV_RTOL, atol=0.0, restart=50, maxiter=50)
            if info != 0:
                x = _neumann(M, b, x)
        return np.asarray(x)


def _neumann(M: sp.csr_matrix, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Richardson iteration ``x <- x + (b - M x)`` for ``M = I - gamma P``: converges at rate
    ``gamma``; until the residual stops falling."""
    best = math.inf
    for _ in range(100_000):
        res = b - M @ x
        norm = float(np.abs(res).max())
        if norm >= best or norm <= 1e-15 * max(1.0, float(np.abs(x).max())):
            break
        best = norm
        x = x + res
    return x


# --------------------------------------------------------------------------- fixed points
@dataclasses.dataclass(frozen=True)
class SoftValues:
    """Stationary soft-optimal values of a reward at one rationality.

    Attributes:
        V: ``(S,)`` soft values ``logsumexp_a Q``.
        log_pi: ``(S, A)`` the soft-optimal log-policy (``-inf`` on blocked actions).
        residual: the final Bellman residual ``max |B(V) - V|``.
        steps: Newton steps taken.
    """

    V: np.ndarray
    log_pi: np.ndarray
    residual: float
    steps: int


def _log_softmax(Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log_softmax(Q), logsumexp(Q))`` over actions, ``-inf`` entries allowed."""
    m = Q.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        z = Q - m
    lse = np.log(np.exp(z).sum(-1, keepdims=True))
    return z - lse, (m + lse)[:, 0]


@_threads.entry_point
def soft_values(
    dyn: Dynamics,
    r: np.ndarray,
    beta: float = 1.0,
    *,
    allowed: np.ndarray | None = None,
    V0: np.ndarray | None = None,
) -> SoftValues:
    """The stationary soft values of ``beta * r (S, A)`` by Newton's method (soft policy
    iteration), over the ``allowed (S, A)`` actions only when given.

    Each step evaluates the current soft-optimal policy exactly,
    ``V <- (I - gamma P_pi)^{-1} (beta r_pi + H(pi))``, which is the Newton step for
    ``V = logsumexp(beta r + gamma P V)``; from any start it converges monotonically and
    quadratically near the fixed point.
    """
    base = beta * r if allowed is None else np.where(allowed, beta * r, -np.inf)
    V = _start_values(dyn, V0)
    best: tuple[float, np.ndarray, np.ndarray, int] | None = None
    prev = math.inf
    # Residuals are measured against one step's reward and entropy (the values themselves grow
    # like 1 / (1 - gamma), and a residual relative to them would let log-probabilities be off by
    # (1 - gamma)^-1 * 1e-12), down to the rounding floor of the values.
    finite = base[np.isfinite(base)]
    step_scale = 1.0 + math.log(dyn.A) + (float(np.abs(finite).max()) if finite.size else 0.0)
    for step in range(1, _NEWTON_MAX + 1):
        log_pi, BV = _log_softmax(base + dyn.gamma * dyn.expect(V))
        res = float(np.abs(BV - V).max())
        if best is None or res < best[0]:
            best = (res, BV, log_pi, step)
        if _settled(res, prev, step, step_scale, float(np.abs(BV).max())):
            break
        prev = res
        pi = np.exp(log_pi)
        ent = -(pi * np.where(pi > 0, log_pi, 0.0)).sum(-1)
        V = dyn.solver(pi).solve((pi * np.where(pi > 0, base, 0.0)).sum(-1) + ent)
    assert best is not None
    dyn.residual = max(dyn.residual, best[0] / (1.0 + float(np.abs(best[1]).max())))
    return SoftValues(best[1], best[2], best[0], best[3])


@_threads.entry_point
def _start_values(dyn: Dynamics, V0: np.ndarray | None) -> np.ndarray:
    """A copy of ``V0 (S,)``, or the exact soft values at ``beta = 0``."""
    return np.full(dyn.S, math.log(dyn.A) / (1.0 - dyn.gamma)) if V0 is None else V0.copy()


def _settled(res: float, prev: float, step: int, step_scale: float, size: float) -> bool:
    """Whether :func:`soft_values` stops at Newton step ``step`` with Bellman residual ``res``
    (``prev`` the step before, ``size`` the largest value): at the tolerance, or at the
    rounding floor, where a Newton step no longer halves a residual that is already small next
    to one step's reward (in the global phase a step may fail to halve a residual of that
    order)."""
    floor = _RESIDUAL_RTOL * step_scale + _ROUNDING * (1.0 + size)
    stall = min(1e4 * floor, _STALL_STEP_RTOL * step_scale)
    return res <= floor or (step > 2 and res > 0.5 * prev and res <= stall)


def policy_values(dyn: Dynamics, pi: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``V^pi (S,)`` of a reward ``r (S, A)``: ``E[sum_t gamma^t r(s_t, a_t) | s_0 = s]``."""
    return dyn.solver(pi).solve((pi * r).sum(-1))


@_threads.entry_point
def occupancy(dyn: Dynamics, pi: np.ndarray) -> np.ndarray:
    """Discounted state occupancy ``d (S,)`` of ``pi (S, A)`` from ``p0``:
    ``d = p0 + gamma P_pi^T d`` (sums to ``1 / (1 - gamma)``)."""
    return dyn.solver(pi).solve(dyn.p0, transpose=True)


def ties(Q: np.ndarray) -> np.ndarray:
    """The tied best actions of stationary hard values ``Q (S, A)``: a ``(S, A)`` bool mask.

    The stationary values carry a common part of order ``max |r| / (1 - gamma)`` that no choice
    of action changes, so the tolerance is :data:`~imitation_meg.core.soft_vi.TIE_TOL` relative to the
    state's advantages, ``TIE_TOL * (1 + max_a |Q(s, a) - max_a Q(s, a)|)`` (the finite-horizon
    rule of :func:`~imitation_meg.core.soft_vi.tie_set` with the values measured from the state's
    best), plus the rounding floor of values of size ``max |Q|``.
    """
    best = Q.max(-1, keepdims=True)
    gap = best - Q
    tol = TIE_TOL * (1.0 + gap.max(-1, keepdims=True))
    tol = tol + _TIE_ROUNDING * float(np.abs(Q).max(initial=0.0))
    return np.asarray(gap <= tol)


@_threads.entry_point
def hard_values(dyn: Dynamics, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Optimal values of ``r (S, A)`` by policy iteration (exact: finitely many improvements):
    ``(Q* (S, A), V* (S,))``. Ties (:func:`ties`) keep the current action, so the iteration
    cannot cycle."""
    act = r.argmax(-1)
    rows = np.arange(dyn.S)
    for _ in range(10_000):
        pi = np.zeros((dyn.S, dyn.A))
        pi[rows, act] = 1.0
        V = policy_values(dyn, pi, r)
        Q = r + dyn.gamma * dyn.expect(V)
        keep = ties(Q)[rows, act]
        new = np.where(keep, act, Q.argmax(-1))
        if (new == act).all():
            return Q, Q.max(-1)
        act = new
    raise RuntimeError("policy iteration did not stabilise in 10000 improvements")


@_threads.entry_point
def limit_policy(
    dyn: Dynamics, r: np.ndarray, sign: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``beta = sign * inf`` limit of the stationary soft-optimal policies of ``r (S, A)``.

    ``Q_beta = beta Q* + q1 + o(1)``: the hard values ``Q*`` of ``sign * r`` decide the tied
    actions, and ``q1 = gamma P v1`` with ``v1 = logsumexp`` of ``q1`` over the ties (the soft
    values of the zero reward restricted to the ties) weights them
    (:func:`imitation_meg.core.soft_vi.limit_step`).

    Returns:
        ``(log_pi (S, A), Q* (S, A), V* (S,))`` with ``Q*``, ``V*`` the hard values of
        ``sign * r``.
    """
    Q, V = hard_values(dyn, sign * r)
    tied = ties(Q)
    v1 = soft_values(dyn, np.zeros_like(r), 1.0, allowed=tied, V0=np.zeros(dyn.S)).V
    # limit_step on the tie mask itself (0 on the ties, -1 elsewhere, no tolerance).
    lp, _, _ = limit_step(
        th.from_numpy(tied - 1.0), th.from_numpy(dyn.gamma * dyn.expect(v1)), -1, 0.0
    )
    return lp.numpy(), Q, V


def _wlog(w: np.ndarray, log_pi: np.ndarray) -> float:
    """``sum w log_pi`` with ``0 log 0 = 0`` (``-inf`` where ``w > 0`` meets ``log_pi = -inf``)."""
    pos = w > 0
    if bool((pos & np.isneginf(log_pi)).any()):
        return -math.inf
    return float(np.sum(np.where(pos, w * np.where(pos, log_pi, 0.0), 0.0)))


# --------------------------------------------------------------------------- linear classes
class DiscountedClassObjective:
    """``L(theta) = sum_s d(s) sum_a pi(a | s) log pi_theta(a | s)`` of a linear class in a
    discounted MDP, with the interface :func:`imitation_meg.core.likelihood.maximise` uses.

    With ``mu = d pi`` the behaviour's discounted state-action occupancy and ``mu_theta`` the
    model's, ``L = <mu, r_theta> - p0 . V_theta`` (telescoped), so the gradient is
    ``phi^T (mu - mu_theta)`` and a Hessian-vector product is ``-phi^T dmu_theta``: the
    tangent of the model's occupancy, two policy evaluations (one with the transpose).
    ``allowed (S, A)`` restricts the model to a face (see :mod:`imitation_meg.core.faces`).

    Args:
        mdp: a discounted MDP.
        mu: ``(S, A)`` the behaviour's discounted state-action occupancy.
        features: the normalised class (:class:`imitation_meg.core.likelihood.ClassFeatures`).
        allowed: optional ``(S, A)`` bool face.
    """

    concave = True

    def __init__(
        self, mdp: TabularMDP, mu: np.ndarray, features: Any, *, allowed: Any = None
    ) -> None:
        self.dyn = Dynamics.of(mdp)
        self.S, self.A = mdp.n_states, mdp.n_actions
        self.features = features
        self.mu = mu
        self.allowed = None if allowed is None else np.asarray(allowed, dtype=bool)
        self.w = th.zeros(0, dtype=th.float64)  # dtype / device for the solver
        self.passes = 0
        self._state: dict[str, Any] = {}
        self._trial: dict[str, Any] = {}

    def _reward(self, theta: th.Tensor) -> np.ndarray:
        return self.features.utility(theta, self.S, self.A).cpu().numpy()

    def value(self, theta: th.Tensor, *, commit: bool = True) -> float:
        """``L(theta)``; keeps the model for :meth:`grad` and :meth:`neg_hvp` (a trial point
        with ``commit=False`` until :meth:`commit`)."""
        prev = self._state.get("V")
        sv = soft_values(self.dyn, self._reward(theta), 1.0, allowed=self.allowed, V0=prev)
        self.passes += 1
        state = {"theta": theta, "V": sv.V, "log_pi": sv.log_pi, "pi": np.exp(sv.log_pi)}
        if commit:
            self._state = state
        else:
            self._trial = state
        return _wlog(self.mu, sv.log_pi)

    def commit(self) -> None:
        """Keep the last trial point."""
        self._state, self._trial = self._trial, {}

    def restore(self) -> None:
        """Drop the last trial point."""
        self._trial = {}

    @property
    def pi(self) -> th.Tensor:
        """The model's policy at the kept point, action-major ``(1, A, S)``."""
        return th.from_numpy(self._state["pi"].T.copy()).unsqueeze(0)

    def _model_occupancy(self) -> tuple[np.ndarray, Any]:
        st = self._state
        if "mu" not in st:
            solver = self.dyn.solver(st["pi"])
            d = solver.solve(self.dyn.p0, transpose=True)
            st["solver"], st["d"], st["mu"] = solver, d, d[:, None] * st["pi"]
        return st["mu"], st["solver"]

    def grad(self) -> th.Tensor:
        """``dL/dtheta (F,)`` at the kept point."""
        mu_model, _ = self._model_occupancy()
        self.passes += 1
        return self.features.project(th.from_numpy((self.mu - mu_model).T.copy()))

    def curvature_diagonal(self) -> th.Tensor:
        """``(phi ** 2)^T mu_theta``: a diagonal preconditioner."""
        mu_model, _ = self._model_occupancy()
        return self.features.project_squares(th.from_numpy(mu_model.T.copy()))

    def neg_hvp(self, v: th.Tensor) -> th.Tensor:
        """``-Hessian @ v (F,)`` at the kept point: ``phi^T`` of the model occupancy's tangent
        along the reward ``u = phi @ v``."""
        _, solver = self._model_occupancy()
        st, dyn = self._state, self.dyn
        pi, d = st["pi"], st["d"]
        u = self._reward(v)
        g = solver.solve((pi * u).sum(-1))
        dpi = pi * (u + dyn.gamma * dyn.expect(g) - g[:, None])  # tangent of pi
        push = np.asarray(dyn.P.T @ (d[:, None] * dpi).reshape(-1))  # (S,)
        dd = solver.solve(dyn.gamma * push, transpose=True)
        dmu = dd[:, None] * pi + d[:, None] * dpi
        self.passes += 2
        return self.features.project(th.from_numpy(dmu.T.copy()))

    def expected_return(self, r: th.Tensor, pi: th.Tensor | None) -> float:
        """``E[sum_t gamma^t r]`` from ``p0`` of an action-major ``pi (1, A, S)`` (None:
        uniform) for an action-major ``r (A, S)``."""
        r_sa = r.T.cpu().numpy()
        p = (
            np.full((self.S, self.A), 1.0 / self.A)
            if pi is None
            else pi.reshape(self.A, self.S).T.cpu().numpy()
        )
        return float(self.dyn.p0 @ policy_values(self.dyn, p, r_sa))
