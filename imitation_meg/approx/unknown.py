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
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg import _threads
from imitation_meg.approx.evaluate import ApproxMEGResult, summarise
from imitation_meg.approx.known import (
    _Bar,
    _check_data,
    _data_steps,
    _fit_ensemble,
    _FitSettings,
    _model_behaviour,
    _policy_behaviour,
    collect_data,
    default_schedule,
)
from imitation_meg.approx.policy import PolicyFn, as_policy_fn
from imitation_meg.approx.rollouts import EnvSource, Rollouts, collect
from imitation_meg.approx.soft_q import (
    BetaPrior,
    SoftQModel,
    _check_int,
    fit_soft_q,
    standardisation,
)
from imitation_meg.type_aliases import EnvLike, GymEnv, PolicySource

__all__ = ["ApproxUnknownResult", "meg_approx_unknown"]

UTILITY_CLASSES = ("mlp", "agent")
#: Off-policy environment steps for the soft Q-fits by default (lowered for wide observations).
UNKNOWN_DATA_STEPS = 20_000
#: Adam steps per fitting stage of the soft Q-fits by default: the budget this bound was
#: developed and tested with (``meg_approx`` doubled its own, STEP_BUDGET, after validation).
UNKNOWN_STEP_BUDGET = 24_000
#: Ascent steps whose sampled episodes are kept as extra fitting data.
_KEEP_SAMPLED = 3


@dataclasses.dataclass(frozen=True)
class ApproxUnknownResult:
    """A lower bound on unknown-utility MEG over a utility class.

    Attributes:
        result: the known-utility estimate for the fitted utility (:class:`ApproxMEGResult`:
            ``meg``, ``low``, ``high``, ``beta``, diagnostics).
        utility_class: ``"mlp"`` (network on observations) or ``"agent"`` (linear in the agent's
            hidden features).
        utility: the fitted utility module (on standardised inputs).
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
            "lower_bound": True,
            "candidates": dict(self.candidates),
        }


class _Utility(nn.Module):
    """``U(x)``: an MLP on standardised inputs, or a linear map (``hidden=0``)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, hidden: int, seed: int) -> None:
        super().__init__()
        self.register_buffer("mean", th.as_tensor(mean, dtype=th.float32))
        self.register_buffer("std", th.as_tensor(std, dtype=th.float32))
        d = int(mean.shape[0])
        with th.random.fork_rng(devices=[]):
            th.manual_seed(seed)
            if hidden > 0:
                self.net: nn.Module = nn.Sequential(
                    nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, 1)
                )
            else:
                self.net = nn.Linear(d, 1)
            for p in self.net.parameters():
                p.data.mul_(0.1)

    def forward(self, z: th.Tensor) -> th.Tensor:
        mean, std = self.get_buffer("mean"), self.get_buffer("std")
        return self.net((z - mean) / std).squeeze(-1)


def _features_fn(source: EnvSource, pol: PolicyFn) -> Any:
    """Agent hidden features of flat observations (raw observations rebuilt from the flat form)."""
    import gymnasium as gym

    space = source.observation_space

    def fn(x: th.Tensor) -> th.Tensor:
        xs = x.detach().cpu().numpy()
        if isinstance(space, gym.spaces.Box):
            raw: Any = xs.reshape((-1, *space.shape)).astype(space.dtype)
        elif isinstance(space, gym.spaces.Discrete):
            raw = xs.argmax(1) + int(space.start)
        else:
            raw = source.stack([gym.spaces.unflatten(space, row) for row in xs])
        return th.as_tensor(pol.features(raw))

    return fn


@_threads.entry_point
def meg_approx_unknown(
    policy: PolicySource,
    env: EnvLike | Callable[[], GymEnv],
    *,
    utility: str = "mlp",
    horizon: int | None = None,
    algo: str | None = None,
    epsilon: float | None = None,
    n_data_steps: int | None = None,
    n_eval_episodes: int = 200,
    ascent_steps: int = 30,
    episodes_per_step: int = 40,
    lr: float = 0.05,
    utility_hidden: int = 64,
    hidden: tuple[int, ...] = (64, 64),
    iterations: int | None = None,
    steps_per_iteration: int | None = None,
    n_models: int = 2,
    n_boot: int = 500,
    confidence: float = 0.95,
    seed: int = 0,
    n_envs: int = 16,
    progress: bool = False,
    data_memory_gib: float = 4.0,
) -> ApproxUnknownResult:
    """A lower bound on unknown-utility MEG of ``policy`` in ``env`` (see the module docstring).

    Args:
        policy, env, horizon, algo, epsilon: as in :func:`~imitation_meg.approx.meg_approx`.
        utility: ``"mlp"`` (a one-hidden-layer network on the flat observation) or ``"agent"``
            (linear in the scored SB3 agent's last hidden layer).
        n_data_steps: off-policy steps for the soft Q-fits (as in ``meg_approx``); as many
            again of the scored policy give the ascent's ``E_pi`` term. The default stays
            20 000, the setting this bound was developed and tested with; ``meg_approx``'s
            is 180 000 since its validation (pass more for sparse stochastic rewards).
            Lowered with a warning when the stored transitions would take more than
            ``data_memory_gib``; an explicit value is used as given.
        n_eval_episodes: fresh episodes of the scored policy for the final estimate.
        ascent_steps: gradient steps on the utility.
        episodes_per_step: episodes of ``pi_theta`` sampled per step.
        lr: Adam's learning rate for the utility.
        utility_hidden: hidden units of the ``"mlp"`` utility.
        hidden, iterations, steps_per_iteration: the soft Q-networks' settings (by default
            ``H + 20`` iterations and 24 000 Adam steps per fit, ``UNKNOWN_STEP_BUDGET``).
        n_models: soft Q-networks of the final estimate.
        n_boot, confidence, seed, n_envs, progress: as in ``meg_approx``.
        data_memory_gib: memory the default ``n_data_steps`` may fill with stored transitions:
            the ascent's data and the scored policy's episodes (two sets) beside the final
            fits' (``n_models x 4/3`` sets, one refit each), float32 observations and next
            observations, about ``n_data_steps x (2 + 4 n_models / 3) x 8 x obs_dim`` bytes;
            the episodes of the last three ascent steps (``3 x episodes_per_step x H`` steps at
            most) come on top.

    Returns:
        :class:`ApproxUnknownResult` (``.meg``, ``.low``, ``.high``).

    Raises:
        ValueError: an unknown ``utility`` class, ``"agent"`` for a policy without hidden layer,
            bad settings.

    Warns:
        ApproxMEGWarning: the default ``n_data_steps`` lowered to fit ``data_memory_gib``; the
            warnings of :func:`~imitation_meg.approx.meg_approx` for the final fits.
    """
    t_start = time.perf_counter()
    if utility not in UTILITY_CLASSES:
        raise ValueError(f"utility must be one of {UTILITY_CLASSES}, got {utility!r}.")
    _check_data(n_data_steps, data_memory_gib)
    _check_int("n_eval_episodes", n_eval_episodes, 2)
    _check_int("ascent_steps", ascent_steps, 1)
    _check_int("episodes_per_step", episodes_per_step, 1)
    _check_int("n_models", n_models, 1)
    source = EnvSource(env, horizon=horizon)
    pol = as_policy_fn(policy, n_actions=source.n_actions, algo=algo, epsilon=epsilon, env=env)
    if utility == "agent" and not pol.has_features:
        raise ValueError(
            f"utility='agent' needs the agent's hidden layer; {pol.name} exposes none (pass an "
            "SB3 model, or use utility='mlp')."
        )
    H, A = source.horizon, source.n_actions
    n_data_steps = _data_steps(
        source,
        n_data_steps,
        data_memory_gib,
        n_models=n_models,
        refine=1,
        default=UNKNOWN_DATA_STEPS,
        extra_copies=2.0,
    )
    n_iter, steps_per_iteration = default_schedule(
        H, iterations, steps_per_iteration, budget=UNKNOWN_STEP_BUDGET
    )
    ss = np.random.SeedSequence(int(seed))
    s_data, s_eval, s_models, s_boot, s_ascent = ss.spawn(5)
    steps = {"n": 0}

    def count(n: int) -> None:
        steps["n"] += n

    g = np.random.default_rng(s_data)
    data = collect_data(source, pol, n_data_steps, g, n_envs=n_envs, on_step=count)
    own_eps = collect(
        source,
        _policy_behaviour(pol),
        None,
        g,
        min_steps=n_data_steps,
        n_envs=n_envs,
        on_step=count,
    )
    ev = collect(
        source,
        _policy_behaviour(pol),
        n_eval_episodes,
        np.random.default_rng(s_eval),
        scored=pol,
        n_envs=n_envs,
        on_step=count,
    )

    # the utility class
    feats = _features_fn(source, pol) if utility == "agent" else None
    inputs_of = (feats) if feats is not None else (lambda x: x)
    z_data = inputs_of(th.as_tensor(np.concatenate([data.x, data.x_next])))
    mean, std = standardisation(z_data.numpy())
    del z_data
    u_seed = int(s_ascent.generate_state(1)[0])
    u_net = _Utility(mean, std, utility_hidden if utility == "mlp" else 0, u_seed)
    # start from the environment's reward as the class sees it (a regression of the observed
    # rewards on the class's inputs): the ascent then starts from (about) the known utility
    _regress(u_net, inputs_of(th.as_tensor(data.x)), th.as_tensor(data.r, dtype=th.float32))
    initial = copy.deepcopy(u_net)

    def reward_fn(x: th.Tensor) -> th.Tensor:
        return u_net(inputs_of(x))

    # the ascent: soft Q at beta = 1 for the current utility, refitted (warm) after every step
    q_scale = float(H)
    obs_mean, obs_std = standardisation(np.concatenate([data.x, data.x_next]))
    model = SoftQModel(
        data.x.shape[1],
        A,
        H,
        q_scale=q_scale,
        obs_mean=obs_mean,
        obs_std=obs_std,
        hidden=hidden,
        seed=u_seed + 1,
        reward_fn=lambda x: reward_fn(x).detach(),
    )
    fixed = BetaPrior(
        log_lo=math.log10(q_scale),
        log_hi=math.log10(q_scale),
        p_zero=0.0,
        p_pos_inf=0.0,
        p_neg_inf=0.0,
        p_negative=0.0,
    )
    total = ascent_steps + 2 * n_models * n_iter * 2
    bar = _Bar(progress, total=total, desc=f"MEG lower bound ({utility} utility)")
    opt = th.optim.Adam(u_net.parameters(), lr=lr)
    x_pi = th.as_tensor(own_eps.x)
    g_a = np.random.default_rng(s_ascent)
    # only the last few ascent steps' episodes are fitted on, so only they are kept
    buffer: collections.deque[Rollouts] = collections.deque(maxlen=_KEEP_SAMPLED)
    trace: list[float] = []
    for k in range(ascent_steps):
        fit_data = Rollouts.concat([data, *buffer])
        fit_soft_q(
            model,
            fit_data,
            iterations=n_iter if k == 0 else max(5, n_iter // 6),
            steps_per_iteration=steps_per_iteration,
            prior=fixed,
            seed=u_seed + 10 + k,
        )
        sampled = collect(
            source,
            _model_behaviour(model, q_scale),
            episodes_per_step,
            g_a,
            n_envs=n_envs,
            on_step=count,
        )
        buffer.append(sampled)
        u_pi = reward_fn(x_pi).sum() / own_eps.n_episodes
        u_model = reward_fn(th.as_tensor(sampled.x)).sum() / sampled.n_episodes
        gap = u_pi - u_model
        opt.zero_grad()
        (-gap).backward()
        opt.step()
        trace.append(float(gap.detach()))
        bar.update(1)
    del fit_data  # the ascent's last fitting set; the final fits build their own

    # the initial and the final utility, each scored as a known utility on fresh evaluation
    # episodes; the better is reported (both are members of the class)
    fit = _FitSettings(hidden, n_iter, steps_per_iteration, True, n_data_steps, n_envs)
    seeds = [int(v) for v in s_models.generate_state(n_models)]
    scored: dict[str, ApproxMEGResult] = {}
    for name, net in (("initial", initial), ("ascended", u_net)):
        for p in net.parameters():
            p.requires_grad_(False)

        def frozen(x: th.Tensor, net: nn.Module = net) -> th.Tensor:
            with th.no_grad():
                out: th.Tensor = net(inputs_of(x))
            return out

        _, _, ens, betas, mats, stages = _fit_ensemble(
            source,
            pol,
            ev,
            fit,
            seeds,
            bar,
            count,
            reward_fn=frozen,
            extra_data=Rollouts.concat(list(buffer)),
        )
        scored[name] = summarise(
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
    bar.close()
    best = max(scored, key=lambda k: scored[k].meg)
    res = dataclasses.replace(scored[best], n_env_steps=steps["n"])
    candidates = {k: v.meg for k, v in scored.items()}
    return ApproxUnknownResult(
        result=res,
        utility_class=utility,
        utility=u_net if best == "ascended" else initial,
        trace=trace,
        n_env_steps=steps["n"],
        candidates=candidates,
    )


def _regress(net: nn.Module, z: th.Tensor, r: th.Tensor, steps: int = 300) -> None:
    """Fit ``net(z) ~ r`` by Adam (full batch): the utility class's view of the reward."""
    opt = th.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = th.mean((net(z) - r) ** 2)
        loss.backward()
        opt.step()
