"""The 28 extended environments of the Extended Environments library, by their upstream names.

Written from the rules stated in Alexander et al. (2022) and in the library's documentation; no
code is copied. Each class docstring states its rule. Conventions:

* ``n_actions`` / ``n_obs`` are class attributes; observations are ints in ``[0, n_obs)``.
* "match" means reward +1 if the true agent's action equals the sim's action, else -1.
* A sim is created by :meth:`ExtendedEnv.make_sim`, i.e. with the same metadata and seed as the
  true agent, so an identically trained sim is an exact copy (semi-determinism).
* Random observations come from ``self.rng``, a generator derived from the run's seed.

Three environments are slow (``slow = True``) and are left out of the benchmark battery:
:class:`DejaVu`, :class:`ReverseHistory` (both retrain a fresh sim on the whole history at every
step) and :class:`PunishSlowAgent` (traces the sim's interpreter steps).

This module is the catalogue: every environment is importable from here, by its upstream name.
The classes live by kind in :mod:`~imitation_meg.extended.envs_match` (the reward is a match with
one sim), :mod:`~imitation_meg.extended.envs_games` (the sim is an opponent, partner, sub-agent or
judge) and :mod:`~imitation_meg.extended.envs_history` (a sim rebuilt or traced from the history).
"""

from __future__ import annotations

from imitation_meg.extended import envs_games, envs_history, envs_match
from imitation_meg.extended.core import ExtendedEnv
from imitation_meg.extended.envs_games import (
    AdversarialSequenceEvader as AdversarialSequenceEvader,
)
from imitation_meg.extended.envs_games import (
    AdversarialSequencePredictor as AdversarialSequencePredictor,
)
from imitation_meg.extended.envs_games import (
    AfterImages as AfterImages,
)
from imitation_meg.extended.envs_games import (
    CensoredObservation as CensoredObservation,
)
from imitation_meg.extended.envs_games import (
    CryingBaby as CryingBaby,
)
from imitation_meg.extended.envs_games import (
    CryingBaby2 as CryingBaby2,
)
from imitation_meg.extended.envs_games import (
    IncentivizeZero as IncentivizeZero,
)
from imitation_meg.extended.envs_games import (
    SelfRecognition as SelfRecognition,
)
from imitation_meg.extended.envs_games import (
    TemptingButton as TemptingButton,
)
from imitation_meg.extended.envs_games import (
    TemptingButtonVariation as TemptingButtonVariation,
)
from imitation_meg.extended.envs_history import (
    DejaVu as DejaVu,
)
from imitation_meg.extended.envs_history import (
    LimitedMemory as LimitedMemory,
)
from imitation_meg.extended.envs_history import (
    PunishSlowAgent as PunishSlowAgent,
)
from imitation_meg.extended.envs_history import (
    ReverseHistory as ReverseHistory,
)
from imitation_meg.extended.envs_match import (
    DelayedRewards as DelayedRewards,
)
from imitation_meg.extended.envs_match import (
    FalseMemories as FalseMemories,
)
from imitation_meg.extended.envs_match import (
    FlipEveryOther as FlipEveryOther,
)
from imitation_meg.extended.envs_match import (
    IgnoreActions as IgnoreActions,
)
from imitation_meg.extended.envs_match import (
    IgnoreObservations as IgnoreObservations,
)
from imitation_meg.extended.envs_match import (
    IgnoreRewards as IgnoreRewards,
)
from imitation_meg.extended.envs_match import (
    IgnoreRewards2 as IgnoreRewards2,
)
from imitation_meg.extended.envs_match import (
    IgnoreRewards3 as IgnoreRewards3,
)
from imitation_meg.extended.envs_match import (
    IncentivizeLearningRate as IncentivizeLearningRate,
)
from imitation_meg.extended.envs_match import (
    NthRewardMultipliedByN as NthRewardMultipliedByN,
)
from imitation_meg.extended.envs_match import (
    PunishNondeterministicAgent as PunishNondeterministicAgent,
)
from imitation_meg.extended.envs_match import (
    Repeater as Repeater,
)
from imitation_meg.extended.envs_match import (
    ShiftedRewards as ShiftedRewards,
)
from imitation_meg.extended.envs_match import (
    ThirdActionForbidden as ThirdActionForbidden,
)

__all__ = ["ALL_ENVIRONMENTS", "FAST_ENVIRONMENTS", "SLOW_ENVIRONMENTS", "get_env"]
__all__ += envs_games.__all__
__all__ += envs_history.__all__
__all__ += envs_match.__all__

ALL_ENVIRONMENTS: tuple[type[ExtendedEnv], ...] = (
    AdversarialSequencePredictor,
    AdversarialSequenceEvader,
    AfterImages,
    CensoredObservation,
    CryingBaby,
    CryingBaby2,
    DejaVu,
    DelayedRewards,
    PunishNondeterministicAgent,
    FalseMemories,
    FlipEveryOther,
    IgnoreActions,
    IgnoreObservations,
    IgnoreRewards,
    IgnoreRewards2,
    IgnoreRewards3,
    IncentivizeLearningRate,
    IncentivizeZero,
    LimitedMemory,
    NthRewardMultipliedByN,
    Repeater,
    ReverseHistory,
    PunishSlowAgent,
    SelfRecognition,
    ShiftedRewards,
    TemptingButton,
    TemptingButtonVariation,
    ThirdActionForbidden,
)
SLOW_ENVIRONMENTS = tuple(e for e in ALL_ENVIRONMENTS if e.slow)
FAST_ENVIRONMENTS = tuple(e for e in ALL_ENVIRONMENTS if not e.slow)


def get_env(name: str) -> type[ExtendedEnv]:
    """Look up an environment class by its upstream name.

    Raises:
        ValueError: if ``name`` is not one of the 28 environments.
    """
    for env in ALL_ENVIRONMENTS:
        if env.__name__ == name:
            return env
    raise ValueError(
        f"unknown extended environment {name!r}; choose one of "
        f"{[e.__name__ for e in ALL_ENVIRONMENTS]}."
    )
