"""Tabular environments seen through observations that are not state indices, with exact MEG.

The approximate estimators only see ``reset`` / ``step`` and observation vectors; these
environments are tabular underneath, so :func:`imitation_meg.meg` on the matching
:class:`~imitation_meg.TabularMDP` gives the exact answer to compare with.

- :class:`TabularGymEnv`: any :class:`~imitation_meg.TabularMDP` as a gymnasium environment
  whose observation of state ``s`` is row ``s`` of a feature matrix (e.g. random features of
  :func:`imitation_meg.envs.random_mdp`).
- :class:`OneHotObservation`, :class:`CoordinateObservation`: gymnasium ``ObservationWrapper`` s
  for grid worlds with ``Discrete`` observations (FrozenLake): one-hot vectors, or the cell's
  ``(row, column)`` scaled to ``[0, 1]``.
- :class:`TablePolicy`: an ``(S, A)`` policy table acting on observations (the state is found by
  its observation row), for epsilon-greedy policies with exact answers.
- :class:`TaxiObservation`: Taxi's state index decoded into one-hot taxi row, column,
  passenger location and destination.
- :class:`JitteredObservation`: a ``Discrete`` state seen through one of many fixed variants of
  its observation (the observation plus a small offset), drawn anew at every step: observations
  that take as many values as CartPole's while the state stays tabular. The scored policy's
  state-level table is the mean over the variants (:func:`state_policy`), exactly.
- :func:`validation_case`: the environments of the validation study and their MDPs: the cases
  the defaults were tuned on (:data:`CASES`) and the held-out families run only after the
  defaults were frozen (:data:`HELD_OUT_CASES`, :data:`EMPIRICAL_HELD_OUT_CASES`,
  :data:`CONTINUOUS_HELD_OUT_CASES`).

The environments and wrappers live in :mod:`~imitation_meg.approx.observations` (importable from
here too); this module holds the validation cases built from them, the scored policies' tables
and their state-level forms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th

from imitation_meg.approx.observations import (
    JITTER_SHARE,
    JITTER_VARIANTS,
    CoordinateObservation,
    JitteredObservation,
    OneHotObservation,
    TabularGymEnv,
    TaxiObservation,
    _grid_spread,
    _point_spread,
    jitter_variants,
)
from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "CASES",
    "CONTINUOUS_CASES",
    "CONTINUOUS_HELD_OUT_CASES",
    "EMPIRICAL_HELD_OUT_CASES",
    "FROZENLAKE6_MAP",
    "HELD_OUT_CASES",
    "JITTER_SHARE",
    "JITTER_VARIANTS",
    "CoordinateObservation",
    "JitteredObservation",
    "OneHotObservation",
    "TablePolicy",
    "TabularGymEnv",
    "TaxiObservation",
    "ValidationCase",
    "jitter_variants",
    "state_policy",
    "stationary_epsilon_greedy",
    "validation_case",
]

#: Names of the validation environments the estimator's defaults were tuned on.
CASES = ("cliffworld_xy", "frozenlake_onehot", "frozenlake_coords", "random_features")
#: Environment families never used for tuning: run only with the frozen defaults
#: (``configs/approx_heldout.yaml``, docs/approx.md).
HELD_OUT_CASES = ("taxi_onehot", "cliffwalking_coords", "seals_random_obs", "branching_onehot")
#: Environment families added for the empirical MDP (``method="empirical"``) after its settings
#: were frozen, and run only with them (``configs/approx_heldout_empirical_new.yaml``).
EMPIRICAL_HELD_OUT_CASES = ("frozenlake8_coords", "riskypath_onehot", "initshift_onehot")
#: Environment families whose observations take as many values as a continuous state's
#: (:class:`JitteredObservation`), added for the settings that score such observations; no
#: estimator has run on them.
CONTINUOUS_HELD_OUT_CASES = (
    "cliffwalking_jitter",
    "taxi_jitter",
    "frozenlake6_jitter",
    "randomtrans_jitter",
)
#: The tuning cases seen through jittered observations (:class:`JitteredObservation`): the
#: cases of :data:`CASES` as observations that take as many values as a continuous state's, for
#: choosing the settings that score such observations (tuning on them is allowed; the families
#: of :data:`CONTINUOUS_HELD_OUT_CASES` then judge the choice).
CONTINUOUS_CASES = tuple(f"{c}_jitter" for c in CASES)
#: The jittered FrozenLake's map: 6 x 6 (slippery), the start in one corner, the goal in the
#: other, eight holes.
FROZENLAKE6_MAP = ("SFFFHF", "FHFFFF", "FFFHFH", "HFFFFF", "FFHFHF", "FHFFFG")


def state_policy(case: ValidationCase, probs: Callable[[np.ndarray], Any]) -> np.ndarray:
    """``(S, A)``: the state-level policy in ``case``'s MDP of ``probs`` (a batch of
    observations ``(n, F)`` to ``(n, A)`` probabilities): the mean over each state's observation
    variants where the case has them (each is drawn with the same probability, so this is
    exact), else its probabilities at each state's observation."""
    if case.variants is None:
        return np.asarray(probs(case.observations), dtype=np.float64)
    S = case.variants.shape[0]
    out = np.zeros((S, case.mdp.n_actions))
    for s in range(S):
        out[s] = np.asarray(probs(case.variants[s]), dtype=np.float64).mean(0)
    return out


#: :meth:`TablePolicy.states` computes at most this many ``(row, state, feature)`` differences
#: at once (128 MiB of float64).
_DISTANCE_BLOCK = 1 << 24


class TablePolicy:
    """An ``(S, A)`` policy table acting on observations: the state is the nearest observation row.

    Args:
        table: ``(S, A)`` probabilities.
        observations: ``(S, F)`` observation of each state (distinct rows).
    """

    def __init__(self, table: Any, observations: np.ndarray) -> None:
        self.table = np.asarray(th.as_tensor(table).double().cpu(), dtype=np.float64)
        self.obs = np.asarray(observations, dtype=np.float64)
        if self.table.ndim != 2 or self.table.shape[0] != self.obs.shape[0]:
            raise ValueError(
                f"table must be (S, A) with S = {self.obs.shape[0]} observation rows, got "
                f"{self.table.shape}."
            )

    def states(self, obs: Any) -> np.ndarray:
        """``(n,)`` the nearest observation row of each of ``obs (n, F)`` (the first at a tie),
        in blocks of rows that keep the distance array under :data:`_DISTANCE_BLOCK` entries."""
        o = np.asarray(obs, dtype=np.float64).reshape(len(obs), -1)
        S, F = self.obs.shape
        step = max(1, _DISTANCE_BLOCK // max(1, S * F))
        out = np.empty(len(o), dtype=np.int64)
        for lo in range(0, len(o), step):
            d = ((o[lo : lo + step, None, :] - self.obs[None]) ** 2).sum(-1)
            out[lo : lo + step] = d.argmin(1)
        return out

    def __call__(self, obs: Any) -> np.ndarray:
        return self.table[self.states(obs)]


def stationary_epsilon_greedy(mdp: TabularMDP, epsilon: float) -> th.Tensor:
    """``(1 - epsilon) * greedy + epsilon * uniform`` ``(S, A)``, greedy for the first decision.

    A stationary policy (the greedy part is the optimal first decision of the finite-horizon
    problem, ties split evenly), so that it can act on observations alone.
    """
    from imitation_meg.core import policies

    greedy = policies.optimal(mdp)[0]
    return (1.0 - epsilon) * greedy + epsilon / mdp.n_actions


@dataclasses.dataclass(frozen=True)
class ValidationCase:
    """A validation environment: a factory, the matching MDP and every state's observation."""

    name: str
    make: Callable[[], gym.Env]
    mdp: TabularMDP
    observations: np.ndarray
    #: ``(S, K, F)`` observation variants of each state (:class:`JitteredObservation`), or None
    variants: np.ndarray | None = None


def validation_case(name: str, *, horizon: int, seed: int = 0) -> ValidationCase:
    """One of :data:`CASES` or :data:`HELD_OUT_CASES` with horizon ``H``.

    - ``cliffworld_xy``: seals ``CliffWorldEnv(width=10, height=4, use_xy_obs=True)``.
    - ``frozenlake_onehot`` / ``frozenlake_coords``: ``FrozenLake-v1`` (slippery 4x4) through
      :class:`OneHotObservation` / :class:`CoordinateObservation`, time limit ``H``.
    - ``random_features``: ``random_mdp(40, 4, H, seed=seed)`` through 6 standard-normal random
      features per state (:class:`TabularGymEnv`).

    Held out (never used for tuning):

    - ``taxi_onehot``: gymnasium's Taxi (500 states, 6 actions, a random start, episodes that
      end at the drop-off) through :class:`TaxiObservation`, time limit ``H``.
    - ``cliffwalking_coords``: gymnasium's CliffWalking (48 states, 4 actions, one start; the
      cliff sends the agent back to it) through :class:`CoordinateObservation`, time limit ``H``.
    - ``seals_random_obs``: seals' ``RandomTransitionEnv`` (30 states, 5 actions, 3 successors,
      a start among 3 states, a utility linear in 5 Gaussian observation features; its
      generator seeded with ``seed``), seen through those features.
    - ``branching_onehot``: seals' ``BranchingEnv`` (3 actions, a path of 5 right choices to a
      rewarding absorbing state, wrong choices to dead ends; 16 states, one start) through
      :class:`OneHotObservation`, its episodes ``H`` decisions long.

    Added for the empirical MDP after its settings were frozen (never run before them):

    - ``frozenlake8_coords``: ``FrozenLake-v1`` on its 8x8 map (slippery, 64 states, one start)
      through :class:`CoordinateObservation`, time limit ``H``.
    - ``riskypath_onehot``: seals' ``RiskyPathEnv`` (4 states, 2 actions, a safe path and a
      risky one that pays -100 with some probability) through :class:`OneHotObservation`.
    - ``initshift_onehot``: seals' ``InitShiftTrainEnv`` (a depth-2 binary tree of 7 states with
      rewards at the leaves, starting at the root) through :class:`OneHotObservation`.

    ``<case>_jitter`` for each of :data:`CASES` (:data:`CONTINUOUS_CASES`): that case, each
    state seen through :data:`JITTER_VARIANTS` variants of its observation (offsets within 0.45
    of the grid's spacing per entry; for ``random_features``, of the nearest two states'
    distance over ``sqrt(6)``).

    Added for observations that take as many values as a continuous state's, each state seen
    through :data:`JITTER_VARIANTS` variants of its observation (:class:`JitteredObservation`;
    ``variants`` holds them, ``observations`` their centres):

    - ``cliffwalking_jitter``: gymnasium's CliffWalking (48 states, 4 actions, one start,
      deterministic moves) through its cell's ``(row, column)`` scaled to ``[0, 1]``, offsets
      within 0.45 of a cell.
    - ``taxi_jitter``: gymnasium's Taxi (500 states, 6 actions, a random start) through the taxi's
      row and column, the passenger's location and the destination, each scaled to ``[0, 1]``,
      offsets within 0.45 of a step.
    - ``frozenlake6_jitter``: ``FrozenLake-v1`` on :data:`FROZENLAKE6_MAP` (slippery, 36
      states, one start) through ``(row, column)`` as the CliffWalking case.
    - ``randomtrans_jitter``: seals' ``RandomTransitionEnv`` (60 states, 3 actions, 2
      successors, a start among 2 states; its generator seeded with ``seed``) through 3
      standard-normal random features per state (drawn with ``seed``), offsets within 0.45 of
      the nearest two states' distance over ``sqrt(3)``.

    Raises:
        ValueError: an unknown name.
    """
    if name == "cliffworld_xy":
        from seals.diagnostics.cliff_world import CliffWorldEnv

        def make() -> gym.Env:
            return CliffWorldEnv(width=10, height=4, horizon=horizon, use_xy_obs=True)

        env: Any = make()
        mdp = TabularMDP.from_env(env)
        obs = np.asarray(env.unwrapped.observation_matrix, dtype=np.float32)
        return ValidationCase(name, make, mdp, obs)
    if name in ("frozenlake_onehot", "frozenlake_coords"):
        wrapper: Any = OneHotObservation if name.endswith("onehot") else CoordinateObservation

        def make() -> gym.Env:
            return wrapper(gym.make("FrozenLake-v1", max_episode_steps=horizon))

        mdp = TabularMDP.from_env("FrozenLake-v1", horizon=horizon)
        return ValidationCase(name, make, mdp, wrapper(gym.make("FrozenLake-v1")).matrix())
    if name == "random_features":
        from imitation_meg.envs import random_mdp

        mdp = random_mdp(40, 4, horizon, seed=seed)
        feats = np.random.default_rng([seed, 1]).standard_normal((40, 6)).astype(np.float32)

        def make() -> gym.Env:
            return TabularGymEnv(mdp, feats)

        return ValidationCase(name, make, mdp, feats)
    held_out = _held_out_case(name, horizon, seed)
    if held_out is not None:
        return held_out
    jittered = _jittered_case(name, horizon, seed)
    if jittered is not None:
        return jittered
    if name in CONTINUOUS_CASES:
        plain = validation_case(name.removesuffix("_jitter"), horizon=horizon, seed=seed)
        return _jittered(plain, seed)
    raise ValueError(
        f"unknown validation case {name!r}; choose from {CASES}, {CONTINUOUS_CASES} or the "
        f"held-out {HELD_OUT_CASES}, {EMPIRICAL_HELD_OUT_CASES} or {CONTINUOUS_HELD_OUT_CASES}."
    )


def _held_out_case(name: str, horizon: int, seed: int) -> ValidationCase | None:
    """The held-out case ``name`` (None for another name)."""
    from imitation_meg.envs import registered_id

    if name in ("taxi_onehot", "cliffwalking_coords"):
        env_id = registered_id("Taxi" if name == "taxi_onehot" else "CliffWalking")

        def wrap(env: gym.Env) -> Any:
            if name == "taxi_onehot":
                return TaxiObservation(env)
            return CoordinateObservation(env, shape=(4, 12))

        def make() -> gym.Env:
            return wrap(gym.make(env_id, max_episode_steps=horizon))

        mdp = TabularMDP.from_env(env_id, horizon=horizon)
        return ValidationCase(name, make, mdp, wrap(gym.make(env_id)).matrix())
    if name == "seals_random_obs":
        from seals.diagnostics.random_trans import RandomTransitionEnv

        def make() -> gym.Env:
            return RandomTransitionEnv(
                n_states=30,
                n_actions=5,
                branch_factor=3,
                horizon=horizon,
                random_obs=True,
                obs_dim=5,
                generator_seed=seed,
            )

        env: Any = make()
        obs = np.asarray(env.unwrapped.observation_matrix, dtype=np.float32)
        return ValidationCase(name, make, TabularMDP.from_env(env), obs)
    if name == "frozenlake8_coords":

        def make() -> gym.Env:
            env = gym.make("FrozenLake-v1", map_name="8x8", max_episode_steps=horizon)
            return CoordinateObservation(env, shape=(8, 8))

        plain = gym.make("FrozenLake-v1", map_name="8x8")
        mdp = TabularMDP.from_env(plain, horizon=horizon)
        return ValidationCase(name, make, mdp, CoordinateObservation(plain, shape=(8, 8)).matrix())
    if name in ("riskypath_onehot", "initshift_onehot"):
        from seals.diagnostics.init_shift import InitShiftTrainEnv
        from seals.diagnostics.risky_path import RiskyPathEnv

        cls: Any = RiskyPathEnv if name == "riskypath_onehot" else InitShiftTrainEnv

        def seals_env() -> Any:
            env = cls()
            env.horizon = horizon  # seals leaves these without an episode length
            return env

        def make() -> gym.Env:
            return OneHotObservation(seals_env())

        mdp = TabularMDP.from_env(seals_env())
        return ValidationCase(name, make, mdp, OneHotObservation(seals_env()).matrix())
    if name == "branching_onehot":
        from seals.diagnostics.branching import BranchingEnv

        def branching() -> Any:
            env = BranchingEnv(branch_factor=3, length=5)
            env.horizon = horizon  # seals' own episode length (its constructor fixes None)
            return env

        def make() -> gym.Env:
            return OneHotObservation(branching())

        mdp = TabularMDP.from_env(branching())
        return ValidationCase(name, make, mdp, OneHotObservation(branching()).matrix())
    return None


def _jittered_case(name: str, horizon: int, seed: int) -> ValidationCase | None:
    """The jittered case ``name`` (:data:`CONTINUOUS_HELD_OUT_CASES`; None for another name)."""
    from imitation_meg.envs import registered_id

    state_of: Callable[[Any], int] | None = None
    if name in ("cliffwalking_jitter", "frozenlake6_jitter"):
        if name == "cliffwalking_jitter":
            env_id, shape = registered_id("CliffWalking"), (4, 12)
            kwargs: dict[str, Any] = {}
        else:
            env_id, shape = "FrozenLake-v1", (6, 6)
            kwargs = {"desc": list(FROZENLAKE6_MAP)}

        def plain(steps: int | None = None) -> gym.Env:
            return gym.make(env_id, max_episode_steps=steps, **kwargs)

        centres = CoordinateObservation(plain(), shape=shape).matrix()
    elif name == "taxi_jitter":
        env_id = registered_id("Taxi")

        def plain(steps: int | None = None) -> gym.Env:
            return gym.make(env_id, max_episode_steps=steps)

        taxi: Any = plain().unwrapped
        parts = np.array([list(taxi.decode(s)) for s in range(500)], dtype=np.float64)
        centres = (parts / np.array([4.0, 4.0, 4.0, 3.0])).astype(np.float32)
    elif name == "randomtrans_jitter":
        from seals.diagnostics.random_trans import RandomTransitionEnv

        def plain(steps: int | None = None) -> gym.Env:
            return RandomTransitionEnv(
                n_states=60,
                n_actions=3,
                branch_factor=2,
                horizon=horizon if steps is None else steps,
                random_obs=False,
                generator_seed=seed,
            )

        centres = np.random.default_rng([seed, 4]).standard_normal((60, 3)).astype(np.float32)
        state_of = lambda obs: int(np.argmax(obs))  # noqa: E731  (seals' one-hot state)
    else:
        return None
    mdp = TabularMDP.from_env(plain(horizon), horizon=horizon)
    return _jitter(name, lambda: plain(horizon), mdp, centres, seed, state_of)


def _jittered(case: ValidationCase, seed: int) -> ValidationCase:
    """``case`` with each state seen through variants of its observation (the wrapped
    environment's observation names the state)."""
    centres = np.asarray(case.observations, dtype=np.float32)
    index = {row.tobytes(): i for i, row in enumerate(centres)}

    def state_of(obs: Any) -> int:
        return index[np.asarray(obs, dtype=np.float32).tobytes()]

    return _jitter(f"{case.name}_jitter", case.make, case.mdp, centres, seed, state_of)


def _jitter(
    name: str,
    plain: Callable[[], gym.Env],
    mdp: TabularMDP,
    centres: np.ndarray,
    seed: int,
    state_of: Callable[[Any], int] | None,
) -> ValidationCase:
    """The case whose environment shows each state of ``plain()`` through
    :data:`JITTER_VARIANTS` variants of its row of ``centres`` ``(S, F)``: offsets within
    :data:`JITTER_SHARE` of the grid's spacing per entry where every entry takes few values (a
    grid), else within that share of the nearest two rows' distance over ``sqrt(F)``."""
    on_grid = all(len(np.unique(col)) <= 20 for col in centres.T)
    spread: Any = _grid_spread(centres) if on_grid else _point_spread(centres)
    variants = jitter_variants(centres, spread, n_variants=JITTER_VARIANTS, seed=seed)

    def make() -> gym.Env:
        return JitteredObservation(plain(), variants, state_of)

    return ValidationCase(name, make, mdp, centres, variants)
