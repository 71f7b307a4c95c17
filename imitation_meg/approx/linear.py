"""Linear soft Q-functions by backward induction: the approximate estimator's fast method.

``method="linear"`` replaces the soft Q-networks of :mod:`imitation_meg.approx.soft_q` by a
linear function of fixed features of the observation, one weight table per decision ``t`` and
action, computed by exact backward induction on the data instead of by many gradient steps:

    q_{H-1}(s, a) = fit of r,
    q_t(s, a)     = fit of  r + (1 - terminated) m_beta(q_{t+1}(s', .)),

where every fit is the least-squares regression of the targets of *all* data rows that took
action ``a`` (whatever their own time step: the dynamics are stationary, so each row is a sample
of the step from its state and action at any ``t``) on the features ``phi(s)``. The regression's
matrix does not depend on ``t`` or ``beta``, so it is factorised once per action; each step of
the induction is then two matrix products, and all rationalities of a scan run together as the
columns of one product. There is nothing to converge: for a given data set and features the
result is the exact fitted soft Q-iteration with ``H`` iterations.

Features ``phi(x) = [1, x, sqrt(2 / k) cos(x Omega + b)]`` of the standardised flat observation
``x``: the observation itself (one-hot observations then give a tabular model, up to the ridge) and ``k``
random Fourier features (``Omega`` Gaussian with scale ``1 / bandwidth`` per standardised unit).
The fitted values are clipped to the range every soft value lies in (``(H - t)`` times the data's
reward range), which keeps extrapolation to states the data never reached bounded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch as th
from scipy.special import stdtrit

from imitation_meg.approx.core import Run, collect_data, evaluation_episodes
from imitation_meg.approx.ensemble import Ensemble, add_episode_values, best_index
from imitation_meg.approx.evaluate import ApproxMEGResult, summarise
from imitation_meg.approx.intervals import _Interval, stage_interval, stages_settled
from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import is_null_problem, returns_scale, standardisation
from imitation_meg.core.kernels import threads as _threads

__all__ = [
    "BANDWIDTH",
    "COARSE_STEP",
    "FINE_HALF",
    "FINE_STEP",
    "FIRST_STEPS",
    "PRECISION_BOUND",
    "PRECISION_SHARE",
    "RIDGE",
    "LinearSoftQ",
    "action_soft_mean",
    "linear_estimate",
    "rounds",
    "scan",
]

#: The random Fourier features' length scale, in standardised units of the observation.
BANDWIDTH = 1.0
#: The regressions' ridge, relative to the mean diagonal of their matrix.
RIDGE = 1e-4
#: Data steps per model in the first round; each later round doubles the data.
FIRST_STEPS = 30_000
#: The rounds stop when the fits' part of the half-width is at most this share of the estimate
#: or ``PRECISION_BOUND`` of ``H log|A|``, whichever is larger (the stricter yardstick's scale).
PRECISION_SHARE = 0.05
PRECISION_BOUND = 0.01
#: The scan: decades of ``|beta| q_scale`` (both signs) at this step, then a fine grid of
#: ``FINE_STEP`` decades within ``FINE_HALF`` decades of the best point.
COARSE_STEP = 1.0
FINE_HALF = 0.5
FINE_STEP = 0.1
#: At most this many fine windows per scan.
_MAX_CLIMB = 8
#: The decades the coarse grid covers (the soft Q-fits' scan covers the same).
_DECADES = (-2.0, 6.0)
#: float32 products; solves and sums over episodes in float64
_DTYPE = th.float32


class LinearSoftQ:
    """A linear soft Q-function of one data set, for any rationality (see the module docstring).

    It answers what :class:`~imitation_meg.approx.soft_q.SoftQModel` answers to the scan and the
    diagnostics: ``f(x, t, b)`` the normalised soft Q-values ``(n, A)`` at normalised rationality
    ``b`` (one value for the batch), ``q_scale``, ``null``, ``n_actions``, ``horizon``.

    Args:
        data: the transitions (``Rollouts``; rows at ``t = H - 1`` enter the last step only,
            since their ``done`` cannot tell termination from the horizon).
        n_actions, horizon: ``|A|`` and ``H``.
        n_features: random Fourier features ``k``.
        bandwidth: their length scale in standardised units.
        ridge: the regression's ridge, relative to the mean diagonal of its matrix.
        seed: the draw of ``Omega`` and ``b``.
    """

    def __init__(
        self,
        data: Rollouts,
        n_actions: int,
        horizon: int,
        *,
        n_features: int,
        bandwidth: float,
        ridge: float,
        seed: int,
    ) -> None:
        self.n_actions = int(n_actions)
        self.horizon = H = int(horizon)
        scale = returns_scale(data)
        self.q_scale = scale if scale > 0 else 1.0
        self.null = is_null_problem(data, H, scale)
        self.losses = [math.nan]
        mean, std = standardisation(np.concatenate([data.x, data.x_next]))
        self._mean, self._std = th.as_tensor(mean), th.as_tensor(std)
        d = data.x.shape[1]
        gen = np.random.default_rng(seed)
        self._omega = th.as_tensor(gen.normal(size=(d, n_features)) / bandwidth, dtype=_DTYPE)
        self._phase = th.as_tensor(gen.uniform(0, 2 * math.pi, n_features), dtype=_DTYPE)
        self._amp = math.sqrt(2.0 / max(n_features, 1))
        # the reward range per step bounds every soft value: (H - t) r_min <= q_t <= (H - t) r_max
        r = data.r
        self._r_lo = min(float(r.min(initial=0.0)), 0.0)
        self._r_hi = max(float(r.max(initial=0.0)), 0.0)
        # rows sorted by action, so that each action's rows are one slice; the rows of the last
        # decision (t = H - 1, whose ``done`` cannot tell termination from the horizon) enter
        # only the last step's regression
        inner = data.t < H - 1
        order = np.lexsort((~inner, data.a))
        a_sorted, inner_sorted = data.a[order], inner[order]
        phi = self.features(data.x[order])
        self._r_all = th.as_tensor(data.r[order], dtype=_DTYPE)
        keep = order[inner_sorted]
        self._phi_next_t = self.features(data.x_next[keep]).T.contiguous()  # (F, n)
        self._r = th.as_tensor(data.r[keep], dtype=_DTYPE)
        self._live = th.as_tensor(~data.done[keep], dtype=_DTYPE)
        self._slices: list[slice] = []  # per action: its inner rows among ``keep``
        self._slices_all: list[slice] = []  # per action: all its rows
        self._proj: list[th.Tensor] = []  # per action (n_a, F): the least-squares map
        self._proj_last: list[th.Tensor] = []
        pos = pos_in = 0
        for act in range(self.n_actions):
            n_all = int(np.sum(a_sorted == act))
            n_in = int(np.sum((a_sorted == act) & inner_sorted))
            self._slices_all.append(slice(pos, pos + n_all))
            self._slices.append(slice(pos_in, pos_in + n_in))
            self._proj.append(_least_squares(phi[pos : pos + n_in], ridge).T.contiguous())
            self._proj_last.append(_least_squares(phi[pos : pos + n_all], ridge).T.contiguous())
            pos, pos_in = pos + n_all, pos_in + n_in
        self._cache: dict[float, th.Tensor] = {}

    # ------------------------------------------------------------------ features and tables
    def features(self, x: np.ndarray | th.Tensor) -> th.Tensor:
        """``(n, F)`` features of flat observations ``(n, d)``."""
        z = (th.as_tensor(x, dtype=_DTYPE) - self._mean) / self._std
        rff = th.cos(z @ self._omega + self._phase) * self._amp
        return th.cat([th.ones(z.shape[0], 1, dtype=_DTYPE), z, rff], dim=1)

    def _clip(self, q: th.Tensor, togo: int) -> th.Tensor:
        return q.clamp_(togo * self._r_lo, togo * self._r_hi)

    def tables(self, betas: Sequence[float] | np.ndarray) -> th.Tensor:
        """``(H + 1, A, G, F)`` weights of ``q_t(., a)`` for each rationality ``betas`` ``(G,)``
        (utility units; ``q_H = 0``), by backward induction with every rationality as a row.
        (Rationalities lead the arrays: each ``beta`` then multiplies a contiguous row.)"""
        H, A = self.horizon, self.n_actions
        b = th.as_tensor(np.asarray(betas, dtype=np.float64), dtype=_DTYPE).reshape(-1, 1)
        G = b.shape[0]
        F = self._phi_next_t.shape[0]
        W = th.zeros(H + 1, A, G, F, dtype=_DTYPE)
        if self.null:
            return W
        for a, sl in enumerate(self._slices_all):  # the last decision: its reward alone
            W[H - 1, a] = self._r_all[sl] @ self._proj_last[a]
        for t in range(H - 2, -1, -1):
            qn = [self._clip(W[t + 1, a] @ self._phi_next_t, H - t - 1) for a in range(A)]
            y = action_soft_mean(qn, b).mul_(self._live).add_(self._r)
            for a, sl in enumerate(self._slices):
                th.matmul(y[:, sl], self._proj[a], out=W[t, a])
        return W

    def q_values(
        self, W: th.Tensor, x: np.ndarray | th.Tensor, t: np.ndarray | th.Tensor
    ) -> th.Tensor:
        """``(n, A, G)`` soft Q-values (utility units) at observations ``x`` and times ``t``
        (``t = H`` gives 0) from :meth:`tables`' weights."""
        phi = self.features(x)
        tt = th.as_tensor(t, dtype=th.long)
        A, G = W.shape[1], W.shape[2]
        out = th.zeros(phi.shape[0], A, G, dtype=_DTYPE)
        order = th.argsort(tt, stable=True)
        ts, counts = th.unique_consecutive(tt[order], return_counts=True)
        start = 0
        for tv, c in zip(ts.tolist(), counts.tolist(), strict=True):
            idx = order[start : start + c]
            start += c
            if tv >= self.horizon:
                continue
            q = (phi[idx] @ W[tv].reshape(A * G, -1).T).reshape(-1, A, G)
            out[idx] = self._clip(q, self.horizon - tv)
        return out

    def f(self, x: th.Tensor, t: th.Tensor, b: th.Tensor) -> th.Tensor:
        """Normalised soft Q-values ``(n, A)`` at the normalised rationality ``b[0]``."""
        beta = float(b.reshape(-1)[0]) / self.q_scale if b.numel() else 0.0
        if beta not in self._cache:  # the diagnostics ask for one beta twice in a row
            self._cache = {beta: self.tables([beta])}
        return self.q_values(self._cache[beta], x, t)[:, :, 0] / self.q_scale


def _least_squares(phi: th.Tensor, ridge: float) -> th.Tensor:
    """``(F, n)``: the ridge least-squares map from ``n`` targets to ``F`` weights (the ridge
    relative to the mean diagonal of ``phi^T phi``; float64 solve)."""
    p = phi.double()
    g = p.T @ p
    lam = ridge * float(g.diagonal().mean()) if p.shape[0] else 1.0
    g += (lam + 1e-12) * th.eye(g.shape[0], dtype=th.float64)
    return th.linalg.solve(g, p.T).to(_DTYPE)


def action_soft_mean(q: list[th.Tensor], b: th.Tensor) -> th.Tensor:
    """``(G, n)``: ``m_b(q) = (1/b) log((1/A) sum_a exp(b q_a))`` of the actions' values ``q``
    (``A`` tensors ``(G, n)``, overwritten) with one rationality ``b[g]`` per row (``b``
    ``(G, 1)``; the mean where ``b[g] = 0``). Whole-array operations, one per action: a reduction
    over a short axis costs several times more."""
    zero = (b == 0).reshape(-1)
    mean = functools.reduce(th.add, q) / len(q) if bool(zero.any()) else None
    safe = th.where(b == 0, th.ones_like(b), b)
    z = [v.mul_(safe) for v in q]
    top = z[0].clone()
    for v in z[1:]:
        th.maximum(top, v, out=top)
    acc = (z[0] - top).exp_()
    for v in z[1:]:
        acc += v.sub_(top).exp_()
    out = acc.log_().add_(top).sub_(math.log(len(q))).div_(safe)
    if mean is not None:
        out[zero] = mean[zero]
    return out


# ------------------------------------------------------------------------------ the estimate
def _columns(models: list[LinearSoftQ], ev: Rollouts, betas: np.ndarray) -> dict[str, np.ndarray]:
    """Per fit ``"k"`` (and ``"all"``, the fits' soft Q-values averaged) the ``(n_eps, G)``
    values ``sum_t (sum_a pi(a|s_t) log pi_beta(a|s_t) + log|A|)`` of the evaluation episodes."""
    assert ev.probs is not None
    p = th.as_tensor(ev.probs, dtype=th.float64)[:, :, None]
    episode = th.as_tensor(ev.episode)
    b = th.as_tensor(betas, dtype=th.float64)

    def per_episode(q: th.Tensor) -> np.ndarray:
        out = th.zeros(ev.n_episodes, b.shape[0], dtype=th.float64)
        add_episode_values(out, episode, p, q * b)
        out[:, b == 0] = 0.0  # the uniform model: exactly 0
        return out.numpy()

    qs = _threads.parallel_map(lambda m: m.q_values(m.tables(betas), ev.x, ev.t).double(), models)
    cols = {
        str(k): np.zeros((ev.n_episodes, b.shape[0])) if m.null else per_episode(q)
        for k, (m, q) in enumerate(zip(models, qs, strict=True))
    }
    live = [q for m, q in zip(models, qs, strict=True) if not m.null]
    cols["all"] = per_episode(th.stack(live).mean(0)) if live else cols["0"]
    return cols


def _merge(
    betas: np.ndarray, mats: dict[str, np.ndarray], more: np.ndarray, cols: dict[str, np.ndarray]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Two scans' rationalities and values as one, sorted."""
    both = np.concatenate([betas, more])
    order = np.argsort(both)
    return both[order], {n: np.concatenate([mats[n], cols[n]], axis=1)[:, order] for n in mats}


def _best(betas: np.ndarray, mats: dict[str, np.ndarray]) -> int:
    """Index of the rationality where the single fits' mean value is largest."""
    singles = [name for name in mats if name != "all"]
    return best_index(betas, np.mean([mats[n].mean(0) for n in singles], axis=0))


def _fine(best: float, betas: np.ndarray) -> np.ndarray:
    """The fine grid around ``best`` (not 0) less the rationalities already in ``betas``."""
    offs = np.arange(-FINE_HALF, FINE_HALF + 1e-9, FINE_STEP)
    fine = np.copysign(10.0 ** (math.log10(abs(best)) + offs), best)
    return fine[~np.isclose(fine[:, None], betas[None, :], rtol=1e-9, atol=0).any(1)]


def scan(
    models: list[LinearSoftQ], ev: Rollouts, q_ref: float, *, around: float = 0.0
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The fits' values on a coarse grid of rationalities (:data:`COARSE_STEP` decades, both
    signs, and 0), then on fine grids (:data:`FINE_STEP` decades, :data:`FINE_HALF` either side)
    around the fits' best point until the best point stays put (a climb on the fine lattice: a
    maximum on a window's edge moves the window).

    With ``around`` (an earlier round's best rationality, not 0) the climb starts there, and the
    coarse grid is scanned only if it ends at 0.

    Returns:
        the rationalities ``(G,)`` (utility units, sorted) and per fit the ``(n_eps, G)``
        values (as :func:`imitation_meg.approx.evaluate.scan`).
    """
    lo, hi = _DECADES
    mags = 10.0 ** np.arange(lo, hi + 1e-9, COARSE_STEP) / q_ref
    coarse = np.concatenate([-mags[::-1], [0.0], mags])
    whole = around == 0.0  # the coarse grid is scanned
    betas = coarse if whole else np.zeros(1)
    mats = _columns(models, ev, betas)
    best = betas[_best(betas, mats)] if whole else around
    for _ in range(_MAX_CLIMB):
        more = _fine(best, betas) if best != 0.0 else np.zeros(0)
        if more.size:
            betas, mats = _merge(betas, mats, more, _columns(models, ev, more))
        new = betas[_best(betas, mats)]
        if new == 0.0 and not whole:  # the windows found nothing: scan the coarse grid too
            whole = True
            more = coarse[~np.isclose(coarse[:, None], betas[None, :], rtol=1e-9, atol=0).any(1)]
            betas, mats = _merge(betas, mats, more, _columns(models, ev, more))
            new = betas[_best(betas, mats)]
        if new == best or new == 0.0:
            break
        best = new
    return betas, mats


def rounds(first: int, budget: int) -> list[int]:
    """The data per model after each round: ``first``, then doubling, up to ``budget``."""
    sizes = [min(first, budget)]
    while sizes[-1] < budget:
        sizes.append(min(2 * sizes[-1], budget))
    return sizes


def _add_round_data(run: Run, parts: list[list[Rollouts]], i: int, n_new: int) -> None:
    """Round ``i``'s ``n_new`` data steps of every fit, appended to its parts (in place)."""
    for k, mseed in enumerate(run.model_seeds):
        parts[k].append(
            collect_data(
                run.source,
                run.pol,
                n_new,
                np.random.default_rng([mseed, 1, i]),
                n_envs=run.opts.n_envs,
                on_step=run.count,
            )
        )


def _fits(run: Run, parts: list[list[Rollouts]]) -> list[LinearSoftQ]:
    """Every fit redone on all its data, side by side on the caller's torch threads."""
    H, A = run.source.horizon, run.source.n_actions
    n_features = run.opts.n_features
    return _threads.parallel_map(
        lambda fit: LinearSoftQ(
            Rollouts.concat(fit[0]),
            A,
            H,
            n_features=n_features,
            bandwidth=BANDWIDTH,
            ridge=RIDGE,
            seed=fit[1],
        ),
        list(zip(parts, run.model_seeds, strict=True)),
    )


def _settled(means: list[float], now: _Interval, K: int, confidence: float, bound: float) -> bool:
    """Whether the rounds have settled: the last doubling moved the estimate (``means``, one
    per round) by at most its sampling half-width (:func:`stages_settled`), and the ``K`` fits
    of the last round (its interval ``now``) agree within :data:`PRECISION_SHARE` of the
    estimate or :data:`PRECISION_BOUND` of ``H log|A|`` (``bound``)."""
    fits_half = float(stdtrit(K - 1, 0.5 + confidence / 2)) * now.se_models
    precise = fits_half <= max(PRECISION_SHARE * abs(now.mean), PRECISION_BOUND * bound)
    return bool(stages_settled(means, now.sampling, bound)) and precise


def linear_estimate(run: Run) -> ApproxMEGResult:
    """Known-utility MEG of ``run``'s policy with linear soft Q-functions (module docstring).

    ``n_models`` fits, each on its own data, in rounds: :data:`FIRST_STEPS` data steps per fit,
    then doubling, up to ``n_data_steps``. After each round every fit is redone on all its data
    and scanned on the same evaluation episodes; the rounds stop once the last doubling moved the
    estimate by at most its sampling half-width or 1% of ``H log|A|`` (``settled``), or when the
    budget is spent (``settled=False`` and a warning). The interval is the soft Q-fits' (the
    fits' spread, the evaluation bootstrap, and the largest move from an earlier round).
    """
    opts, source = run.opts, run.source
    assert opts.n_data_steps is not None
    H, A = source.horizon, source.n_actions
    bound = H * math.log(A)
    ev = evaluation_episodes(run)
    parts: list[list[Rollouts]] = [[] for _ in run.model_seeds]
    stages: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    means: list[float] = []
    have = 0
    models: list[LinearSoftQ] = []
    settled = False
    # one fit has no spread, and no replicates no sampling half-width: nothing measures the
    # precision, so the rounds run to the budget and ``settled`` is None
    measurable = opts.n_boot >= 2 and opts.n_models >= 2
    for i, size in enumerate(rounds(FIRST_STEPS, opts.n_data_steps)):
        _add_round_data(run, parts, i, size - have)
        have = size
        models = _fits(run, parts)
        q_ref = float(np.median([m.q_scale for m in models]))
        around = stages[-1][0][_best(*stages[-1])] if stages else 0.0
        betas, mats = scan(models, ev, q_ref, around=around)
        stages.append((betas, mats))
        run.bar.update(len(models))
        now = stage_interval(
            mats,
            len(models),
            earlier=means,
            certificate=math.inf,
            n_boot=opts.n_boot,
            confidence=opts.confidence,
            s_boot=run.s_boot,
        )
        means.append(now.mean)
        settled = measurable and _settled(means, now, len(models), opts.confidence, bound)
        if settled:
            break
    betas, mats = stages[-1]
    return summarise(
        ev,
        Ensemble(models, ev),  # type: ignore[arg-type]
        betas,
        mats,
        n_env_steps=run.n_env_steps,
        n_boot=opts.n_boot,
        confidence=opts.confidence,
        s_boot=run.s_boot,
        t_start=run.t_start,
        horizon=H,
        stages=stages,
        method="linear",
        stage="doubling of the data",
        advice=(
            f"the data budget (n_data_steps={opts.n_data_steps} per fit) was spent before the "
            "last doubling of the data moved the estimate by at most its sampling half-width and "
            f"the fits agreed within {PRECISION_SHARE:g} of the estimate, so the interval's "
            "allowance (the moves seen) need not cover the error left (settled=False). Pass a "
            "larger n_data_steps= and compare."
        ),
        settled=settled if measurable else None,
    )
