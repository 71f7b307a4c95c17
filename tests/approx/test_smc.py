"""The soft-value curve by sequential Monte Carlo for a simulator without a state box.

Without a grid for a twist the SMC's look-ahead sees the next reward only; its estimate of
``log Z_beta(s0)`` is checked against complete enumeration of the action sequences (CartPole,
whose simulator declares no state box, at a horizon small enough to enumerate).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from imitation_meg.approx.curve import CurveInfo
from imitation_meg.approx.deterministic import curve_method
from imitation_meg.approx.paths import enumerate_paths
from imitation_meg.approx.simulators import PendulumDynamics, dynamics_for
from imitation_meg.approx.smc import FlatTwist, reward_unit, smc_curve, twisted_smc

HORIZON = 14


def _cartpole() -> tuple[object, np.ndarray]:
    env = gym.make("CartPole-v1")
    dyn, _ = dynamics_for(env)
    assert dyn is not None and not hasattr(dyn, "state_box")
    rows = []
    for seed in (3, 11):
        env.reset(seed=seed)
        rows.append(dyn.start(env))
    return dyn, np.stack(rows)


def test_the_untwisted_smc_estimates_z_as_enumeration_gives_it() -> None:
    dyn, starts = _cartpole()
    betas = np.array([-0.3, 0.0, 0.5, 3.0])
    sums = twisted_smc(
        dyn, starts, HORIZON, FlatTwist(betas), 4000, np.random.default_rng(0), flat=True
    )
    est = sums.log_z  # (L, K, populations)
    for k, start in enumerate(starts):
        exact = enumerate_paths(dyn, start, HORIZON).log_partition(betas)
        assert np.abs(est[:, k, :] - exact[:, None]).max() < 0.1, (k, est[:, k], exact)
    # the estimate is not that of another horizon (the check can fail)
    other = enumerate_paths(dyn, starts[0], HORIZON - 4).log_partition(betas)
    assert np.abs(est[:, 0, 0] - other).max() > 0.5


def test_a_curve_without_a_state_box_agrees_with_enumeration() -> None:
    dyn, starts = _cartpole()
    info = CurveInfo("CartPole-v1", {}, HORIZON, dyn.actions.to_dict(), "smc")
    curve = smc_curve(dyn, starts, HORIZON, 400, np.random.default_rng(1), info, rounds=1)
    exact = np.mean(
        [enumerate_paths(dyn, s, HORIZON).log_partition(curve.betas) for s in starts], axis=0
    )
    err = np.abs(curve.value - exact)
    up = curve.betas >= 0.0
    # above random play (beta >= 0) within 0.05 nats everywhere on the grid; below it the rare
    # short episodes carry Z and the look-ahead of one reward finds them less well (measured:
    # 0.9 nats at the most negative betas, where Lambda is below -600)
    assert err[up].max() < 0.05, err[up].max()
    assert err[~up].max() < 1.0, err[~up].max()


def test_the_reward_unit_without_a_grid_comes_from_random_paths() -> None:
    dyn, starts = _cartpole()
    assert reward_unit(dyn, None, np.random.default_rng(0), starts) == pytest.approx(1.0)


class _Declared(PendulumDynamics):
    """Pendulum's simulator that hides its state box and declares its curve method."""

    curve_method = "smc"
    rung_budget = 1000

    def __getattribute__(self, name: str) -> object:
        if name == "state_box":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_simulator_declares_its_curve_method_and_budget() -> None:
    from imitation_meg.approx.smc import particles_for

    dyn = _Declared(gym.make("Pendulum-v1").unwrapped)
    assert not hasattr(dyn, "state_box") and curve_method(dyn) == "smc"
    assert particles_for(dyn, 4, 200) == 8  # the budget's floor, not 2 000 000 / (4 x 200 x 8)


def test_a_curve_is_extended_once_for_returns_beyond_its_reach() -> None:
    """An SMC curve is computed again for a return beyond what its paths found, but not when it
    is itself an extension that tried to reach as far on that side and fell short (each try is
    a whole curve: a callback would pay one per evaluation)."""
    from imitation_meg.approx.deterministic import needs_extension

    dyn, starts = _cartpole()
    info = CurveInfo("CartPole-v1", {}, 6, dyn.actions.to_dict(), "smc")
    curve = smc_curve(dyn, starts, 6, 16, np.random.default_rng(1), info, rounds=0)
    lo, hi = curve.returns_found
    assert not needs_extension(curve, (lo + hi) / 2)
    assert needs_extension(curve, hi + 1.0) and needs_extension(curve, lo - 1.0)
    curve.info.settings["target"] = hi + 0.5  # an extension that fell short of its target
    assert not needs_extension(curve, hi + 0.25) and not needs_extension(curve, hi + 1.0)
    assert needs_extension(curve, lo - 1.0)  # the other side was never tried
    curve.info.settings["target"] = hi - 0.5  # it reached what it aimed at
    assert needs_extension(curve, hi + 1.0)
    curve.info.settings["target"] = lo - 0.5
    assert not needs_extension(curve, lo - 1.0) and needs_extension(curve, hi + 1.0)
    paths = CurveInfo("CartPole-v1", {}, 6, dyn.actions.to_dict(), "paths")
    curve.info = paths  # a splitting curve stands as it is
    assert not needs_extension(curve, hi + 1.0)
