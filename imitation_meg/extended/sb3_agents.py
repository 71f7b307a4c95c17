"""Stable-Baselines3 DQN / A2C / PPO as semi-deterministic extended-environment agents.

The agents learn only from the transitions the runner (or an environment, for sims) supplies:
``train(o_prev, a, r, o_next)`` writes the transition into the model's own SB3 buffer and calls
the model's own ``train()`` when SB3 would (every ``n_steps`` transitions for A2C / PPO; every
``train_freq`` transitions after ``learning_starts`` for DQN, with SB3's ``_on_step`` target
updates). ``learn()`` is never called or patched. For A2C / PPO the value and the
log-probability stored with a transition are those of the *replayed* action ``a`` under the
current policy (``policy.evaluate_actions``), so the importance ratio in PPO's loss is correct.
The stored log-probability is floored at ``LOG_PROB_FLOOR`` (-20, a probability of 2e-9): a sim
trained on another agent's actions (IgnoreRewards and its kin) can be handed an action its own
nearly deterministic policy gives a log-probability of -300, and once an update moves that
log-probability by more than 88, PPO's ratio ``exp(new - old)`` overflows float32 and the next
forward pass has NaN logits. With the floor the ratio stays below ``exp(20)`` and PPO's clipping
does the rest; transitions above the floor are stored unchanged.

Semi-determinism. Weights are initialised inside ``torch.random.fork_rng`` from the agent's
``seed`` (global torch state is restored; nothing is seeded globally); buffer sampling and
minibatch shuffling use a generator keyed by ``(seed, number of trainings)``; acting samples from
the policy with :func:`~imitation_meg.extended.core.stream_uniform` keyed by
``(seed, number of trainings, observation)``. Two instances built with the same seed and trained
identically therefore act identically.

Observations: integer observations of a ``Discrete(n_obs)`` space (one-hot encoded by SB3), or
float vectors of shape ``obs_shape`` (gym combinations). stable_baselines3 is imported only when
an agent is built.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np
import torch as th

from imitation_meg.extended.core import obs_key, stream_uniform

__all__ = ["A2C", "DQN", "LOG_PROB_FLOOR", "PPO", "SB3Agent"]

#: Lowest log-probability stored in an on-policy rollout buffer (see the module docstring).
LOG_PROB_FLOOR = -20.0


@functools.cache
def _seeded_buffers() -> tuple[type, type]:
    """Subclasses of SB3's buffers that draw indices from ``self.rng`` instead of ``np.random``."""
    from stable_baselines3.common.buffers import ReplayBuffer, RolloutBuffer

    class SeededReplayBuffer(ReplayBuffer):
        rng: np.random.Generator = np.random.default_rng(0)

        def sample(self, batch_size: int, env: Any = None) -> Any:
            high = self.buffer_size if self.full else self.pos
            return self._get_samples(self.rng.integers(0, high, size=batch_size), env=env)

    class SeededRolloutBuffer(RolloutBuffer):
        rng: np.random.Generator = np.random.default_rng(0)

        def get(self, batch_size: int | None = None) -> Any:
            total = self.buffer_size * self.n_envs
            order = self.rng.permutation(total)
            if not self.generator_ready:
                names = ("observations", "actions", "values", "log_probs", "advantages", "returns")
                for name in names:
                    setattr(self, name, self.swap_and_flatten(getattr(self, name)))
                self.generator_ready = True
            size = total if batch_size is None else batch_size
            for begin in range(0, total, size):
                yield self._get_samples(order[begin : begin + size])

    return SeededReplayBuffer, SeededRolloutBuffer


def _spaces_env(n_actions: int, n_obs: int | None, obs_shape: tuple[int, ...] | None) -> Any:
    """A gymnasium env that only carries the spaces SB3 needs to build a model (never stepped)."""
    import gymnasium as gym

    if obs_shape is not None:
        obs_space: Any = gym.spaces.Box(-np.inf, np.inf, shape=tuple(obs_shape), dtype=np.float32)
    else:
        obs_space = gym.spaces.Discrete(int(n_obs if n_obs is not None else 1))

    class SpacesOnly(gym.Env):
        observation_space = obs_space
        action_space = gym.spaces.Discrete(int(n_actions))

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return self.observation_space.sample(), {}

        def step(self, action: Any) -> Any:
            raise RuntimeError("the spaces-only env is never stepped")

    return SpacesOnly()


class SB3Agent:
    """Base class of the SB3 agents (see the module docstring).

    Args:
        n_actions: number of actions (metadata).
        n_obs: number of integer observations (metadata); ignored when ``obs_shape`` is given.
        obs_shape: shape of float-vector observations (metadata of gym combinations).
        seed: the agent's seed.
        learning_rate: SB3 learning rate (a float; readable as ``agent.learning_rate``).
        total_timesteps: horizon of SB3's schedules (progress remaining = 1 - trainings / this).
        **sb3_kwargs: passed to the SB3 constructor (e.g. ``n_steps``, ``batch_size``).

    Raises:
        ValueError: bad ``n_actions``, ``learning_rate`` or ``total_timesteps``.
    """

    algo_name = ""
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        *,
        n_actions: int = 2,
        n_obs: int | None = 1,
        obs_shape: tuple[int, ...] | None = None,
        seed: int = 0,
        learning_rate: float | None = None,
        total_timesteps: int = 100_000,
        **sb3_kwargs: Any,
    ) -> None:
        import stable_baselines3 as sb3
        from stable_baselines3.common.logger import Logger

        if isinstance(n_actions, bool) or not isinstance(n_actions, int) or n_actions < 1:
            raise ValueError(f"n_actions must be a positive int, got {n_actions!r}.")
        lr_ok = isinstance(learning_rate, (int, float)) and learning_rate > 0
        if learning_rate is not None and not lr_ok:
            raise ValueError(f"learning_rate must be a positive float, got {learning_rate!r}.")
        if not isinstance(total_timesteps, int) or total_timesteps < 1:
            raise ValueError(f"total_timesteps must be a positive int, got {total_timesteps!r}.")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}.")
        self.n_actions = n_actions
        self.seed = int(seed)
        self.total_timesteps = total_timesteps
        kwargs = {**self.defaults, **sb3_kwargs}
        if learning_rate is not None:
            kwargs["learning_rate"] = float(learning_rate)
        algo = getattr(sb3, self.algo_name)
        replay_cls, rollout_cls = _seeded_buffers()
        if self.algo_name == "DQN":
            kwargs["replay_buffer_class"] = replay_cls
        else:
            kwargs["rollout_buffer_class"] = rollout_cls
        env = _spaces_env(n_actions, n_obs, obs_shape)
        with th.random.fork_rng(devices=[]):
            th.manual_seed(self.seed)
            self.model = algo("MlpPolicy", env, seed=None, device="cpu", verbose=0, **kwargs)
        self.model.set_logger(Logger(folder=None, output_formats=[]))
        lr = self.model.learning_rate
        self.learning_rate = None if callable(lr) else float(lr)
        self.n_trainings = 0
        self._last: tuple[int, int, int] | None = None

    # -- helpers -------------------------------------------------------------------------------
    def _tensor(self, obs: Any) -> th.Tensor:
        is_box = self.model.observation_space.shape != ()
        arr = np.asarray(obs, dtype=np.float32 if is_box else np.int64)
        tensor, _ = self.model.policy.obs_to_tensor(arr)
        return tensor

    def _buffer_obs(self, obs: Any) -> np.ndarray:
        return np.asarray(obs, dtype=np.float32)[None]

    def _progress(self) -> float:
        return max(0.0, 1.0 - self.n_trainings / self.total_timesteps)

    def _set_rng(self, buffer: Any) -> None:
        buffer.rng = np.random.default_rng([self.seed, self.n_trainings, 0xB0F])

    def _choose(self, obs: Any) -> int:
        raise NotImplementedError

    def act(self, obs: Any) -> int:
        """The agent's action on ``obs`` (pure; sampled from the seeded stream)."""
        key = (self.n_trainings, obs_key(obs))
        if self._last is not None and self._last[:2] == key:
            return self._last[2]
        action = self._choose(obs)
        self._last = (*key, action)
        return action

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        raise NotImplementedError


class _OnPolicy(SB3Agent):
    """A2C / PPO. ``upstream_rollouts=True`` reproduces how the paper's library fed its on-policy
    agents (for comparison with its Table 1 only; not a correct learner): every rollout restarts
    from the run's first observation (its patched ``learn()`` reset a replay env at each call),
    and the stored log-probability and value are those of a *freshly sampled* action, not of the
    replayed one (its patched ``forward`` swapped the action after sampling), so PPO's
    importance ratio compares different actions. A2C's loss does not read stored log-probs.
    """

    def __init__(self, *, upstream_rollouts: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(upstream_rollouts, bool):
            raise TypeError(f"upstream_rollouts must be a bool, got {upstream_rollouts!r}.")
        self.upstream_rollouts = upstream_rollouts
        self._first_obs: Any = None

    def _sample(self, obs: Any, purpose: int) -> int:
        with th.no_grad():
            probs = self.model.policy.get_distribution(self._tensor(obs)).distribution.probs[0]
        cdf = np.cumsum(probs.double().numpy())
        u = stream_uniform(self.seed, self.n_trainings, obs_key(obs), purpose) * cdf[-1]
        return int(min(np.searchsorted(cdf, u, side="right"), self.n_actions - 1))

    def _choose(self, obs: Any) -> int:
        return self._sample(obs, 4)

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Store the transition with the replayed action's value / log-prob; train when full."""
        policy, buffer = self.model.policy, self.model.rollout_buffer
        start = self.n_trainings == 0
        if self.upstream_rollouts:
            if self._first_obs is None:
                self._first_obs = o_prev
            if buffer.pos == 0:  # a new rollout restarts from the run's first observation
                o_prev, start = self._first_obs, True
            logged = self._sample(o_prev, 7)  # the action whose log-prob is stored
        else:
            logged = action
        with th.no_grad():
            values, log_prob, _ = policy.evaluate_actions(
                self._tensor(o_prev), th.as_tensor([logged])
            )
        log_prob = log_prob.clamp(min=LOG_PROB_FLOOR)
        buffer.add(
            self._buffer_obs(o_prev),
            np.array([action]),
            np.array([float(reward)]),
            np.array([start]),
            values,
            log_prob,
        )
        self.n_trainings += 1
        self.model.num_timesteps = self.n_trainings
        if buffer.full:
            with th.no_grad():
                last_values = policy.predict_values(self._tensor(o_next))
            buffer.compute_returns_and_advantage(last_values=last_values, dones=np.array([False]))
            self.model._current_progress_remaining = self._progress()
            self._set_rng(buffer)
            self.model.train()
            buffer.reset()


class PPO(_OnPolicy):
    """SB3 PPO (SB3 defaults: n_steps 2048, batch 64, 10 epochs, lr 3e-4); see
    :class:`_OnPolicy` for ``upstream_rollouts``."""

    algo_name = "PPO"


class A2C(_OnPolicy):
    """SB3 A2C (SB3 defaults: n_steps 5, lr 7e-4, RMSprop)."""

    algo_name = "A2C"


class DQN(SB3Agent):
    """SB3 DQN; defaults changed for short runs: learning_starts 1000, buffer 10k, target
    update 1000.

    Exploration follows SB3's linear schedule over ``total_timesteps`` (fraction 0.1, 1.0 -> 0.05);
    before ``learning_starts`` trainings the agent acts uniformly, as SB3 does.
    """

    algo_name = "DQN"
    defaults: ClassVar[dict[str, Any]] = {
        "learning_starts": 1000,
        "buffer_size": 10_000,
        "target_update_interval": 1000,
    }

    def _choose(self, obs: Any) -> int:
        key = obs_key(obs)
        eps = self.model.exploration_schedule(self._progress())
        u = stream_uniform(self.seed, self.n_trainings, key, 5)
        if self.n_trainings < self.model.learning_starts or u < eps:
            return int(stream_uniform(self.seed, self.n_trainings, key, 6) * self.n_actions)
        with th.no_grad():
            q = self.model.q_net(self._tensor(obs))[0]
        return int(th.argmax(q).item())

    def train(self, o_prev: Any, action: int, reward: float, o_next: Any) -> None:
        """Add to the replay buffer; SB3 ``_on_step`` (target update) and ``train`` on schedule."""
        model = self.model
        model.replay_buffer.add(
            self._buffer_obs(o_prev),
            self._buffer_obs(o_next),
            np.array([action]),
            np.array([float(reward)]),
            np.array([False]),
            [{}],
        )
        self.n_trainings += 1
        model.num_timesteps = self.n_trainings
        model._current_progress_remaining = self._progress()
        model._on_step()
        freq = model.train_freq.frequency
        if self.n_trainings > model.learning_starts and self.n_trainings % freq == 0:
            self._set_rng(model.replay_buffer)
            model.train(gradient_steps=model.gradient_steps, batch_size=model.batch_size)
