"""Continuous-action test problems: random smooth MDPs and a gymnasium view of any of them.

- :func:`random_continuous_mdp`: ``S`` states, a ``d``-dimensional box, transitions
  :class:`~imitation_meg.continuous.mdp.SmoothTransition` and a utility
  :class:`~imitation_meg.continuous.mdp.QuadraticUtility` with random parameters (analytic in
  the action, so the quadrature converges exponentially), random feature observations.
- :class:`ContinuousTabularEnv`: a :class:`~imitation_meg.continuous.ContinuousMDP` as a
  gymnasium environment with a ``Box`` action space and the state's observation row as
  observation: SB3 agents train on it, and their exact MEG is known.
- :class:`ObservedStatesEnv`: what it shares with the ``Discrete`` validation environments
  (:class:`~imitation_meg.approx.envs.TabularGymEnv`): states seen through observation rows, and
  the start draw.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from imitation_meg.continuous.densities import ActionLaw, ContinuousPolicyFn, uniform_policy
from imitation_meg.continuous.mdp import ContinuousMDP, QuadraticUtility, SmoothTransition
from imitation_meg.continuous.policies import GaussianPolicy
from imitation_meg.type_aliases import ArrayLike

__all__ = ["ContinuousTabularEnv", "ObservedStatesEnv", "random_continuous_mdp", "table_policy"]


def random_continuous_mdp(
    n_states: int,
    action_dim: int,
    horizon: int,
    *,
    seed: int = 0,
    low: float = -1.0,
    high: float = 1.0,
    sharpness: float = 1.5,
    n_features: int = 4,
) -> ContinuousMDP:
    """A random smooth continuous-action MDP.

    Transition logits ``W0[s, s'] + sum_f W[s, s', f] phi_f(x)`` (``x`` the action normalised to
    ``[-1, 1]``, ``phi`` its coordinates and squares) with ``W0`` standard normal and ``W`` normal
    with standard deviation ``sharpness``; utility ``c[s] + g[s] . x - sum_k h[s, k] (x_k -
    m[s, k])^2`` with ``c, g`` standard normal, ``h`` uniform in ``[0.5, 2]`` and peaks ``m``
    uniform in ``[-0.8, 0.8]``; a random initial distribution; observations ``(S, n_features)``
    standard normal.

    Args:
        n_states: ``S``.
        action_dim: ``d`` (1 to 3).
        horizon: ``H``.
        seed: the seed.
        low, high: the box ``[low, high]^d``.
        sharpness: how strongly the action steers the transitions.
        n_features: observation size.
    """
    for nm, v in (("n_states", n_states), ("action_dim", action_dim)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}.")
    if action_dim > 3:
        raise ValueError(
            f"action_dim must be 1 to 3 for the quadrature reference, got {action_dim}."
        )
    rng = np.random.default_rng([int(seed), 42])
    S, d = int(n_states), int(action_dim)
    lo = np.full(d, float(low))
    hi = np.full(d, float(high))
    F = 2 * d + (1 if d == 2 else 0)
    trans = SmoothTransition(
        rng.standard_normal((S, S)), sharpness * rng.standard_normal((S, S, F)), lo, hi
    )
    util = QuadraticUtility(
        rng.standard_normal(S),
        rng.standard_normal((S, d)),
        rng.uniform(0.5, 2.0, (S, d)),
        rng.uniform(-0.8, 0.8, (S, d)),
        lo,
        hi,
    )
    p0 = rng.dirichlet(np.ones(S))
    obs = rng.standard_normal((S, int(n_features))).astype(np.float32)
    return ContinuousMDP(
        S,
        lo,
        hi,
        horizon,
        trans,
        util,
        p0,
        observations=obs,
        name=f"random_continuous(S={S}, d={d}, H={horizon}, seed={seed})",
    )


class ObservedStatesEnv(gym.Env):
    """A finite-state MDP as a gymnasium environment whose observation of state ``s`` is the
    row ``obs_matrix[s]``: ``reset`` draws ``s_0`` from ``_p0`` (a subclass sets both and the
    step; ``_s`` and ``_t`` are the state and the decisions taken)."""

    obs_matrix: np.ndarray
    _p0: np.ndarray
    _s: int = 0
    _t: int = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._s = int(self.np_random.choice(self._p0.size, p=self._p0 / self._p0.sum()))
        self._t = 0
        return self.obs_matrix[self._s].copy(), {"state": self._s}


class ContinuousTabularEnv(ObservedStatesEnv):
    """A :class:`ContinuousMDP` as a gymnasium environment.

    ``reset`` draws ``s_0 ~ p0``; ``step(a)`` pays ``r(s, a)`` (the MDP's utility; actions
    outside the box are refused), draws ``s' ~ T(s, a)`` and truncates after ``H`` decisions.
    The observation of state ``s`` is ``observations[s]`` (the MDP's, or one-hot).

    Args:
        mdp: the MDP (with a utility).
        observations: ``(S, F)`` rows; default the MDP's, else one-hot.
    """

    def __init__(self, mdp: ContinuousMDP, observations: ArrayLike | None = None) -> None:
        self.metadata = {"render_modes": []}
        if mdp.utility is None:
            raise ValueError(f"{mdp.name} has no utility to pay as reward.")
        obs = observations if observations is not None else mdp.observations
        if obs is None:
            obs = np.eye(mdp.n_states, dtype=np.float32)
        self.obs_matrix = np.asarray(obs, dtype=np.float32)
        if self.obs_matrix.shape[0] != mdp.n_states or self.obs_matrix.ndim != 2:
            raise ValueError(
                f"observations must be (S, F) with S = {mdp.n_states}, got {self.obs_matrix.shape}."
            )
        self.mdp = mdp
        self.horizon = mdp.horizon
        self.observation_space = gym.spaces.Box(
            self.obs_matrix.min(0) - 1.0, self.obs_matrix.max(0) + 1.0, dtype=np.float32
        )
        self.action_space = gym.spaces.Box(
            mdp.low.astype(np.float32), mdp.high.astype(np.float32), dtype=np.float32
        )
        self._p0 = mdp.initial_state_dist.numpy()
        self._utility = mdp.utility
        self._transition = mdp._transition

    def step(self, action: ArrayLike) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float64).reshape(1, -1)
        slack = 1e-6 * (self.mdp.high - self.mdp.low)
        if (
            a.shape[1] != self.mdp.action_dim
            or np.any(a < self.mdp.low - slack)
            or np.any(a > self.mdp.high + slack)
        ):
            raise ValueError(
                f"action {a.ravel()} is outside the box [{self.mdp.low}, {self.mdp.high}]; clip "
                "or squash it (SB3 does for its policies)."
            )
        a = np.clip(a, self.mdp.low, self.mdp.high)
        s = self._s
        # the functions were checked when the MDP was built: call them without re-checking,
        # through their numpy form for one action when they have one
        if hasattr(self._utility, "one"):
            r = self._utility.one(s, a[0])
        else:
            r = float(self._utility(th.tensor([s]), th.as_tensor(a))[0])
        if hasattr(self._transition, "one"):
            p = self._transition.one(s, a[0])
        else:
            p = np.asarray(self._transition(th.tensor([s]), th.as_tensor(a))[0], dtype=np.float64)
        self._s = min(
            int(np.searchsorted(np.cumsum(p), self.np_random.random() * p.sum())), p.size - 1
        )
        self._t += 1
        return self.obs_matrix[self._s].copy(), r, False, self._t >= self.horizon, {"state": s}


def table_policy(
    policy: GaussianPolicy | str, mdp: ContinuousMDP, observations: ArrayLike | None = None
) -> ContinuousPolicyFn:
    """A stationary tabular policy acting on observations (the state is the nearest
    observation row), for the estimator's validation against the exact answers.

    Args:
        policy: a stationary :class:`GaussianPolicy`, or ``"uniform"``.
        mdp: the MDP.
        observations: ``(S, F)`` rows (default the MDP's).

    Raises:
        ValueError: a time-dependent policy, or no observations.
    """
    if isinstance(policy, str):
        if policy != "uniform":
            raise ValueError(f"policy must be a GaussianPolicy or 'uniform', got {policy!r}.")
        return uniform_policy(mdp.low, mdp.high)
    if policy.time_dependent:
        raise ValueError("a policy acting on observations alone must be stationary, (S, d) tables.")
    obs = observations if observations is not None else mdp.observations
    if obs is None:
        raise ValueError(f"{mdp.name} has no observations: pass observations=(S, F).")
    rows = np.asarray(obs, dtype=np.float64)
    mean, std = policy.mean.numpy(), policy.std.numpy()

    def law(batch: Any) -> ActionLaw:
        o = np.asarray(batch, dtype=np.float64).reshape(len(batch), -1)
        s = ((o[:, None, :] - rows[None]) ** 2).sum(-1).argmin(1)
        return ActionLaw(policy.kind, mean[s], std[s], mdp.low, mdp.high)

    return ContinuousPolicyFn(law, mdp.low, mdp.high, name=policy.name, kind=policy.kind)
