"""Conversions into :class:`~imitation_meg.cid.CID`: from a :class:`~imitation_meg.TabularMDP`
(the paper's Definition 5.1) and from a ``pycid`` CID.

pycid 0.8.2 pins pgmpy 0.1.17 and pygambit 16.0.2; pygambit 16.0.2 only builds from source with
Cython < 3 (``PIP_CONSTRAINT`` file holding ``cython<3``, see ``docs/cid.md``). The converter
reads only pgmpy's ``TabularCPD`` attributes (``variables``, ``values``, ``state_names``) and
pycid's ``decisions`` / ``utilities``, so it imports neither package.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable
from typing import Any

import numpy as np

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.cid.model import CID, Chance, Decision, Node, Utility
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import PolicyLike, UtilityLike

__all__ = ["from_mdp", "from_pycid", "policy_from_mdp", "policy_from_pycid"]


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def from_mdp(
    mdp: TabularMDP, utility: UtilityLike | None = None, *, final_state: bool = False
) -> CID:
    """The finite-horizon MDP as a CID (paper Definition 5.1).

    Variables ``S0 .. S{H-1}`` (states, ``S0 ~ p0``), decisions ``D0 .. D{H-1}`` observing
    ``S{t}``, ``S{t+1} ~ T[S{t}, D{t}, .]`` and utilities ``U0 .. U{H-1}``: ``U{t}(S{t})``,
    ``U{t}(S{t}, D{t})`` or ``U{t}(S{t}, D{t}, S{t+1})`` by the utility's shape, times
    ``discount**t`` (with a warning: see below). ``S{H}`` is added for transition utilities or
    with ``final_state=True``.

    Args:
        mdp: the MDP (dense ``(S, A, S)`` transitions are formed, so keep it small).
        utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)``; default the MDP's.
        final_state: add the post-horizon state ``S{H}`` even if no utility needs it.

    Returns:
        A :class:`CID` with integer domains ``0 .. S-1`` and ``0 .. A-1``.

    Warns:
        ImitationMEGWarning: for ``discount < 1``: the CID's maximum entropy policies keep the
            undiscounted causal entropy, so its MEG differs from :func:`imitation_meg.meg`, which
            discounts the entropy too. With ``discount = 1`` the two agree (to 1e-9 in the tests).
    """
    if not isinstance(mdp, TabularMDP):
        raise TypeError(f"mdp must be an imitation_meg.TabularMDP, got {type(mdp).__name__}.")
    u = _numpy(mdp.utility if utility is None else mdp.validate_utility(utility))
    if utility is None and mdp.utility is None:
        raise ValueError(f"{mdp.name} has no utility; pass utility=(S,), (S, A) or (S, A, S).")
    T = _numpy(mdp.dense_transition())
    p0 = _numpy(mdp.initial_state_dist)
    S, A, H, gam = mdp.n_states, mdp.n_actions, mdp.steps, mdp.discount
    if gam < 1.0:
        warnings.warn(
            f"{mdp.name} has discount {gam}: the CID's utility is discounted (U_t scaled by "
            "discount**t) but its maximum entropy policies keep the paper's undiscounted causal "
            "entropy (Definition 3.1), whereas imitation_meg.meg on a discounted MDP discounts the "
            "entropy too (discounted soft value iteration); the two MEGs differ. Use discount=1 "
            "for the paper's definition.",
            ImitationMEGWarning,
            stacklevel=2,
        )
    nodes: list[Node] = [Chance("S0", S, cpd=p0)]
    last = H if (u.ndim == 3 or final_state) else H - 1
    for t in range(H):
        nodes.append(Decision(f"D{t}", A, parents=[f"S{t}"]))
        if t < last:
            nodes.append(Chance(f"S{t + 1}", S, parents=[f"S{t}", f"D{t}"], cpd=T))
        scope = [f"S{t}"] if u.ndim == 1 else [f"S{t}", f"D{t}"]
        if u.ndim == 3:
            scope.append(f"S{t + 1}")
        nodes.append(Utility(f"U{t}", scope, table=(gam**t) * u))
    return CID(nodes, name=f"{mdp.name} as CID")


def policy_from_mdp(policy: PolicyLike, mdp: TabularMDP) -> dict[str, np.ndarray]:
    """Decision rules ``{D{t}: pi_t (S, A)}`` of an ``(S, A)`` or ``(H, S, A)`` MDP policy."""
    from imitation_meg._validation import as_policy

    pi = _numpy(as_policy(policy, mdp))
    H = mdp.steps
    return {f"D{t}": (pi if pi.ndim == 2 else pi[t]) for t in range(H)}


def _cpd_table(obj: Any, node: str) -> tuple[tuple[str, ...], tuple[Hashable, ...], np.ndarray]:
    """``(parents, domain, table (*parents, |V|))`` of a pgmpy TabularCPD of ``node``."""
    cpd = obj.get_cpds(node)
    if cpd is None:
        raise ValueError(
            f"pycid node {node!r} has no CPD; give every node one with add_cpds(...) (decisions "
            "a domain, e.g. D=[0, 1])."
        )
    variables = list(cpd.variables)
    if variables[0] != node:
        raise ValueError(f"the CPD of {node!r} is for {variables[0]!r}.")
    parents = tuple(str(v) for v in variables[1:])
    names = cpd.state_names
    domain = tuple(names[node])
    values = np.asarray(cpd.values, dtype=np.float64)
    cards = (len(domain), *tuple(len(names[p]) for p in parents))
    values = values.reshape(cards)
    return parents, domain, np.moveaxis(values, 0, -1)


def from_pycid(obj: Any) -> CID:
    """Convert a ``pycid.CID`` (with CPDs for every node) into a :class:`CID`.

    Chance CPDs keep pycid's state names as domains; decisions keep their domains and parents;
    a utility node's table is its conditional mean ``E[U | Pa_U]`` (pycid utilities are chance
    nodes with numeric outcomes). Decision rules imputed in pycid are read by
    :func:`policy_from_pycid`.

    Args:
        obj: a ``pycid.CID`` (single agent).

    Raises:
        TypeError: not a pycid CID, a multi-agent MACID, non-numeric utility outcomes.
        ValueError: a node without a CPD.
    """
    for attr in ("decisions", "utilities", "nodes", "get_cpds"):
        if not hasattr(obj, attr):
            raise TypeError(
                f"from_pycid expects a pycid.CID, got {type(obj).__name__} (no {attr!r})."
            )
    agents = getattr(obj, "agents", None)
    if agents is not None and len(list(agents)) > 1:
        raise TypeError(
            f"from_pycid converts single-agent CIDs; this MACID has agents {list(agents)}."
        )
    decisions, utilities = set(obj.decisions), set(obj.utilities)
    nodes: list[Node] = []
    for node in obj.nodes:
        node = str(node)
        parents, domain, table = _cpd_table(obj, node)
        graph_parents = (
            {str(p) for p in obj.get_parents(node)} if hasattr(obj, "get_parents") else None
        )
        if graph_parents is not None and graph_parents != set(parents):
            raise ValueError(
                f"the CPD of {node!r} is over {list(parents)} but its parents in the graph are "
                f"{sorted(graph_parents)}; re-add the CPD after changing edges."
            )
        if node in decisions:
            nodes.append(Decision(node, list(domain), parents))
        elif node in utilities:
            try:
                vals = np.asarray([float(v) for v in domain])  # type: ignore[arg-type]
            except (TypeError, ValueError) as err:
                raise TypeError(
                    f"utility node {node!r} has non-numeric outcomes {list(domain)}."
                ) from err
            nodes.append(Utility(node, parents, table @ vals))
        else:
            nodes.append(Chance(node, list(domain), parents, table))
    return CID(nodes, name=type(obj).__name__)


def policy_from_pycid(obj: Any) -> dict[str, np.ndarray]:
    """The decision rules imputed in a pycid CID (uniform where only a domain was given), as
    ``{decision: (*parent sizes, |D|)}`` in the parent order of :func:`from_pycid`."""
    return {str(d): _cpd_table(obj, str(d))[2] for d in obj.decisions}
