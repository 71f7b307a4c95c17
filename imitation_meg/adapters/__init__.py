"""Adapters that translate foreign objects into policies, utilities and MDPs.

:func:`resolve_policy` is the one front door for policies of every kind, and
:func:`policy_table` their ``(S, A)`` table. The submodules import
stable-baselines3, sb3-contrib and imitation only when they handle one of their objects, so
``import imitation_meg.adapters`` stays light:

- :mod:`imitation_meg.adapters.dispatch`: :func:`resolve_policy`, recognising what it is given,
  and :func:`policy_table`; :mod:`imitation_meg.adapters.sources`: what it refuses, and why.
- :mod:`imitation_meg.adapters.observations`: what a policy observes in each state; callables.
- :mod:`imitation_meg.adapters.sb3`: policy tables of SB3 policies.
- :mod:`imitation_meg.adapters.saved_models`: saved models, the algorithm read from the zip.
- :mod:`imitation_meg.adapters.vec_normalize`: VecNormalize statistics, found beside a model.
- :mod:`imitation_meg.adapters.contrib`: sb3-contrib's QR-DQN, ARS, MaskablePPO, RecurrentPPO.
- :mod:`imitation_meg.adapters.zoo`: RL Baselines3 Zoo run folders.
- :mod:`imitation_meg.adapters.imitation`: imitation's ``TabularPolicy`` and ``load_policy`` names.
- :mod:`imitation_meg.adapters.mce_irl`: imitation ``RewardNet`` utilities and ``MCEIRL`` scores.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``) and ``core/``; nothing below it knows SB3, sb3-contrib, the Zoo or
imitation.
"""

from imitation_meg.adapters.dispatch import ResolvedPolicy, policy_table, resolve_policy

__all__ = ["ResolvedPolicy", "policy_table", "resolve_policy"]
