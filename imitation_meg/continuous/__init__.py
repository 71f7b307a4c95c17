"""MEG for policies acting in bounded continuous action boxes.

The uniform density ``u`` on the action box replaces ``1 / |A|``, the soft-optimal models are
densities ``pi_beta(a | s) = u(a) exp(beta (Q(s, a) - V(s)))``, and known-utility MEG is
``sup_beta E_pi[sum_t log(pi_beta(a_t | s_t) / u(a_t))]``, solved with the same exact 1-D solver
as the discrete code (:func:`imitation_meg.core.beta.solver.solve_beta`). See docs/continuous.md.

- :class:`ContinuousMDP`, :func:`random_continuous_mdp`, :class:`ContinuousTabularEnv`: finite
  states, a bounded box of actions, transitions and utility smooth in the action.
- :func:`meg_continuous`: the exact reference (Gauss-Legendre quadrature over the box, its
  accuracy measured by refinement).
- :mod:`imitation_meg.continuous.policies`: densities, squashed and clipped Gaussians, the
  uniform and soft-optimal policies.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``), ``core/`` and ``adapters/`` (to read SB3 agents' action
densities).
"""

from imitation_meg.continuous import policies
from imitation_meg.continuous.envs import ContinuousTabularEnv, random_continuous_mdp
from imitation_meg.continuous.known import (
    ContinuousMEGObjective,
    ContinuousMEGResult,
    ContinuousMEGWarning,
    meg_continuous,
    soft_values,
)
from imitation_meg.continuous.mdp import ContinuousMDP
from imitation_meg.continuous.policies import DensityPolicy, GaussianPolicy
from imitation_meg.continuous.unknown import ContinuousUnknownResult, meg_continuous_unknown

__all__ = [
    "ContinuousMDP",
    "ContinuousMEGObjective",
    "ContinuousMEGResult",
    "ContinuousMEGWarning",
    "ContinuousTabularEnv",
    "ContinuousUnknownResult",
    "DensityPolicy",
    "GaussianPolicy",
    "meg_continuous",
    "meg_continuous_unknown",
    "policies",
    "random_continuous_mdp",
    "soft_values",
]
