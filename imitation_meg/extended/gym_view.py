"""Gymnasium views of extended environments, and the paper's gym combination (Definition 12).

* :func:`register_gym_ids` registers ``imitation_meg_extended/<Name>-v0`` for the 28
  environments, so ``gymnasium.make("imitation_meg_extended/TemptingButton-v0",
  agent_factory=f)`` works. One gymnasium episode is one extended run: ``reset`` builds a fresh
  extended environment (fresh sims), ``step`` never terminates (pass ``max_episode_steps`` to
  ``make`` for a time limit). The outside learner must be the agent the factory builds, trained
  in lockstep on the same transitions, for the sims to mirror it.
* :func:`combine` builds G * E (Def. 12) for a gymnasium environment G with a ``Discrete``
  action space and a gym-adaptable extended environment E (Def. 11). Actions are pairs
  ``(a_G, a_E)`` encoded as ``a_G * n_E + a_E`` (``n_actions = n_G * n_E``); observations are pairs
  ``(o_G, o_E)`` encoded as the float vector ``[o_G (one-hot if Discrete), one_hot(o_E)]``
  (agents receive ``obs_shape``). Reward: ``r_G``, or ``min(r_G - 1, -1)`` when E's reward is -1;
  E's sim is trained with that redefined reward (E's training code runs after the redefinition).
  G episodes end by resetting G; the interaction goes on. ``env.episode_returns`` records the
  combined return of each finished G episode.
* :func:`run_gym` runs an agent (protocol ``act``/``train``) in an ordinary gymnasium
  environment with the same lockstep loop, resetting on episode ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from imitation_meg.extended.core import (
    Agent,
    ExtendedEnv,
    check_action,
    make_agent,
)
from imitation_meg.extended.envs import ALL_ENVIRONMENTS, get_env
from imitation_meg.extended.runner import RunResult

__all__ = ["NAMESPACE", "ExtendedGymEnv", "combine", "gym_id", "register_gym_ids", "run_gym"]

NAMESPACE = "imitation_meg_extended"


def gym_id(env_cls: type[ExtendedEnv] | str) -> str:
    """The gymnasium id of an extended environment.

    E.g. ``imitation_meg_extended/IgnoreRewards-v0``.
    """
    name = env_cls if isinstance(env_cls, str) else env_cls.__name__
    return f"{NAMESPACE}/{name}-v0"


class ExtendedGymEnv(gym.Env):
    """A gymnasium ``Env`` around one extended environment class and one agent factory.

    Args:
        env_cls: the extended environment class, or its name.
        agent_factory: the factory of the agent that will act (the sims copy it).
        seed: default seed of a run when ``reset`` gets none.

    Raises:
        TypeError: if ``agent_factory`` is missing or not callable.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(
        self,
        env_cls: type[ExtendedEnv] | str,
        agent_factory: Callable[..., Any] | None = None,
        seed: int = 0,
    ) -> None:
        if agent_factory is None or not callable(agent_factory):
            raise TypeError(
                "an extended environment needs the agent factory: gymnasium.make(id, "
                f"agent_factory=functools.partial(agents.QLearner)); got {agent_factory!r}."
            )
        self.env_cls = get_env(env_cls) if isinstance(env_cls, str) else env_cls
        self.agent_factory = agent_factory
        self._seed = seed
        self.observation_space = gym.spaces.Discrete(self.env_cls.n_obs)
        self.action_space = gym.spaces.Discrete(self.env_cls.n_actions)
        self.env: ExtendedEnv | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.env = self.env_cls(self.agent_factory, seed=self._seed if seed is None else seed)
        return int(self.env.reset()), {}  # type: ignore[call-overload]  # Discrete observations

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict]:
        if self.env is None:
            raise RuntimeError("call reset() before step().")
        a = check_action(action, self.env.n_actions, "the gymnasium caller")
        reward, obs = self.env.step(a)
        return int(obs), float(reward), False, False, {}


def register_gym_ids() -> list[str]:
    """Register (idempotently) the gymnasium ids of the 28 environments; returns the ids."""
    ids = []
    for env in ALL_ENVIRONMENTS:
        env_id = gym_id(env)
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point=ExtendedGymEnv,  # type: ignore[arg-type]  # env_cls comes from kwargs
                kwargs={"env_cls": env.__name__},
            )
        ids.append(env_id)
    return ids


def _flat_obs(space: gym.Space, obs: Any) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        out = np.zeros(int(space.n), dtype=np.float32)
        out[int(obs) - int(space.start)] = 1.0
        return out
    return np.asarray(obs, dtype=np.float32).ravel()


class _ProxySim:
    """E's view of the sim inside G * E: adds the G parts of observations and actions."""

    def __init__(self, real: Agent, combo: Any) -> None:
        self.real = real
        self.combo = combo

    def __getattr__(self, name: str) -> Any:
        if name in ("real", "combo"):
            raise AttributeError(name)
        return getattr(self.real, name)

    def act(self, obs: Any) -> int:
        c = self.combo
        return self.real.act(c.encode(c.prev_obs, obs)) % c.n_e

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        c = self.combo
        self.real.train(
            c.encode(c.prev_obs, o_prev), c.a_g * c.n_e + action, reward, c.encode(c.next_g, o_next)
        )


def combine(gym_env_id: str, env_cls: type[ExtendedEnv], **make_kwargs: Any) -> type[ExtendedEnv]:
    """The combination G * E of paper Definition 12, as an extended environment class.

    Args:
        gym_env_id: a gymnasium id with a ``Discrete`` action space (e.g. ``"CartPole-v0"``).
        env_cls: an extended environment with ``gym_adaptable = True`` (Def. 11), e.g.
            ``envs.IgnoreRewards`` or ``envs.IncentivizeLearningRate``.
        **make_kwargs: passed to ``gymnasium.make``.

    Returns:
        An :class:`ExtendedEnv` subclass named ``"<gym id>*<E name>"``.

    Raises:
        TypeError: ``env_cls`` is not gym-adaptable.
        ValueError: G's action space is not ``Discrete``.
    """
    is_env = isinstance(env_cls, type) and issubclass(env_cls, ExtendedEnv)
    if not is_env or not env_cls.gym_adaptable:
        adaptable = [e.__name__ for e in ALL_ENVIRONMENTS if e.gym_adaptable]
        raise TypeError(
            f"{env_cls!r} is not adaptable with gym (paper Def. 11); choose one of {adaptable}."
        )
    probe = gym.make(gym_env_id, **make_kwargs)
    if not isinstance(probe.action_space, gym.spaces.Discrete):
        raise ValueError(  # noqa: TRY004 - an environment id whose space is wrong: a bad value
            f"{gym_env_id!r} has action space {probe.action_space}; Definition 12 needs a "
            "Discrete action space."
        )
    n_g = int(probe.action_space.n)
    g_obs_space = probe.observation_space
    d_g = _flat_obs(g_obs_space, g_obs_space.sample()).shape[0]
    probe.close()
    n_eo = env_cls.n_obs

    class Combination(ExtendedEnv):
        __doc__ = f"{gym_env_id} * {env_cls.__name__} (paper Definition 12)."
        n_actions = n_g * env_cls.n_actions
        n_obs = 0
        obs_shape = (d_g + n_eo,)
        slow = env_cls.slow
        gym_cls = gym_env_id
        extended_cls = env_cls

        def _setup(self) -> None:
            self.n_e = env_cls.n_actions
            self.g = gym.make(gym_env_id, **make_kwargs)
            self.prev_obs: Any = None
            self.next_g: Any = None
            self.a_g = 0
            self.episode_returns: list[float] = []
            self.episode_lengths: list[int] = []
            self._ret, self._len = 0.0, 0
            self.inner = env_cls(self.agent_factory, seed=self.seed, agent_maker=self._make_proxy)

        def metadata(self) -> dict[str, Any]:
            return {
                "n_actions": self.n_actions,
                "n_obs": None,
                "obs_shape": self.obs_shape,
                "seed": self.seed,
            }

        def _make_proxy(self, **overrides: Any) -> Agent:
            agent = make_agent(self.agent_factory, **{**self.metadata(), **overrides})
            return _ProxySim(agent, self)

        def encode(self, o_g: Any, o_e: Any) -> np.ndarray:
            e = np.zeros(n_eo, dtype=np.float32)
            e[int(o_e)] = 1.0
            return np.concatenate([_flat_obs(g_obs_space, o_g), e])

        def reset(self) -> np.ndarray:  # type: ignore[override]  # array observations
            o_g, _ = self.g.reset(seed=self.seed)
            self.prev_obs = o_g
            return self.encode(o_g, self.inner.reset())

        def step(self, action: int) -> tuple[float, np.ndarray]:
            self.a_g, a_e = divmod(int(action), self.n_e)
            o_g, r_g, terminated, truncated, _ = self.g.step(self.a_g)
            done = terminated or truncated
            if done:
                o_g, _ = self.g.reset()
            self.next_g = o_g
            reward = self.inner.decide(a_e)
            reward = min(float(r_g) - 1.0, -1.0) if reward == -1 else float(r_g)
            o_e = self.inner.finish(a_e, reward)
            self.prev_obs = o_g
            self._ret += reward
            self._len += 1
            if done:
                self.episode_returns.append(self._ret)
                self.episode_lengths.append(self._len)
                self._ret, self._len = 0.0, 0
            return reward, self.encode(o_g, o_e)

    Combination.__name__ = Combination.__qualname__ = f"{gym_env_id}*{env_cls.__name__}"
    return Combination


def run_gym(
    env: str | gym.Env, agent_factory: Callable[..., Any], n_steps: int, *, seed: int = 0
) -> RunResult:
    """Run an agent in an ordinary gymnasium env with the lockstep loop (reset on episode end).

    Args:
        env: a gymnasium id or env with ``Discrete`` actions and ``Discrete`` or ``Box``
            observations.
        agent_factory: the agent factory (gets ``n_actions``, ``n_obs``/``obs_shape``, ``seed``).
        n_steps: number of steps.
        seed: seeds the first ``reset`` and the agent.

    Returns:
        A :class:`RunResult` (``observations`` hold ints or arrays).

    Raises:
        ValueError: for a non-Discrete action space or ``n_steps < 1``.
    """
    g = gym.make(env) if isinstance(env, str) else env
    if not isinstance(g.action_space, gym.spaces.Discrete):
        raise ValueError(  # noqa: TRY004 - documented as ValueError (a bad environment)
            f"run_gym needs a Discrete action space, got {g.action_space}."
        )
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}.")
    n_steps = int(n_steps)
    n_actions = int(g.action_space.n)
    if isinstance(g.observation_space, gym.spaces.Discrete):
        meta: dict[str, Any] = {"n_obs": int(g.observation_space.n)}
        conv: Callable[[Any], Any] = int
    else:
        meta = {"n_obs": None, "obs_shape": tuple(g.observation_space.shape or ())}

        def conv(o: Any) -> Any:
            return np.asarray(o, dtype=np.float32)

    agent = make_agent(agent_factory, n_actions=n_actions, seed=seed, **meta)
    obs = conv(g.reset(seed=seed)[0])
    observations, rewards, actions = [obs], [], []
    for _ in range(n_steps):
        a = check_action(agent.act(obs), n_actions, "agent")
        o2, r, terminated, truncated, _ = g.step(a)
        if terminated or truncated:
            o2, _ = g.reset()
        o2 = conv(o2)
        agent.train(obs, a, float(r), o2)
        observations.append(o2)
        rewards.append(float(r))
        actions.append(a)
        obs = o2
    return RunResult(
        env_name=str(getattr(g.spec, "id", type(g).__name__)),
        seed=seed,
        n_steps=n_steps,
        rewards=np.asarray(rewards),
        actions=np.asarray(actions, dtype=np.int64),
        observations=observations,
        env=g,
        agent=agent,
    )
