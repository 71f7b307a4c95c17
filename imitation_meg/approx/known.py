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

Where the environment is deterministic and the library simulates it (gymnasium's CartPole), the
default is instead :mod:`imitation_meg.approx.paths`: the same quantity from the exact identity
``sum_t (log pi_beta + log|A|) = beta R - log Z_beta(s0)``, with no fitting. Elsewhere, the soft
Q-fits' steps:

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

import time
import warnings
from collections.abc import Callable
from typing import Any

from imitation_meg import _threads
from imitation_meg.approx.core import Run, estimate, evaluation_episodes, model_data
from imitation_meg.approx.empirical import NotTabular, data_budget, empirical_estimate
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning
from imitation_meg.approx.linear import FIRST_STEPS, linear_estimate, rounds
from imitation_meg.approx.options import ApproxOptions
from imitation_meg.approx.paths import paths_estimate
from imitation_meg.approx.policy import as_policy_fn
from imitation_meg.approx.rollouts import EnvSource
from imitation_meg.approx.simulators import simulator
from imitation_meg.type_aliases import EnvLike, GymEnv, PolicySource

__all__ = ["ApproxMEGResult", "ApproxMEGWarning", "meg_approx"]


@_threads.entry_point
def meg_approx(
    policy: PolicySource,
    env: EnvLike | Callable[[], GymEnv],
    *,
    horizon: int | None = None,
    algo: str | None = None,
    epsilon: float | None = None,
    options: ApproxOptions | None = None,
    **settings: Any,
) -> ApproxMEGResult:
    """Approximate known-utility MEG of ``policy`` in ``env`` (see the module docstring).

    Args:
        policy: an SB3 model or policy, an SB3 ``.zip`` path or RL Zoo run folder (with
            ``algo`` where the file does not say), or a callable mapping a batch of raw
            observations to ``(n, A)`` action probabilities.
        env: a gymnasium id, a ``gymnasium.Env`` (copied) or a factory; ``Discrete`` actions,
            any observation space ``gymnasium.spaces.flatten`` handles.
        horizon: decisions per episode ``H`` (default the environment's time limit).
        algo: the algorithm of a saved model (``"ppo"``, ``"dqn"``, ...).
        epsilon: DQN, QR-DQN: score its epsilon-greedy policy.
        options: the estimator's settings (:class:`~imitation_meg.approx.options.ApproxOptions`;
            default its defaults, the validated setting; ``method=`` chooses between the paths
            of a deterministic environment the library simulates (the default where they
            apply: CartPole), the soft Q-fits (the default elsewhere), linear soft
            Q-functions and the empirical MDP of few-valued observations).
        **settings: fields of :class:`~imitation_meg.approx.options.ApproxOptions` replacing
            those of ``options`` (``n_models=2``, ``seed=3``, ``progress=True``, ...).

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
    source = EnvSource(env, horizon=horizon)
    pol = as_policy_fn(policy, n_actions=source.n_actions, algo=algo, epsilon=epsilon, env=env)
    dyn = None  # the simulator, for the methods that take the paths where they apply
    if opts.method in (None, "paths", "auto"):
        dyn, why = simulator(source)
        if dyn is None and opts.method == "paths":
            raise ValueError(
                f"method='paths' needs a deterministic environment the library simulates, but "
                f"{why}. Use method='soft_q' (or 'auto', which falls back by itself)."
            )
    opts = opts.resolved(source, simulated=dyn is not None)
    assert opts.iterations is not None and opts.n_data_steps is not None
    fit_total = opts.n_models * opts.iterations * (1 + opts.refine)
    # the bar counts fits per round (linear), data steps (the empirical MDP, the paths) or
    # iterations
    bar: dict[str, Any] = {"bar_total": fit_total, "desc": "MEG (approx)"}
    if dyn is not None:
        particles = opts.n_starts * (opts.n_particles // 2) * 2
        bar.update(
            bar_total=(opts.n_eval_episodes + particles) * source.horizon,
            desc="MEG (paths)",
            bar_unit="step",
            n_streams=1,
        )
    elif opts.method == "linear":
        bar["bar_total"] = opts.n_models * len(rounds(FIRST_STEPS, opts.n_data_steps))
    elif opts.method != "soft_q":
        bar.update(
            bar_total=data_budget(opts.n_models, opts.n_data_steps),
            desc="MEG (empirical MDP)",
            bar_unit="step",
        )
    run = Run(source, pol, opts, t_start=t_start, **bar)
    if dyn is not None:
        result = paths_estimate(run, dyn)
        run.bar.close()
        return result
    if opts.method == "linear":
        result = linear_estimate(run)
        run.bar.close()
        return result
    if opts.method != "soft_q":
        try:
            result = empirical_estimate(run)
            run.bar.close()
            return result
        except NotTabular as e:
            if opts.method == "empirical":
                run.bar.close()
                raise ValueError(
                    f"method='empirical' needs an empirical MDP, but {e}. Use method='soft_q' "
                    "(or 'auto', which fits where it cannot be built) for this environment."
                ) from None
            run.bar.restart(total=fit_total, desc="MEG (approx)")
            if e.few:
                warnings.warn(
                    f"the observations take few values but {e}, so the empirical MDP is not "
                    "used: fitting soft Q-networks instead (slower).",
                    ApproxMEGWarning,
                    stacklevel=2,
                )
    ev = evaluation_episodes(run)
    result = estimate(run, ev, model_data(run))
    run.bar.close()
    return result
