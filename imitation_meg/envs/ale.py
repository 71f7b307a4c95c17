"""The ALE's Atari games as an :class:`~imitation_meg.envs.emulator_protocol.Emulator`.

:class:`ALEEmulator` steps a gymnasium Atari environment (ale-py) through its own wrappers (SB3's
``AtariWrapper``, as the RL Zoo wraps it), saves and restores the ALE's state and sets the
wrappers' state between steps from the restored emulator; :func:`make_atari` makes such an
environment as the RL Zoo does. Sticky actions, a random frame skip and wrappers whose state this
module does not know are refused by name.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from imitation_meg.envs.emulator_protocol import EmulatorStep

__all__ = ["ALEEmulator", "make_atari"]

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


def _ale_of(env: Any, u: Any) -> Any:
    """The ALE interface of ``env`` (``u`` its unwrapped environment), or a TypeError."""
    ale = getattr(u, "ale", None)
    if ale is None or not callable(getattr(ale, "cloneState", None)):
        raise TypeError(
            f"ALEEmulator needs a gymnasium Atari environment (ale-py), got "
            f"{type(u if u is not None else env).__name__}."
        )
    return ale


def _check_reward_and_seed(reward: str, seed: Any) -> None:
    if reward not in ("env", "game"):
        raise ValueError(
            f"reward must be 'env' (the wrapped environment's, clipped under "
            f"ClipRewardEnv) or 'game' (the score change), got {reward!r}."
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")


def _check_deterministic(ale: Any, u: Any) -> None:
    """Refuse sticky actions and a random frame skip: both make the steps random."""
    p = float(ale.getFloat("repeat_action_probability"))
    if p > 0:
        raise _sticky_error(p, "repeat_action_probability")
    frameskip = getattr(u, "_frameskip", 1)
    if not isinstance(frameskip, (int, np.integer)):
        raise ValueError(  # noqa: TRY004 - a random skip is a bad value, not a bad kind
            f"the environment skips a random number of frames per step (frameskip="
            f"{frameskip!r}), so its steps are random; use the NoFrameskip-v4 id (with "
            "AtariWrapper's fixed skip of 4) or an integer frameskip."
        )


def _is_count(k: Any) -> bool:
    return not isinstance(k, bool) and isinstance(k, (int, np.integer))


def _warmup_actions(warmup: Sequence[int], n_actions: int) -> list[int]:
    if not all(_is_count(a) and 0 <= a < n_actions for a in warmup):
        raise ValueError(f"warmup must list actions in 0..{n_actions - 1}, got {list(warmup)!r}.")
    return [int(a) for a in warmup]


def _noop_list(noops: Sequence[int]) -> list[int | None]:
    """A list of numbers of no-ops, checked: positive and each once."""
    counts = list(noops)
    if not counts or not all(_is_count(k) and k >= 1 for k in counts):
        raise ValueError(
            f"noops must list positive numbers of no-ops (NoopResetEnv takes at least 1), "
            f"got {noops!r}."
        )
    if len(set(counts)) != len(counts):
        raise ValueError(f"noops lists a count twice: {noops!r}; list each once.")
    return [int(k) for k in counts]


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
        self.ale: Any = _ale_of(env, u)
        _check_reward_and_seed(reward, seed)
        _check_deterministic(self.ale, u)
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
        self.warmup = _warmup_actions(warmup, self.n_actions)

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
        return _noop_list(noops)

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
