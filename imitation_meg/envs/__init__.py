"""Builders and converters that produce :class:`imitation_meg.TabularMDP` objects."""

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
