"""Rollouts collected from environments given only through reset / step.

:class:`EnvSource` (:mod:`~imitation_meg.approx.env_source`, importable from here too)
makes fresh copies of an environment (a gymnasium id, an instance, or a
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

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg.approx.env_source import MAX_HORIZON, EnvSource

# imported here, not only for type checking, so that the signatures' annotations resolve (the
# API reference links them to their classes)
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

#: A behaviour. ``Discrete`` actions: (raw observation batch, flat observations (n, d), decision
#: times (n,)) -> action probabilities (n, A). A box: the same and the generator, -> actions
#: (n, k) drawn in the box.
Behaviour = Callable[..., np.ndarray]


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

        rows = {n: cat([getattr(p, n) for p in parts]) for n in _ROW_FIELDS}
        return Rollouts(
            **rows,
            episode=cat([p.episode + o for p, o in zip(parts, offsets, strict=True)]),
            truncated_early=sum(p.truncated_early for p in parts),
            probs=opt("probs"),
            features=opt("features"),
            laws=Laws.concat([p.laws for p in parts]),
        )


#: The fields of :class:`Rollouts` that :meth:`Rollouts.concat` joins as they are.
_ROW_FIELDS = ("x", "t", "a", "r", "x_next", "done", "lengths", "returns")


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
        t=_column(flat, "t", np.int64),
        a=np.stack([r["a"] for r in flat]) if box else _column(flat, "a", np.int64),
        r=_column(flat, "r", np.float64),
        x_next=source.flatten([r["obs_next"] for r in flat]),
        done=_column(flat, "done", bool),
        episode=np.repeat(np.arange(len(rows)), lengths),
        lengths=lengths,
        returns=np.array([sum(r["r"] for r in ep) for ep in rows]),
        truncated_early=truncated,
        probs=stacked("p"),
        features=stacked("f"),
        laws=_laws(source, kind, mean, std),
    )


def _column(flat: list[dict[str, Any]], key: str, dtype: Any) -> np.ndarray:
    """``(N,)`` the rows' ``key`` entries as an array of ``dtype``."""
    return np.array([r[key] for r in flat], dtype=dtype)


def _laws(
    source: EnvSource, kind: str | None, mean: np.ndarray | None, std: np.ndarray | None
) -> Laws | None:
    """The scored policy's action laws at the rows (None where they were not stored)."""
    if kind is None or mean is None or std is None:
        return None
    return Laws(kind, mean, std, source.low, source.high)
