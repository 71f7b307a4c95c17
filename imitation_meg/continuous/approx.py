"""Approximate known-utility MEG of an agent acting in a bounded ``Box``, from rollouts.

Given only ``reset`` / ``step`` and the agent's action law at each observation
(:mod:`imitation_meg.continuous.densities`), :func:`meg_approx_continuous` estimates

    MEG = sup_beta E_pi[ sum_{t < T} log( pi_beta,t(a_t | s_t) / u(a_t) ) ],

``u`` the uniform density on the box and ``pi_beta`` the finite-horizon soft-optimal model of
:mod:`imitation_meg.continuous.soft_q` (terminal states worth 0, no discount), with the same
structure as the discrete estimator (:mod:`imitation_meg.approx.known`):

1. ``n_models`` soft Q-networks with the action as input, each fitted on its own data: episodes
   of the scored policy, of the scored policy mixed half-and-half with uniform actions, and of
   the uniform policy.
2. Fresh episodes of the scored policy. At every visited state ``L``'s term is integrated over
   the policy's own law (``int pi(a|s) beta (q(s, a) - m_beta(q(s, .))) da`` by the law's
   quadrature rule: a Rao-Blackwellised form of the sampled action's term), with ``m_beta`` by
   the action grid (Gauss-Legendre in 1-2 dimensions, Sobol points beyond); the mean over
   episodes is scanned over ``beta`` (0, both signs, half decades over 7 decades, then a fine
   grid around the best point, a tenth of a decade apart). ``beta = 0`` scores exactly 0, so the estimate is ``>= 0``.
3. ``refine`` times: each network is refitted with its rationality prior focused on the optimum
   and with episodes of (an importance-resampled version of) its own soft-optimal policy there,
   and step 2 is repeated.
4. The estimate is the mean over fits of each fit's maximum; the interval combines the
   bootstrap over evaluation episodes, the fits' spread (Student ``t``) and the largest move of
   the estimate from an earlier stage (the discrete estimator's :func:`~imitation_meg.approx.
   evaluate.stage_interval`). The certificate is the policy's own log-likelihood ratio
   ``E_pi[sum_t KL(pi(. | s_t) || u)]`` (``inf`` for PPO's clipped Gaussian).

**What the number means.** MEG here is a KL-like quantity with no ceiling: how much better, in
nats per episode, the best Boltzmann-rational model of the reward predicts the agent's actions
than the uniform density does. It grows as the agent's action law narrows *around actions the
reward favours*; a narrow law around actions the reward does not favour scores low (its
certificate is high, MEG is not). ``normalized = meg / certificate`` is the share of the agent's
departure from uniform that the reward explains; it is not available for clipped laws. The
model family is the undiscounted finite-horizon one; SB3 agents optimise a discounted return, so
even a perfect agent need not be soft-optimal in this family. See docs/continuous.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from typing import Any

import numpy as np
import torch as th

from imitation_meg.approx.core import ProgressBar
from imitation_meg.approx.evaluate import (
    ApproxMEGWarning,
    mean_curve,
    stage_interval,
    stages_settled,
    warn_unsettled,
)
from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q import BetaPrior, check_average, check_lr
from imitation_meg.continuous.densities import ContinuousPolicyFn, as_continuous_policy
from imitation_meg.continuous.rollouts import BoxEnvSource, Laws, collect_box
from imitation_meg.continuous.soft_q import (
    ActionGrid,
    BoxSoftQModel,
    action_grid,
    bellman_residual_box,
    fit_box_soft_q,
    new_box_model,
    row_soft_mean,
)
from imitation_meg.results import to_jsonable

__all__ = ["ContinuousApproxResult", "exceeds_certificate", "meg_approx_continuous"]

#: Adam steps per fitting stage by default (split over the iterations, at least 20 each).
STEP_BUDGET = 12_000
#: Off-policy environment steps per model by default.
DATA_STEPS = 30_000
#: The coarse grid of rationalities (decades of ``beta * q_scale``), its step, and the fine grid.
_GRID_DECADES = (-2.0, 5.0)
_GRID_STEP = 0.5
_FINE_HALF = 0.3
_FINE_STEP = 0.1
#: Rows per model and iteration whose soft Bellman targets are computed, on long horizons
#: (``H >= 100``: more iterations, each with fewer steps) and short ones.
_POOL_LONG, _POOL_SHORT = 2048, 8192
#: Candidate uniform actions per decision when sampling a model's own soft-optimal policy.
_RESAMPLE = 32
#: Evaluation rows per forward pass.
_EVAL_ROWS = 2048


@dataclasses.dataclass(frozen=True)
class ContinuousApproxResult:
    """An approximate known-utility MEG estimate for a ``Box``-action agent.

    Attributes:
        meg: the estimate (nats): the mean over fits of each fit's maximum over beta, clipped to
            ``[0, certificate]``.
        low: the interval's lower end (bootstrap over episodes, spread of the fits, refit
            allowance; see :class:`~imitation_meg.approx.ApproxMEGResult`).
        high: the interval's upper end.
        confidence: the interval's nominal coverage.
        beta: the maximiser of the fits' mean curve (utility units).
        certificate: ``E_pi[sum_t KL(pi(. | s_t) || u)]`` (``inf`` for laws with point masses).
        normalized: ``meg / certificate`` (0 when the certificate is 0, NaN when it is
            infinite).
        horizon: ``H``.
        mean_length: ``E_pi[T]``.
        expected_return: the mean evaluation return.
        n_env_steps: environment steps taken in all.
        n_eval_episodes: evaluation episodes.
        models: per fit ``meg``, ``beta``, ``residual_mean``, ``residual_rms`` (at the
            estimate's beta, on the evaluation transitions, utility units), ``loss``, ``q_scale``.
        seed_std: standard deviation of the single fits' estimates.
        model_se: standard error of the mean over fits (``seed_std / sqrt(n_models)``).
        bootstrap_se: standard error over evaluation episodes.
        residual_rms: mean over fits of the RMS residual as a fraction of ``q_scale``.
        at_boundary: the optimum is at the largest ``|beta|`` scanned.
        above_certificate: the fits' mean maximum exceeded the certificate, which no normalised
            model can (Gibbs' inequality): the action grid could not integrate the models at that
            beta (a law much narrower than the grid's spacing), so ``meg`` is the certificate by
            clipping, not by estimation (warned).
        stages: the estimate after each stage.
        stage_intervals: each stage's ``(meg, low, high)``.
        allowance: the largest move from an earlier stage (added to the interval).
        refine_shift: the move from the first stage.
        settled: whether the stages have settled: the last refit moved the estimate by at
            most its sampling half-width or 1% of the certificate (when finite), whichever is
            larger (:func:`~imitation_meg.approx.evaluate.stages_settled`); ``False`` is warned,
            ``None`` without refits.
        policy: what was scored (with its smoothing, if any).
        grid: the action grid (``kind`` and points).
        wall_time_s: seconds taken.
    """

    meg: float
    low: float
    high: float
    confidence: float
    beta: float
    certificate: float
    normalized: float
    horizon: int
    mean_length: float
    expected_return: float
    n_env_steps: int
    n_eval_episodes: int
    models: list[dict[str, float]]
    seed_std: float
    model_se: float
    bootstrap_se: float
    residual_rms: float
    at_boundary: bool
    above_certificate: bool
    stages: tuple[float, ...]
    stage_intervals: tuple[tuple[float, float, float], ...]
    allowance: float
    refine_shift: float
    settled: bool | None
    policy: str
    grid: str
    wall_time_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return to_jsonable(  # type: ignore[return-value]
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        )


# ------------------------------------------------------------------------------ behaviours
def _law_sampler(pol: ContinuousPolicyFn, mix: float = 0.0) -> Any:
    def fn(raw: Any, x: np.ndarray, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        acts = pol.law(raw).sample(rng)
        if mix > 0:
            u = pol.low + rng.random(acts.shape) * (pol.high - pol.low)
            acts = np.where(rng.random((acts.shape[0], 1)) < mix, u, acts)
        return acts

    return fn


def _model_sampler(model: BoxSoftQModel, b: float) -> Any:
    """Approximately the model's soft-optimal policy: ``_RESAMPLE`` uniform candidates per
    decision, one kept with probability ``softmax(b f)`` (importance resampling)."""
    lo, hi = model.low.double().numpy(), model.high.double().numpy()

    def fn(raw: Any, x: np.ndarray, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, d = x.shape[0], lo.size
        cand = rng.random((n, _RESAMPLE, d)) * 2.0 - 1.0
        with th.no_grad():
            f = model.f_points(
                th.as_tensor(x), th.as_tensor(t), th.full((n,), b), th.as_tensor(cand)
            ).double()
        logits = b * f
        p = th.softmax(logits, -1).numpy()
        k = (p.cumsum(1) < rng.random((n, 1))).sum(1).clip(max=_RESAMPLE - 1)
        return lo + (cand[np.arange(n), k] + 1.0) * 0.5 * (hi - lo)

    return fn


# ------------------------------------------------------------------------------ evaluation
class _Evaluation:
    """The evaluation episodes with the scored policy's rules, and ``L`` per episode."""

    def __init__(self, ev: Rollouts, laws: Laws, grid: ActionGrid, rule: dict[str, Any]) -> None:
        self.ev = ev
        self.x = th.as_tensor(ev.x)
        self.t = th.as_tensor(ev.t)
        self.episode = th.as_tensor(ev.episode)
        self.grid = grid
        pts, wts, kls = [], [], []
        for lo in range(0, ev.n_steps, _EVAL_ROWS):
            r = laws.rows(slice(lo, lo + _EVAL_ROWS)).rule(**rule)
            pts.append(r.points)
            wts.append(r.weights)
            kls.append(r.kl)
        M = max(p.shape[1] for p in pts)
        self.points = th.cat([_pad(p, M) for p in pts])  # (N_rows, M, d) environment units
        self.weights = th.cat([_pad(w, M) for w in wts])
        kl = th.cat(kls).numpy()
        per_ep = np.zeros(ev.n_episodes)
        np.add.at(per_ep, ev.episode, kl)
        self.certificate = float(per_ep.mean())

    def columns(self, models: list[BoxSoftQModel], beta: float) -> list[np.ndarray]:
        """Per model ``(n_eps,)`` sums over each episode of the decisions' terms at ``beta``
        (utility units)."""
        n_eps = self.ev.n_episodes
        if beta == 0.0:
            return [np.zeros(n_eps) for _ in models]
        out = [th.zeros(n_eps, dtype=th.float64) for _ in models]
        N = self.x.shape[0]
        with th.no_grad():
            for lo in range(0, N, _EVAL_ROWS):
                sl = slice(lo, min(N, lo + _EVAL_ROWS))
                x, t = self.x[sl], self.t[sl]
                for k, m in enumerate(models):
                    if m.null:
                        continue
                    b = th.full((x.shape[0],), beta * m.q_scale)
                    pts = m.scale_actions(self.points[sl])
                    fp = m.f_points(x, t, b, pts).double()
                    fg = m.f_points(x, t, b, self.grid.points)
                    soft = row_soft_mean(fg, self.grid.log_w, b).double()
                    term = b.double() * ((self.weights[sl] * fp).sum(-1) - soft)
                    out[k].index_add_(0, self.episode[sl], term)
        return [o.numpy() for o in out]


def _pad(x: th.Tensor, M: int) -> th.Tensor:
    """Pad the second dimension to ``M`` (repeating the last point, weight 0)."""
    if x.shape[1] == M:
        return x
    reps = x[:, -1:].expand(x.shape[0], M - x.shape[1], *x.shape[2:])
    if x.dim() == 2:  # weights
        reps = th.zeros_like(reps)
    return th.cat([x, reps], 1)


def _scan(ev: _Evaluation, models: list[BoxSoftQModel]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The coarse grid of betas, then a fine grid around the fits' best (utility units)."""
    q_ref = float(np.median([m.q_scale for m in models]))
    lo, hi = _GRID_DECADES
    mags = 10.0 ** np.arange(lo, hi + 1e-9, _GRID_STEP) / q_ref
    betas = list(np.concatenate([-mags[::-1], [0.0], mags]))
    cols = [ev.columns(models, b) for b in betas]
    k = int(np.argmax([np.mean([c.mean() for c in col]) for col in cols]))
    if betas[k] != 0.0:
        centre = math.log10(abs(betas[k]))
        for u in centre + np.arange(-_FINE_HALF, _FINE_HALF + 1e-9, _FINE_STEP):
            b = math.copysign(10.0**u, betas[k])
            if not any(math.isclose(b, c, rel_tol=1e-9) for c in betas):
                betas.append(b)
                cols.append(ev.columns(models, b))
    order = np.argsort(betas)
    mats = {str(j): np.stack([cols[i][j] for i in order], 1) for j in range(len(models))}
    return np.asarray(betas)[order], mats


# ------------------------------------------------------------------------------ entry point
def meg_approx_continuous(
    policy: Any,
    env: Any,
    *,
    horizon: int | None = None,
    algo: str | None = None,
    noise_std: float | None = None,
    deterministic: bool = False,
    n_data_steps: int = DATA_STEPS,
    n_eval_episodes: int = 100,
    n_models: int = 3,
    hidden: tuple[int, ...] = (64, 64),
    iterations: int | None = None,
    steps_per_iteration: int | None = None,
    refine: int = 1,
    grid_points: int | None = None,
    n_boot: int = 300,
    confidence: float = 0.95,
    seed: int = 0,
    n_envs: int = 8,
    lr: float = 3e-3,
    average: float = 0.5,
    last_steps: int = 3,
    progress: bool = False,
) -> ContinuousApproxResult:
    """Approximate known-utility MEG of an agent acting in a bounded ``Box`` (module docstring).

    Args:
        policy: an SB3 model or policy (SAC, PPO, A2C, TD3 with ``noise_std`` ...), a ``.zip``
            path, or a :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn`.
        env: a gymnasium id, a ``gymnasium.Env`` (copied) or a factory with a bounded ``Box``
            action space.
        horizon: decisions per episode (default the environment's time limit).
        algo, noise_std, deterministic: see :func:`~imitation_meg.continuous.densities.
            as_continuous_policy`.
        n_data_steps: off-policy environment steps per model (a third each of the policy, the
            policy mixed with uniform actions, and uniform actions; a third more per refit).
        n_eval_episodes: fresh episodes of the policy on which ``L(beta)`` is averaged.
        n_models: fits on independent data (at least 2 for their spread to enter the interval).
        hidden: hidden layer sizes.
        iterations: soft Q-iterations (default ``H + 10``).
        steps_per_iteration: Adam steps per iteration (default ``max(20, 12000 // iterations)``).
        refine: refits focused on the optimum (each adds a stage; the largest move widens the
            interval).
        grid_points: points per dimension of the action grid (default 16 in 1-D, 10 in 2-D;
            Sobol points beyond, default 256).
        n_boot, confidence: the bootstrap.
        seed: the seed of everything random.
        n_envs: environment copies stepped in lockstep.
        lr, average, last_steps: Adam's learning rate (refits: 0.3 of it), the averaged share
            of each iteration's steps, indicator inputs of the last decisions (as in the
            discrete estimator).
        progress: a progress bar.

    Returns:
        :class:`ContinuousApproxResult`.

    Raises:
        TypeError / ValueError: a policy without a density (TD3 without ``noise_std``), a
            non-``Box`` or unbounded action space, bad settings.
    """
    t_start = time.perf_counter()
    for name, v, lo in (
        ("n_data_steps", n_data_steps, 3),
        ("n_eval_episodes", n_eval_episodes, 2),
        ("n_models", n_models, 1),
        ("refine", refine, 0),
        ("n_boot", n_boot, 0),
        ("n_envs", n_envs, 1),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}.")
    for name, opt in (
        ("iterations", iterations),
        ("steps_per_iteration", steps_per_iteration),
        ("grid_points", grid_points),
    ):
        if opt is not None and (
            isinstance(opt, bool) or not isinstance(opt, (int, np.integer)) or opt < 1
        ):
            raise ValueError(f"{name} must be None or an integer >= 1, got {opt!r}.")
    check_lr(lr)
    check_average(average)
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")
    source = BoxEnvSource(env, horizon=horizon)
    pol = as_continuous_policy(policy, algo=algo, noise_std=noise_std, deterministic=deterministic)
    if not (np.allclose(pol.low, source.low) and np.allclose(pol.high, source.high)):
        raise ValueError(
            f"{pol.name} acts in [{pol.low}, {pol.high}] but {source.name}'s box is "
            f"[{source.low}, {source.high}]: score it in the environment it was trained on."
        )
    H, d = source.horizon, source.action_dim
    n_iter = iterations if iterations is not None else H + 10
    n_steps = (
        steps_per_iteration if steps_per_iteration is not None else max(20, STEP_BUDGET // n_iter)
    )
    grid = action_grid(d, grid_points, seed=seed)
    rule = {"nodes": 3, "panels": 6, "extra_breaks": d == 1}
    s_eval, s_models, s_boot = np.random.SeedSequence(int(seed)).spawn(3)
    bar = ProgressBar(progress, total=n_models * n_iter * (1 + refine), desc="MEG (continuous)")
    steps = {"n": 0}

    def count(n: int) -> None:
        steps["n"] += n

    ev, laws = collect_box(
        source,
        _law_sampler(pol),
        n_eval_episodes,
        np.random.default_rng(s_eval),
        scored=pol,
        n_envs=n_envs,
        on_step=count,
    )
    assert laws is not None
    if ev.truncated_early:
        warnings.warn(
            f"{ev.truncated_early} of {ev.n_episodes} evaluation episodes were cut by the "
            f"environment before H={H}; pass horizon= no larger than the environment's limit.",
            ApproxMEGWarning,
            stacklevel=2,
        )
    evaluation = _Evaluation(ev, laws, grid, rule)
    seeds = [int(v) for v in s_models.generate_state(n_models)]
    models, datas = [], []
    uniform = _law_sampler(pol, 1.0)
    for mseed in seeds:
        g = np.random.default_rng([mseed, 1])
        third = max(1, n_data_steps // 3)
        parts = [
            collect_box(source, b, None, g, min_steps=third, n_envs=n_envs, on_step=count)[0]
            for b in (_law_sampler(pol), _law_sampler(pol, 0.5), uniform)
        ]
        data = Rollouts.concat(parts)
        datas.append(data)
        models.append(
            new_box_model(
                data, source.low, source.high, H, hidden=hidden, seed=mseed, last_steps=last_steps
            )
        )
    if any(m.null for m in models):
        warnings.warn(
            f"{sum(m.null for m in models)} of {n_models} soft Q-models saw no reward that could "
            "prefer one action to another in their data: they are uniform at every beta (score "
            "0). Collect more data (n_data_steps=) if the reward is sparse.",
            ApproxMEGWarning,
            stacklevel=2,
        )
    fit = functools.partial(
        fit_box_soft_q,
        grid=grid,
        iterations=n_iter,
        steps_per_iteration=n_steps,
        average=average,
        on_iteration=lambda _i: bar.update(n_models),
        target_pool=_POOL_LONG if H >= 100 else _POOL_SHORT,
    )
    losses = fit(
        models, datas, lr=lr, priors=[BetaPrior()] * n_models, seeds=[s + 1 for s in seeds]
    )
    betas, mats = _scan(evaluation, models)
    stages = [(betas, mats)]
    for rnd in range(int(refine)):
        beta = float(betas[int(np.argmax(mean_curve(mats)))])
        if beta == 0.0:
            stages += [stages[-1]] * (int(refine) - rnd)
            bar.update(n_iter * n_models * (int(refine) - rnd))
            break
        for k, (m, mseed) in enumerate(zip(models, seeds, strict=True)):
            g = np.random.default_rng([mseed, 2 + rnd])
            own = collect_box(
                source,
                _model_sampler(m, beta * m.q_scale),
                None,
                g,
                min_steps=max(1, n_data_steps // 3),
                n_envs=n_envs,
                on_step=count,
            )[0]
            datas[k] = Rollouts.concat([datas[k], own])
        losses = fit(
            models,
            datas,
            lr=0.3 * lr,
            priors=[BetaPrior(focus=beta * m.q_scale) for m in models],
            seeds=[s + 2 + rnd for s in seeds],
        )
        betas, mats = _scan(evaluation, models)
        stages.append((betas, mats))
    bar.close()
    return _summarise(
        evaluation,
        models,
        losses,
        stages,
        n_boot=n_boot,
        confidence=confidence,
        s_boot=s_boot,
        n_env_steps=steps["n"],
        horizon=H,
        name=pol.name,
        t_start=t_start,
    )


def exceeds_certificate(estimate: float, certificate: float) -> bool:
    """Whether a stage's mean maximum (before clipping) lies above the certificate, which no
    normalised model can reach (Gibbs' inequality): the quadrature failed at that beta."""
    return bool(estimate > certificate + 1e-6 * max(1.0, abs(certificate)))


def _summarise(
    evaluation: _Evaluation,
    models: list[BoxSoftQModel],
    losses: list[list[float]],
    stages: list[tuple[np.ndarray, dict[str, np.ndarray]]],
    *,
    n_boot: int,
    confidence: float,
    s_boot: np.random.SeedSequence,
    n_env_steps: int,
    horizon: int,
    name: str,
    t_start: float,
) -> ContinuousApproxResult:
    K = len(models)
    cert = evaluation.certificate
    intervals: list[Any] = []
    for _, stage_mats in stages:
        intervals.append(
            stage_interval(
                stage_mats,
                K,
                earlier=[i.mean for i in intervals],
                certificate=cert,
                n_boot=n_boot,
                confidence=confidence,
                s_boot=s_boot,
            )
        )
    last = intervals[-1]
    betas, mats = stages[-1]
    k_best = int(np.argmax(mean_curve(mats)))
    beta = float(betas[k_best])
    ev = evaluation.ev
    infos = []
    for k, m in enumerate(models):
        col = mats[str(k)].mean(0)
        res_mean, res_rms = bellman_residual_box(m, ev, evaluation.grid, beta * m.q_scale)
        infos.append(
            {
                "meg": float(max(col.max(), 0.0)),
                "beta": float(betas[int(np.argmax(col))]),
                "residual_mean": res_mean,
                "residual_rms": res_rms,
                "loss": float(losses[k][-1]) if losses[k] else math.nan,
                "q_scale": m.q_scale,
            }
        )
    rel = [i["residual_rms"] / i["q_scale"] for i in infos]
    finite = math.isfinite(cert) and cert > 0
    grid = evaluation.grid
    above = exceeds_certificate(last.mean, cert)
    stage_means = [float(i.mean) for i in intervals]
    scale = cert if finite else 0.0
    warn_unsettled(stage_means, last.sampling, scale, "the certificate")
    if above:
        warnings.warn(
            f"the fits' estimate {last.mean:.4g} exceeds the certificate {cert:.4g} "
            f"(E_pi[sum_t KL(pi || u)]), which no normalised model can: at beta* = {beta:.3g} "
            f"the models are narrower than the action grid ({grid.kind}, "
            f"{grid.points.shape[0]} points) can integrate. The estimate is the "
            "certificate by clipping (above_certificate=True), not a measured value (typical of "
            "a nearly deterministic policy on actions the reward favours).",
            ApproxMEGWarning,
            stacklevel=3,
        )
    return ContinuousApproxResult(
        meg=float(last.estimate),
        low=float(last.low),
        high=float(last.high),
        confidence=float(confidence),
        beta=beta,
        certificate=cert,
        normalized=float(last.estimate) / cert
        if finite
        else (math.nan if cert == math.inf else 0.0),
        horizon=int(horizon),
        mean_length=float(ev.lengths.mean()),
        expected_return=float(ev.returns.mean()),
        n_env_steps=int(n_env_steps),
        n_eval_episodes=int(ev.n_episodes),
        models=infos,
        seed_std=float(last.singles.std(ddof=1)) if K > 1 else math.nan,
        model_se=float(last.se_models) if K > 1 else math.nan,
        bootstrap_se=float(last.se_boot),
        residual_rms=float(np.mean(rel)),
        at_boundary=k_best in (0, len(betas) - 1),
        above_certificate=bool(above),
        stages=tuple(stage_means),
        stage_intervals=tuple((i.estimate, i.low, i.high) for i in intervals),
        allowance=float(last.allowance),
        refine_shift=float(last.shift),
        settled=stages_settled(stage_means, last.sampling, scale),
        policy=name,
        grid=f"{grid.kind}, {grid.points.shape[0]} points",
        wall_time_s=time.perf_counter() - t_start,
    )
