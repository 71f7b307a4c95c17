"""The compute kernels of the exact core: how its passes run, not what they compute.

What lives here (internal: the core's public functions are the way in):

- :mod:`~imitation_meg.core.kernels.operators`: one transition operator per MDP (dense or CSR,
  action-major products, scipy's loops, workspaces, device), and :class:`~imitation_meg.core.kernels.operators.PassMDP`, the MDP as
  the passes read it;
- :mod:`~imitation_meg.core.kernels.products`: its action-major product for ``k`` columns along
  one path, and the elementwise steps beside it;
- :mod:`~imitation_meg.core.kernels.limits`: the ``beta -> +-inf`` limit step and its ties;
- :mod:`~imitation_meg.core.kernels.known_passes`: the fused derivative passes of known-utility
  MEG (``L``, ``dL``, ``d2L`` per beta);
- :mod:`~imitation_meg.core.kernels.fused` and :mod:`~imitation_meg.core.kernels.fused_class`:
  the same passes and a linear class's likelihood passes compiled with numba (CPU, the ``fast``
  extra);
- :mod:`~imitation_meg.core.kernels.threads`: torch and numba thread counts, side-by-side tasks.
- :mod:`~imitation_meg.core.kernels.reductions`: sums in an order that does not depend on the
  number of threads.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``)
only: the kernels see an MDP through ``PassMDP``, never the core's modules.
"""
