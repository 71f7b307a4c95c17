"""A lower bound on unknown-utility MEG beyond tabular environments (Algorithm 2, sampled).

The class is a utility of the state as the agent sees it: either a small MLP on the flat
observation, or a linear function of the scored agent's own hidden features (its last hidden
layer; the paper's future-work idea of utilities of the agent's internal state). As in the
paper's Algorithm 2, the utility's parameters (its scale plays the role of beta) are fitted by
gradient ascent on the causal log-likelihood ``L(theta) = E_pi[sum_t log pi_theta(a_t | s_t)]``,
whose gradient for soft-optimal models is the difference of expected utility gradients

    grad L = E_pi[ sum_t grad U_theta(s_t) ] - E_{pi_theta}[ sum_t grad U_theta(s_t) ]

(MCE-IRL's identity). Here both expectations are sampled: the scored policy's episodes, and
fresh episodes of ``pi_theta``, whose soft Q-function for the current utility is refitted (warm
started) by soft Q-iteration after every step. The ascent starts from the environment's reward
as the class sees it (the observed rewards regressed on the class's inputs). The initial and the
final utility are then each scored exactly as the known-utility estimator scores the
environment's reward (beta-conditioned fits, maximised over beta, interval over
episodes and fits) on evaluation episodes not used in the ascent, and the better is reported. Any member
of the class gives a valid value, so the result is a lower bound on the class's MEG (up to the
estimation error its interval and diagnostics describe; choosing the better of two adds a small
upward selection bias); the class's supremum is not certified.

``utility="observation"``, for environments whose observations take few distinct values, is the
class of *every* utility of the observation, solved exactly instead: the empirical MDP of the
observations (:mod:`imitation_meg.approx.empirical`, each distinct observation a state, each
observation a terminated episode ends on an absorbing state of its own) and its exact
unknown-utility MEG (:func:`imitation_meg.meg_unknown` with the observations' one-hot
features), bias-corrected and given an interval by the same bootstrap over episodes as the
known-utility estimate. That is an estimate of the class's supremum, not a lower bound.

The class and its ascent are in :mod:`~imitation_meg.approx.utility_ascent`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg.approx.core import (
    Run,
    collect_data,
    estimate,
    evaluation_episodes,
    model_data,
    policy_behaviour,
)
from imitation_meg.approx.empirical import (
    NotTabular,
    canonical_observations,
    data_budget,
    empirical_fit,
)
from imitation_meg.approx.evaluate import ApproxMEGResult
from imitation_meg.approx.options import ApproxOptions
from imitation_meg.approx.policy import as_policy_fn
from imitation_meg.approx.rollouts import EnvSource, Rollouts, collect
from imitation_meg.approx.soft_q import _check_int, check_positive
from imitation_meg.approx.utility_ascent import _ascend, _features_fn, _initial_utility
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.type_aliases import EnvLike, GymEnv, PolicySource

__all__ = ["OBSERVATION_METHODS", "ApproxUnknownResult", "ObservationUtility", "meg_approx_unknown"]

UTILITY_CLASSES = ("mlp", "agent", "observation")
#: The methods ``utility="observation"`` accepts (both mean the empirical MDP: nothing to hand
#: over to).
OBSERVATION_METHODS = ("empirical", "auto")
#: Adam's learning rate of the utility's ascent by default.
UTILITY_LR = 0.05
#: Data sets the bound stores beside the final fits' (the ascent's off-policy data and the
#: scored policy's episodes), for the default ``n_data_steps``'s memory cap.
_ASCENT_COPIES = 2.0


@dataclasses.dataclass(frozen=True)
class ApproxUnknownResult:
    """Unknown-utility MEG over a utility class: a lower bound (``"mlp"``, ``"agent"``) or the
    estimate of an empirical MDP (``"observation"``).

    Attributes:
        result: the known-utility estimate for the fitted utility (:class:`ApproxMEGResult`:
            ``meg``, ``low``, ``high``, ``beta``, diagnostics); for ``"observation"`` the
            empirical MDP's unknown-utility estimate (``beta`` is then the fitted utility's
            spread, ``+inf`` at a limit, as :func:`imitation_meg.meg_unknown` reports it).
        utility_class: ``"mlp"`` (network on observations), ``"agent"`` (linear in the agent's
            hidden features) or ``"observation"`` (every utility of the observation).
        utility: the fitted utility module (on standardised inputs; for ``"observation"`` a
            lookup of the empirical MDP's observations, NaN for an observation it never saw:
            ``meg_unknown``'s ``extra["theta"]`` of the last empirical MDP).
        trace: per ascent step, the sampled objective gap ``E_pi[sum U] - E_{pi_theta}[sum U]``
            (it tends to 0 at a stationary point, Theorem 5.1's matching of expected utility).
        n_env_steps: environment steps used in all.
        candidates: the estimate of each scored utility: ``"initial"`` (the environment's
            reward regressed on the class's inputs) and ``"ascended"`` (after the ascent); the
            better is reported.
    """

    result: ApproxMEGResult
    utility_class: str
    utility: nn.Module = dataclasses.field(repr=False)
    trace: list[float] = dataclasses.field(default_factory=list)
    n_env_steps: int = 0
    candidates: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def meg(self) -> float:
        return self.result.meg

    @property
    def low(self) -> float:
        return self.result.low

    @property
    def high(self) -> float:
        return self.result.high

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.result.to_dict(),
            "utility_class": self.utility_class,
            "trace": list(self.trace),
            "n_env_steps_total": self.n_env_steps,
            "lower_bound": self.utility_class != "observation",
            "candidates": dict(self.candidates),
        }


class ObservationUtility(nn.Module):
    """``U(x)``: a utility given per distinct flat observation (``observations (S, d)``,
    ``values (S,)``); NaN for an observation not among them (compared as float32, as the
    empirical MDP tells observations apart)."""

    def __init__(self, observations: np.ndarray, values: np.ndarray) -> None:
        super().__init__()
        obs = canonical_observations(observations)
        self.register_buffer("observations", th.as_tensor(obs))
        self.register_buffer("values", th.as_tensor(np.asarray(values, dtype=np.float64)))
        self._index = {row.tobytes(): i for i, row in enumerate(obs)}

    def forward(self, x: th.Tensor) -> th.Tensor:
        rows = canonical_observations(x.detach().cpu().numpy())
        idx = [self._index.get(r.tobytes(), -1) for r in rows]
        vals = self.get_buffer("values")
        out = th.full((len(idx),), math.nan, dtype=vals.dtype)
        found = [i for i, k in enumerate(idx) if k >= 0]
        out[found] = vals[[idx[i] for i in found]]
        return out


@_threads.entry_point
def meg_approx_unknown(
    policy: PolicySource,
    env: EnvLike | Callable[[], GymEnv],
    *,
    utility: str = "mlp",
    horizon: int | None = None,
    algo: str | None = None,
    epsilon: float | None = None,
    ascent_steps: int = 30,
    episodes_per_step: int = 40,
    utility_lr: float = UTILITY_LR,
    utility_hidden: int = 64,
    options: ApproxOptions | None = None,
    **settings: Any,
) -> ApproxUnknownResult:
    """Unknown-utility MEG of ``policy`` in ``env`` (see the module docstring): a lower bound over
    a fitted class, or the empirical MDP's estimate over every utility of the observation.

    Args:
        policy, env, horizon, algo, epsilon: as in :func:`~imitation_meg.approx.meg_approx`.
        utility: ``"mlp"`` (a one-hidden-layer network on the flat observation), ``"agent"``
            (linear in the scored SB3 agent's last hidden layer), or ``"observation"`` (every
            utility of the observation, through the empirical MDP: for observations that take
            few values; needs ``method="empirical"`` or ``"auto"``, and ignores the settings
            of the ascent).
        ascent_steps: gradient steps on the utility.
        episodes_per_step: episodes of ``pi_theta`` sampled per step.
        utility_lr: Adam's learning rate for the utility (``lr``, as in ``meg_approx``, is the
            soft Q-fits').
        utility_hidden: hidden units of the ``"mlp"`` utility.
        options: the estimator's settings, as in ``meg_approx`` (one
            :class:`~imitation_meg.approx.options.ApproxOptions`, the same defaults): they
            govern the ascent's soft Q-fits (``hidden``, ``iterations``,
            ``steps_per_iteration``, ``lr``, ``average``, ``last_steps``) and the two final
            known-utility estimates. ``n_data_steps`` off-policy steps feed the fits; as many
            again of the scored policy give the ascent's ``E_pi`` term, so the default
            ``n_data_steps``'s memory cap (``data_memory_gib``) counts two more data sets than
            ``meg_approx``'s; the episodes of the last three ascent steps
            (``3 x episodes_per_step x H`` steps at most) come on top.
        **settings: fields of ``ApproxOptions`` replacing those of ``options``.

    Returns:
        :class:`ApproxUnknownResult` (``.meg``, ``.low``, ``.high``).

    Raises:
        ValueError: an unknown ``utility`` class, ``"agent"`` for a policy without hidden layer,
            ``"observation"`` with another method or where the empirical MDP cannot be built,
            bad settings.

    Warns:
        ApproxMEGWarning: as :func:`~imitation_meg.approx.meg_approx`, for the final fits.
    """
    t_start = time.perf_counter()
    _check_ascent_settings(utility, ascent_steps, episodes_per_step, utility_hidden, utility_lr)
    opts = ApproxOptions.of(options, **settings)
    if utility == "observation":
        opts = _observation_options(opts)
        return _observation_class(policy, env, horizon, algo, epsilon, opts, t_start)
    _check_fitted_method(opts.method, utility)
    source = _discrete_source(env, horizon)
    pol = as_policy_fn(policy, n_actions=source.n_actions, algo=algo, epsilon=epsilon, env=env)
    if utility == "agent" and not pol.has_features:
        raise ValueError(
            f"utility='agent' needs the agent's hidden layer; {pol.name} exposes none (pass an "
            "SB3 model, or use utility='mlp')."
        )
    opts = opts.resolved(source, extra_copies=_ASCENT_COPIES)
    assert opts.iterations is not None and opts.n_data_steps is not None
    run = Run(
        source,
        pol,
        opts,
        bar_total=ascent_steps + 2 * opts.n_models * opts.iterations * (1 + opts.refine),
        desc=f"MEG lower bound ({utility} utility)",
        n_streams=2,
        t_start=t_start,
    )
    s_data, s_ascent = run.streams
    g = np.random.default_rng(s_data)
    data = collect_data(source, pol, opts.n_data_steps, g, n_envs=opts.n_envs, on_step=run.count)
    own_eps = collect(
        source,
        policy_behaviour(pol),
        None,
        g,
        min_steps=opts.n_data_steps,
        n_envs=opts.n_envs,
        on_step=run.count,
    )
    ev = evaluation_episodes(run)

    # the utility class, started from the environment's reward as the class sees it (a
    # regression of the observed rewards on the class's inputs): the ascent then starts from
    # (about) the known utility
    inputs_of = _features_fn(source, pol) if utility == "agent" else _identity
    u_seed = int(s_ascent.generate_state(1)[0])
    u_net = _initial_utility(data, inputs_of, utility_hidden if utility == "mlp" else 0, u_seed)
    initial = copy.deepcopy(u_net)
    trace, buffer = _ascend(
        run,
        u_net,
        inputs_of,
        data,
        own_eps,
        ascent_steps=ascent_steps,
        episodes_per_step=episodes_per_step,
        lr=float(utility_lr),
        rng=np.random.default_rng(s_ascent),
        seed=u_seed,
    )
    scored = _scored_utilities(run, ev, buffer, {"initial": initial, "ascended": u_net}, inputs_of)
    run.bar.close()
    best = max(scored, key=lambda k: scored[k].meg)
    res = dataclasses.replace(scored[best], n_env_steps=run.n_env_steps)
    candidates = {k: v.meg for k, v in scored.items()}
    return ApproxUnknownResult(
        result=res,
        utility_class=utility,
        utility=u_net if best == "ascended" else initial,
        trace=trace,
        n_env_steps=run.n_env_steps,
        candidates=candidates,
    )


def _identity(x: th.Tensor) -> th.Tensor:
    """The flat observations themselves as the utility's inputs."""
    return x


def _check_ascent_settings(
    utility: Any, ascent_steps: Any, episodes_per_step: Any, utility_hidden: Any, utility_lr: Any
) -> None:
    """Raise ``ValueError`` naming the first bad setting of the bound's class and ascent."""
    if utility not in UTILITY_CLASSES:
        raise ValueError(f"utility must be one of {UTILITY_CLASSES}, got {utility!r}.")
    _check_int("ascent_steps", ascent_steps, 1)
    _check_int("episodes_per_step", episodes_per_step, 1)
    _check_int("utility_hidden", utility_hidden, 1)
    check_positive("utility_lr", utility_lr)


def _observation_options(opts: ApproxOptions) -> ApproxOptions:
    """The settings of ``utility="observation"``: the empirical MDP by default.

    Raises:
        ValueError: another method.
    """
    if opts.method is None:  # the default: the one method this class has
        opts = dataclasses.replace(opts, method="empirical")
    if opts.method not in OBSERVATION_METHODS:
        raise ValueError(
            f"utility='observation' (every utility of the observation) is solved through "
            f"the empirical MDP, not with method={opts.method!r}: pass method='empirical' "
            "(or 'auto'), or use utility='mlp' for a lower bound from soft Q-fits."
        )
    return opts


def _check_fitted_method(method: str | None, utility: str) -> None:
    """Raise ``ValueError`` for a method the fitted classes (``"mlp"``, ``"agent"``) lack."""
    if method in ("empirical", "linear", "paths"):
        raise ValueError(
            f"method={method!r} is not available for the unknown-utility bound of "
            f"utility={utility!r}: its class is a function of the observation fitted by soft "
            "Q-fits; use method='auto' or 'soft_q', or utility='observation' with "
            "method='empirical' for every utility of the observation."
        )


def _scored_utilities(
    run: Run,
    ev: Rollouts,
    buffer: Iterable[Rollouts],
    nets: dict[str, nn.Module],
    inputs_of: Callable[[th.Tensor], th.Tensor],
) -> dict[str, ApproxMEGResult]:
    """Each utility of ``nets`` (frozen in place) scored as a known utility on the evaluation
    episodes ``ev`` with the same off-policy data (the same seeds would draw it again) and the
    last ascent steps' sampled episodes (``buffer``)."""
    base = model_data(run)
    extra = Rollouts.concat(list(buffer))
    scored: dict[str, ApproxMEGResult] = {}
    for name, net in nets.items():
        for p in net.parameters():
            p.requires_grad_(False)

        def frozen(x: th.Tensor, net: nn.Module = net) -> th.Tensor:
            with th.no_grad():
                out: th.Tensor = net(inputs_of(x))
            return out

        scored[name] = estimate(
            run, ev, [Rollouts.concat([d, extra]) for d in base], reward_fn=frozen
        )
    return scored


def _discrete_source(env: Any, horizon: int | None) -> EnvSource:
    """The environment, refused when its actions are a box (no unknown-utility bound there).

    Raises:
        ValueError: a ``Box`` action space.
    """
    source = EnvSource(env, horizon=horizon)
    if source.actions.is_box:
        raise ValueError(
            f"meg_approx_unknown scores Discrete actions; {source.name} acts in a "
            f"{source.actions.describe}. Score its known utility with meg_approx."
        )
    return source


def _observation_class(
    policy: PolicySource,
    env: EnvLike | Callable[[], GymEnv],
    horizon: int | None,
    algo: str | None,
    epsilon: float | None,
    opts: ApproxOptions,
    t_start: float,
) -> ApproxUnknownResult:
    """``utility="observation"``: the empirical MDP's exact unknown-utility MEG (module
    docstring), on the data, rounds and seeds of ``meg_approx(..., method="empirical")``."""
    source = _discrete_source(env, horizon)
    pol = as_policy_fn(policy, n_actions=source.n_actions, algo=algo, epsilon=epsilon, env=env)
    opts = opts.resolved(source)
    assert opts.n_data_steps is not None
    run = Run(
        source,
        pol,
        opts,
        bar_total=data_budget(opts.n_models, opts.n_data_steps),
        desc="MEG (empirical MDP, every utility of the observation)",
        bar_unit="step",
        t_start=t_start,
    )
    try:
        fit = empirical_fit(run, unknown=True)
    except NotTabular as e:
        raise ValueError(
            f"utility='observation' needs an empirical MDP of the observations, but {e}. Use "
            "utility='mlp' (a lower bound from soft Q-fits) for this environment."
        ) from None
    finally:
        run.bar.close()
    theta = np.asarray(fit.plain.extra["theta"], dtype=np.float64)
    return ApproxUnknownResult(
        result=fit.result,
        utility_class="observation",
        utility=ObservationUtility(fit.model.observations, theta),
        n_env_steps=fit.result.n_env_steps,
    )
