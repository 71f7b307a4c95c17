"""What both approximate estimators do: collect data, fit soft Q-ensembles, scan beta, report.

:func:`~imitation_meg.approx.meg_approx` scores the environment's reward with
:func:`estimate`; :func:`~imitation_meg.approx.meg_approx_unknown` scores two utilities of its
class with the same function (its own part is the ascent on the utility). Both take their
settings from one :class:`~imitation_meg.approx.options.ApproxOptions`. The action space is a
parameter: the same steps fit :class:`~imitation_meg.approx.soft_q.SoftQModel` for ``Discrete``
actions and :class:`~imitation_meg.approx.soft_q.BoxSoftQModel` for a bounded box (the scored
policy is then a :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch as th

from imitation_meg.approx.ensemble import Ensemble, best_index, ensemble_of, mean_curve, scan
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning, summarise
from imitation_meg.approx.options import REFIT_LR, ResolvedOptions
from imitation_meg.approx.policy import PolicyFn
from imitation_meg.approx.rollouts import Behaviour, EnvSource, Rollouts, collect
from imitation_meg.approx.soft_q import BetaPrior, action_grid, fit_soft_q_ensemble, new_model

__all__ = [
    "Behaviour",
    "ProgressBar",
    "Run",
    "collect_data",
    "curve_rng",
    "data_behaviours",
    "estimate",
    "evaluation_episodes",
    "fit_ensemble",
    "model_behaviour",
    "model_data",
    "policy_behaviour",
    "uniform_behaviour",
]


# ------------------------------------------------------------------------------ behaviours
def uniform_behaviour(n_actions: int) -> Behaviour:
    """The uniform policy over ``n_actions`` ``Discrete`` actions as a rollout behaviour."""

    def fn(raw: Any, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.full((x.shape[0], n_actions), 1.0 / n_actions)

    return fn


def policy_behaviour(pol: Any, mix: float = 0.0) -> Behaviour:
    """The scored policy, mixed with a share ``mix`` of uniform actions: its probabilities
    (a :class:`~imitation_meg.approx.policy.PolicyFn`), or draws from its action law (a
    :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn`: each row's action is drawn
    from the law, then replaced by a uniform one with probability ``mix``)."""
    if callable(getattr(pol, "law", None)):
        return _law_sampler(pol, mix)

    def fn(raw: Any, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        p = pol.probs(raw)
        return (1.0 - mix) * p + mix / p.shape[1]

    return fn


def _law_sampler(pol: Any, mix: float) -> Behaviour:
    def fn(raw: Any, x: np.ndarray, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        acts = pol.law(raw).sample(rng)
        if mix > 0:
            u = pol.low + rng.random(acts.shape) * (pol.high - pol.low)
            acts = np.where(rng.random((acts.shape[0], 1)) < mix, u, acts)
        return acts

    return fn


def data_behaviours(pol: Any, source: EnvSource) -> list[Behaviour]:
    """The scored policy, the policy mixed half-and-half with uniform actions, and uniform
    actions (for a box, the policy mixed entirely: every behaviour draws the policy's action
    first, so the three share one layout of random draws)."""
    uniform = policy_behaviour(pol, 1.0) if source.actions.is_box else None
    return [
        policy_behaviour(pol),
        policy_behaviour(pol, 0.5),
        uniform or uniform_behaviour(source.n_actions),
    ]


def model_behaviour(model: Any, b: float) -> Behaviour:
    """A soft Q-model's soft-optimal policy at normalised rationality ``b`` (its
    ``behaviour``: probabilities, or for a Box model draws by importance resampling)."""
    return model.behaviour(b)


class ProgressBar:
    """A tqdm bar when ``enabled`` and tqdm is installed; its rate gives the time estimate."""

    def __init__(self, enabled: bool, *, total: int, desc: str, unit: str = "it") -> None:
        self._bar: Any = None
        if enabled:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False)
            except ImportError:  # pragma: no cover - tqdm is in the experiments extra
                self._bar = None

    @property
    def counts(self) -> tuple[int, int] | None:
        """``(done, total)`` of the bar, or None when no bar is shown."""
        return None if self._bar is None else (int(self._bar.n), int(self._bar.total))

    def update(self, n: int) -> None:
        """Count ``n`` more units (the total grows when whole episodes overshoot it)."""
        if self._bar is not None:
            if self._bar.total is not None and self._bar.n + n > self._bar.total:
                self._bar.total = self._bar.n + n
            self._bar.update(n)

    def restart(self, *, total: int, desc: str, unit: str = "it") -> None:
        """Count other units from 0 (a method that hands over to another, or counts data
        steps instead of iterations)."""
        if self._bar is not None:
            self._bar.reset(total=total)
            self._bar.set_description(desc, refresh=False)
            self._bar.unit = unit

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# ------------------------------------------------------------------------------ one run
class Run:
    """What one estimator call shares between its parts: the environment, the scored policy,
    the resolved settings, the seeds, the progress bar and the count of environment steps.

    Args:
        source: the environment.
        pol: the scored policy (a :class:`~imitation_meg.approx.policy.PolicyFn`, or for a box
            a :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn`).
        opts: the settings, resolved for ``source`` (:meth:`ApproxOptions.resolved`).
        bar_total: soft Q-iterations (or other units) the progress bar counts.
        desc: the bar's label.
        bar_unit: what the bar counts (tqdm's ``unit``).
        n_streams: independent seed streams the caller needs besides evaluation, models and
            bootstrap (in ``streams``).
        t_start: when the call began (``time.perf_counter()``; default now).
    """

    def __init__(
        self,
        source: EnvSource,
        pol: Any,
        opts: ResolvedOptions,
        *,
        bar_total: int,
        desc: str,
        bar_unit: str = "it",
        n_streams: int = 0,
        t_start: float | None = None,
    ) -> None:
        self.t_start = time.perf_counter() if t_start is None else t_start
        self.source, self.pol, self.opts = source, pol, opts
        s_eval, s_models, s_boot, *self.streams = np.random.SeedSequence(int(opts.seed)).spawn(
            3 + n_streams
        )
        self.s_eval, self.s_boot = s_eval, s_boot
        self.model_seeds = [int(v) for v in s_models.generate_state(opts.n_models)]
        self.bar = ProgressBar(opts.progress, total=bar_total, desc=desc, unit=bar_unit)
        self.n_env_steps = 0

    def count(self, n: int) -> None:
        """Add ``n`` environment steps to the count."""
        self.n_env_steps += n


def curve_rng(seed: int) -> np.random.Generator:
    """The generator of a curve's splitting for ``seed``: the stream :class:`Run` gives its
    first caller-requested stream, so that :func:`~imitation_meg.approx.soft_value_curve` and
    :func:`~imitation_meg.approx.meg_approx` compute the same curve from the same seed."""
    return np.random.default_rng(np.random.SeedSequence(int(seed)).spawn(4)[3])


def collect_data(
    source: EnvSource,
    pol: Any,
    n_steps: int,
    rng: np.random.Generator,
    *,
    n_envs: int,
    on_step: Callable[[int], None] | None = None,
    scored: PolicyFn | None = None,
) -> Rollouts:
    """Off-policy data of about ``n_steps`` steps (whole episodes): a third each of the policy,
    the policy mixed half-and-half with uniform actions, and the uniform policy
    (:func:`data_behaviours`; with ``scored``, that policy's probabilities at every row,
    ``Rollouts.probs``)."""
    third = max(1, n_steps // 3)
    return Rollouts.concat(
        [
            collect(
                source, b, None, rng, min_steps=third, scored=scored, n_envs=n_envs, on_step=on_step
            )
            for b in data_behaviours(pol, source)
        ]
    )


def model_data(run: Run) -> list[Rollouts]:
    """Each model's own off-policy data (:func:`collect_data`, its own seed)."""
    opts = run.opts
    assert opts.n_data_steps is not None, "resolve the options first"
    return [
        collect_data(
            run.source,
            run.pol,
            opts.n_data_steps,
            np.random.default_rng([mseed, 1]),
            n_envs=opts.n_envs,
            on_step=run.count,
        )
        for mseed in run.model_seeds
    ]


def evaluation_episodes(run: Run) -> Rollouts:
    """Fresh episodes of the scored policy with its probabilities (a box: its action laws) at
    every visited state.

    Warns:
        ApproxMEGWarning: episodes cut by the environment before the horizon.
    """
    ev = collect(
        run.source,
        policy_behaviour(run.pol),
        run.opts.n_eval_episodes,
        np.random.default_rng(run.s_eval),
        scored=run.pol,
        n_envs=run.opts.n_envs,
        on_step=run.count,
    )
    if ev.truncated_early:
        warnings.warn(
            f"{ev.truncated_early} of {ev.n_episodes} evaluation episodes were cut by the "
            f"environment before the horizon H={run.source.horizon} without terminating; their "
            "remaining decisions are missing from the estimate. Pass horizon= no larger than the "
            "environment's limit.",
            ApproxMEGWarning,
            stacklevel=4,
        )
    return ev


class Fitted(NamedTuple):
    """An ensemble after its last stage: the models, their data, and every stage's scan
    (rationalities and values, first fit first)."""

    models: list[Any]
    datas: list[Rollouts]
    ensemble: Ensemble
    stages: list[tuple[np.ndarray, dict[str, np.ndarray]]]


def fit_ensemble(
    run: Run,
    ev: Rollouts,
    base: list[Rollouts],
    *,
    reward_fn: Callable[[th.Tensor], th.Tensor] | None = None,
) -> Fitted:
    """Fit one model per seed on its data (``base``), scan, refine around the optimum, rescan:
    :class:`~imitation_meg.approx.soft_q.SoftQModel` for ``Discrete`` actions,
    :class:`~imitation_meg.approx.soft_q.BoxSoftQModel` with the action grid of
    ``opts.grid_points`` for a box.

    :func:`summarise` widens the interval by the estimate's largest move from an earlier stage
    to the last, and reports every stage.
    """
    opts = run.opts
    assert opts.iterations is not None and opts.steps_per_iteration is not None
    assert opts.n_data_steps is not None and opts.refine is not None
    seeds = run.model_seeds
    datas = list(base)
    models = _new_models(run, datas, reward_fn)

    def fit_all(priors: list[BetaPrior], lr: float, stage: int) -> None:
        losses = fit_soft_q_ensemble(
            models,
            datas,
            iterations=opts.iterations,
            steps_per_iteration=opts.steps_per_iteration,
            lr=lr,
            priors=priors,
            seeds=[mseed + 1 + stage for mseed in seeds],
            on_iteration=lambda _i: run.bar.update(len(models)),
            average=opts.average,
            device=opts.device,
        )
        for model, loss in zip(models, losses, strict=True):
            model.losses = loss

    fit_all([BetaPrior()] * len(models), opts.lr, 0)
    _warn_nulls(models, opts.n_data_steps)
    ens = ensemble_of(models, ev)
    q_ref = float(np.median([m.q_scale for m in models]))
    betas, mats = scan(ens, q_ref)
    stages = [(betas, mats)]
    for rnd in range(opts.refine):
        beta = float(betas[best_index(betas, mean_curve(mats))])
        if beta == 0.0:  # the uniform model: nothing to refine around; the stages stand still
            run.bar.update(opts.iterations * len(models) * (opts.refine - rnd))
            stages += [stages[-1]] * (opts.refine - rnd)
            break
        _add_own_data(run, models, datas, beta, rnd)
        fit_all([BetaPrior(focus=beta * m.q_scale) for m in models], opts.lr * REFIT_LR, 1 + rnd)
        betas, mats = scan(ens, q_ref)
        stages.append((betas, mats))
    return Fitted(models, datas, ens, stages)


def _new_models(
    run: Run, datas: list[Rollouts], reward_fn: Callable[[th.Tensor], th.Tensor] | None
) -> list[Any]:
    """One untrained model per seed, its scales read from its data: ``Discrete`` actions, or a
    box with the action grid of ``opts.grid_points``."""
    source, opts = run.source, run.opts
    box = source.actions.is_box
    grid = action_grid(source.action_dim, opts.grid_points, seed=opts.seed) if box else None
    return [
        new_model(
            data,
            source.actions if box else source.n_actions,
            source.horizon,
            hidden=opts.hidden,
            seed=mseed,
            reward_fn=reward_fn,
            last_steps=opts.last_steps,
            grid=grid,
        )
        for data, mseed in zip(datas, run.model_seeds, strict=True)
    ]


def _warn_nulls(models: list[Any], n_data_steps: int) -> None:
    """Warn when some models saw no reward that could prefer one action (they are uniform)."""
    nulls = sum(m.null for m in models)
    if nulls:
        warnings.warn(
            f"{nulls} of {len(models)} soft Q-models saw no non-zero reward, or the same reward "
            f"on every step with no episode ending early, in their {n_data_steps} steps of "
            "data: no action is better than another there, so they are uniform at every beta "
            "(they score 0). If the reward is sparse (a goal never reached), collect more data "
            "(n_data_steps=) or a longer horizon.",
            ApproxMEGWarning,
            stacklevel=5,
        )


def _add_own_data(
    run: Run, models: list[Any], datas: list[Rollouts], beta: float, rnd: int
) -> None:
    """Refit round ``rnd``'s data: each model's own soft-optimal episodes at ``beta`` (a third of
    ``n_data_steps``), appended to its data (``datas``, in place)."""
    opts = run.opts
    assert opts.n_data_steps is not None
    for k, (model, mseed) in enumerate(zip(models, run.model_seeds, strict=True)):
        own = collect(
            run.source,
            model_behaviour(model, beta * model.q_scale),
            None,
            np.random.default_rng([mseed, 2 + rnd]),
            min_steps=max(1, opts.n_data_steps // 3),
            n_envs=opts.n_envs,
            on_step=run.count,
        )
        datas[k] = Rollouts.concat([datas[k], own])


def estimate(
    run: Run,
    ev: Rollouts,
    base: list[Rollouts],
    *,
    reward_fn: Callable[[th.Tensor], th.Tensor] | None = None,
) -> ApproxMEGResult:
    """Known-utility MEG of the scored policy for ``reward_fn`` (default the environment's
    reward): :func:`fit_ensemble`, then the estimate, its interval and its diagnostics
    (:func:`~imitation_meg.approx.evaluate.summarise`) on the evaluation episodes ``ev``."""
    fitted = fit_ensemble(run, ev, base, reward_fn=reward_fn)
    betas, mats = fitted.stages[-1]
    return summarise(
        ev,
        fitted.ensemble,
        betas,
        mats,
        n_env_steps=run.n_env_steps,
        n_boot=run.opts.n_boot,
        confidence=run.opts.confidence,
        s_boot=run.s_boot,
        t_start=run.t_start,
        horizon=run.source.horizon,
        stages=fitted.stages,
    )
