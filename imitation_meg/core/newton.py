"""The damped truncated Newton method that maximises a linear class's log-likelihood.

:func:`maximise` needs only what :class:`LinearClassObjective` says of an objective: its value,
gradient, Hessian-vector products and a diagonal of its curvature
(:class:`imitation_meg.core.likelihood.ClassObjective` for a finite horizon,
:class:`imitation_meg.core.discounted.DiscountedClassObjective` for a discounted MDP). Each
step is a preconditioned conjugate-gradient solve, whose preconditioner learns from the pairs
of earlier solves (:class:`_Recycled`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch as th

from imitation_meg.core.class_features import ClassFeatures
from imitation_meg.core.kernels.reductions import dot
from imitation_meg.progress import progress as _progress

__all__ = ["LinearClassObjective", "maximise"]

# Conjugate-gradient steps per Newton step at most.
_CG_MAX = 2000
# Ridge of the diagonal preconditioner, relative to its largest entry.
_RIDGE = 1e-12
# Smallest non-zero damping, relative to the largest curvature.
_LAM_MIN = 1e-6
# Smallest fraction of a Newton step that backtracking tries.
_BACKTRACK_MIN = 2.0**-30
# Conjugate-gradient pairs kept from earlier solves to precondition later ones (see _Recycled).
_RECYCLE_PAIRS = 16


class LinearClassObjective(Protocol):
    """What :func:`maximise` needs of a class's objective:
    :class:`imitation_meg.core.likelihood.ClassObjective` (finite horizon) or :class:`imitation_meg.core.discounted.DiscountedClassObjective`."""

    features: ClassFeatures
    w: th.Tensor  # its dtype and device are the parameters'
    passes: int

    def value(self, theta: th.Tensor, *, commit: bool = True) -> float: ...

    def commit(self) -> None: ...

    def restore(self) -> None: ...

    def grad(self) -> th.Tensor: ...

    def curvature_diagonal(self) -> th.Tensor: ...

    def neg_hvp(self, v: th.Tensor) -> th.Tensor: ...


def maximise(
    obj: LinearClassObjective,
    *,
    tol: float,
    max_iter: int,
    theta0: th.Tensor | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Maximise a class's log-likelihood by a damped (Levenberg-Marquardt) truncated Newton method.

    Each step solves ``(B + lam I) p = g`` (``B = -Hess``, ``g`` the gradient) by conjugate
    gradients with exact Hessian-vector products (:meth:`~imitation_meg.core.likelihood.ClassObjective.neg_hvp`) and the
    diagonal preconditioner ``diag(B) + lam`` (:meth:`~imitation_meg.core.likelihood.ClassObjective.curvature_diagonal`), to a
    relative residual ``min(0.5, sqrt(|g| / |g0|))`` (superlinear convergence). The damping
    ``lam`` follows the ratio of the actual rise of ``L`` to the rise the quadratic model
    predicted (a trust region in the features' Euclidean norm): far from the optimum, where
    nearly deterministic models make the curvature vanish in some directions, it keeps steps
    short; near the optimum it vanishes and the steps are Newton's. A step is taken when ``L``
    rises. Undamped, the Newton decrement ``lambda^2 = g . p`` estimates the remaining gap
    ``sup L - L`` as ``lambda^2 / 2``: the solve stops when that is at most
    ``tol * max(1, |L|)`` (after taking that last step), or when ``L`` no longer rises at
    rounding level.

    Returns:
        dict with ``theta``, ``L``, ``grad`` (its norm), ``decrement`` (the last ``lambda^2``),
        ``converged``, ``iterations`` (Newton steps), ``cg_iterations``, ``passes``, ``seconds``
        and ``trace`` (per step: seconds since the start, ``L``, ``g . p``, CG steps, the
        damping and whether the step was taken).
    """
    F = obj.features.n_features
    theta = (
        th.zeros(F, dtype=obj.w.dtype, device=obj.w.device) if theta0 is None else theta0.clone()
    )
    st = _Newton(
        obj=obj,
        tol=tol,
        keep_out=_without_null_direction(obj),
        recycled=_Recycled(_RECYCLE_PAIRS),
        start=time.perf_counter(),
        theta=theta,
        L=obj.value(theta),
        g=obj.grad(),  # at the point of the value above (arguments run in order)
        converged=F == 0,
    )
    for k in _progress(range(max_iter), enabled=progress, desc="MEG (Newton)"):
        if st.converged or not math.isfinite(st.L):
            break
        st.out["iterations"] = k + 1
        if not _newton_iteration(st):
            break
    st.out.update(
        theta=st.theta,
        L=st.L,
        grad=float(st.g.norm()),
        converged=st.converged,
        passes=obj.passes,
        trace=st.trace,
        seconds=time.perf_counter() - st.start,
    )
    return st.out


@dataclasses.dataclass
class _Newton:
    """The state of one :func:`maximise` solve between its steps: the iterate ``theta (F,)``,
    ``L`` and the gradient ``g (F,)`` there, the damping, the preconditioner ``diag (F,)`` (None
    once a step is taken: recomputed at the new point) and the record of the steps."""

    obj: LinearClassObjective
    tol: float
    keep_out: Callable[[th.Tensor], th.Tensor]
    recycled: _Recycled
    start: float
    theta: th.Tensor
    L: float
    g: th.Tensor
    converged: bool
    lam: float = 0.0
    diag: th.Tensor | None = None
    dmax: float = 0.0
    g0: float | None = None
    trace: list[dict[str, float]] = dataclasses.field(default_factory=list)
    out: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"iterations": 0, "cg_iterations": 0, "decrement": math.inf}
    )


def _newton_iteration(st: _Newton) -> bool:
    """One damped Newton step from ``st`` (updated in place); False when the solve stops."""
    if st.diag is None:
        st.diag, st.dmax = _preconditioner(st.obj)
    gM = math.sqrt(dot(st.g, st.g / st.diag))
    st.g0 = gM if st.g0 is None else st.g0
    eta = min(0.5, math.sqrt(gM / st.g0)) if st.g0 > 0 else 0.5
    p, Bp, n_cg = _damped_newton_step(st.obj, st.g, st.diag, st.lam, eta, st.keep_out, st.recycled)
    st.out["cg_iterations"] += n_cg
    gp = dot(st.g, p)
    pred = gp - 0.5 * (dot(p, Bp) - st.lam * dot(p, p))  # the undamped model's rise
    scale = max(1.0, abs(st.L))
    if st.lam == 0.0:
        st.out["decrement"] = gp
    st.trace.append(
        {
            "seconds": time.perf_counter() - st.start,
            "L": st.L,
            "decrement": gp,
            "cg": n_cg,
            "damping": st.lam,
        }
    )
    if not pred > 1e-16 * scale and st.lam == 0.0:
        if gp / 2 <= max(st.tol, 1e-8) * scale:
            st.converged = True  # no ascent left at rounding level
            return False
        # A truncated CG step on a badly conditioned Hessian: the model promises nothing,
        # though the Newton decrement says there is ascent left. Damp and solve again.
        st.lam = _LAM_MIN * st.dmax
        st.trace[-1]["taken"] = 0.0
        return True
    return _take_or_refuse(st, p, gp, pred, scale)


def _take_or_refuse(st: _Newton, p: th.Tensor, gp: float, pred: float, scale: float) -> bool:
    """Try the step ``p (F,)`` (whose model rise is ``pred``, Newton decrement ``gp``): take it
    when ``L`` rises, update the damping; False when the solve stops."""
    last = st.lam == 0.0 and gp / 2 <= st.tol * scale
    cand, Lc, ratio = _candidate(
        st.obj, st.theta, p, st.L, pred, backtrack=st.lam == 0.0 and not last
    )
    st.lam = _next_damping(st.lam, ratio, _LAM_MIN * st.dmax)
    taken = Lc > st.L
    st.trace[-1]["taken"] = float(taken)
    if taken:
        st.obj.commit()
        st.theta, st.L = cand, Lc
        st.g = st.obj.grad()
        st.diag = None
        if last:
            st.converged = True
        return True
    st.obj.restore()
    if last or Lc == st.L:
        # The model's last refinement does not register in L: the gap is at rounding level.
        st.converged = gp / 2 <= max(st.tol, 1e-8) * scale
        return False
    return True


def _without_null_direction(obj: LinearClassObjective) -> Callable[[th.Tensor], th.Tensor]:
    """The projection (in place) of a parameter vector off the class's constant-reward
    direction, a null direction of ``L`` (the identity when the class has none)."""
    F = obj.features.n_features
    null = obj.features.constant_direction() if F > 0 else None
    if null is not None:
        null = null.to(dtype=obj.w.dtype, device=obj.w.device)

    def keep_out(v: th.Tensor) -> th.Tensor:
        """``v`` without its component along the constant-reward direction (a null direction)."""
        return v if null is None else v.sub_(null, alpha=dot(v, null))

    return keep_out


def _preconditioner(obj: LinearClassObjective) -> tuple[th.Tensor, float]:
    """The diagonal preconditioner ``diag(B)`` plus a ridge of ``_RIDGE`` times its largest
    entry, and that entry (the damping's unit)."""
    diag = obj.curvature_diagonal()
    dmax = float(diag.max().clamp_min(1e-300))
    return diag + _RIDGE * dmax, dmax


def _damped_newton_step(
    obj: LinearClassObjective,
    g: th.Tensor,
    diag: th.Tensor,
    lam: float,
    eta: float,
    keep_out: Callable[[th.Tensor], th.Tensor],
    recycled: _Recycled,
) -> tuple[th.Tensor, th.Tensor, int]:
    """``(p, B p, CG steps)``: the solution of ``(B + lam I) p = g`` by preconditioned
    conjugate gradients to the relative residual ``eta`` (off the null direction)."""

    def damped(v: th.Tensor, lam: float = lam) -> th.Tensor:
        return obj.neg_hvp(v).add_(v, alpha=lam) if lam > 0 else obj.neg_hvp(v)

    recycled.start(lam)
    F = obj.features.n_features
    return _pcg(
        damped,
        keep_out(g.clone()),
        diag + lam,
        eta,
        max(50, min(4 * F, _CG_MAX)),
        keep_out,
        recycled if _RECYCLE_PAIRS > 0 else None,
    )


def _candidate(
    obj: LinearClassObjective,
    theta: th.Tensor,
    p: th.Tensor,
    L: float,
    pred: float,
    *,
    backtrack: bool,
) -> tuple[th.Tensor, float, float]:
    """``(theta + p, L there, the ratio of the actual rise to the predicted one)``, left
    uncommitted; with ``backtrack`` a full step that does not raise ``L`` is shortened (the
    direction was right: the ratio counts as 0.5)."""
    cand = theta + p
    Lc = obj.value(cand, commit=False)
    ratio = (Lc - L) / pred if math.isfinite(Lc) and pred > 0 else -math.inf
    if backtrack and not Lc > L:
        shorter = _backtrack(obj, theta, p, L)
        if shorter is not None:
            cand, Lc, ratio = *shorter, 0.5  # keep lam = 0: the direction was right
    return cand, Lc, ratio


def _backtrack(
    obj: LinearClassObjective, theta: th.Tensor, p: th.Tensor, L: float
) -> tuple[th.Tensor, float] | None:
    """``(theta + a p, L there)`` for the largest ``a = 1/2, 1/4, ...`` above
    ``_BACKTRACK_MIN`` where ``L`` rises, or None (the last trial point is left uncommitted).

    The Newton step overshoots where directions of tiny curvature (e.g. utilities of states the
    behaviour almost never visits) get huge components: backtracking along it comes before
    damping, which would crawl along those directions.
    """
    a = 0.5
    while a > _BACKTRACK_MIN:
        obj.restore()
        trial = theta + a * p
        Lt = obj.value(trial, commit=False)
        if Lt > L:
            return trial, Lt
        a *= 0.5
    return None


def _next_damping(lam: float, ratio: float, smallest: float) -> float:
    """The Levenberg-Marquardt damping after a step whose actual rise was ``ratio`` times the
    model's: raised (at least to ``smallest``) below 1/4, lowered above 3/4 (to 0 from near
    ``smallest``)."""
    if ratio < 0.25:
        return max(16.0 * lam, smallest)
    if ratio > 0.75:
        return lam / 8.0 if lam > 8.0 * smallest else 0.0
    return lam


def _pcg(
    matvec: Any,
    g: th.Tensor,
    diag: th.Tensor,
    eta: float,
    max_iter: int,
    keep_out: Any = None,
    pre: _Recycled | None = None,
) -> tuple[th.Tensor, th.Tensor, int]:
    """Preconditioned conjugate gradients for ``B p = g`` (``B p = matvec(p)``), to relative
    residual ``eta`` in the norm of the diagonal ``diag``; stops early on non-positive
    curvature (then the iterate so far, or the preconditioned gradient first). The
    preconditioner is ``pre`` (the diagonal refined by earlier solves' pairs) or ``diag``, and
    ``pre`` gains this solve's pairs. ``keep_out`` (in place) removes a null direction of ``B``
    from every search direction (projected CG), so rounding in ``g`` cannot grow into a huge
    step along it.

    Returns:
        ``(p, B p, CG steps)``.
    """
    x = th.zeros_like(g)
    Bx = th.zeros_like(g)
    project = keep_out if keep_out is not None else (lambda v: v)

    def precondition(r: th.Tensor) -> th.Tensor:
        return project(r / diag if pre is None else pre.apply(r, diag))

    r = g.clone()
    z = precondition(r)
    p = z.clone()
    rz = dot(r, z)
    target = eta * math.sqrt(dot(r, r / diag))
    n = 0
    for n in range(1, max_iter + 1):
        Bp = matvec(p)
        pBp = dot(p, Bp)
        if not pBp > 0:
            if n == 1:
                x, Bx = p, Bp
            break
        if pre is not None:
            pre.add(p, Bp)
        a = rz / pBp
        x.add_(p, alpha=a)
        Bx.add_(Bp, alpha=a)
        r.sub_(Bp, alpha=a)
        if math.sqrt(max(dot(r, r / diag), 0.0)) <= target:
            break
        z = precondition(r)
        rz_new = dot(r, z)
        if not rz_new > 0:
            # the preconditioned residual has no component along the residual (it fell into
            # the projected-out direction, or below rounding): no further CG direction exists
            break
        p = z.add_(p, alpha=rz_new / rz)
        rz = rz_new
    return x, Bx, n


class _Recycled:
    """A preconditioner that learns from the conjugate-gradient steps of earlier solves.

    Successive Newton steps solve systems with nearly the same Hessian. Each CG step gives a
    pair ``(p, B p)``; the last :data:`_RECYCLE_PAIRS` pairs define a limited-memory BFGS
    inverse with the diagonal preconditioner as its initial matrix (automatic preconditioning,
    Morales and Nocedal, SIAM J. Optim. 10(4), 2000): exact on the span of the pairs where the
    Hessian has not moved, the diagonal elsewhere. Pairs from damped solves are shifted to the
    damping of the next solve. It changes only how fast CG reaches the same stopping test.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.pairs: list[tuple[th.Tensor, th.Tensor]] = []  # (s, B s undamped) in use
        self._new: list[tuple[th.Tensor, th.Tensor]] = []  # this solve's, used from the next
        self.lam = 0.0

    def start(self, lam: float) -> None:
        """Begin a solve with the matrix ``B + lam I``: the pairs of the solves before it
        (CG needs one fixed preconditioner per solve)."""
        self.pairs = (self.pairs + self._new)[-self.size :] if self.size > 0 else []
        self._new = []
        self.lam = lam

    def add(self, s: th.Tensor, Bs: th.Tensor) -> None:
        """Keep a CG step's pair (``Bs`` of this solve's damped matrix) for later solves."""
        if self.size <= 0:
            return
        y = Bs.sub(s, alpha=self.lam) if self.lam > 0 else Bs.clone()
        self._new.append((s.clone(), y))
        del self._new[: -self.size]

    def apply(self, r: th.Tensor, diag: th.Tensor) -> th.Tensor:
        """``M^{-1} r`` by the two-loop recursion over the pairs (damped by :attr:`lam`),
        starting from ``diag``."""
        q = r.clone()
        used = []
        for s, y0 in reversed(self.pairs):
            y = y0.add(s, alpha=self.lam) if self.lam > 0 else y0
            sy = dot(s, y)
            if not sy > 0:
                continue
            a = dot(s, q) / sy
            q.sub_(y, alpha=a)
            used.append((s, y, sy, a))
        z = q.div_(diag)
        for s, y, sy, a in reversed(used):
            b = dot(y, z) / sy
            z.add_(s, alpha=a - b)
        return z
