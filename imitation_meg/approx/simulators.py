"""Simulators of deterministic environments on arrays of states, for the paths method.

:mod:`imitation_meg.approx.paths` follows many random action sequences from each start in
lockstep; it needs the environment's dynamics as a function of whole arrays of states, and the
certainty that they are deterministic. :func:`dynamics_for` gives that simulator for the
environments the library knows, gymnasium's classic-control cores, or says why there is none:

- :class:`CartPoleDynamics` (``CartPole-v1``, ``Discrete(2)``),
- :class:`AcrobotDynamics` (``Acrobot-v1``, ``Discrete(3)``; not with torque noise),
- :class:`MountainCarDynamics` (``MountainCar-v0``, ``Discrete(3)``),
- :class:`PendulumDynamics` (``Pendulum-v1``, a ``Box`` of torques),
- :class:`ContinuousMountainCarDynamics` (``MountainCarContinuous-v0``, a ``Box`` of forces),
- gymnasium's MuJoCo tasks (:class:`imitation_meg.approx.mujoco_sim.MujocoDynamics`, the
  physics state copied in and out of one instance of the task),
- Atari games without sticky actions, as the RL Zoo wraps them
  (:class:`imitation_meg.approx.ale.ALEDynamics`).

Each reads its constants from the environment object, so changed physics carry over, and
computes as the environment does: the same operations in the same order, in ``float64`` where
the environment computes in ``float64``, in ``float32`` and rounded to it where the
environment's NumPy does, and ``x ** 2`` as the C library's ``pow``: on gymnasium 0.29 / NumPy 1
and gymnasium 1.x / NumPy 2 they agree with the environment bit for bit.
:func:`check_against` compares a simulator with the environment itself one step at a time, from
given states (a replay teacher-forced so that chaotic dynamics, Acrobot's, do not amplify a
last-bit difference into a disagreement). :func:`simulator` hands the paths method the
simulators of the environments it covers (CartPole), and the paths method also replays whole
episodes in the environment.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from imitation_meg.approx.spaces import ActionSpace, BoxActions, DiscreteActions

__all__ = [
    "AcrobotDynamics",
    "CartPoleDynamics",
    "ContinuousMountainCarDynamics",
    "Dynamics",
    "MountainCarDynamics",
    "PendulumDynamics",
    "check_against",
    "dynamics_for",
    "simulator",
]

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

    n_actions: int
    name: str

    @property
    def actions(self) -> ActionSpace:
        """The action space (read-only here, so that a simulator may hold a narrower kind)."""
        ...

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


# ---------------------------------------------------------------- the environments' number types
#: Whether a Python number beside a NumPy ``float32`` scalar takes the ``float32``'s type (NumPy
#: 2's promotion, NEP 50); NumPy 1 computes such a sum, product or comparison in ``float64``.
_WEAK = type(np.float32(1.0) * 1.0) is np.float32
#: The type in which an environment holds a value: a Python float, a NumPy ``float64`` or a NumPy
#: ``float32`` scalar (codes, one per state where the type depends on the state).
_PY, _F64, _F32 = 0, 1, 2
#: How near halfway between two neighbours (in units of their gap) a square lies that
#: :func:`_square` computes with the scalar operation: glibc's ``pow`` is documented to err by
#: at most 0.52 of the gap (so misrounds within 0.02 of halfway; seen within 0.006).
_NEAR_TIE = 1.0 / 32.0


def _f32(x: Any) -> np.ndarray:
    """``x`` rounded to ``float32``, held in ``float64``."""
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def _kind(kx: Any, ky: Any) -> np.ndarray:
    """The type that a binary operation on scalars of kinds ``kx`` and ``ky`` gives."""
    kx, ky = np.asarray(kx), np.asarray(ky)
    both = (kx == _F32) & (ky == _F32)
    weak = ((kx == _F32) & (ky == _PY)) | ((kx == _PY) & (ky == _F32))
    return np.where(both | (weak & _WEAK), _F32, np.where((kx == _PY) & (ky == _PY), _PY, _F64))


def _op(f: Callable[..., Any], x: Any, kx: Any, y: Any, ky: Any) -> tuple[np.ndarray, np.ndarray]:
    """``f(x, y)`` as the environment's scalars of kinds ``kx``, ``ky`` compute it: in ``float32``
    where both are ``float32`` (or NumPy 2 takes a Python number for a ``float32``), else in
    ``float64``. Returns the values (booleans for a comparison) and their kinds."""
    k = _kind(kx, ky)
    out = f(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    in32 = k == _F32
    if in32.any():  # a float32 operation: exact in float64, then rounded once
        low = f(_f32(x), _f32(y))
        out = np.where(in32, low if low.dtype == bool else _f32(low), out)
    return out, k


def _square(x: np.ndarray, single: bool = False) -> np.ndarray:
    """``x ** 2`` as the environments' scalars compute it: the C library's ``pow`` for a
    ``float64`` (or ``powf`` for a ``float32``, ``single``), which rounds a square that lies within
    a hair of halfway between two neighbours the other way in about 1 case in 1 000 (``x * x``
    is correctly rounded). The exact error of ``x * x`` (Dekker's product) finds those near-ties,
    which the scalar operation computes again."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):  # an overflow is recomputed below
        if single:  # x is a float32: its square is exact in float64
            exact = x * x
            y = _f32(exact)
            err = exact - y
            gap = np.spacing(y.astype(np.float32)).astype(np.float64)
        else:
            y = x * x
            c = 134217729.0 * x  # 2**27 + 1: x split exactly into hi + lo
            hi = c - (c - x)
            lo = x - hi
            err = ((hi * hi - y) + 2.0 * hi * lo) + lo * lo  # x * x - y exactly
            gap = np.spacing(y)
        near = ~(np.abs(np.abs(err) / gap - 0.5) >= _NEAR_TIE)  # and NaN (an overflow)
        near |= np.frexp(y)[0] == 0.5  # a power of 2: the gap below is half the gap above
        if near.any():
            y[near] = _scalar_squares(x[near].tolist(), single)
    return y


def _scalar_squares(values: list[float], single: bool) -> list[float]:
    """Each value's square by the scalar operation: ``pow`` (as ``math.pow``, the quickest), or
    the ``float32``'s own ``**`` (``single``); an overflow to infinity as NumPy gives it."""
    if single:
        return [float(np.float32(v) ** 2) for v in values]
    try:
        return [math.pow(v, 2) for v in values]
    except OverflowError:
        return [float(np.float64(v) ** 2) for v in values]


def _box_actions(a: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """The first coordinate ``(n,)`` of ``n`` box actions (``(n, k)`` or ``(n,)``) in ``float64``,
    and the kind in which the environment receives it (its ``action[0]``)."""
    arr = np.asarray(a)
    kind = _F32 if arr.dtype == np.float32 else _F64
    return arr.reshape(n, -1)[:, 0].astype(np.float64), kind


class _Refused(Exception):
    """A core whose class is simulated here but whose settings the simulator cannot follow."""


# ------------------------------------------------------------------------------ the simulators
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


class AcrobotDynamics:
    """gymnasium's ``AcrobotEnv`` (``Acrobot-v1``, any version since 0.26) on arrays of states.

    The state ``(n, 4)`` is ``(theta1, theta2, dtheta1, dtheta2)``; one step is the environment's
    Runge-Kutta step of ``dt`` under the torque ``AVAIL_TORQUE[a]``, the angles wrapped into
    ``[-pi, pi]`` and the velocities clipped to ``MAX_VEL_1``, ``MAX_VEL_2``; the equations of
    the book or, with ``book_or_nips="nips"``, of the NIPS paper. Reward -1 per step, 0 on the
    step that lifts the tip above the bar (which terminates). The observation ``(n, 6)``
    ``float32`` is ``(cos, sin)`` of both angles and both velocities. The links' masses, lengths,
    centres of mass and moment of inertia, ``dt``, the torques and the velocity bounds are read
    from the environment; gravity is the environment's own constant 9.8.

    Args:
        env: the unwrapped ``AcrobotEnv``.

    Raises:
        _Refused: ``torque_noise_max > 0`` (random torques), or fewer torques than actions.
    """

    n_actions = 3
    name = "AcrobotEnv"
    #: gravity, a constant inside ``AcrobotEnv._dsdt`` (not an attribute).
    G = 9.8

    def __init__(self, env: Any) -> None:
        noise = float(env.torque_noise_max)
        if noise > 0:
            raise _Refused(
                f"AcrobotEnv's torque_noise_max={noise:g} adds a random torque to every step; the "
                "paths method needs deterministic dynamics (set torque_noise_max = 0)"
            )
        self.n_actions = int(env.action_space.n)
        if len(env.AVAIL_TORQUE) < self.n_actions:
            raise _Refused(
                f"AcrobotEnv has {self.n_actions} actions but AVAIL_TORQUE lists "
                f"{len(env.AVAIL_TORQUE)} torques ({env.AVAIL_TORQUE})"
            )
        self.actions = DiscreteActions(self.n_actions)
        self.torques = np.array(env.AVAIL_TORQUE[: self.n_actions], dtype=np.float64)
        self.dt = env.dt
        self.m1, self.m2 = env.LINK_MASS_1, env.LINK_MASS_2
        self.l1 = env.LINK_LENGTH_1
        self.lc1, self.lc2 = env.LINK_COM_POS_1, env.LINK_COM_POS_2
        self.moi = env.LINK_MOI
        self.max_vel_1, self.max_vel_2 = env.MAX_VEL_1, env.MAX_VEL_2
        self.nips = env.book_or_nips == "nips"

    def start(self, env: Any) -> np.ndarray:
        return np.array(env.unwrapped.state, dtype=np.float64)

    def state_box(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The states' box ``(low, high, periodic)``: both angles (periodic) and the velocity
        bounds."""
        low = np.array([-np.pi, -np.pi, -self.max_vel_1, -self.max_vel_2])
        return low, -low, np.array([True, True, False, False])

    def _dsdt(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """The time derivative ``(n, 4)`` of states ``(n, 4)`` under torques ``(n,)``: the
        environment's ``_dsdt``, term for term."""
        m1, m2, l1, lc1, lc2 = self.m1, self.m2, self.l1, self.lc1, self.lc2
        I1 = I2 = self.moi
        g, pi = self.G, np.pi
        theta1, theta2, dtheta1, dtheta2 = s.T
        cos2, sin2 = np.cos(theta2), np.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + I2
        # the environment's x**2 of NumPy scalars: pow (one call for the three)
        dtheta2_sq, dtheta1_sq, d2_sq = _square(np.stack([dtheta2, dtheta1, d2]))
        phi2 = m2 * lc2 * g * np.cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2_sq * sin2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
            + (m1 * lc1 + m2 * l1) * g * np.cos(theta1 - pi / 2)
            + phi2
        )
        if self.nips:
            ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * lc2**2 + I2 - d2_sq / d1)
        else:
            ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1_sq * sin2 - phi2) / (
                m2 * lc2**2 + I2 - d2_sq / d1
            )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return np.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], axis=1)

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        torque = self.torques[np.asarray(a, dtype=np.int64)]
        y0 = np.asarray(s, dtype=np.float64)
        dt = self.dt - 0  # rk4's t[1] - t[0] with t = [0, dt]
        dt2 = dt / 2.0
        k1 = self._dsdt(y0, torque)
        k2 = self._dsdt(y0 + dt2 * k1, torque)
        k3 = self._dsdt(y0 + dt2 * k2, torque)
        k4 = self._dsdt(y0 + dt * k3, torque)
        ns = y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        for j in (0, 1):  # wrap(x, -pi, pi), one turn at a time as the environment does
            x = ns[:, j]
            while (over := x > np.pi).any():
                x = np.where(over, x - 2 * np.pi, x)
            while (under := x < -np.pi).any():
                x = np.where(under, x + 2 * np.pi, x)
            ns[:, j] = x
        ns[:, 2] = np.minimum(np.maximum(ns[:, 2], -self.max_vel_1), self.max_vel_1)
        ns[:, 3] = np.minimum(np.maximum(ns[:, 3], -self.max_vel_2), self.max_vel_2)
        term = -np.cos(ns[:, 0]) - np.cos(ns[:, 1] + ns[:, 0]) > 1.0
        return ns, np.where(term, 0.0, -1.0), term

    def observe(self, s: np.ndarray) -> np.ndarray:
        t1, t2 = s[:, 0], s[:, 1]
        cols = [np.cos(t1), np.sin(t1), np.cos(t2), np.sin(t2), s[:, 2], s[:, 3]]
        return np.stack(cols, axis=1).astype(np.float32)


class _CarStates:
    """The states of both mountain cars: ``(position, velocity)``, and their box."""

    min_position: float
    max_position: float
    max_speed: float

    def start(self, env: Any) -> np.ndarray:
        return np.array(env.unwrapped.state, dtype=np.float64)

    def state_box(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The states' box ``(low, high, periodic)``: position and velocity bounds."""
        low = np.array([self.min_position, -self.max_speed])
        high = np.array([self.max_position, self.max_speed])
        return low, high, np.array([False, False])


class MountainCarDynamics(_CarStates):
    """gymnasium's ``MountainCarEnv`` (``MountainCar-v0``) on arrays of states.

    The state ``(n, 2)`` is ``(position, velocity)`` in ``float64`` (as the environment holds
    it); action ``a`` pushes with ``(a - 1) * force`` against gravity ``cos(3 position) *
    gravity``, the velocity is clipped to ``max_speed``, the position to ``[min_position,
    max_position]`` (stopping the car at the left wall). Reward -1 per step; the episode
    terminates at ``position >= goal_position`` with ``velocity >= goal_velocity``. The
    observation is the state in ``float32``. All constants are read from the environment.

    Args:
        env: the unwrapped ``MountainCarEnv``.
    """

    n_actions = 3
    name = "MountainCarEnv"

    def __init__(self, env: Any) -> None:
        self.n_actions = int(env.action_space.n)
        self.actions = DiscreteActions(self.n_actions)
        self.min_position, self.max_position = env.min_position, env.max_position
        self.max_speed = env.max_speed
        self.goal_position, self.goal_velocity = env.goal_position, env.goal_velocity
        self.force, self.gravity = env.force, env.gravity

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        position, velocity = np.asarray(s, dtype=np.float64).T
        push = (np.asarray(a, dtype=np.int64) - 1) * self.force
        velocity = velocity + (push + np.cos(3 * position) * (-self.gravity))
        velocity = np.clip(velocity, -self.max_speed, self.max_speed)
        position = np.clip(position + velocity, self.min_position, self.max_position)
        velocity = np.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        term = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        return np.stack([position, velocity], axis=1), np.full(len(term), -1.0), term

    def observe(self, s: np.ndarray) -> np.ndarray:
        return s.astype(np.float32)


class PendulumDynamics:
    """gymnasium's ``PendulumEnv`` (``Pendulum-v1``) on arrays of states.

    The state ``(n, 2)`` is ``(theta, theta_dot)`` in ``float64``; actions ``(n, 1)`` are torques,
    clipped to ``max_torque`` as the environment clips them. The reward is minus
    ``angle_normalize(theta)**2 + 0.1 theta_dot**2 + 0.001 u**2`` of the state before the step
    and the clipped torque ``u``; the angular velocity is clipped to ``max_speed``; the episode
    never terminates. The observation ``(n, 3)`` ``float32`` is ``(cos theta, sin theta,
    theta_dot)``. ``g``, ``m``, ``l``, ``dt``, ``max_speed`` and ``max_torque`` are read from the
    environment. ``float32`` actions are taken as the environment takes them (in ``float32``
    under NumPy 2 where they meet a Python number).

    Args:
        env: the unwrapped ``PendulumEnv``.
    """

    n_actions = 0
    name = "PendulumEnv"

    def __init__(self, env: Any) -> None:
        self.actions = BoxActions(env.action_space.low, env.action_space.high)
        self.max_torque, self.max_speed, self.dt = env.max_torque, env.max_speed, env.dt
        g, m, l = env.g, env.m, env.l
        self.swing = 3 * g / (2 * l)  # the environment's groupings, in Python floats
        self.drive = 3.0 / (m * l**2)

    def start(self, env: Any) -> np.ndarray:
        return np.array(env.unwrapped.state, dtype=np.float64)

    def state_box(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The states' box ``(low, high, periodic)``: the angle (periodic) and the speed bound."""
        low = np.array([-np.pi, -self.max_speed])
        return low, -low, np.array([True, False])

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        th, thdot = np.asarray(s, dtype=np.float64).T
        u, ku = _box_actions(a, len(th))
        u = np.clip(u, -self.max_torque, self.max_torque)
        # u**2: the float32's own powf under NumPy 2, else pow of the float64 (exact before
        # NumPy 2 for a float32)
        single = ku == _F32 and _WEAK
        u2, k2 = _square(u, single), np.asarray(_F32 if single else _F64)
        effort, _ = _op(np.multiply, 0.001, _PY, u2, k2)
        costs = _square((th + np.pi) % (2 * np.pi) - np.pi) + 0.1 * _square(thdot) + effort
        drive, _ = _op(np.multiply, self.drive, _PY, u, ku)
        newthdot = thdot + (self.swing * np.sin(th) + drive) * self.dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * self.dt
        nxt = np.stack([newth, newthdot], axis=1)
        return nxt, -costs, np.zeros(len(th), dtype=bool)

    def observe(self, s: np.ndarray) -> np.ndarray:
        th = s[:, 0]
        return np.stack([np.cos(th), np.sin(th), s[:, 1]], axis=1).astype(np.float32)


class ContinuousMountainCarDynamics(_CarStates):
    """gymnasium's ``Continuous_MountainCarEnv`` (``MountainCarContinuous-v0``) on arrays of
    states.

    The state ``(n, 2)`` is ``(position, velocity)``; the environment stores it in ``float32``
    after every step (a start from ``reset`` is ``float64``), and so does the simulator: a state
    whose values are exact ``float32`` numbers is stepped as a ``float32`` state. Actions
    ``(n, 1)`` are forces, clipped to ``[min_action, max_action]`` for the dynamics (``force *
    power`` against ``0.0025 cos(3 position)``; the velocity clipped to ``max_speed``, the
    position to ``[min_position, max_position]``, the car stopped at the left wall). The reward
    is 100 on reaching ``position >= goal_position`` with ``velocity >= goal_velocity`` (which
    terminates), minus ``0.1 a**2`` of the *raw* action ``a`` (unclipped, as the environment
    charges it). The observation is the state in ``float32``. The constants except the two
    literals (0.0025, the reward's 100 and 0.1) are read from the environment.

    Args:
        env: the unwrapped ``Continuous_MountainCarEnv``.
    """

    n_actions = 0
    name = "Continuous_MountainCarEnv"

    def __init__(self, env: Any) -> None:
        self.actions = BoxActions(env.action_space.low, env.action_space.high)
        self.min_action, self.max_action = env.min_action, env.max_action
        self.min_position, self.max_position = env.min_position, env.max_position
        self.max_speed, self.power = env.max_speed, env.power
        self.goal_position, self.goal_velocity = env.goal_position, env.goal_velocity

    def env_state(self, s: np.ndarray) -> np.ndarray:
        """The environment's ``state`` for one state ``(2,)``: ``float32`` where exact."""
        s = np.asarray(s, dtype=np.float64)
        return s.astype(np.float32) if np.array_equal(_f32(s), s) else s.copy()

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = np.asarray(s, dtype=np.float64)
        ks = np.where(np.all(_f32(s) == s, axis=1), _F32, _F64)  # the type the env holds
        position, velocity = s.T
        act, ka = _box_actions(a, len(s))
        # force = min(max(action[0], min_action), max_action): a Python float where clipped
        low, _ = _op(np.greater, self.min_action, _PY, act, ka)
        force, kf = np.where(low, self.min_action, act), np.where(low, _PY, ka)
        high, _ = _op(np.less, self.max_action, _PY, force, kf)
        force, kf = np.where(high, self.max_action, force), np.where(high, _PY, kf)
        # velocity += force * power - 0.0025 * math.cos(3 * position)
        push, kp = _op(np.multiply, force, kf, self.power, _PY)
        angle, _ = _op(np.multiply, 3, _PY, position, ks)
        change, kc = _op(np.subtract, push, kp, 0.0025 * np.cos(angle), _PY)
        velocity, kv = _op(np.add, velocity, ks, change, kc)
        velocity, kv = self._limit(velocity, kv, np.greater, self.max_speed)
        velocity, kv = self._limit(velocity, kv, np.less, -self.max_speed)
        position, kx = _op(np.add, position, ks, velocity, kv)
        position, kx = self._limit(position, kx, np.greater, self.max_position)
        position, kx = self._limit(position, kx, np.less, self.min_position)
        wall = (
            _op(np.equal, position, kx, self.min_position, _PY)[0]
            & _op(np.less, velocity, kv, 0, _PY)[0]
        )
        velocity, kv = np.where(wall, 0.0, velocity), np.where(wall, _PY, kv)
        term = (
            _op(np.greater_equal, position, kx, self.goal_position, _PY)[0]
            & _op(np.greater_equal, velocity, kv, self.goal_velocity, _PY)[0]
        )
        reward = np.where(term, 100.0, 0.0) - _square(act) * 0.1  # math.pow(action[0], 2)
        return _f32(np.stack([position, velocity], axis=1)), reward, term

    @staticmethod
    def _limit(
        x: np.ndarray, kx: np.ndarray, beyond: Callable[..., Any], bound: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``if beyond(x, bound): x = bound`` (then a Python float)."""
        out, _ = _op(beyond, x, kx, bound, _PY)
        return np.where(out, bound, x), np.where(out, _PY, kx)

    def observe(self, s: np.ndarray) -> np.ndarray:
        return s.astype(np.float32)


#: The simulators, by the class name of the environment's core, with what they need of it.
_SIMULATORS: dict[str, Callable[[Any], Dynamics]] = {
    "CartPoleEnv": CartPoleDynamics,
    "AcrobotEnv": AcrobotDynamics,
    "MountainCarEnv": MountainCarDynamics,
    "PendulumEnv": PendulumDynamics,
    "Continuous_MountainCarEnv": ContinuousMountainCarDynamics,
}


def dynamics_for(env: Any) -> tuple[Dynamics | None, str]:
    """The simulator of ``env``, or ``None`` and why there is none.

    Only an environment whose core is exactly one of gymnasium's classes with a simulator (not
    a subclass, which may change the dynamics), set up deterministically (Acrobot without torque
    noise), and whose wrappers change neither observations, actions nor rewards (a time limit,
    gymnasium's checks) qualifies. An Atari game (the ALE) gets the simulator of the RL Zoo's
    Atari MDP (:class:`imitation_meg.approx.ale.ALEDynamics`).

    Raises:
        ValueError: an Atari game with sticky actions or a random frame skip (no estimator
            here scores image observations of random dynamics).
    """
    from imitation_meg.approx.mujoco_sim import MujocoDynamics, mujoco_refusal

    core = env.unwrapped
    if getattr(core, "ale", None) is not None:  # an Atari game: imitation_meg.approx.ale
        from imitation_meg.approx.ale import ale_dynamics

        return ale_dynamics(env)
    cls = type(core)
    name = cls.__name__
    maker = _SIMULATORS.get(name)
    refusal = mujoco_refusal(core)  # "" for no MuJoCo task, None for one of gymnasium's
    if refusal:
        return None, refusal
    if refusal is None:
        maker = MujocoDynamics
    if maker is None or cls.__module__.split(".")[0] != "gymnasium":
        known = ", ".join(sorted(_SIMULATORS)) + " and gymnasium's MuJoCo tasks"
        parent = next(
            (
                base.__name__
                for base in cls.__mro__[1:]
                if base.__name__ in _SIMULATORS and base.__module__.split(".")[0] == "gymnasium"
            ),
            None,
        )
        if parent is not None:
            return None, (
                f"{name} subclasses gymnasium's {parent} and may change its dynamics (there is a "
                f"simulator for {parent} itself only)"
            )
        return None, f"{name} has no simulator here (there is one for {known})"
    layer = env
    while layer is not core:
        if not _plain(layer):
            kind = type(layer).__name__
            return None, f"its wrapper {kind} may change what the simulator computes"
        layer = layer.env
    try:
        return maker(core), ""
    except _Refused as e:
        return None, str(e)


def _plain(wrapper: Any) -> bool:
    """A time limit (RL Zoo's patched one too: the horizon is the simulator's own) or one of
    gymnasium's checks, which change nothing the simulator computes."""
    import gymnasium as gym

    if isinstance(wrapper, gym.wrappers.TimeLimit):
        return True
    return type(wrapper).__name__ in _PLAIN_WRAPPERS


def simulator(source: Any) -> tuple[Dynamics | None, str]:
    """The simulator the paths method takes for ``source``'s environment (an
    :class:`~imitation_meg.approx.rollouts.EnvSource`): :func:`dynamics_for` a fresh copy of
    it, or ``None`` and why."""
    env = source.make()
    try:
        return dynamics_for(env)
    finally:
        env.close()


# ------------------------------------------------------------------------------ the check
def check_against(
    dyn: Dynamics, env: Any, states: np.ndarray, actions: np.ndarray, *, atol: float = 1e-5
) -> str:
    """Compare the simulator with the environment one step at a time from given states.

    For each pair ``(states[i], actions[i])`` the environment's core (``env.unwrapped``, so that
    no time limit or check intervenes) is put in that state (its ``state`` attribute) and
    stepped with that action; its observation, reward, termination and next state are compared
    with the simulator's :meth:`Dynamics.step` and :meth:`Dynamics.observe`. Each step starts
    from the given state (teacher forcing), so chaotic dynamics do not amplify a last-bit
    difference over a long replay into a disagreement. The core's state is restored afterwards.
    A simulator with its own ``check_against`` method (the ALE's,
    :meth:`imitation_meg.approx.ale.ALEDynamics.check_against`) checks itself.

    Args:
        dyn: the simulator.
        env: the environment (any wrappers; its core is stepped).
        states: ``(n, d)`` states.
        actions: ``(n,)`` integer actions or ``(n, k)`` points of a box (stepped in their dtype).
        atol: the largest difference of an observation or a state, or of a reward (times
            ``max(1, |r|)``), that counts as agreement (0: bit for bit).

    Returns:
        ``""`` where all agree, else the first disagreement: the step's index, its state and
        action, what differs and both values.

    Raises:
        ValueError: states and actions of different lengths, a negative ``atol``, or an
            environment that ``dyn`` does not simulate.
    """
    own = getattr(dyn, "check_against", None)  # a simulator that checks itself (the ALE)
    if own is not None:
        return str(own(env, states, actions, atol=atol))
    core = env.unwrapped
    if type(core).__name__ != dyn.name:
        raise ValueError(
            f"check_against needs the environment that {dyn.name} simulates, got "
            f"{type(core).__name__}."
        )
    states, actions = np.asarray(states, dtype=np.float64), np.asarray(actions)
    if states.ndim != 2 or len(states) != len(actions):
        raise ValueError(
            f"check_against needs states (n, d) and n actions, got states of shape "
            f"{states.shape} and actions of shape {actions.shape}."
        )
    if not atol >= 0:
        raise ValueError(f"atol must be >= 0, got {atol!r}.")
    to_env = getattr(dyn, "env_state", None)
    # a simulator that copies an emulator's state in and out (MuJoCo) says how
    put, get = getattr(dyn, "env_set", None), getattr(dyn, "env_get", None)
    if put is None or get is None:
        put, get = _set_state, lambda c: np.array(c.state, dtype=np.float64)
    saved = core.state if put is _set_state else get(core)  # restored as it was
    try:
        for i in range(len(states)):
            put(core, to_env(states[i]) if to_env is not None else states[i].copy())
            if hasattr(core, "steps_beyond_terminated"):  # CartPole's count of late steps
                core.steps_beyond_terminated = None
            act = int(actions[i]) if dyn.n_actions else actions[i].copy()
            obs, r, term, _, _ = core.step(act)
            there = (np.array(obs), float(r), bool(term), get(core))
            nxt, r_sim, term_sim = dyn.step(states[i : i + 1], actions[i : i + 1])
            here = (dyn.observe(nxt)[0], float(r_sim[0]), bool(term_sim[0]), nxt[0])
            differs = _differs(there, here, atol)
            if differs:
                return f"step {i} (state {states[i].tolist()}, action {actions[i]}): {differs}"
    finally:
        put(core, saved)
    return ""


def _set_state(core: Any, state: np.ndarray) -> None:
    """Put ``state`` into a classic-control core (its ``state`` attribute)."""
    core.state = state


def _differs(there: tuple[Any, ...], here: tuple[Any, ...], atol: float) -> str:
    """What differs between the environment's step and the simulator's, each ``(observation,
    reward, terminated, next state)`` (``""`` if nothing)."""
    (obs, r, term, state), (sim, r_sim, term_sim, nxt) = there, here
    if obs.shape != sim.shape or obs.dtype != sim.dtype:
        return (
            f"the observation is {obs.dtype}{list(obs.shape)} there, "
            f"{sim.dtype}{list(sim.shape)} on the simulator"
        )
    for field, a, b in (("observation", obs, sim), ("next state", state, nxt)):
        gap = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0))
        if not gap <= atol:
            return (
                f"the {field} differs by {gap:.3g} (environment {a.tolist()}, simulator "
                f"{b.tolist()})"
            )
    if not abs(r - r_sim) <= atol * max(1.0, abs(r)):
        return f"the reward is {r!r} there, {r_sim!r} on the simulator"
    if term != term_sim:
        return f"the step terminates {'there' if term else 'on the simulator'} only"
    return ""
