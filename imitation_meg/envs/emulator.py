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

The :class:`Emulator` protocol lives in :mod:`~imitation_meg.envs.emulator_protocol` and
:class:`ALEEmulator` with :func:`make_atari` in :mod:`~imitation_meg.envs.ale`; both are
importable from here.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import as_policy, as_tensor
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.envs.ale import ALEEmulator, make_atari
from imitation_meg.envs.emulator_protocol import Emulator, EmulatorStep

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


def _checked_starts(emu: Emulator) -> list[tuple[bytes, list[np.ndarray]]]:
    """``emu.starts()``, refusing none and a first start without observations."""
    starts = emu.starts()
    if not starts:
        raise ValueError(f"{emu.name} gave no start states; Emulator.starts must give one.")
    if not list(starts[0][1]):
        raise ValueError(f"{emu.name} gave a start without observations; give the reset's.")
    return starts


def _search(
    emu: Emulator, horizon: int, frame_stack: int, max_states: int, keep_states: bool
) -> _Search:
    """Breadth-first search from the starts, every action from every state up to ``horizon``."""
    starts = _checked_starts(emu)
    frames = _Frames(np.asarray(next(iter(starts[0][1]))))
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
        out.layer_sizes.extend([0] * (d + 1 - len(out.layer_sizes)))
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
