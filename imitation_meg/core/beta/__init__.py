"""The exact 1-D solve in the rationality beta, for any objective of MEG's form.

What lives here: the protocol an objective implements and the records it returns
(:mod:`~imitation_meg.core.beta.protocol`: :class:`BetaObjective`, :class:`BetaEvaluation`,
:class:`LimitValue`, :class:`BetaSolution`), the solver (:mod:`~imitation_meg.core.beta.solver`:
:func:`solve_beta`), its searches (:mod:`~imitation_meg.core.beta.search`: the solver's state
and safeguarded Newton; :mod:`~imitation_meg.core.beta.batched`: the log grid and the probes) and the Hermite interpolation their roots settle on
(:mod:`~imitation_meg.core.beta.hermite`). Known-utility MEG of MDPs, of CIDs and of continuous
actions all solve through :func:`solve_beta`.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``)
only: the solver knows objectives through the protocol, not MDPs.
"""

from imitation_meg.core.beta.protocol import BetaEvaluation, BetaObjective, BetaSolution, LimitValue
from imitation_meg.core.beta.solver import solve_beta

__all__ = ["BetaEvaluation", "BetaObjective", "BetaSolution", "LimitValue", "solve_beta"]
