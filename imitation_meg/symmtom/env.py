"""SymmToM: the symmetric theory-of-mind gridworld (Sclar, Neubig and Bisk, ICML 2022) as a PettingZoo env.

Written from the paper's prose and ``shared/guides/SYMMTOM.md``; no code of the authors is used.

World:
    ``n`` agents move on a ``w x w`` grid (cells ``(x, y)`` with ``0 <= x, y < w``) surrounded by walls.
    There are ``c`` information pieces; each piece is first-hand knowledge of exactly one agent and
    each agent starts with ``floor(c/n)`` or ``ceil(c/n)`` of them. Every agent has its own recharge
    base on a distinct cell (placed independently of the agents). Agent ``j`` hears agent ``i`` when
    their Chebyshev distance is at most the hearing range ``h`` (``2h + 1 < w``).

Actions:
    ``MultiDiscrete([5, c])``: a move in ``{0: none, 1: +x, 2: -x, 3: +y, 4: -y}`` and the index of
    the piece to say (``0..c-1``). Saying a piece one does not know says nothing.

One step (all agents act simultaneously), with ``K`` the knowledge at the start of the step:
    1. Movement. A move into a wall is cancelled. Then, until nothing changes: a move into the cell
       of an agent that does not move is cancelled, and when several moving agents target one cell
       one of them (drawn with the env's own generator) moves and the others stay. Swaps and
       rotations are allowed.
    2. Speech, with the *new* positions. Speaker ``i`` saying a piece ``p`` with ``K[i, p]`` reaches
       every other agent ``j`` in range; for each ``j`` with ``not K[j, p]`` both ``j`` (listening)
       and ``i`` (speaking) get +1. Two speakers telling ``j`` the same new piece give ``j`` +2.
       What is heard becomes knowledge at the next step. With ``speech_timing="stale"`` (the
       original code's timing) what ``i`` may say is decided by its knowledge at the start of the
       *previous* step instead (newness and rewards still use ``K``).
    3. Recharge. An agent on its own base (new position) whose ``K`` row is complete gets
       ``c (n - 1)`` and forgets its second-hand knowledge (effective next step).
    Episodes last ``5 w`` steps (truncation); there is no termination.

Observation of agent ``i`` (non-oracle), concatenated, float32 of size ``c (2n - 1) + 6n + 2``:
    own first-hand bits ``(c,)``; the last executed move of self then each other agent as a unit
    vector ``(2n,)``; positions of the others relative to self divided by ``w - 1``
    ``(2(n-1),)``; the others' first-hand bits ``((n-1)c,)``; own base relative to self, then each
    other's base relative to that other, divided by ``w - 1`` ``(2n,)``; one-hot utterances heard
    this step from each other agent ``((n-1)c,)``; walls in the cells ``+x, -x, +y, -y`` ``(4,)``.
    With ``oracle=True`` every agent's current knowledge (self first) is appended ``(n c,)``.
    "Others" are always listed in index order with ``i`` skipped.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from pettingzoo import ParallelEnv

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.symmtom.dynamics import (
    LOG_KEYS,
    SPEECH_TIMINGS,
    transition,
)

__all__ = ["SymmToMEnv", "SymmToMWarning", "observation_size", "parallel_env"]

_RESET_OPTION_KEYS = ("positions", "bases", "first_hand", "knowledge", "step")


class SymmToMWarning(ImitationMEGWarning):
    """Allowed-but-suspicious use of the SymmToM environment."""


def observation_size(n_agents: int, n_pieces: int, *, oracle: bool = False) -> int:
    """Length of one agent's observation: ``c (2n - 1) + 6n + 2`` (+ ``n c`` with the oracle)."""
    size = n_pieces * (2 * n_agents - 1) + 6 * n_agents + 2
    return size + (n_agents * n_pieces if oracle else 0)


def _check_layout(n_agents: Any, width: Any, n_pieces: Any, hearing: Any) -> None:
    """Refuse sizes that are not ints, or that give no game: too few agents or pieces, a
    hearing range that covers the grid, more agents than cells."""
    for name, value in (
        ("n_agents", n_agents),
        ("width", width),
        ("n_pieces", n_pieces),
        ("hearing", hearing),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}.")
    if n_agents < 2:
        raise ValueError(f"n_agents={n_agents} is too small; SymmToM needs at least 2 agents.")
    if n_pieces < 1:
        raise ValueError(f"n_pieces={n_pieces} must be at least 1 (the paper uses n, 2n or 3n).")
    if hearing < 1:
        raise ValueError(f"hearing={hearing} must be at least 1 (agents never share a cell).")
    if 2 * hearing + 1 >= width:
        raise ValueError(
            f"hearing range must not cover the grid: 2*hearing+1 = {2 * hearing + 1} >= width = {width}; "
            f"use width >= {2 * hearing + 2} or a smaller hearing range."
        )
    if n_agents > width * width:
        raise ValueError(
            f"n_agents={n_agents} does not fit on a {width}x{width} grid ({width * width} cells); "
            "use fewer agents or a wider grid."
        )


def _max_steps(max_steps: Any, width: int) -> int:
    """The episode length: ``5 * width`` by default, else a positive int."""
    if max_steps is None:
        max_steps = 5 * width
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"max_steps={max_steps!r} must be a positive int (default 5 * width).")
    return int(max_steps)


class SymmToMEnv(ParallelEnv):
    """SymmToM as a PettingZoo ``ParallelEnv`` (see the module docstring for the rules).

    Args:
        n_agents: number of agents ``n >= 2``.
        width: grid width ``w``; the grid is ``w x w``.
        n_pieces: number of information pieces ``c >= 1``.
        hearing: hearing range ``h >= 1`` (Chebyshev distance); needs ``2h + 1 < w``.
        oracle: append every agent's current knowledge to each observation.
        speech_timing: ``"fresh"`` (default, the paper's rule: an agent may say what it knows at the
            start of the step) or ``"stale"`` (the original code's timing: what it knew at the start
            of the previous step, so a piece heard at step t can be said from t + 2 and a piece
            forgotten at a recharge can be said once more at the next step).
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
        max_steps: episode length; default ``5 * width`` as in the paper.

    Attributes (state, read-only by convention):
        positions: ``(n, 2)`` int cells; bases: ``(n, 2)`` int cells;
        first_hand: ``(n, c)`` bool; knowledge: ``(n, c)`` bool (current, first-hand included);
        last_moves: ``(n, 2)`` executed displacements of the last step;
        last_said: ``(n,)`` piece said effectively at the last step, ``-1`` for nothing;
        last_rewards: ``(n,)`` and last_logs: dict of ``(n,)`` arrays, this step's :data:`LOG_KEYS`;
        last_observations: ``(n, obs_size)``, the observations returned by the last reset / step;
        timestep: steps taken in the episode.

    Raises:
        TypeError: a size is not an integer.
        ValueError: ``n_agents < 2``, ``n_pieces < 1``, ``hearing < 1``, ``2h + 1 >= w``,
            more agents than cells, an unknown render mode or speech timing.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi", "rgb_array"],
        "name": "symmtom_v0",
        "is_parallelizable": True,
    }

    def __init__(
        self,
        n_agents: int = 3,
        width: int = 6,
        n_pieces: int = 3,
        *,
        hearing: int = 1,
        oracle: bool = False,
        speech_timing: str = "fresh",
        render_mode: str | None = None,
        max_steps: int | None = None,
    ) -> None:
        if speech_timing not in SPEECH_TIMINGS:
            raise ValueError(
                f"speech_timing={speech_timing!r} is not supported; use 'fresh' (the paper's rule) "
                "or 'stale' (the original code's one-step-stale speech)."
            )
        _check_layout(n_agents, width, n_pieces, hearing)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; use None, 'ansi' or 'rgb_array'."
            )
        if n_pieces < n_agents:
            warnings.warn(
                f"n_pieces={n_pieces} < n_agents={n_agents}: some agents start with no piece"
                + (" and the single owner can recharge at every step" if n_pieces == 1 else "")
                + "; the paper uses n_pieces in {n, 2n, 3n}.",
                SymmToMWarning,
                stacklevel=2,
            )
        max_steps = _max_steps(max_steps, width)
        self._space_cache: dict[tuple[str, str], gymnasium.spaces.Space] = {}
        self.n_agents = int(n_agents)
        self.width = int(width)
        self.n_pieces = int(n_pieces)
        self.hearing = int(hearing)
        self.oracle = bool(oracle)
        self.speech_timing = speech_timing
        self.render_mode = render_mode
        self.max_steps = int(max_steps)
        self.possible_agents = [f"agent_{i}" for i in range(self.n_agents)]
        self.agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self._np_random: np.random.Generator | None = None
        n, c = self.n_agents, self.n_pieces
        self.positions = np.zeros((n, 2), dtype=np.int64)
        self.bases = np.zeros((n, 2), dtype=np.int64)
        self.first_hand = np.zeros((n, c), dtype=bool)
        self.knowledge = np.zeros((n, c), dtype=bool)
        self.previous_knowledge = np.zeros((n, c), dtype=bool)
        self.last_moves = np.zeros((n, 2), dtype=np.int64)
        self.last_said = np.full(n, -1, dtype=np.int64)
        self.last_rewards = np.zeros(n)
        self.last_logs = {k: np.zeros(n) for k in LOG_KEYS}
        self.timestep = 0
        self.last_observations = np.zeros((n, self.obs_size), dtype=np.float32)
        self._totals = {a: dict.fromkeys(LOG_KEYS, 0.0) for a in self.possible_agents}
        #: ``_order[i] = [i, others...]`` and ``_others[i]`` = the others in index order
        self._order = np.array([[i, *[j for j in range(n) if j != i]] for i in range(n)])
        self._others = self._order[:, 1:]

    # ------------------------------------------------------------------ spaces
    @property
    def obs_size(self) -> int:
        """Length of one observation vector."""
        return observation_size(self.n_agents, self.n_pieces, oracle=self.oracle)

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        """``Box(-1, 1, (obs_size,), float32)`` (all entries are bits or scaled offsets).

        The same object on every call for an agent (PettingZoo's API test checks it).
        """
        self._check_agent(agent)
        key = ("obs", agent)
        if key not in self._space_cache:
            self._space_cache[key] = gymnasium.spaces.Box(
                -1.0, 1.0, shape=(self.obs_size,), dtype=np.float32
            )
        return self._space_cache[key]  # type: ignore[return-value]

    def action_space(self, agent: str) -> gymnasium.spaces.MultiDiscrete:
        """``MultiDiscrete([5, c])``: (move, piece), both uniformly sampled by ``.sample()``."""
        self._check_agent(agent)
        key = ("act", agent)
        if key not in self._space_cache:
            self._space_cache[key] = gymnasium.spaces.MultiDiscrete([5, self.n_pieces])
        return self._space_cache[key]  # type: ignore[return-value]

    def _check_agent(self, agent: str) -> None:
        if agent not in self.agent_index:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}.")

    # ------------------------------------------------------------------ reset
    def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Start an episode.

        Args:
            seed: seeds the env's own generator (placement, piece assignment, collision ties).
            options: optional fixed layout (used by the theory-of-mind harness):
                ``positions (n, 2)``, ``bases (n, 2)``, ``first_hand (n, c)`` bool,
                ``knowledge (n, c)`` bool (default: ``first_hand``; must include it),
                ``step`` int (steps already elapsed). Missing entries are drawn at random.

        Returns:
            ``(observations, infos)`` keyed by agent.
        """
        if seed is not None or self._np_random is None:
            self._np_random, _ = seeding.np_random(seed)
        rng = self._np_random
        n, c, w = self.n_agents, self.n_pieces, self.width
        options = dict(options or {})
        unknown = sorted(set(options) - set(_RESET_OPTION_KEYS))
        if unknown:
            warnings.warn(
                f"reset options {unknown} are ignored; SymmToM understands {list(_RESET_OPTION_KEYS)}.",
                SymmToMWarning,
                stacklevel=2,
            )
        cells = rng.choice(w * w, size=n, replace=False)
        positions = np.stack([cells // w, cells % w], axis=1)
        cells = rng.choice(w * w, size=n, replace=False)
        bases = np.stack([cells // w, cells % w], axis=1)
        owner = np.empty(c, dtype=np.int64)
        perm_agents = rng.permutation(n)
        perm_pieces = rng.permutation(c)
        for k, p in enumerate(perm_pieces):
            owner[p] = perm_agents[k % n]
        first_hand = np.zeros((n, c), dtype=bool)
        first_hand[owner, np.arange(c)] = True
        if "positions" in options:
            positions = self._layout(options["positions"], "positions")
        if "bases" in options:
            bases = self._layout(options["bases"], "bases")
        if "first_hand" in options:
            first_hand = np.asarray(options["first_hand"], dtype=bool)
            if first_hand.shape != (n, c) or not (first_hand.sum(axis=0) == 1).all():
                raise ValueError(
                    f"options['first_hand'] must be an ({n}, {c}) bool array with exactly one owner per "
                    f"piece, got {first_hand.astype(int).tolist()}."
                )
        knowledge = first_hand.copy()
        if "knowledge" in options:
            knowledge = np.asarray(options["knowledge"], dtype=bool)
            if knowledge.shape != (n, c) or (first_hand & ~knowledge).any():
                raise ValueError(
                    f"options['knowledge'] must be an ({n}, {c}) bool array containing first_hand, got "
                    f"{knowledge.astype(int).tolist()}."
                )
        self.positions = positions.astype(np.int64)
        self.bases = bases.astype(np.int64)
        self.first_hand = first_hand
        self.knowledge = knowledge.copy()
        self.previous_knowledge = knowledge.copy()
        self.last_moves = np.zeros((n, 2), dtype=np.int64)
        self.last_said = np.full(n, -1, dtype=np.int64)
        self.last_rewards = np.zeros(n)
        self.last_logs = {k: np.zeros(n) for k in LOG_KEYS}
        self.timestep = int(options.get("step", 0))
        self.agents = list(self.possible_agents)
        self._totals = {a: dict.fromkeys(LOG_KEYS, 0.0) for a in self.possible_agents}
        all_obs = self.last_observations = self.observe_all()
        obs = {a: all_obs[i] for i, a in enumerate(self.agents)}
        infos = {a: {"totals": dict(self._totals[a])} for a in self.agents}
        return obs, infos

    def _layout(self, value: Any, name: str) -> np.ndarray:
        arr = np.asarray(value, dtype=np.int64)
        n, w = self.n_agents, self.width
        if arr.shape != (n, 2) or (arr < 0).any() or (arr >= w).any():
            raise ValueError(
                f"options[{name!r}] must be {n} cells (x, y) with 0 <= x, y < {w}, got {value!r}."
            )
        if len({tuple(p) for p in arr.tolist()}) != n:
            raise ValueError(f"options[{name!r}] must hold distinct cells, got {arr.tolist()}.")
        return arr

    # ------------------------------------------------------------------ step
    def _parse_actions(self, actions: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(actions, Mapping):
            raise TypeError(
                f"actions must be a dict agent -> (move, piece), got {type(actions).__name__}."
            )
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"actions lack agents {missing}; every live agent acts each step.")
        moves = np.zeros(self.n_agents, dtype=np.int64)
        pieces = np.zeros(self.n_agents, dtype=np.int64)
        for a in self.agents:
            act = np.asarray(actions[a]).reshape(-1)
            if act.shape != (2,) or (
                not np.issubdtype(act.dtype, np.integer) and not np.all(act == np.round(act))
            ):
                raise ValueError(
                    f"action of {a} must be (move, piece) integers, got {actions[a]!r}."
                )
            m, p = int(act[0]), int(act[1])
            if not (0 <= m < 5 and 0 <= p < self.n_pieces):
                raise ValueError(
                    f"action of {a} = ({m}, {p}) is out of range; move in 0..4, piece in 0..{self.n_pieces - 1}."
                )
            i = self.agent_index[a]
            moves[i], pieces[i] = m, p
        return moves, pieces

    def step(self, actions: Mapping[str, int | np.ndarray]) -> tuple[dict, dict, dict, dict, dict]:
        """Advance one step; ``actions[agent] = (move, piece)``. Returns the PettingZoo 5-tuple.

        ``infos[agent]`` holds this step's :data:`LOG_KEYS` and their episode totals under
        ``"totals"``.
        """
        if not self.agents:
            raise ValueError("step() called on a finished episode; call reset() first.")
        moves, pieces = self._parse_actions(actions)
        assert self._np_random is not None
        out = transition(
            self.positions,
            self.knowledge,
            self.first_hand,
            self.bases,
            moves,
            pieces,
            width=self.width,
            hearing=self.hearing,
            rng=self._np_random,
            speak_knowledge=self.previous_knowledge if self.speech_timing == "stale" else None,
        )
        self.previous_knowledge = self.knowledge
        self.last_moves = out["positions"] - self.positions
        self.positions = out["positions"]
        self.knowledge = out["knowledge"]
        self.last_said = out["said"]
        self.last_rewards = out["reward"]
        self.last_logs = {k: out[k].copy() for k in LOG_KEYS}
        self.timestep += 1
        truncated = self.timestep >= self.max_steps
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        all_obs = self.last_observations = self.observe_all()
        for a in self.agents:
            i = self.agent_index[a]
            obs[a] = all_obs[i]
            rewards[a] = float(out["reward"][i])
            terms[a] = False
            truncs[a] = truncated
            step_log = {k: float(out[k][i]) for k in LOG_KEYS}
            for k in LOG_KEYS:
                self._totals[a][k] += step_log[k]
            infos[a] = {**step_log, "totals": dict(self._totals[a])}
        if truncated:
            self.agents = []
        return obs, rewards, terms, truncs, infos

    # ------------------------------------------------------------------ observation
    def in_range(self) -> np.ndarray:
        """``(n, n)`` bool: agents within hearing range of each other (diagonal False)."""
        d = np.abs(self.positions[:, None, :] - self.positions[None, :, :]).max(axis=-1)
        return (d <= self.hearing) & ~np.eye(self.n_agents, dtype=bool)

    def observe_all(self) -> np.ndarray:
        """Every agent's observation, ``(n, obs_size)`` float32 (row ``i`` is agent ``i``'s)."""
        n, c, w = self.n_agents, self.n_pieces, self.width
        order, others = self._order, self._others
        scale = float(w - 1)
        pos = self.positions
        # heard[i, j, p] = 1 iff j said p (effectively) and i is within j's hearing range
        near = self.in_range()
        said = np.zeros((n, c))
        speakers = np.flatnonzero(self.last_said >= 0)
        said[speakers, self.last_said[speakers]] = 1.0
        heard = near[:, :, None] * said[None, :, :]
        rows = np.arange(n)[:, None]
        walls = np.stack(
            [pos[:, 0] == w - 1, pos[:, 0] == 0, pos[:, 1] == w - 1, pos[:, 1] == 0], axis=1
        )
        parts = [
            self.first_hand.astype(float),
            np.sign(self.last_moves)[order].reshape(n, -1),
            ((pos[others] - pos[:, None, :]) / scale).reshape(n, -1),
            self.first_hand[others].reshape(n, -1),
            ((self.bases - pos)[order] / scale).reshape(n, -1),
            heard[rows, others].reshape(n, -1),
            walls.astype(float),
        ]
        if self.oracle:
            parts.append(self.knowledge[order].reshape(n, -1))
        return np.concatenate(parts, axis=1).astype(np.float32)

    def state(self) -> np.ndarray:
        """Global state ``[positions, bases, knowledge]`` flattened (ints as float32)."""
        return np.concatenate(
            [self.positions.reshape(-1), self.bases.reshape(-1), self.knowledge.reshape(-1)]
        ).astype(np.float32)

    # ------------------------------------------------------------------ render
    def render(self) -> str | np.ndarray | None:
        """ANSI text (``render_mode="ansi"``) or an ``(H, W, 3)`` uint8 image (``"rgb_array"``)."""
        if self.render_mode is None:
            warnings.warn(
                "render() called with render_mode=None; pass render_mode='ansi' or 'rgb_array'.",
                SymmToMWarning,
                stacklevel=2,
            )
            return None
        from imitation_meg.symmtom import render as _render

        if self.render_mode == "ansi":
            return _render.render_ansi(self)
        return _render.render_rgb(self)

    def close(self) -> None:
        """Nothing to release."""


def parallel_env(*args: Any, **kwargs: Any) -> SymmToMEnv:
    """Build a SymmToM PettingZoo ``ParallelEnv``: ``SymmToMEnv(*args, **kwargs)`` (see
    :class:`SymmToMEnv` for the arguments)."""
    return SymmToMEnv(*args, **kwargs)
