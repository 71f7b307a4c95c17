"""Transformations of environments and agents: ``minus_rewards`` and the Reality Check.

* :func:`minus_rewards` (environment -> environment): the true agent receives ``-r``; the
  environment's sims are still trained with the un-negated rewards the environment computes.
* :func:`reality_check` (agent factory -> agent factory), paper Definition 8 / Theorem 9:
  RC(pi) acts as pi while the training history is consistent with its own actions; on the first
  transition whose action differs from what it would have done, it freezes and plays pi's *first*
  action, ``pi(<x_1>)``, forever, ignoring further training. Attributes of the wrapped agent
  (e.g. ``learning_rate``) and factory keywords pass through.
"""

from __future__ import annotations

import functools
from typing import Any

from imitation_meg.extended.core import Agent, AgentFactory, ExtendedEnv, make_agent

__all__ = ["RealityCheck", "minus_rewards", "reality_check"]


@functools.cache
def minus_rewards(env_cls: type[ExtendedEnv]) -> type[ExtendedEnv]:
    """Return the environment class equal to ``env_cls`` with the agent's rewards negated.

    The same class object is returned for the same input (cached), named
    ``minus_rewards(<name>)``.

    Raises:
        TypeError: if ``env_cls`` is not an :class:`ExtendedEnv` subclass.
    """
    if not (isinstance(env_cls, type) and issubclass(env_cls, ExtendedEnv)):
        raise TypeError(
            "minus_rewards needs an ExtendedEnv subclass (e.g. envs.TemptingButton), "
            f"got {env_cls!r}."
        )

    class MinusRewards(ExtendedEnv):
        __doc__ = f"``{env_cls.__name__}`` with the rewards the true agent receives negated."
        n_actions = env_cls.n_actions
        n_obs = env_cls.n_obs
        slow = env_cls.slow
        underlying_cls = env_cls

        def _setup(self) -> None:
            self.underlying = env_cls(
                self.agent_factory, seed=self.seed, agent_maker=self._agent_maker
            )

        def reset(self) -> Any:
            return self.underlying.reset()

        def step(self, action: int) -> tuple[float, Any]:
            reward, obs = self.underlying.step(action)
            return -reward, obs

    MinusRewards.__name__ = MinusRewards.__qualname__ = f"minus_rewards({env_cls.__name__})"
    return MinusRewards


class RealityCheck:
    """The reality check of an agent (paper Def. 8); built by :func:`reality_check`.

    Attributes of pi pass through (e.g. ``learning_rate``). The original library's wrapper hides
    them, so there IncentivizeLearningRate finds no learning rate and gives RC(Q) -1 every step
    (-500 in 500 steps, seed 0), where RC(Q) scores +500 here. Its first action is also different:
    the original keeps the first *non-zero* action (``first_action or action``), we keep pi's
    action on the first observation, as the paper defines.

    Args:
        inner: the wrapped agent pi.
    """

    def __init__(self, inner: Agent) -> None:
        self.inner = inner
        self.frozen = False
        self.first_action: int | None = None

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found normally: pass through (e.g. learning_rate).
        if name in ("inner", "frozen", "first_action"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def act(self, obs: Any) -> int:
        """pi's action while the history is possible for pi, else pi's first action."""
        if self.frozen:
            assert self.first_action is not None
            return self.first_action
        return self.inner.act(obs)

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Train pi if ``action`` is what this agent would play on ``o_prev``; else freeze."""
        if self.frozen:
            return
        expected = self.inner.act(o_prev)
        if self.first_action is None:
            self.first_action = expected  # pi(<x_1>): pi untrained on the first observation
        if action != expected:
            self.frozen = True
            return
        self.inner.train(o_prev, action, reward, o_next)


def reality_check(agent_factory: AgentFactory) -> AgentFactory:
    """Return the agent factory of the reality check of ``agent_factory``'s agents.

    The returned factory accepts any keywords (metadata such as ``n_actions``, ``seed`` and
    overrides such as ``learning_rate``) and forwards those the inner factory accepts.

    Raises:
        TypeError: if ``agent_factory`` is not callable.
    """
    if not callable(agent_factory):
        raise TypeError(
            "reality_check needs an agent factory (a callable returning an agent), "
            f"got {agent_factory!r}."
        )

    def factory(**meta: Any) -> RealityCheck:
        return RealityCheck(make_agent(agent_factory, **meta))

    name = getattr(agent_factory, "__name__", None) or getattr(
        getattr(agent_factory, "func", None), "__name__", type(agent_factory).__name__
    )
    factory.__name__ = factory.__qualname__ = f"reality_check({name})"
    factory.inner_factory = agent_factory  # type: ignore[attr-defined]
    return factory
