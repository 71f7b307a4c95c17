"""Approximate known-utility MEG of a policy in any environment with ``Discrete`` actions or a
bounded ``Box``.

Given only ``reset`` / ``step`` (the paper's setting: we may run policies in the environment),
:func:`meg_approx` estimates

    MEG = sup_beta E_pi[ sum_{t < T} ( log pi_beta,t(a_t | s_t) + log|A| ) ],

where ``T`` is the number of decisions of an episode (the horizon ``H``, or fewer when the
episode terminates), the utility is the environment's reward, and ``pi_beta`` is the
finite-horizon soft-optimal model of :mod:`imitation_meg.approx.soft_q` (terminal states worth 0,
no discount). With full-length episodes this is the paper's ``L(beta*) + H log|A|``; when episodes
end early, ``E_pi[T] log|A|`` plays the role of ``H log|A|`` (it is the bound), exactly as in the
tabular code, where a terminated episode continues in an absorbing state whose steps contribute 0.
With a box, ``log|A|`` is the log-volume of the box: the terms are ``log(pi_beta,t(a_t | s_t) /
u(a_t))`` against the uniform density ``u``, there is no ceiling (``upper_bound`` is infinite) and
the Gibbs certificate ``E_pi[sum_t KL(pi || u)]`` is the policy's own bound.

Where the environment is deterministic and the library simulates it (gymnasium's CartPole), the
default is instead :mod:`imitation_meg.approx.paths`: the same quantity from the exact identity
``sum_t (log pi_beta + log|A|) = beta R - log Z_beta(s0)``, with no fitting. Elsewhere, the soft
Q-fits' steps:

1. ``n_models`` soft Q-networks, each fitted (:func:`~imitation_meg.approx.soft_q.fit_soft_q`)
   on its own off-policy data: episodes of the scored policy, of the scored policy mixed
   half-and-half with uniform actions, and of the uniform policy. (A box: networks that take
   the action as input, :class:`~imitation_meg.approx.soft_q.BoxSoftQModel`, whose soft means
   over actions are taken on an action grid.)
2. Fresh evaluation episodes of the scored policy. ``L(beta)`` is averaged over them with the
   policy's own probabilities at each visited state (``sum_a pi(a|s) log pi_beta(a|s)``, a
   lower-variance form of the sampled action's log-probability; a box: the policy's law
   integrated by its quadrature rule), for each model on a grid of ``beta`` (``0``, both signs,
   8 decades; a box: 7, coarser), then on a fine grid around the best point
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
import math
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg.approx.agent import curve_result, episodes_of
from imitation_meg.approx.core import (
    ProgressBar,
    Run,
    curve_rng,
    estimate,
    evaluation_episodes,
    model_data,
)
from imitation_meg.approx.curve import SoftValueCurve
from imitation_meg.approx.deterministic import (
    curve_method,
    curve_steps,
    simulated_curve,
    simulated_estimate,
)
from imitation_meg.approx.empirical import NotTabular, data_budget, empirical_estimate
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning
from imitation_meg.approx.linear import FIRST_STEPS, linear_estimate, rounds
from imitation_meg.approx.options import APPLIES, ApproxOptions, ResolvedOptions
from imitation_meg.approx.policy import as_policy_fn
from imitation_meg.approx.rollouts import EnvSource
from imitation_meg.approx.simulators import simulator
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import EnvKwargs, EnvLike, GymEnv, PolicySource

__all__ = [
    "ApproxMEGResult",
    "ApproxMEGWarning",
    "ContinuousApproxResult",
    "as_curve",
    "meg_approx",
    "meg_approx_continuous",
    "soft_value_curve",
]

#: The result of :func:`meg_approx_continuous`: the one result type of every approximate
#: estimate (kept under this name for the code that imports it).
ContinuousApproxResult = ApproxMEGResult


@_threads.entry_point
def meg_approx(
    policy: PolicySource,
    env: EnvLike | Callable[[], GymEnv],
    *,
    horizon: int | None = None,
    algo: str | None = None,
    epsilon: float | None = None,
    options: ApproxOptions | None = None,
    curve: SoftValueCurve | str | os.PathLike[str] | None = None,
    env_kwargs: EnvKwargs | None = None,
    noise_std: float | None = None,
    deterministic: bool = False,
    **settings: Any,
) -> Any:
    """Approximate known-utility MEG of ``policy`` in ``env`` (see the module docstring).

    Args:
        policy: an SB3 model or policy, an SB3 ``.zip`` path or RL Zoo run folder (with
            ``algo`` where the file does not say), or a callable mapping a batch of raw
            observations to ``(n, A)`` action probabilities; for a box, an SB3 agent with an
            action density (SAC, PPO, A2C; TD3 / DDPG with ``noise_std``), its ``.zip``, a
            :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn`, or ``"uniform"``.
        env: a gymnasium id, a ``gymnasium.Env`` (copied) or a factory; ``Discrete`` actions or
            a bounded ``Box``, any observation space ``gymnasium.spaces.flatten`` handles.
        horizon: decisions per episode ``H`` (default the environment's time limit).
        algo: the algorithm of a saved model (``"ppo"``, ``"dqn"``, ...).
        epsilon: DQN, QR-DQN: score its epsilon-greedy policy.
        options: the estimator's settings (:class:`~imitation_meg.approx.options.ApproxOptions`;
            default its defaults, the validated setting; ``method=`` chooses between the paths
            of a deterministic environment the library simulates (the default where they
            apply: the classic-control tasks), the soft Q-fits (the default elsewhere; for a
            box the only other method), linear soft Q-functions and the empirical MDP of
            few-valued observations).
        curve: the environment's soft-value curve
            (:class:`~imitation_meg.approx.curve.SoftValueCurve`, or the path of its file): the
            score is then ``sup_beta beta J - Lambda(beta)`` from the policy's episodes alone
            (on the simulator where the library has one, else in the environment), with no
            fitting or splitting. It must have been computed for this environment and horizon
            (else a ``ValueError`` says what differs). Only ``n_eval_episodes``, ``n_boot``,
            ``confidence``, ``seed``, ``progress`` and ``n_envs`` apply then.
        env_kwargs: keyword arguments of ``gymnasium.make`` (with an id).
        noise_std, deterministic: Box actions: score a deterministic agent (TD3, DDPG, SAC's
            deterministic mode) smoothed by this Gaussian noise
            (:func:`~imitation_meg.continuous.densities.as_continuous_policy`).
        **settings: fields of :class:`~imitation_meg.approx.options.ApproxOptions` replacing
            those of ``options`` (``n_models=2``, ``seed=3``, ``progress=True``, ...); a
            setting the chosen method does not use is a ``ValueError``.

    Returns:
        :class:`ApproxMEGResult`.

    Raises:
        TypeError / ValueError: bad policy, environment or settings (named in the message; a
            setting that is not a field of ``ApproxOptions`` is a ``TypeError`` listing them).

    Warns:
        ApproxMEGWarning: episodes cut by the environment before ``H`` (their unseen decisions
            are missing from the estimate); the default ``n_data_steps`` lowered to fit
            ``data_memory_gib``; models that saw no reward worth telling actions apart. With
            ``method="empirical"`` / ``"auto"`` (:mod:`imitation_meg.approx.empirical`): an
            empirical MDP whose interval did not reach its precision target (``settled=False``),
            or (``"auto"``) few-valued observations from which it could not be built (then the
            soft Q-fits score, and ``method`` says so). With ``"paths"``
            (:mod:`imitation_meg.approx.paths`): a splitting that could not be trusted at the
            optimum (``settled=False``).

    Example:
        >>> import numpy as np
        >>> from imitation_meg.approx import meg_approx
        >>> uniform = lambda obs: np.full((len(obs), 2), 0.5)
        >>> res = meg_approx(uniform, "CartPole-v1", horizon=30, n_data_steps=300,
        ...                  n_eval_episodes=10, n_models=2, iterations=2,
        ...                  steps_per_iteration=10, refine=False, method="soft_q")
        >>> res.meg, res.certificate  # the uniform policy is the beta = 0 model: MEG 0
        (0.0, 0.0)
    """
    t_start = time.perf_counter()
    opts = ApproxOptions.of(options, **settings)
    source = EnvSource(env, horizon=horizon, env_kwargs=env_kwargs)
    box = source.actions.is_box
    if box:
        if epsilon is not None:
            raise ValueError("epsilon= applies to argmax agents with Discrete actions.")
        pol: Any = box_policy(
            policy, source, algo=algo, noise_std=noise_std, deterministic=deterministic
        )
    else:
        if noise_std is not None or deterministic:
            raise ValueError("noise_std= / deterministic= apply to agents acting in a Box.")
        pol = as_policy_fn(policy, n_actions=source.n_actions, algo=algo, epsilon=epsilon, env=env)
    curve = as_curve(curve)
    if curve is not None:
        curve.check_for(
            env=source.name,
            horizon=source.horizon,
            actions=source.actions.to_dict(),
            env_kwargs=source.env_kwargs,
        )
    dyn = None  # the simulator, for the methods that take the paths where they apply
    if curve is not None or opts.method in (None, "paths", "auto"):
        dyn, why = simulator(source)
        if dyn is None and (opts.method == "paths" or curve is not None):
            raise ValueError(
                f"{'a curve' if curve is not None else 'method=' + repr(opts.method)} needs a "
                f"deterministic environment the library simulates, but {why}. Use "
                "method='soft_q' (or 'auto', which falls back by itself)."
            )
    if box and dyn is None and source.action_dim > 3:
        because = f" ({why})" if opts.method in (None, "paths", "auto") else ""
        raise ValueError(
            f"{source.name} acts in a Box of {source.action_dim} dimensions: the soft Q-fits "
            "integrate the policy's law over at most 3, and only the paths of a simulated "
            f"deterministic environment go beyond, which {source.name} is not{because}."
        )
    if box and dyn is None and opts.method not in (None, "soft_q", "auto"):
        raise ValueError(
            f"method={opts.method!r} has no Box-action form; Box actions are scored by the paths "
            "where the library simulates the environment, else by soft Q-fits (method='soft_q')."
        )
    if curve is not None:
        opts = opts.for_curve()
    else:
        opts = opts.resolved(
            source,
            simulated=None if dyn is None else curve_method(dyn),
            starts=getattr(dyn, "n_starts", None),
        )
    opts.check_applies(
        settings, options, allowed=APPLIES["curve"] if curve is not None else None, box=box
    )
    run = Run(source, pol, opts, t_start=t_start, **_bar(opts, source, dyn, curve))
    try:
        res = _estimate(run, dyn, curve)
    finally:
        run.bar.close()
    return dataclasses.replace(res, policy=str(getattr(pol, "name", "")))


@_threads.entry_point
def soft_value_curve(
    env: EnvLike | TabularMDP | Callable[[], GymEnv],
    *,
    horizon: int | None = None,
    env_kwargs: EnvKwargs | None = None,
    options: ApproxOptions | None = None,
    **settings: Any,
) -> SoftValueCurve:
    """The soft-value curve ``Lambda(beta)`` of an environment, computed once to score any
    number of policies (:mod:`imitation_meg.approx.curve`; pass it to :func:`meg_approx` as
    ``curve=``, or save it).

    Args:
        env: a :class:`~imitation_meg.TabularMDP` or the id of a tabular environment (seals,
            toy-text: the exact curve), or a gymnasium id, ``gymnasium.Env`` or factory of a
            deterministic environment the library simulates (the paths: splitting random
            action sequences at ``n_starts`` fresh starts).
        horizon: decisions per episode ``H`` (default the environment's time limit).
        env_kwargs: keyword arguments of ``gymnasium.make`` (with an id).
        noise_std, deterministic: Box actions: score a deterministic agent (TD3, DDPG, SAC's
            deterministic mode) smoothed by this Gaussian noise
            (:func:`~imitation_meg.continuous.densities.as_continuous_policy`).
        options: :class:`~imitation_meg.approx.options.ApproxOptions`; only ``n_particles``,
            ``n_starts``, ``seed`` and ``progress`` apply.
        **settings: those fields by name.

    Returns:
        :class:`~imitation_meg.approx.curve.SoftValueCurve`; with the same ``seed`` it is the
        curve :func:`meg_approx` computes for itself.

    Raises:
        ValueError: an environment the library has no way to compute a curve of (the message
            says why: today a simulator is needed), or settings that do not apply.
    """
    from imitation_meg.approx.curve import exact_curve
    from imitation_meg.core.env_tables import is_tabular

    if isinstance(env, TabularMDP) or (isinstance(env, str) and is_tabular(env)):
        if settings or options is not None:
            raise ValueError(
                f"the exact curve of a tabular environment takes no settings, got "
                f"{sorted(settings) + (['options'] if options is not None else [])}."
            )
        if isinstance(env, str):
            from imitation_meg.core.env_tables import make_env

            mdp = TabularMDP.from_env(make_env(env, dict(env_kwargs or {})), horizon=horizon)
            return exact_curve(mdp, env=env, env_kwargs=env_kwargs)
        if env_kwargs:
            raise TypeError("env_kwargs apply to an environment id, not to a TabularMDP.")
        return exact_curve(env if horizon is None else env.with_horizon(horizon))
    opts = ApproxOptions.of(options, **settings)
    source = EnvSource(env, horizon=horizon, env_kwargs=env_kwargs)
    dyn, why = simulator(source)
    if dyn is None:
        raise ValueError(
            f"no soft-value curve can be computed for {source.name}: {why}, and the curve "
            "needs a simulator of a deterministic environment (or a TabularMDP). Score its "
            "policies with meg_approx(..., method='soft_q')."
        )
    opts = opts.resolved(source, simulated=curve_method(dyn), starts=getattr(dyn, "n_starts", None))
    opts.check_applies(settings, options, allowed=("n_particles", "n_starts", "seed", "progress"))
    bar = ProgressBar(
        opts.progress,
        total=curve_steps(dyn, opts, source.horizon),
        desc="soft-value curve",
        unit="step",
    )
    try:
        return simulated_curve(source, dyn, opts, curve_rng(opts.seed), on_step=bar.update)
    finally:
        bar.close()


def box_policy(
    policy: Any, source: EnvSource, *, algo: str | None, noise_std: Any, deterministic: bool
) -> Any:
    """The action laws of a policy acting in ``source``'s box: ``"uniform"`` (the reference
    itself), or what :func:`~imitation_meg.continuous.densities.as_continuous_policy` reads.

    Raises:
        ValueError: a policy acting in another box (or what ``as_continuous_policy`` refuses).
    """
    from imitation_meg.continuous.densities import as_continuous_policy, uniform_policy

    low, high = source.low, source.high
    if isinstance(policy, str) and policy == "uniform":
        return uniform_policy(low, high)
    pol = as_continuous_policy(policy, algo=algo, noise_std=noise_std, deterministic=deterministic)
    if not (np.allclose(pol.low, low) and np.allclose(pol.high, high)):
        raise ValueError(
            f"{pol.name} acts in [{pol.low}, {pol.high}] but {source.name}'s box is "
            f"[{low}, {high}]: score it in the environment it was trained on."
        )
    return pol


def meg_approx_continuous(
    policy: PolicySource, env: EnvLike | Callable[[], GymEnv], **settings: Any
) -> ApproxMEGResult:
    """The soft Q-fits of an agent acting in a bounded ``Box``: ``meg_approx(policy, env,
    method="soft_q", **settings)``.

    A thin alias of :func:`meg_approx` kept for the calls written before the estimators were
    one. It takes the keywords it always took, under the same names: ``horizon``, ``algo``,
    ``noise_std``, ``deterministic`` (of :func:`meg_approx`) and ``n_data_steps``,
    ``n_eval_episodes``, ``n_models``, ``hidden``, ``iterations``, ``steps_per_iteration``,
    ``refine``, ``grid_points``, ``n_boot``, ``confidence``, ``seed``, ``n_envs``, ``lr``,
    ``average``, ``last_steps``, ``progress`` (fields of
    :class:`~imitation_meg.approx.options.ApproxOptions`, with the Box fits' defaults), and
    gives the same numbers for the same seed. Where the library simulates the environment
    (Pendulum, MountainCarContinuous), :func:`meg_approx` itself scores by the paths instead.

    Returns:
        :class:`ApproxMEGResult` (``ContinuousApproxResult`` is the same type).

    Raises:
        TypeError: an environment whose actions are not a ``Box`` (score it with
            :func:`meg_approx`), or a keyword :func:`meg_approx` does not take.
        ValueError: ``method`` other than ``"soft_q"``, or what :func:`meg_approx` refuses.
    """
    if settings.setdefault("method", "soft_q") != "soft_q":
        raise ValueError(
            f"meg_approx_continuous is the Box soft Q-fits (method='soft_q'), got "
            f"method={settings['method']!r}; call meg_approx for the other methods."
        )
    where = {k: settings[k] for k in ("horizon", "env_kwargs") if k in settings}
    if not EnvSource(env, **where).actions.is_box:
        raise TypeError(
            "meg_approx_continuous needs an environment with a Box action space; score "
            "Discrete actions with imitation_meg.approx.meg_approx."
        )
    return meg_approx(policy, env, **settings)


def as_curve(curve: Any) -> SoftValueCurve | None:
    """``curve`` as a :class:`SoftValueCurve`: itself, or read from a file path.

    Raises:
        TypeError: neither a curve nor a path.
        FileNotFoundError / ValueError: a path to no curve file.
    """
    if curve is None or isinstance(curve, SoftValueCurve):
        return curve
    if isinstance(curve, (str, os.PathLike)):
        return SoftValueCurve.load(curve)
    raise TypeError(
        f"curve must be a SoftValueCurve or the path of a file written by SoftValueCurve.save, "
        f"got {type(curve).__name__}."
    )


def _bar(opts: ResolvedOptions, source: EnvSource, dyn: Any, curve: Any) -> dict[str, Any]:
    """The progress bar's total, label and unit for the method that will run, and the seed
    streams it needs: fits per round (linear), data steps (the empirical MDP, the paths) or
    soft Q-iterations."""
    if curve is not None or dyn is not None:
        steps = 0 if curve is not None else curve_steps(dyn, opts, source.horizon)
        return {
            "bar_total": opts.n_eval_episodes * source.horizon + steps,
            "desc": "MEG (paths)" if dyn is not None else "MEG (curve)",
            "bar_unit": "step",
            "n_streams": 1,
        }
    assert opts.iterations is not None and opts.n_data_steps is not None
    if opts.method == "linear":
        return {
            "bar_total": opts.n_models * len(rounds(FIRST_STEPS, opts.n_data_steps)),
            "desc": "MEG (approx)",
        }
    if opts.method != "soft_q":
        return {
            "bar_total": data_budget(opts.n_models, opts.n_data_steps),
            "desc": "MEG (empirical MDP)",
            "bar_unit": "step",
        }
    return {"bar_total": _fit_total(opts), "desc": "MEG (approx)"}


def _fit_total(opts: ResolvedOptions) -> int:
    return opts.n_models * opts.iterations * (1 + opts.refine)


def _estimate(run: Run, dyn: Any, curve: SoftValueCurve | None) -> ApproxMEGResult:
    """Run the method ``run.opts.method`` says (the paths, or the environment's given curve
    scored from the policy's episodes, the linear soft Q-functions, the empirical MDP, the soft
    Q-fits)."""
    opts = run.opts
    if curve is not None and dyn is None:  # a curve, and episodes in the environment itself
        ev = evaluation_episodes(run)  # (a curve of a Box environment is always simulated)
        return curve_result(
            run,
            curve,
            episodes_of(ev, math.log(run.source.n_actions)),
            log_measure=math.log(run.source.n_actions),
            method=curve.info.method,
        )
    if dyn is not None:
        return simulated_estimate(run, dyn, curve)
    if opts.method == "linear":
        return linear_estimate(run)
    if opts.method != "soft_q":
        try:
            return empirical_estimate(run)
        except NotTabular as e:
            if opts.method == "empirical":
                raise ValueError(
                    f"method='empirical' needs an empirical MDP, but {e}. Use method='soft_q' "
                    "(or 'auto', which fits where it cannot be built) for this environment."
                ) from None
            run.bar.restart(total=_fit_total(opts), desc="MEG (approx)")
            if e.few:
                warnings.warn(
                    f"the observations take few values but {e}, so the empirical MDP is not "
                    "used: fitting soft Q-networks instead (slower).",
                    ApproxMEGWarning,
                    stacklevel=3,
                )
    ev = evaluation_episodes(run)
    return estimate(run, ev, model_data(run))
