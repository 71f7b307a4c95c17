"""Agent protocol, agent factories and the extended-environment base class.

An *extended environment* (Alexander et al. 2022, Def. 2 and Section 4) is built from an *agent
factory*: it keeps its own copies ("sims") of the agent and asks them what the agent *would* do.
The practical protocol is:

* an agent has ``act(obs) -> int`` (pure: it must not change the agent) and
  ``train(o_prev, action, reward, o_next) -> None``;
* an environment has ``reset() -> obs`` and ``step(action) -> (reward, obs)``; there is no
  termination, a run lasts a fixed number of steps (see :func:`imitation_meg.extended.run`).

Metadata mechanism. Environment metadata reaches agents through the factory call:
:func:`make_agent` calls ``factory(**meta)`` with the keyword arguments in ``meta`` (``n_actions``,
``n_obs``, ``obs_shape``, ``seed`` and overrides such as ``learning_rate``) that the factory's
signature accepts, and drops the others. A plain zero-argument callable (``lambda: MyAgent()``)
therefore still works: it simply receives nothing. ``functools.partial(agents.Constant, action=1)``
receives ``n_actions``, ``n_obs`` and ``seed`` because ``Constant`` accepts them.

Semi-determinism (paper Def. 7). All shipped agents draw their randomness from
:func:`stream_uniform` keyed by ``(seed, number of trainings, observation, ...)``; two instances
built with the same seed and trained identically act identically, and nothing touches a global
random number generator.
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Agent",
    "AgentFactory",
    "AgentMaker",
    "ExtendedEnv",
    "accepted_kwargs",
    "check_action",
    "make_agent",
    "obs_key",
    "stream_uniform",
]

_MASK64 = (1 << 64) - 1


@runtime_checkable
class Agent(Protocol):
    """The agent protocol of the practical extended-environment framework.

    ``act`` must be pure (calling it never changes what the agent does next); ``train`` is the only
    way an agent learns.
    """

    def act(self, obs: Any) -> int:
        """Return the action (an int in ``[0, n_actions)``) the agent takes on ``obs``."""
        ...

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Learn from one transition ``(o_prev, action, reward, o_next)``."""
        ...


#: Builds an agent from the environment's metadata (``n_actions``, ``seed``, ...).
AgentFactory = Callable[..., Agent]
#: The internal hook that builds an environment's simulations (see :class:`ExtendedEnv`).
AgentMaker = Callable[..., Agent]


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def stream_uniform(*keys: int) -> float:
    """A uniform number in ``[0, 1)`` that is a pure function of integer ``keys``.

    Agents call this with ``(seed, n_trainings, obs_key(obs), purpose)`` so that identically
    trained instances draw identical numbers (semi-determinism) without any shared state.

    Args:
        *keys: integers (negative values are reduced modulo 2**64).

    Returns:
        A float in ``[0, 1)`` with 53 random bits.
    """
    h = 0x1234567
    for k in keys:
        h = _splitmix64(h ^ (int(k) & _MASK64))
    return (h >> 11) / float(1 << 53)


def obs_key(obs: Any) -> int:
    """A deterministic integer key for an observation (an int, a tuple or an array).

    Integers map to themselves; anything else is converted to a float64 array and hashed with
    CRC32 of its bytes (stable across processes, unlike Python's ``hash`` of strings).
    """
    if isinstance(obs, (int, np.integer)) and not isinstance(obs, bool):
        return int(obs)
    arr = np.asarray(obs, dtype=np.float64)
    return zlib.crc32(arr.tobytes()) + (1 << 40)


def accepted_kwargs(factory: Callable[..., Any]) -> set[str] | None:
    """Names of the keyword arguments ``factory`` accepts; ``None`` means "any" (``**kwargs``).

    A factory whose signature cannot be inspected is treated as accepting nothing.
    """
    accepts = getattr(factory, "_accepts_any_kwargs", False)
    if accepts:
        return None
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return set()
    names: set[str] = set()
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            names.add(p.name)
    return names


def make_agent(factory: Callable[..., Agent], **meta: Any) -> Agent:
    """Build an agent from ``factory``, passing the metadata keywords its signature accepts.

    Args:
        factory: any callable returning an agent; zero-argument callables are fine.
        **meta: ``n_actions``, ``n_obs``, ``obs_shape``, ``seed`` and overrides
            (e.g. ``learning_rate``). Keys the factory does not accept are dropped.

    Returns:
        The agent.

    Raises:
        TypeError: if ``factory`` is not callable or returns something without ``act``/``train``.
    """
    if not callable(factory):
        raise TypeError(
            f"agent_factory must be a callable returning an agent, got {factory!r}; pass e.g. "
            "functools.partial(agents.Constant, action=1)."
        )
    names = accepted_kwargs(factory)
    kwargs = meta if names is None else {k: v for k, v in meta.items() if k in names}
    agent = factory(**kwargs)
    if not (callable(getattr(agent, "act", None)) and callable(getattr(agent, "train", None))):
        raise TypeError(
            f"agent_factory {factory!r} returned {agent!r}, which lacks act(obs) and "
            "train(o_prev, action, reward, o_next); return an object implementing the Agent "
            "protocol."
        )
    return agent


def check_action(action: Any, n_actions: int, who: str) -> int:
    """Validate an action returned by an agent and return it as an int.

    Raises:
        TypeError: if ``action`` is not an integer.
        ValueError: if ``action`` is outside ``[0, n_actions)``.
    """
    if isinstance(action, np.ndarray) and action.shape == ():
        action = action.item()
    if isinstance(action, bool) or not isinstance(action, (int, np.integer)):
        raise TypeError(f"{who} returned action {action!r}; act(obs) must return an int.")
    if not 0 <= int(action) < n_actions:
        raise ValueError(
            f"{who} returned action {int(action)} outside [0, {n_actions}); the environment has "
            f"{n_actions} actions (the agent receives n_actions through its factory)."
        )
    return int(action)


class ExtendedEnv:
    """Base class of practical extended environments.

    Subclasses set the class attributes ``n_actions``, ``n_obs`` (and ``slow``), implement
    :meth:`reset` and :meth:`step`, and create their simulated copies of the agent (and any other
    per-run state) in :meth:`_setup` with :meth:`make_sim`, which passes the environment's metadata and the run's seed to the factory,
    so a sim is an identically seeded copy of the true agent.

    Environments that satisfy the paper's Definition 11 ("adaptable with OpenAI gym": one sim,
    rewards in {-1, 0, 1}, the sim is trained only after the reward is fixed) set
    ``gym_adaptable = True`` and implement :meth:`decide` (everything up to fixing the reward) and
    :meth:`finish` (the training of the sim with the possibly redefined reward, returning the
    observation). Their :meth:`step` is ``finish(a, decide(a))``.

    Args:
        agent_factory: the agent factory (see :func:`make_agent`).
        seed: seed of the run; sims receive it and the environment's own randomness is derived
            from it.
        agent_maker: internal hook used by gym combinations to wrap the sims; ``None`` for the
            usual ``make_agent(agent_factory, **metadata)``.
    """

    n_actions: ClassVar[int] = 2
    n_obs: ClassVar[int] = 1
    slow: ClassVar[bool] = False
    gym_adaptable: ClassVar[bool] = False

    def __init__(
        self,
        agent_factory: Callable[..., Agent],
        *,
        seed: int = 0,
        agent_maker: Callable[..., Agent] | None = None,
    ) -> None:
        if not callable(agent_factory):
            raise TypeError(
                f"{type(self).__name__} needs an agent factory (a callable returning an agent), "
                f"got {agent_factory!r}."
            )
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}.")
        self.agent_factory = agent_factory
        self.seed = int(seed)
        self._agent_maker = agent_maker
        # The environment's own randomness: a stream separate from the agents' streams.
        self.rng = np.random.default_rng([self.seed, 0x5EED_E4F])
        self._setup()

    def _setup(self) -> None:
        """Create the sims and the per-run state (called at the end of ``__init__``; no-op here).

        Subclasses override this instead of ``__init__``; ``self.rng``, ``self.seed`` and
        :meth:`make_sim` are ready when it runs.
        """

    def metadata(self) -> dict[str, Any]:
        """Keyword metadata passed to the agent factory for sims of this environment."""
        return {"n_actions": self.n_actions, "n_obs": self.n_obs, "seed": self.seed}

    def make_sim(self, **overrides: Any) -> Agent:
        """Create a fresh simulated copy of the agent (metadata plus ``overrides``)."""
        if self._agent_maker is not None:
            return self._agent_maker(**overrides)
        return make_agent(self.agent_factory, **{**self.metadata(), **overrides})

    def factory_accepts(self, name: str) -> bool:
        """Whether the agent factory accepts the keyword ``name``."""
        names = accepted_kwargs(self.agent_factory)
        return names is None or name in names

    def reset(self) -> Hashable:
        """Return the first observation."""
        return 0

    def step(self, action: int) -> tuple[float, Any]:
        """Apply ``action``; return ``(reward, next observation)``."""
        if not self.gym_adaptable:
            raise NotImplementedError(f"{type(self).__name__} must implement step().")
        reward = self.decide(action)
        return reward, self.finish(action, reward)

    def decide(self, action: int) -> float:
        """Definition 11 phase 1: query the sim and fix the reward (adaptable envs only)."""
        raise NotImplementedError(f"{type(self).__name__} is not adaptable with gym (Def. 11).")

    def finish(self, action: int, reward: float) -> Any:
        """Definition 11 phase 2: train the sim with ``reward``; return the next observation."""
        raise NotImplementedError(f"{type(self).__name__} is not adaptable with gym (Def. 11).")
