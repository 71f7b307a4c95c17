"""Exact MDPs of deterministic emulators: every state reachable within a horizon.

An environment that can save and restore its complete state, and whose steps are deterministic,
is a finite MDP within any horizon: :func:`enumerate_mdp` searches it breadth-first from its
start states, trying every action from every state (the environment's own ``step`` from the
restored state), up to ``horizon`` decisions. The Arcade Learning Environment is such an
environment (``ale.cloneState()`` / ``restoreState()``, deterministic when sticky actions are off);
:class:`ALEEmulator` reads a gymnasium Atari environment wrapped as SB3's ``AtariWrapper`` (and so
the RL Zoo) wraps it. Anything else plugs in through the small :class:`Emulator` protocol.

**A state** is the emulator state together with what the agent observes. Two states merge only
where both are identical: the emulator's serialized bytes (compared through their 256-bit
BLAKE2b digest; ``keep_states=True`` keeps the bytes and checks every merge byte for byte) and
the agent's observation, which for a frame-stacking agent is the stack of the last
``frame_stack`` per-step observations: the stack is part of the state, as it is of what the
agent acts on. At the start the older slots hold zeros (as SB3's ``VecFrameStack`` fills them at
a reset). A state entered on a terminating step is absorbing (every action stays, reward 0);
states first reached after the last decision (the *frontier*, ``depth == horizon``) get the same
rows, which no decision within the horizon uses.

**The utility** is ``r(s, a)``, the reward of the emulator's step (deterministic, so it is a
function of the state and action). For :class:`ALEEmulator` with ``reward="env"`` (the default)
it is what the wrapped environment returns: under the RL Zoo's ``AtariWrapper`` the *clipped*
reward ``sign(score change)``, which is what the Zoo trains on; ``reward="game"`` takes the
game's score change before ``ClipRewardEnv``. ``metadata["reward"]`` says which.

**The agent's observations** are kept compactly: each distinct per-step observation once in
``metadata["frames"] (F, *frame_shape)`` (frame 0 is the zero padding) and each state's stack as
``metadata["frame_index"] (S, frame_stack)``, oldest first. :func:`stacked_observations` builds
the stacks (channel-last, frames concatenated on the last axis as ``VecFrameStack`` does, or
channel-first as SB3's ``VecTransposeImage`` gives a CNN policy), and
:func:`emulator_policy_table` reads a policy's table in batches from any callable that maps a
batch of observations to action probabilities (such as
:class:`imitation_meg.adapters.sb3.SB3ActionProbs`). The MDP's ``observation_matrix`` holds the
stacks too when they fit (``observation_matrix=None``: up to :data:`OBSERVATION_MATRIX_BYTES`),
so :func:`imitation_meg.adapters.policy_table` reads small MDPs directly.

**Refused.** An environment that cannot save its state (``TypeError``), sticky actions
(``repeat_action_probability > 0``: with that probability the emulator repeats the previous
action instead of the chosen one, so successors are random and the previous action is hidden
state), a random frame skip (the ``v0``/``v4`` ids without ``NoFrameskip``), wrappers whose state
is not known to this module, and more than ``max_states`` states (``ValueError``, with the count
reached and the depth).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import pickle
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch as th

from imitation_meg._validation import as_policy, as_tensor
from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "MAX_STATES",
    "OBSERVATION_MATRIX_BYTES",
    "ALEEmulator",
    "Emulator",
    "EmulatorStep",
    "emulator_policy_table",
    "enumerate_mdp",
    "make_atari",
    "stacked_observations",
]

#: Default limit on the number of enumerated states (each costs ``|A|`` emulator steps).
MAX_STATES = 200_000
#: ``observation_matrix=None`` attaches the stacked observations to the MDP up to this size.
OBSERVATION_MATRIX_BYTES = 64 << 20


class EmulatorStep(NamedTuple):
    """What one step of an :class:`Emulator` gives: the per-step observation (one frame, before
    any frame stacking), the reward and whether the step ended the episode."""

    observation: np.ndarray
    reward: float
    terminated: bool


@runtime_checkable
class Emulator(Protocol):
    """An environment that saves and restores its complete state: what :func:`enumerate_mdp`
    needs.

    Its steps must be deterministic: the same state and action always give the same
    :class:`EmulatorStep` and the same next state.

    Attributes:
        name: a label for the MDP.
        n_actions: the number of actions ``A`` (actions are ``0 .. A-1``).
    """

    name: str
    n_actions: int

    def starts(self) -> list[tuple[bytes, list[np.ndarray]]]:
        """The start states, equally likely, each as ``(save(), observations)``: the per-step
        observations since the episode began, oldest first (at least the reset's)."""
        ...

    def save(self) -> bytes:
        """The complete current state, serialized: equal bytes mean the same state."""
        ...

    def restore(self, state: bytes) -> None:
        """Put the emulator back into a state :meth:`save` returned."""
        ...

    def step(self, action: int) -> EmulatorStep:
        """Take ``action`` in the current state."""
        ...


# ----------------------------------------------------------------------------- the ALE
# Bookkeeping wrappers: neither observations nor dynamics change. Stepping starts beneath the
# outermost ones; inner ones get their counters reset at each restore.
_PASSTHROUGH = frozenset(
    {
        "AtariWrapper",  # SB3's container of the wrappers below
        "TimeLimit",
        "OrderEnforcing",
        "PassiveEnvChecker",
        "RecordEpisodeStatistics",
        "Monitor",
    }
)
# SB3's Atari wrappers (stable_baselines3.common.atari_wrappers), whose state this module sets
# at each restore (the reset-only ones have none between steps).
_ATARI_WRAPPERS = frozenset(
    {
        "NoopResetEnv",  # reset only: enumerated through ALEEmulator(noops=)
        "FireResetEnv",  # reset only
        "MaxAndSkipEnv",  # its frame buffer is cleared at each restore
        "EpisodicLifeEnv",  # its life counter is read from the restored emulator
        "WarpFrame",  # stateless
        "ClipRewardEnv",  # stateless
        "StickyActionEnv",  # refused unless its probability is 0
    }
)


def _sticky_error(p: float, where: str) -> ValueError:
    return ValueError(
        f"the environment has sticky actions ({where}={p:g}): with probability {p:g} the "
        "emulator repeats the previous action instead of the chosen one, so a state's "
        "successors are random and the previous action is hidden state; enumeration needs "
        "deterministic steps. Enumerate the deterministic game (the NoFrameskip-v4 ids, or "
        "repeat_action_probability=0) and score sticky-action agents with the estimators "
        "(imitation_meg.approx)."
    )


def _wrapper_chain(env: Any) -> list[Any]:
    """The wrappers of ``env``, outermost first."""
    chain = []
    w = env
    while hasattr(w, "env") and w is not getattr(w, "unwrapped", w):
        chain.append(w)
        w = w.env
    return chain


class ALEEmulator:
    """A gymnasium Atari environment (ale-py) as an :class:`Emulator`.

    The environment is stepped through its own wrappers (SB3's ``AtariWrapper``: no-op and fire
    resets, max-and-skip over 4 frames, episodic lives, the 84x84 grey ``WarpFrame``, clipped
    rewards); at each restore the wrappers' state between steps is set from the restored
    emulator (``EpisodicLifeEnv``'s lives) or cleared (``MaxAndSkipEnv``'s frame buffer, which
    only a step that ends within its first frames reads; such a state is absorbing, so its
    observation plays no part), and bookkeeping counters (``TimeLimit``, ``Monitor``) restart.

    Args:
        env: a gymnasium Atari environment, wrapped or not (:func:`make_atari` makes one as
            the RL Zoo does).
        seed: the reset seed (it seeds the ALE and ``NoopResetEnv``'s draw).
        noops: the start states: None (the one reset of ``seed``, its number of no-ops drawn
            by ``NoopResetEnv``), ``"all"`` (every number ``1 .. noop_max``, equally likely:
            the ``AtariWrapper``'s reset distribution exactly), or a list of numbers of no-ops.
        reward: ``"env"`` (what the wrapped environment returns: clipped to ``{-1, 0, 1}``
            under ``ClipRewardEnv``) or ``"game"`` (the score change before clipping).
        warmup: actions played after each reset before the enumeration starts (e.g. no-ops up
            to the moment a game's first point is decided, which short horizons from the reset
            do not reach); the start's frame stack holds their observations.

    Raises:
        TypeError: not an ALE environment, or a wrapper whose state this class does not know.
        ValueError: sticky actions, a random frame skip, bad ``noops``, ``reward`` or
            ``warmup`` (an action out of range, or one that ends the episode).
    """

    def __init__(
        self,
        env: Any,
        *,
        seed: int = 0,
        noops: Sequence[int] | str | None = None,
        reward: str = "env",
        warmup: Sequence[int] = (),
    ) -> None:
        u = getattr(env, "unwrapped", None)
        ale = getattr(u, "ale", None)
        if ale is None or not callable(getattr(ale, "cloneState", None)):
            raise TypeError(
                f"ALEEmulator needs a gymnasium Atari environment (ale-py), got "
                f"{type(u if u is not None else env).__name__}."
            )
        self.ale: Any = ale
        if reward not in ("env", "game"):
            raise ValueError(
                f"reward must be 'env' (the wrapped environment's, clipped under "
                f"ClipRewardEnv) or 'game' (the score change), got {reward!r}."
            )
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")
        p = float(self.ale.getFloat("repeat_action_probability"))
        if p > 0:
            raise _sticky_error(p, "repeat_action_probability")
        frameskip = getattr(u, "_frameskip", 1)
        if not isinstance(frameskip, (int, np.integer)):
            raise ValueError(  # noqa: TRY004 - a random skip is a bad value, not a bad kind
                f"the environment skips a random number of frames per step (frameskip="
                f"{frameskip!r}), so its steps are random; use the NoFrameskip-v4 id (with "
                "AtariWrapper's fixed skip of 4) or an integer frameskip."
            )
        self.env = env
        self.seed = int(seed)
        self.reward = reward
        self.n_actions = int(env.action_space.n)
        spec = getattr(env, "spec", None) or getattr(u, "spec", None)
        self.name = getattr(spec, "id", None) or type(u).__name__
        self.wrappers = _wrapper_chain(env)
        self._check_wrappers()
        self._core = self._stepped_env()
        self.clipped = any(type(w).__name__ == "ClipRewardEnv" for w in self._below(self._core))
        self._noop = self._find("NoopResetEnv")
        self.noops = self._noop_counts(noops)
        if any(
            isinstance(a, bool)
            or not isinstance(a, (int, np.integer))
            or not 0 <= a < self.n_actions
            for a in warmup
        ):
            raise ValueError(
                f"warmup must list actions in 0..{self.n_actions - 1}, got {list(warmup)!r}."
            )
        self.warmup = [int(a) for a in warmup]

    # -- wrappers
    def _check_wrappers(self) -> None:
        for w in self.wrappers:
            name = type(w).__name__
            if name == "StickyActionEnv":
                p = float(getattr(w, "action_repeat_probability", 0.0))
                if p > 0:
                    raise _sticky_error(p, "action_repeat_probability")
            if name not in _PASSTHROUGH and name not in _ATARI_WRAPPERS:
                raise TypeError(
                    f"the environment is wrapped in {name}, whose state between steps this "
                    "module does not know, so restoring the emulator would not restore it. "
                    "Pass the environment without it (known wrappers: "
                    f"{sorted(_PASSTHROUGH | _ATARI_WRAPPERS)}); stack frames with "
                    "enumerate_mdp(frame_stack=), or implement the Emulator protocol."
                )

    def _stepped_env(self) -> Any:
        """The outermost wrapper that is not bookkeeping (beneath ClipRewardEnv for 'game')."""
        core = self.env
        for w in self.wrappers:
            if type(w).__name__ not in _PASSTHROUGH:
                core = w
                break
        else:
            core = self.env.unwrapped
        if self.reward == "game" and type(core).__name__ == "ClipRewardEnv":
            core = core.env
        if self.reward == "game" and any(
            type(w).__name__ == "ClipRewardEnv" for w in self._below(core)
        ):
            raise ValueError(
                "reward='game' needs ClipRewardEnv to be the outermost reward wrapper; here "
                "another wrapper wraps it. Use reward='env'."
            )
        return core

    def _below(self, core: Any) -> list[Any]:
        """The wrappers from ``core`` inwards."""
        ws = self.wrappers
        return ws[ws.index(core) :] if core in ws else []

    def _find(self, name: str) -> Any:
        return next((w for w in self.wrappers if type(w).__name__ == name), None)

    def _noop_counts(self, noops: Sequence[int] | str | None) -> list[int | None]:
        if noops is None:
            return [None]
        if self._noop is None:
            raise ValueError(
                f"noops={noops!r} needs NoopResetEnv (AtariWrapper with noop_max > 0); this "
                "environment has none: pass noops=None."
            )
        if isinstance(noops, str):
            if noops != "all":
                raise ValueError(f"noops must be None, 'all' or a list of counts, got {noops!r}.")
            return list(range(1, int(self._noop.noop_max) + 1))
        counts = list(noops)
        if not counts or any(
            isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in counts
        ):
            raise ValueError(
                f"noops must list positive numbers of no-ops (NoopResetEnv takes at least 1), "
                f"got {noops!r}."
            )
        if len(set(counts)) != len(counts):
            raise ValueError(f"noops lists a count twice: {noops!r}; list each once.")
        return [int(k) for k in counts]

    # -- the protocol
    def starts(self) -> list[tuple[bytes, list[np.ndarray]]]:
        """One start per entry of ``noops``: the environment's reset with ``seed``, then the
        ``warmup`` actions."""
        out = []
        saved = None if self._noop is None else self._noop.override_num_noops
        try:
            for k in self.noops:
                if self._noop is not None:
                    self._noop.override_num_noops = k
                for w in self.wrappers:
                    if type(w).__name__ == "EpisodicLifeEnv":
                        w.was_real_done = True  # a real reset, not a lost life's no-op step
                obs, _info = self.env.reset(seed=self.seed)
                seen = [np.asarray(obs)]
                for t, a in enumerate(self.warmup):
                    step = self.step(a)
                    if step.terminated:
                        raise ValueError(
                            f"warmup action {t} ({a}) ends the episode of {self.name}; "
                            "shorten the warmup."
                        )
                    seen.append(step.observation)
                out.append((self.save(), seen))
        finally:
            if self._noop is not None:
                self._noop.override_num_noops = saved
        return out

    def save(self) -> bytes:
        """The ALE's state (``cloneState()``, without the random generator), pickled."""
        return pickle.dumps(self.ale.cloneState(), protocol=4)

    def restore(self, state: bytes) -> None:
        """Restore the ALE and set the wrappers' state between steps from it."""
        self.ale.restoreState(pickle.loads(state))  # bytes this class made
        for w in self.wrappers:
            name = type(w).__name__
            if name == "EpisodicLifeEnv":
                w.lives = self.ale.lives()
                w.was_real_done = False
            elif name == "MaxAndSkipEnv":
                w._obs_buffer.fill(0)
            elif name == "TimeLimit":
                w._elapsed_steps = 0
            elif name == "Monitor":
                w.needs_reset = False
                w.rewards = []

    def step(self, action: int) -> EmulatorStep:
        """One agent step (``frame_skip`` emulator frames under ``AtariWrapper``); truncation by
        the ALE's own frame limit ends the episode like termination."""
        obs, reward, terminated, truncated, _info = self._core.step(action)
        return EmulatorStep(np.asarray(obs), float(reward), bool(terminated or truncated))


def make_atari(
    env_id: str, *, wrapper_kwargs: dict[str, Any] | None = None, **make_kwargs: Any
) -> Any:
    """An Atari environment as the RL Zoo makes it: ``gymnasium.make(env_id, **make_kwargs)``
    wrapped in SB3's ``AtariWrapper(**wrapper_kwargs)`` (frame stacking is the agent's:
    :func:`enumerate_mdp`'s ``frame_stack``).

    Args:
        env_id: an ALE id such as ``"PongNoFrameskip-v4"``.
        wrapper_kwargs: ``AtariWrapper`` options (``noop_max``, ``frame_skip``,
            ``screen_size``, ``terminal_on_life_loss``, ``clip_reward``); None for the defaults.
        **make_kwargs: forwarded to ``gymnasium.make``.

    Raises:
        ImportError: ale-py or stable-baselines3 missing (the ``atari`` and ``sb3`` extras).
        ValueError: an id gymnasium cannot make.
    """
    try:
        import ale_py
    except ImportError as e:
        raise ImportError(
            "Atari environments need ale-py (it ships the ROMs): pip install "
            "'imitation-meg[atari]'."
        ) from e
    import gymnasium as gym
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    if hasattr(gym, "register_envs"):
        gym.register_envs(ale_py)
    try:
        env = gym.make(env_id, **make_kwargs)
    except gym.error.Error as e:
        hint = ""
        if gym.__version__.startswith("0.") and _version(ale_py.__version__) >= (0, 11):
            hint = (
                f" ale-py {ale_py.__version__} registers its games only with gymnasium >= 1.0 "
                f"(here {gym.__version__}): install ale-py<0.11 (constraints.txt pins 0.10.2)."
            )
        raise ValueError(f"could not make {env_id!r}: {e}{hint}") from e
    return AtariWrapper(env, **(wrapper_kwargs or {}))


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def _as_emulator(env: Any, seed: int, noops: Any, reward: str, warmup: Any) -> Emulator:
    if isinstance(env, str):
        env = make_atari(env)
    if getattr(getattr(env, "unwrapped", None), "ale", None) is not None:
        return ALEEmulator(env, seed=seed, noops=noops, reward=reward, warmup=warmup)
    import gymnasium as gym

    if not isinstance(env, gym.Env) and isinstance(env, Emulator):
        if (noops, reward, tuple(warmup)) != (None, "env", ()):
            raise ValueError(
                "noops=, reward= and warmup= apply to ALE environments; an Emulator defines "
                "its own starts and rewards."
            )
        return env
    name = type(getattr(env, "unwrapped", env)).__name__
    raise TypeError(
        f"{name} cannot save and restore its state, which enumeration needs: pass an ALE "
        "game (a gymnasium Atari environment or id) or an object with the Emulator protocol "
        "(name, n_actions, starts, save, restore, step). Tabular environments: "
        "TabularMDP.from_env; MiniGrid: imitation_meg.envs.minigrid_mdp."
    )


# ----------------------------------------------------------------------------- the search
@dataclasses.dataclass
class _Search:
    """The enumerated states and their rows, in breadth-first order."""

    frames: list[np.ndarray]
    frame_index: list[tuple[int, ...]]
    depth: list[int]
    terminal: list[bool]
    parent: list[int]
    parent_action: list[int]
    next_state: list[list[int]]
    reward: list[list[float]]
    states: list[bytes | None]
    layer_sizes: list[int]


class _Frames:
    """Distinct per-step observations, each once; id 0 is the zero padding of a fresh stack."""

    def __init__(self, first: np.ndarray) -> None:
        zero = np.zeros_like(first)
        self.shape, self.dtype = first.shape, first.dtype
        self.ids: dict[bytes, int] = {zero.tobytes(): 0}
        self.frames = [zero]

    def id(self, obs: np.ndarray) -> int:
        if obs.shape != self.shape or obs.dtype != self.dtype:
            raise ValueError(
                f"the emulator's observations change shape or dtype: {obs.shape} {obs.dtype} "
                f"after {self.shape} {self.dtype}; every step must give the same kind."
            )
        key = obs.tobytes()
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.frames)
            self.frames.append(obs.copy())
        return i


def _search(
    emu: Emulator, horizon: int, frame_stack: int, max_states: int, keep_states: bool
) -> _Search:
    """Breadth-first search from the starts, every action from every state up to ``horizon``."""
    starts = emu.starts()
    if not starts:
        raise ValueError(f"{emu.name} gave no start states; Emulator.starts must give one.")
    first = list(starts[0][1])
    if not first:
        raise ValueError(f"{emu.name} gave a start without observations; give the reset's.")
    frames = _Frames(np.asarray(first[0]))
    A = int(emu.n_actions)
    ids: dict[tuple[bytes, tuple[int, ...]], int] = {}
    out = _Search([], [], [], [], [], [], [], [], [], [])
    pending: list[bytes | None] = []  # each state's bytes until it is expanded

    def add(state: bytes, hist: tuple[int, ...], term: bool, d: int, p: int, a: int) -> int:
        key = (hashlib.blake2b(state, digest_size=32).digest(), hist)
        i = ids.get(key)
        if i is not None:
            kept = out.states[i] if keep_states else None
            if kept is not None and kept != state:
                raise RuntimeError(  # a 256-bit digest collision: never seen
                    f"two different emulator states of {emu.name} share a BLAKE2b digest."
                )
            return i
        if len(out.depth) >= max_states:
            raise ValueError(
                f"{emu.name} has more than max_states={max_states} states within horizon "
                f"{horizon} (reached {len(out.depth)} states by depth {d} of {horizon}, frame "
                f"stack {frame_stack}); pass a smaller horizon or a larger max_states= (each "
                f"state costs {A} emulator steps)."
            )
        i = ids[key] = len(out.depth)
        out.frame_index.append(hist)
        out.depth.append(d)
        out.terminal.append(term)
        out.parent.append(p)
        out.parent_action.append(a)
        out.states.append(state if keep_states else None)
        pending.append(state)
        return i

    for start, seen in starts:
        ids_seen = [frames.id(np.asarray(o)) for o in seen]
        hist = tuple(([0] * frame_stack + ids_seen)[-frame_stack:])
        add(start, hist, False, 0, -1, -1)
    n_starts = len(out.depth)
    queue = collections.deque(range(n_starts))
    while queue:
        s = queue.popleft()
        d = out.depth[s]
        while len(out.layer_sizes) <= d:
            out.layer_sizes.append(0)
        out.layer_sizes[d] += 1
        state = pending[s]
        pending[s] = None
        if out.terminal[s] or d >= horizon:
            out.next_state.append([s] * A)
            out.reward.append([0.0] * A)
            continue
        assert state is not None
        row, rew = [], []
        for a in range(A):
            emu.restore(state)
            obs, r, term = emu.step(a)
            hist = (*out.frame_index[s][1:], frames.id(np.asarray(obs)))
            n_before = len(out.depth)
            t = add(emu.save(), hist, bool(term), d + 1, s, a)
            if len(out.depth) > n_before:
                queue.append(t)
            row.append(t)
            rew.append(float(r))
        out.next_state.append(row)
        out.reward.append(rew)
    out.frames = frames.frames
    return out


def _check_options(horizon: Any, max_states: Any, frame_stack: Any) -> None:
    for name, v in (("horizon", horizon), ("max_states", max_states), ("frame_stack", frame_stack)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be a positive integer, got {v!r} ({type(v).__name__}).")
        if v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v}.")


def enumerate_mdp(
    env: Emulator | Any,
    horizon: int,
    *,
    max_states: int = MAX_STATES,
    frame_stack: int = 1,
    seed: int = 0,
    noops: Sequence[int] | str | None = None,
    reward: str = "env",
    warmup: Sequence[int] = (),
    observation_matrix: bool | None = None,
    keep_states: bool = False,
    dtype: th.dtype = th.float64,
    device: th.device | str | None = None,
) -> TabularMDP:
    """Every state of a deterministic emulator reachable within ``horizon`` decisions, as an
    exact :class:`TabularMDP` (see the module doc).

    Args:
        env: an :class:`Emulator`, a gymnasium Atari environment (read by
            :class:`ALEEmulator`, wrapped as it is), or an Atari id (made by
            :func:`make_atari`: the RL Zoo's ``AtariWrapper``).
        horizon: the number of decisions ``H``; states are expanded to depth ``H - 1``.
        max_states: refuse (``ValueError``) past this many states.
        frame_stack: how many per-step observations the agent stacks (4 for the RL Zoo's Atari
            agents; 1 for none): the stack is part of the state.
        seed, noops, reward, warmup: :class:`ALEEmulator`'s options (ALE environments
            only).
        observation_matrix: attach the stacked observations ``(S, *obs)`` as the MDP's
            ``observation_matrix`` (True), never (False), or when they take at most
            :data:`OBSERVATION_MATRIX_BYTES` (None).
        keep_states: keep every state's emulator bytes in ``metadata["states"]`` and check
            each merge byte for byte (memory: one serialized state each).
        dtype, device: tensor options of the MDP.

    Returns:
        A :class:`TabularMDP` with horizon ``H``, an ``(S, A)`` utility (the step's reward),
        ``p0`` uniform over the start states, and ``metadata``: ``frames (F, *frame_shape)``,
        ``frame_index (S, frame_stack)``, ``frame_stack``, ``depth (S,)`` (the fewest decisions
        to reach the state), ``terminal (S,)``, ``frontier (S,)`` (reached after the last
        decision), ``parent (S,)`` / ``parent_action (S,)`` (a shortest path from a start),
        ``layer_sizes`` (states per depth), ``n_starts``, ``horizon``, ``reward``
        (``"clipped"``, ``"game"`` or ``"emulator"``), ``noops``, ``warmup``, ``seed``,
        ``env_id``,
        ``enumeration_seconds`` and ``states`` (with ``keep_states``).

    Raises:
        TypeError: an environment that cannot save its state; options of the wrong kind.
        ValueError: sticky actions or a random frame skip (random steps); more than
            ``max_states`` states; a horizon, frame stack or ``max_states`` below 1.

    Example:
        A counter that action 1 increments up to 2 (reward 1 each time) and action 0 leaves:

        >>> class Counter:
        ...     name, n_actions = "counter", 2
        ...     def starts(self):
        ...         self.n = 0
        ...         return [(self.save(), [np.zeros(1)])]
        ...     def save(self):
        ...         return bytes([self.n])
        ...     def restore(self, state):
        ...         self.n = state[0]
        ...     def step(self, action):
        ...         grew = action == 1 and self.n < 2
        ...         self.n += grew
        ...         return EmulatorStep(np.array([float(self.n)]), float(grew), False)
        >>> mdp = enumerate_mdp(Counter(), 4)
        >>> mdp.n_states, mdp.metadata["layer_sizes"]
        (3, [1, 1, 1])
        >>> mdp.utility.tolist()
        [[0.0, 1.0], [0.0, 1.0], [0.0, 0.0]]

        An Atari game as the RL Zoo wraps it, with its agents' 4-frame stack:
        ``enumerate_mdp("BreakoutNoFrameskip-v4", 8, frame_stack=4)``.
    """
    _check_options(horizon, max_states, frame_stack)
    if observation_matrix not in (None, True, False):
        raise TypeError(
            f"observation_matrix must be None, True or False, got {observation_matrix!r}."
        )
    t0 = time.perf_counter()
    emu = _as_emulator(env, seed, noops, reward, warmup)
    found = _search(emu, int(horizon), int(frame_stack), int(max_states), bool(keep_states))
    S, A = len(found.depth), int(emu.n_actions)
    frames = np.stack(found.frames)
    frame_index = np.asarray(found.frame_index, dtype=np.int64).reshape(S, int(frame_stack))
    depth = np.asarray(found.depth, dtype=np.int64)
    terminal = np.asarray(found.terminal, dtype=bool)
    n_starts = int((depth == 0).sum())
    p0 = np.zeros(S)
    p0[:n_starts] = 1.0 / n_starts
    if isinstance(emu, ALEEmulator):
        kind = "game" if emu.reward == "game" else ("clipped" if emu.clipped else "game")
        noop_meta: Any = emu.noops
        seed_meta: Any = emu.seed
        warmup_meta: Any = emu.warmup
    else:
        kind, noop_meta, seed_meta, warmup_meta = "emulator", None, None, None
    metadata: dict[str, Any] = {
        "env_id": emu.name,
        "horizon": int(horizon),
        "frame_stack": int(frame_stack),
        "frames": frames,
        "frame_index": frame_index,
        "depth": depth,
        "terminal": terminal,
        "frontier": (depth >= horizon) & ~terminal,
        "parent": np.asarray(found.parent, dtype=np.int64),
        "parent_action": np.asarray(found.parent_action, dtype=np.int64),
        "layer_sizes": list(found.layer_sizes),
        "n_starts": n_starts,
        "reward": kind,
        "noops": noop_meta,
        "warmup": warmup_meta,
        "seed": seed_meta,
    }
    if keep_states:
        metadata["states"] = list(found.states)
    obs_bytes = S * int(frame_stack) * frames[0].nbytes
    attach = (
        observation_matrix
        if observation_matrix is not None
        else (obs_bytes <= OBSERVATION_MATRIX_BYTES)
    )
    metadata["enumeration_seconds"] = time.perf_counter() - t0
    mdp = TabularMDP(
        (np.asarray(found.next_state, dtype=np.int64)[..., None], np.ones((S, A, 1))),
        np.asarray(found.reward, dtype=np.float64),
        int(horizon),
        p0,
        1.0,
        dtype=dtype,
        device=device,
        name=f"{emu.name}(H={horizon}, stack={frame_stack})",
        metadata=metadata,
    )
    if attach:
        mdp.observation_matrix = as_tensor(
            stacked_observations(mdp), name="observation_matrix", device=mdp.device
        )
    return mdp


# ----------------------------------------------------------------------------- observations
def _frame_tables(mdp: TabularMDP) -> tuple[np.ndarray, np.ndarray]:
    frames = mdp.metadata.get("frames")
    index = mdp.metadata.get("frame_index")
    if frames is None or index is None:
        raise ValueError(
            f"{mdp.name} was not built by enumerate_mdp (no frames / frame_index metadata)."
        )
    return np.asarray(frames), np.asarray(index)


def stacked_observations(
    mdp: TabularMDP, states: Any = None, *, channels_first: bool = False
) -> np.ndarray:
    """The agent's observation in each of ``states`` of an MDP built by :func:`enumerate_mdp`.

    Args:
        mdp: the MDP.
        states: state indices (an int array or a slice); None for every state.
        channels_first: move the stacked channels first (``(n, C * k, H, W)``, what SB3's
            ``VecTransposeImage`` gives a CNN policy) instead of last.

    Returns:
        ``(n, *frame_shape[:-1], frame_shape[-1] * k)``: the ``k = frame_stack`` frames,
        oldest first, concatenated on the last axis as ``VecFrameStack`` does (channel-last);
        the frames themselves for ``k = 1``.

    Raises:
        ValueError: an MDP without the frame tables.
    """
    frames, index = _frame_tables(mdp)
    idx = index if states is None else index[states]
    f = frames[idx]  # (n, k, *frame_shape)
    k = f.shape[1]
    if k > 1 or channels_first:
        if f.ndim < 3:
            raise ValueError("frame stacks need frames with at least one axis.")
        f = np.moveaxis(f, 1, -2)  # (n, ..., k, C)
        f = f.reshape(*f.shape[:-2], f.shape[-2] * f.shape[-1])
    else:
        f = f[:, 0]
    if channels_first:
        if f.ndim != 4:
            raise ValueError(
                f"channels_first needs image frames (H, W, C); these stack to {f.shape[1:]}."
            )
        f = f.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(f)


def emulator_policy_table(
    policy: Callable[[np.ndarray], Any],
    mdp: TabularMDP,
    *,
    channels_first: bool = False,
    batch_size: int = 1024,
) -> th.Tensor:
    """``(S, A)`` table of a policy over the stacked observations of an enumerated MDP, built
    batch by batch (the stacks of every state need not fit in memory at once).

    Args:
        policy: maps a batch of observations ``(n, *obs)`` (as :func:`stacked_observations`
            gives them) to action probabilities ``(n, A)``; e.g.
            ``imitation_meg.adapters.sb3.SB3ActionProbs(model.policy)`` with
            ``channels_first=True`` for an SB3 ``CnnPolicy``.
        mdp: an MDP built by :func:`enumerate_mdp`.
        channels_first: see :func:`stacked_observations`.
        batch_size: states per call of ``policy``.

    Raises:
        ValueError: outputs of another shape or rows that are not probabilities; a bad
            ``batch_size``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    S = mdp.n_states
    rows = []
    for i in range(0, S, batch_size):
        obs = stacked_observations(mdp, slice(i, i + batch_size), channels_first=channels_first)
        p = as_tensor(policy(obs), name="policy output", dtype=th.float64).cpu()
        if tuple(p.shape) != (obs.shape[0], mdp.n_actions):
            raise ValueError(
                f"the policy must map {obs.shape[0]} observations of shape {obs.shape[1:]} to "
                f"probabilities ({obs.shape[0]}, {mdp.n_actions}), got {tuple(p.shape)}."
            )
        rows.append(p)
    return as_policy(th.cat(rows), mdp, name="policy output")
