"""The self-reflection benchmark battery and measure (paper Sections 2 and 6, library practice).

The battery is the 25 non-slow environments plus their :func:`minus_rewards` copies (50); the
measure of an agent is its average reward per step over the battery. For an agent whose actions
do not depend on rewards, the runs on ``E`` and ``minus_rewards(E)`` are the same trajectory with
opposite rewards, so its measure is exactly 0.
"""

from __future__ import annotations

from collections.abc import Callable

from imitation_meg.extended.core import Agent, ExtendedEnv
from imitation_meg.extended.envs import ALL_ENVIRONMENTS
from imitation_meg.extended.runner import RunResult, run
from imitation_meg.extended.transforms import minus_rewards

__all__ = ["battery", "self_reflection_benchmark", "self_reflection_measure"]


def battery(*, include_slow: bool = False) -> tuple[type[ExtendedEnv], ...]:
    """The benchmark environments: each environment followed by its ``minus_rewards`` copy.

    Args:
        include_slow: also include DejaVu, ReverseHistory and PunishSlowAgent (56 instead of 50).
    """
    out: list[type[ExtendedEnv]] = []
    for env in ALL_ENVIRONMENTS:
        if env.slow and not include_slow:
            continue
        out.extend((env, minus_rewards(env)))  # type: ignore[arg-type]  # classes hash
    return tuple(out)


def self_reflection_benchmark(
    agent_factory: Callable[..., Agent],
    n_steps: int,
    *,
    seed: int = 0,
    include_slow: bool = False,
    envs: tuple[type[ExtendedEnv], ...] | None = None,
) -> dict[str, RunResult]:
    """Run ``agent_factory`` on every battery environment; returns ``{env name: RunResult}``.

    Raises:
        ValueError: if ``n_steps`` is not positive or ``envs`` is empty.
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps <= 0:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}.")
    envs = battery(include_slow=include_slow) if envs is None else tuple(envs)
    if not envs:
        raise ValueError("envs is empty: pass at least one environment class (default: battery()).")
    return {env.__name__: run(env, agent_factory, n_steps, seed=seed) for env in envs}


def self_reflection_measure(
    agent_factory: Callable[..., Agent],
    n_steps: int,
    *,
    seed: int = 0,
    include_slow: bool = False,
) -> float:
    """Average reward per step over the battery (sum of totals / (n_envs * n_steps)).

    Raises:
        ValueError: if ``n_steps`` is not positive.
    """
    results = self_reflection_benchmark(
        agent_factory, n_steps, seed=seed, include_slow=include_slow
    )
    total = sum(r.total_reward for r in results.values())
    return total / (len(results) * n_steps)
