"""The breadth-first search behind :func:`~imitation_meg.envs.minigrid.minigrid_mdp`.

A state is the agent's cell and direction, what it carries, where every object lies and the
state of the doors and boxes (:class:`_Layout` reads it from the environment and writes it back),
plus whether the episode has ended. The search steps the environment itself from each restored
state, so the transitions are MiniGrid's own; the start states are the reset's or the agent
placed at given cells of the reset's layout.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from imitation_meg.envs.minigrid_wrappers import _quiet_forwarding

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


@dataclasses.dataclass
class _Enumeration:
    keys: list[tuple[Any, ...]]
    terminal: list[int]
    next_state: np.ndarray  # (S, A) int64
    success: np.ndarray  # (S, A) bool
    parent: list[int]
    parent_action: list[int]
    depth: list[int]


class _Search:
    """The states found so far, in breadth-first order, with their rows."""

    def __init__(self, u: Any, max_states: int) -> None:
        self.u, self.max_states = u, max_states
        self.n_actions = int(u.action_space.n)
        self.ids: dict[tuple[Any, ...], int] = {}
        self.keys: list[tuple[Any, ...]] = []
        self.terminal: list[int] = []
        self.parent: list[int] = []
        self.parent_action: list[int] = []
        self.depth: list[int] = []

    def add(self, key: tuple[Any, ...], kind: int, p: int, a: int, d: int) -> tuple[int, bool]:
        """The index of state ``(key, kind)`` and whether it is new (reached from ``p`` by ``a``
        at depth ``d``)."""
        full = (*key, kind)
        i = self.ids.get(full)
        if i is not None:
            return i, False
        if len(self.keys) >= self.max_states:
            raise ValueError(
                f"{type(self.u).__name__} has more than max_states={self.max_states} reachable "
                "states; pass a larger max_states= if memory allows (each state costs "
                f"{self.n_actions} environment steps and one observation)."
            )
        i = self.ids[full] = len(self.keys)
        self.keys.append(key)
        self.terminal.append(kind)
        self.parent.append(p)
        self.parent_action.append(a)
        self.depth.append(d)
        return i, True


def _terminal_kind(u: Any, a: int, reward: float, term: bool, win: float) -> int:
    """Live, failed or succeeded, from a step's reward and termination; other rewards refused."""
    if reward != 0 and not (term and abs(reward - win) <= 1e-12):
        raise ValueError(
            f"{type(u).__name__} gave reward {reward} for action {a}; the exact utility "
            "expects 0, or MiniGrid's success reward on a terminating step."
        )
    return _LIVE if not term else (_SUCCEEDED if reward > 0 else _FAILED)


def _successors(layout: _Layout, key: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], int]]:
    """``(next key, terminal kind)`` of every action from the state ``key``, in action order."""
    u = layout.env
    win = 1.0 - 0.9 / u.max_steps
    out = []
    for a in range(int(u.action_space.n)):
        layout.restore(key)
        u.step_count = 0
        _obs, reward, term, _trunc, _info = u.step(a)
        out.append((layout.key(), _terminal_kind(u, a, reward, term, win)))
    return out


def _enumerate(layout: _Layout, starts: list[tuple[Any, ...]], max_states: int) -> _Enumeration:
    """Breadth-first search over the states reachable from ``starts``."""
    search = _Search(layout.env, max_states)
    n_actions = search.n_actions
    rows: list[list[int]] = []
    succ: list[list[bool]] = []
    for key in starts:
        search.add(key, _LIVE, -1, -1, 0)
    queue = collections.deque(range(len(search.keys)))
    while queue:
        s = queue.popleft()
        if search.terminal[s] != _LIVE:
            rows.append([s] * n_actions)
            succ.append([False] * n_actions)
            continue
        row = []
        for a, (key, kind) in enumerate(_successors(layout, search.keys[s])):
            t, new = search.add(key, kind, s, a, search.depth[s] + 1)
            if new:
                queue.append(t)
            row.append(t)
        rows.append(row)
        succ.append([search.terminal[t] == _SUCCEEDED for t in row])
    # The queue visits states in index order, so rows[s] belongs to state s.
    return _Enumeration(
        search.keys,
        search.terminal,
        np.asarray(rows, dtype=np.int64),
        np.asarray(succ, dtype=bool),
        search.parent,
        search.parent_action,
        search.depth,
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
    """The start states: the reset's, or the reset's layout with the agent at each start."""
    key = layout.key()
    if agent_starts is None:
        return [key]
    if isinstance(agent_starts, (str, bytes)) or not isinstance(agent_starts, Sequence):
        raise TypeError(
            "agent_starts must be a list of ((x, y), direction) with integer x, y and "
            f"direction, got {agent_starts!r} ({type(agent_starts).__name__})."
        )
    starts: list[tuple[Any, ...]] = []
    for item in agent_starts:
        start = (*_agent_start(layout.env, item), *key[2:])
        if start in starts:
            raise ValueError(
                f"agent start {item!r} is listed twice; every start gets the same probability, "
                "so list each once."
            )
        starts.append(start)
    if not starts:
        raise ValueError("agent_starts must name at least one ((x, y), direction).")
    return starts


def _agent_start(u: Any, item: Any) -> tuple[tuple[int, int], int]:
    """``((x, y), direction)`` of one entry of ``agent_starts``, checked against the grid."""
    try:
        (x, y), d = item
    except (TypeError, ValueError) as e:
        raise ValueError(f"agent_starts entries must be ((x, y), direction), got {item!r}.") from e
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
    _check_start_cell(u, item, x, y)
    return (x, y), d


def _check_start_cell(u: Any, item: Any, x: int, y: int) -> None:
    """Refuse a start where no agent stands or where the episode ends."""
    cell = u.grid.get(x, y)
    if cell is not None and not cell.can_overlap():
        raise ValueError(f"agent start {item!r} is on a {cell.type}, where no agent can stand.")
    if cell is not None and cell.type in _ENDING_CELLS:
        raise ValueError(
            f"agent start {item!r} is on a {cell.type} square: stepping onto it ends the "
            "episode, so no episode starts there; start the agent on an empty cell."
        )
