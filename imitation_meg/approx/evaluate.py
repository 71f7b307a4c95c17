"""Evaluating fitted soft Q-models on episodes of the scored policy: the estimate and its interval.

:func:`summarise` turns the per-episode values of each fitted model on a grid of rationalities
into :class:`ApproxMEGResult`: the mean over models of each model's maximum, an interval that
combines a bootstrap over episodes with the spread of the models, and the diagnostics. See
:mod:`imitation_meg.approx.known`. The values are ``sum_t (sum_a pi(a|s_t) log pi_beta(a|s_t) +
log|A|)`` for ``Discrete`` actions (:class:`Ensemble`) and, for a box (:class:`BoxEnsemble`),
``sum_t int pi(a|s_t) log(pi_beta(a|s_t) / u(a)) da``, the policy's law integrated by its own
quadrature rule and the models' soft means by the action grid.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import ActionGrid, BoxSoftQModel, SoftQModel, bellman_residual
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.results import to_jsonable

if TYPE_CHECKING:  # pragma: no cover - typing only
    from imitation_meg.approx.curve import SoftValueCurve

__all__ = [
    "ApproxMEGResult",
    "ApproxMEGWarning",
    "BoxEnsemble",
    "Ensemble",
    "add_episode_values",
    "exceeds_certificate",
    "fit_maxima",
    "mean_curve",
    "scan",
    "summarise",
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
_RESIDUAL_WARN = 0.5
#: The stages have settled when the last refit moved the estimate by at most its own sampling
#: half-width or this share of the scale (``H log|A|``; the certificate for continuous actions),
#: whichever is larger (:func:`stages_settled`).
SETTLE_SHARE = 0.01
#: What the command line prints under its table when the stages have not settled.
UNSETTLED_NOTE = (
    "The fitting stages had not settled: the last refit still moved the estimate by more than "
    "its sampling error, so the interval may be too narrow. Refit more (refine=4 in Python, "
    "--approx-option refine=4 on the command line) and compare."
)
#: Rows per forward pass when evaluating (``Discrete`` actions; a box: ``_BOX_ROWS`` rows, each
#: at its law's quadrature points and the action grid's).
_CHUNK = 1 << 14
_BOX_ROWS = 2048
#: The quadrature rule of the scored policy's law at every visited state (a box; in 1-D with
#: the extra break points of squashed laws).
_BOX_RULE = {"nodes": 3, "panels": 6}


class ApproxMEGWarning(ImitationMEGWarning):
    """An approximate MEG estimate whose inputs make it less reliable than its interval says."""


@dataclasses.dataclass(frozen=True)
class ApproxMEGResult:
    """An approximate known-utility MEG estimate.

    The same record serves ``Discrete`` actions and bounded boxes. For a box the reference is
    the uniform density on the box, which has no ``log|A|``: ``upper_bound`` and
    ``length_bound`` are infinite, and ``normalized`` (and ``length_normalized``) is
    ``meg / certificate``, the share of the policy's own log-likelihood ratio to the uniform
    density that the reward explains (NaN for a law with point masses, whose certificate is
    infinite; 0 when the certificate is 0).

    Attributes:
        meg: the estimate (nats): the mean over the ``K`` fitted models of each model's
            maximum over beta, clipped to ``[0, certificate]``.
        low, high: the interval
            ``meg +- (sqrt((z se_boot)^2 + (t_{K-1} se_models)^2) + allowance)``: the
            bootstrap over evaluation episodes (normal quantile ``z``), the spread of the
            ``K`` independent fits (Student quantile with ``K - 1`` degrees of freedom) and,
            when the fits were refined, the largest distance between the estimate and any
            earlier stage's (an allowance for the error the fits share), clipped to
            ``[0, certificate]``.
        confidence: its nominal coverage.
        beta: the maximiser of the models' mean curve, in utility units (0: the uniform model).
        upper_bound: ``H log|A|``, as on exact results (:class:`imitation_meg.MEGResult`;
            ``inf`` for a box).
        normalized: ``meg / upper_bound``, as on exact results (a box: ``meg /
            certificate``).
        length_bound: ``E_pi[T] log|A|`` over the evaluation episodes: the bound for the
            episodes the policy actually has (equal to ``upper_bound`` when no episode ends
            early).
        length_normalized: ``meg / length_bound`` (0 when ``length_bound`` is 0).
        certificate: ``E_pi[sum_t (log|A| - H(pi(.|s_t)))]`` (a box: ``E_pi[sum_t KL(pi(. |
            s_t) || u)]``, ``inf`` for a law with point masses, PPO's clipped Gaussian), an
            upper bound on MEG over any model family (Gibbs' inequality).
        horizon: ``H``.
        mean_length: ``E_pi[T]`` over the evaluation episodes.
        expected_return: mean evaluation return of the scored policy.
        n_env_steps: environment steps used in all (data, refits, evaluation).
        n_eval_episodes: evaluation episodes.
        ensemble: the value of the model whose soft Q-values are averaged over the fits (a
            diagnostic; an average of soft-optimal models is not one itself; NaN for a box).
        models: one dict per fitted model: ``seed``, ``meg`` (its own maximum), ``beta``,
            ``residual_mean``, ``residual_rms`` (soft Bellman residual at the ensemble's beta on
            the evaluation transitions, utility units), ``loss`` (last fitting loss),
            ``q_scale``.
        seed_std: standard deviation of the single models' estimates.
        model_se: the standard error of the mean over models (``seed_std / sqrt(K)``).
        bootstrap_se: the standard error over evaluation episodes.
        residual_rms: mean over models of the RMS Bellman residual divided by ``q_scale``
            (a fraction of the largest return).
        at_boundary: the optimum lies at the grid's largest ``|beta|`` (the supremum may be a
            limit at infinity).
        q_scale: the utility unit of the networks (median over models of the largest
            return-to-go in their data).
        replicates: bootstrap replicates of the estimate over evaluation episodes.
        wall_time_s: seconds taken.
        first_stage: the estimate before refinement (the mean of the fits' maxima after the
            first fitting stage; NaN when not refined).
        refine_shift: ``meg - first_stage`` before clipping (0 when not refined): how far the
            refits moved the estimate from the first fit's.
        allowance: ``max_i |meg - stages[i]|`` over the earlier stages, before clipping (0 when
            not refined), added to the interval's half-width: a fit still moving is not
            converged, and the largest move from any earlier stage measures it even where the
            first and last stages agree while the ones between moved.
        stages: the estimate (mean of the fits' maxima, before clipping) after the first fit
            and after each refit; ``stages[-1]`` is the estimate.
        stage_intervals: ``(meg, low, high)`` after the first fit and after each refit: what
            the same call with ``refine=k`` reports (same seed, so the same fits and bootstrap
            draws); the last is ``(meg, low, high)``.
        settled: whether the fitting stages have settled: the last refit moved the estimate by
            at most its sampling half-width or ``SETTLE_SHARE`` (1%) of ``upper_bound``,
            whichever is larger (:func:`stages_settled`). ``False`` comes with an
            :class:`ApproxMEGWarning`: the fits were still moving when they stopped, so the
            allowance (the moves seen) may not cover the error left. ``None`` without refits.
        stage_curves: after the first fit and after each refit, the rationalities scanned
            ``(G,)`` (utility units) and each fit's ``L(beta) + E[T] log|A|`` on them ``(K, G)``
            (mean over the evaluation episodes): the curves whose maxima give ``stages``, for
            plotting ``L(beta)`` or trying another way of combining the fits.
        method: how the estimate was made: ``"soft_q"`` (fitted soft Q-networks, the fields
            above), ``"paths"`` (below) or ``"empirical"`` (the exact MEG of the empirical MDP of the data's distinct
            observations, :mod:`imitation_meg.approx.empirical`: then ``stages`` and
            ``stage_intervals`` are the estimate and interval after each round of data,
            ``settled`` says whether the rounds reached their precision target,
            ``bootstrap_se`` is over data episodes, and the fields of fitted networks are NaN or
            empty).
        n_states: distinct observations of the empirical MDP (0 for ``"soft_q"``).
        n_particles, n_starts: ``"paths"`` (:mod:`imitation_meg.approx.paths`): random action
            sequences followed from each start, and the starts (0 for the other methods).
            There ``bootstrap_se`` is over the policy's episodes and the starts, ``stages``
            holds the estimate before clipping, ``settled`` says whether the splitting carried
            enough particles to the optimum, ``q_scale`` is the largest return seen, and the
            fields of fitted networks are NaN or empty.
        particle_bias: ``"paths"``: the allowance in the interval for the splitting's bias
            (the log of an unbiased estimate of ``Z`` is low by about half its variance,
            measured by two independent populations per start; NaN for the other methods).
        particle_steps: ``"paths"``: steps the particles took on the simulator (not counted in
            ``n_env_steps``, which counts the policy's steps there and in the environment).
        timings: ``"paths"``: seconds of each part of the score (the policy's episodes, their
            replays in the environment, the splitting, the maximum and the bootstrap); empty
            for the other methods.
        curve: ``"paths"``: the environment's soft-value curve the score used
            (:class:`~imitation_meg.approx.curve.SoftValueCurve`; pass it as ``curve=`` to score
            further policies of the same environment from their episodes alone, or save it);
            None for the other methods. ``to_dict`` keeps its provenance only.
        return_se: the standard error of ``expected_return`` (NaN where not computed).
        above_certificate: the fits' mean maximum exceeded the certificate, which no
            normalised model can (Gibbs' inequality): for a box, the action grid could not
            integrate the models at that beta (a law much narrower than the grid's spacing), so
            ``meg`` is the certificate by clipping, not by estimation (warned).
        policy: what was scored (its name, with its smoothing if any; set by
            :func:`~imitation_meg.approx.meg_approx`, empty elsewhere).
        grid: a box's action grid (kind and points, ``"gauss-legendre, 16 points"``); empty
            for ``Discrete`` actions and the methods without fits.
    """

    meg: float
    low: float
    high: float
    confidence: float
    beta: float
    upper_bound: float
    normalized: float
    length_bound: float
    length_normalized: float
    certificate: float
    horizon: int
    mean_length: float
    expected_return: float
    n_env_steps: int
    n_eval_episodes: int
    ensemble: float
    models: list[dict[str, float]]
    seed_std: float
    model_se: float
    bootstrap_se: float
    residual_rms: float
    at_boundary: bool
    q_scale: float
    replicates: np.ndarray = dataclasses.field(repr=False)
    wall_time_s: float = 0.0
    first_stage: float = math.nan
    refine_shift: float = 0.0
    allowance: float = 0.0
    stages: tuple[float, ...] = ()
    stage_intervals: tuple[tuple[float, float, float], ...] = ()
    settled: bool | None = None
    stage_curves: tuple[tuple[np.ndarray, np.ndarray], ...] = dataclasses.field(
        default=(), repr=False
    )
    method: str = "soft_q"
    n_states: int = 0
    n_particles: int = 0
    n_starts: int = 0
    particle_bias: float = math.nan
    particle_steps: int = 0
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    curve: SoftValueCurve | None = dataclasses.field(default=None, repr=False, compare=False)
    return_se: float = math.nan
    above_certificate: bool = False
    policy: str = ""
    grid: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (replicates as a list; of the curve, its provenance)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.curve is not None:
            out["curve"] = self.curve.info.to_dict()
        return to_jsonable(out)  # type: ignore[return-value]


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
        if beta == 0.0:
            return {name: np.zeros(self.n_eps) for name in self.subsets}
        out = {name: th.zeros(self.n_eps, dtype=th.float64) for name in self.subsets}
        N = self.x.shape[0]
        with th.no_grad():
            for i in range(0, N, _CHUNK):
                sl = slice(i, min(N, i + _CHUNK))
                n = sl.stop - sl.start
                qs = [
                    m.f(self.x[sl], self.t[sl], th.full((n,), beta * m.q_scale)).double()
                    * m.q_scale
                    for m in self.models
                ]
                for name, idx in self.subsets.items():
                    if all(self.models[j].null for j in idx):
                        continue  # uniform at every beta: exactly 0, not 0 up to rounding
                    q = qs[idx[0]] if len(idx) == 1 else th.stack([qs[j] for j in idx]).mean(0)
                    add_episode_values(out[name], self.episode[sl], self.p[sl], beta * q)
        return {name: v.numpy() for name, v in out.items()}


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
    k = int(np.argmax([np.mean([c[n].mean() for n in singles]) for c in cols]))
    if betas[k] != 0.0:
        centre = math.log10(abs(betas[k]))
        offs = np.arange(-half, half + 1e-9, fine)
        for u in centre + offs:
            b = math.copysign(10.0**u, betas[k])
            if not any(math.isclose(b, c, rel_tol=1e-9) for c in betas):
                betas.append(b)
                cols.append(ens.columns(b))
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


def mean_curve(mats: dict[str, np.ndarray]) -> np.ndarray:
    """``L(beta) + E[T] log|A|`` averaged over episodes and the single models, ``(G,)``."""
    return np.mean([m.mean(0) for name, m in mats.items() if name != "all"], axis=0)


class _Interval(NamedTuple):
    """One stage's estimate and interval (see :class:`ApproxMEGResult`)."""

    mean: float  # the mean of the fits' maxima, before clipping
    estimate: float  # ``mean`` clipped to ``[0, certificate]``
    low: float
    high: float
    shift: float  # ``mean`` minus the first stage's (0 for the first stage, or with no refits)
    allowance: float  # largest ``|mean - m|`` over the earlier stages' means (0: none)
    sampling: float  # the half-width before the allowance (bootstrap and fits' spread)
    replicates: np.ndarray  # bootstrap replicates of ``mean``
    se_boot: float
    se_models: float
    singles: np.ndarray  # ``(K,)`` the fits' maxima


def stages_settled(stages: Sequence[float], sampling: float, scale: float) -> bool | None:
    """Whether the refits have settled: the last one moved the estimate (``stages``, the
    estimate after the first fit and after each refit) by at most the last stage's sampling
    half-width ``sampling`` or ``SETTLE_SHARE * scale``, whichever is larger. ``None`` with
    fewer than two stages (no refit to compare)."""
    if len(stages) < 2:
        return None
    return bool(abs(float(stages[-1]) - float(stages[-2])) <= _settle_tolerance(sampling, scale))


def _settle_tolerance(sampling: float, scale: float) -> float:
    """The largest last move of settled stages (a NaN sampling half-width counts as 0)."""
    return max(float(sampling) if math.isfinite(sampling) else 0.0, SETTLE_SHARE * float(scale))


def warn_unsettled(
    stages: Sequence[float],
    sampling: float,
    scale: float,
    what: str,
    *,
    stage: str = "refit",
    advice: str | None = None,
) -> None:
    """Warn (:class:`ApproxMEGWarning`) when :func:`stages_settled` is False; ``what`` names the
    scale, ``stage`` what a stage is and ``advice`` the way out in the message."""
    if stages_settled(stages, sampling, scale) is not False:
        return
    move = float(stages[-1]) - float(stages[-2])
    tol = _settle_tolerance(sampling, scale)
    if advice is None:
        advice = (
            f"Refit more (refine={len(stages)}) or fit longer (steps_per_iteration=) and compare."
        )
    warnings.warn(
        f"the fitting stages have not settled: the last {stage} moved the estimate by "
        f"{move:+.4g} (stages {' -> '.join(f'{v:.4g}' for v in stages)}), more than its sampling "
        f"half-width and {SETTLE_SHARE:g} of {what} ({tol:.4g}); the interval's allowance covers "
        f"the moves seen so far, not the ones still to come (settled=False). {advice}",
        ApproxMEGWarning,
        stacklevel=4,
    )


def stage_interval(
    mats: dict[str, np.ndarray],
    n_models: int,
    *,
    earlier: Sequence[float],
    certificate: float,
    n_boot: int,
    confidence: float,
    s_boot: np.random.SeedSequence,
) -> _Interval:
    """The estimate of one stage's fits and its interval (``earlier``: the estimates of the
    stages before it, empty for the first; the largest move from them widens the interval)."""
    from statistics import NormalDist

    from scipy.special import stdtrit  # Student t quantile; lighter to import than scipy.stats

    K = n_models
    n = next(iter(mats.values())).shape[0]
    singles = fit_maxima(mats, K)
    mean = float(singles.mean())
    # the same draws at every stage (a fresh generator from the same seed), so each stage's
    # interval is the one a run stopped there reports
    gb = np.random.default_rng(s_boot)
    reps = np.empty(n_boot)
    for i in range(n_boot):
        w = np.bincount(gb.integers(0, n, size=n), minlength=n) / n
        reps[i] = float(fit_maxima(mats, K, w).mean())
    se_boot = float(reps.std(ddof=1)) if n_boot > 1 else math.nan
    se_models = float(singles.std(ddof=1) / math.sqrt(K)) if K > 1 else 0.0
    # The rollout part is a bootstrap over many episodes (normal quantile); the model part is
    # estimated from K fits only (Student t with K - 1 degrees of freedom).
    level = 0.5 + float(confidence) / 2
    z = NormalDist().inv_cdf(level)
    t_q = float(stdtrit(K - 1, level)) if K > 1 else 0.0
    # Error every fit shares is not in the spread of the fits. The refits' moves of the
    # estimate measure how far from converged the fits still were: the largest move from any
    # earlier stage is added as an allowance (the first and last stages may agree while the ones
    # between moved).
    shift = mean - earlier[0] if earlier else 0.0
    allowance = max((abs(mean - m) for m in earlier), default=0.0)
    sampling = math.hypot(z * (se_boot if math.isfinite(se_boot) else 0.0), t_q * se_models)
    half = sampling + allowance
    cert = certificate
    return _Interval(
        mean=mean,
        estimate=min(max(mean, 0.0), cert),
        low=min(max(mean - half, 0.0), cert) if n_boot > 1 else math.nan,
        high=min(max(mean + half, 0.0), cert) if n_boot > 1 else math.nan,
        shift=shift,
        allowance=allowance,
        sampling=sampling,
        replicates=reps,
        se_boot=se_boot,
        se_models=se_models,
        singles=singles,
    )


def summarise(
    ev: Rollouts,
    ens: Ensemble,
    betas: np.ndarray,
    mats: dict[str, np.ndarray],
    *,
    n_env_steps: int,
    n_boot: int,
    confidence: float,
    s_boot: np.random.SeedSequence,
    t_start: float,
    horizon: int,
    stages: Sequence[tuple[np.ndarray, dict[str, np.ndarray]]] = (),
    method: str = "soft_q",
    stage: str = "refit",
    advice: str | None = None,
    settled: bool | Literal["stages"] | None = "stages",
) -> ApproxMEGResult:
    """The estimate, its interval and the diagnostics (``method`` names the fits; ``stage``
    and ``advice`` word the warning of stages that have not settled; ``settled`` is
    ``"stages"`` for :func:`stages_settled`'s verdict, or the caller's own, warned about with
    ``advice`` when False).

    ``stages`` holds what :func:`scan` returned after the first fit and after each refit
    (``stages[-1]`` is ``(betas, mats)``; empty: no refits). The interval is widened by the
    largest move of the estimate from any earlier stage to the last, and every stage's estimate
    and interval (widened by its own earlier stages' moves) are reported too.
    """
    models = ens.models
    K = len(models)
    n = ev.n_episodes
    full = max(float(mats["all"].mean(0).max()), 0.0) if "all" in mats else math.nan
    cert = float(ens.certificates.mean())
    scans = list(stages) or [(betas, mats)]
    per_stage = [m for _, m in scans]
    interval_of = functools.partial(
        stage_interval,
        n_models=K,
        certificate=cert,
        n_boot=n_boot,
        confidence=confidence,
        s_boot=s_boot,
    )
    intervals: list[_Interval] = []
    for stage_mats in per_stage:
        intervals.append(interval_of(stage_mats, earlier=[i.mean for i in intervals]))
    # the first fit's estimate, which the refits' move is measured from (NaN: no refits)
    first_stage = intervals[0].mean if len(per_stage) > 1 else math.nan
    last = intervals[-1]
    singles, reps = last.singles, last.replicates
    se_boot, se_models = last.se_boot, last.se_models

    k_best = int(np.argmax(mean_curve(mats)))
    beta = float(betas[k_best])
    infos = []
    # the fits' residuals are independent (one more induction each for linear fits)
    residuals = _threads.parallel_map(lambda m: bellman_residual(m, ev, beta * m.q_scale), models)
    for k, (m, (res_mean, res_rms)) in enumerate(zip(models, residuals, strict=True)):
        col = mats[str(k)].mean(0)
        infos.append(
            {
                "meg": float(max(col.max(), 0.0)),
                "beta": float(betas[int(np.argmax(col))]),
                "residual_mean": res_mean,
                "residual_rms": res_rms,
                "loss": float(getattr(m, "losses", [math.nan])[-1]),
                "q_scale": m.q_scale,
            }
        )
    bound, length_bound = ens.bounds(ev, horizon)
    # the scale of a settled stage: H log|A|, or for a box the certificate (0 if infinite)
    scale, what = (bound, "H log|A|") if not ens.box else (_finite(cert), "the certificate")
    stage_means = [i.mean for i in intervals]
    if settled == "stages":
        warn_unsettled(stage_means, last.sampling, scale, what, stage=stage, advice=advice)
        settled = stages_settled(stage_means, last.sampling, scale)
    elif settled is False:
        warnings.warn(
            f"the estimate has not settled (stages {' -> '.join(f'{v:.4g}' for v in stage_means)}"
            f"): {advice}",
            ApproxMEGWarning,
            stacklevel=3,
        )
    edge = k_best in (0, len(betas) - 1)
    rel = [i["residual_rms"] / i["q_scale"] for i in infos]
    if max(rel) > _RESIDUAL_WARN:
        warnings.warn(
            f"a soft Q-fit did not converge: its RMS soft Bellman residual is {max(rel):.3g} of "
            f"the largest return (above {_RESIDUAL_WARN}); the estimate is unreliable. Fit with "
            "more steps per iteration (steps_per_iteration=), more data (n_data_steps=) or more "
            "fits (n_models=).",
            ApproxMEGWarning,
            stacklevel=3,
        )
    above = ens.box and exceeds_certificate(last.mean, cert)
    if above:
        warnings.warn(
            f"the fits' estimate {last.mean:.4g} exceeds the certificate {cert:.4g} "
            f"(E_pi[sum_t KL(pi || u)]), which no normalised model can: at beta* = {beta:.3g} "
            f"the models are narrower than the action grid ({ens.grid}) can integrate. The "
            "estimate is the certificate by clipping (above_certificate=True), not a measured "
            "value (typical of a nearly deterministic policy on actions the reward favours).",
            ApproxMEGWarning,
            stacklevel=3,
        )
    est = float(last.estimate)
    return ApproxMEGResult(
        meg=float(last.estimate),
        low=float(last.low),
        high=float(last.high),
        confidence=float(confidence),
        beta=beta,
        upper_bound=bound,
        normalized=normalise(est, bound, cert),
        length_bound=length_bound,
        length_normalized=normalise(est, length_bound, cert),
        certificate=cert,
        horizon=int(horizon),
        mean_length=float(ev.lengths.mean()),
        expected_return=float(ev.returns.mean()),
        n_env_steps=int(n_env_steps),
        n_eval_episodes=int(n),
        ensemble=float(full),
        models=infos,
        seed_std=float(singles.std(ddof=1)) if K > 1 else math.nan,
        model_se=se_models if K > 1 else math.nan,
        bootstrap_se=se_boot,
        residual_rms=float(np.mean(rel)),
        at_boundary=bool(edge),
        q_scale=float(np.median([m.q_scale for m in models])),
        replicates=reps,
        wall_time_s=time.perf_counter() - t_start,
        first_stage=float(first_stage),
        refine_shift=float(last.shift),
        allowance=float(last.allowance),
        stages=tuple(stage_means),
        stage_intervals=tuple((i.estimate, i.low, i.high) for i in intervals),
        settled=settled,
        stage_curves=tuple(
            (np.asarray(b, dtype=float), np.stack([m[str(k)].mean(0) for k in range(K)]))
            for b, m in scans
        ),
        method=method,
        above_certificate=bool(above),
        grid=ens.grid,
    )


def _finite(x: float) -> float:
    """``x`` where finite and positive, else 0."""
    return x if math.isfinite(x) and x > 0 else 0.0


def normalise(meg: float, bound: float, certificate: float) -> float:
    """``meg / bound``, or where the bound is infinite (a box) ``meg / certificate`` (0 when
    that is 0, NaN when it is infinite); 0 for a bound of 0."""
    if math.isinf(bound):
        if certificate == 0:
            return 0.0
        return meg / certificate if math.isfinite(certificate) else math.nan
    return float(meg / bound) if bound > 0 else 0.0


def exceeds_certificate(estimate: float, certificate: float) -> bool:
    """Whether a stage's mean maximum (before clipping) lies above the certificate, which no
    normalised model can reach (Gibbs' inequality): the quadrature failed at that beta."""
    return bool(estimate > certificate + 1e-6 * max(1.0, abs(certificate)))
