"""The settings of a MADDPG run on SymmToM (:mod:`imitation_meg.symmtom.maddpg`): the variant,
the SymmToM configuration, the hyperparameters and the sizes they imply.
"""

from __future__ import annotations

import dataclasses
import warnings

from imitation_meg.symmtom.env import SymmToMEnv, SymmToMWarning, observation_size
from imitation_meg.symmtom.networks import Actors

__all__ = ["VARIANTS", "MADDPGConfig"]

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
