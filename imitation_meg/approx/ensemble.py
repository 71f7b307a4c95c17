"""Fitted soft Q-models evaluated on episodes of the scored policy, on a grid of rationalities.

The values are ``sum_t (sum_a pi(a|s_t) log pi_beta(a|s_t) + log|A|)`` for ``Discrete`` actions
(:class:`Ensemble`) and, for a box (:class:`BoxEnsemble`), ``sum_t int pi(a|s_t)
log(pi_beta(a|s_t) / u(a)) da``, the policy's law integrated by its own quadrature rule and the
models' soft means by the action grid. :func:`scan` evaluates them on a coarse grid and a fine
grid around the models' best rationality; :mod:`imitation_meg.approx.evaluate` turns what it
returns into the estimate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch as th

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import ActionGrid, BoxSoftQModel, SoftQModel

__all__ = [
    "BoxEnsemble",
    "Ensemble",
    "add_episode_values",
    "best_index",
    "ensemble_of",
    "fit_maxima",
    "mean_curve",
    "scan",
]

#: Decades of the coarse grid of rationalities (times the utility unit ``q_scale``), its step,
#: and the half-width and step (decades) of the fine grid around the best coarse point.
_GRID_DECADES = (-2.0, 6.0)
_GRID_STEP = 0.25
_FINE_HALF = 0.25
_FINE_STEP = 0.025
#: The same for the Box fits (each point costs an integration over the action grid).
_BOX_GRID_DECADES = (-2.0, 5.0)
_BOX_GRID_STEP = 0.5
_BOX_FINE_HALF = 0.3
_BOX_FINE_STEP = 0.1
#: RMS Bellman residual (fraction of the largest return) above which a fit counts as diverged.
#: Rows per forward pass when evaluating (``Discrete`` actions; a box: ``_BOX_ROWS`` rows, each
#: at its law's quadrature points and the action grid's).
_CHUNK = 1 << 14
_BOX_ROWS = 2048
#: The quadrature rule of the scored policy's law at every visited state (a box; in 1-D with
#: the extra break points of squashed laws).
_BOX_RULE = {"nodes": 3, "panels": 6}


def add_episode_values(out: th.Tensor, episode: th.Tensor, p: th.Tensor, logits: th.Tensor) -> None:
    """Add each row's ``sum_a p(a) log softmax(logits)_a + log|A|`` to its episode's entry.

    Args:
        out: ``(n_eps, ...)`` float64 sums, updated in place.
        episode: ``(N,)`` episode index of each row.
        p: the scored policy's probabilities, broadcastable to ``logits``.
        logits: ``(N, A, ...)`` the model's ``beta q`` (actions on axis 1; e.g. one column per
            rationality after them).
    """
    terms = (p * th.log_softmax(logits, dim=1)).sum(1) + math.log(logits.shape[1])
    out.index_add_(0, episode, terms)


class Ensemble:
    """Per-episode ``sum_t (sum_a pi(a|s_t) log pi_beta(a|s_t) + log|A|)`` for model averages
    (``Discrete`` actions).

    Estimators: ``"k"`` (model ``k`` alone) and ``"all"`` (soft Q-values averaged over every
    model; a diagnostic).

    Attributes:
        certificates: ``(n_eps,)`` each episode's ``sum_t (log|A| - H(pi(. | s_t)))``.
        box: False.
        grid: ``""`` (no action grid).
        scan_grid: the decades of the coarse grid of rationalities, its step, and the half-width
            and step of the fine grid (:func:`scan`).
    """

    box = False
    grid = ""
    scan_grid = (_GRID_DECADES, _GRID_STEP, _FINE_HALF, _FINE_STEP)

    def __init__(self, models: list[SoftQModel], ev: Rollouts) -> None:
        assert ev.probs is not None
        self._rows(models, ev)
        self.p = th.as_tensor(ev.probs, dtype=th.float64)
        self.subsets["all"] = list(range(len(models)))
        self.subsets.update({str(k): [k] for k in range(len(models))})
        p = ev.probs
        self.n_actions = int(p.shape[1])
        ent = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)
        self.certificates = _per_episode(ev, math.log(self.n_actions) - ent)

    def _rows(self, models: list[Any], ev: Rollouts) -> None:
        self.models = models
        self.x = th.as_tensor(ev.x)
        self.t = th.as_tensor(ev.t)
        self.episode = th.as_tensor(ev.episode)
        self.n_eps = ev.n_episodes
        self.subsets: dict[str, list[int]] = {}

    def bounds(self, ev: Rollouts, horizon: int) -> tuple[float, float]:
        """``(H log|A|, E[T] log|A|)``: the bounds of the horizon and of the episodes seen."""
        log_a = math.log(self.n_actions)
        return float(horizon * log_a), float(ev.lengths.mean() * log_a)

    def columns(self, beta: float) -> dict[str, np.ndarray]:
        """Per estimator ``(n_eps,)`` sums over each episode of the decisions' terms at
        ``beta`` (utility units)."""
        if beta == 0.0:
            return {name: np.zeros(self.n_eps) for name in self.subsets}
        out = {name: th.zeros(self.n_eps, dtype=th.float64) for name in self.subsets}
        N = self.x.shape[0]
        with th.no_grad():
            for i in range(0, N, _CHUNK):
                self._add_rows(slice(i, min(N, i + _CHUNK)), beta, out)
        return {name: v.numpy() for name, v in out.items()}

    def _add_rows(self, sl: slice, beta: float, out: dict[str, th.Tensor]) -> None:
        """Add the terms of rows ``sl`` at ``beta`` to each estimator's episode sums ``out``
        (``(n_eps,)`` each, in place)."""
        n = sl.stop - sl.start
        qs = [
            m.f(self.x[sl], self.t[sl], th.full((n,), beta * m.q_scale)).double() * m.q_scale
            for m in self.models
        ]
        for name, idx in self.subsets.items():
            if all(self.models[j].null for j in idx):
                continue  # uniform at every beta: exactly 0, not 0 up to rounding
            q = qs[idx[0]] if len(idx) == 1 else th.stack([qs[j] for j in idx]).mean(0)
            add_episode_values(out[name], self.episode[sl], self.p[sl], beta * q)


def _per_episode(ev: Rollouts, values: np.ndarray) -> np.ndarray:
    """``(n_eps,)`` the sums of per-row ``values`` over each episode."""
    out = np.zeros(ev.n_episodes)
    np.add.at(out, ev.episode, values)
    return out


class BoxEnsemble(Ensemble):
    """Per-episode ``sum_t int pi(a|s_t) log(pi_beta(a|s_t) / u(a)) da`` of each Box model
    (:class:`~imitation_meg.approx.soft_q.BoxSoftQModel`): at every visited state the term is
    integrated over the policy's own law by its quadrature rule (a Rao-Blackwellised form of the
    sampled action's term), ``m_beta`` over the models' action grid.

    Estimators: ``"k"`` (model ``k`` alone; no average of the fits).

    Attributes:
        certificates: ``(n_eps,)`` each episode's ``sum_t KL(pi(. | s_t) || u)`` (``inf`` for
            laws with point masses).
        box: True.
        grid: the action grid, described (``"gauss-legendre, 16 points"``).
        scan_grid: as for :class:`Ensemble` (coarser: each point integrates over the grid).
    """

    box = True
    scan_grid = (_BOX_GRID_DECADES, _BOX_GRID_STEP, _BOX_FINE_HALF, _BOX_FINE_STEP)

    def __init__(self, models: list[BoxSoftQModel], ev: Rollouts) -> None:
        assert ev.laws is not None
        self._rows(models, ev)
        self.subsets.update({str(k): [k] for k in range(len(models))})
        self.action_grid: ActionGrid = models[0].grid
        self.grid = self.action_grid.describe
        rule = {**_BOX_RULE, "extra_breaks": ev.laws.mean.shape[1] == 1}
        pts, wts, kls = [], [], []
        for lo in range(0, ev.n_steps, _BOX_ROWS):
            r = ev.laws.rows(slice(lo, lo + _BOX_ROWS)).rule(**rule)
            pts.append(r.points)
            wts.append(r.weights)
            kls.append(r.kl)
        M = max(p.shape[1] for p in pts)
        self.points = th.cat([_pad(p, M) for p in pts])  # (N_rows, M, k) environment units
        self.weights = th.cat([_pad(w, M) for w in wts])
        self.certificates = _per_episode(ev, th.cat(kls).numpy())

    def bounds(self, ev: Rollouts, horizon: int) -> tuple[float, float]:
        """``(inf, inf)``: a density has no ``log|A|``."""
        return math.inf, math.inf

    def columns(self, beta: float) -> dict[str, np.ndarray]:
        """Per model ``(n_eps,)`` sums over each episode of the decisions' terms at ``beta``
        (utility units)."""
        if beta == 0.0:
            return {name: np.zeros(self.n_eps) for name in self.subsets}
        out = [th.zeros(self.n_eps, dtype=th.float64) for _ in self.models]
        N = self.x.shape[0]
        with th.no_grad():
            for lo in range(0, N, _BOX_ROWS):
                sl = slice(lo, min(N, lo + _BOX_ROWS))
                x, t = self.x[sl], self.t[sl]
                for k, m in enumerate(self.models):
                    if m.null:
                        continue
                    b = th.full((x.shape[0],), beta * m.q_scale)
                    fp = m.f_points(x, t, b, m.scale_actions(self.points[sl])).double()
                    soft = m.soft_value(x, t, b).double()
                    term = b.double() * ((self.weights[sl] * fp).sum(-1) - soft)
                    out[k].index_add_(0, self.episode[sl], term)
        return {str(k): o.numpy() for k, o in enumerate(out)}


def _pad(x: th.Tensor, M: int) -> th.Tensor:
    """Pad the second dimension to ``M`` (repeating the last point, weight 0)."""
    if x.shape[1] == M:
        return x
    reps = x[:, -1:].expand(x.shape[0], M - x.shape[1], *x.shape[2:])
    if x.dim() == 2:  # weights
        reps = th.zeros_like(reps)
    return th.cat([x, reps], 1)


def ensemble_of(models: list[Any], ev: Rollouts) -> Ensemble:
    """The evaluation of ``models`` on the episodes ``ev``: :class:`BoxEnsemble` for Box
    models, else :class:`Ensemble`."""
    if models and isinstance(models[0], BoxSoftQModel):
        return BoxEnsemble(models, ev)
    return Ensemble(models, ev)


def scan(ens: Ensemble, q_ref: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Evaluate every estimator on the coarse grid and a fine grid around the models' best
    (``ens.scan_grid``).

    Returns:
        the rationalities ``(G,)`` (utility units) and per estimator the ``(n_eps, G)`` values.
    """
    (lo, hi), step, half, fine = ens.scan_grid
    mags = 10.0 ** np.arange(lo, hi + 1e-9, step) / q_ref
    betas = list(np.concatenate([-mags[::-1], [0.0], mags]))
    cols = [ens.columns(b) for b in betas]
    singles = [n for n in ens.subsets if n != "all"]
    k = best_index(betas, [np.mean([c[n].mean() for n in singles]) for c in cols])
    if betas[k] != 0.0:
        _refine(ens, betas, cols, betas[k], half, fine)
    order = np.argsort(betas)
    mats = {name: np.stack([cols[i][name] for i in order], axis=1) for name in ens.subsets}
    return np.asarray(betas)[order], mats


def fit_maxima(
    mats: dict[str, np.ndarray], n_models: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """``(K,)``: each single fit's maximum over beta of its mean over episodes (at least 0).

    ``mats`` holds per fit ``"k"`` the ``(n_eps, G)`` values of :func:`scan`; ``weights``
    ``(n_eps,)`` (default uniform, ``1 / n_eps`` each) weight the episodes (the bootstrap).
    """
    n = next(iter(mats.values())).shape[0]
    w = np.full(n, 1.0 / n) if weights is None else weights
    return np.array([max(float((w @ mats[str(k)]).max()), 0.0) for k in range(n_models)])


def best_index(betas: Any, values: Any) -> int:
    """The index of the largest of ``values`` over the rationalities ``betas`` (any order),
    and of ``beta = 0`` (the uniform model, worth 0 to every policy) wherever nothing beats it:
    a policy that never leaves the uniform return, or fits that saw a constant reward, have a
    flat curve, whose maximiser is 0 and not the grid's end."""
    values = np.asarray(values, dtype=np.float64)
    k = int(np.argmax(values))
    zero = np.flatnonzero(np.asarray(betas) == 0.0)
    if zero.size and values[k] <= values[zero[0]] + 1e-12 * max(1.0, abs(values[k])):
        return int(zero[0])
    return k


def mean_curve(mats: dict[str, np.ndarray]) -> np.ndarray:
    """``L(beta) + E[T] log|A|`` averaged over episodes and the single models, ``(G,)``."""
    return np.mean([m.mean(0) for name, m in mats.items() if name != "all"], axis=0)


def _refine(
    ens: Ensemble,
    betas: list[float],
    cols: list[dict[str, np.ndarray]],
    best: float,
    half: float,
    fine: float,
) -> None:
    """Append to ``betas`` and ``cols`` the points (and their values) of the fine grid: ``fine``
    decades apart, ``half`` decades either side of ``best`` (non-zero), skipping points the
    grid already has."""
    centre = math.log10(abs(best))
    offs = np.arange(-half, half + 1e-9, fine)
    for u in centre + offs:
        b = math.copysign(10.0**u, best)
        if not any(math.isclose(b, c, rel_tol=1e-9) for c in betas):
            betas.append(b)
            cols.append(ens.columns(b))
