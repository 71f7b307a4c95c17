"""imitation_meg: maximum entropy goal-directedness (MEG) for imitation / seals / stable-baselines3.

The core API is light: ``import imitation_meg`` imports neither stable-baselines3 nor imitation.

Example:
    >>> import imitation_meg as im
    >>> mdp = im.envs.cliff_world(horizon=30)
    >>> res = im.meg(im.policies.epsilon_greedy(mdp, 0.1), mdp)
    >>> res.meg > 0
    True
"""

__version__ = "0.2.0"

import os as _os
from typing import Any

# gymnasium 0.29 imports its environment plugins when it is imported, MiniGrid's among them,
# which imports pygame, which greets on stdout: keep stdout for results (tables, doctests).
_os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

from imitation_meg import envs
from imitation_meg.cid import CBN, CID, meg_cid, meg_cid_target, meg_cid_unknown
from imitation_meg.core import policies, soft_vi
from imitation_meg.core.known import MEGResult, meg, meg_one_step
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import occupancy_measures, soft_value_iteration
from imitation_meg.core.trajectories import meg_from_trajectories
from imitation_meg.core.unknown import meg_target, meg_unknown
from imitation_meg.interventions import InterventionalMEG, meg_interventional
from imitation_meg.report import meg_summary

__all__ = [
    "CBN",
    "CID",
    "InterventionalMEG",
    "MEGResult",
    "TabularMDP",
    "__version__",
    "envs",
    "meg",
    "meg_approx",
    "meg_approx_unknown",
    "meg_cid",
    "meg_cid_target",
    "meg_cid_unknown",
    "meg_from_trajectories",
    "meg_interventional",
    "meg_one_step",
    "meg_summary",
    "meg_target",
    "meg_unknown",
    "occupancy_measures",
    "policies",
    "soft_value_curve",
    "soft_value_iteration",
    "soft_vi",
]

#: Names served lazily from :mod:`imitation_meg.approx` (which imports gymnasium's machinery).
_APPROX = ("meg_approx", "meg_approx_unknown", "soft_value_curve")


def __getattr__(name: str) -> Any:
    """``meg_approx`` / ``meg_approx_unknown`` / ``soft_value_curve`` and the ``approx`` and ``continuous``
    subpackages, imported on use."""
    if name in _APPROX or name in ("approx", "continuous"):
        import importlib

        if name == "continuous":
            return importlib.import_module("imitation_meg.continuous")
        approx = importlib.import_module("imitation_meg.approx")
        return approx if name == "approx" else getattr(approx, name)
    raise AttributeError(f"module 'imitation_meg' has no attribute {name!r}")
