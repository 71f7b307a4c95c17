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

The networks are in :mod:`imitation_meg.symmtom.networks`, the settings in
:mod:`imitation_meg.symmtom.maddpg_config` and acting with trained actors (evaluation,
:class:`LearnedPolicy`) in :mod:`imitation_meg.symmtom.maddpg_acting`; this module trains, and
its public names include theirs.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg.symmtom.env import observation_size
from imitation_meg.symmtom.maddpg_acting import (
    LearnedPolicy,
    _Actor,
    _actor_inputs,
    _one_hot,
    evaluate_actors,
)
from imitation_meg.symmtom.maddpg_config import VARIANTS, MADDPGConfig, _make_actors
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
    t_len = cfg.horizon
    env = cfg.make_env()
    learner = _Learner(cfg, seed)
    rng = np.random.default_rng([seed, 0])
    acting = _Actor(cfg, learner.actors, rng)
    env_seeds = np.random.default_rng([seed, 3]).integers(2**31, size=cfg.episodes)
    buf = _EpisodeBuffer(cfg)
    starts = cfg.batch_size * t_len if cfg.learning_starts is None else cfg.learning_starts
    steps = updates = 0
    best = _Best(-math.inf, 0, copy.deepcopy(learner.actors.state_dict()))
    checkpoints: list[dict[str, float]] = []
    curve: list[dict[str, float]] = []
    window: list[float] = []
    for e in range(cfg.episodes):
        env.reset(seed=int(env_seeds[e]))
        episode = _play_episode(cfg, env, acting)
        buf.add(*episode)
        window.append(float(episode[3].sum(axis=0).mean()))
        before, steps = steps, steps + t_len
        for _ in range(_updates_due(before, steps, starts, cfg.update_every)):
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
            best.offer(reward, e + 1, learner.actors)
            if callback is not None:
                callback(e + 1, reward)
    best_actors = _make_actors(cfg)
    best_actors.load_state_dict(best.state)
    return MADDPGRun(
        config=cfg,
        seed=seed,
        actors=best_actors,
        best_episode=best.episode,
        best_reward=best.reward,
        checkpoints=checkpoints,
        curve=curve,
        steps=steps,
        updates=updates,
        seconds=time.perf_counter() - start,
    )


@dataclasses.dataclass
class _Best:
    """The best checkpoint so far: its evaluation reward, episode and actors' weights."""

    reward: float
    episode: int
    state: dict[str, Any]

    def offer(self, reward: float, episode: int, actors: Actors) -> None:
        if reward > self.reward:
            self.reward, self.episode = reward, episode
            self.state = copy.deepcopy(actors.state_dict())


def _updates_due(before: int, steps: int, starts: int, every: int) -> int:
    """Gradient updates due after the environment steps ``before .. steps``: one every ``every``
    steps once ``starts`` steps are stored."""
    if steps < starts:
        return 0
    return max(0, steps // every - max(before, starts - 1) // every)


def _play_episode(
    cfg: MADDPGConfig, env: Any, acting: _Actor
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One training episode from a reset ``env``: observations ``(T+1, n, od)``, beliefs
    ``(T+1, n, n c)``, actions ``(T, n, 2)`` and rewards ``(T, n)``."""
    n, t_len = cfg.n_agents, cfg.horizon
    od = observation_size(n, cfg.n_pieces, oracle=True)
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
    return ep_obs, ep_bel, ep_act, ep_rew


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
