"""MEG in causal influence diagrams (the paper's general definitions, not only MDPs).

- :class:`CID`, :class:`CBN` with :class:`Chance`, :class:`Decision`, :class:`Utility` nodes
  (finite domains, validated tables);
- :func:`meg_cid`: known-utility MEG of a policy (Definition 3.2) by soft backward induction and
  the exact 1-D solve, for CIDs with sufficient recall;
- :func:`meg_cid_unknown`: MEG over every utility function of chosen variables (Definition 4.3);
- :func:`meg_cid_target`: MEG of decision variables with respect to target variables of a CBN
  (Definition 4.4);
- :func:`from_mdp`, :func:`from_pycid` and the policy converters;
- :mod:`~imitation_meg.cid.examples`: the paper's mouse examples.

See ``docs/cid.md``.

May import: the ground modules (``type_aliases``, ``_validation``, ``results``, ``progress``) and ``core/`` (the beta solver, the limit step, known-utility MEG's
result).
"""

from imitation_meg.cid import examples
from imitation_meg.cid.backward import InsufficientRecallError, decision_order
from imitation_meg.cid.convert import from_mdp, from_pycid, policy_from_mdp, policy_from_pycid
from imitation_meg.cid.meg import maxent_policy, meg_cid, meg_cid_target, meg_cid_unknown
from imitation_meg.cid.model import CBN, CID, Chance, Decision, Policy, Utility
from imitation_meg.cid.objective import CIDObjective

__all__ = [
    "CBN",
    "CID",
    "CIDObjective",
    "Chance",
    "Decision",
    "InsufficientRecallError",
    "Policy",
    "Utility",
    "decision_order",
    "examples",
    "from_mdp",
    "from_pycid",
    "maxent_policy",
    "meg_cid",
    "meg_cid_target",
    "meg_cid_unknown",
    "policy_from_mdp",
    "policy_from_pycid",
]
