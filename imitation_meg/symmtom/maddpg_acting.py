"""Acting with trained MADDPG actors on SymmToM: their inputs, sampling, evaluation episodes and
:class:`LearnedPolicy`, one actor as a policy of the theory-of-mind tests and the episode runner.
"""

from __future__ import annotations

import numpy as np
import torch as th
from torch import nn

from imitation_meg.symmtom.env import SymmToMEnv
from imitation_meg.symmtom.knowledge import KnowledgeTracker
from imitation_meg.symmtom.maddpg_config import MADDPGConfig
from imitation_meg.symmtom.networks import Actors

__all__ = ["LearnedPolicy", "evaluate_actors"]


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
