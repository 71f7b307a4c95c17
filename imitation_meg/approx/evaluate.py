"""The approximate estimate's record and its assembly from fitted soft Q-models evaluated on
episodes of the scored policy.

:func:`summarise` turns the per-episode values of each fitted model on a grid of rationalities
into :class:`ApproxMEGResult`: the mean over models of each model's maximum, an interval that
combines a bootstrap over episodes with the spread of the models, and the diagnostics. See
:mod:`imitation_meg.approx.known`. The values are ``sum_t (sum_a pi(a|s_t) log pi_beta(a|s_t) +
log|A|)`` for ``Discrete`` actions (:class:`Ensemble`) and, for a box (:class:`BoxEnsemble`),
``sum_t int pi(a|s_t) log(pi_beta(a|s_t) / u(a)) da``, the policy's law integrated by its own
quadrature rule and the models' soft means by the action grid.

The evaluation on a grid of rationalities is in :mod:`~imitation_meg.approx.ensemble`, each
stage's interval and the settling of stages in :mod:`~imitation_meg.approx.intervals` (their
public names are importable from here too).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.approx.ensemble import (  # the grid's constants: frozen defaults read them here
    _FINE_HALF,  # noqa: F401
    _FINE_STEP,  # noqa: F401
    _GRID_DECADES,  # noqa: F401
    _GRID_STEP,  # noqa: F401
    BoxEnsemble,
    Ensemble,
    add_episode_values,
    best_index,
    fit_maxima,
    mean_curve,
    scan,
)
from imitation_meg.approx.intervals import (
    SETTLE_SHARE,
    UNSETTLED_NOTE,  # noqa: F401  (importable from here)
    _finite,
    _settle_tolerance,
    exceeds_certificate,
    fits_spread,
    normalise,
    stage_curves,
    stage_interval,  # noqa: F401  (importable from here)
    stage_intervals,
    stages_settled,
)
from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import bellman_residual
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
        curve_se: ``"paths"``: the curve's noise that its populations show beyond the spread
            of its starts, in the interval beside ``bootstrap_se`` (0 with many spread starts;
            NaN for the other methods).
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
    curve_se: float = math.nan
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


def no_fits() -> dict[str, Any]:
    """The fields of :class:`ApproxMEGResult` that describe soft Q-fits, for an estimate made
    without any (a curve, an empirical MDP): NaN, and no models."""
    return {
        "ensemble": math.nan,
        "models": [],
        "seed_std": math.nan,
        "model_se": math.nan,
        "residual_rms": math.nan,
    }


def warn_unsettled(
    stages: Sequence[float],
    sampling: float,
    scale: float,
    what: str,
    *,
    stage: str = "refit",
    advice: str | None = None,
    stacklevel: int = 4,
) -> None:
    """Warn (:class:`ApproxMEGWarning`) when :func:`stages_settled` is False; ``what`` names the
    scale, ``stage`` what a stage is and ``advice`` the way out in the message (``stacklevel``:
    the frame the warning names, as for :func:`warnings.warn`)."""
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
        stacklevel=stacklevel,
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
    cert = float(ens.certificates.mean())
    scans = list(stages) or [(betas, mats)]
    intervals = stage_intervals(scans, K, cert, n_boot, confidence, s_boot)
    last = intervals[-1]
    k_best = best_index(betas, mean_curve(mats))
    beta = float(betas[k_best])
    infos = _model_infos(ev, models, betas, mats, beta)
    bound, length_bound = ens.bounds(ev, horizon)
    stage_means = [i.mean for i in intervals]
    settled = _settled(ens, bound, cert, stage_means, last.sampling, stage, advice, settled)
    rel = [i["residual_rms"] / i["q_scale"] for i in infos]
    _warn_residuals(rel)
    above = ens.box and exceeds_certificate(last.mean, cert)
    if above:
        _warn_above_certificate(last.mean, cert, beta, ens.grid)
    est = float(last.estimate)
    seed_std, model_se = fits_spread(last, K)
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
        n_eval_episodes=int(ev.n_episodes),
        ensemble=_ensemble_max(mats),
        models=infos,
        seed_std=seed_std,
        model_se=model_se,
        bootstrap_se=last.se_boot,
        residual_rms=float(np.mean(rel)),
        at_boundary=k_best in (0, len(betas) - 1),
        q_scale=float(np.median([m.q_scale for m in models])),
        replicates=last.replicates,
        wall_time_s=time.perf_counter() - t_start,
        # the first fit's estimate, which the refits' move is measured from (NaN: no refits)
        first_stage=float(intervals[0].mean) if len(scans) > 1 else math.nan,
        refine_shift=float(last.shift),
        allowance=float(last.allowance),
        stages=tuple(stage_means),
        stage_intervals=tuple((i.estimate, i.low, i.high) for i in intervals),
        settled=settled,
        stage_curves=stage_curves(scans, K),
        method=method,
        above_certificate=bool(above),
        grid=ens.grid,
    )


def _ensemble_max(mats: dict[str, np.ndarray]) -> float:
    """The maximum over rationalities of the averaged fits' mean values (at least 0; NaN
    without the ``"all"`` estimator)."""
    return max(float(mats["all"].mean(0).max()), 0.0) if "all" in mats else math.nan


def _model_infos(
    ev: Rollouts, models: list[Any], betas: np.ndarray, mats: dict[str, np.ndarray], beta: float
) -> list[dict[str, Any]]:
    """Each fit's own maximum and maximiser (its ``(n_eps, G)`` values ``mats[str(k)]`` on
    ``betas (G,)``), its soft Bellman residual on ``ev`` at ``beta`` and its last loss."""
    # the fits' residuals are independent (one more induction each for linear fits)
    residuals = _threads.parallel_map(lambda m: bellman_residual(m, ev, beta * m.q_scale), models)
    infos = []
    for k, (m, (res_mean, res_rms)) in enumerate(zip(models, residuals, strict=True)):
        col = mats[str(k)].mean(0)
        infos.append(
            {
                "meg": float(max(col.max(), 0.0)),
                "beta": float(betas[best_index(betas, col)]),
                "residual_mean": res_mean,
                "residual_rms": res_rms,
                "loss": float(getattr(m, "losses", [math.nan])[-1]),
                "q_scale": m.q_scale,
            }
        )
    return infos


def _settled(
    ens: Ensemble,
    bound: float,
    cert: float,
    stage_means: list[float],
    sampling: float,
    stage: str,
    advice: str | None,
    settled: bool | Literal["stages"] | None,
) -> bool | None:
    """The verdict on the stages (:func:`stages_settled`'s for ``settled="stages"``, else the
    caller's), warned about when False."""
    # the scale of a settled stage: H log|A|, or for a box the certificate (0 if infinite)
    scale, what = (bound, "H log|A|") if not ens.box else (_finite(cert), "the certificate")
    if settled == "stages":
        warn_unsettled(stage_means, sampling, scale, what, stage=stage, advice=advice, stacklevel=5)
        return stages_settled(stage_means, sampling, scale)
    if settled is False:
        warnings.warn(
            f"the estimate has not settled (stages {' -> '.join(f'{v:.4g}' for v in stage_means)}"
            f"): {advice}",
            ApproxMEGWarning,
            stacklevel=4,
        )
    return settled


#: RMS Bellman residual (fraction of the largest return) above which a fit counts as diverged.
_RESIDUAL_WARN = 0.5


def _warn_residuals(rel: list[float]) -> None:
    """Warn when a fit's RMS soft Bellman residual (a share of its largest return) shows that it
    diverged."""
    if max(rel) > _RESIDUAL_WARN:
        warnings.warn(
            f"a soft Q-fit did not converge: its RMS soft Bellman residual is {max(rel):.3g} of "
            f"the largest return (above {_RESIDUAL_WARN}); the estimate is unreliable. Fit with "
            "more steps per iteration (steps_per_iteration=), more data (n_data_steps=) or more "
            "fits (n_models=).",
            ApproxMEGWarning,
            stacklevel=4,
        )


def _warn_above_certificate(mean: float, cert: float, beta: float, grid: str) -> None:
    """Warn that the fits' estimate ``mean`` exceeds the certificate (a Box fit's quadrature
    failed at ``beta``)."""
    warnings.warn(
        f"the fits' estimate {mean:.4g} exceeds the certificate {cert:.4g} "
        f"(E_pi[sum_t KL(pi || u)]), which no normalised model can: at beta* = {beta:.3g} "
        f"the models are narrower than the action grid ({grid}) can integrate. The "
        "estimate is the certificate by clipping (above_certificate=True), not a measured "
        "value (typical of a nearly deterministic policy on actions the reward favours).",
        ApproxMEGWarning,
        stacklevel=4,
    )
