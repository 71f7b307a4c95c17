"""Compiled passes of a linear class's log-likelihood on CPU (numba, optional): the gradient and
the Hessian-vector product of :class:`imitation_meg.core.likelihood.ClassObjective`.

Unknown-utility MEG spends nearly all of its time in Hessian-vector products (the conjugate
gradients of every Newton step). In torch each step of their two passes is a sparse product
(torch's CSR kernel zero-fills and writes its ``(A, S)`` output) and about ten elementwise
kernels over ``(A, S)`` arrays. Here one compiled loop per step does all of it, state by state:

- **tangent backward** ``dV_t(s) = sum_a pi_t(a | s) (u(s, a) + gamma E[dV_{t+1}(s') | s, a])``
  (one gather of the successors' ``dV_{t+1}`` per stored transition);
- **tangent forward** ``dq_t(s, a) = pi_t(a | s) (rho_t(s) (dQ_t(s, a) - dV_t(s)) + drho_t(s))``
  (the same gather again: recomputing ``dQ_t`` costs less than storing it, ``(H, S, A)``), then
  ``drho_{t+1}(s') = gamma sum_{(s, a) -> s'} T[s, a, s'] dq_t(s, a)`` as a gather over each
  state's predecessors (the transposed transitions, built once per objective);
- and the gradient's forward pass ``rho_{t+1} = nu_{t+1} + gamma push(rho_t pi_t)`` the same way,
  with the curvature diagonal ``sum_t |rho_t| pi_t`` beside it.

For state features (every utility of the state, a target, ``(S, F)`` features) the sums over
time are kept per state (``(1, S)``): ``phi^T`` of a state-action array only needs its sums over
actions. The policy ``pi (H, A, S)`` and ``rho (H, S)`` are the objective's own buffers.

Determinism: every output entry is a sum over time (and over a state's actions and
predecessors) in a fixed order, written by the one thread that owns its state, so results are
the same bits with any number of threads. The math is the torch passes' (tests hold them
together to rounding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.kernels.fused import call_specialised
from imitation_meg.core.kernels.operators import PassMDP

__all__ = ["MIN_WORK", "STORE_MAX_BYTES", "ClassPasses", "usable"]

# Compiled passes run where a pass touches at least this many stored transitions times steps
# (S x A x B x H); below it the torch passes cost little and the compiled code's first use in a
# process (importing numba, loading its cache: ~0.4 s) would not pay off.
MIN_WORK = 1 << 21
# The Hessian-vector pass keeps ``pi_t (dQ_t - dV_t)``, ``(H, A, S)``, from its backward half
# for its forward half up to this size; above it the forward half gathers ``dQ_t`` again.
STORE_MAX_BYTES = 1 << 30
# Fixed chunks of states: the unit of parallel work.
N_CHUNKS = 256


def usable(mdp: PassMDP, w: th.Tensor) -> bool:
    """Whether the compiled passes run for this objective: numba installed, CPU, float32 /
    float64, and at least :data:`MIN_WORK` transitions times steps."""
    op = mdp.operator
    return (
        _threads.has_numba()
        and w.device.type == "cpu"
        and w.dtype in (th.float32, th.float64)
        and op.n_states * op.n_actions * op.branching * w.shape[0] >= MIN_WORK
    )


# ------------------------------------------------------------------ the loops (compiled)
# Each loop is compiled twice: serial (one thread: the push-forward scatters each state-action
# pair's mass to its successors as soon as it is formed) and parallel (a chunk of states per
# task: the masses are stored, then each state gathers its own from its predecessors). Both add
# a state's incoming masses in the same order (the predecessors' row order): the same bits.
# Index arrays are unsigned: numba then skips the negative-index wraparound of every load (a
# third of the gather's time otherwise).
def _chunk(c: int, n: int) -> tuple[int, int]:  # pragma: no cover - compiled by numba
    size = (n + N_CHUNKS - 1) // N_CHUNKS
    lo = min(n, c * size)
    return lo, min(n, lo + size)


def _scatter(
    nxt: Any, prob: Any, acc: Any, row: int, v: float, B: int
) -> None:  # pragma: no cover - compiled by numba
    """``acc(s') += T[s, a, s'] v`` over the stored successors of the row ``s * A + a``
    (the serial push-forward, one state-action pair at a time)."""
    if v != 0.0:  # adds +-0 otherwise: the same bits
        for b in range(B):
            acc[nxt[row, b]] += prob[row, b] * v


def _gather(
    tptr: Any, tsrc: Any, tprob: Any, m: Any, gamma: float, base: Any, out: Any
) -> None:  # pragma: no cover - compiled by numba
    """The parallel push-forward: ``out(s') = base(s') + gamma * sum_{(s, a) -> s'} T[s, a, s']
    m(a * S + s)``, each state over its predecessors in row order."""
    S = out.shape[0]
    for c in numba.prange(N_CHUNKS):
        lo, hi = _chunk_c(c, S)
        for s in range(lo, hi):
            e = 0.0
            for k in range(tptr[s], tptr[s + 1]):
                e += tprob[k] * m[tsrc[k]]
            out[s] = base[s] + gamma * e


def _finish(acc: Any, gamma: float, base: Any, out: Any) -> None:  # pragma: no cover - compiled
    """The serial push-forward's end: ``out = base + gamma * acc``."""
    for s in range(out.shape[0]):
        out[s] = base[s] + gamma * acc[s]


def _begin(serial: bool, t: int, H: int, acc: Any) -> bool:  # pragma: no cover - compiled
    """Whether step ``t`` of ``H`` pushes its masses forward; the serial push-forward's
    accumulator ``acc`` cleared for it."""
    push = t + 1 < H
    if serial and push:
        acc[:] = 0.0
    return push


def _forward(
    tptr: Any,
    tsrc: Any,
    tprob: Any,
    m: Any,
    acc: Any,
    gamma: float,
    base: Any,
    out: Any,
    serial: bool,
    push: bool,
) -> None:  # pragma: no cover - compiled by numba
    """The push-forward's end, where the step pushes: ``out = base + gamma * acc`` (serial),
    or each state's masses gathered from ``m`` (parallel)."""
    if push and serial:
        _finish_c(acc, gamma, base, out)
    elif push:
        _gather_c(tptr, tsrc, tprob, m, gamma, base, out)


def _grad(
    graph: tuple[Any, Any, Any, Any, Any],
    pi: Any,
    nu: Any,
    gamma: float,
    rho: Any,
    m: Any,
    acc: Any,
    G: Any,
    C: Any,
    serial: bool,
    A: int,
    B: int,
) -> None:  # pragma: no cover - compiled by numba
    """The gradient's forward pass: ``rho (H, S)`` from ``nu``; ``G (k, S)`` loses
    ``sum_t rho_t pi_t`` (``k = 1``: summed over actions) and ``C (A, S)`` gains
    ``sum_t |rho_t| pi_t``. ``m (A * S,)`` and ``acc (S,)`` are scratch. ``graph`` is the
    MDP's transitions by row, ``(nxt, prob)``, and by successor, ``(tptr, tsrc, tprob)``."""
    nxt, prob, tptr, tsrc, tprob = graph
    numba.literally(A)
    numba.literally(B)
    H, S = pi.shape[0], pi.shape[2]
    per_state = G.shape[0] == 1
    rho[0, :] = nu[0, :]
    for t in range(H):
        pit = pi[t]
        rt = rho[t]
        push = _begin_c(serial, t, H, acc)
        for c in numba.prange(N_CHUNKS):
            lo, hi = _chunk_c(c, S)
            for s in range(lo, hi):
                r = rt[s]
                ar = abs(r)
                g = 0.0
                for a in range(A):
                    p = pit[a, s]
                    v = r * p
                    C[a, s] += ar * p
                    if per_state:
                        g += v
                    else:
                        G[a, s] -= v
                    if not serial:
                        m[a * S + s] = v
                    elif push:
                        _scatter_c(nxt, prob, acc, s * A + a, v, B)
                if per_state:
                    G[0, s] -= g
        _forward_c(tptr, tsrc, tprob, m, acc, gamma, nu[t + 1], rho[t + 1], serial, push)


def _tangent(
    nxt: Any,
    prob: Any,
    dvn: Any,
    u: Any,
    gamma: float,
    per_state: bool,
    s: int,
    a: int,
    A: int,
    B: int,
) -> float:  # pragma: no cover - compiled by numba
    """``dQ_t(s, a) = u(s, a) + gamma E[dV_{t+1}(s') | s, a]``."""
    row = s * A + a
    e = 0.0
    for b in range(B):  # zero-probability padding adds 0 (dV is finite)
        e += prob[row, b] * dvn[nxt[row, b]]
    return u[0 if per_state else a, s] + gamma * e


def _hvp(  # noqa: C901 (one compiled loop nest: a helper per phase would cost numba a call per state)
    graph: tuple[Any, Any, Any, Any, Any],
    pi: Any,
    rho: Any,
    u: Any,
    gamma: float,
    dV: Any,
    Y: Any,
    dq: Any,
    drho: Any,
    acc: Any,
    zero: Any,
    dG: Any,
    serial: bool,
    A: int,
    B: int,
) -> None:  # pragma: no cover - compiled by numba
    """``dG (k, S)`` += ``sum_t dq_t`` of the tangent ``u (k, S)`` (``k = 1``: a state reward,
    and ``dG`` summed over actions). Scratch: ``dV (H + 1, S)`` (its last row zeros), ``Y``
    (``(H, A, S)``: the backward pass keeps ``pi_t (dQ_t - dV_t)`` for the forward pass; or
    ``(1, A, S)``: the forward pass gathers ``dQ_t`` again), ``dq (A * S,)``, ``drho, acc
    (S,)``; ``zero (S,)`` zeros. ``graph`` as :func:`_grad`'s."""
    nxt, prob, tptr, tsrc, tprob = graph
    numba.literally(A)
    numba.literally(B)
    H, S = pi.shape[0], pi.shape[2]
    per_state = u.shape[0] == 1
    stored = Y.shape[0] == H
    for back in range(H):  # tangent backward
        t = H - 1 - back
        pit = pi[t]
        dvn = dV[t + 1]
        dvt = dV[t]
        yt = Y[t if stored else 0]
        for c in numba.prange(N_CHUNKS):
            lo, hi = _chunk_c(c, S)
            for s in range(lo, hi):
                dv = 0.0
                for a in range(A):
                    x = _tangent_c(nxt, prob, dvn, u, gamma, per_state, s, a, A, B)
                    dv += pit[a, s] * x
                    if stored:
                        yt[a, s] = x
                dvt[s] = dv
                if stored:
                    for a in range(A):
                        yt[a, s] = pit[a, s] * (yt[a, s] - dv)
    drho[:] = 0.0
    for t in range(H):  # tangent forward
        pit = pi[t]
        rt = rho[t]
        dvn = dV[t + 1]
        dvt = dV[t]
        yt = Y[t if stored else 0]
        push = _begin_c(serial, t, H, acc)
        for c in numba.prange(N_CHUNKS):
            lo, hi = _chunk_c(c, S)
            for s in range(lo, hi):
                r = rt[s]
                d = drho[s]
                dvs = dvt[s]
                total = 0.0
                for a in range(A):
                    if stored:
                        v = r * yt[a, s] + d * pit[a, s]
                    else:
                        x = _tangent_c(nxt, prob, dvn, u, gamma, per_state, s, a, A, B)
                        v = pit[a, s] * (r * (x - dvs) + d)
                    if per_state:
                        total += v
                    else:
                        dG[a, s] += v
                    if not serial:
                        dq[a * S + s] = v
                    elif push:
                        _scatter_c(nxt, prob, acc, s * A + a, v, B)
                if per_state:
                    dG[0, s] += total
        # drho is read above for every state before it is rewritten
        _forward_c(tptr, tsrc, tprob, dq, acc, gamma, zero, drho, serial, push)


def _one_step_curvature(
    nxt: Any, prob: Any, labels: Any, C: Any, keys: Any, out: Any
) -> None:  # pragma: no cover - compiled by numba
    """``out[k] += sum_s C(s) Var_{a ~ C(s, .) / C(s)}(P(label(s') = k | s, a))`` for the
    labels ``k`` of the successors of every state ``s`` (``C (A, S)``, ``C(s) = sum_a C(s, a)``;
    ``keys (A * B,)`` scratch)."""
    A, S = C.shape
    B = nxt.shape[1]
    for s in range(S):
        total = 0.0
        for a in range(A):
            total += C[a, s]
        if not total > 0.0:
            continue
        n = 0
        for a in range(A):
            for b in range(B):
                keys[n] = labels[nxt[s * A + a, b]]
                n += 1
        for i in range(n):
            k = keys[i]
            seen = False
            for j in range(i):
                if keys[j] == k:
                    seen = True
                    break
            if seen:
                continue
            m1 = 0.0
            m2 = 0.0
            for a in range(A):
                pa = 0.0
                for b in range(B):
                    if labels[nxt[s * A + a, b]] == k:
                        pa += prob[s * A + a, b]
                m1 += C[a, s] * pa
                m2 += C[a, s] * pa * pa
            out[k] += max(m2 - m1 * m1 / total, 0.0)


numba: Any = None
_chunk_c: Any = None
_tangent_c: Any = None
_scatter_c: Any = None
_gather_c: Any = None
_finish_c: Any = None
_begin_c: Any = None
_forward_c: Any = None
_compiled: dict[tuple[str, bool], Any] = {}


def _kernel(name: str, serial: bool) -> Any:
    """The compiled loop ``name`` (``"grad"``, ``"hvp"`` or the serial ``"curvature"``),
    serial or parallel (compiled on first use, cached on disk by numba)."""
    global numba, _chunk_c, _tangent_c, _scatter_c, _gather_c, _finish_c
    global _begin_c, _forward_c
    if not _compiled:
        import numba as imported  # the loops' ``numba.prange`` reads this module's global

        numba = imported
        _chunk_c = numba.njit(cache=True, nogil=True, inline="always")(_chunk)
        _tangent_c = numba.njit(cache=True, nogil=True, inline="always")(_tangent)
        _scatter_c = numba.njit(cache=True, nogil=True, inline="always")(_scatter)
        _gather_c = numba.njit(cache=True, nogil=True, inline="always")(_gather)
        _finish_c = numba.njit(cache=True, nogil=True, inline="always")(_finish)
        _begin_c = numba.njit(cache=True, nogil=True, inline="always")(_begin)
        _forward_c = numba.njit(cache=True, nogil=True, inline="always")(_forward)
    key = (name, serial)
    if key not in _compiled:
        if name == "curvature":
            _compiled[key] = numba.njit(cache=True, nogil=True)(_one_step_curvature)
        else:
            source = _grad if name == "grad" else _hvp
            _compiled[key] = numba.njit(parallel=not serial, cache=True, nogil=True)(source)
    return _compiled[key]


def _np(t: th.Tensor) -> np.ndarray:
    """A C-contiguous numpy view (or copy) of a CPU tensor."""
    return np.ascontiguousarray(t.detach().numpy())


class ClassPasses:
    """The compiled gradient and Hessian-vector passes of one objective's MDP.

    Args:
        mdp: the MDP (CPU).
        dtype: the objective's dtype.
        per_state: whether the class's features are state features (then the sums over time
            are kept per state, ``(1, S)``; else per state-action pair, ``(A, S)``).
        horizon: ``H``, the objective's number of steps.
    """

    def __init__(self, mdp: PassMDP, dtype: th.dtype, *, per_state: bool, horizon: int) -> None:
        S, A = self.S, self.A = mdp.n_states, mdp.n_actions
        self.gamma = float(mdp.discount)
        self.per_state = per_state
        self.nxt, self.prob = mdp.operator.branching_arrays(dtype)
        self.B = int(self.nxt.shape[1])
        self.tptr, self.tsrc, self.tprob = _transposed(self.nxt, self.prob, S, A)
        dt = self.prob.dtype
        self._m = np.empty(S * A, dtype=dt)
        self._acc = np.empty(S, dtype=dt)
        self._drho = np.empty(S, dtype=dt)
        self._zero = np.zeros(S, dtype=dt)
        self._dV = np.zeros((horizon + 1, S), dtype=dt)
        store = horizon * A * S * dt.itemsize <= STORE_MAX_BYTES
        self._Y = np.empty((horizon if store else 1, A, S), dtype=dt)

    def grad(
        self, pi: th.Tensor, nu: th.Tensor, rho: th.Tensor, wsum: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """``(G, C)``: ``wsum - sum_t rho_t pi_t`` ``(k, S)`` and ``sum_t |rho_t| pi_t``
        ``(A, S)`` for the policy ``pi (H, A, S)``; writes ``rho (H, S)`` (the forward pass from
        ``nu``)."""
        G = _np(wsum.sum(0, keepdim=True) if self.per_state else wsum).copy()
        C = np.zeros((self.A, self.S), dtype=G.dtype)
        args = (_np(pi), _np(nu), self.gamma, _np(rho), self._m, self._acc, G, C)
        self._run("grad", args)
        return th.from_numpy(G), th.from_numpy(C)

    def _run(self, name: str, args: tuple[Any, ...]) -> None:
        """The compiled loop ``name`` on the MDP's transitions (both directions) and ``args``,
        serial on one numba thread, else parallel (torch's count, see :mod:`_threads`)."""
        with _threads.numba_threads() as n:
            graph = (self.nxt, self.prob, self.tptr, self.tsrc, self.tprob)
            call_specialised(_kernel(name, n == 1), (graph, *args, n == 1), self.A, self.B)

    def hvp(self, pi: th.Tensor, rho: th.Tensor, u: th.Tensor) -> th.Tensor:
        """``sum_t dq_t`` ``(k, S)`` of the tangent reward ``u`` (``(1, S)`` state reward or
        ``(A, S)``) at the policy ``pi (H, A, S)`` with forward pass ``rho (H, S)``."""
        dG = np.zeros((1 if self.per_state else self.A, self.S), dtype=self._m.dtype)
        args = (_np(pi), _np(rho), _np(u), self.gamma, self._dV, self._Y, self._m)
        self._run("hvp", (*args, self._drho, self._acc, self._zero, dG))
        return th.from_numpy(dG)

    def one_step_curvature(self, labels: th.Tensor, n_labels: int, C: th.Tensor) -> th.Tensor:
        """``(K,)``: the curvature of ``L`` along each one-hot label feature ``k`` that the
        choices one step before a state of label ``k`` carry: ``sum_s C(s) Var_a P(label(s') =
        k | s, a)``, with ``C (A, S) = sum_t |rho_t| pi_t`` the model's visits (the Hessian's
        diagonal if the reward of a state changed only the choice of the step before it)."""
        out = np.zeros(n_labels, dtype=np.float64)
        keys = np.empty(self.A * self.nxt.shape[1], dtype=np.int64)
        _kernel("curvature", True)(self.nxt, self.prob, _np(labels), C.numpy(), keys, out)
        return th.from_numpy(out).to(C.dtype)


def _transposed(
    nxt: np.ndarray, prob: np.ndarray, S: int, A: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transitions by successor: ``tptr (S + 1,)``, and per stored transition into ``s'``
    (in row order) its action-major source ``a * S + s`` and probability (zero-probability
    padding dropped)."""
    B = nxt.shape[1]
    rows = np.repeat(np.arange(S * A, dtype=np.int64), B)
    dest = nxt.reshape(-1).astype(np.int64)
    p = prob.reshape(-1)
    keep = p != 0
    rows, dest, p = rows[keep], dest[keep], p[keep]
    order = np.argsort(dest, kind="stable")
    src = (rows % A) * S + rows // A  # action-major index of the source row s * A + a
    idx = np.uint32 if S * A <= 2**32 - 1 else np.uint64
    tptr = np.zeros(S + 1, dtype=np.uint64)
    np.cumsum(np.bincount(dest, minlength=S), out=tptr[1:])
    return tptr, src[order].astype(idx), np.ascontiguousarray(p[order])
