"""Causal influence diagrams (CIDs) and causal Bayesian networks (CBNs) with finite domains.

A :class:`CID` (paper Definition 2.2) is a DAG over chance, decision and utility variables:

- :class:`Chance` variables have a finite domain and a conditional probability table (CPT)
  ``cpd[pa_1, ..., pa_k, v] = P(V = v | Pa_V = pa)`` (parents first, the variable last, in the
  order of ``parents``: the layout of ``T[s, a, s']`` and ``pi[s, a]``);
- :class:`Decision` variables have a finite domain and parents (what the decision observes) but
  no table: a *policy* supplies one decision rule ``pi_D[pa_1, ..., pa_k, d]`` per decision;
- :class:`Utility` variables are real-valued functions of their parents,
  ``table[pa_1, ..., pa_k]`` (a utility with a random value enters through its conditional mean);
  they have no children. The utility function is the sum of the utility variables.

A :class:`CBN` is a CID with chance variables only (paper Definition 2.1); MEG with respect to
target variables (Definition 4.4) picks some of its variables as hypothesised decisions.

Everything is validated when the diagram is built (names, parents, acyclicity, finite domains,
table shapes, probabilities summing to 1, finite utilities), with errors that name the variable,
the offending values and the fix. Tables are held as float64 numpy arrays.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from imitation_meg.cid._tables import CPD_SUM_TOL, as_domain, distribution_table, utility_table
from imitation_meg.type_aliases import ArrayLike

__all__ = [
    "CBN",
    "CID",
    "CPD_SUM_TOL",
    "Chance",
    "Decision",
    "Policy",
    "Utility",
]

#: A finite domain: a sequence of distinct hashable labels, or ``n`` for ``0 .. n-1``.
DomainLike: TypeAlias = Sequence[Hashable] | int
#: A table: an array, a callable of the parents' values (by name), or for a distribution a
#: mapping ``{value: probability}`` that does not depend on the parents.
TableLike: TypeAlias = ArrayLike | Callable[..., Any] | Mapping[Hashable, float]
#: Decision rules ``{decision name: table}`` (each like a chance variable's ``cpd``).
Policy: TypeAlias = Mapping[str, TableLike]


@dataclasses.dataclass(frozen=True)
class Chance:
    """A chance variable.

    Args:
        name: unique variable name.
        domain: finite domain (labels, or ``n`` for ``0 .. n-1``).
        parents: parent names; their order is the order of the table's leading axes.
        cpd: ``(|pa_1|, ..., |pa_k|, |V|)`` probabilities; or a callable taking the parents'
            values as keyword arguments and returning a value of the domain (deterministic), a
            mapping ``{value: probability}`` or a probability vector; or, without parents, a
            mapping ``{value: probability}`` / a vector.
    """

    name: str
    domain: DomainLike
    parents: Sequence[str] = ()
    cpd: TableLike | None = None


@dataclasses.dataclass(frozen=True)
class Decision:
    """A decision variable: a finite domain and the parents it observes (no table).

    Args:
        name: unique variable name.
        domain: finite domain (labels, or ``n`` for ``0 .. n-1``).
        parents: the variables the decision observes (its information set).
    """

    name: str
    domain: DomainLike
    parents: Sequence[str] = ()


@dataclasses.dataclass(frozen=True)
class Utility:
    """A utility variable: a real-valued function of its parents.

    Args:
        name: unique variable name.
        parents: parent names (order of the table's axes).
        table: ``(|pa_1|, ..., |pa_k|)`` real numbers, a callable of the parents' values (keyword
            arguments) returning a number, or a number for a constant utility.
    """

    name: str
    parents: Sequence[str] = ()
    table: TableLike = 0.0


Node: TypeAlias = Chance | Decision | Utility


def _node_specs(nodes: Iterable[Node]) -> dict[str, Node]:
    """The nodes by name, checked: specifications of the three kinds, unique non-empty names."""
    specs: dict[str, Node] = {}
    for node in nodes:
        if not isinstance(node, (Chance, Decision, Utility)):
            raise TypeError(
                f"nodes must be Chance, Decision or Utility specifications, got "
                f"{type(node).__name__} {node!r}."
            )
        if not isinstance(node.name, str) or not node.name:
            raise TypeError(f"variable names must be non-empty strings, got {node.name!r}.")
        if node.name in specs:
            raise ValueError(f"variable {node.name!r} is defined twice; names must be unique.")
        specs[node.name] = node
    if not specs:
        raise ValueError("a CID needs at least one variable.")
    return specs


def _parents_of(nm: str, node: Node, specs: dict[str, Node]) -> tuple[str, ...]:
    """``node``'s parents, checked: a sequence of known, distinct, non-utility variables."""
    if isinstance(node.parents, str):
        raise TypeError(
            f"parents of {nm!r} must be a sequence of names, got the string "
            f"{node.parents!r}; write parents=[{node.parents!r}]."
        )
    ps = tuple(node.parents)
    for p in ps:
        if p not in specs:
            raise ValueError(
                f"parent {p!r} of {nm!r} is not a variable of the diagram; known: {sorted(specs)}."
            )
        if isinstance(specs[p], Utility):
            raise ValueError(  # noqa: TRY004 - a structural error, not a wrong type
                f"utility {p!r} is a parent of {nm!r}; utility variables must have no "
                "children (add a chance variable that copies it if it is observed)."
            )
    if len(set(ps)) != len(ps):
        raise ValueError(f"parents of {nm!r} repeat a name: {ps}.")
    return ps


class CID:
    """A validated causal influence diagram with finite domains.

    Args:
        nodes: :class:`Chance`, :class:`Decision` and :class:`Utility` specifications, in any
            order (the diagram sorts them topologically, keeping the given order among
            independent nodes).
        name: a label for messages.

    Attributes:
        order: every variable name in a topological order.
        decisions: decision names in topological order.
        utilities: utility names in topological order.
        chance: chance-variable names in topological order.
        domains: ``{name: tuple of values}`` of the chance and decision variables.
        parents: ``{name: tuple of parent names}``.
        cpds: ``{chance name: (*parent sizes, |V|) table}``.
        utility_tables: ``{utility name: (*parent sizes,) table}``.

    Raises:
        TypeError: a node of unknown kind, a continuous domain, non-numeric tables.
        ValueError: duplicate or unknown names, a cycle, a utility with children or used as a
            decision's parent, table shapes, probabilities not summing to 1, NaN/inf values.

    Example:
        >>> from imitation_meg.cid import CID, Chance, Decision, Utility
        >>> cid = CID([
        ...     Chance("S", ["left", "right"], cpd=[0.5, 0.5]),
        ...     Decision("D", ["left", "right"], parents=["S"]),
        ...     Utility("U", ["S", "D"], table=lambda S, D: 1.0 if S == D else -1.0),
        ... ])
        >>> cid.decisions, cid.utilities
        (('D',), ('U',))
    """

    def __init__(self, nodes: Iterable[Node], *, name: str = "CID") -> None:
        self.name = name
        specs = _node_specs(nodes)
        parents = {nm: _parents_of(nm, node, specs) for nm, node in specs.items()}
        self.parents = parents
        self.order = _topological_order(list(specs), parents)
        self.kinds = {nm: type(specs[nm]).__name__.lower() for nm in self.order}
        self.decisions = self._of_kind("decision")
        self.utilities = self._of_kind("utility")
        self.chance = self._of_kind("chance")
        self.domains: dict[str, tuple[Hashable, ...]] = {
            nm: as_domain(nm, node.domain)
            for nm in self.order
            if not isinstance(node := specs[nm], Utility)
        }
        self.cpds, self.utility_tables = self._tables(specs)
        kids = _children(list(self.order), parents)
        self.children: dict[str, tuple[str, ...]] = {nm: tuple(kids[nm]) for nm in self.order}
        self._specs = specs

    def _of_kind(self, kind: str) -> tuple[str, ...]:
        """The nodes of one kind (``"decision"``, ``"utility"``, ``"chance"``), in order."""
        return tuple(n for n in self.order if self.kinds[n] == kind)

    def _tables(
        self, specs: Mapping[str, Node]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The checked tables: each chance variable's CPD ``(*parent sizes, |dom|)`` and each
        utility's table ``(*parent sizes)``."""
        cpds: dict[str, np.ndarray] = {}
        utility_tables: dict[str, np.ndarray] = {}
        for nm in self.order:
            node = specs[nm]
            if isinstance(node, Chance):
                if node.cpd is None:
                    raise ValueError(
                        f"chance variable {nm!r} has no cpd; pass cpd=... (or make it a "
                        "Decision if a policy chooses it)."
                    )
                cpds[nm] = distribution_table(node.cpd, nm, self.parents[nm], self.domains)
            elif isinstance(node, Utility):
                utility_tables[nm] = utility_table(node.table, nm, self.parents[nm], self.domains)
        return cpds, utility_tables

    # ------------------------------------------------------------------ structure
    @property
    def nodes(self) -> tuple[Node, ...]:
        """The node specifications, in topological order."""
        return tuple(self._specs[n] for n in self.order)

    @property
    def variables(self) -> tuple[str, ...]:
        """Chance and decision variables (the random variables), in topological order."""
        return tuple(n for n in self.order if self.kinds[n] != "utility")

    def card(self, name: str) -> int:
        """Domain size of a chance or decision variable."""
        return len(self.domains[name])

    def edges(self) -> list[tuple[str, str]]:
        """``(parent, child)`` pairs."""
        return [(p, c) for c in self.order for p in self.parents[c]]

    def descendants(self, names: str | Iterable[str]) -> set[str]:
        """Proper descendants of a variable or a set of variables."""
        return _reach(names, self.children)

    def ancestors(self, names: str | Iterable[str]) -> set[str]:
        """Proper ancestors of a variable or a set of variables."""
        return _reach(names, self.parents)

    def to_networkx(self) -> Any:
        """The graph as a ``networkx.DiGraph`` with a ``kind`` node attribute (needs networkx,
        the ``cid`` extra)."""
        try:
            import networkx as nx
        except ImportError as err:  # pragma: no cover - networkx is in the tested stack
            raise ImportError(
                "to_networkx needs networkx: pip install 'imitation-meg[cid]'."
            ) from err
        g = nx.DiGraph()
        for n in self.order:
            g.add_node(n, kind=self.kinds[n])
        g.add_edges_from(self.edges())
        return g

    # ------------------------------------------------------------------ variants
    def replace(self, *nodes: Node, remove: Iterable[str] = ()) -> CID:
        """A new diagram with the given nodes added or replacing those of the same name, and the
        ``remove`` names dropped (validated again)."""
        drop = set(remove)
        new = {n.name: n for n in nodes}
        kept = [self._specs[n] for n in self.order if n not in drop and n not in new]
        return type(self)(kept + list(new.values()), name=self.name)

    def with_utilities(self, *utilities: Utility) -> CID:
        """The same diagram with its utility variables replaced by ``utilities``."""
        base = [self._specs[n] for n in self.order if self.kinds[n] != "utility"]
        return CID(base + list(utilities), name=self.name)

    def transform_utility(self, scale: float, shift: float = 0.0) -> CID:
        """The diagram with utility function ``scale * U + shift`` (the shift added to the first
        utility variable), as in Proposition 3.1."""
        us = []
        for i, u in enumerate(self.utilities):
            tab = scale * self.utility_tables[u] + (shift if i == 0 else 0.0)
            us.append(Utility(u, self.parents[u], tab))
        return self.with_utilities(*us)

    # ------------------------------------------------------------------ policies
    def decision_rule(self, decision: str, spec: TableLike) -> np.ndarray:
        """Validate one decision rule: a ``(*parent sizes, |D|)`` table (renormalised)."""
        return distribution_table(
            spec, decision, self.parents[decision], self.domains, what="decision rule"
        )

    def validate_policy(self, policy: Policy) -> dict[str, np.ndarray]:
        """Check a policy (a decision rule for every decision) and return its tables.

        Args:
            policy: ``{decision name: (*parent sizes, |D|) probabilities or a callable}``.

        Raises:
            TypeError: not a mapping.
            ValueError: a decision without a rule, a rule for an unknown name, bad tables.
        """
        if not isinstance(policy, Mapping):
            raise TypeError(
                "policy must be a mapping {decision name: decision rule}, got "
                f"{type(policy).__name__}."
            )
        unknown = sorted(set(policy) - set(self.decisions))
        if unknown:
            raise ValueError(
                f"policy has rules for {unknown}, which are not decisions of {self.name}; "
                f"decisions: {list(self.decisions)}."
            )
        missing = [d for d in self.decisions if d not in policy]
        if missing:
            raise ValueError(
                f"policy lacks decision rules for {missing}; give one for every decision "
                "(uniform_policy() gives the uniform rules)."
            )
        return {d: self.decision_rule(d, policy[d]) for d in self.decisions}

    def uniform_policy(self) -> dict[str, np.ndarray]:
        """The uniformly random policy."""
        out = {}
        for d in self.decisions:
            shape = (*tuple(self.card(p) for p in self.parents[d]), self.card(d))
            out[d] = np.full(shape, 1.0 / self.card(d))
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, chance={list(self.chance)}, "
            f"decisions={list(self.decisions)}, utilities={list(self.utilities)})"
        )


class CBN(CID):
    """A causal Bayesian network: a diagram whose variables all have tables (chance only).

    Used for MEG with respect to target variables (Definition 4.4), where some variables are
    hypothesised to be decisions: see :func:`imitation_meg.cid.meg_target`.

    Raises:
        TypeError: a Decision or Utility node (a CBN has neither).
    """

    def __init__(self, nodes: Iterable[Node], *, name: str = "CBN") -> None:
        nodes = list(nodes)
        for n in nodes:
            if isinstance(n, (Decision, Utility)):
                raise TypeError(
                    f"a CBN has chance variables only, got {type(n).__name__} {n.name!r}; build "
                    "a CID for decisions and utilities."
                )
        super().__init__(nodes, name=name)

    def as_cid(
        self, decisions: Sequence[str], *utilities: Utility
    ) -> tuple[CID, dict[str, np.ndarray]]:
        """The CID in which ``decisions`` become decision variables (same parents), plus the
        policy that the CBN's tables give them, ``pi_D = P(D | Pa_D)``."""
        decisions = _names(decisions, "decisions")
        for d in decisions:
            if d not in self.domains:
                raise ValueError(
                    f"{d!r} is not a variable of {self.name}; known: {list(self.order)}."
                )
        nodes: list[Node] = []
        for n in self.order:
            if n in decisions:
                nodes.append(Decision(n, self.domains[n], self.parents[n]))
            else:
                nodes.append(self._specs[n])
        cid = CID(nodes + list(utilities), name=self.name)
        return cid, {d: self.cpds[d] for d in decisions}


def _names(x: str | Sequence[str], what: str) -> tuple[str, ...]:
    if isinstance(x, str):
        return (x,)
    out = tuple(x)
    if not out:
        raise ValueError(f"{what} must name at least one variable.")
    return out


def _topological_order(names: list[str], parents: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Kahn's algorithm, preferring the given order; raises on a cycle."""
    pos = {n: i for i, n in enumerate(names)}
    indeg = {n: len(parents[n]) for n in names}
    children = _children(names, parents)
    ready = sorted((n for n in names if indeg[n] == 0), key=pos.__getitem__)
    out = _kahn(ready, children, indeg, pos)
    if len(out) < len(names):
        cyc = _find_cycle([n for n in names if n not in out], parents)
        raise ValueError(
            f"the graph has a cycle {' -> '.join(cyc)}; a CID must be a directed acyclic graph "
            "(unroll feedback over time steps)."
        )
    return tuple(out)


def _reach(names: str | Iterable[str], step: Mapping[str, Sequence[str]]) -> set[str]:
    """The nodes reached from ``names`` by one or more steps along ``step`` (children for
    descendants, parents for ancestors)."""
    start = [names] if isinstance(names, str) else list(names)
    seen: set[str] = set()
    stack = [m for n in start for m in step[n]]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(step[n])
    return seen


def _kahn(
    ready: list[str], children: dict[str, list[str]], indeg: dict[str, int], pos: dict[str, int]
) -> list[str]:
    """Kahn's algorithm from the ``ready`` nodes, the earliest in ``pos`` first; the nodes it
    reaches, in order (``indeg`` is used up)."""
    out: list[str] = []
    while ready:
        n = ready.pop(0)
        out.append(n)
        for c in children[n]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
                ready.sort(key=pos.__getitem__)
    return out


def _children(names: list[str], parents: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Each node's children, in the order of ``names``."""
    children: dict[str, list[str]] = {n: [] for n in names}
    for n in names:
        for p in parents[n]:
            children[p].append(n)
    return children


def _find_cycle(rest: list[str], parents: Mapping[str, tuple[str, ...]]) -> list[str]:
    """One directed cycle among the nodes left by Kahn's algorithm (each has a parent there)."""
    left = set(rest)
    n = rest[0]
    path: list[str] = []
    seen: dict[str, int] = {}
    while n not in seen:
        seen[n] = len(path)
        path.append(n)
        n = next(p for p in parents[n] if p in left)
    cyc = [*path[seen[n] :], n]
    return cyc[::-1]


def log_card(cid: CID) -> float:
    """``sum_D log |dom(D)|``: the upper bound of MEG (Proposition 3.2)."""
    return float(sum(math.log(cid.card(d)) for d in cid.decisions))
