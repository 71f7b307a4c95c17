"""imitation_meg: maximum entropy goal-directedness for imitation / seals / stable-baselines3."""

__version__ = "0.1.0"

__all__ = ["__version__"]
