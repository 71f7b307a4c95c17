"""The lockstep runner: one true agent against one extended environment for a fixed number
of steps."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg.extended.core import Agent, ExtendedEnv, check_action, make_agent

__all__ = ["RunResult", "run"]


@dataclasses.dataclass
class RunResult:
    """Outcome of :func:`run`.

    Attributes:
        env_name: name of the environment class.
        seed: the run's seed.
        n_steps: number of steps taken.
        rewards: rewards received by the true agent, shape ``(n_steps,)``.
        actions: actions taken, shape ``(n_steps,)``.
        observations: observations seen, length ``n_steps + 1`` (the first is ``reset()``'s).
        env: the environment instance after the run (for environment-specific records).
        agent: the trained true agent.
    """

    env_name: str
    seed: int
    n_steps: int
    rewards: np.ndarray
    actions: np.ndarray
    observations: list[Any]
    env: Any = dataclasses.field(repr=False, default=None)
    agent: Any = dataclasses.field(repr=False, default=None)

    @property
    def total_reward(self) -> float:
        """Sum of the rewards."""
        return float(self.rewards.sum())

    @property
    def mean_reward(self) -> float:
        """Average reward per step.

        Raises:
            ValueError: the run has no steps (its mean is undefined, not 0).
        """
        if len(self.rewards) == 0:
            raise ValueError(
                f"{self.env_name}: a run of 0 steps has no mean reward; run at least one step."
            )
        return float(self.rewards.mean())


def run(
    env_cls: type[ExtendedEnv],
    agent_factory: Callable[..., Agent],
    n_steps: int,
    *,
    seed: int = 0,
    stop: Callable[[ExtendedEnv], bool] | None = None,
) -> RunResult:
    """Run a freshly built agent in ``env_cls`` for ``n_steps`` steps.

    The true agent is built with ``make_agent(agent_factory, n_actions=..., n_obs=...,
    seed=seed)`` (plus ``obs_shape`` for gym combinations); the environment gets the same factory
    and seed, so its sims are identically seeded copies. Each step: ``a = agent.act(o)``,
    ``r, o' = env.step(a)``, ``agent.train(o, a, r, o')``. One ``seed`` reproduces the run exactly.

    Args:
        env_cls: an :class:`ExtendedEnv` subclass (e.g. ``envs.TemptingButton``).
        agent_factory: callable returning an agent (see :func:`make_agent`).
        n_steps: number of steps (>= 1).
        seed: seed of the run (agents and environment randomness).
        stop: optional predicate on the environment, checked after each step; the run ends
            early when it returns True (used to run a number of gym episodes).

    Returns:
        A :class:`RunResult`.

    Raises:
        TypeError: ``env_cls`` is not an ExtendedEnv subclass, or bad ``n_steps``/``seed`` types.
        ValueError: ``n_steps < 1`` or an agent action outside the action space.
    """
    if not (isinstance(env_cls, type) and issubclass(env_cls, ExtendedEnv)):
        raise TypeError(
            f"env_cls must be an ExtendedEnv subclass such as envs.TemptingButton, got {env_cls!r}."
        )
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)):
        raise TypeError(f"n_steps must be an int, got {n_steps!r}.")
    if n_steps < 1:
        raise ValueError(
            f"n_steps must be >= 1, got {n_steps}: a run of no steps has no rewards to average."
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}.")
    env = env_cls(agent_factory, seed=int(seed))
    agent = make_agent(agent_factory, **env.metadata())
    obs = env.reset()
    observations = [obs]
    rewards: list[float] = []
    actions: list[int] = []
    who = f"agent from {getattr(agent_factory, '__name__', agent_factory)!r}"
    for _ in range(int(n_steps)):
        action = check_action(agent.act(obs), env.n_actions, who)
        reward, next_obs = env.step(action)
        agent.train(obs, action, reward, next_obs)
        rewards.append(reward)
        actions.append(action)
        observations.append(next_obs)
        obs = next_obs
        if stop is not None and stop(env):
            break
    return RunResult(
        env_name=env_cls.__name__,
        seed=int(seed),
        n_steps=len(rewards),
        rewards=np.asarray(rewards, dtype=np.float64),
        actions=np.asarray(actions, dtype=np.int64),
        observations=observations,
        env=env,
        agent=agent,
    )
