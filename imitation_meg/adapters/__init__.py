"""Adapters that translate foreign objects into policies, utilities and MDPs.

Submodules are imported on demand so that ``import imitation_meg`` never imports
stable-baselines3 or imitation:

- :mod:`imitation_meg.adapters.sb3`: policy tables of trained SB3 models.
- :mod:`imitation_meg.adapters.imitation`: imitation's ``TabularPolicy`` and ``load_policy`` names.
- :mod:`imitation_meg.adapters.mce_irl`: imitation ``RewardNet`` utilities and ``MCEIRL`` scores.
"""

__all__: list[str] = []
