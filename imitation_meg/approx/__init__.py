"""MEG beyond tabular environments: estimates from rollouts (soft Q-fits, or the paths of a
deterministic environment).

Nothing in the core imports this subpackage; it imports the core, and stable-baselines3 only when
an SB3 object has to be handled.

- :func:`soft_value_curve` / :class:`SoftValueCurve`: the environment's soft-value curve
  ``Lambda(beta)``, computed once (exactly for a :class:`~imitation_meg.TabularMDP`, by the
  paths of a simulated deterministic environment), saved with its provenance, and scoring any
  policy from its expected return (``meg_approx(..., curve=...)``).
- :func:`meg_approx`: known-utility MEG (the environment's reward) of a policy in any
  gymnasium environment with ``Discrete`` actions or a bounded ``Box``, from ``reset`` / ``step``
  only; on the classic-control tasks by default through :mod:`imitation_meg.approx.paths` (no
  fitting: the exact likelihood of a deterministic environment's paths, with the simulators of
  :mod:`imitation_meg.approx.simulators`), elsewhere by soft Q-fits
  (:mod:`imitation_meg.approx.soft_q`: one design for both kinds of action, the action space a
  parameter, :mod:`imitation_meg.approx.spaces`). :func:`meg_approx_continuous` is its Box soft
  Q-fits under their former name.
- :func:`meg_approx_unknown`: a lower bound on unknown-utility MEG over a utility network on
  observations, or over linear utilities of the scored agent's own hidden features; or, for
  observations that take few values, the estimate over every utility of the observation
  through the empirical MDP (``utility="observation"``).
- :class:`ApproxOptions`: the settings both take (one record, the same defaults).
- :mod:`imitation_meg.approx.envs`: tabular environments seen through non-index observations,
  with their exact MEG, for validation.
- :mod:`imitation_meg.approx.empirical` and :mod:`imitation_meg.approx.linear`: the opt-in
  methods ``method="empirical"`` / ``"auto"`` and ``method="linear"`` (docs/approx.md).

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``), ``core/``, ``envs/``, ``adapters/`` and ``continuous/``.
"""

from imitation_meg.approx.curve import CurveInfo, SoftValueCurve, exact_curve
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning
from imitation_meg.approx.known import (
    ContinuousApproxResult,
    meg_approx,
    meg_approx_continuous,
    soft_value_curve,
)
from imitation_meg.approx.options import ApproxOptions
from imitation_meg.approx.policy import PolicyFn, as_policy_fn
from imitation_meg.approx.rollouts import EnvSource, Laws, Rollouts, collect
from imitation_meg.approx.soft_q import (
    BetaPrior,
    BoxSoftQModel,
    SoftQModel,
    fit_soft_q,
    fit_soft_q_ensemble,
    soft_mean,
)
from imitation_meg.approx.unknown import ApproxUnknownResult, meg_approx_unknown

__all__ = [
    "ApproxMEGResult",
    "ApproxMEGWarning",
    "ApproxOptions",
    "ApproxUnknownResult",
    "BetaPrior",
    "BoxSoftQModel",
    "ContinuousApproxResult",
    "CurveInfo",
    "EnvSource",
    "Laws",
    "PolicyFn",
    "Rollouts",
    "SoftQModel",
    "SoftValueCurve",
    "as_policy_fn",
    "collect",
    "exact_curve",
    "fit_soft_q",
    "fit_soft_q_ensemble",
    "meg_approx",
    "meg_approx_continuous",
    "meg_approx_unknown",
    "soft_mean",
    "soft_value_curve",
]
