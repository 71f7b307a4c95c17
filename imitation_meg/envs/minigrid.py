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
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg.core.mdp import TabularMDP
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

#: Standard observation stacks: name -> wrapper class names, innermost first.
OBSERVATIONS: dict[str, tuple[str, ...]] = {
    "image": ("ImgObsWrapper",),
    "flat": ("FlatObsWrapper",),
    "full": ("FullyObsWrapper", "ImgObsWrapper"),
    "rgb": ("RGBImgPartialObsWrapper", "ImgObsWrapper"),
    "rgb-full": ("RGBImgObsWrapper", "ImgObsWrapper"),
}

#: ``module:Class`` of the ``step`` implementations whose use of state the lockstep tests check:
#: each reads only the grid, the agent, what it carries and attributes fixed at reset.
VERIFIED_STEPS = (
    "minigrid.minigrid_env:MiniGridEnv",
    "minigrid.envs.unlock:UnlockEnv",
    "minigrid.envs.keycorridor:KeyCorridorEnv",
)

# Wrappers that neither change observations nor dynamics (bookkeeping, checks, time limits).
_PASSTHROUGH = frozenset(
    {"TimeLimit", "OrderEnforcing", "PassiveEnvChecker", "RecordEpisodeStatistics", "Monitor"}
)
# Observation wrappers whose ``observation`` keeps state of its own, or wrappers that change
# the dynamics: refused with the reason.
_REFUSED_WRAPPERS = {
    "NoDeath": "it changes what lava does (the MDP would not be the wrapped environment's)",
    "StochasticActionWrapper": "it replaces actions at random",
    "ActionBonus": "it adds a count-based bonus that depends on the episode's history",
    "PositionBonus": "it adds a count-based bonus that depends on the episode's history",
    "ReseedWrapper": "it chooses the layout at each reset; pass seed= instead",
}
# Cells whose entry ends the episode (MiniGrid's step terminates there): no start stands on one.
_ENDING_CELLS = ("goal", "lava")
# Terminal kinds of a state.
_LIVE, _FAILED, _SUCCEEDED = 0, 1, 2


@dataclasses.dataclass
class _Layout:
    """The objects of one reset and how to write a state back into the environment."""

    env: Any  # the unwrapped MiniGridEnv
    objects: list[Any]  # every WorldObj of the reset (grid, carried, inside boxes)
    index: dict[int, int]  # id(obj) -> position in objects
    mutable: list[int]  # objects whose class toggles (doors, boxes): their attributes are state
    attrs: list[tuple[str, ...]]  # the state attributes of each mutable object

    def key(self) -> tuple[Any, ...]:
        """The environment's current state, hashable: agent, carried object, cells, toggles."""
        u, index = self.env, self.index
        try:
            cells = tuple(-1 if o is None else index[id(o)] for o in u.grid.grid)
            carrying = -1 if u.carrying is None else index[id(u.carrying)]
        except KeyError as e:
            raise ValueError(
                f"{type(u).__name__} created a new object while stepping; only environments "
                "whose objects all exist after reset can be enumerated."
            ) from e
        toggles = tuple(
            tuple(self._value(getattr(self.objects[i], a)) for a in names)
            for i, names in zip(self.mutable, self.attrs, strict=True)
        )
        pos = u.agent_pos
        return (int(pos[0]), int(pos[1])), int(u.agent_dir), carrying, cells, toggles

    def _value(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, int, str, float)):
            return v
        if id(v) in self.index:
            return ("obj", self.index[id(v)])
        raise ValueError(
            f"a door or box attribute holds a {type(v).__name__}; only plain values and "
            "objects of the layout can be enumerated."
        )

    def restore(self, key: tuple[Any, ...]) -> None:
        """Write the state ``key`` (from :meth:`key`) back into the environment."""
        u, objs = self.env, self.objects
        pos, direction, carrying, cells, toggles = key
        u.agent_pos = pos
        u.agent_dir = direction
        u.carrying = None if carrying < 0 else objs[carrying]
        u.grid.grid[:] = [None if i < 0 else objs[i] for i in cells]
        for i, names, values in zip(self.mutable, self.attrs, toggles, strict=True):
            obj = objs[i]
            for name, v in zip(names, values, strict=True):
                setattr(obj, name, objs[v[1]] if isinstance(v, tuple) else v)


def _layout(u: Any) -> _Layout:
    from minigrid.core.world_object import WorldObj

    objects: list[Any] = []
    index: dict[int, int] = {}

    def add(o: Any) -> None:
        while o is not None and id(o) not in index:
            index[id(o)] = len(objects)
            objects.append(o)
            o = getattr(o, "contains", None)

    for o in u.grid.grid:
        add(o)
    add(u.carrying)
    mutable, attrs = [], []
    for i, o in enumerate(objects):
        if type(o).toggle is not WorldObj.toggle:
            mutable.append(i)
            attrs.append(tuple(sorted(k for k in vars(o) if k not in ("cur_pos", "init_pos"))))
    return _Layout(u, objects, index, mutable, attrs)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _check_env(u: Any, allow_unverified: bool) -> None:
    """Refuse what cannot be enumerated exactly (see the module docstring)."""
    from minigrid.minigrid_env import MiniGridEnv

    if not isinstance(u, MiniGridEnv):
        raise TypeError(
            f"minigrid_mdp needs a MiniGrid environment, got {type(u).__name__}; for seals and "
            "toy-text environments use TabularMDP.from_env."
        )
    names = {c.__name__ for c in type(u).__mro__}
    if "DynamicObstaclesEnv" in names:
        raise ValueError(
            f"{type(u).__name__} moves its obstacles at random at every step (random dynamics "
            "over obstacle positions that this enumeration does not express); it cannot be "
            "scored exactly."
        )
    if "RoomGridLevel" in names or type(u).__module__.startswith("minigrid.envs.babyai"):
        raise ValueError(
            f"{type(u).__name__} is a BabyAI level: its instructions keep their progress outside "
            "the grid, so its states cannot be enumerated from the grid alone."
        )
    if type(u)._reward is not MiniGridEnv._reward:
        raise ValueError(
            f"{type(u).__name__} overrides _reward; the exact utility assumes MiniGrid's "
            "1 - 0.9 * step_count / max_steps."
        )
    owner = next(c for c in type(u).__mro__ if "step" in vars(c))
    if _class_path(owner) not in VERIFIED_STEPS and not allow_unverified:
        raise ValueError(
            f"{type(u).__name__}'s step ({_class_path(owner)}) is not among the verified ones "
            f"{list(VERIFIED_STEPS)}; if it reads only the grid, the agent, what it carries and "
            "attributes fixed at reset, pass allow_unverified=True (and check the MDP against "
            "the environment, as tests/envs/test_minigrid.py does)."
        )


def _wrapper_chain(env: Any) -> list[Any]:
    """The wrappers of ``env``, innermost first, checked for what they do to observations."""
    import gymnasium as gym

    chain = []
    w = env
    while isinstance(w, gym.Wrapper):
        chain.append(w)
        w = w.env
    chain.reverse()
    for w in chain:
        name = type(w).__name__
        if name in _REFUSED_WRAPPERS:
            raise ValueError(f"cannot enumerate through {name}: {_REFUSED_WRAPPERS[name]}.")
        if not isinstance(w, gym.ObservationWrapper) and name not in _PASSTHROUGH:
            raise TypeError(
                f"the environment is wrapped in {name}, which is not an observation wrapper; "
                "its effect on observations and dynamics is unknown. Pass the environment "
                f"without it (known pass-through wrappers: {sorted(_PASSTHROUGH)})."
            )
    return [w for w in chain if isinstance(w, gym.ObservationWrapper)]


def wrap_observation(env: Any, observation: str) -> Any:
    """``env`` wrapped in the observation stack named ``observation`` (:data:`OBSERVATIONS`).

    Raises:
        ValueError: an unknown name.
    """
    import minigrid.wrappers as mw

    if observation not in OBSERVATIONS:
        raise ValueError(
            f"unknown observation {observation!r}; choose from {sorted(OBSERVATIONS)} or 'auto' "
            "with observation_space=, or wrap the environment yourself."
        )
    with _quiet_forwarding():
        for name in OBSERVATIONS[observation]:
            env = getattr(mw, name)(env)
    return env


@contextlib.contextmanager
def _quiet_forwarding() -> Iterator[None]:
    """Silence gymnasium 0.29's warning that a wrapper forwards an attribute (``env.width``,
    ``env.get_frame``): minigrid 2.3's own wrappers read them so, not the caller's code."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=".*to get variables from other wrappers is deprecated",
            category=UserWarning,
            module="gymnasium.core",
        )
        yield


def _auto_observation(env: Any, space: Any) -> str:
    """The stack of :data:`OBSERVATIONS` whose observation space equals ``space``."""
    if space is None:
        raise ValueError("observation='auto' needs observation_space= (the agent's space).")
    found = []
    for name in OBSERVATIONS:
        s = wrap_observation(env, name).observation_space
        shape = tuple(s.shape or ())
        # SB3 CNN policies observe images channel-first (VecTransposeImage).
        shapes = {shape} | ({(shape[2], *shape[:2])} if len(shape) == 3 else set())
        if tuple(space.shape or ()) in shapes and s.dtype == space.dtype:
            found.append(name)
    if len(found) != 1:
        options = {n: tuple(wrap_observation(env, n).observation_space.shape) for n in OBSERVATIONS}
        raise ValueError(
            f"the agent observes {space}; {'several' if found else 'none'} of the standard "
            f"observation stacks match ({options}); pass observation=<name> or the wrapped "
            "environment."
        )
    return found[0]


def _make(env: Any, make_kwargs: dict[str, Any]) -> Any:
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    from imitation_meg.core.env_tables import make_env  # the one gymnasium.make wrapper

    return make_env(env, make_kwargs)


@dataclasses.dataclass
class _Enumeration:
    keys: list[tuple[Any, ...]]
    terminal: list[int]
    next_state: np.ndarray  # (S, A) int64
    success: np.ndarray  # (S, A) bool
    parent: list[int]
    parent_action: list[int]
    depth: list[int]


def _enumerate(layout: _Layout, starts: list[tuple[Any, ...]], max_states: int) -> _Enumeration:
    """Breadth-first search over the states reachable from ``starts``."""
    u = layout.env
    n_actions = int(u.action_space.n)
    ids: dict[tuple[Any, ...], int] = {}
    keys: list[tuple[Any, ...]] = []
    terminal: list[int] = []
    parent: list[int] = []
    parent_action: list[int] = []
    depth: list[int] = []
    rows: list[list[int]] = []
    succ: list[list[bool]] = []
    win = 1.0 - 0.9 / u.max_steps

    def add(key: tuple[Any, ...], kind: int, p: int, a: int, d: int) -> int:
        full = (*key, kind)
        i = ids.get(full)
        if i is None:
            if len(keys) >= max_states:
                raise ValueError(
                    f"{type(u).__name__} has more than max_states={max_states} reachable states; "
                    "pass a larger max_states= if memory allows (each state costs "
                    f"{n_actions} environment steps and one observation)."
                )
            i = ids[full] = len(keys)
            keys.append(key)
            terminal.append(kind)
            parent.append(p)
            parent_action.append(a)
            depth.append(d)
        return i

    for key in starts:
        add(key, _LIVE, -1, -1, 0)
    queue = collections.deque(range(len(keys)))
    while queue:
        s = queue.popleft()
        if terminal[s] != _LIVE:
            rows.append([s] * n_actions)
            succ.append([False] * n_actions)
            continue
        row, wins = [], []
        for a in range(n_actions):
            layout.restore(keys[s])
            u.step_count = 0
            _obs, reward, term, _trunc, _info = u.step(a)
            if reward != 0 and not (term and abs(reward - win) <= 1e-12):
                raise ValueError(
                    f"{type(u).__name__} gave reward {reward} for action {a}; the exact utility "
                    "expects 0, or MiniGrid's success reward on a terminating step."
                )
            kind = _LIVE if not term else (_SUCCEEDED if reward > 0 else _FAILED)
            n_before = len(keys)
            t = add(layout.key(), kind, s, a, depth[s] + 1)
            if len(keys) > n_before:
                queue.append(t)
            row.append(t)
            wins.append(kind == _SUCCEEDED)
        rows.append(row)
        succ.append(wins)
    # The queue visits states in index order, so rows[s] belongs to state s.
    return _Enumeration(
        keys,
        terminal,
        np.asarray(rows, dtype=np.int64),
        np.asarray(succ, dtype=bool),
        parent,
        parent_action,
        depth,
    )


def _observations(layout: _Layout, wrappers: list[Any], keys: list[tuple[Any, ...]]) -> Any:
    """Each state's observation through the observation wrappers, stacked ``(S, ...)``; None
    when the outermost observation is not an array (MiniGrid's dict with a mission string)."""
    u = layout.env
    out = []
    with _quiet_forwarding():
        for key in keys:
            layout.restore(key)
            obs = u.gen_obs()
            for w in wrappers:
                obs = w.observation(obs)
            if not isinstance(obs, np.ndarray):
                return None
            out.append(obs)
    return np.stack(out)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _start_keys(layout: _Layout, agent_starts: Sequence[Any] | None) -> list[tuple[Any, ...]]:
    key = layout.key()
    if agent_starts is None:
        return [key]
    u = layout.env
    if isinstance(agent_starts, (str, bytes)) or not isinstance(agent_starts, Sequence):
        raise TypeError(
            "agent_starts must be a list of ((x, y), direction) with integer x, y and "
            f"direction, got {agent_starts!r} ({type(agent_starts).__name__})."
        )
    starts: list[tuple[Any, ...]] = []
    for item in agent_starts:
        try:
            (x, y), d = item
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"agent_starts entries must be ((x, y), direction), got {item!r}."
            ) from e
        if not all(_is_int(v) for v in (x, y, d)):
            raise ValueError(
                f"agent start {item!r}: x, y and the direction must be integers (cells and "
                "directions are whole numbers)."
            )
        x, y, d = int(x), int(y), int(d)
        if not (0 <= x < u.width and 0 <= y < u.height) or d not in (0, 1, 2, 3):
            raise ValueError(
                f"agent start {item!r} lies off the {u.width}x{u.height} grid or has a direction "
                "outside 0..3."
            )
        cell = u.grid.get(x, y)
        if cell is not None and not cell.can_overlap():
            raise ValueError(f"agent start {item!r} is on a {cell.type}, where no agent can stand.")
        if cell is not None and cell.type in _ENDING_CELLS:
            raise ValueError(
                f"agent start {item!r} is on a {cell.type} square: stepping onto it ends the "
                "episode, so no episode starts there; start the agent on an empty cell."
            )
        start = ((x, y), d, *key[2:])
        if start in starts:
            raise ValueError(
                f"agent start {item!r} is listed twice; every start gets the same probability, "
                "so list each once."
            )
        starts.append(start)
    if not starts:
        raise ValueError("agent_starts must name at least one ((x, y), direction).")
    return starts


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
    import time

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
    t0 = time.perf_counter()
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
    H = M if horizon is None else horizon
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or not 1 <= H <= M:
        raise ValueError(
            f"horizon must be an integer in [1, max_steps={M}] (MiniGrid truncates episodes "
            f"at max_steps), got {horizon!r}."
        )
    u.reset(seed=int(seed))
    layout = _layout(u)
    starts = _start_keys(layout, agent_starts)
    en = _enumerate(layout, starts, max_states)
    obs = _observations(layout, wrappers, en.keys)
    S, A = en.next_state.shape
    terminal = np.asarray(en.terminal, dtype=np.int64)
    success = en.success.astype(np.float64)
    if utility == "reward":
        r = (1.0 - 0.9 * H / M) * success + (0.9 / M) * (terminal == _SUCCEEDED)[:, None]
    else:
        r = success
    p0 = np.zeros(S)
    p0[: len(starts)] = 1.0 / len(starts)
    layout.restore(starts[0])
    metadata = {
        "env_id": env_id,
        "seed": int(seed),
        "max_steps": M,
        "utility": utility,
        "observation": observation,
        # Not "grid_shape": the states are not row-major cells (grid_target would misread them).
        "grid_size": (int(u.width), int(u.height)),
        "agent_pos": np.asarray([k[0] for k in en.keys], dtype=np.int64),
        "agent_dir": np.asarray([k[1] for k in en.keys], dtype=np.int64),
        "carrying": np.asarray(
            ["" if k[2] < 0 else layout.objects[k[2]].type for k in en.keys], dtype=object
        ),
        "terminal": terminal,
        "success": en.success,
        "parent": np.asarray(en.parent, dtype=np.int64),
        "parent_action": np.asarray(en.parent_action, dtype=np.int64),
        "depth": np.asarray(en.depth, dtype=np.int64),
        "goal_cells": _cells_of(u, "goal"),
        "lava_cells": _cells_of(u, "lava"),
        "enumeration_seconds": time.perf_counter() - t0,
    }
    return TabularMDP(
        (en.next_state[..., None], np.ones((S, A, 1))),
        r,
        int(H),
        p0,
        1.0,
        dtype=dtype,
        device=device,
        observation_matrix=obs,
        name=f"{env_id}(seed={seed})",
        metadata=metadata,
    )


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
