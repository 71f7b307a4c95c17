"""Environments with bounded ``Box`` actions given through reset / step, and their rollouts.

:class:`BoxEnvSource` is :class:`~imitation_meg.approx.rollouts.EnvSource` for a ``Box`` action
space (bounded: MEG's reference is the uniform density on it). :func:`collect_box` runs episodes
of a behaviour (a sampler of actions) in several copies stepped in lockstep and returns the
transitions as :class:`~imitation_meg.approx.rollouts.Rollouts` whose ``a`` holds ``(N, d)``
float actions; with ``scored=`` it also stores the scored policy's action law at every row
(:class:`Laws`), which the estimator integrates against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from imitation_meg.approx.rollouts import EnvSource, Rollouts
from imitation_meg.continuous.densities import ActionLaw, ContinuousPolicyFn

__all__ = ["BoxEnvSource", "Laws", "collect_box"]

#: A behaviour: (raw observation batch, flat observations (n, d_obs), decision times (n,),
#: generator) -> actions (n, d) in the box.
Sampler = Callable[[Any, np.ndarray, np.ndarray, np.random.Generator], np.ndarray]


class BoxEnvSource(EnvSource):
    """Fresh copies of an environment with a bounded ``Box`` action space, and its horizon.

    Args:
        env: a registered gymnasium id, a ``gymnasium.Env`` (copied) or a factory.
        horizon: decisions per episode ``H``; default the environment's time limit.

    Attributes:
        low: ``(d,)`` the action box's lower bounds.
        high: ``(d,)`` its upper bounds.
        action_dim: ``d``. The other attributes are those of ``EnvSource``
            (``observation_space``, ``horizon``, ``name``, ``obs_dim``, ``env_limit``).

    Raises:
        TypeError: not a ``Box`` action space, or not an environment.
        ValueError: an unbounded box, no horizon, or a bad id.
    """

    def _read_actions(self, probe: Any) -> None:
        import gymnasium as gym

        space = probe.action_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(
                f"{self.name} has a {type(space).__name__} action space ({space}); the continuous "
                "estimator needs a Box (Discrete actions: imitation_meg.approx.meg_approx)."
            )
        super()._read_actions(probe)


@dataclasses.dataclass
class Laws:
    """The scored policy's action law at every row of a collection.

    Attributes:
        kind: ``"squashed"``, ``"clipped"`` or ``"uniform"``.
        mean: ``(N, d)`` (see :class:`~imitation_meg.continuous.densities.ActionLaw`).
        std: ``(N, d)``.
        low: ``(d,)`` the box.
        high: ``(d,)`` the box.
    """

    kind: str
    mean: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def rows(self, sl: slice) -> ActionLaw:
        """The laws of rows ``sl``."""
        return ActionLaw(self.kind, self.mean[sl], self.std[sl], self.low, self.high)


def collect_box(
    source: BoxEnvSource,
    behaviour: Sampler,
    n_episodes: int | None,
    rng: np.random.Generator,
    *,
    min_steps: int | None = None,
    scored: ContinuousPolicyFn | None = None,
    n_envs: int = 16,
    on_step: Callable[[int], None] | None = None,
) -> tuple[Rollouts, Laws | None]:
    """Run episodes of ``behaviour`` and return their transitions (and the scored laws).

    Args:
        source: the environment.
        behaviour: ``(raw_obs_batch, flat_obs, t, rng) -> (n, d)`` actions in the box.
        n_episodes: episodes to run, or None with ``min_steps``.
        rng: draws the reset seeds and the behaviour's actions.
        min_steps: start new episodes until this many steps are taken.
        scored: store this policy's action law at every row.
        n_envs: copies stepped in lockstep.
        on_step: called with the number of steps just taken.

    Returns:
        ``(rollouts, laws)``; ``rollouts.a`` is ``(N, d)`` float64; ``laws`` is None without
        ``scored``.
    """
    if (n_episodes is None) == (min_steps is None):
        raise ValueError("pass exactly one of n_episodes and min_steps.")
    H = source.horizon
    seed_rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
    cap = n_episodes if n_episodes is not None else max(1, -(-int(min_steps or 1) // H))
    envs = [source.make() for _ in range(max(1, min(n_envs, cap)))]
    slots: list[dict[str, Any] | None] = [None] * len(envs)
    episodes: list[dict[str, list[Any]]] = []
    state = {"next": 0, "truncated": 0, "steps": 0}

    def start(k: int) -> None:
        i = state["next"]
        more = i < n_episodes if n_episodes is not None else state["steps"] < (min_steps or 0)
        if not more:
            slots[k] = None
            return
        state["next"] = i + 1
        episodes.append({key: [] for key in ("x", "t", "a", "r", "on", "done", "mean", "std")})
        obs, _ = envs[k].reset(seed=int(seed_rng.integers(0, 2**31 - 1)))
        slots[k] = {"ep": i, "obs": obs, "t": 0}

    for k in range(len(envs)):
        start(k)
    kind = None
    while any(s is not None for s in slots):
        active = [k for k, s in enumerate(slots) if s is not None]
        raw = [slots[k]["obs"] for k in active]  # type: ignore[index]
        raw_batch = source.stack(raw)
        x = source.flatten(raw)
        t = np.array([slots[k]["t"] for k in active], dtype=np.int64)  # type: ignore[index]
        acts = np.asarray(behaviour(raw_batch, x, t, rng), dtype=np.float64).reshape(
            len(active), -1
        )
        law = scored.law(raw_batch) if scored is not None else None
        if law is not None:
            kind = law.kind
        for j, k in enumerate(active):
            s = slots[k]
            assert s is not None
            a = acts[j]
            obs2, r, term, trunc, _ = envs[k].step(
                a.reshape(source.action_shape).astype(np.float32)
            )
            t_next = s["t"] + 1
            end = bool(term) or t_next >= H
            ep = episodes[s["ep"]]
            ep["x"].append(x[j])
            ep["t"].append(s["t"])
            ep["a"].append(a)
            ep["r"].append(float(r))
            ep["on"].append(obs2)
            ep["done"].append(end)
            if law is not None:
                ep["mean"].append(law.mean[j])
                ep["std"].append(law.std[j])
            if end or trunc:
                if trunc and not end:
                    state["truncated"] += 1
                start(k)
            else:
                s["obs"], s["t"] = obs2, t_next
        state["steps"] += len(active)
        if on_step is not None:
            on_step(len(active))
    for env in envs:
        env.close()
    return _assemble(source, episodes, state["truncated"], kind)


def _assemble(
    source: BoxEnvSource, episodes: list[dict[str, list[Any]]], truncated: int, kind: str | None
) -> tuple[Rollouts, Laws | None]:
    def cat(key: str) -> list[Any]:
        return [v for ep in episodes for v in ep[key]]

    lengths = np.array([len(ep["t"]) for ep in episodes], dtype=np.int64)
    roll = Rollouts(
        x=np.stack(cat("x")).astype(np.float32),
        t=np.array(cat("t"), dtype=np.int64),
        a=np.stack(cat("a")).astype(np.float64),
        r=np.array(cat("r"), dtype=np.float64),
        x_next=source.flatten(cat("on")),
        done=np.array(cat("done"), dtype=bool),
        episode=np.repeat(np.arange(len(episodes)), lengths),
        lengths=lengths,
        returns=np.array([sum(ep["r"]) for ep in episodes]),
        truncated_early=truncated,
    )
    if kind is None:
        return roll, None
    laws = Laws(kind, np.stack(cat("mean")), np.stack(cat("std")), source.low, source.high)
    return roll, laws
