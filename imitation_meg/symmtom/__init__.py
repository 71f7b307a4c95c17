"""SymmToM: the symmetric theory-of-mind environment, agents, theory-of-mind tests and MEG tooling.

``import imitation_meg.symmtom`` needs pettingzoo (extra ``multiagent``); stable-baselines3 is imported
only by :mod:`imitation_meg.symmtom.sb3` when a learned agent is built or trained.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``) and ``core/`` (the tabular MDP of a SymmToM task).
"""

from imitation_meg.symmtom.dynamics import LOG_KEYS, MOVE_NAMES, MOVES, resolve_moves, transition
from imitation_meg.symmtom.env import SymmToMEnv, SymmToMWarning, observation_size, parallel_env

__all__ = [
    "LOG_KEYS",
    "MOVES",
    "MOVE_NAMES",
    "SymmToMEnv",
    "SymmToMWarning",
    "observation_size",
    "parallel_env",
    "resolve_moves",
    "transition",
]
