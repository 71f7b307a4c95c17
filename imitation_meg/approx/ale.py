"""The Arcade Learning Environment as a simulator on arrays of states, for the soft-value curve.

The curve's estimators (:mod:`imitation_meg.approx.smc`) and the policy's episodes
(:func:`imitation_meg.approx.agent.simulate_episodes`) step a
:class:`~imitation_meg.approx.simulators.Dynamics` on arrays of states ``(n, d)``. An Atari
game's state is no vector: it is the emulator's state (``ale.cloneState()``) together with the
wrappers' state and the stack of frames the agent observes. :class:`ALEDynamics` keeps such
states in a registry and hands out arrays ``(n, 1)`` of keys into it:

- a key ``k >= 0`` is an entry of this simulator's registry: the emulator state (serialized),
  the last ``frame_stack`` frames the agent saw, and how the entry was first reached (its
  parent entry and action, down to a start), so that any entry can be replayed;
- a key ``-(seed + 1) < 0`` is the start of the episode reset with ``seed``: any simulator of
  the same game resolves it, so a curve's starts survive in its file.

Two entries merge where both the emulator's serialized state and the frame stack are equal
(through a BLAKE2b digest, as :func:`imitation_meg.envs.emulator.enumerate_mdp` merges states),
and a step from an entry with an action is computed once while the entry lives: where many
particles of a sequential Monte Carlo sit in one state (at the start, after resampling, and
wherever the game ignores an action, such as FIRE in Pong after the serve) the emulator runs
once. After each step the registry keeps only the entries the step's input and output refer to
(and the starts): memory stays bounded by one step's rows. An entry asked for after it was
dropped is replayed from its start.

**The MDP the agent acts in** is the RL Zoo's: SB3's ``AtariWrapper`` (random no-op resets,
then FIRE where the game needs it; each decision is ``frame_skip = 4`` emulator frames, the
observation the grey 84x84 maximum of the last two; episodes that end at a lost life; rewards
clipped to their sign) and ``VecFrameStack``'s stack of the last 4 frames (zeros before the
first). The rewards of the curve are those the wrapped environment returns, so the agent's
episode returns here are the clipped returns it was trained on, per life where a life ends the
episode; a horizon ``H`` counts decisions (``4 H`` frames). The emulator and the wrappers are
those of :class:`imitation_meg.envs.emulator.ALEEmulator`, which saves, restores and steps them.

**Refused** (``ValueError``, one line): sticky actions (``repeat_action_probability > 0``, the
``v5`` ids' default 0.25: the emulator then repeats the previous action at random, and the
curve's identity needs deterministic steps), a random frame skip, and a curve whose estimated
cost exceeds :data:`MAX_CURVE_SECONDS` (:meth:`ALEDynamics.check_cost`, which names a horizon
that fits).
"""

from __future__ import annotations

import array
import hashlib
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from imitation_meg.approx.smc import CURVE_RUNGS, MIN_PARTICLES
from imitation_meg.approx.spaces import DiscreteActions
from imitation_meg.envs.emulator import ALEEmulator, make_atari

__all__ = [
    "MAX_CURVE_SECONDS",
    "SECONDS_PER_STEP",
    "ALEDynamics",
    "ale_dynamics",
    "is_ale_id",
    "register_games",
    "zoo_atari_mismatch",
]

#: What an RL Zoo run's ``config.yml`` holds for its Atari agents (``env_wrapper``,
#: ``frame_stack``): the MDP :class:`ALEDynamics` simulates by default.
ZOO_ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"

#: Look-ahead steps per rung of the curve's sequential Monte Carlo (about 15 s of CPU).
RUNG_BUDGET = 8_000
#: Starts of a default curve: the ``AtariWrapper``'s resets differ only in their number of
#: no-ops (1 to 30), and every start costs its particles at every rung; 16 starts of the
#: SMC's least 8 particles keep 128 paths (the curve's least effective sample size, 100) at
#: beta = 0.
N_STARTS = 16
#: Measured CPU seconds of one agent step (4 frames, the 84x84 frame, a clone) on a 2-core
#: machine: what :meth:`ALEDynamics.check_cost` multiplies by.
SECONDS_PER_STEP = 2.0e-3
#: The longest curve :meth:`ALEDynamics.check_cost` lets start, in CPU seconds.
MAX_CURVE_SECONDS = 3600.0
#: Wrappers of the environment handed to :func:`ale_dynamics` that change nothing simulated.
_BOOKKEEPING = frozenset({"TimeLimit", "OrderEnforcing", "PassiveEnvChecker", "EnvChecker"})
#: Tags that tell apart the registries of the simulators of one process.
_TAGS = itertools.count(1)
_TAG_BITS = 2**36


class _Entry:
    """One registered state: the emulator's serialized state, the frame stack (oldest first,
    each ``(digest, frame)``), whether a step ended the episode there, and the steps found
    from it (``action -> (key, reward, terminated)``)."""

    __slots__ = ("digest", "frames", "state", "steps", "terminal")

    def __init__(self, state: bytes, frames: tuple[Any, ...], terminal: bool, digest: bytes):
        self.state, self.frames, self.terminal, self.digest = state, frames, terminal, digest
        self.steps: dict[int, tuple[int, float, bool]] = {}


def _frame(obs: np.ndarray) -> tuple[bytes, np.ndarray]:
    arr = np.ascontiguousarray(obs)
    return hashlib.blake2b(arr.tobytes(), digest_size=16).digest(), arr


class ALEDynamics:
    """An Atari game as the RL Zoo's agents play it, on arrays of registry keys (module doc).

    Args:
        env: a gymnasium Atari environment (``gymnasium.make("PongNoFrameskip-v4")``), with no
            wrappers but a time limit and gymnasium's checks; the simulator makes its own copy
            (same id and keyword arguments) and wraps it.
        frame_stack: frames the agent stacks (the Zoo's Atari agents: 4).
        wrapper_kwargs: ``AtariWrapper``'s options (default the Zoo's: its defaults).
        warmup: actions played after every reset before the episode's first decision (as
            :func:`~imitation_meg.envs.emulator.enumerate_mdp`'s ``warmup``: e.g. no-ops up to
            the moment a short horizon reaches a reward); their frames fill the stack.

    Attributes:
        actions, n_actions, name: the action space, ``|A|``, the environment's id.
        curve_method: ``"smc"`` (sequential Monte Carlo without a twist: no state box).
        rung_budget: look-ahead steps per rung of the curve.
        n_starts: starts of a default curve (:data:`N_STARTS`).

    Raises:
        TypeError: not an ALE environment, or wrappers besides a time limit and checks.
        ValueError: sticky actions or a random frame skip (random steps).
    """

    curve_method = "smc"
    rung_budget = RUNG_BUDGET
    n_starts = N_STARTS

    def __init__(
        self,
        env: Any,
        *,
        frame_stack: int = 4,
        wrapper_kwargs: dict[str, Any] | None = None,
        warmup: Sequence[int] = (),
    ) -> None:
        core = getattr(env, "unwrapped", None)
        if getattr(core, "ale", None) is None:
            raise TypeError(f"ALEDynamics needs an ALE environment, got {type(env).__name__}.")
        layer = env
        while layer is not core:
            kind = type(layer).__name__
            if kind not in _BOOKKEEPING:
                raise TypeError(
                    f"ALEDynamics wraps the game itself as the RL Zoo does (AtariWrapper and a "
                    f"{frame_stack}-frame stack); pass the environment without its {kind} "
                    "wrapper (wrapper_kwargs= sets AtariWrapper's options)."
                )
            layer = layer.env
        if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or frame_stack < 1:
            raise ValueError(f"frame_stack must be a positive integer, got {frame_stack!r}.")
        spec = getattr(env, "spec", None) or getattr(core, "spec", None)
        if spec is None:
            raise TypeError("ALEDynamics needs an environment made by gymnasium.make (an id).")
        self.name = str(spec.id)
        self.frame_stack = frame_stack
        self.wrapper_kwargs = dict(wrapper_kwargs or {})
        self.warmup = [int(a) for a in warmup]
        self._make_kwargs = dict(spec.kwargs)
        wrapped = make_atari(spec.id, wrapper_kwargs=self.wrapper_kwargs, **self._make_kwargs)
        # ALEEmulator refuses sticky actions and a random frame skip (ValueError)
        self.emu = ALEEmulator(wrapped, warmup=self.warmup)
        self.n_actions = self.emu.n_actions
        self.actions = DiscreteActions(self.n_actions)
        self._tag = next(_TAGS) * _TAG_BITS
        self._entries: dict[int, _Entry] = {}
        self._by_digest: dict[bytes, int] = {}
        self._parent = array.array("q")
        self._action = array.array("q")
        self._roots: dict[int, int] = {}  # local index of a start -> its seed
        self._starts: dict[int, int] = {}  # seed -> local index (never dropped)
        self.emulator_steps = 0

    # ------------------------------------------------------------------ the registry
    def _register(
        self, state: bytes, frames: tuple[Any, ...], terminal: bool, parent: int, action: int
    ) -> int:
        """The local index of the entry (an existing one where equal)."""
        digest = self._digest(state, frames, terminal)
        i = self._by_digest.get(digest)
        if i is not None:
            return i
        i = len(self._parent)
        self._parent.append(parent)
        self._action.append(action)
        self._entries[i] = _Entry(state, frames, terminal, digest)
        self._by_digest[digest] = i
        return i

    @staticmethod
    def _digest(state: bytes, frames: tuple[Any, ...], terminal: bool) -> bytes:
        h = hashlib.blake2b(state, digest_size=32)
        for d, _ in frames:
            h.update(d)
        h.update(b"T" if terminal else b"F")
        return h.digest()

    def _start_index(self, seed: int) -> int:
        i = self._starts.get(seed)
        if i is not None and i in self._entries:
            return i
        self._seed_without_reload(seed)
        ((state, seen),) = self.emu.starts()
        zero = _frame(np.zeros_like(np.asarray(seen[0])))
        stack = tuple([zero] * self.frame_stack + [_frame(np.asarray(o)) for o in seen])
        i = self._register(state, stack[-self.frame_stack :], False, -1, -1)
        self._roots.setdefault(i, seed)
        self._starts[seed] = i
        return i

    def _index(self, key: float) -> int:
        """The local index of a key (a start resolved; a dropped entry left dropped)."""
        k = int(key)
        if k < 0:
            return self._start_index(-k - 1)
        if k // _TAG_BITS * _TAG_BITS != self._tag or k - self._tag >= len(self._parent):
            raise ValueError(
                f"state {k} is not one of this simulator's (each ALEDynamics keys its own "
                "registry; only starts, keys < 0, carry over): step states this simulator gave."
            )
        return k - self._tag

    def _seed_without_reload(self, seed: int) -> None:
        """Prepare the next reset to be that of ``seed`` without reloading the ROM (which
        ``reset(seed=...)`` does, at about 0.1 s): the generator that ``NoopResetEnv`` draws
        from seeded as ``AtariEnv.seed_game`` seeds it (the ALE's own generator drives only
        sticky actions, refused here). :meth:`check_against` compares such starts with true
        resets."""
        from gymnasium.utils import seeding

        np_seed = np.random.SeedSequence(seed).generate_state(n_words=2)[0]
        self.emu.env.unwrapped._np_random, _ = seeding.np_random(int(np_seed))
        self.emu.seed = None  # type: ignore[assignment]  # reset(seed=None): no reload

    def _local(self, key: float) -> int:
        """The local index of a key, its entry present (a dropped entry replayed)."""
        i = self._index(key)
        if i not in self._entries:
            self._replay(i)
        return i

    def _path(self, i: int) -> tuple[int, list[int]]:
        """The seed of entry ``i``'s start and the actions from there to it."""
        acts = []
        while self._parent[i] >= 0:
            acts.append(int(self._action[i]))
            i = int(self._parent[i])
        return self._roots[i], acts[::-1]

    def _replay(self, i: int) -> None:
        """Register dropped entry ``i`` again (same index) by replaying its path from its
        start."""
        seed, acts = self._path(i)
        ent = self._entries[self._start_index(seed)]
        state, frames, term = ent.state, ent.frames, False
        for a in acts:
            self.emu.restore(state)
            obs, _, term = self.emu.step(a)
            self.emulator_steps += 1
            state, frames = self.emu.save(), (*frames[1:], _frame(np.asarray(obs)))
        digest = self._digest(state, frames, term)
        self._entries[i] = _Entry(state, frames, term, digest)
        self._by_digest.setdefault(digest, i)

    def _child(self, i: int, a: int) -> tuple[int, float, bool]:
        """Step entry ``i`` with action ``a``: ``(local index, reward, terminated)``."""
        ent = self._entries[i]
        hit = ent.steps.get(a)
        if hit is not None and hit[0] in self._entries:
            return hit
        self.emu.restore(ent.state)
        obs, r, term = self.emu.step(a)
        self.emulator_steps += 1
        frames = (*ent.frames[1:], _frame(np.asarray(obs)))
        j = self._register(self.emu.save(), frames, bool(term), i, a)
        out = (j, float(r), bool(term))
        ent.steps[a] = out
        return out

    def _keep_only(self, keep: set[int]) -> None:
        """Drop the entries outside ``keep`` and the starts."""
        keep |= set(self._starts.values())
        for i in [i for i in self._entries if i not in keep]:
            ent = self._entries.pop(i)
            if self._by_digest.get(ent.digest) == i:
                del self._by_digest[ent.digest]

    # ------------------------------------------------------------------ the protocol
    def start(self, env: Any) -> np.ndarray:
        """The start key ``(1,)`` of ``env``'s reset: its seed drawn from the generator the
        reset just seeded (the simulator's own reset with that seed draws the no-ops)."""
        seed = int(env.unwrapped.np_random.integers(0, 2**31 - 1))
        self._start_index(seed)
        return np.array([-(seed + 1.0)])

    def step(self, s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys = np.asarray(s, dtype=np.float64).reshape(len(s), -1)[:, 0]
        acts = np.asarray(a).reshape(-1).astype(np.int64)
        if len(acts) != len(keys) or (
            len(acts) and not 0 <= acts.min() <= acts.max() < self.n_actions
        ):
            raise ValueError(
                f"step needs one action in 0..{self.n_actions - 1} per state, got "
                f"{len(acts)} actions for {len(keys)} states."
            )
        nxt = np.empty(len(keys))
        rew = np.empty(len(keys))
        term = np.empty(len(keys), dtype=bool)
        local: dict[float, int] = {}
        for n, (k, act) in enumerate(zip(keys.tolist(), acts.tolist(), strict=True)):
            i = local.get(k)
            if i is None:
                i = local[k] = self._local(k)
            j, r, t = self._child(i, act)
            nxt[n], rew[n], term[n] = self._tag + j, r, t
        self._keep_only(set(local.values()) | {int(k) - self._tag for k in np.unique(nxt)})
        return nxt[:, None], rew, term

    def observe(self, s: np.ndarray) -> np.ndarray:
        """The stacked frames ``(n, 84, 84, frame_stack)`` ``uint8``, oldest first on the last
        axis (what ``VecFrameStack`` gives the agent)."""
        keys = np.asarray(s, dtype=np.float64).reshape(len(s), -1)[:, 0]
        out = []
        for k in keys.tolist():
            frames = self._entries[self._local(k)].frames
            out.append(np.concatenate([f for _, f in frames], axis=-1))
        return np.stack(out) if out else np.zeros((0,), dtype=np.uint8)

    # ------------------------------------------------------------------ checks
    def check_cost(self, horizon: int, n_starts: int, n_particles: int | None = None) -> None:
        """Refuse a curve that would take more than :data:`MAX_CURVE_SECONDS` of CPU.

        The estimate is an upper bound: :data:`~imitation_meg.approx.smc.CURVE_RUNGS` rungs of
        ``max(rung_budget, n_starts x P x horizon x |A|)`` look-ahead steps at
        :data:`SECONDS_PER_STEP` each, ``P`` the particles per start (``n_particles``, at least
        :data:`~imitation_meg.approx.smc.MIN_PARTICLES`; merged states make it less where the
        particles meet).

        Raises:
            ValueError: the estimate, with the longest horizon that fits.
        """
        per = n_starts * max(MIN_PARTICLES, n_particles or 0) * self.n_actions
        steps = CURVE_RUNGS * max(self.rung_budget, per * horizon)
        seconds = steps * SECONDS_PER_STEP
        if seconds <= MAX_CURVE_SECONDS:
            return
        fits = max(1, int(MAX_CURVE_SECONDS / (SECONDS_PER_STEP * CURVE_RUNGS * per)))
        raise ValueError(
            f"the soft-value curve of {self.name} at H={horizon} decisions ({4 * horizon} "
            f"frames) from {n_starts} starts would take up to {seconds / 3600:.1f} CPU hours "
            f"({CURVE_RUNGS} rungs x {steps // CURVE_RUNGS} emulator steps at "
            f"{SECONDS_PER_STEP * 1e3:.0f} ms); pass --horizon {fits} (or fewer starts: "
            f"--approx-option n_starts=K) for at most {MAX_CURVE_SECONDS / 60:.0f} minutes."
        )

    def check_against(
        self, env: Any, states: np.ndarray, actions: np.ndarray, *, atol: float = 1e-5
    ) -> str:
        """Replay each ``(states[i], actions[i])`` in a fresh copy of the wrapped game, played
        from its start without any restore (consecutive pairs of one episode continue one
        replay), and compare the stacked frames, reward and termination with :meth:`step`'s.

        Returns:
            ``""`` where all agree, else the first disagreement.
        """
        states = np.asarray(states, dtype=np.float64).reshape(len(states), -1)
        acts = np.asarray(actions).reshape(-1).astype(np.int64)
        if len(acts) != len(states):
            raise ValueError(
                f"check_against needs one action per state, got {len(acts)} for {len(states)}."
            )
        replay = make_atari(self.name, wrapper_kwargs=self.wrapper_kwargs, **self._make_kwargs)
        prev: tuple[int, int] | None = None  # the replay's last (entry, action)
        cur = 0  # the simulator's key of the state the replay stands in
        stack: list[np.ndarray] = []
        try:
            for n in range(len(states)):
                i = self._index(states[n, 0])
                if prev is None or (int(self._parent[i]), int(self._action[i])) != prev:
                    stack = self._replay_to(replay, i)  # a new episode, or a jump
                    cur = self._tag + self._local(states[n, 0])
                obs, r, term, trunc, _ = replay.step(int(acts[n]))
                stack = [*stack[1:], np.asarray(obs)]
                there = np.concatenate(stack, axis=-1)
                nxt, r_sim, t_sim = self.step(np.array([[cur]]), acts[n : n + 1])
                here = self.observe(nxt)[0]
                if not np.array_equal(there, here):
                    gap = int(np.abs(there.astype(int) - here.astype(int)).max())
                    return f"step {n} (action {acts[n]}): the frames differ by up to {gap}"
                if abs(float(r) - float(r_sim[0])) > atol * max(1.0, abs(float(r))):
                    return f"step {n} (action {acts[n]}): the reward is {r} there, {r_sim[0]} here"
                if bool(term or trunc) != bool(t_sim[0]):
                    return (
                        f"step {n} (action {acts[n]}): the step ends the episode on one side only"
                    )
                prev, cur = (i, int(acts[n])), int(nxt[0, 0])
        finally:
            replay.close()
        return ""

    def _replay_to(self, replay: Any, i: int) -> list[np.ndarray]:
        """Reset ``replay`` as the start of entry ``i`` and play its path; the frame stack."""
        seed, acts = self._path(i)
        chain = _chain(replay)
        for w in chain:
            if type(w).__name__ == "EpisodicLifeEnv":
                w.was_real_done = True  # a real reset, not a lost life's no-op step
        obs, _ = replay.reset(seed=seed)
        stack = [np.zeros_like(np.asarray(obs))] * (self.frame_stack - 1) + [np.asarray(obs)]
        for a in [*self.warmup, *acts]:
            obs, *_ = replay.step(a)
            stack = [*stack[1:], np.asarray(obs)]
        return stack


def _chain(env: Any) -> list[Any]:
    out = []
    while hasattr(env, "env"):
        out.append(env)
        env = env.env
    return out


def ale_dynamics(env: Any) -> tuple[ALEDynamics, str]:
    """:func:`~imitation_meg.approx.simulators.dynamics_for` of an ALE environment: the RL
    Zoo's Atari MDP of it (:class:`ALEDynamics`).

    Raises:
        ValueError: sticky actions or a random frame skip (no estimator here scores image
            observations of random dynamics), or wrappers the simulator does not know.
    """
    try:
        return ALEDynamics(env), ""
    except TypeError as e:
        raise ValueError(str(e)) from e
    except ValueError as e:
        raise ValueError(f"{_name(env)} cannot be scored: {_first(e)}") from e


def _name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return str(getattr(spec, "id", None) or type(env.unwrapped).__name__)


def _first(e: Exception) -> str:
    """The error's message up to its first sentence's end, kept on one line."""
    text = " ".join(str(e).split())
    cut = text.find("; enumeration needs")
    if cut < 0:
        return text
    return text[:cut] + (
        ": the soft-value curve needs deterministic steps (the NoFrameskip-v4 ids, or "
        "repeat_action_probability=0); sticky-action agents are not scored here."
    )


def register_games(env_id: str) -> bool:
    """Register ale-py's Atari ids with gymnasium (where ale-py is installed); whether
    ``env_id`` is known afterwards."""
    import gymnasium as gym

    try:
        gym.spec(env_id)
        return True
    except gym.error.Error:
        pass
    try:
        import ale_py
    except ImportError:
        return False
    if hasattr(gym, "register_envs"):
        gym.register_envs(ale_py)
    try:
        gym.spec(env_id)
    except gym.error.Error:
        return False
    return True


def is_ale_id(env_id: str) -> bool:
    """Whether ``env_id`` is one of ale-py's Atari games (registered here if needed)."""
    import gymnasium as gym

    if not register_games(env_id):
        return False
    return "ale_py" in str(gym.spec(env_id).entry_point)


def zoo_atari_mismatch(config: dict[str, Any]) -> str:
    """Why an RL Zoo run's hyperparameters (``config.yml``) describe another MDP than the one
    :class:`ALEDynamics` simulates (``""`` if none): an ``env_wrapper`` other than
    ``AtariWrapper`` with its defaults, or a ``frame_stack`` other than 4."""
    wrapper = config.get("env_wrapper")
    names = wrapper if isinstance(wrapper, list) else [wrapper]
    if names != [ZOO_ATARI_WRAPPER]:
        return (
            f"its env_wrapper {wrapper!r} is not the RL Zoo's Atari default "
            f"[{ZOO_ATARI_WRAPPER!r}] (with its default options), the MDP the ALE simulator plays"
        )
    stack = config.get("frame_stack")
    if stack != 4:
        return f"its frame_stack {stack!r} is not the RL Zoo's 4, which the ALE simulator stacks"
    return ""
