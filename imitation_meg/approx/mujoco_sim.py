"""gymnasium's MuJoCo tasks on arrays of states, by copying the physics state in and out.

MuJoCo's step is deterministic: the next physics state is a function of the state and the
controls. :class:`MujocoDynamics` gives the curve's sequential Monte Carlo
(:mod:`imitation_meg.approx.smc`, without a twist: there is no state box to grid) the
environment's own dynamics on arrays of states: each row of a state array holds what the
environment's ``step`` reads of its physics, and a step puts a row into one instance of the
environment, calls its ``step`` and reads the row back. Rewards, terminations and observations
are the environment's own, so they agree with it bit for bit (a chained replay from a reset, in
the tests), on every MuJoCo task of gymnasium 0.29 (``-v4``) and 1.x (``-v5``).

A state row is ``(time, qpos, qvel, act, qacc_warmstart, xpos, xipos, observation)``:

- ``qpos``, ``qvel``, ``act`` the physics state, ``qacc_warmstart`` the constraint solver's
  starting point (the next step's last bits depend on it), ``time`` the clock;
- ``xpos`` and ``xipos`` the bodies' frames and centres of mass as the previous step left
  them: the tasks read them before stepping (Ant's and Reacher's positions, Humanoid's centre
  of mass), and after a step they lag the positions by one substep, so they are copied as the
  environment holds them rather than recomputed;
- the observation the environment returned with that state (read off by :meth:`observe`,
  exact where the observation reads derived quantities such as Humanoid's contact forces).

Each step costs one of the environment's own steps (tens of microseconds for HalfCheetah and
Hopper on one core), so the curve's budget (:attr:`MujocoDynamics.rung_budget`) is smaller than
an array simulator's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from imitation_meg.approx.smc import CURVE_RUNGS, look_aheads, particles_for
from imitation_meg.approx.spaces import BoxActions

__all__ = ["MujocoDynamics", "mujoco_refusal"]

#: Look-ahead steps per rung of the curve's SMC (:func:`~imitation_meg.approx.smc.particles_for`):
#: at 50 to 150 microseconds a HalfCheetah step, 5 to 15 s of one core per rung.
RUNG_BUDGET = 100_000
#: The most simulator steps a curve may be expected to take (3 to 8 minutes of one core for
#: HalfCheetah); a longer horizon is refused with the horizon that fits.
MAX_CURVE_STEPS = 3_000_000


def _is_mujoco_env(core: Any) -> bool:
    """Whether ``core`` is one of gymnasium's ``MujocoEnv``, by its classes' names (importing
    gymnasium's MuJoCo module would import MuJoCo, or fail where it is absent)."""
    return any(
        base.__name__ == "MujocoEnv" and base.__module__.startswith("gymnasium.envs.mujoco")
        for base in type(core).__mro__
    )


def mujoco_refusal(core: Any) -> str | None:
    """``None`` where :class:`MujocoDynamics` serves ``core`` (the unwrapped environment);
    ``""`` where ``core`` is no MuJoCo environment at all; else why it is not served (a
    ``MujocoEnv`` defined outside gymnasium's own tasks, whose ``step`` may draw random
    numbers)."""
    if not _is_mujoco_env(core):
        return ""
    module = type(core).__module__
    if not module.startswith("gymnasium.envs.mujoco."):
        return (
            f"{type(core).__name__} ({module}) subclasses gymnasium's MujocoEnv outside "
            "gymnasium's own tasks, and its step may be random (there is a simulator for "
            "gymnasium's MuJoCo tasks only)"
        )
    return None


class MujocoDynamics:
    """A gymnasium MuJoCo task (``HalfCheetah-v4``/``-v5``, ``Hopper``, ``Walker2d``, ``Ant``,
    ...) on arrays of states (module docstring), for the curve's SMC without a twist.

    Args:
        env: the unwrapped ``MujocoEnv``; the simulator steps this instance (the state it holds
            is restored after each batch of steps).

    Attributes:
        actions: the action box (its uniform reference).
        n_actions: 0 (a box).
        name: the environment's class name.
        curve_method: ``"smc"``.
        rung_budget: look-ahead steps per rung of the curve (:data:`RUNG_BUDGET`).
    """

    n_actions = 0
    curve_method = "smc"
    rung_budget = RUNG_BUDGET

    def __init__(self, env: Any) -> None:
        self.env = env
        self.name = type(env).__name__
        self.actions = BoxActions(env.action_space.low, env.action_space.high)
        model = env.model
        self.nq, self.nv, self.na, self.nbody = model.nq, model.nv, model.na, model.nbody
        obs_space = env.observation_space
        self.obs_shape = tuple(obs_space.shape)
        self.obs_dtype = np.dtype(obs_space.dtype)
        self.n_obs = int(np.prod(self.obs_shape))
        # the row's slices, in order: time, qpos, qvel, act, warm start, xpos, xipos, observation
        sizes = [1, self.nq, self.nv, self.na, self.nv, 3 * self.nbody, 3 * self.nbody, self.n_obs]
        ends = np.cumsum(sizes)
        self._cuts = [slice(int(e - n), int(e)) for n, e in zip(sizes, ends, strict=True)]
        self.dim = int(ends[-1])

    # ------------------------------------------------------------------ state in and out
    def _read(self, obs: Any) -> np.ndarray:
        """The row ``(d,)`` of the instance's physics now, with the observation ``obs``."""
        d = self.env.data
        row = np.empty(self.dim)
        t, qp, qv, ac, ws, xp, xi, ob = self._cuts
        row[t] = d.time
        row[qp], row[qv], row[ac], row[ws] = d.qpos, d.qvel, d.act, d.qacc_warmstart
        row[xp], row[xi] = d.xpos.ravel(), d.xipos.ravel()
        row[ob] = np.asarray(obs, dtype=np.float64).ravel()
        return row

    def _put(self, row: np.ndarray) -> None:
        """Put the physics of ``row (d,)`` into the instance (no recomputation: the derived
        positions are the row's own)."""
        d = self.env.data
        t, qp, qv, ac, ws, xp, xi, _ = self._cuts
        d.time = row[t][0]
        d.qpos[:], d.qvel[:], d.act[:], d.qacc_warmstart[:] = row[qp], row[qv], row[ac], row[ws]
        d.xpos[:] = row[xp].reshape(-1, 3)
        d.xipos[:] = row[xi].reshape(-1, 3)

    # ------------------------------------------------------------------ the protocol
    def start(self, env: Any) -> np.ndarray:
        """The row ``(d,)`` of ``env`` (any wrappers) right after its ``reset``."""
        core = env.unwrapped
        saved, self.env = self.env, core
        try:
            return self._read(core._get_obs())
        finally:
            self.env = saved

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``(n, d)`` and actions ``(n, k)`` to next rows ``(n, d)``, rewards ``(n,)``
        and terminations ``(n,)``: one environment step each. Actions are passed in their
        dtype (the environment clips nothing: MuJoCo clamps the controls to their range)."""
        s = np.asarray(s, dtype=np.float64)
        acts = np.asarray(a).reshape(len(s), -1)
        out = np.empty_like(s)
        reward = np.empty(len(s))
        term = np.zeros(len(s), dtype=bool)
        env = self.env
        held = self._read(np.zeros(self.n_obs))
        try:
            for i in range(len(s)):
                self._put(s[i])
                obs, r, terminated, _, _ = env.step(acts[i])
                out[i] = self._read(obs)
                reward[i], term[i] = r, terminated
        finally:
            self._put(held)
        return out, reward, term

    def observe(self, s: np.ndarray) -> np.ndarray:
        """The observations ``(n, ...)`` that came with rows ``(n, d)``, in the environment's
        dtype."""
        s = np.asarray(s, dtype=np.float64)
        obs = s[:, self._cuts[-1]].astype(self.obs_dtype)
        return obs.reshape((len(s), *self.obs_shape))

    # ------------------------------------------------------------------ the curve's cost
    def curve_cost(self, n_starts: int, n_particles: int | None, horizon: int) -> int:
        """At most how many simulator steps the curve takes: ``CURVE_RUNGS`` rungs of
        ``n_starts`` starts times their particles (default
        :func:`~imitation_meg.approx.smc.particles_for`), the horizon and the look-aheads
        (:func:`~imitation_meg.approx.smc.look_aheads`; fewer where episodes terminate)."""
        P = n_particles or particles_for(self, n_starts, horizon)
        return CURVE_RUNGS * n_starts * P * horizon * look_aheads(self)

    def curve_refusal(self, n_starts: int, n_particles: int | None, horizon: int) -> str:
        """Why a curve at ``horizon`` is not computed (``""`` where it is): it would take more
        than :data:`MAX_CURVE_STEPS` steps; the message gives the cost, timed here on a few
        steps, and the longest horizon within the limit."""
        steps = self.curve_cost(n_starts, n_particles, horizon)
        if steps <= MAX_CURVE_STEPS:
            return ""
        fits = 1
        while self.curve_cost(n_starts, n_particles, fits + 1) <= MAX_CURVE_STEPS:
            fits += 1
        per_step = self._time_a_step()
        return (
            f"the soft-value curve of {self.name} at horizon {horizon} takes up to {steps:.3g} "
            f"simulator steps ({n_starts} starts; about {steps * per_step / 3600:.1f} h of one "
            f"core at {per_step * 1e6:.0f} us a step here), over the limit of "
            f"{MAX_CURVE_STEPS:.3g}; pass a horizon of at most {fits} (--horizon {fits}, about "
            f"{self.curve_cost(n_starts, n_particles, fits) * per_step / 60:.0f} min), or "
            "fewer starts (--approx-option n_starts=N)"
        )

    def check_cost(self, horizon: int, n_starts: int, n_particles: int | None = None) -> None:
        """Refuse a curve over the limit (:meth:`curve_refusal`).

        Raises:
            ValueError: its cost and the longest horizon within the limit.
        """
        why = self.curve_refusal(n_starts, n_particles, horizon)
        if why:
            raise ValueError(f"{why}.")

    def _time_a_step(self) -> float:
        """Seconds per simulator step, timed on 32 steps from the instance's present state."""
        row = self._read(self.env._get_obs())[None].repeat(32, axis=0)
        acts = self.actions.sample(np.random.default_rng(0), 32)
        t0 = time.perf_counter()
        self.step(row, acts)
        return (time.perf_counter() - t0) / 32

    # ------------------------------------------------------------------ for check_against
    def env_get(self, core: Any) -> np.ndarray:
        """The row of another instance ``core`` of the task (its observation recomputed)."""
        return self.start(core)

    def env_set(self, core: Any, row: np.ndarray) -> None:
        """Put ``row (d,)`` into another instance ``core`` of the task."""
        saved, self.env = self.env, core
        try:
            self._put(np.asarray(row, dtype=np.float64))
        finally:
            self.env = saved
