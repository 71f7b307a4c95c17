"""Extended environments (Alexander et al. 2022): environments that simulate the agent.

Public API::

    from imitation_meg import extended
    from imitation_meg.extended import agents, envs
    push = functools.partial(agents.Constant, action=1)
    res = extended.run(envs.TemptingButton, push, 1000, seed=0)
    res.total_reward
    rc = extended.reality_check(agents.QLearner)       # an agent factory
    extended.self_reflection_measure(agents.Random, 100)  # exactly 0.0

SB3 agents (``DQN``, ``A2C``, ``PPO``) live in :mod:`imitation_meg.extended.sb3_agents`, which
imports stable_baselines3 lazily; the gymnasium view and the paper's gym combination (Def. 12) in
:mod:`imitation_meg.extended.gym_view`.

May import: nothing of the package (the environments and agents stand alone; MEG reads
them through :mod:`imitation_meg.extended.meg_frames`' plain tables).
"""

from imitation_meg.extended import agents, envs
from imitation_meg.extended.core import Agent, ExtendedEnv, make_agent
from imitation_meg.extended.measure import (
    battery,
    self_reflection_benchmark,
    self_reflection_measure,
)
from imitation_meg.extended.runner import RunResult, run
from imitation_meg.extended.transforms import RealityCheck, minus_rewards, reality_check

__all__ = [
    "Agent",
    "ExtendedEnv",
    "RealityCheck",
    "RunResult",
    "agents",
    "battery",
    "envs",
    "make_agent",
    "minus_rewards",
    "reality_check",
    "run",
    "self_reflection_benchmark",
    "self_reflection_measure",
]
