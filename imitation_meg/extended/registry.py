"""Agent factories by name, for configs: ``"Q"``, ``"Q-lowest"`` (the Q-learner with the original
library's lowest-index tie-breaking), ``"Random"``, ``"Constant0"``, ``"Constant1"``,
``"DQN"``, ``"A2C"``, ``"PPO"``, ``"PPO-upstream"`` (PPO fed the way the paper's library fed it,
``upstream_rollouts=True``: for comparison with the paper only) and ``"RC(<name>)"`` for the
reality check of any of them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from imitation_meg.extended import agents
from imitation_meg.extended.transforms import reality_check

__all__ = ["AGENT_NAMES", "agent_factory"]

AGENT_NAMES = (
    "Q",
    "Q-lowest",
    "Random",
    "Constant0",
    "Constant1",
    "DQN",
    "A2C",
    "PPO",
    "PPO-upstream",
)


def agent_factory(name: str, kwargs: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """The agent factory called ``name`` with constructor keywords ``kwargs``.

    Args:
        name: one of :data:`AGENT_NAMES`, or ``"RC(<name>)"``.
        kwargs: keyword arguments bound into the factory (e.g. ``{"n_steps": 256}`` for PPO).

    Raises:
        ValueError: for an unknown name.
    """
    kwargs = dict(kwargs or {})
    if name.startswith("RC(") and name.endswith(")"):
        return reality_check(agent_factory(name[3:-1], kwargs))
    if name == "Q":
        return functools.partial(agents.QLearner, **kwargs)
    if name == "Q-lowest":
        return functools.partial(agents.QLearner, **{"tie_break": "lowest", **kwargs})
    if name == "Random":
        return functools.partial(agents.Random, **kwargs)
    if name in ("Constant0", "Constant1"):
        return functools.partial(agents.Constant, action=int(name[-1]), **kwargs)
    if name in ("DQN", "A2C", "PPO"):
        from imitation_meg.extended import sb3_agents

        return functools.partial(getattr(sb3_agents, name), **kwargs)
    if name == "PPO-upstream":
        from imitation_meg.extended import sb3_agents

        return functools.partial(sb3_agents.PPO, upstream_rollouts=True, **kwargs)
    raise ValueError(f"unknown agent {name!r}; choose one of {AGENT_NAMES} or 'RC(<name>)'.")
