"""The :class:`Emulator` protocol: an environment that saves and restores its complete state.

:func:`~imitation_meg.envs.emulator.enumerate_mdp` needs nothing else of an environment;
:class:`~imitation_meg.envs.ale.ALEEmulator` implements it for the ALE's Atari games.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["Emulator", "EmulatorStep"]


class EmulatorStep(NamedTuple):
    """What one step of an :class:`Emulator` gives: the per-step observation (one frame, before
    any frame stacking), the reward and whether the step ended the episode."""

    observation: np.ndarray
    reward: float
    terminated: bool


@runtime_checkable
class Emulator(Protocol):
    """An environment that saves and restores its complete state: what :func:`enumerate_mdp`
    needs.

    Its steps must be deterministic: the same state and action always give the same
    :class:`EmulatorStep` and the same next state.

    Attributes:
        name: a label for the MDP.
        n_actions: the number of actions ``A`` (actions are ``0 .. A-1``).
    """

    name: str
    n_actions: int

    def starts(self) -> list[tuple[bytes, list[np.ndarray]]]:
        """The start states, equally likely, each as ``(save(), observations)``: the per-step
        observations since the episode began, oldest first (at least the reset's)."""
        ...

    def save(self) -> bytes:
        """The complete current state, serialized: equal bytes mean the same state."""
        ...

    def restore(self, state: bytes) -> None:
        """Put the emulator back into a state :meth:`save` returned."""
        ...

    def step(self, action: int) -> EmulatorStep:
        """Take ``action`` in the current state."""
        ...
