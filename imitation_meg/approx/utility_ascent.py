"""The ascent of the unknown-utility lower bound: the utility class (an MLP on the flat
observation, or a linear map of the scored agent's hidden features), its start from the
environment's reward as the class sees it, and its gradient ascent on the causal log-likelihood
with soft Q-fits refitted after every step (:mod:`imitation_meg.approx.unknown`).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg.approx.core import Run, model_behaviour
from imitation_meg.approx.policy import PolicyFn
from imitation_meg.approx.rollouts import EnvSource, Rollouts, collect
from imitation_meg.approx.soft_q import BetaPrior, SoftQModel, fit_soft_q, standardisation

#: Ascent steps whose sampled episodes are kept as extra fitting data.
_KEEP_SAMPLED = 3


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


def _initial_utility(
    data: Rollouts, inputs_of: Callable[[th.Tensor], th.Tensor], hidden: int, seed: int
) -> _Utility:
    """The utility the ascent starts from: the class (``hidden`` units, 0 for a linear map of
    the inputs ``inputs_of(x)``) standardised on ``data``'s observations and regressed on its
    rewards (about the known utility)."""
    z_data = inputs_of(th.as_tensor(np.concatenate([data.x, data.x_next])))
    mean, std = standardisation(z_data.numpy())
    del z_data
    u_net = _Utility(mean, std, hidden, seed)
    _regress(u_net, inputs_of(th.as_tensor(data.x)), th.as_tensor(data.r, dtype=th.float32))
    return u_net


def _ascend(
    run: Run,
    u_net: nn.Module,
    inputs_of: Callable[[th.Tensor], th.Tensor],
    data: Rollouts,
    own_eps: Rollouts,
    *,
    ascent_steps: int,
    episodes_per_step: int,
    lr: float,
    rng: np.random.Generator,
    seed: int,
) -> tuple[list[float], collections.deque[Rollouts]]:
    """Gradient ascent on the utility ``u_net`` (in place): soft Q at beta = 1 for the current
    utility, refitted (warm) after every step; returns the objective gap per step and the
    last steps' sampled episodes."""
    source, opts = run.source, run.opts
    assert opts.iterations is not None and opts.steps_per_iteration is not None
    H, n_iter = source.horizon, opts.iterations

    def reward_fn(x: th.Tensor) -> th.Tensor:
        out: th.Tensor = u_net(inputs_of(x))
        return out

    q_scale = float(H)
    obs_mean, obs_std = standardisation(np.concatenate([data.x, data.x_next]))
    model = SoftQModel(
        data.x.shape[1],
        source.n_actions,
        H,
        q_scale=q_scale,
        obs_mean=obs_mean,
        obs_std=obs_std,
        hidden=opts.hidden,
        seed=seed + 1,
        reward_fn=lambda x: reward_fn(x).detach(),
        last_steps=opts.last_steps,
    )
    fixed = BetaPrior(
        log_lo=math.log10(q_scale),
        log_hi=math.log10(q_scale),
        p_zero=0.0,
        p_pos_inf=0.0,
        p_neg_inf=0.0,
        p_negative=0.0,
    )
    opt = th.optim.Adam(u_net.parameters(), lr=lr)
    x_pi = th.as_tensor(own_eps.x)
    # only the last few ascent steps' episodes are fitted on, so only they are kept
    buffer: collections.deque[Rollouts] = collections.deque(maxlen=_KEEP_SAMPLED)
    trace: list[float] = []
    for k in range(ascent_steps):
        fit_soft_q(
            model,
            Rollouts.concat([data, *buffer]),
            iterations=n_iter if k == 0 else max(5, n_iter // 6),
            steps_per_iteration=opts.steps_per_iteration,
            lr=opts.lr,
            average=opts.average,
            prior=fixed,
            seed=seed + 10 + k,
            device=opts.device,
        )
        sampled = collect(
            source,
            model_behaviour(model, q_scale),
            episodes_per_step,
            rng,
            n_envs=opts.n_envs,
            on_step=run.count,
        )
        buffer.append(sampled)
        u_pi = reward_fn(x_pi).sum() / own_eps.n_episodes
        u_model = reward_fn(th.as_tensor(sampled.x)).sum() / sampled.n_episodes
        gap = u_pi - u_model
        opt.zero_grad()
        (-gap).backward()
        opt.step()
        trace.append(float(gap.detach()))
        run.bar.update(1)
    return trace, buffer


def _regress(net: nn.Module, z: th.Tensor, r: th.Tensor, steps: int = 300) -> None:
    """Fit ``net(z) ~ r`` by Adam (full batch): the utility class's view of the reward."""
    opt = th.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = th.mean((net(z) - r) ** 2)
        loss.backward()
        opt.step()
