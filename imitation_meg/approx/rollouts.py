"""Environments given only through reset / step, and rollouts collected from them.

:class:`EnvSource` makes fresh copies of an environment (a gymnasium id, an instance, or a
factory), reads its action space (``Discrete``, or a bounded ``Box``: its uniform reference,
:mod:`imitation_meg.approx.spaces`) and its horizon: ``horizon=`` if given, else the
``TimeLimit`` of the registration (``env.spec.max_episode_steps``), else a seals-style
``env.unwrapped.horizon``.

:func:`collect` runs episodes of a behaviour in several copies stepped in lockstep (one batched
policy call per step), each episode reset with its own seed drawn from the caller's generator,
and returns the transitions as flat arrays (:class:`Rollouts`), for either kind of action: a
behaviour gives action probabilities (``Discrete``) or draws actions (a box). Observations are
flattened with ``gymnasium.spaces.flatten`` (``Discrete`` becomes one-hot) for the networks; the
scored policy sees the raw observations, and its action probabilities (``Discrete``) or action
laws (:class:`Laws`, a box) at every row are stored beside the transitions when asked.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from imitation_meg.type_aliases import EnvKwargs, EnvLike, GymEnv

if TYPE_CHECKING:  # pragma: no cover - typing only
    from imitation_meg.approx.policy import PolicyFn
    from imitation_meg.continuous.densities import ContinuousPolicyFn

__all__ = [
    "MAX_HORIZON",
    "Behaviour",
    "EnvSource",
    "Laws",
    "Rollouts",
    "collect",
    "sample_discrete",
]

#: The longest horizon the approximate estimators take.
MAX_HORIZON = 100_000

#: A behaviour. ``Discrete`` actions: (raw observation batch, flat observations (n, d), decision
#: times (n,)) -> action probabilities (n, A). A box: the same and the generator, -> actions
#: (n, k) drawn in the box.
Behaviour = Callable[..., np.ndarray]


class EnvSource:
    """Fresh copies of an environment with ``Discrete`` or bounded ``Box`` actions, and its
    horizon.

    Args:
        env: a registered gymnasium id, a ``gymnasium.Env`` (copied with ``copy.deepcopy``),
            or a zero-argument factory returning one.
        horizon: number of decisions ``H`` per episode; default the environment's time limit.
        env_kwargs: keyword arguments of ``gymnasium.make`` (with an id only).

    Attributes:
        observation_space: the environment's observation space.
        actions: the action space with its uniform reference
            (:class:`~imitation_meg.approx.spaces.ActionSpace`).
        n_actions: ``|A|`` (0 for a box; then ``low``, ``high``, ``action_dim`` and
            ``action_shape`` describe it).
        horizon: ``H``.
        name: the environment's id (or its class name).
        obs_dim: the flat observation size ``d``.
        env_kwargs: the keyword arguments the environment is made with.

    Raises:
        TypeError: an action space that is neither Discrete nor a Box, an argument that is not
            an environment, or ``env_kwargs`` with something other than an id.
        ValueError: no horizon can be found (pass ``horizon=``), a non-positive horizon, or an
            unbounded box.
    """

    def __init__(
        self,
        env: EnvLike | Callable[[], GymEnv],
        *,
        horizon: int | None = None,
        env_kwargs: EnvKwargs | None = None,
    ) -> None:
        import gymnasium as gym

        self.env_kwargs = dict(env_kwargs or {})
        if self.env_kwargs and not isinstance(env, str):
            raise TypeError(
                f"env_kwargs {sorted(self.env_kwargs)} apply to an environment id, not to a "
                f"{type(env).__name__}; pass the id, or make the environment yourself."
            )
        if isinstance(env, str):
            env_id, kwargs = env, self.env_kwargs
            if env_id.startswith("seals/"):
                import seals  # noqa: F401 (registers the seals environment ids)
            try:
                gym.spec(env_id)
            except gym.error.Error as e:
                from imitation_meg.approx.ale import register_games

                if not register_games(env_id):  # an Atari id before ale_py registered it
                    raise ValueError(f"could not make environment {env_id!r}: {e}") from e
            self._factory: Callable[[], Any] = lambda: gym.make(env_id, **kwargs)  # type: ignore[arg-type]
            self.name = env_id
        elif isinstance(env, gym.Env):
            proto = env
            self._factory = lambda: copy.deepcopy(proto)
            self.name = proto.spec.id if proto.spec is not None else type(proto.unwrapped).__name__
        elif callable(env):
            self._factory = env
            self.name = getattr(env, "__name__", "env")
        else:
            raise TypeError(
                f"env must be a gymnasium id, a gymnasium.Env or a factory, got {type(env).__name__}."
            )
        try:
            probe = self._factory()
        except (TypeError, gym.error.Error) as e:
            if not self.env_kwargs:
                raise
            raise ValueError(
                f"could not make {self.name} with env_kwargs {self.env_kwargs}: {e}"
            ) from None
        if not isinstance(probe, gym.Env):
            raise TypeError(
                f"the env factory returned {type(probe).__name__}, not a gymnasium.Env."
            )
        self._read_actions(probe)
        self.observation_space = probe.observation_space
        self.env_limit = _time_limit(probe)
        if horizon is None:
            horizon = self.env_limit
        if horizon is None:
            raise ValueError(
                f"{self.name} has no time limit (spec.max_episode_steps or a horizon attribute); "
                "pass horizon=H, the number of decisions per episode to score."
            )
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}.")
        if horizon > MAX_HORIZON:
            raise ValueError(
                f"horizon={horizon} decisions: the approximate estimators step through every "
                f"decision of every episode, and hold a value per decision; at most "
                f"{MAX_HORIZON} are supported. Pass a shorter horizon= (the episodes' own length "
                "is usually far less)."
            )
        self.horizon = int(horizon)
        self.obs_dim = _flat_size(self.observation_space, self.name)
        self._box = isinstance(self.observation_space, gym.spaces.Box)
        probe.close()

    def _read_actions(self, probe: Any) -> None:
        """Check the action space of a fresh copy and keep what the estimator needs of it: its
        uniform reference (``actions``), and ``n_actions`` (0 for a box) or the box's bounds."""
        from imitation_meg.approx.spaces import action_space_of

        self.actions = action_space_of(probe.action_space, name=self.name)
        if self.actions.is_box:
            box = self.actions
            self.n_actions = 0  # no finite action set
            self.low, self.high = box.low, box.high  # type: ignore[attr-defined]
            self.action_dim = box.dim  # type: ignore[attr-defined]
            self.action_shape = tuple(probe.action_space.shape)
        else:
            self.n_actions = int(probe.action_space.n)

    def make(self) -> Any:
        """A fresh copy of the environment."""
        return self._factory()

    def flatten(self, obs: list[Any]) -> np.ndarray:
        """Flat float32 observations ``(n, obs_dim)`` for a list of raw observations."""
        if self._box:
            return np.asarray(obs, dtype=np.float32).reshape(len(obs), -1)
        import gymnasium as gym

        space = self.observation_space
        rows: list[Any] = [gym.spaces.flatten(space, o) for o in obs]
        return np.stack(rows).astype(np.float32)

    def stack(self, obs: list[Any]) -> Any:
        """Raw observations as one batch (an array, or a dict of arrays for ``Dict`` spaces)."""
        if isinstance(obs[0], dict):
            return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
        return np.stack([np.asarray(o) for o in obs])


def _flat_size(space: Any, name: str) -> int:
    """The size of ``space``'s observations flattened for the estimators' networks.

    Raises:
        ValueError: a space gymnasium cannot flatten to a vector (a ``Text`` mission, a
            ``Graph``), with what to do.
    """
    import gymnasium as gym

    try:
        flat = bool(space.is_np_flattenable)
    except NotImplementedError:  # a Text or Graph part, inside a Dict or Tuple
        flat = False
    if not flat:
        raise ValueError(
            f"{name}'s observations ({space}) cannot be flattened to a vector for the "
            "approximate estimators (a Text or Graph part, such as MiniGrid's mission). Wrap the "
            "environment to keep the numeric parts (MiniGrid: its ImgObsWrapper or "
            "FlatObsWrapper), or score a fixed-layout MiniGrid exactly (imitation-meg score "
            "--env MiniGrid-... without --approx)."
        )
    return int(gym.spaces.flatdim(space))


def _time_limit(env: Any) -> int | None:
    """The environment's own limit on decisions: its ``TimeLimit`` (``spec.max_episode_steps``),
    a seals-style ``horizon``, or a MiniGrid-style ``max_steps``."""
    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None) if spec is not None else None
    for attr in ("horizon", "max_steps"):
        if limit is None:
            limit = getattr(env.unwrapped, attr, None)
    return int(limit) if isinstance(limit, (int, np.integer)) and limit > 0 else None


@dataclasses.dataclass
class Rollouts:
    """Transitions of ``n_episodes`` episodes, flattened over steps (``N`` rows).

    Attributes:
        x: ``(N, d)`` float32 flat observations at decision time.
        t: ``(N,)`` decision times ``0..H-1``.
        a: ``(N,)`` actions taken (``Discrete``), or ``(N, k)`` float64 actions (a box).
        r: ``(N,)`` rewards received.
        x_next: ``(N, d)`` flat next observations.
        done: ``(N,)`` no value follows this step (the episode terminated, or ``t + 1 = H``).
        episode: ``(N,)`` episode index of each row.
        lengths: ``(n_episodes,)`` decisions per episode.
        returns: ``(n_episodes,)`` summed rewards per episode.
        truncated_early: episodes the environment cut before ``H`` without terminating.
        probs: ``(N, A)`` the scored policy's probabilities at each row (``Discrete`` actions,
            if requested).
        features: ``(N, F)`` the scored agent's hidden features (if requested).
        laws: the scored policy's action law at each row (a box, if requested).
    """

    x: np.ndarray
    t: np.ndarray
    a: np.ndarray
    r: np.ndarray
    x_next: np.ndarray
    done: np.ndarray
    episode: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray
    truncated_early: int = 0
    probs: np.ndarray | None = None
    features: np.ndarray | None = None
    laws: Laws | None = None

    @property
    def n_steps(self) -> int:
        return int(self.t.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.lengths.shape[0])

    @staticmethod
    def concat(parts: list[Rollouts]) -> Rollouts:
        """Rows of several collections in order (episode indices renumbered)."""
        offsets = np.cumsum([0] + [p.n_episodes for p in parts[:-1]])
        cat = np.concatenate

        def opt(name: str) -> np.ndarray | None:
            vals = [getattr(p, name) for p in parts]
            return None if any(v is None for v in vals) else cat(vals)

        return Rollouts(
            x=cat([p.x for p in parts]),
            t=cat([p.t for p in parts]),
            a=cat([p.a for p in parts]),
            r=cat([p.r for p in parts]),
            x_next=cat([p.x_next for p in parts]),
            done=cat([p.done for p in parts]),
            episode=cat([p.episode + o for p, o in zip(parts, offsets, strict=True)]),
            lengths=cat([p.lengths for p in parts]),
            returns=cat([p.returns for p in parts]),
            truncated_early=sum(p.truncated_early for p in parts),
            probs=opt("probs"),
            features=opt("features"),
            laws=Laws.concat([p.laws for p in parts]),
        )


@dataclasses.dataclass
class Laws:
    """The scored policy's action law at every row of a collection (a box).

    Attributes:
        kind: ``"squashed"``, ``"clipped"`` or ``"uniform"``.
        mean: ``(N, k)`` (see :class:`~imitation_meg.continuous.densities.ActionLaw`).
        std: ``(N, k)``.
        low: ``(k,)`` the box.
        high: ``(k,)`` the box.
    """

    kind: str
    mean: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def rows(self, sl: slice) -> Any:
        """The laws of rows ``sl`` (an :class:`~imitation_meg.continuous.densities.ActionLaw`)."""
        from imitation_meg.continuous.densities import ActionLaw

        return ActionLaw(self.kind, self.mean[sl], self.std[sl], self.low, self.high)

    @staticmethod
    def concat(parts: list[Laws | None]) -> Laws | None:
        """The laws of several collections in order (None unless every part has them).

        Raises:
            ValueError: parts with laws of different kinds.
        """
        if not parts or any(p is None for p in parts):
            return None
        laws = [p for p in parts if p is not None]
        kinds = sorted({p.kind for p in laws})
        if len(kinds) > 1:
            raise ValueError(f"cannot join action laws of different kinds {kinds}.")
        cat = np.concatenate
        return Laws(
            kinds[0],
            cat([p.mean for p in laws]),
            cat([p.std for p in laws]),
            laws[0].low,
            laws[0].high,
        )


def sample_discrete(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row ``(n,)`` of probabilities ``p (n, A)`` (by the inverse of each row's
    cumulative sum at one uniform draw per row)."""
    cdf = np.cumsum(p, axis=1)
    u = rng.random(len(p)) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(1), p.shape[1] - 1)


def collect(
    source: EnvSource,
    behaviour: Behaviour,
    n_episodes: int | None,
    rng: np.random.Generator,
    *,
    min_steps: int | None = None,
    scored: PolicyFn | ContinuousPolicyFn | None = None,
    features: bool = False,
    n_envs: int = 16,
    on_step: Callable[[int], None] | None = None,
) -> Rollouts:
    """Run episodes of ``behaviour`` and return their transitions.

    Args:
        source: the environment.
        behaviour: ``Discrete`` actions: ``(raw_obs_batch, flat_obs (n, d), t (n,)) -> (n, A)``
            action probabilities (one action drawn per row with ``rng``); a box:
            ``(raw_obs_batch, flat_obs, t, rng) -> (n, k)`` actions in the box.
        n_episodes: episodes to run (each cut at the horizon), or None with ``min_steps``.
        rng: draws the episodes' reset seeds and the actions.
        min_steps: instead of a number of episodes, start new episodes until this many steps
            are taken (the episodes in progress then finish).
        scored: a policy whose action law is stored at every row: a
            :class:`~imitation_meg.approx.policy.PolicyFn` (``Discrete``: ``Rollouts.probs``)
            or a :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn` (a box:
            ``Rollouts.laws``).
        features: also store the scored agent's hidden features (``Discrete`` actions).
        n_envs: environment copies stepped in lockstep.
        on_step: called with the number of steps just taken (progress bars).

    Returns:
        :class:`Rollouts` with the rows of every episode in episode order.

    Raises:
        ValueError: both or neither of ``n_episodes`` and ``min_steps``; ``features`` for a
            box.
    """
    if (n_episodes is None) == (min_steps is None):
        raise ValueError("pass exactly one of n_episodes and min_steps.")
    box = source.actions.is_box
    if features and box:
        raise ValueError("features= reads a Discrete agent's hidden features; a box has none.")
    seed_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    runner = _Lockstep(source, n_envs, n_episodes, min_steps, seed_rng)
    kind: list[str] = []  # the scored laws' kind (a box)
    while active := runner.active():
        raw_batch, x, t = runner.observe(active)
        if box:
            acts = np.asarray(behaviour(raw_batch, x, t, rng), dtype=np.float64)
            acts = acts.reshape(len(active), -1)
        else:
            acts = sample_discrete(np.asarray(behaviour(raw_batch, x, t), dtype=np.float64), rng)
        extra = _scored_rows(scored, raw_batch, box, features, kind)
        runner.step(active, acts, x, extra)
        if on_step is not None:
            on_step(len(active))
    runner.close()
    return _assemble(source, runner.rows, runner.truncated, kind[-1] if kind else None)


class _Lockstep:
    """Copies of an environment stepped in lockstep, each running one episode at a time, each
    episode reset with its own seed; the rows of every episode, in episode order."""

    def __init__(
        self,
        source: EnvSource,
        n_envs: int,
        n_episodes: int | None,
        min_steps: int | None,
        seed_rng: np.random.Generator,
    ) -> None:
        self.source, self.seed_rng = source, seed_rng
        self.n_episodes, self.min_steps = n_episodes, min_steps
        H = source.horizon
        cap = n_episodes if n_episodes is not None else max(1, -(-int(min_steps or 1) // H))
        self.envs = [source.make() for _ in range(max(1, min(n_envs, cap)))]
        self.slots: list[dict[str, Any] | None] = [None] * len(self.envs)
        self.rows: list[list[dict[str, Any]]] = []
        self.next = self.truncated = self.steps = 0
        for k in range(len(self.envs)):
            self.start(k)

    def start(self, k: int) -> None:
        """Begin the next episode in copy ``k``, or retire it when none is due."""
        i = self.next
        if self.n_episodes is not None:
            more = i < self.n_episodes
        else:
            more = self.steps < (self.min_steps or 0)
        if not more:
            self.slots[k] = None
            return
        self.next = i + 1
        self.rows.append([])
        obs, _ = self.envs[k].reset(seed=int(self.seed_rng.integers(0, 2**31 - 1)))
        self.slots[k] = {"ep": i, "obs": obs, "t": 0}

    def active(self) -> list[int]:
        """The copies with an episode under way."""
        return [k for k, s in enumerate(self.slots) if s is not None]

    def observe(self, active: list[int]) -> tuple[Any, np.ndarray, np.ndarray]:
        """The raw observations as a batch, flattened ``(n, d)``, and the decision times."""
        raw = [self.slots[k]["obs"] for k in active]  # type: ignore[index]
        t = np.array([self.slots[k]["t"] for k in active], dtype=np.int64)  # type: ignore[index]
        return self.source.stack(raw), self.source.flatten(raw), t

    def step(
        self, active: list[int], acts: np.ndarray, x: np.ndarray, extra: dict[str, np.ndarray]
    ) -> None:
        """Step each active copy with its action; record the rows; start the next episodes."""
        source, box = self.source, self.source.actions.is_box
        for j, k in enumerate(active):
            s = self.slots[k]
            assert s is not None
            a: Any = acts[j] if box else int(acts[j])
            obs2, r, term, trunc, _ = self.envs[k].step(
                a.reshape(source.action_shape).astype(np.float32) if box else a
            )
            t_next = s["t"] + 1
            end = bool(term) or t_next >= source.horizon
            row = {"x": x[j], "t": s["t"], "a": a, "r": float(r), "obs_next": obs2, "done": end}
            row.update((key, v[j]) for key, v in extra.items())
            self.rows[s["ep"]].append(row)
            if end or trunc:
                self.truncated += bool(trunc and not end)
                self.start(k)
            else:
                s["obs"], s["t"] = obs2, t_next
        self.steps += len(active)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _scored_rows(
    scored: PolicyFn | ContinuousPolicyFn | None,
    raw: Any,
    box: bool,
    features: bool,
    kind: list[str],
) -> dict[str, np.ndarray]:
    """What is stored of the scored policy at a step's rows: its probabilities (and hidden
    features), or its action laws' parameters (their kind appended to ``kind``).

    Raises:
        TypeError: a policy of the other kind of action.
    """
    from imitation_meg.approx.policy import PolicyFn

    if scored is None:
        return {}
    if box == isinstance(scored, PolicyFn):
        raise TypeError(
            f"scored= must be a {'ContinuousPolicyFn' if box else 'PolicyFn'} for "
            f"{'a box' if box else 'Discrete actions'}, got {type(scored).__name__}."
        )
    if not isinstance(scored, PolicyFn):
        law = scored.law(raw)
        kind.append(law.kind)
        return {"mean": law.mean, "std": law.std}
    out = {"p": scored.probs(raw)}
    if features:
        out["f"] = scored.features(raw)
    return out


def _assemble(
    source: EnvSource, rows: list[list[dict[str, Any]]], truncated: int, kind: str | None
) -> Rollouts:
    """The collected rows as :class:`Rollouts` (episode order)."""
    flat = [r for ep in rows for r in ep]
    lengths = np.array([len(ep) for ep in rows], dtype=np.int64)

    def stacked(key: str) -> np.ndarray | None:
        return np.stack([r[key] for r in flat]) if flat and key in flat[0] else None

    box = source.actions.is_box
    mean, std = stacked("mean"), stacked("std")
    return Rollouts(
        x=np.stack([r["x"] for r in flat]),
        t=np.array([r["t"] for r in flat], dtype=np.int64),
        a=np.stack([r["a"] for r in flat]) if box else np.array([r["a"] for r in flat], np.int64),
        r=np.array([r["r"] for r in flat], dtype=np.float64),
        x_next=source.flatten([r["obs_next"] for r in flat]),
        done=np.array([r["done"] for r in flat], dtype=bool),
        episode=np.repeat(np.arange(len(rows)), lengths),
        lengths=lengths,
        returns=np.array([sum(r["r"] for r in ep) for ep in rows]),
        truncated_early=truncated,
        probs=stacked("p"),
        features=stacked("f"),
        laws=None
        if kind is None or mean is None or std is None
        else Laws(kind, mean, std, source.low, source.high),
    )
