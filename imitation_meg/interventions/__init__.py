"""Interventional MEG: one utility that explains behaviour on distribution and under shift.

MEG scores how well a utility predicts a policy *on distribution*; a spurious goal that coincides
with the true one there scores as high (the paper's Section 7, "Distributional shifts"). Under
interventions on the environment (``do()`` on the initial state, the layout or the dynamics) a
true goal keeps predicting behaviour and a spurious one does not. Given intervened MDPs
``k = 1 .. K`` that share the action space and the horizon, weights ``w_k`` (normalised to sum
to 1) and a policy defined on all of them (an agent acting on observations), the interventional
MEG of a utility is

    MEG_do(pi) = sup_{u, beta}  sum_k w_k L_k(u, beta) + H log|A|,
    L_k(u, beta) = E_{pi, MDP_k}[ sum_t log pi_{beta, u, t}(a_t | s_t) ],

the best *single* utility and rationality across all interventions (over a linear class or a
target's class, ``u`` ranges over the class). It is exact with the solvers that exist: the
weighted disjoint union of the intervened MDPs (:func:`union_mdp`: block-diagonal transitions,
initial distribution ``sum_k w_k p0_k``) is one MDP whose log-likelihood is ``sum_k w_k L_k``,
because a soft-optimal policy of the union acts in each copy as the soft-optimal policy of that
copy. Tying the utility across copies (the same ``beta``; the same class member, i.e. the same
feature weights or the same value per target label) makes :func:`imitation_meg.meg`,
:func:`imitation_meg.meg_unknown` and :func:`imitation_meg.meg_target` solve it, concave for
linear classes as before.

:func:`meg_interventional` reports it with each intervention's score of the joint model
(``L_k + H log|A|``, which may be negative: the joint model can predict one intervention worse
than the uniform policy does), its weighted share (the shares sum to the interventional MEG),
each intervention's own MEG (its best model alone) and the on-distribution MEG (that of the
reference intervention). Limits: the policy must be the same agent in every intervention (the
measure says nothing about an agent that is retrained); interventions must share the horizon and
the actions; the weights are a choice (uniform by default) that changes the value.

What lives here: :mod:`~imitation_meg.interventions.union` (the weighted disjoint union of the
intervened MDPs, and the per-intervention inputs stacked for it) and
:mod:`~imitation_meg.interventions.estimate` (:func:`meg_interventional`, the shares and
:class:`InterventionalMEG`).

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``),
``core/`` and ``adapters/`` (lazily, to read an agent's policy table).
"""

from imitation_meg.interventions.estimate import InterventionalMEG, ShareWarning, meg_interventional
from imitation_meg.interventions.union import union_mdp

__all__ = ["InterventionalMEG", "ShareWarning", "meg_interventional", "union_mdp"]
