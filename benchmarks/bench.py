"""Benchmark rows (development tooling, not part of the installed package): our batched / sparse soft VI and MEG against imitation's numpy functions.

Every function here measures one row and returns a flat dict. The incumbent is
``imitation.algorithms.mce_irl.mce_partition_fh`` + ``mce_occupancy_measures`` (dense ``S x A x S``,
one rationality per call). Timings interleave ours and the incumbent and keep the best of
``repeats`` runs, so that a ratio is measured under the same machine load. Peak memory is the
peak resident set size of a fresh process per row (see :func:`run_row_in_subprocess`).

imitation is imported lazily (only the rows that compare with it need it).
"""

from __future__ import annotations

import gc
import json
import math
import pathlib
import resource
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg.core.known import meg
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import (
    occupancy_measures,
    soft_state_visitation,
    soft_value_iteration,
)

HERE = pathlib.Path(__file__).resolve().parent

__all__ = [
    "best_time",
    "copy_bandwidth",
    "epsilon_greedy_policy",
    "goal_directed_policy",
    "imitation_env",
    "imitation_meg_baseline",
    "peak_rss_mib",
    "row_meg_cliff",
    "row_meg_discounted",
    "row_meg_long",
    "row_meg_pass",
    "row_meg_random",
    "row_meg_unknown",
    "row_meg_unknown_random",
    "row_svi_cliff",
    "row_svi_random",
    "run_row_in_subprocess",
    "sparse_pass_bandwidth",
    "sparse_pass_breakdown",
]


def _sync(device: th.device | str) -> None:
    if th.device(device).type == "cuda":
        th.cuda.synchronize()


def best_time(
    fns: dict[str, Callable[[], Any]], repeats: int, device: str = "cpu"
) -> dict[str, float]:
    """Best-of-``repeats`` wall time (s) of each function, the functions interleaved per round.

    With ``repeats > 1`` every timed call follows an untimed warm-up call of the same function,
    so that each side is timed in its steady state (a user's loop), not after the other side
    has evicted its data and code from the caches: on CliffWorld 10x4 that eviction alone adds
    about 1 ms to a 5 ms call. Like ``timeit``, the garbage collector is paused while a
    function is timed.
    """
    times: dict[str, float] = dict.fromkeys(fns, math.inf)
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(repeats):
            for k, fn in fns.items():
                gc.collect()
                if repeats > 1:
                    fn()
                gc.disable()
                _sync(device)
                t0 = time.perf_counter()
                fn()
                _sync(device)
                times[k] = min(times[k], time.perf_counter() - t0)
                if gc_was_enabled:
                    gc.enable()
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def peak_rss_mib() -> float:
    """Peak resident set size of this process (MiB)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024.0 if sys.platform != "darwin" else kb / 2**20


def copy_bandwidth(n_bytes: int = 1 << 28, repeats: int = 5, device: str = "cpu") -> float:
    """Memory bandwidth (bytes/s) of a large-array copy: read + write bytes / best time."""
    n = n_bytes // 8
    src = th.ones(n, dtype=th.float64, device=device)
    dst = th.empty_like(src)
    t = best_time({"copy": lambda: dst.copy_(src)}, repeats, device)["copy"]
    return 2 * n * 8 / t


def sparse_pass_bandwidth(mdp: TabularMDP, repeats: int = 5) -> tuple[float, float]:
    """``(bytes per sparse backup, seconds)`` of one ``expect_next`` on one value vector.

    Bytes that must be touched: the CSR values and column indices, the row pointers, the value
    vector read once and the ``(S, A)`` output written once.
    """
    P, _ = mdp.operator.csr(mdp.dtype)
    v = th.randn(1, mdp.n_states, dtype=mdp.dtype, device=mdp.device)
    item = P.values().element_size()
    idx = P.col_indices().element_size()
    nnz = P.values().numel()
    S, A = mdp.n_states, mdp.n_actions
    nbytes = nnz * (item + idx) + (S * A + 1) * idx + S * item + S * A * item
    t = best_time({"pass": lambda: mdp.expect_next(v)}, repeats, str(mdp.device))["pass"]
    return float(nbytes), t


def imitation_env(mdp: TabularMDP) -> Any:
    """A duck-typed seals ``TabularModelPOMDP`` (the fields imitation's functions read)."""
    if mdp.utility is None:
        raise ValueError("imitation_env needs an MDP with a utility; this one has none.")
    return types.SimpleNamespace(
        transition_matrix=mdp.dense_transition().cpu().numpy(),
        reward_matrix=mdp.utility.cpu().numpy(),
        horizon=mdp.horizon,
        initial_state_dist=mdp.initial_state_dist.cpu().numpy(),
        state_dim=mdp.n_states,
        action_dim=mdp.n_actions,
    )


def imitation_meg_baseline(env: Any, pi: np.ndarray, *, xtol: float = 1e-10) -> dict[str, float]:
    """Known-utility MEG with imitation's functions: Brent's method on ``L(beta)``.

    ``L(beta) = sum_t sum_{s,a} D_t(s) pi_t(a|s) log pi_beta,t(a|s)`` with ``pi_beta`` from one
    ``mce_partition_fh(env, reward=beta * U)`` call per evaluation; the behaviour's occupancy
    ``D`` comes from one ``mce_occupancy_measures`` call. The search brackets the maximum from
    ``[0, 1/scale]`` (scipy's bracketing + Brent), like a user would; it has no access to the
    limits at ``beta = +-inf``.

    Returns:
        ``{"meg", "beta", "calls"}``.
    """
    from imitation.algorithms import mce_irl
    from scipy.optimize import minimize_scalar

    H, A = env.horizon, env.action_dim
    pi = np.broadcast_to(pi, (H, env.state_dim, A))
    D, _ = mce_irl.mce_occupancy_measures(env, pi=pi)
    w = D[:-1, :, None] * pi
    R = env.reward_matrix
    calls = [0]

    def neg_L(beta: float) -> float:
        calls[0] += 1
        _, _, p = mce_irl.mce_partition_fh(env, reward=beta * R)
        with np.errstate(divide="ignore"):
            lp = np.log(p)
        return -float(np.sum(np.where(w > 0, w * lp, 0.0)))

    scale = float(R.max() - R.min()) or 1.0
    opt = minimize_scalar(neg_L, bracket=(0.0, 1.0 / scale), method="brent", tol=xtol)
    return {"meg": -float(opt.fun) + H * math.log(A), "beta": float(opt.x), "calls": calls[0]}


def goal_directed_policy(mdp: TabularMDP, *, temperature: float = 0.5) -> th.Tensor:
    """A stationary ``(S, A)`` softmax policy on a one-step lookahead of the utility.

    Pursues the utility imperfectly, so its MEG has an interior optimum (a fair solver test).
    """
    r = mdp.reward_sa()
    U = mdp.utility if mdp.utility is not None and mdp.utility.ndim == 1 else r.amax(-1)
    q = r + mdp.expect_next(U.unsqueeze(0))[0]
    return th.softmax(q / (temperature * float(q.std()) + 1e-12), -1)


def epsilon_greedy_policy(mdp: TabularMDP, epsilon: float) -> th.Tensor:
    """A stationary ``(S, A)`` epsilon-greedy policy on the one-step lookahead of the utility
    (the greedy action of :func:`goal_directed_policy`'s scores, ties to the first).

    Stationary on purpose: the time-dependent optimal policy of a million-state MDP would take
    ``H * S * A`` floats (3.2 GB at H = 100, float64) by itself.
    """
    r = mdp.reward_sa()
    U = mdp.utility if mdp.utility is not None and mdp.utility.ndim == 1 else r.amax(-1)
    q = r + mdp.expect_next(U.unsqueeze(0))[0]
    greedy = th.nn.functional.one_hot(q.argmax(-1), mdp.n_actions).to(q.dtype)
    return (1.0 - epsilon) * greedy + epsilon / mdp.n_actions


def sparse_pass_breakdown(mdp: TabularMDP, repeats: int = 3) -> dict[str, float]:
    """What bounds one sparse backup (``expect_next`` of one value vector, state-major CSR).

    Times, best of ``repeats``: ``stream_s``, reading the CSR values and column indices once (a
    sum over each: the bandwidth part); ``gather_s``, reading the value vector at every stored
    column index (``index_select`` into a preallocated buffer: the random-access part); and
    ``pass_s``, the product itself. Returns those with ``sparse_pass_bytes``.
    """
    P, _ = mdp.operator.csr(mdp.dtype)
    v = th.randn(mdp.n_states, dtype=mdp.dtype, device=mdp.device)
    vals, cols = P.values(), P.col_indices()
    buf = th.empty_like(vals)
    nbytes, t_pass = sparse_pass_bandwidth(mdp, repeats)
    t = best_time(
        {
            "stream": lambda: (vals.sum(), cols.sum()),
            "gather": lambda: th.index_select(v, 0, cols, out=buf),
        },
        repeats,
        str(mdp.device),
    )
    return {
        "sparse_pass_bytes": nbytes,
        "sparse_pass_s": t_pass,
        "stream_s": t["stream"],
        "gather_s": t["gather"],
    }


# ---------------------------------------------------------------------- rows
def row_svi_cliff(
    width: int, height: int, horizon: int, n_betas: int, repeats: int, *, incumbent: bool = True
) -> dict[str, Any]:
    """Soft VI + occupancy on a seals CliffWorld, ``K`` betas, ours vs ``K`` incumbent pairs."""
    from imitation_meg.envs import cliff_world

    mdp = cliff_world(width=width, height=height, horizon=horizon)
    betas = np.linspace(0.1, 3.2, n_betas) if n_betas > 1 else np.array([1.0])
    bt = th.as_tensor(betas)
    out: dict[str, Any] = {}

    def ours() -> None:
        res = soft_value_iteration(mdp, bt)
        out["D"] = occupancy_measures(mdp, res.pi)

    fns: dict[str, Callable[[], Any]] = {"ours": ours}
    if incumbent:
        from imitation.algorithms import mce_irl

        env = imitation_env(mdp)

        def inc() -> None:
            Ds = []
            for b in betas:
                _, _, pi = mce_irl.mce_partition_fh(env, reward=b * env.reward_matrix)
                D, _ = mce_irl.mce_occupancy_measures(env, pi=pi)
                Ds.append(D)
            out["D_inc"] = np.stack(Ds)

        fns["incumbent"] = inc
    t = best_time(fns, repeats)
    m32 = mdp.to(dtype=th.float32)
    D32 = occupancy_measures(m32, soft_value_iteration(m32, bt.float()).pi)
    row: dict[str, Any] = {
        "task": "soft VI + occupancy",
        "env": f"CliffWorld {width}x{height}",
        "S": mdp.n_states,
        "A": mdp.n_actions,
        "H": horizon,
        "K": n_betas,
        "dtype": "float64",
        "device": "cpu",
        "ours_s": t["ours"],
        "incumbent_s": t.get("incumbent"),
        "err_vs_incumbent": float(np.abs(out["D"].numpy() - out["D_inc"]).max())
        if incumbent
        else None,
        "float32_err": float((D32.double() - out["D"]).abs().max()),
    }
    row["speedup"] = row["incumbent_s"] / row["ours_s"] if incumbent else None
    return row


def row_svi_random(
    n_states: int,
    horizon: int,
    n_betas: int,
    repeats: int,
    *,
    dtype: str = "float64",
    device: str = "cpu",
    incumbent: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Soft VI + state visitation on a random sparse MDP (A = 4, 4 successors)."""
    from imitation_meg.envs import random_mdp

    dt = th.float32 if dtype == "float32" else th.float64
    mdp = random_mdp(n_states, 4, horizon, branching=4, seed=seed, device=device)
    betas = (
        th.linspace(0.1, 3.2, n_betas, dtype=th.float64)
        if n_betas > 1
        else th.ones(1, dtype=th.float64)
    )
    mdp_dt = mdp.to(dtype=dt) if dt != th.float64 else mdp
    out: dict[str, Any] = {}

    def ours() -> None:
        out["V0"], out["D"] = soft_state_visitation(mdp_dt, betas.to(dt))

    fns: dict[str, Callable[[], Any]] = {"ours": ours}
    if incumbent:
        from imitation.algorithms import mce_irl

        env = imitation_env(mdp)

        def inc() -> None:
            Ds = []
            for b in betas.tolist():
                _, _, pi = mce_irl.mce_partition_fh(env, reward=b * env.reward_matrix)
                _, Dcum = mce_irl.mce_occupancy_measures(env, pi=pi)
                Ds.append(Dcum)
            out["D_inc"] = np.stack(Ds)

        fns["incumbent"] = inc
    t = best_time(fns, repeats, device)
    err32 = None
    if dt == th.float32:
        _, D64 = soft_state_visitation(mdp, betas)
        err32 = float((out["D"].double() - D64).abs().max() / D64.abs().max())
    breakdown = sparse_pass_breakdown(mdp_dt)
    row: dict[str, Any] = {
        "task": "soft VI + occupancy",
        "env": f"random sparse S={n_states:.0e}",
        "S": n_states,
        "A": 4,
        "H": horizon,
        "K": n_betas,
        "dtype": dtype,
        "device": device,
        "ours_s": t["ours"],
        "incumbent_s": t.get("incumbent"),
        "err_vs_incumbent": (
            float(np.abs(out["D"].cpu().numpy() - out["D_inc"]).max()) if incumbent else None
        ),
        "float32_err": err32,
        **breakdown,
    }
    row["speedup"] = row["incumbent_s"] / row["ours_s"] if incumbent else None
    return row


def row_meg_cliff(
    width: int, height: int, horizon: int, epsilon: float, repeats: int, *, fit_evals: int = 40
) -> dict[str, Any]:
    """Known-utility MEG end to end: ours vs Brent on imitation's ``mce_partition_fh``.

    ``speedup`` is against the Brent run itself; ``speedup_vs_fit`` against an imitation-based
    fit of ``fit_evals`` evaluations (the Brent run's time per evaluation times ``fit_evals``),
    the issue's yardstick.
    """
    from imitation_meg import policies
    from imitation_meg.envs import cliff_world

    mdp = cliff_world(width=width, height=height, horizon=horizon)
    pi = policies.epsilon_greedy(mdp, epsilon)
    env = imitation_env(mdp)
    out: dict[str, Any] = {}

    def ours() -> None:
        out["ours"] = meg(pi, mdp)

    def inc() -> None:
        out["inc"] = imitation_meg_baseline(env, pi.numpy())

    t = best_time({"ours": ours, "incumbent": inc}, repeats)
    m32 = mdp.to(dtype=th.float32)
    r32 = meg(pi.float(), m32)
    res, base = out["ours"], out["inc"]
    per_eval = t["incumbent"] / base["calls"]
    return {
        "task": f"known-utility MEG (eps-greedy {epsilon})",
        "env": f"CliffWorld {width}x{height}",
        "S": mdp.n_states,
        "A": mdp.n_actions,
        "H": horizon,
        "K": 1,
        "dtype": "float64",
        "device": "cpu",
        "ours_s": t["ours"],
        "incumbent_s": t["incumbent"],
        "speedup": t["incumbent"] / t["ours"],
        "speedup_vs_fit": fit_evals * per_eval / t["ours"],
        "fit_evals": fit_evals,
        "meg": res.meg,
        "meg_incumbent": base["meg"],
        "err_vs_incumbent": abs(res.meg - base["meg"]),
        "float32_err": abs(r32.meg - res.meg),
        "evaluations": res.evaluations,
        "passes": res.passes,
        "incumbent_calls": base["calls"],
    }


def row_meg_random(
    n_states: int,
    horizon: int,
    *,
    policy: str = "softmax",
    epsilon: float = 0.1,
    dtype: str = "float64",
    device: str = "cpu",
    seed: int = 0,
    n_threads: int = 1,
    float64_reference: bool = True,
) -> dict[str, Any]:
    """Known-utility MEG of a stationary policy on a random sparse MDP (timed once).

    ``policy``: ``"softmax"`` (:func:`goal_directed_policy`) or ``"epsilon_greedy"``
    (:func:`epsilon_greedy_policy` with ``epsilon``). With ``dtype="float32"`` and
    ``float64_reference`` the row also runs the float64 MEG (untimed; it needs the float64 MDP's
    memory beside the float32 one) and reports the difference. ``n_threads``: torch's (and the
    fused passes') threads for the timed call; the row records whether the fused passes ran.
    ``build_s``: building the MDP and the policy, timed apart from the call.
    """
    from imitation_meg.core.kernels import fused as _fused
    from imitation_meg.envs import random_mdp

    dt = th.float32 if dtype == "float32" else th.float64
    t_build = time.perf_counter()
    mdp = random_mdp(n_states, 4, horizon, branching=4, seed=seed, dtype=dt, device=device)
    if policy == "softmax":
        pi, label = goal_directed_policy(mdp), "softmax lookahead policy"
    elif policy == "epsilon_greedy":
        pi, label = epsilon_greedy_policy(mdp, epsilon), f"eps-greedy {epsilon} lookahead policy"
    else:
        raise ValueError(f"policy must be 'softmax' or 'epsilon_greedy', got {policy!r}.")
    _sync(device)
    build_s = time.perf_counter() - t_build
    threads = th.get_num_threads()
    th.set_num_threads(n_threads)
    try:
        t0 = time.perf_counter()
        res = meg(pi, mdp)
        _sync(device)
        elapsed = time.perf_counter() - t0
    finally:
        th.set_num_threads(threads)
    # the process's peak so far: the timed call's own, before the float64 reference below
    timed_peak = peak_rss_mib()
    err32 = None
    if dt == th.float32 and float64_reference:
        m64 = mdp.to(dtype=th.float64)
        err32 = abs(meg(pi.double(), m64).meg - res.meg)
    return {
        "task": f"known-utility MEG ({label})",
        "env": f"random sparse S={n_states:.0e}",
        "S": n_states,
        "A": 4,
        "H": horizon,
        "K": 1,
        "dtype": dtype,
        "device": device,
        "ours_s": elapsed,
        "build_s": build_s,
        "incumbent_s": None,
        "speedup": None,
        "meg": res.meg,
        "beta": res.beta,
        "converged": res.converged,
        "evaluations": res.evaluations,
        "passes": res.passes,
        "float32_err": err32,
        "timed_peak_rss_mib": timed_peak,
        "threads": n_threads,
        "fused": _fused.usable(mdp, mdp.reward_sa()),
    }


def row_meg_long(
    n_states: int, horizon: int, *, epsilon: float = 0.2, seed: int = 0
) -> dict[str, Any]:
    """Known-utility MEG of a time-dependent epsilon-greedy policy over a long horizon on a
    small random MDP (timed once; building the policy is not timed)."""
    from imitation_meg import policies
    from imitation_meg.envs import random_mdp

    mdp = random_mdp(n_states, 2, horizon, seed=seed)
    pi = policies.epsilon_greedy(mdp, epsilon)
    t0 = time.perf_counter()
    res = meg(pi, mdp)
    elapsed = time.perf_counter() - t0
    return {
        "task": f"known-utility MEG, long horizon (eps-greedy {epsilon}, time-dependent)",
        "env": f"random S={n_states}",
        "S": n_states,
        "A": 2,
        "H": horizon,
        "K": 1,
        "dtype": "float64",
        "device": "cpu",
        "ours_s": elapsed,
        "incumbent_s": None,
        "speedup": None,
        "meg": res.meg,
        "beta": res.beta,
        "converged": res.converged,
        "evaluations": res.evaluations,
        "passes": res.passes,
    }


def row_meg_unknown(
    width: int, height: int, horizon: int, epsilon: float, steps: int, restarts: int
) -> dict[str, Any] | None:
    """Exact unknown-utility MEG vs the paper's Algorithm 2 with the MLP (same policy and MDP).

    Both timed once, in this order, in one process. Returns None when
    ``imitation_meg.meg_unknown`` is not available.
    """
    import imitation_meg

    if not hasattr(imitation_meg, "meg_unknown"):
        return None
    from imitation_meg import policies
    from imitation_meg.envs import cliff_world

    mdp = cliff_world(width=width, height=height, horizon=horizon)
    pi = policies.epsilon_greedy(mdp, epsilon)
    t0 = time.perf_counter()
    exact = imitation_meg.meg_unknown(pi, mdp)
    t_exact = time.perf_counter() - t0
    t0 = time.perf_counter()
    mlp = imitation_meg.meg_unknown(
        pi, mdp, utility_model="mlp", steps=steps, restarts=restarts, seed=0
    )
    t_mlp = time.perf_counter() - t0
    return {
        "task": f"unknown-utility MEG (eps-greedy {epsilon}); baseline: Algorithm 2 MLP, "
        f"{steps} steps x {restarts} restarts",
        "env": f"CliffWorld {width}x{height}",
        "S": mdp.n_states,
        "A": mdp.n_actions,
        "H": horizon,
        "K": 1,
        "dtype": "float64",
        "device": "cpu",
        "ours_s": t_exact,
        "incumbent_s": t_mlp,
        "speedup": t_mlp / t_exact,
        "meg": exact.meg,
        "meg_incumbent": mlp.meg,
        "err_vs_incumbent": exact.meg - mlp.meg,
        "converged": exact.converged,
        "iterations": exact.extra["iterations"],
        "cg_iterations": exact.extra["cg_iterations"],
        "passes": exact.extra["passes"],
    }


def _seconds_to_reach(trace: list[dict[str, float]], value: float, bound: float) -> float | None:
    """Seconds after which the exact solver's iterate first scored ``value`` (from its trace)."""
    for step in trace:
        if step["L"] + bound >= value:
            return step["seconds"]
    return None


def row_meg_discounted(
    n_states: int, gamma: float, *, unknown: bool = True, seed: int = 0
) -> dict[str, Any]:
    """Known- and unknown-utility MEG (every state utility) in the discounted infinite-horizon
    setting on a random sparse MDP (4 actions, 4 successors), for the epsilon-greedy (0.3)
    policy: the times of each, the peak RSS, and the Bellman residual reached."""
    import imitation_meg
    from imitation_meg.envs import random_mdp

    mdp = random_mdp(n_states, 4, None, branching=4, discount=gamma, seed=seed)
    pi = imitation_meg.core.policies.epsilon_greedy(mdp, 0.3)
    t0 = time.perf_counter()
    known = imitation_meg.meg(pi, mdp)
    t_known = time.perf_counter() - t0
    row: dict[str, Any] = {
        "task": f"discounted MEG (gamma {gamma}), known utility"
        + (" and every state utility" if unknown else ""),
        "env": f"random sparse S={n_states:.0e}"
        if n_states >= 1000
        else f"random sparse S={n_states}",
        "S": n_states,
        "A": 4,
        "H": "inf",
        "K": 1,
        "dtype": "float64",
        "device": "cpu",
        "ours_s": t_known,
        "incumbent_s": None,
        "speedup": None,
        "meg": known.meg,
        "converged": known.converged,
        "bellman_residual": known.extra["bellman_residual"],
    }
    if unknown:
        t0 = time.perf_counter()
        res = imitation_meg.meg_unknown(pi, mdp)
        row.update(
            unknown_s=time.perf_counter() - t0,
            meg_unknown=res.meg,
            unknown_converged=res.converged,
            iterations=res.extra["iterations"],
            cg_iterations=res.extra["cg_iterations"],
        )
    return row


def row_meg_unknown_random(
    n_states: int,
    horizon: int,
    *,
    alg2_steps: int = 0,
    alg2_restarts: int = 1,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Exact unknown-utility MEG over every state utility on a random sparse MDP (4 actions,
    4 successors) for the softmax-lookahead policy, built on ``device``, and optionally the
    paper's Algorithm 2 (the 256-unit MLP on the one-hot states, ``alg2_steps`` Adam steps x
    ``alg2_restarts``) after it in the same process.

    The exact solver's time, its peak RSS (taken before Algorithm 2 runs), Newton steps, CG steps
    and passes over the MDP; with Algorithm 2, its time and value, the ratio of the two times and
    the time the exact solver took to first reach Algorithm 2's value (from its trace).
    """
    import imitation_meg
    from imitation_meg.envs import random_mdp

    mdp = random_mdp(n_states, 4, horizon, branching=4, seed=seed, device=device)
    pi = goal_directed_policy(mdp)
    _sync(device)
    t0 = time.perf_counter()
    exact = imitation_meg.meg_unknown(pi, mdp)
    _sync(device)
    t_exact = time.perf_counter() - t0
    row: dict[str, Any] = {
        "task": "unknown-utility MEG, every state utility (softmax lookahead policy)",
        "env": f"random sparse S={n_states:.0e}",
        "S": n_states,
        "A": 4,
        "H": horizon,
        "K": 1,
        "dtype": "float64",
        "device": device,
        "ours_s": t_exact,
        "incumbent_s": None,
        "speedup": None,
        "meg": exact.meg,
        "converged": exact.converged,
        "iterations": exact.extra["iterations"],
        "cg_iterations": exact.extra["cg_iterations"],
        "passes": exact.extra["passes"],
        "exact_peak_rss_mib": peak_rss_mib(),
    }
    if alg2_steps > 0:
        t0 = time.perf_counter()
        mlp = imitation_meg.meg_unknown(
            pi, mdp, utility_model="mlp", steps=alg2_steps, restarts=alg2_restarts, seed=0
        )
        t_mlp = time.perf_counter() - t0
        bound = horizon * math.log(4)
        reach = _seconds_to_reach(exact.extra["trace"], mlp.meg, bound)
        row.update(
            task=row["task"] + f"; baseline: Algorithm 2 MLP, {alg2_steps} steps x "
            f"{alg2_restarts} restarts",
            incumbent_s=t_mlp,
            speedup=t_mlp / t_exact,
            meg_incumbent=mlp.meg,
            err_vs_incumbent=exact.meg - mlp.meg,
            ours_to_incumbent_value_s=reach,
            speedup_at_incumbent_value=None if not reach else t_mlp / reach,
        )
    return row


def row_meg_pass(
    n_states: int, horizon: int, *, n_threads: int = 1, repeats: int = 1, seed: int = 0
) -> dict[str, Any]:
    """One known-utility MEG pass (``K = 1``, with second derivatives) on a random sparse MDP:
    the compiled fused pass (ours) against the torch pass (the incumbent), interleaved in one
    process with ``n_threads`` threads, best of ``repeats``; the numba compile is warmed up on
    a small MDP first (it is cached on disk after the first process)."""
    from imitation_meg.core.kernels import fused as _fused
    from imitation_meg.core.kernels import operators as _operators
    from imitation_meg.core.known import MEGObjective
    from imitation_meg.envs import random_mdp

    if not _fused.available():
        raise RuntimeError("the fused pass needs numba (pip install -e '.[fast]').")
    threads = th.get_num_threads()
    th.set_num_threads(n_threads)
    limit, dense = _fused.FUSED_MIN_SA, _operators.DENSE_FAST_PATH_ENTRIES
    try:
        _operators.DENSE_FAST_PATH_ENTRIES = 0  # a sparse tiny MDP: the compile's warm-up
        _fused.FUSED_MIN_SA = 0
        tiny = random_mdp(50, 4, 3, branching=4, seed=seed)
        MEGObjective(tiny, goal_directed_policy(tiny)).evaluate_batch(th.ones(1))
        _operators.DENSE_FAST_PATH_ENTRIES = dense
        mdp = random_mdp(n_states, 4, horizon, branching=4, seed=seed)
        obj = MEGObjective(mdp, goal_directed_policy(mdp))
        beta = th.ones(1, dtype=th.float64)
        outs: dict[bool, Any] = {}

        def run(fused: bool) -> None:
            _fused.FUSED_MIN_SA = 0 if fused else 2**62
            outs[fused] = obj.evaluate_batch(beta)

        ours_s = inc_s = math.inf
        for _ in range(repeats):
            ours_s = min(ours_s, _timed(lambda: run(True)))
            inc_s = min(inc_s, _timed(lambda: run(False)))
    finally:
        _fused.FUSED_MIN_SA, _operators.DENSE_FAST_PATH_ENTRIES = limit, dense
        th.set_num_threads(threads)
    err = max(
        abs(float(a[0]) - float(b[0])) / max(1.0, abs(float(b[0])))
        for a, b in zip(outs[True], outs[False], strict=True)
    )
    return {
        "task": "one known-utility MEG pass (K = 1, d2L); incumbent: the torch pass",
        "env": f"random sparse S={n_states:.0e}",
        "S": n_states,
        "A": 4,
        "H": horizon,
        "K": 1,
        "dtype": "float64",
        "device": "cpu",
        "ours_s": ours_s,
        "incumbent_s": inc_s,
        "speedup": inc_s / ours_s,
        "err_vs_incumbent": err,
        "threads": n_threads,
    }


def _timed(f: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


ROWS: dict[str, Callable[..., Any]] = {
    "svi_cliff": row_svi_cliff,
    "svi_random": row_svi_random,
    "meg_cliff": row_meg_cliff,
    "meg_random": row_meg_random,
    "meg_long": row_meg_long,
    "meg_unknown": row_meg_unknown,
    "meg_unknown_random": row_meg_unknown_random,
    "meg_discounted": row_meg_discounted,
    "meg_pass": row_meg_pass,
}


def _child(kind: str, kwargs: dict[str, Any]) -> None:
    threads = int(kwargs.pop("threads", 0))
    if threads > 0:  # else torch's default, as in a user's process
        th.set_num_threads(threads)
    row = ROWS[kind](**kwargs)
    if row is not None:
        row["peak_rss_mib"] = peak_rss_mib()
    sys.stdout.write("\n@@ROW@@" + json.dumps(row) + "\n")


def run_row_in_subprocess(
    kind: str, timeout: float | None = None, **kwargs: Any
) -> dict[str, Any] | None:
    """Run one row in a fresh Python process (clean peak RSS) and return its dict.

    Raises:
        RuntimeError: if the child fails (its stderr tail is included).
    """
    code = (
        f"import json, sys; sys.path.insert(0, {str(HERE)!r}); from bench import _child; "
        f"_child({kind!r}, json.loads(sys.argv[1]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark row {kind} {kwargs} failed:\n{proc.stderr[-3000:]}")
    payload = proc.stdout.rsplit("@@ROW@@", 1)[-1].strip()
    return json.loads(payload)
