"""Approximate known-utility MEG of a policy in any discrete-action environment.

Given only ``reset`` / ``step`` (the paper's setting: we may run policies in the environment),
:func:`meg_approx` estimates

    MEG = sup_beta E_pi[ sum_{t < T} ( log pi_beta,t(a_t | s_t) + log|A| ) ],

where ``T`` is the number of decisions of an episode (the horizon ``H``, or fewer when the
episode terminates), the utility is the environment's reward, and ``pi_beta`` is the
finite-horizon soft-optimal model of :mod:`imitation_meg.approx.soft_q` (terminal states worth 0,
no discount). With full-length episodes this is the paper's ``L(beta*) + H log|A|``; when episodes
end early, ``E_pi[T] log|A|`` plays the role of ``H log|A|`` (it is the bound), exactly as in the
tabular code, where a terminated episode continues in an absorbing state whose steps contribute 0.

Steps:

1. ``n_models`` soft Q-networks, each fitted (:func:`~imitation_meg.approx.soft_q.fit_soft_q`)
   on its own off-policy data: episodes of the scored policy, of the scored policy mixed
   half-and-half with uniform actions, and of the uniform policy.
2. Fresh evaluation episodes of the scored policy. ``L(beta)`` is averaged over them with the
   policy's own probabilities at each visited state (``sum_a pi(a|s) log pi_beta(a|s)``, a
   lower-variance form of the sampled action's log-probability), for each model on a grid of
   ``beta`` (``0``, both signs, 8 decades), then on a fine grid around the best point
   (:mod:`imitation_meg.approx.evaluate`). ``beta = 0`` (the uniform model, whose value is exactly
   0) is always a candidate, so the estimate is >= 0.
3. With ``refine``, each model is refitted with its rationality prior focused on the optimum and
   with episodes of its own soft-optimal policy there, and step 2 is repeated (``refine=k``:
   ``k`` times).
4. The estimate is the mean over the ``K`` fits of each fit's maximum. Its interval combines the
   bootstrap over evaluation episodes with the spread of the fits (Student ``t`` with ``K - 1``
   degrees of freedom), so it covers the rollout noise and the part of the fitting error that
   is independent across fits (data, initialisation, optimisation), plus, with ``refine``, the
   largest distance between the estimate and any earlier stage's (``allowance``), an allowance
   for the optimisation error every fit shares. Other shared error (a network too small, data
   that never reach the states the soft-optimal policies visit) is not covered: the soft Bellman
   residuals, the seed spread and the Gibbs certificate are reported so a user can judge it.
   (Averaging the fits' Q-values is reported as a diagnostic only: the average of soft-optimal
   models is not one, and on small noisy problems it can fit the scored policy better than any
   member of the family.)
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg import _threads
from imitation_meg.approx.evaluate import (
    ApproxMEGResult,
    ApproxMEGWarning,
    Ensemble,
    mean_curve,
    scan,
    summarise,
)
from imitation_meg.approx.policy import PolicyFn, as_policy_fn
from imitation_meg.approx.rollouts import EnvSource, Rollouts, collect
from imitation_meg.approx.soft_q import (
    BetaPrior,
    SoftQModel,
    _check_int,
    check_average,
    check_lr,
    fit_soft_q_ensemble,
    new_model,
)
from imitation_meg.type_aliases import EnvLike, GymEnv, PolicySource

__all__ = [
    "ApproxMEGResult",
    "ApproxMEGWarning",
    "collect_data",
    "data_bytes",
    "default_data_steps",
    "default_schedule",
    "meg_approx",
    "uniform_behaviour",
]

Behaviour = Callable[[Any, np.ndarray, np.ndarray], np.ndarray]


# ------------------------------------------------------------------------------ behaviours
def uniform_behaviour(n_actions: int) -> Behaviour:
    """The uniform policy as a rollout behaviour."""

    def fn(raw: Any, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.full((x.shape[0], n_actions), 1.0 / n_actions)

    return fn


def _policy_behaviour(pol: PolicyFn, mix: float = 0.0) -> Behaviour:
    def fn(raw: Any, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        p = pol.probs(raw)
        return (1.0 - mix) * p + mix / p.shape[1]

    return fn


def _model_behaviour(model: SoftQModel, b: float) -> Behaviour:
    def fn(raw: Any, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        bb = th.full((x.shape[0],), float(b))
        lp = model.log_policy(th.as_tensor(x), th.as_tensor(t), bb)
        return lp.exp().double().numpy()

    return fn


def collect_data(
    source: EnvSource,
    pol: PolicyFn,
    n_steps: int,
    rng: np.random.Generator,
    *,
    n_envs: int,
    on_step: Callable[[int], None] | None = None,
) -> Rollouts:
    """Off-policy data of about ``n_steps`` steps (whole episodes): a third each of the policy,
    the policy mixed half-and-half with uniform actions, and the uniform policy."""
    third = max(1, n_steps // 3)
    behaviours = [
        _policy_behaviour(pol),
        _policy_behaviour(pol, 0.5),
        uniform_behaviour(source.n_actions),
    ]
    return Rollouts.concat(
        [
            collect(source, b, None, rng, min_steps=third, n_envs=n_envs, on_step=on_step)
            for b in behaviours
        ]
    )


#: The fits' default settings, the ones validated against exact answers
#: (``configs/approx_validation.yaml``, docs/approx.md): Adam's learning rate of the first fit
#: (the refits, which start from its weights, use ``REFIT_LR`` times it), the share of each
#: soft Q-iteration's last Adam steps whose weights are averaged, and indicator inputs of the
#: last decisions.
LR = 3e-3
REFIT_LR = 0.3
AVERAGE = 0.5
LAST_STEPS = 3
#: Evaluation episodes of the scored policy.
N_EVAL_EPISODES = 1000
#: The ranges :func:`meg_approx` accepts for the estimator settings a study's config carries
#: (fields named as its keywords; ``None`` means the default), by
#: :func:`imitation_meg.config.check_values` rule.
SETTING_RANGES: dict[str, tuple[str, ...]] = {
    "positive": (
        "n_data_steps",
        "n_eval_episodes",
        "n_models",
        "hidden",
        "iterations",
        "steps_per_iteration",
        "lr",
    ),
    "non_negative": ("last_steps", "refine", "n_boot"),
    "probabilities": ("average",),
}


# ------------------------------------------------------------------------------ fitting
@dataclasses.dataclass(frozen=True)
class _FitSettings:
    hidden: tuple[int, ...]
    iterations: int
    steps_per_iteration: int
    refine: int
    n_data_steps: int
    n_envs: int
    average: float = AVERAGE
    lr: float = LR
    last_steps: int = LAST_STEPS


def _fit_ensemble(
    source: EnvSource,
    pol: PolicyFn,
    ev: Rollouts,
    fit: _FitSettings,
    seeds: list[int],
    bar: _Bar,
    count: Callable[[int], None],
    *,
    reward_fn: Callable[[th.Tensor], th.Tensor] | None = None,
    extra_data: Rollouts | None = None,
) -> tuple[
    list[SoftQModel],
    list[Rollouts],
    Ensemble,
    np.ndarray,
    dict[str, np.ndarray],
    list[tuple[np.ndarray, dict[str, np.ndarray]]],
]:
    """Fit one model per seed on its own data, scan, refine around the optimum, rescan.

    The last value returned lists the scans (rationalities and values) after the first fit and
    after each refit: :func:`summarise` widens the interval by the estimate's largest move from
    an earlier stage to the last, and reports every stage.
    """
    A, H = source.n_actions, source.horizon
    models: list[SoftQModel] = []
    datas: list[Rollouts] = []
    for mseed in seeds:
        g = np.random.default_rng([int(mseed), 1])
        data = collect_data(source, pol, fit.n_data_steps, g, n_envs=fit.n_envs, on_step=count)
        if extra_data is not None:
            data = Rollouts.concat([data, extra_data])
        models.append(
            new_model(
                data,
                A,
                H,
                hidden=fit.hidden,
                seed=int(mseed),
                reward_fn=reward_fn,
                last_steps=fit.last_steps,
            )
        )
        datas.append(data)

    def fit_all(priors: list[BetaPrior], lr: float, stage: int) -> None:
        losses = fit_soft_q_ensemble(
            models,
            datas,
            iterations=fit.iterations,
            steps_per_iteration=fit.steps_per_iteration,
            lr=lr,
            priors=priors,
            seeds=[int(mseed) + 1 + stage for mseed in seeds],
            on_iteration=lambda _i: bar.update(len(models)),
            average=fit.average,
        )
        for model, loss in zip(models, losses, strict=True):
            model.losses = loss  # type: ignore[attr-defined]

    fit_all([BetaPrior()] * len(models), fit.lr, 0)
    nulls = sum(m.null for m in models)
    if nulls:
        warnings.warn(
            f"{nulls} of {len(models)} soft Q-models saw no non-zero reward, or the same reward "
            f"on every step with no episode ending early, in their {fit.n_data_steps} steps of "
            "data: no action is better than another there, so they are uniform at every beta "
            "(they score 0). If the reward is sparse (a goal never reached), collect more data "
            "(n_data_steps=) or a longer horizon.",
            ApproxMEGWarning,
            stacklevel=3,
        )
    ens = Ensemble(models, ev)
    q_ref = float(np.median([m.q_scale for m in models]))
    betas, mats = scan(ens, q_ref)
    stages = [(betas, mats)]
    for rnd in range(fit.refine):
        beta = float(betas[int(np.argmax(mean_curve(mats)))])
        if beta == 0.0:  # the uniform model: nothing to refine around; the stages stand still
            bar.update(fit.iterations * len(models) * (fit.refine - rnd))
            stages += [stages[-1]] * (fit.refine - rnd)
            break
        for k, (model, mseed) in enumerate(zip(models, seeds, strict=True)):
            g = np.random.default_rng([int(mseed), 2 + rnd])
            own = collect(
                source,
                _model_behaviour(model, beta * model.q_scale),
                None,
                g,
                min_steps=max(1, fit.n_data_steps // 3),
                n_envs=fit.n_envs,
                on_step=count,
            )
            datas[k] = Rollouts.concat([datas[k], own])
        fit_all([BetaPrior(focus=beta * m.q_scale) for m in models], fit.lr * REFIT_LR, 1 + rnd)
        betas, mats = scan(ens, q_ref)
        stages.append((betas, mats))
    return models, datas, ens, betas, mats, stages


# ------------------------------------------------------------------------------ entry point
#: Adam steps per fitting stage by default (split over the iterations, at least 20 each). Fewer
#: leave the fits short of their targets, a bias the fits share (docs/approx.md).
STEP_BUDGET = 48_000


def default_schedule(
    horizon: int,
    iterations: int | None,
    steps_per_iteration: int | None,
    *,
    budget: int | None = None,
) -> tuple[int, int]:
    """Soft Q-iterations (default ``H + 20``) and Adam steps per iteration (default
    ``max(20, budget // iterations)``, ``budget`` by default :data:`STEP_BUDGET`)."""
    n_iter = iterations if iterations is not None else horizon + 20
    if steps_per_iteration is not None:
        return n_iter, steps_per_iteration
    return n_iter, max(20, (STEP_BUDGET if budget is None else budget) // n_iter)


#: Off-policy environment steps per model by default (lowered for wide observations, see
#: :func:`default_data_steps`).
DATA_STEPS = 180_000


def data_bytes(
    n_data_steps: int, obs_dim: int, n_models: int, refine: int, *, extra_copies: float = 0.0
) -> float:
    """Bytes the fits' stored transitions take at once: every model keeps its data (float32
    ``x`` and ``x_next``, ``obs_dim`` entries each) until its last refit, each refit adds a
    third as many steps, and ``extra_copies`` further sets of ``n_data_steps`` transitions are
    held beside them (the unknown-utility bound keeps its ascent data)."""
    return n_data_steps * (n_models * (1 + refine / 3) + extra_copies) * 2 * 4 * obs_dim


def default_data_steps(
    obs_dim: int,
    n_models: int,
    refine: int,
    memory_gib: float,
    *,
    default: int = DATA_STEPS,
    extra_copies: float = 0.0,
) -> int:
    """``default``, or fewer when the stored transitions would exceed ``memory_gib``."""
    per_step = data_bytes(1, obs_dim, n_models, refine, extra_copies=extra_copies)
    fits = memory_gib * 2**30 // per_step  # inf: no cap
    return max(3, int(min(default, fits)))


def _data_steps(
    source: EnvSource,
    n_data_steps: int | None,
    memory_gib: Any,
    *,
    n_models: int,
    refine: int,
    default: int,
    extra_copies: float = 0.0,
) -> int:
    """The explicit ``n_data_steps``, or ``default`` capped to ``memory_gib`` with an
    :class:`ApproxMEGWarning` when the cap bites (call :func:`_check_data` on both first, before
    the environment is built)."""
    if n_data_steps is not None:
        return int(n_data_steps)
    sizes = {"obs_dim": source.obs_dim, "n_models": n_models, "refine": refine}
    n = default_data_steps(
        **sizes, memory_gib=memory_gib, default=default, extra_copies=extra_copies
    )
    if n < default:
        need = data_bytes(default, **sizes, extra_copies=extra_copies) / 2**30
        warnings.warn(
            f"{source.name}'s observations have {source.obs_dim} entries: the default "
            f"{default} data steps per model would store about {need:.1f} GiB, more than "
            f"data_memory_gib={memory_gib:g}, so {n} are used. Less data leaves the fits "
            "noisier (on a sparse goal, biased low; docs/approx.md): raise data_memory_gib= if "
            "the memory is there, or pass n_data_steps= to choose.",
            ApproxMEGWarning,
            stacklevel=3,
        )
    return n


def _check_data(n_data_steps: Any, memory_gib: Any) -> None:
    if n_data_steps is not None:
        _check_int("n_data_steps", n_data_steps, 3)
    if (
        isinstance(memory_gib, bool)
        or not isinstance(memory_gib, (int, float))
        or not memory_gib > 0
    ):
        raise ValueError(f"data_memory_gib must be a positive number, got {memory_gib!r}.")


@_threads.entry_point
def meg_approx(
    policy: PolicySource,
    env: EnvLike | Callable[[], GymEnv],
    *,
    horizon: int | None = None,
    algo: str | None = None,
    epsilon: float | None = None,
    n_data_steps: int | None = None,
    n_eval_episodes: int = N_EVAL_EPISODES,
    n_models: int = 3,
    hidden: tuple[int, ...] = (64, 64),
    iterations: int | None = None,
    steps_per_iteration: int | None = None,
    refine: bool | int = 3,
    n_boot: int = 500,
    confidence: float = 0.95,
    seed: int = 0,
    n_envs: int = 16,
    progress: bool = False,
    data_memory_gib: float = 4.0,
    average: float = AVERAGE,
    lr: float = LR,
    last_steps: int = LAST_STEPS,
) -> ApproxMEGResult:
    """Approximate known-utility MEG of ``policy`` in ``env`` (see the module docstring).

    Args:
        policy: an SB3 model or policy, an SB3 ``.zip`` path (with ``algo``), or a callable
            mapping a batch of raw observations to ``(n, A)`` action probabilities.
        env: a gymnasium id, a ``gymnasium.Env`` (copied) or a factory; ``Discrete`` actions,
            any observation space ``gymnasium.spaces.flatten`` handles.
        horizon: decisions per episode ``H`` (default the environment's time limit).
        algo: ``"ppo"``, ``"a2c"`` or ``"dqn"`` for a ``.zip`` path.
        epsilon: DQN only: score its epsilon-greedy policy.
        n_data_steps: off-policy environment steps per model (whole episodes), split evenly
            between the scored policy, the scored policy mixed half-and-half with uniform
            actions, and the uniform policy (plus a third as many steps of the model's
            soft-optimal policy per refit). The fits' cost hardly depends on it (a fixed number
            of Adam steps); their noise does: on a sparse, stochastic goal too few steps bias
            the estimate low. Default 180 000, lowered with a warning when the stored
            transitions would take more than ``data_memory_gib`` (wide observations, e.g.
            images); an explicit value is used as given.
        n_eval_episodes: fresh episodes of the scored policy on which ``L(beta)`` is averaged
            (fewer make the maximum over beta noisier). Rollouts are cheap next to the fits on
            short horizons; on long ones pass fewer (``imitation-meg score`` uses 60 for
            ``H >= 200``).
        n_models: soft Q-networks fitted on independent data with different seeds (at least 2
            for their spread to enter the interval; with 1 the interval covers the evaluation
            episodes only).
        hidden: hidden layer sizes of the networks.
        iterations: soft Q-iterations (target refreshes); default ``H + 20``: values propagate
            one decision per iteration, so fewer than ``H`` iterations give a truncated
            lookahead.
        steps_per_iteration: Adam steps per iteration; default
            ``max(20, STEP_BUDGET // iterations)`` (48 000 steps per stage: fewer leave the fits
            short of their targets, a bias that the interval does not cover).
        refine: refit each model with the rationality prior focused on the optimum and with
            episodes of its soft-optimal policy there, then re-evaluate, ``refine`` times
            (``True`` is 1, ``False`` 0; the estimate after each stage is in ``stages``, the
            largest move from an earlier stage enters the interval, and ``stage_intervals``
            holds what every smaller ``refine`` reports, so one run shows whether more refits
            changed the answer). Each refit costs about as much CPU as the first fit.
        n_boot: bootstrap replicates over evaluation episodes.
        confidence: the interval's nominal coverage.
        seed: the seed of everything random (same seed, same result).
        n_envs: environment copies stepped in lockstep.
        progress: show a progress bar (its rate gives the time estimate).
        data_memory_gib: memory the default ``n_data_steps`` may fill with stored transitions
            (all models together, float32 observations and next observations: about
            ``n_data_steps x n_models x (1 + refine / 3) x 8 x obs_dim`` bytes).
        average: the share of each soft Q-iteration's last Adam steps whose weights are
            averaged into the iteration's result (Polyak-Ruppert averaging; ``0``: the last
            step's weights). It damps the optimisation noise that decides near-tied actions at
            large beta.
        lr: Adam's learning rate of the first fit (cosine-decayed to a tenth over each stage);
            the refits use ``0.3 lr``.
        last_steps: give the networks an indicator input for each of the last ``last_steps``
            decisions (``0``: none, the smooth time features only). The soft-optimal values
            change most from one of the last decisions to the next; smooth features let a
            fit blur that change, which on ``random_features`` at epsilon 0.1 showed as a bias
            at the second-to-last decision. ``average``, ``lr``, ``last_steps`` and
            ``n_eval_episodes`` at their defaults are the setting validated against exact answers
            (``configs/approx_validation.yaml``, docs/approx.md).

    Returns:
        :class:`ApproxMEGResult`.

    Raises:
        TypeError / ValueError: bad policy, environment or settings (named in the message).

    Warns:
        ApproxMEGWarning: episodes cut by the environment before ``H`` (their unseen decisions
            are missing from the estimate); the default ``n_data_steps`` lowered to fit
            ``data_memory_gib``.

    Example:
        >>> from imitation_meg.approx import meg_approx
        >>> uniform = lambda obs: np.full((len(obs), 2), 0.5)
        >>> res = meg_approx(uniform, "CartPole-v1", horizon=30, n_data_steps=300,
        ...                  n_eval_episodes=10, n_models=2, iterations=2,
        ...                  steps_per_iteration=10, refine=False)
        >>> res.meg, res.certificate  # the uniform policy is the beta = 0 model: MEG 0
        (0.0, 0.0)
    """
    t_start = time.perf_counter()
    _check_data(n_data_steps, data_memory_gib)
    _check_int("n_eval_episodes", n_eval_episodes, 2)
    _check_int("n_models", n_models, 1)
    check_average(average)
    check_lr(lr)
    _check_int("last_steps", last_steps, 0)
    if steps_per_iteration is not None:
        _check_int("steps_per_iteration", steps_per_iteration, 1)
    _check_int("n_boot", n_boot, 0)
    _check_int("n_envs", n_envs, 1)
    if iterations is not None:
        _check_int("iterations", iterations, 1)
    if not isinstance(refine, bool) and (
        not isinstance(refine, (int, np.integer)) or int(refine) < 0
    ):
        raise ValueError(f"refine must be True, False or an integer >= 0, got {refine!r}.")
    n_refits = int(refine)
    if not isinstance(confidence, (int, float)) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {seed!r}.")
    source = EnvSource(env, horizon=horizon)
    pol = as_policy_fn(policy, n_actions=source.n_actions, algo=algo, epsilon=epsilon, env=env)
    H = source.horizon
    n_data_steps = _data_steps(
        source,
        n_data_steps,
        data_memory_gib,
        n_models=n_models,
        refine=n_refits,
        default=DATA_STEPS,
    )
    n_iter, n_steps = default_schedule(H, iterations, steps_per_iteration)
    s_eval, s_models, s_boot = np.random.SeedSequence(int(seed)).spawn(3)
    bar = _Bar(progress, total=n_models * n_iter * (1 + n_refits), desc="MEG (approx)")
    steps = {"n": 0}

    def count(n: int) -> None:
        steps["n"] += n

    ev = collect(
        source,
        _policy_behaviour(pol),
        n_eval_episodes,
        np.random.default_rng(s_eval),
        scored=pol,
        n_envs=n_envs,
        on_step=count,
    )
    if ev.truncated_early:
        warnings.warn(
            f"{ev.truncated_early} of {ev.n_episodes} evaluation episodes were cut by the "
            f"environment before the horizon H={H} without terminating; their remaining decisions "
            "are missing from the estimate. Pass horizon= no larger than the environment's limit.",
            ApproxMEGWarning,
            stacklevel=2,
        )
    fit = _FitSettings(
        hidden,
        n_iter,
        n_steps,
        n_refits,
        n_data_steps,
        n_envs,
        float(average),
        float(lr),
        int(last_steps),
    )
    seeds = [int(v) for v in s_models.generate_state(n_models)]
    _, _, ens, betas, mats, stages = _fit_ensemble(source, pol, ev, fit, seeds, bar, count)
    bar.close()
    return summarise(
        ev,
        ens,
        betas,
        mats,
        n_env_steps=steps["n"],
        n_boot=n_boot,
        confidence=confidence,
        s_boot=s_boot,
        t_start=t_start,
        horizon=H,
        stages=stages,
    )


class _Bar:
    """A tqdm bar when ``enabled`` and tqdm is installed; its rate gives the time estimate."""

    def __init__(self, enabled: bool, *, total: int, desc: str) -> None:
        self._bar: Any = None
        if enabled:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=desc, unit="it", leave=False)
            except ImportError:  # pragma: no cover - tqdm is in the experiments extra
                self._bar = None

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
