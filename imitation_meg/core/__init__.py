"""The exact tabular core: MDPs, the soft recursion and exact MEG, with no foreign object in sight.

What lives here (data walks down this list):

- :mod:`~imitation_meg.core.mdp`: :class:`~imitation_meg.core.mdp.TabularMDP`, validated
  tensors with dense or sparse transitions (:mod:`~imitation_meg.core.env_tables` reads seals'
  and toy-text's tables into it);
- :mod:`~imitation_meg.core.soft_vi` and :mod:`~imitation_meg.core.discounted`: the soft
  recursion, finite-horizon and discounted (:mod:`~imitation_meg.core.occupancy`: the
  occupancies of a policy); :mod:`~imitation_meg.core.policies`: reference policies;
- :mod:`~imitation_meg.core.known`: known-utility MEG (the function ``meg``), over the objective
  of :mod:`~imitation_meg.core.known_objective` (finite horizon) or
  :mod:`~imitation_meg.core.discounted_known` (discounted);
  :mod:`~imitation_meg.core.likelihood`, :mod:`~imitation_meg.core.unknown`,
  :mod:`~imitation_meg.core.faces`, :mod:`~imitation_meg.core.targets` and
  :mod:`~imitation_meg.core.algorithm2`: unknown-utility and target MEG over classes of
  utilities (:mod:`~imitation_meg.core.class_features`: a linear class;
  :mod:`~imitation_meg.core.newton`: the Newton solver over it);
- :mod:`~imitation_meg.core.trajectories` and :mod:`~imitation_meg.core.trajectory_data`: MEG
  from sampled trajectories;
- ``beta/``: the exact 1-D solve in beta behind a protocol any objective of MEG's form can use;
- ``kernels/``: the compute kernels (the transition operator, the fused and compiled passes,
  thread settings) behind the public functions.

The public names are re-exported from :mod:`imitation_meg`.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``),
``core/kernels/`` and ``core/beta/``. Adapters, environments and estimators beyond tabular
import the core, never the other way round.
"""
