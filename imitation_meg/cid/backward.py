"""Soft and hard backward induction over the decisions of a CID with sufficient recall.

**Supported diagrams.** Decisions are solved one at a time, last first. For rationality
``beta`` the maximum entropy policy (paper Definition 3.1) maximises ``H(pi) + beta E_pi[U]``
(causal entropy ``H = -sum_D E log pi_D(D | Pa_D)``); give every decision ``D_k`` an extra
"entropy utility" ``-log pi_k(D_k | Pa_D_k)`` with parents ``Fam(D_k) = Pa_D_k u {D_k}``. Decision
``D_i`` *relies on* ``D_j`` when a new parent of ``D_j`` (its decision rule) is d-connected, given
``Fam(D_i)``, to a utility or entropy utility that descends from ``D_i`` (s-reachability of Koller
and Milch with the entropy utilities added). The diagram is supported when its decisions can be
ordered consistently with the graph so that no decision relies on an earlier one (sufficient
recall; every CID with perfect recall qualifies, and so do MDPs, whose states screen off the past).
Otherwise the maximum entropy problem couples the decision rules (the relevance graph has a cycle)
and :class:`InsufficientRecallError` is raised.

**Soft backward induction.** With ``pi_j`` fixed for the later decisions,
``q_i(d, pa) = E[beta U_desc + sum_{D_k in Desc(D_i)} -log pi_k | d, pa]`` (independent of the
earlier rules by sufficient recall) and ``pi_i = softmax_d q_i``. Each ``pi_i`` is a best reply to
the later rules whatever the earlier ones are, so the induction maximises the Lagrangian; the
result is the unique (on the reachable set) maximum entropy policy with its expected utility.

**Derivatives.** For every behaviour ``pi`` the cross-entropy telescopes:
``E_pi[sum_i log pi_beta,i] = beta E_pi[U] - G(beta)`` with ``G`` the Lagrangian's maximum, and
``dq_i / dbeta = W_i(d, pa) = E_{pi_beta}[U_desc | d, pa]``. Hence, exactly,

    dL/dbeta   = E_pi[U] - E_{pi_beta}[U],
    d2L/dbeta2 = -sum_i E_{pi_beta}[ Var_{pi_beta,i(. | Pa_i)} W_i(., Pa_i) ]  (<= 0),

the CID form of the MDP identities.

**Limits.** As ``beta -> +inf``, ``q_i = beta W*_i + e_i + o(1)``, where ``W*_i`` is the hard
expected utility (later decisions playing their limit rules) and ``e_i(d, pa)`` the expected
causal entropy of the later limit rules after ``d``. The limit rule of ``D_i`` is the softmax of
``e_i`` over the tied best decisions (:func:`limit_log_rule`), not an even split: the
maximum-entropy policy of the best attainable utility (Definition 3.1), as the MDP solvers
compute it. ``beta -> -inf`` is the same over the tied worst decisions.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import torch as th

from imitation_meg.cid._infer import Factor, _elimination_order, contract, d_connected
from imitation_meg.cid.model import CID
from imitation_meg.core.kernels.limits import TIE_TOL, limit_step

__all__ = ["TIE_TOL", "Engine", "InsufficientRecallError", "decision_order"]


class InsufficientRecallError(ValueError):
    """The decisions cannot be solved one at a time by backward induction."""


def _aug_graph(
    cid: CID, utility_scopes: Sequence[tuple[str, ...]]
) -> tuple[dict[Hashable, list[Hashable]], dict[Hashable, list[Hashable]]]:
    """Parents and children of the random variables plus virtual nodes: a decision-rule parent
    ``("pi", D)`` of each decision, an entropy utility ``("ent", D)`` on each ``Fam(D)`` and the
    utility terms ``("u", j)``."""
    par: dict[Hashable, list[Hashable]] = {v: list(cid.parents[v]) for v in cid.variables}
    for d in cid.decisions:
        par[d] = par[d] + [("pi", d)]
        par[("pi", d)] = []
        par[("ent", d)] = [*list(cid.parents[d]), d]
    for j, sc in enumerate(utility_scopes):
        par[("u", j)] = list(sc)
    ch: dict[Hashable, list[Hashable]] = {n: [] for n in par}
    for n, ps in par.items():
        for p in ps:
            ch[p].append(n)
    return par, ch


def decision_order(
    cid: CID, utility_scopes: Sequence[tuple[str, ...]] | None = None
) -> tuple[str, ...]:
    """An order of the decisions in which backward induction is exact (see the module doc).

    Args:
        cid: the diagram.
        utility_scopes: the parent sets of the utility terms (default: the CID's utilities).

    Raises:
        InsufficientRecallError: when no such order exists, naming a decision that relies on an
            earlier one and the fix.
    """
    if utility_scopes is None:
        utility_scopes = [cid.parents[u] for u in cid.utilities]
    relies = _reliances(cid, utility_scopes)
    before = _before(cid, relies)
    order: list[str] = []
    left = list(cid.decisions)
    while left:
        free = [d for d in left if not (before[d] - set(order))]
        if not free:
            raise _recall_error(cid, left, relies)
        order.append(free[0])
        left.remove(free[0])
    return tuple(order)


def _reliances(cid: CID, utility_scopes: Sequence[tuple[str, ...]]) -> dict[str, set[str]]:
    """For each decision ``d``, the decisions whose rules ``d`` relies on: those d-connected
    (through their policy nodes) to the utility terms and entropy terms below ``d``, given
    ``d``'s family."""
    decs = list(cid.decisions)
    par, ch = _aug_graph(cid, utility_scopes)
    desc = {d: cid.descendants(d) for d in decs}
    relies: dict[str, set[str]] = {}
    for d in decs:
        ys = _terms_below(d, desc[d], utility_scopes, decs)
        fam = [*list(cid.parents[d]), d]
        relies[d] = set()
        if not ys:
            continue
        for j in decs:
            if j != d and d_connected(par, ch, [("pi", j)], ys, fam):
                relies[d].add(j)
    return relies


def _terms_below(
    d: str, desc: set[str], utility_scopes: Sequence[tuple[str, ...]], decs: list[str]
) -> list[Hashable]:
    """The nodes of the augmented graph below decision ``d`` (``desc``: its descendants): the
    utility terms with a parent in ``desc | {d}`` and the entropy terms of the decisions in
    ``desc``."""
    below = desc | {d}
    ys: list[Hashable] = [("u", j) for j, sc in enumerate(utility_scopes) if below & set(sc)]
    return ys + [("ent", k) for k in decs if k in desc]


def _before(cid: CID, relies: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges "a before b" between decisions: graph ancestry, and "j after d" when ``d`` relies
    on ``j``."""
    before: dict[str, set[str]] = {d: set() for d in cid.decisions}
    for d in cid.decisions:
        for a in cid.ancestors(d):
            if a in before:
                before[d].add(a)  # a comes before d
        for j in relies[d]:
            before[j].add(d)  # d comes before j
    return before


def _recall_error(
    cid: CID, left: list[str], relies: dict[str, set[str]]
) -> InsufficientRecallError:
    """The refusal when no decision of ``left`` can come next: the earliest decision that relies
    on an earlier one, and the fix."""
    pos = {n: i for i, n in enumerate(cid.order)}
    pairs = sorted(
        (pos[j], pos[d], d, j) for d in left for j in relies[d] if j in left and pos[j] < pos[d]
    )
    _, _, d, j = pairs[0] if pairs else (0, 0, left[-1], left[0])
    return InsufficientRecallError(
        f"{cid.name} does not have sufficient recall: decision {d!r} relies on the "
        f"decision rule of the earlier decision {j!r} (that rule changes {d!r}'s "
        f"expected utility given what {d!r} observes, {list(cid.parents[d])}), so "
        "backward induction cannot solve it (the maximum entropy problem couples the "
        "decision rules). Supported: diagrams whose decisions can be ordered so that none "
        "relies on an earlier one, e.g. perfect recall or MDP-like structures whose "
        f"observations screen off the past. Fix: let {d!r} observe {j!r} and what "
        f"{j!r} observed ({list(cid.parents[j])})."
    )


def limit_log_rule(W: np.ndarray, entropy: np.ndarray, sign: float) -> np.ndarray:
    """Log decision rule of the ``beta = sign * inf`` limit: over the tied best (``sign=+1``)
    or worst (``-1``) decisions of the hard expected utilities ``W (..., |D|)``, the softmax of
    ``entropy``, the causal entropy of the later limit rules after each decision; ``-inf`` off
    the ties. The step :func:`imitation_meg.core.soft_vi.limit_step` (ties as the MDP solvers'),
    on numpy arrays."""
    lp, _, _ = limit_step(th.from_numpy(sign * W), th.from_numpy(entropy), -1, TIE_TOL)
    return lp.numpy()


def _log_softmax(q: np.ndarray) -> np.ndarray:
    m = q.max(-1, keepdims=True)
    z = q - m
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


class Engine:
    """The compiled diagram: variable ids, factor scopes, the decision order and cached
    elimination orders, for one set of utility terms.

    Args:
        cid: the diagram.
        utility_scopes: parent sets of the utility terms (default: the CID's utilities).

    Raises:
        InsufficientRecallError: see :func:`decision_order`.
    """

    def __init__(self, cid: CID, utility_scopes: Sequence[tuple[str, ...]] | None = None) -> None:
        self.cid = cid
        if utility_scopes is None:
            utility_scopes = [cid.parents[u] for u in cid.utilities]
        self.utility_scopes = [tuple(s) for s in utility_scopes]
        self.order = decision_order(cid, self.utility_scopes)
        self.ids = {v: i for i, v in enumerate(cid.variables)}
        self.card = {i: cid.card(v) for v, i in self.ids.items()}
        ids = self.ids
        self.fam, self.uscope = self._scopes()
        self.chance_factors = self._chance_factors()
        self._chance_of = {ids[c]: f for c, f in zip(cid.chance, self.chance_factors, strict=True)}
        self.desc_utils, self.desc_decs = self._below_decisions()
        self.influenced = any(self.desc_utils[d] for d in cid.decisions)
        self._orders: dict[Hashable, list[int]] = {}
        self._rel_cache: dict[frozenset[str], set[str]] = {}

    def _scopes(self) -> tuple[dict[str, tuple[int, ...]], list[tuple[int, ...]]]:
        """Per decision its family ``(parents..., decision)``, and per utility term its
        scope, as variable ids."""
        cid, ids = self.cid, self.ids
        fam = {d: (*tuple(ids[p] for p in cid.parents[d]), ids[d]) for d in cid.decisions}
        return fam, [tuple(ids[p] for p in sc) for sc in self.utility_scopes]

    def _chance_factors(self) -> list[Factor]:
        """One factor per chance variable: its CPD over ``(parents..., variable)``."""
        cid, ids = self.cid, self.ids
        return [
            Factor((*tuple(ids[p] for p in cid.parents[c]), ids[c]), cid.cpds[c], None)
            for c in cid.chance
        ]

    def _below_decisions(self) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
        """Per decision, the utility terms (indices) and the other decisions below it."""
        cid = self.cid
        desc = {d: cid.descendants(d) | {d} for d in cid.decisions}
        desc_utils = {
            d: [j for j, sc in enumerate(self.utility_scopes) if desc[d] & set(sc)]
            for d in cid.decisions
        }
        desc_decs = {
            d: [k for k in cid.decisions if k != d and k in desc[d]] for d in cid.decisions
        }
        return desc_utils, desc_decs

    # ------------------------------------------------------------------ contraction helpers
    def _relevant(self, roots: set[str]) -> set[str]:
        key = frozenset(roots)
        rel = self._rel_cache.get(key)
        if rel is None:
            rel = roots | self.cid.ancestors(roots)
            self._rel_cache[key] = rel
        return rel

    def _run(
        self,
        key: Hashable,
        factors: list[Factor],
        keep: tuple[int, ...],
        K: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        order = self._orders.get(key)
        if order is None:
            order = _elimination_order([f.scope for f in factors], set(keep), self.card)
            self._orders[key] = order
        return contract(factors, keep, self.card, n_add=K, order=order)

    def marginal(
        self,
        rules: Mapping[str, np.ndarray],
        keep: tuple[int, ...],
        additive: Sequence[Factor] = (),
        K: int = 0,
        key: Hashable = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``P(keep)`` and ``E[X 1(keep)]`` under the policy ``rules`` (full tables), for the
        additive terms ``additive`` (``K`` components); only the variables that matter are
        summed."""
        cid = self.cid
        names = {cid.variables[i] for i in keep}
        for f in additive:
            names |= {cid.variables[i] for i in f.scope}
        rel = self._relevant(names)
        factors = [self._chance_of[self.ids[c]] for c in cid.chance if c in rel]
        factors += [Factor(self.fam[d], rules[d], None) for d in cid.decisions if d in rel]
        factors += list(additive)
        return self._run(("m", key, keep), factors, keep, K)

    def utility_factors(self, tables: Sequence[np.ndarray]) -> list[Factor]:
        """Additive factors of the utility terms, each table ``(*scope sizes, K)``."""
        return [Factor(sc, None, t) for sc, t in zip(self.uscope, tables, strict=True)]

    # ------------------------------------------------------------------ backward induction
    def backward(
        self,
        tables: Sequence[np.ndarray],
        *,
        soft: bool,
        sign: float = 1.0,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """One backward induction.

        Args:
            tables: per utility term a ``(*scope sizes, K)`` array; component 0 drives the
                decisions (``beta * U`` for the soft induction, ``U`` for the hard one), the
                others are carried as conditional expectations (e.g. ``U`` for ``W``).
            soft: soft-max decisions with the entropy terms (True) or tied hard max/min (False).
            sign: +1 for the best decisions, -1 for the worst (hard induction only).

        Returns:
            ``(log_rules, rules, cond)``: per decision the ``(*Pa sizes, |D|)`` log rule and rule,
            and ``cond[d] (*Pa sizes, |D|, K)`` the conditional expectations
            ``E[term_k (descendant terms) | d, pa]`` (component 0 includes the entropy terms).
            Unreachable parent configurations get the uniform rule and zeros.
        """
        cid = self.cid
        tables, K, ent_k = _with_entropy_component(tables, soft=soft)
        log_rules: dict[str, np.ndarray] = {}
        rules: dict[str, np.ndarray] = {}
        cond: dict[str, np.ndarray] = {}
        solved: set[str] = set()
        for d in reversed(self.order):
            du = self.desc_utils[d]
            dd = [k for k in self.desc_decs[d] if k in solved]
            additive = [Factor(self.uscope[j], None, tables[j]) for j in du]
            rel = self._relevant(self._family_names(d, additive, dd))
            factors = [self._chance_of[self.ids[c]] for c in cid.chance if c in rel]
            factors += self._other_rules(d, rel, solved, dd, (rules, log_rules), K, ent_k)
            factors.append(Factor((self.ids[d],), np.ones(self.card[self.ids[d]]), None))
            factors += additive
            p, e = self._run(("b", d, soft, tuple(du), tuple(dd)), factors, self.fam[d], K)
            c = _conditional(p, e)
            lr = _log_softmax(c[..., 0]) if soft else limit_log_rule(c[..., 0], c[..., ent_k], sign)
            log_rules[d] = lr
            rules[d] = np.exp(lr)
            cond[d] = c if soft else c[..., :ent_k]
            solved.add(d)
        return log_rules, rules, cond

    def _family_names(self, d: str, additive: Sequence[Factor], dd: Sequence[str]) -> set[str]:
        """The variables the conditional expectations at ``d`` involve: its family, the scopes
        of the ``additive`` terms, and the families of the solved decisions ``dd`` below it."""
        cid = self.cid
        names = {cid.variables[i] for i in self.fam[d]}
        for f in additive:
            names |= {cid.variables[i] for i in f.scope}
        for k in dd:
            names |= set(cid.parents[k]) | {k}
        return names

    def _other_rules(
        self,
        d: str,
        rel: set[str],
        solved: set[str],
        dd: Sequence[str],
        rules_so_far: tuple[dict[str, np.ndarray], dict[str, np.ndarray]],
        K: int,
        ent_k: int,
    ) -> list[Factor]:
        """The factors of the relevant decisions other than ``d``: the solved ones with their
        rules (and, below ``d``, their entropy terms in component ``ent_k``), the others with
        the uniform rule over their own values."""
        rules, log_rules = rules_so_far
        factors = []
        for k in self.cid.decisions:
            if k == d or k not in rel:
                continue
            if k in solved:
                e = None
                if k in dd:
                    e = np.zeros((*rules[k].shape, K))
                    e[..., ent_k] = rule_entropy_term(rules[k], log_rules[k])
                factors.append(Factor(self.fam[k], rules[k], e))
            else:
                # Not yet solved (earlier in the order): any full-support rule gives the
                # same conditional expectations; the uniform one over D_k alone.
                n = self.card[self.ids[k]]
                factors.append(Factor((self.ids[k],), np.full(n, 1.0 / n), None))
        return factors


def _with_entropy_component(
    tables: Sequence[np.ndarray], *, soft: bool
) -> tuple[list[np.ndarray], int, int]:
    """``(tables, K, ent_k)``: the utility tables ``(*scope sizes, K)`` of a backward induction
    and the component that carries the entropy terms. The hard induction gets one more
    component, the causal entropy of the later limit rules, which weights the tied decisions in
    the limit (see :func:`limit_log_rule`)."""
    if not soft:
        tables = [np.concatenate([t, np.zeros_like(t[..., :1])], -1) for t in tables]
    K = tables[0].shape[-1] if tables else 1
    return list(tables), K, 0 if soft else K - 1


def _conditional(p: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``E[X | config] = e / p`` ``(*config, K)`` where ``p (*config) > 0``; zeros elsewhere."""
    ok = p > 0
    return np.where(ok[..., None], e / np.where(ok, p, 1.0)[..., None], 0.0)


def rule_entropy_term(rule: np.ndarray, log_rule: np.ndarray) -> np.ndarray:
    """``-pi log pi`` with ``0 log 0 = 0``."""
    return -rule * np.where(rule > 0, log_rule, 0.0)
