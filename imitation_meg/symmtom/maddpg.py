"""MADDPG and its SymmToM variants (Sclar, Neubig and Bisk 2022, Sec. 4): plain, Oracle, RMADDPG, CE, GE.

MADDPG (Lowe et al. 2017) trains one actor and one centralised critic per agent. Actions are
discrete, ``(move, piece)`` in ``MultiDiscrete([5, c])``: each actor outputs ``5 + c`` logits, acts
by sampling both parts (Gumbel-max), and is trained through the critic with the straight-through
Gumbel-softmax (one-hot forward, softmax gradient), so that the critic always sees one-hot actions.
Every critic sees every agent's oracle observation (the knowledge of all agents, as the authors'
``--critic-has-oracle-obs-space``) and every agent's action. The variants differ only in the actor:

* ``"maddpg"``: a two-layer 64-unit ReLU MLP on the agent's observation (no memory);
* ``"oracle"``: the same on the observation plus every agent's current knowledge (MADDPG-Oracle);
* ``"rmaddpg"``: a 64-unit ReLU layer, an LSTM with 64 units, then the output layer (RMADDPG,
  "vanilla LSTM"); trained on whole episodes, the LSTM unrolled from a zero state;
* ``"ce"`` / ``"ge"``: the MLP on the observation plus the agent's knowledge matrix ``K``
  (:mod:`imitation_meg.symmtom.knowledge`), updated each turn from what it witnessed; unseen
  encounters share nothing (CE) or the greedy piece (GE). ``K`` is carried from turn to turn, which
  gives these actors their memory.

Hyperparameters follow the original MADDPG code as the SymmToM authors ran it (their README: lr
0.001, tau 0.005; MADDPG's own defaults otherwise: gamma 0.95, batch 1024, an update every 100
environment steps once ``1024 x episode length`` steps are stored, a replay buffer of 10^6
transitions, gradient norms clipped at 0.5, a 1e-3 penalty on squared logits). Truncation at
``5 w`` is not termination: targets always bootstrap, as in the original.

Why plain torch and not TorchRL: torchrl 0.14.1 installs only with tensordict < 0.15 and upgrades
setuptools (65.5 -> 84, past the ``setuptools<82`` of the ``imitation`` extra), and its DDPG loss
is written for continuous actions; the discrete Gumbel relaxation, the episode-level recurrent training and
the belief features would all be ours anyway, while what it would give (a replay buffer, soft
target updates, MLPs) is a few dozen lines here.

The networks are in :mod:`imitation_meg.symmtom.networks`. This module has about 600 lines on
purpose: the configuration, acting, evaluation and training of one algorithm share private helpers
(observation layout, sampling) that read best together.

(Over 500 lines: MADDPG and its four variants share one training loop, replay buffer and
evaluation; the variants differ in what their actors see and, for RMADDPG, in a recurrent layer.)
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg.symmtom.env import SymmToMEnv, SymmToMWarning, observation_size
from imitation_meg.symmtom.knowledge import KnowledgeTracker
from imitation_meg.symmtom.networks import (
    Actors,
    EnsembleMLP,
    clip_per_agent,
    relaxed_actions,
    soft_update,
)

__all__ = [
    "VARIANTS",
    "Actors",
    "LearnedPolicy",
    "MADDPGConfig",
    "MADDPGRun",
    "evaluate_actors",
    "final_evaluation",
    "train_maddpg",
]

#: The learned baselines of the paper's Table 1 that are implemented here.
VARIANTS = ("maddpg", "oracle", "rmaddpg", "ce", "ge")


@dataclasses.dataclass(frozen=True)
class MADDPGConfig:
    """Settings of one MADDPG training run (defaults: the original code's, see the module docstring).

    Attributes:
        variant: one of :data:`VARIANTS`.
        n_agents, width, n_pieces, hearing: the SymmToM configuration ``(n, w, c, h)``.
        episodes: training episodes (the paper: 60,000).
        hidden: units per hidden layer.
        lr, tau, gamma: Adam learning rate, soft target-update rate, discount.
        batch_size: transitions per update (recurrent: ``batch_size // T`` whole episodes).
        update_every: environment steps between two updates.
        learning_starts: environment steps stored before the first update (``None``: ``batch_size
            x episode length``, the original's rule).
        buffer_size: replay capacity in transitions (kept as whole episodes).
        grad_clip: gradient-norm clip of actors and critics.
        logit_penalty: weight of the mean squared logits in the actor loss.
        eval_every: training episodes between checkpoint evaluations.
        eval_episodes: episodes per checkpoint evaluation (the best one is kept).
    """

    variant: str = "maddpg"
    n_agents: int = 3
    width: int = 6
    n_pieces: int = 3
    hearing: int = 1
    episodes: int = 60_000
    hidden: int = 64
    lr: float = 1e-3
    tau: float = 0.005
    gamma: float = 0.95
    batch_size: int = 1024
    update_every: int = 100
    learning_starts: int | None = None
    buffer_size: int = 1_000_000
    grad_clip: float = 0.5
    logit_penalty: float = 1e-3
    eval_every: int = 1000
    eval_episodes: int = 100

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant={self.variant!r} is unknown; use one of {VARIANTS}.")
        positive = (
            "n_agents",
            "width",
            "n_pieces",
            "hearing",
            "episodes",
            "hidden",
            "batch_size",
            "update_every",
            "buffer_size",
            "eval_every",
            "eval_episodes",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive int.")
        for name in ("lr", "tau", "gamma"):
            value = getattr(self, name)
            if not 0.0 < float(value) <= 1.0:
                raise ValueError(f"{name}={value!r} must lie in (0, 1].")
        if self.learning_starts is not None and self.learning_starts < 0:
            raise ValueError(f"learning_starts={self.learning_starts!r} must be >= 0 or None.")

    @property
    def horizon(self) -> int:
        """Episode length ``5 w``."""
        return 5 * self.width

    @property
    def n_actions(self) -> int:
        """Logits per actor: ``5 + c``."""
        return 5 + self.n_pieces

    @property
    def base_obs_size(self) -> int:
        """The plain observation's length."""
        return observation_size(self.n_agents, self.n_pieces)

    @property
    def actor_obs_size(self) -> int:
        """The actor's input length (the oracle and belief variants add ``n c``)."""
        extra = self.n_agents * self.n_pieces if self.variant in ("oracle", "ce", "ge") else 0
        return self.base_obs_size + extra

    @property
    def critic_obs_size(self) -> int:
        """The critics' input length: all oracle observations and all one-hot actions."""
        n = self.n_agents
        return n * observation_size(n, self.n_pieces, oracle=True) + n * self.n_actions

    def make_env(self) -> SymmToMEnv:
        """The training environment (oracle observations; actors get their part of them)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SymmToMWarning)
            return SymmToMEnv(
                self.n_agents, self.width, self.n_pieces, hearing=self.hearing, oracle=True
            )


def _make_actors(cfg: MADDPGConfig) -> Actors:
    """The ``n`` actors of a run (recurrent for ``"rmaddpg"``)."""
    return Actors(
        cfg.n_agents,
        cfg.actor_obs_size,
        cfg.hidden,
        cfg.n_actions,
        recurrent=cfg.variant == "rmaddpg",
    )


# ----------------------------------------------------------------------------- observations
def _actor_inputs(cfg: MADDPGConfig, oracle_obs: np.ndarray, beliefs: np.ndarray | None):
    """Actor inputs ``(..., n, actor_obs_size)`` from oracle observations ``(..., n, od)``."""
    base = oracle_obs[..., : cfg.base_obs_size]
    if cfg.variant == "oracle":
        return oracle_obs
    if cfg.variant in ("ce", "ge"):
        assert beliefs is not None
        return np.concatenate([base, beliefs], axis=-1)
    return base


def _sample(logits: th.Tensor, cfg: MADDPGConfig, rng: np.random.Generator) -> np.ndarray:
    """Gumbel-max samples ``(n, 2)`` (move, piece) from logits ``(n, 5 + c)``."""
    noisy = logits.detach().numpy() - np.log(-np.log(rng.uniform(1e-20, 1.0, logits.shape)))
    return np.stack([noisy[:, :5].argmax(axis=1), noisy[:, 5:].argmax(axis=1)], axis=1)


def _one_hot(actions: th.Tensor, cfg: MADDPGConfig) -> th.Tensor:
    """``(..., 2)`` int (move, piece) -> ``(..., 5 + c)`` one-hot float."""
    return th.cat(
        [
            nn.functional.one_hot(actions[..., 0], 5),
            nn.functional.one_hot(actions[..., 1], cfg.n_pieces),
        ],
        dim=-1,
    ).float()


# ----------------------------------------------------------------------------- acting
class _Actor:
    """Acting state of ``n`` actors through one episode (recurrent state, belief tracker)."""

    def __init__(self, cfg: MADDPGConfig, actors: Actors, rng: np.random.Generator) -> None:
        self.cfg, self.actors, self.rng = cfg, actors, rng
        self.tracker = KnowledgeTracker(cfg.variant) if cfg.variant in ("ce", "ge") else None
        self.state: tuple[th.Tensor, th.Tensor] | None = None

    def reset(self, env: SymmToMEnv) -> None:
        self.state = None
        if self.tracker is not None:
            self.tracker.reset(env.first_hand, env.knowledge)

    def observe_step(self, env: SymmToMEnv) -> None:
        """Update the belief tracker after ``env.step``."""
        if self.tracker is not None:
            self.tracker.update(
                first_hand=env.first_hand,
                positions=env.positions,
                bases=env.bases,
                said=env.last_said,
                hearing=env.hearing,
            )

    def beliefs(self) -> np.ndarray | None:
        return None if self.tracker is None else self.tracker.features()

    def logits(self, actor_obs: np.ndarray) -> th.Tensor:
        """``(n, 5 + c)`` logits for actor inputs ``(n, actor_obs_size)`` (advances the state)."""
        with th.no_grad():
            x = th.as_tensor(actor_obs, dtype=th.float32)[:, None, None, :]
            logits, self.state = self.actors(x, self.state)
        return logits[:, 0, 0]

    def act(self, actor_obs: np.ndarray) -> np.ndarray:
        """Sample ``(n, 2)`` actions from actor inputs ``(n, actor_obs_size)``."""
        return _sample(self.logits(actor_obs), self.cfg, self.rng)


def evaluate_actors(
    actors: Actors, cfg: MADDPGConfig, *, episodes: int, seed: int
) -> dict[str, np.ndarray]:
    """Play ``episodes`` episodes with every agent acting by its actor (sampled actions).

    Args:
        actors: trained actors; cfg: their configuration.
        episodes: number of episodes; seed: seeds the episodes' layouts and the action sampling.

    Returns:
        dict of ``(episodes, n)`` per-episode totals: ``"reward"`` and the env's log keys.
    """
    env = cfg.make_env()
    rng = np.random.default_rng([seed, 1])
    actor = _Actor(cfg, actors, rng)
    env_seeds = np.random.default_rng([seed, 2]).integers(2**31, size=episodes)
    totals: list[dict[str, dict[str, float]]] = []
    for e in range(episodes):
        env.reset(seed=int(env_seeds[e]))
        actor.reset(env)
        infos: dict = {}
        while env.agents:
            acts = actor.act(_actor_inputs(cfg, env.last_observations, actor.beliefs()))
            _, _, _, _, infos = env.step({a: acts[i] for i, a in enumerate(env.possible_agents)})
            actor.observe_step(env)
        totals.append({a: infos[a]["totals"] for a in env.possible_agents})
    keys = list(totals[0][env.possible_agents[0]])
    return {k: np.array([[t[a][k] for a in env.possible_agents] for t in totals]) for k in keys}


class LearnedPolicy:
    """One trained actor as a SymmToM policy (``reset(env, i)``, ``__call__(obs, env, i)``).

    Used for the theory-of-mind tests and :func:`imitation_meg.symmtom.agents.run_episodes`. It
    reads its observation (the oracle variant needs an env built with ``oracle=True``); the belief
    variants keep their knowledge matrix from what the agent witnesses (positions, bases, public
    first-hand pieces, utterances in range, its own). Actions are sampled from its own generator.

    Args:
        actors: trained actors; cfg: their configuration; agent: which actor plays.
        seed: seeds the action sampling.
    """

    def __init__(self, actors: Actors, cfg: MADDPGConfig, *, agent: int = 0, seed: int = 0) -> None:
        if not 0 <= agent < cfg.n_agents:
            raise ValueError(f"agent={agent} is not an actor index in 0..{cfg.n_agents - 1}.")
        self.cfg, self.agent = cfg, agent
        self.actors = actors
        self.rng = np.random.default_rng(seed)
        self._acting = _Actor(cfg, actors, self.rng)
        self._started = False

    def reset(self, env: SymmToMEnv, i: int) -> None:
        """Start of an episode: zero recurrent state, fresh knowledge matrix."""
        if (env.n_agents, env.n_pieces) != (self.cfg.n_agents, self.cfg.n_pieces):
            raise ValueError(
                f"this policy was trained with n={self.cfg.n_agents}, c={self.cfg.n_pieces}; "
                f"the env has n={env.n_agents}, c={env.n_pieces}."
            )
        self._acting.reset(env)
        self._started = False

    def logits(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> th.Tensor:
        """The actor's ``(5 + c,)`` logits for this step (advances its memory); see ``__call__``."""
        if self._started:
            self._acting.observe_step(env)
        self._started = True
        obs = np.asarray(obs, dtype=np.float32)
        if self.cfg.variant == "oracle" and len(obs) != self.cfg.actor_obs_size:
            raise ValueError(
                "the oracle policy needs oracle observations: build the env with oracle=True "
                "(run_tom_test(..., oracle=True))."
            )
        x = obs if self.cfg.variant == "oracle" else obs[: self.cfg.base_obs_size]
        beliefs = self._acting.beliefs()
        if beliefs is not None:
            x = np.concatenate([x, beliefs[i]])
        with th.no_grad():
            # every actor gets this input; only actor ``agent``'s output (and state) matters
            inp = th.as_tensor(x, dtype=th.float32).expand(self.cfg.n_agents, 1, 1, -1)
            logits, self._acting.state = self.actors(inp, self._acting.state)
        return logits[self.agent, 0, 0]

    def __call__(self, obs: np.ndarray, env: SymmToMEnv, i: int) -> np.ndarray:
        """Agent ``i``'s ``(move, piece)``, sampled from the actor's logits."""
        return _sample(self.logits(obs, env, i)[None], self.cfg, self.rng)[0].astype(np.int64)


# ----------------------------------------------------------------------------- training
class _EpisodeBuffer:
    """Whole episodes, oldest overwritten first; observations stored exactly as int8 x (w - 1)."""

    def __init__(self, cfg: MADDPGConfig) -> None:
        n, c, t = cfg.n_agents, cfg.n_pieces, cfg.horizon
        od = observation_size(n, c, oracle=True)
        cap = max(1, min(cfg.buffer_size // t, cfg.episodes))
        self.scale = float(cfg.width - 1)
        self.obs = np.zeros((cap, t + 1, n, od), dtype=np.int8)
        belief = cfg.variant in ("ce", "ge")
        self.beliefs = np.zeros((cap, t + 1, n, n * c), dtype=bool) if belief else None
        self.actions = np.zeros((cap, t, n, 2), dtype=np.int8)
        self.rewards = np.zeros((cap, t, n), dtype=np.float32)
        self.size = self.next = 0

    def add(
        self, obs: np.ndarray, beliefs: np.ndarray | None, actions: np.ndarray, rewards: np.ndarray
    ) -> None:
        k = self.next
        self.obs[k] = np.rint(obs * self.scale)
        if self.beliefs is not None:
            self.beliefs[k] = beliefs
        self.actions[k] = actions
        self.rewards[k] = rewards
        self.next = (k + 1) % len(self.obs)
        self.size = min(self.size + 1, len(self.obs))

    def observations(self, ep: np.ndarray, t: np.ndarray | slice) -> np.ndarray:
        return self.obs[ep, t].astype(np.float32) / np.float32(self.scale)


@dataclasses.dataclass
class MADDPGRun:
    """Result of :func:`train_maddpg`.

    Attributes:
        config, seed: what was trained.
        actors: the best checkpoint's actors (highest mean reward over a checkpoint evaluation).
        best_episode: training episodes done at the best checkpoint; best_reward: its evaluation.
        checkpoints: ``{"episode", "reward"}`` for every checkpoint evaluation.
        curve: ``{"episode", "reward"}``: mean training reward per agent per episode over each
            window of ``eval_every`` episodes.
        steps, updates, seconds: environment steps, gradient updates, wall time.
    """

    config: MADDPGConfig
    seed: int
    actors: Actors
    best_episode: int
    best_reward: float
    checkpoints: list[dict[str, float]]
    curve: list[dict[str, float]]
    steps: int
    updates: int
    seconds: float


class _Learner:
    """Networks, targets, optimisers and one gradient update (see the module docstring)."""

    def __init__(self, cfg: MADDPGConfig, seed: int) -> None:
        self.cfg = cfg
        n = cfg.n_agents
        with th.random.fork_rng(devices=[]):
            th.manual_seed(seed)
            self.actors = _make_actors(cfg)
            self.critics = EnsembleMLP(n, cfg.critic_obs_size, cfg.hidden, 1)
        self.target_actors = copy.deepcopy(self.actors)
        self.target_critics = copy.deepcopy(self.critics)
        self.opt_actor = th.optim.Adam(self.actors.parameters(), lr=cfg.lr)
        self.opt_critic = th.optim.Adam(self.critics.parameters(), lr=cfg.lr)
        self.gen = th.Generator().manual_seed(seed)
        self.eye = th.eye(n, dtype=th.bool)[:, None, :, None]  # (n, 1, n, 1)

    def update(self, buf: _EpisodeBuffer, rng: np.random.Generator) -> None:
        cfg = self.cfg
        n, t_len = cfg.n_agents, cfg.horizon
        if self.actors.recurrent:
            ep = rng.integers(buf.size, size=max(1, cfg.batch_size // t_len))
            obs = buf.observations(ep, slice(None))  # (E, T+1, n, od)
            inp = th.as_tensor(_actor_inputs(cfg, obs, None)).permute(2, 0, 1, 3)
            logits_all, _ = self.actors(inp)
            with th.no_grad():
                target_all, _ = self.target_actors(inp)
            logits = logits_all[:, :, :t_len].reshape(n, -1, cfg.n_actions)
            next_logits = target_all[:, :, 1:].reshape(n, -1, cfg.n_actions)
            o, o2 = (
                obs[:, :t_len].reshape(-1, n, obs.shape[-1]),
                obs[:, 1:].reshape(-1, n, obs.shape[-1]),
            )
            acts, rew = buf.actions[ep].reshape(-1, n, 2), buf.rewards[ep].reshape(-1, n)
        else:
            ep = rng.integers(buf.size, size=cfg.batch_size)
            t = rng.integers(t_len, size=cfg.batch_size)
            o, o2 = buf.observations(ep, t), buf.observations(ep, t + 1)
            b = b2 = None
            if buf.beliefs is not None:
                b, b2 = buf.beliefs[ep, t], buf.beliefs[ep, t + 1]
            inp = th.as_tensor(_actor_inputs(cfg, o, b)).transpose(0, 1)[:, :, None, :]
            inp2 = th.as_tensor(_actor_inputs(cfg, o2, b2)).transpose(0, 1)[:, :, None, :]
            logits = self.actors(inp)[0][:, :, 0]
            with th.no_grad():
                next_logits = self.target_actors(inp2)[0][:, :, 0]
            acts, rew = buf.actions[ep, t], buf.rewards[ep, t]
        batch = len(o)
        c_obs = th.as_tensor(o.reshape(batch, -1)).expand(n, -1, -1)
        c_obs2 = th.as_tensor(o2.reshape(batch, -1)).expand(n, -1, -1)
        taken = _one_hot(th.as_tensor(acts, dtype=th.long), cfg)  # (B, n, A)
        with th.no_grad():
            nxt = relaxed_actions(next_logits, self.gen).transpose(0, 1).reshape(batch, -1)
            q2 = self.target_critics(th.cat([c_obs2, nxt.expand(n, -1, -1)], dim=-1))[..., 0]
            y = th.as_tensor(rew).T + cfg.gamma * q2  # (n, B)
        q = self.critics(th.cat([c_obs, taken.reshape(batch, -1).expand(n, -1, -1)], dim=-1))
        critic_loss = (q[..., 0] - y).pow(2).mean(dim=1).sum()
        self.opt_critic.zero_grad()
        critic_loss.backward()
        clip_per_agent(self.critics, n, cfg.grad_clip)
        self.opt_critic.step()
        # each critic i sees actor i's relaxed action and the others' replayed actions
        relaxed = relaxed_actions(logits, self.gen)  # (n, B, A)
        mixed = th.where(self.eye, relaxed[:, :, None, :], taken[None])  # (n, B, n, A)
        q_pi = self.critics(th.cat([c_obs, mixed.reshape(n, batch, -1)], dim=-1))[..., 0]
        penalty = logits.pow(2).mean(dim=(1, 2)).sum()
        actor_loss = -q_pi.mean(dim=1).sum() + cfg.logit_penalty * penalty
        self.opt_actor.zero_grad()
        actor_loss.backward()
        clip_per_agent(self.actors, n, cfg.grad_clip)
        self.opt_actor.step()
        soft_update(self.target_actors, self.actors, cfg.tau)
        soft_update(self.target_critics, self.critics, cfg.tau)


def _eval_seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def train_maddpg(
    cfg: MADDPGConfig,
    *,
    seed: int,
    callback: Callable[[int, float], None] | None = None,
) -> MADDPGRun:
    """Train ``cfg.variant`` for ``cfg.episodes`` episodes and keep the best checkpoint.

    Every ``cfg.eval_every`` episodes the current actors play ``cfg.eval_episodes`` evaluation
    episodes (their own seeds, disjoint from training); the actors with the highest mean reward per
    agent are kept ("best checkpoint", as the paper evaluates). Everything random derives from
    ``seed``: the initial weights (drawn inside a forked torch RNG), the training layouts, the
    action sampling and the minibatches. The caller chooses torch's thread count.

    Args:
        cfg: the run's settings.
        seed: the run's seed.
        callback: called with ``(episodes done, mean evaluation reward)`` at every checkpoint.

    Returns:
        :class:`MADDPGRun`.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}.")
    start = time.perf_counter()
    seed = int(seed)
    n, t_len = cfg.n_agents, cfg.horizon
    env = cfg.make_env()
    learner = _Learner(cfg, seed)
    rng = np.random.default_rng([seed, 0])
    acting = _Actor(cfg, learner.actors, rng)
    env_seeds = np.random.default_rng([seed, 3]).integers(2**31, size=cfg.episodes)
    buf = _EpisodeBuffer(cfg)
    starts = cfg.batch_size * t_len if cfg.learning_starts is None else cfg.learning_starts
    od = observation_size(n, cfg.n_pieces, oracle=True)
    steps = updates = 0
    best_reward, best_episode, best_state = -math.inf, 0, copy.deepcopy(learner.actors.state_dict())
    checkpoints: list[dict[str, float]] = []
    curve: list[dict[str, float]] = []
    window: list[float] = []
    for e in range(cfg.episodes):
        env.reset(seed=int(env_seeds[e]))
        acting.reset(env)
        ep_obs = np.zeros((t_len + 1, n, od), dtype=np.float32)
        ep_bel = np.zeros((t_len + 1, n, n * cfg.n_pieces), dtype=bool)
        ep_act = np.zeros((t_len, n, 2), dtype=np.int64)
        ep_rew = np.zeros((t_len, n), dtype=np.float32)
        ep_obs[0] = env.last_observations
        beliefs = acting.beliefs()
        if beliefs is not None:
            ep_bel[0] = beliefs
        for t in range(t_len):
            acts = acting.act(_actor_inputs(cfg, ep_obs[t], beliefs))
            env.step({a: acts[i] for i, a in enumerate(env.possible_agents)})
            acting.observe_step(env)
            ep_act[t], ep_rew[t] = acts, env.last_rewards
            ep_obs[t + 1] = env.last_observations
            beliefs = acting.beliefs()
            if beliefs is not None:
                ep_bel[t + 1] = beliefs
        buf.add(ep_obs, ep_bel, ep_act, ep_rew)
        window.append(float(ep_rew.sum(axis=0).mean()))
        before, steps = steps, steps + t_len
        if steps >= starts:
            due = steps // cfg.update_every - max(before, starts - 1) // cfg.update_every
            for _ in range(max(0, due)):
                learner.update(buf, rng)
                updates += 1
        if (e + 1) % cfg.eval_every == 0 or e + 1 == cfg.episodes:
            curve.append({"episode": e + 1, "reward": float(np.mean(window))})
            window = []
            out = evaluate_actors(
                learner.actors, cfg, episodes=cfg.eval_episodes, seed=_eval_seed(seed, 7, e)
            )
            reward = float(out["reward"].mean())
            checkpoints.append({"episode": e + 1, "reward": reward})
            if reward > best_reward:
                best_reward, best_episode = reward, e + 1
                best_state = copy.deepcopy(learner.actors.state_dict())
            if callback is not None:
                callback(e + 1, reward)
    best = _make_actors(cfg)
    best.load_state_dict(best_state)
    return MADDPGRun(
        config=cfg,
        seed=seed,
        actors=best,
        best_episode=best_episode,
        best_reward=best_reward,
        checkpoints=checkpoints,
        curve=curve,
        steps=steps,
        updates=updates,
        seconds=time.perf_counter() - start,
    )


def final_evaluation(run: MADDPGRun, *, episodes: int = 1000) -> dict[str, Any]:
    """Evaluate a run's best checkpoint on ``episodes`` fresh episodes (the paper: 1000).

    Returns:
        ``reward`` (mean per agent per episode), ``reward_se`` (over episodes, of the per-episode
        mean over agents), and the per-agent-per-episode mean of each logged quantity.
    """
    out = evaluate_actors(run.actors, run.config, episodes=episodes, seed=_eval_seed(run.seed, 9))
    per_episode = out["reward"].mean(axis=1)
    row: dict[str, Any] = {
        "reward": float(per_episode.mean()),
        "reward_se": float(per_episode.std(ddof=1) / math.sqrt(episodes))
        if episodes > 1
        else float("nan"),
    }
    for k, v in out.items():
        if k != "reward":
            row[k] = float(v.mean())
    return row
