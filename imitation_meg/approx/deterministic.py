"""MEG in a deterministic environment the library simulates: its curve, and a policy's score.

In a deterministic environment the soft value is ``W_0(s0) = log Z_beta(s0)``,
``Z_beta(s0) = E_uniform[exp(beta R) | s0]`` (:mod:`imitation_meg.approx.curve`), and both
parts of a score run on the library's simulator of the environment
(:mod:`imitation_meg.approx.simulators`):

- **The curve**, once per environment (:func:`simulated_curve`): by splitting on survival where
  the reward pays for lasting and the simulator declares no state box (CartPole:
  :mod:`imitation_meg.approx.paths`), else by twisted sequential Monte Carlo
  (:mod:`imitation_meg.approx.smc`: Acrobot, MountainCar, Pendulum, MountainCarContinuous), at
  ``n_starts`` fresh starts.
- **The policy's episodes** (:func:`simulated_estimate`): ``n_eval_episodes`` of them from
  fresh starts, in lockstep on the simulator, the visited (state, action) pairs of the first
  three stepped in the environment itself
  (:func:`~imitation_meg.approx.simulators.check_against`: any disagreement is a
  ``ValueError``, not a score), and the conjugate of the curve at their mean return, with a
  bootstrap over the episodes and the curve's starts. (Episodes from the curve's own starts,
  paired with them, measured wider intervals on CartPole and MountainCar: the policy's return
  varies between starts more than its correlation with the curve's gains back.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg.approx.agent import Actor, curve_result, simulate_episodes
from imitation_meg.approx.curve import CurveInfo, SoftValueCurve
from imitation_meg.approx.evaluate import ApproxMEGResult
from imitation_meg.approx.paths import curve_from_sums, split_paths
from imitation_meg.approx.simulators import Dynamics, check_against
from imitation_meg.approx.smc import CURVE_RUNGS, RUNG_BUDGET, smc_curve

__all__ = [
    "curve_method",
    "curve_steps",
    "needs_extension",
    "simulated_curve",
    "simulated_estimate",
    "starts_of",
]

#: Episodes whose visited (state, action) pairs are stepped in the environment as a check.
_CHECKED = 3


def curve_method(dyn: Dynamics) -> str:
    """The simulator's own ``curve_method`` where it declares one, else ``"smc"`` where it
    declares a state box (the twist's grid) and ``"paths"`` (splitting on survival) where not."""
    declared = getattr(dyn, "curve_method", None)
    if declared is not None:
        return str(declared)
    return "smc" if hasattr(dyn, "state_box") else "paths"


def curve_steps(dyn: Dynamics, opts: Any, horizon: int) -> int:
    """About how many simulator steps the curve takes (the progress bar's total): the
    splitting's particles times the horizon, or the twisted SMC's budget for about 16 rungs
    (the bar grows if it takes more)."""
    if curve_method(dyn) == "smc":
        return CURVE_RUNGS * int(getattr(dyn, "rung_budget", RUNG_BUDGET))
    return int(opts.n_starts * (opts.n_particles // 2) * 2 * horizon)


def starts_of(env: Any, dyn: Dynamics, seeds: np.ndarray) -> np.ndarray:
    """The states ``(n, d)`` right after ``env.reset(seed=...)`` for each seed."""
    rows = []
    for seed in seeds:
        env.reset(seed=int(seed))
        rows.append(dyn.start(env))
    return np.stack(rows)


def simulated_curve(
    source: Any,
    dyn: Dynamics,
    opts: Any,
    rng: np.random.Generator,
    *,
    target: float | None = None,
    on_step: Callable[[int], None] | None = None,
) -> SoftValueCurve:
    """The curve of ``source``'s environment (an :class:`~imitation_meg.approx.rollouts.
    EnvSource`) at ``opts.n_starts`` fresh starts drawn with ``rng`` (module docstring); with
    ``target``, a twisted SMC climbs until its paths reach that return
    (:func:`~imitation_meg.approx.smc.smc_curve`)."""
    check_cost = getattr(dyn, "check_cost", None)  # a slow simulator refuses a long curve
    if check_cost is not None:
        check_cost(source.horizon, opts.n_starts, opts.n_particles)
    env = source.make()
    try:
        starts = starts_of(env, dyn, rng.integers(0, 2**31 - 1, size=opts.n_starts))
    finally:
        env.close()
    method = curve_method(dyn)
    info = CurveInfo(
        env=source.name,
        env_kwargs=dict(getattr(source, "env_kwargs", {})),
        horizon=source.horizon,
        actions=dyn.actions.to_dict(),
        method=method,
        settings={"n_particles": opts.n_particles, "n_starts": opts.n_starts}
        | ({} if target is None else {"target": float(target)}),
        seed=int(opts.seed),
    )
    if method == "smc":
        curve = smc_curve(
            dyn, starts, source.horizon, opts.n_particles, rng, info, target=target, on_step=on_step
        )
    else:
        sums = split_paths(dyn, starts, source.horizon, opts.n_particles, rng, on_step=on_step)
        curve = curve_from_sums(sums, info)
        curve.particle_steps = sums.steps  # type: ignore[attr-defined]
    curve.starts = starts
    return curve


def _episode_starts(
    env: Any, dyn: Dynamics, curve: SoftValueCurve, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray | None]:
    """Where the policy's ``n`` episodes begin: about half of them at the curve's own starts,
    as many at each (its control variate, :meth:`SoftValueCurve.score`), the rest at fresh
    starts; ``units`` says which (-1: fresh). A curve without starts: all fresh."""
    if curve.starts is None or n < 2 * len(curve.starts):
        seeds = rng.integers(0, 2**31 - 1, size=n)
        return starts_of(env, dyn, seeds), None
    K = len(curve.starts)
    per = n // (2 * K)
    fresh = n - per * K
    seeds = rng.integers(0, 2**31 - 1, size=fresh)
    starts = np.concatenate([np.repeat(curve.starts, per, axis=0), starts_of(env, dyn, seeds)])
    units = np.concatenate([np.repeat(np.arange(K), per), np.full(fresh, -1)])
    return starts, units


def _extended(
    curve: SoftValueCurve,
    eps: Any,
    units: np.ndarray | None,
    source: Any,
    dyn: Dynamics,
    opts: Any,
    run: Any,
) -> tuple[SoftValueCurve, bool]:
    """The curve, computed again to reach the policy's return where its twisted SMC's paths
    fell short of it (a curve extends itself for an agent better, or worse, than anything it
    found); the same seed, and the new rungs climb until the paths reach the return. Splitting
    curves and exact ones stand as they are (their checks say whether they serve)."""
    returns = eps.returns if units is None else eps.returns[units >= 0]
    J = float(returns.mean())
    if not needs_extension(curve, J):
        return curve, False
    rng = np.random.default_rng(run.streams[0])
    return simulated_curve(source, dyn, opts, rng, target=J, on_step=run.bar.update), True


def needs_extension(curve: SoftValueCurve, J: float) -> bool:
    """Whether to compute ``curve`` again to reach the mean return ``J``: a twisted-SMC curve
    whose paths' returns fall short of ``J``, unless it was itself computed to reach a return
    as far or farther on that side and fell short (``settings["target"]``, kept by
    :func:`simulated_curve`): it would fall short again, at the cost of a whole curve per score
    (a callback's every evaluation of an agent better than anything the paths find). The score
    then says that the return lies beyond the curve (``settled=False``)."""
    if curve.info.method != "smc":
        return False
    lo, hi = curve.returns_found
    if lo <= J <= hi:
        return False
    tried = curve.info.settings.get("target")
    if isinstance(tried, (int, float)):
        above = min(J, tried) > hi  # it climbed for a higher return and fell short
        below = max(J, tried) < lo
        return not (above or below)
    return True


def simulated_estimate(
    run: Any, dyn: Dynamics, curve: SoftValueCurve | None = None
) -> ApproxMEGResult:
    """Known-utility MEG of ``run``'s policy (a :class:`~imitation_meg.approx.core.Run`) from
    its episodes on the simulator and the environment's curve (``curve``, or one computed here):
    an :class:`ApproxMEGResult` with ``method="paths"``.

    Raises:
        ValueError: the simulator disagrees with the environment on the checked steps.
    """
    opts, source = run.opts, run.source
    rng_eval = np.random.default_rng(run.s_eval)
    rng_paths = np.random.default_rng(run.streams[0])  # the stream of core.curve_rng
    clock = {"start": time.perf_counter()}

    def lap(name: str) -> None:
        now = time.perf_counter()
        clock[name], clock["start"] = now - clock["start"], now

    particle_steps = 0
    if curve is None:
        curve = simulated_curve(source, dyn, opts, rng_paths, on_step=run.bar.update)
        particle_steps = curve.particle_steps  # type: ignore[attr-defined]
        lap("the curve")
    env = source.make()
    try:
        starts, units = _episode_starts(env, dyn, curve, opts.n_eval_episodes, rng_eval)
        eps = simulate_episodes(
            dyn,
            Actor(run.pol, dyn.actions),
            starts,
            source.horizon,
            rng_eval,
            keep=_CHECKED,
            on_step=run.bar.update,
        )
        run.count(int(eps.lengths.sum()))
        lap("policy episodes")
        differs = check_against(dyn, env, eps.states, eps.actions)
        run.count(len(eps.states))
    finally:
        env.close()
    if differs:
        raise ValueError(
            f"the simulator of {dyn.name} disagrees with {source.name} on the policy's first "
            f"episodes, stepped there: {differs}. Score it with method='soft_q'."
        )
    lap("check in the environment")
    curve, extended = _extended(curve, eps, units, source, dyn, opts, run)
    if extended:
        particle_steps += curve.particle_steps  # type: ignore[attr-defined]
        lap("the curve, extended to the policy's return")
    timings = {k: v for k, v in clock.items() if k != "start"}
    return curve_result(
        run,
        curve,
        eps.episodes(),
        units=units,
        log_measure=dyn.actions.log_measure,
        method="paths",
        particle_steps=particle_steps,
        timings=timings,
    )
