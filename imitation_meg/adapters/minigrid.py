"""stable-baselines3 pieces for MiniGrid agents: a small CNN for MiniGrid's symbolic images.

MiniGrid's image observation is a ``(view, view, 3)`` grid of (object, colour, state) codes, too
small for SB3's NatureCNN (which needs at least 36x36 pixels). :class:`MiniGridCNN` is the kind
of extractor minigrid's training guide recommends: three 2x2 convolutions and a linear layer.
Pass it as ``policy_kwargs=minigrid_cnn_kwargs()`` to ``PPO("CnnPolicy", ...)``; a saved model
then names this class, so loading it (and scoring it with
:func:`imitation_meg.adapters.policy_table`) needs ``imitation_meg`` importable, nothing else.

Imports stable-baselines3 and torch's ``nn`` at import (this module is only imported on use).
"""

from __future__ import annotations

from typing import Any

import torch as th
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

__all__ = ["MiniGridCNN", "minigrid_cnn_kwargs"]


class MiniGridCNN(BaseFeaturesExtractor):
    """Three 2x2 convolutions (16, 32, 64 channels, ReLU) and a linear layer to ``features_dim``.

    Args:
        observation_space: a channel-first ``Box`` ``(C, height, width)`` with height and width
            at least 4 (SB3 transposes MiniGrid's channel-last images before the policy).
        features_dim: size of the output features.

    Raises:
        ValueError: a space that is not a 3-D image of at least 4x4 cells.
    """

    def __init__(self, observation_space: Any, features_dim: int = 64) -> None:
        shape = tuple(observation_space.shape or ())
        if len(shape) != 3 or min(shape[1:]) < 4:
            raise ValueError(
                f"MiniGridCNN needs a channel-first (C, H, W) image of at least 4x4 cells, got "
                f"the observation space {observation_space}; use MlpPolicy for flat observations."
            )
        super().__init__(observation_space, features_dim)
        channels = shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(channels, 16, 2),
            nn.ReLU(),
            nn.Conv2d(16, 32, 2),
            nn.ReLU(),
            nn.Conv2d(32, 64, 2),
            nn.ReLU(),
            nn.Flatten(),
        )
        with th.no_grad():
            n_flat = int(self.cnn(th.zeros(1, *shape)).shape[1])
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())

    def forward(self, observations: th.Tensor) -> th.Tensor:
        """``(N, C, H, W)`` images to ``(N, features_dim)`` features."""
        return self.linear(self.cnn(observations))


def minigrid_cnn_kwargs(features_dim: int = 64) -> dict[str, Any]:
    """``policy_kwargs`` for ``PPO("CnnPolicy", ...)`` on MiniGrid images with
    :class:`MiniGridCNN` (symbolic codes, not pixels: no division by 255)."""
    return {
        "features_extractor_class": MiniGridCNN,
        "features_extractor_kwargs": {"features_dim": int(features_dim)},
        "normalize_images": False,
    }
