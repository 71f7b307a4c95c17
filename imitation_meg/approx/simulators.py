"""Simulators of deterministic environments on arrays of states, for the paths method.

:mod:`imitation_meg.approx.paths` follows many random action sequences from each start in
lockstep; it needs the environment's dynamics as a function of whole arrays of states, and the
certainty that they are deterministic. :func:`dynamics_for` gives that simulator for the
environments the library knows (gymnasium's ``CartPoleEnv``), or says why there is none. The
paths method checks every simulator against the environment itself by replaying episodes there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from imitation_meg.approx.spaces import ActionSpace, DiscreteActions

__all__ = ["CartPoleDynamics", "Dynamics", "dynamics_for", "simulator"]

#: Wrappers between a gymnasium id's environment and its core that change nothing the
#: simulator computes (besides any time limit, whose horizon the simulator applies itself).
_PLAIN_WRAPPERS = ("OrderEnforcing", "PassiveEnvChecker", "EnvChecker")


class Dynamics(Protocol):
    """A deterministic environment on arrays of states.

    Attributes:
        actions: the action space and its uniform reference.
        n_actions: ``|A|`` (0 for a box).
        name: the environment's class name.
    """

    actions: ActionSpace
    n_actions: int
    name: str

    def start(self, env: Any) -> np.ndarray:
        """The state ``(d,)`` of ``env`` right after its ``reset``."""
        ...

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(n, d)`` states and actions (``(n,)`` integers, or ``(n, k)`` points of a box) to
        next states ``(n, d)``, rewards ``(n,)`` and terminations ``(n,)``."""
        ...

    def observe(self, s: np.ndarray) -> np.ndarray:
        """The observations ``(n, ...)`` the agent sees in states ``(n, d)``."""
        ...


class CartPoleDynamics:
    """gymnasium's ``CartPoleEnv`` (any version since 0.26) on arrays of states.

    The constants are read from the environment itself, so a changed pole length or force
    carries over. Its rewards: 1 per step, also on the step that drops the pole, or, with
    ``sutton_barto_reward=True`` (gymnasium >= 1.0), 0 per step and -1 on that step.

    Args:
        env: the unwrapped ``CartPoleEnv``.
    """

    actions = DiscreteActions(2)
    n_actions = 2
    name = "CartPoleEnv"

    def __init__(self, env: Any) -> None:
        self.gravity = float(env.gravity)
        self.masspole = float(env.masspole)
        self.total_mass = float(env.total_mass)
        self.length = float(env.length)
        self.polemass_length = float(env.polemass_length)
        self.force_mag = float(env.force_mag)
        self.tau = float(env.tau)
        self.euler = env.kinematics_integrator == "euler"
        self.theta_limit = float(env.theta_threshold_radians)
        self.x_limit = float(env.x_threshold)
        self.sutton_barto = bool(getattr(env, "_sutton_barto_reward", False))

    def start(self, env: Any) -> np.ndarray:
        return np.array(env.unwrapped.state, dtype=np.float64)

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, x_dot, theta, theta_dot = s.T
        force = np.where(a == 1, self.force_mag, -self.force_mag)
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * theta_dot**2 * sin) / self.total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / self.total_mass)
        )
        x_acc = temp - self.polemass_length * theta_acc * cos / self.total_mass
        if self.euler:
            x, x_dot = x + self.tau * x_dot, x_dot + self.tau * x_acc
            theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc
        else:  # semi-implicit Euler
            x_dot = x_dot + self.tau * x_acc
            x = x + self.tau * x_dot
            theta_dot = theta_dot + self.tau * theta_acc
            theta = theta + self.tau * theta_dot
        nxt = np.stack([x, x_dot, theta, theta_dot], axis=1)
        term = (np.abs(x) > self.x_limit) | (np.abs(theta) > self.theta_limit)
        if self.sutton_barto:
            reward = np.where(term, -1.0, 0.0)
        else:
            reward = np.ones(len(s))
        return nxt, reward, term

    def observe(self, s: np.ndarray) -> np.ndarray:
        return s.astype(np.float32)


#: The simulators, by the class name of the environment's core, with what they need of it.
_SIMULATORS: dict[str, Callable[[Any], Dynamics]] = {"CartPoleEnv": CartPoleDynamics}


def dynamics_for(env: Any) -> tuple[Dynamics | None, str]:
    """The simulator of ``env``, or ``None`` and why there is none.

    Only an environment whose core is exactly a class with a simulator (not a subclass, which
    may change the dynamics) and whose wrappers change neither observations, actions nor
    rewards (a time limit, gymnasium's checks) qualifies.
    """
    core = env.unwrapped
    name = type(core).__name__
    maker = _SIMULATORS.get(name)
    if maker is None or type(core).__module__.split(".")[0] != "gymnasium":
        known = ", ".join(sorted(_SIMULATORS))
        return None, f"{name} has no simulator here (there is one for {known})"
    layer = env
    while layer is not core:
        if not _plain(layer):
            kind = type(layer).__name__
            return None, f"its wrapper {kind} may change what the simulator computes"
        layer = layer.env
    return maker(core), ""


def _plain(wrapper: Any) -> bool:
    """A time limit (RL Zoo's patched one too: the horizon is the simulator's own) or one of
    gymnasium's checks, which change nothing the simulator computes."""
    import gymnasium as gym

    if isinstance(wrapper, gym.wrappers.TimeLimit):
        return True
    return type(wrapper).__name__ in _PLAIN_WRAPPERS


def simulator(source: Any) -> tuple[Dynamics | None, str]:
    """:func:`dynamics_for` a fresh copy of ``source``'s environment (an
    :class:`~imitation_meg.approx.rollouts.EnvSource`)."""
    env = source.make()
    try:
        return dynamics_for(env)
    finally:
        env.close()
