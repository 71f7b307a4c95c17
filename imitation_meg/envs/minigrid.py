"""Fixed-layout MiniGrid environments as exact tabular MDPs.

A MiniGrid environment whose layout a reset seed fixes is a finite deterministic MDP: its state
is the agent's cell and direction, what it carries, where every object lies and the state of
the doors and boxes (plus whether the episode has ended). :func:`minigrid_mdp` enumerates the
states reachable from the reset state by breadth-first search over every action (``left``,
``right``, ``forward``, ``pickup``, ``drop``, ``toggle``, ``done``), stepping the environment
itself from each restored state, so the transitions are MiniGrid's own. A state entered on a
terminating step is absorbing.

**Utility.** MiniGrid rewards success with ``1 - 0.9 * step_count / max_steps``: the reward
depends on the time. With ``M = max_steps`` and horizon ``H <= M``, the time-independent
state-action utility

    r(s, a) = (1 - 0.9 H / M) * [a from s succeeds] + (0.9 / M) * [s is a success end state]

gives every trajectory exactly MiniGrid's return (a success at decision ``t`` earns the entry
reward once and ``0.9 / M`` at each of the ``H - t - 1`` remaining decisions: in total
``1 - 0.9 (t + 1) / M``; a failure earns 0). The dynamics are deterministic, so soft-optimal
policies depend on the rewards only through the returns of whole trajectories, and MEG of this
utility *is* MEG of MiniGrid's time-dependent reward (``utility="reward"``, the default; a test
checks it against an MDP whose states carry the time). ``utility="success"`` is the undiscounted
success indicator instead.

**Observations.** Each state's observation is what the wrapped environment would emit there:
the environment's own ``gen_obs()`` passed through the observation wrappers (``ImgObsWrapper``,
``FlatObsWrapper``, ``FullyObsWrapper``, ``RGBImgPartialObsWrapper``, ...), stored as the MDP's
``observation_matrix`` ``(S, *obs_shape)``, so :func:`imitation_meg.adapters.policy_table`
reads SB3 agents trained on them. ``observation=`` names a standard stack
(:data:`OBSERVATIONS`) or ``"auto"`` with the agent's ``observation_space``.

**Refused.** Moving obstacles (``DynamicObstaclesEnv``: random dynamics), BabyAI levels (their
instructions keep progress outside the grid), environments whose ``step`` or ``_reward`` this
module has not been checked against (``allow_unverified=True`` accepts a ``step`` that reads
only the grid, the agent and attributes fixed at reset), wrappers that change dynamics
(``NoDeath``, ``StochasticActionWrapper``) or whose effect on observations is unknown, and state
spaces past ``max_states``.

The search lives in :mod:`~imitation_meg.envs.minigrid_search` and the checks of environments,
wrappers and observation stacks in :mod:`~imitation_meg.envs.minigrid_wrappers`; their public
names are importable from here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg.core.mdp import TabularMDP
from imitation_meg.envs.minigrid_search import (
    _SUCCEEDED,
    _enumerate,
    _Enumeration,
    _is_int,
    _Layout,
    _layout,
    _observations,
    _start_keys,
)
from imitation_meg.envs.minigrid_wrappers import (
    OBSERVATIONS,
    VERIFIED_STEPS,
    _auto_observation,
    _check_env,
    _wrapper_chain,
    wrap_observation,
)
from imitation_meg.type_aliases import EnvLike

__all__ = [
    "MAX_STATES",
    "OBSERVATIONS",
    "VERIFIED_STEPS",
    "agent_cells",
    "minigrid_mdp",
    "minigrid_target",
    "wrap_observation",
]

#: Default limit on the number of enumerated states (each costs ``|A|`` environment steps).
MAX_STATES = 200_000


def _make(env: Any, make_kwargs: dict[str, Any]) -> Any:
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    from imitation_meg.core.env_tables import make_env  # the one gymnasium.make wrapper

    return make_env(env, make_kwargs)


def minigrid_mdp(
    env: EnvLike,
    *,
    seed: int = 0,
    horizon: int | None = None,
    utility: str = "reward",
    observation: str | None = None,
    observation_space: Any = None,
    agent_starts: Sequence[Any] | None = None,
    max_states: int = MAX_STATES,
    allow_unverified: bool = False,
    dtype: th.dtype = th.float64,
    device: th.device | str | None = None,
    **make_kwargs: Any,
) -> TabularMDP:
    """A fixed-layout MiniGrid environment as an exact :class:`TabularMDP` (see the module doc).

    Args:
        env: a registered id (``"MiniGrid-DoorKey-5x5-v0"``) or an environment, wrapped or not.
        seed: the reset seed that fixes the layout.
        horizon: number of decisions ``H``; default and maximum the environment's
            ``max_steps`` (where MiniGrid truncates).
        utility: ``"reward"`` (MiniGrid's time-dependent success reward, exactly; see the
            module doc) or ``"success"`` (1 on the step that succeeds).
        observation: an observation stack of :data:`OBSERVATIONS` to wrap the environment in
            (``"image"``, ``"flat"``, ``"full"``, ``"rgb"``, ``"rgb-full"``), ``"auto"`` (the
            one whose space equals ``observation_space``), or None (the environment's own
            wrappers).
        observation_space: the agent's observation space, for ``observation="auto"``.
        agent_starts: ``[((x, y), direction), ...]``: start the agent in each of these with
            equal probability (an intervention on the initial state; the layout stays the
            seed's), each listed once, on cells an agent can stand on that do not end the
            episode (not a wall, key, box or closed door; not a goal or lava). Default the
            reset's own start.
        max_states: refuse layouts with more reachable states.
        allow_unverified: accept an environment whose ``step`` is not in
            :data:`VERIFIED_STEPS` (see the module doc).
        dtype, device: tensor options of the MDP.
        **make_kwargs: forwarded to ``gymnasium.make`` for an id.

    Returns:
        A :class:`TabularMDP` with a ``(S, A)`` utility, ``p0`` on the start states, the
        per-state observations as ``observation_matrix`` (None when the outermost observation
        is MiniGrid's dict), and ``metadata`` holding ``agent_pos (S, 2)``, ``agent_dir (S,)``,
        ``carrying (S,)`` (object type or ``""``), ``terminal (S,)`` (0 live, 1 failed, 2
        succeeded), ``success (S, A)``, ``parent (S,)`` / ``parent_action (S,)`` / ``depth
        (S,)`` (a shortest path from a start), ``goal_cells``, ``lava_cells``,
        ``grid_size`` ``(width, height)``, ``max_steps``, ``seed``, ``env_id``,
        ``observation`` and ``enumeration_seconds``.

    Raises:
        TypeError: not a MiniGrid environment; an unknown wrapper; a seed or start that is not
            an integer.
        ValueError: refused environments and wrappers (see the module doc), more than
            ``max_states`` states, a horizon above ``max_steps``, a negative seed, bad starts
            (off the grid, on a cell where no agent stands or where the episode ends, listed
            twice) or options.

    Example:
        >>> mdp = minigrid_mdp("MiniGrid-Empty-5x5-v0", seed=0, observation="image")
        >>> mdp.n_states, mdp.n_actions, mdp.horizon
        (34, 7, 100)
    """
    t0 = time.perf_counter()
    _check_options(utility, max_states, seed, allow_unverified)
    made: Any = _make(env, make_kwargs)  # a gymnasium environment
    env_id = getattr(getattr(made, "spec", None), "id", None) or type(made.unwrapped).__name__
    u = made.unwrapped
    _check_env(u, allow_unverified)
    if observation == "auto":
        observation = _auto_observation(made, observation_space)
    if observation is not None:
        made = wrap_observation(made, observation)
    wrappers = _wrapper_chain(made)
    M = int(u.max_steps)
    H = _horizon(horizon, M)
    u.reset(seed=int(seed))
    layout = _layout(u)
    starts = _start_keys(layout, agent_starts)
    en = _enumerate(layout, starts, max_states)
    obs = _observations(layout, wrappers, en.keys)
    S, A = en.next_state.shape
    p0 = np.zeros(S)
    p0[: len(starts)] = 1.0 / len(starts)
    layout.restore(starts[0])
    metadata = {
        "env_id": env_id,
        "seed": int(seed),
        "max_steps": M,
        "utility": utility,
        "observation": observation,
        **_state_metadata(layout, en),
        "enumeration_seconds": time.perf_counter() - t0,
    }
    return TabularMDP(
        (en.next_state[..., None], np.ones((S, A, 1))),
        _utility(en, utility, H, M),
        int(H),
        p0,
        1.0,
        dtype=dtype,
        device=device,
        observation_matrix=obs,
        name=f"{env_id}(seed={seed})",
        metadata=metadata,
    )


def _check_options(utility: Any, max_states: Any, seed: Any, allow_unverified: Any) -> None:
    if utility not in ("reward", "success"):
        raise ValueError(f"utility must be 'reward' or 'success', got {utility!r}.")
    if isinstance(max_states, bool) or not isinstance(max_states, int) or max_states < 1:
        raise ValueError(f"max_states must be a positive integer, got {max_states!r}.")
    if not _is_int(seed):
        raise TypeError(
            f"seed must be a non-negative integer (the reset seed that fixes the layout), got "
            f"{seed!r} ({type(seed).__name__})."
        )
    if seed < 0:
        raise ValueError(
            f"seed must be a non-negative integer (the reset seed that fixes the layout), got "
            f"{seed}."
        )
    if not isinstance(allow_unverified, (bool, np.bool_)):
        raise TypeError(f"allow_unverified must be True or False, got {allow_unverified!r}.")


def _horizon(horizon: Any, max_steps: int) -> int:
    """The number of decisions: ``max_steps`` by default, at most ``max_steps``."""
    H = max_steps if horizon is None else horizon
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or not 1 <= H <= max_steps:
        raise ValueError(
            f"horizon must be an integer in [1, max_steps={max_steps}] (MiniGrid truncates "
            f"episodes at max_steps), got {horizon!r}."
        )
    return int(H)


def _utility(en: _Enumeration, utility: str, H: int, M: int) -> np.ndarray:
    """The ``(S, A)`` utility: MiniGrid's reward made time-independent, or the success."""
    success = en.success.astype(np.float64)
    if utility != "reward":
        return success
    terminal = np.asarray(en.terminal, dtype=np.int64)
    return (1.0 - 0.9 * H / M) * success + (0.9 / M) * (terminal == _SUCCEEDED)[:, None]


def _state_metadata(layout: _Layout, en: _Enumeration) -> dict[str, Any]:
    """What each state is (agent, carried object, terminal kind, a shortest path) and the grid."""
    u = layout.env
    return {
        # Not "grid_shape": the states are not row-major cells (grid_target would misread them).
        "grid_size": (int(u.width), int(u.height)),
        "agent_pos": np.asarray([k[0] for k in en.keys], dtype=np.int64),
        "agent_dir": np.asarray([k[1] for k in en.keys], dtype=np.int64),
        "carrying": np.asarray(
            ["" if k[2] < 0 else layout.objects[k[2]].type for k in en.keys], dtype=object
        ),
        "terminal": np.asarray(en.terminal, dtype=np.int64),
        "success": en.success,
        "parent": np.asarray(en.parent, dtype=np.int64),
        "parent_action": np.asarray(en.parent_action, dtype=np.int64),
        "depth": np.asarray(en.depth, dtype=np.int64),
        "goal_cells": _cells_of(u, "goal"),
        "lava_cells": _cells_of(u, "lava"),
    }


def _cells_of(u: Any, kind: str) -> list[tuple[int, int]]:
    """``(x, y)`` of the cells holding objects of type ``kind`` in the current grid."""
    return [
        (i % u.width, i // u.width)
        for i, o in enumerate(u.grid.grid)
        if o is not None and o.type == kind
    ]


def minigrid_target(mdp: TabularMDP, kind: str = "cell") -> list[Any]:
    """A target variable of each state of an MDP built by :func:`minigrid_mdp`, for
    :func:`imitation_meg.meg_target`: ``"cell"`` (the agent's ``(x, y)``), ``"row"`` (``y``),
    ``"column"`` (``x``) or ``"goal"`` (whether the agent stands on a goal square).

    Raises:
        ValueError: an MDP without MiniGrid metadata, or an unknown kind.
    """
    cells = agent_cells(mdp)
    if kind == "cell":
        return list(cells)
    if kind == "row":
        return [y for _x, y in cells]
    if kind in ("column", "col"):
        return [x for x, _y in cells]
    if kind == "goal":
        goals = {tuple(c) for c in mdp.metadata.get("goal_cells", [])}
        return [c in goals for c in cells]
    raise ValueError(f"kind must be 'cell', 'row', 'column' or 'goal', got {kind!r}.")


def agent_cells(mdp: TabularMDP) -> list[tuple[int, int]]:
    """The agent's ``(x, y)`` in each state of an MDP built by :func:`minigrid_mdp`: a target
    for :func:`imitation_meg.meg_target` (every utility of the agent's cell).

    Raises:
        ValueError: an MDP without MiniGrid metadata.
    """
    pos = mdp.metadata.get("agent_pos")
    if pos is None:
        raise ValueError(f"{mdp.name} was not built by minigrid_mdp (no agent_pos metadata).")
    return [(int(x), int(y)) for x, y in np.asarray(pos)]
