"""Builders and converters that produce :class:`~imitation_meg.core.mdp.TabularMDP` objects.

What lives here: the paper's CliffWorld with its goal regions (:mod:`~imitation_meg.envs.cliff`),
the authors' notebook grid (:mod:`~imitation_meg.envs.grid`), random sparse MDPs
(:mod:`~imitation_meg.envs.random`), seals and gymnasium toy-text environments
(:mod:`~imitation_meg.envs.convert`), fixed-layout MiniGrid tasks
(:mod:`~imitation_meg.envs.minigrid`), the enumerated MDP of an emulator that saves its state,
the ALE's Atari games among them (:mod:`~imitation_meg.envs.emulator`), and environment ids
across gymnasium releases (:mod:`~imitation_meg.envs.ids`).

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``)
and ``core/``.
"""

from imitation_meg.envs.cliff import cliff_world, goal_region_cells, grid_target
from imitation_meg.envs.convert import mdp_from_env
from imitation_meg.envs.emulator import ALEEmulator, Emulator, EmulatorStep, enumerate_mdp
from imitation_meg.envs.grid import notebook_grid
from imitation_meg.envs.ids import registered_id
from imitation_meg.envs.minigrid import minigrid_mdp
from imitation_meg.envs.random import random_mdp

__all__ = [
    "ALEEmulator",
    "Emulator",
    "EmulatorStep",
    "cliff_world",
    "enumerate_mdp",
    "goal_region_cells",
    "grid_target",
    "mdp_from_env",
    "minigrid_mdp",
    "notebook_grid",
    "random_mdp",
    "registered_id",
]
