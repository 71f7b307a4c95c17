"""Compiled fused passes of known-utility MEG on CPU (numba, optional): large sparse MDPs, and
small MDPs of any kind.

On a large sparse MDP a torch MEG pass (:func:`imitation_meg.core.kernels.known_passes.derivative_pass`)
runs, per step, one sparse product (torch's CSR kernel copies and zero-fills its output) and
about a dozen elementwise kernels over ``(A, S, 3K)`` arrays: memory traffic, several times
over. Here one compiled loop per step does all of it, block of states by block of states: it
gathers the successors' carries ``[V | g | h]``, forms ``Q``, ``G`` and ``d2Q`` of each state's
actions, takes the softmax, writes the state's new carry and adds its terms of ``L``, ``dL`` and
``d2L``. What remains is the latency of the random gathers (one per stored transition: ~90 ms a
step for the 1e6-state benchmark MDP on 2 cores, against ~18 ms for everything else; 2 threads
take half the time of 1). The math is the torch pass's (and
:func:`imitation_meg.core.known.objective_reference`'s); the tests hold them together.

On a small MDP the torch pass costs the overhead of its calls (about a dozen per step, a few
microseconds each), not its arithmetic: there one compiled call (:func:`_horizon`) runs the
whole pass, every step and every beta, on one thread (same step loop, :func:`_rows`): on
CliffWorld 10x4 (H = 30) a whole MEG call takes about half the time of the torch passes'
(docs/benchmark.md). The first compiled pass in a process costs about half a second of CPU once
(importing numba and loading the cached machine code), the time of a hundred small torch
passes; a process that scores once is better off without it. :data:`COMPILED_SMALL` (the
environment variable ``IMITATION_MEG_COMPILED_SMALL=0`` turns it off, and the one-off
``imitation-meg score`` command does so for itself and its workers) chooses; the choice is
fixed for a process, so its results do not depend on what ran before.

Determinism: states are split into ``N_CHUNKS`` fixed chunks whatever the number of threads;
each chunk accumulates its terms in float64 in state order and the chunks' sums are added in
chunk order, so a call gives the same bits with any number of threads.

The compiled loops need ``numba`` (the ``fast`` extra, part of ``all``); without it, or on GPU,
:func:`usable` is False and the torch passes run. The first call in a fresh install compiles the
loop (a few seconds; numba caches it on disk for later processes).
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

import numpy as np
import torch as th

from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.kernels.operators import PassMDP
from imitation_meg.progress import long_pass, progress

# numba (the ``fast`` extra) is imported on first use (importing it costs ~0.25 s).
_HAS_NUMBA = importlib.util.find_spec("numba") is not None
numba: Any = None

__all__ = [
    "COMPILED_SMALL",
    "DIRECT_ENTRY",
    "FUSED_MIN_SA",
    "N_CHUNKS",
    "SMALL_MAX_WORK",
    "available",
    "call_specialised",
    "derivative_pass",
    "small",
    "usable",
]

# Fused passes run on sparse MDPs with more than this many state-action pairs; measured (K = 1,
# H = 100, branching 4, 2 threads, the benchmark's meg_pass rows): 1.54x the torch pass at 8e4
# pairs, 1.47x at 8e5, 2.46x at 4e6. Below it the torch passes keep every step's rows (batched
# accumulations) and their calls cost little. Tests lower it.
FUSED_MIN_SA = 1 << 16
# Whether :func:`call_specialised` calls a compiled specialisation's entry point directly
# (numba internals; off: through numba's dispatcher, the same results, ~20 ms more a call).
DIRECT_ENTRY = True
# Passes over at most this many stored transitions times steps (S x A x branching x H) run in
# one compiled call on one thread (``small``). Measured, one thread (one pass of 1 / 8 betas,
# torch -> compiled): CliffWorld 10x4 (9.6e3) 0.84 -> 0.11 / 1.19 -> 0.67 ms; a random
# 300-state MDP, H = 20 (9.6e4) 1.02 -> 0.41 / 3.80 -> 3.14 ms; near 1.7e6 (a random 2000-state
# MDP, H = 50; CliffWorld 100x20) one beta still gains 1.4-1.5x but eight batched betas cost the
# same or 5% more, and torch's passes use every core: the limit stays below that.
SMALL_MAX_WORK = 1 << 20
#: Whether small MDPs (:func:`small`) run the compiled whole pass (else the torch passes).
COMPILED_SMALL = os.environ.get("IMITATION_MEG_COMPILED_SMALL", "1") != "0"
# Fixed chunks of states (the unit of parallel work and of the accumulation order).
N_CHUNKS = 256
# States per block: the block's successors are gathered before its softmaxes are taken.
_BLOCK = 256


def available() -> bool:
    """Whether numba is installed (the ``fast`` extra)."""
    return _HAS_NUMBA


def usable(mdp: PassMDP, r: th.Tensor) -> bool:
    """Whether a compiled pass runs for this MDP: numba installed, CPU, and either sparse and
    large enough (:data:`FUSED_MIN_SA`) or small (:func:`small`, with :data:`COMPILED_SMALL`)."""
    if not (_HAS_NUMBA and r.device.type == "cpu" and r.dtype in (th.float32, th.float64)):
        return False
    if small(mdp):
        return COMPILED_SMALL
    return mdp.n_states * mdp.n_actions > FUSED_MIN_SA and not mdp.operator.has_dense(r.dtype)


def small(mdp: PassMDP) -> bool:
    """Whether a pass over ``mdp`` is small enough for the one-thread whole-pass loop: at most
    :data:`SMALL_MAX_WORK` stored transitions times steps (there the torch passes cost their
    calls' overhead, about a dozen calls per step, not their arithmetic)."""
    op = mdp.operator
    return op.n_states * op.n_actions * op.branching * mdp.steps <= SMALL_MAX_WORK


def _rows(
    nxt: Any,
    prob: Any,
    r: Any,
    beta: float,
    gamma: float,
    Xn: Any,
    Xo: Any,
    pol: Any,
    wS: Any,
    is_policy: bool,
    first: bool,
    lo: int,
    hi: int,
    A: int,
    B: int,
) -> tuple[float, float, float]:  # pragma: no cover - compiled by numba
    """One backward step of one beta for the states ``lo .. hi - 1``: their carries in ``Xo``.

    Carries are ``[V | g | h]`` of the step; the step's behaviour weights are
    ``wS[s] * pol[s, a]`` (``is_policy``) or ``pol[s, a]`` (an occupancy), ``wS`` their state
    marginal. Returns the states' terms ``(E_w log pi, E_w (G - g), E_w d2Q - E_D h)``,
    accumulated in state order. The three gathered columns are summed in scalars (an
    accumulator array in memory costs twice the time of the gather itself).
    """
    E = np.zeros((min(_BLOCK, max(hi - lo, 0)) * A, 3))
    q = np.empty(A)
    G = np.empty(A)
    d2 = np.empty(A)
    P = np.empty(A)
    acc0 = 0.0
    acc1 = 0.0
    acc2 = 0.0
    for s0 in range(lo, hi, _BLOCK):
        s1 = min(hi, s0 + _BLOCK)
        if not first:  # gather the block's expectations first: a tight loop of loads
            for row in range(s0 * A, s1 * A):
                e0 = 0.0
                e1 = 0.0
                e2 = 0.0
                for b in range(B):  # zero-probability padding adds 0 (the carries are finite)
                    col = nxt[row, b]
                    v = prob[row, b]
                    e0 += v * Xn[col, 0]
                    e1 += v * Xn[col, 1]
                    e2 += v * Xn[col, 2]
                i = row - s0 * A
                E[i, 0] = e0
                E[i, 1] = e1
                E[i, 2] = e2
        for s in range(s0, s1):
            m = -math.inf
            for a in range(A):
                i = (s - s0) * A + a
                ra = r[s, a]
                qa = beta * ra + gamma * E[i, 0]
                q[a] = qa
                G[a] = ra + gamma * E[i, 1]
                d2[a] = gamma * E[i, 2]
                m = max(m, qa)
            se = 0.0
            for a in range(A):
                P[a] = math.exp(q[a] - m)
                se += P[a]
            lse = m + math.log(se)
            g = 0.0
            for a in range(A):
                P[a] /= se  # pi(a | s)
                g += P[a] * G[a]
            h = 0.0
            for a in range(A):
                dev = G[a] - g
                h += P[a] * (d2[a] + dev * dev)
            Xo[s, 0] = lse
            Xo[s, 1] = g
            Xo[s, 2] = h
            ws = wS[s]
            for a in range(A):
                w = ws * pol[s, a] if is_policy else pol[s, a]
                acc0 += w * (q[a] - lse)
                acc1 += w * (G[a] - g)
                acc2 += w * d2[a]
            acc2 -= ws * h
    return acc0, acc1, acc2


def _step(
    rows: Any, partial: Any, A: int, B: int
) -> None:  # pragma: no cover - compiled by numba (its Python form runs in no test)
    """One backward step of one beta for every state: :func:`_rows` over the fixed chunks, in
    parallel, with the step's arguments ``rows = (nxt, prob, r, beta, gamma, Xn, Xo, pol, wS,
    is_policy, first)`` (the carry ``Xo (S, 3)`` from ``Xn``); ``partial (N_CHUNKS, 3)`` gains
    each chunk's terms."""
    numba.literally(A)  # compiled for the MDP's sizes (see :func:`call_specialised`)
    numba.literally(B)
    S = rows[2].shape[0]
    n_chunks = partial.shape[0]
    size = (S + n_chunks - 1) // n_chunks
    for c in numba.prange(n_chunks):
        lo = min(S, c * size)
        a0, a1, a2 = _rows_c(*rows, lo, min(S, lo + size), A, B)
        partial[c, 0] += a0
        partial[c, 1] += a1
        partial[c, 2] += a2


def _horizon(
    nxt: Any,
    prob: Any,
    r: Any,
    betas: Any,
    gamma: float,
    pols: Any,
    D: Any,
    is_policy: bool,
    p0: Any,
    X: Any,
    out: Any,
) -> None:  # pragma: no cover - compiled by numba (its Python form runs in no test)
    """Whole passes on a small MDP, one thread: for each beta ``betas[k]`` the ``H`` steps of
    :func:`_rows` over all states, ``out[k] = (L, dL, d2L, E_p0[g_0], E_p0[h_0])``.

    ``pols`` is ``(H, S, A)`` or ``(1, S, A)`` (stationary), ``D (H, S)``, ``X (2, S, 3)`` the
    alternating carries (in the MDP's dtype).
    """
    H = D.shape[0]
    S = r.shape[0]
    for k in range(betas.shape[0]):
        L = 0.0
        dL = 0.0
        d2L = 0.0
        for back in range(H):
            t = H - 1 - back
            pol = pols[t] if pols.shape[0] > 1 else pols[0]
            a0, a1, a2 = _rows_c(
                nxt,
                prob,
                r,
                betas[k],
                gamma,
                X[(t + 1) % 2],
                X[t % 2],
                pol,
                D[t],
                is_policy,
                t == H - 1,
                0,
                S,
                r.shape[1],
                nxt.shape[1],
            )
            L += a0
            dL += a1
            d2L += a2
        eu = 0.0
        deu = 0.0
        for s in range(S):
            eu += p0[s] * X[0, s, 1]
            deu += p0[s] * X[0, s, 2]
        out[k, 0] = L
        out[k, 1] = dL
        out[k, 2] = d2L
        out[k, 3] = eu
        out[k, 4] = deu


_compiled: Any = None
_compiled_small: Any = None
_rows_c: Any = None  # the compiled :func:`_rows`, which both compiled loops call


def _kernel(small: bool = False) -> Any:
    """The compiled parallel step, or with ``small`` the compiled whole pass (compiled on first
    use; cached on disk by numba)."""
    global _compiled, _compiled_small, _rows_c, numba
    if _rows_c is None:
        import numba as imported  # the loop's ``numba.prange`` reads this module's global

        numba = imported
        _rows_c = numba.njit(cache=True, nogil=True)(_rows)
    if small:
        if _compiled_small is None:
            _compiled_small = numba.njit(cache=True, nogil=True)(_horizon)
        return _compiled_small
    if _compiled is None:
        _compiled = numba.njit(parallel=True, cache=True, nogil=True)(_step)
    return _compiled


def call_specialised(dispatcher: Any, args: tuple[Any, ...], A: int, B: int) -> None:
    """``dispatcher(*args, A, B)`` with the loop compiled for the literal sizes ``A`` and ``B``.

    With the numbers of actions and successors known when it compiles, numba unrolls the
    loops over them: a backward step of the class's Hessian-vector pass takes 1.9 ms instead of
    3.3 ms (a random 1e5-state MDP, 4 actions, 4 successors, one thread; torch's CSR product
    alone 1.7 ms). Numba's own dispatch on literal arguments costs about 20 ms a call, so after
    the first call (which compiles, or loads from numba's cache, and runs the specialisation)
    the compiled entry point is called directly, found by the arguments' numba types in the
    dispatcher's ``overloads`` (numba internals, present in numba 0.58-0.68). The arguments
    must keep their types from call to call (C-contiguous arrays of one dtype). Where the
    internals are missing (another numba, :data:`DIRECT_ENTRY` off, or a plain function), the
    call goes through the dispatcher: the same results, numba's dispatch cost per call.
    """
    overloads = getattr(dispatcher, "overloads", None) if DIRECT_ENTRY else None
    entry = None
    if isinstance(overloads, dict):
        import numba as nb  # imported already by whoever compiled ``dispatcher``

        key = (*(nb.typeof(a) for a in args), nb.types.literal(A), nb.types.literal(B))
        entry = getattr(overloads.get(key), "entry_point", None)
    if entry is None:
        dispatcher(*args, A, B)  # compiles (or loads) the specialisation, and runs it
    else:
        entry(*args, A, B)


def _np(t: th.Tensor) -> np.ndarray:
    """A C-contiguous numpy view (or copy) of a CPU tensor."""
    return np.ascontiguousarray(t.detach().numpy())


def derivative_pass(
    mdp: PassMDP, r: th.Tensor, beh: Any, betas: th.Tensor, *, second: bool = True
) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
    """The fused form of :func:`imitation_meg.core.kernels.known_passes.derivative_pass` (same outputs).

    One pass per beta (on these MDPs a pass over ``K`` betas costs about ``K`` passes in any
    form: the gathers of the successors' carries dominate, or on small MDPs the softmaxes); on a
    :func:`small` MDP all of them in one compiled call.

    Args:
        mdp: an MDP on CPU, sparse and large or small (see :func:`usable`).
        r: ``(S, A)`` utility of state-action pairs, in the MDP's dtype.
        beh: the :class:`~imitation_meg.core.kernels.known_passes.Behaviour` scored.
        betas: ``(K,)`` finite betas (``0`` gives the uniform policy's pass).
        second: report the second derivatives (computed either way: the ``h`` carry shares
            the cache lines of the other two); else ``d2L`` and ``dmodel_eu`` are NaN.

    Returns:
        ``(L, dL, d2L, model_eu, dmodel_eu)``, each ``(K,)`` float64.
    """
    if small(mdp):
        out = _small_pass(mdp, r, beh, betas)
    else:
        out = th.empty(5, int(betas.numel()), dtype=th.float64)
        for k, beta in enumerate(betas.detach().to(th.float64).reshape(-1).tolist()):
            out[:, k] = th.tensor(_one_beta(mdp, r, beh, beta), dtype=th.float64)
    if not second:
        out[2].fill_(math.nan)
        out[4].fill_(math.nan)
    return out[0], out[1], out[2], out[3], out[4]


def _small_pass(mdp: PassMDP, r: th.Tensor, beh: Any, betas: th.Tensor) -> th.Tensor:
    """``(5, K)``: :func:`_horizon`'s whole passes for ``betas``."""
    kernel = _kernel(small=True)
    nxt, prob = mdp.operator.branching_arrays(r.dtype)
    rn = _np(r)
    pi = beh.pi
    if pi is None:
        pols, is_policy = _np(beh.sa), False
    else:
        pols, is_policy = _np(pi if pi.ndim == 3 else pi.unsqueeze(0)), True
    b = np.ascontiguousarray(betas.detach().to(th.float64).reshape(-1).numpy())
    out = np.empty((b.shape[0], 5))
    X = np.zeros((2, mdp.n_states, 3), dtype=rn.dtype)
    p0 = mdp.initial_state_dist.detach().to(th.float64).numpy()
    kernel(nxt, prob, rn, b, float(mdp.discount), pols, _np(beh.D), is_policy, p0, X, out)
    return th.from_numpy(out.T.copy())


def _one_beta(
    mdp: PassMDP, r: th.Tensor, beh: Any, beta: float
) -> tuple[float, float, float, float, float]:
    """``(L, dL, d2L, model_eu, dmodel_eu)`` at one finite ``beta``: ``H`` compiled steps."""
    H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
    kernel = _kernel()
    nxt, prob = mdp.operator.branching_arrays(r.dtype)
    rn = _np(r)
    X = np.zeros((2, S, 3), dtype=rn.dtype)  # the carries of steps t and t + 1, alternating
    partial = np.zeros((N_CHUNKS, 3))
    pi = beh.pi
    stationary = _np(pi) if pi is not None and pi.ndim == 2 else None
    steps = progress(
        range(H - 1, -1, -1),
        enabled=long_pass(H, H * S * A * 3),
        desc="MEG pass (fused)",
        total=H,
    )
    gamma = float(mdp.discount)
    with _threads.numba_threads():  # torch's count, set by the entry point
        for t in steps:
            if pi is None:
                pol, is_policy = _np(beh.sa[t]), False
            else:
                pol, is_policy = (stationary if stationary is not None else _np(pi[t])), True
            Xn, Xo = X[(t + 1) % 2], X[t % 2]
            rows = (nxt, prob, rn, beta, gamma, Xn, Xo, pol, _np(beh.D[t]), is_policy, t == H - 1)
            call_specialised(kernel, (rows, partial), A, int(nxt.shape[1]))
    L, dL, d2L = partial.sum(0).tolist()
    p0 = mdp.initial_state_dist.detach().to(th.float64).numpy()
    eu, deu = (p0 @ X[0][:, 1:].astype(np.float64, copy=False)).tolist()
    return L, dL, d2L, eu, deu
