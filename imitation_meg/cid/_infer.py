"""Exact inference on small discrete diagrams: variable elimination with additive terms, and
d-separation.

:func:`contract` sums a product of factors down to a set of kept variables in the *expectation
semiring*: each factor carries a probability part ``p`` and an additive part ``e`` (with a
trailing axis of ``K`` components) standing for ``p * (1 + eps * x)``, so that products follow
``(p1, e1) (p2, e2) = (p1 p2, p1 e2 + e1 p2)``. Summing out every other variable gives
``P(keep)`` and ``E[X * 1(keep)]`` for ``X`` the sum of the additive terms, from which
conditional expectations ``E[X | keep] = e / p`` follow. Chance tables and decision rules are
``(p, 0)`` factors; utility tables are ``(1, u)`` factors.

Variables are integers; a factor's arrays have one axis per variable of its scope, in order.
"""

from __future__ import annotations

import string
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["Factor", "contract", "d_connected"]

_LETTERS = string.ascii_letters


class Factor(NamedTuple):
    """A semiring factor.

    Attributes:
        scope: variable ids, one per array axis.
        p: probability part over the scope, or None for all ones (a pure additive term).
        e: additive part ``scope + (K,)``, or None for zero.
    """

    scope: tuple[int, ...]
    p: np.ndarray | None
    e: np.ndarray | None


def _elimination_order(
    scopes: Sequence[tuple[int, ...]], keep: set[int], card: Mapping[int, int]
) -> list[int]:
    """Greedy order: repeatedly eliminate the variable whose merged factor is smallest."""
    live = [set(s) for s in scopes]
    todo = set().union(*live) - keep if live else set()
    order = []
    while todo:
        best, best_cost = -1, None
        for v in sorted(todo):
            union: set[int] = set()
            for s in live:
                if v in s:
                    union |= s
            cost = 1
            for u in union:
                cost *= card[u]
            if best_cost is None or cost < best_cost:
                best, best_cost = v, cost
        merged: set[int] = set()
        rest = []
        for s in live:
            if best in s:
                merged |= s
            else:
                rest.append(s)
        merged.discard(best)
        live = [*rest, merged]
        todo.discard(best)
        order.append(best)
    return order


def _combine(
    factors: list[Factor], out: tuple[int, ...], K: int, card: Mapping[int, int]
) -> Factor:
    """Product of factors summed down to ``out`` (one einsum per non-zero additive part).

    A variable that only additive factors carry is summed with weight 1 (the callers give every
    random variable its own probability table, so this only broadcasts along kept axes).
    """
    letters: dict[int, str] = {}
    for f in factors:
        for v in f.scope:
            if v not in letters:
                letters[v] = _LETTERS[len(letters)]
    if len(letters) >= len(_LETTERS):  # pragma: no cover - diagrams here are small
        raise ValueError("a factor of more than 51 variables arose; the diagram is too large.")
    z = _LETTERS[-1]
    sub_out = "".join(letters[v] for v in out)

    def ones_for(subs: list[str]) -> tuple[list[np.ndarray], list[str]]:
        have = set("".join(subs))
        miss = [v for v in out if letters[v] not in have]
        if not miss:
            return [], []
        return [np.ones([card[v] for v in miss])], ["".join(letters[v] for v in miss)]

    p_ops = [f.p for f in factors if f.p is not None]
    p_subs = ["".join(letters[v] for v in f.scope) for f in factors if f.p is not None]
    p = None
    if p_ops:
        xo, xs = ones_for(p_subs)
        ops, subs = p_ops + xo, p_subs + xs
        p = np.einsum(",".join(subs) + "->" + sub_out, *ops, optimize=len(ops) > 2)
    e = None
    for j, f in enumerate(factors):
        if f.e is None:
            continue
        ops, subs = [], []
        for i, g in enumerate(factors):
            s = "".join(letters[v] for v in g.scope)
            if i == j:
                ops.append(f.e)
                subs.append(s + z)
            elif g.p is not None:
                ops.append(g.p)
                subs.append(s)
        xo, xs = ones_for(subs)
        ops, subs = ops + xo, subs + xs
        term = np.einsum(",".join(subs) + "->" + sub_out + z, *ops, optimize=len(ops) > 2)
        e = term if e is None else e + term
    return Factor(out, p, e)


def contract(
    factors: Sequence[Factor],
    keep: Sequence[int],
    card: Mapping[int, int],
    *,
    n_add: int,
    order: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sum a product of semiring factors down to ``keep``.

    Args:
        factors: the factors.
        keep: variables of the result, in the result's axis order.
        card: domain size of every variable.
        n_add: ``K``, the number of additive components.
        order: an elimination order (default: greedy on the scopes).

    Returns:
        ``(p, e)``: ``p`` over ``keep`` and ``e`` over ``keep + (K,)`` (zeros if no factor has an
        additive part).
    """
    keep_t = tuple(keep)
    live = list(factors)
    if order is None:
        order = _elimination_order([f.scope for f in live], set(keep_t), card)
    for v in order:
        hit = [f for f in live if v in f.scope]
        if not hit:
            continue
        live = [f for f in live if v not in f.scope]
        union: list[int] = []
        for f in hit:
            for u in f.scope:
                if u != v and u not in union:
                    union.append(u)
        live.append(_combine(hit, tuple(union), n_add, card))
    res = _combine(live, keep_t, n_add, card) if live else None
    shape = tuple(card[v] for v in keep_t)
    if res is None:
        return np.ones(shape), np.zeros((*shape, n_add))
    p = res.p if res.p is not None else np.ones(shape)
    e = res.e if res.e is not None else np.zeros((*shape, n_add))
    return np.broadcast_to(p, shape), np.broadcast_to(e, (*shape, n_add))


def d_connected(
    parents: Mapping[Hashable, Sequence[Hashable]],
    children: Mapping[Hashable, Sequence[Hashable]],
    x: Iterable[Hashable],
    y: Iterable[Hashable],
    z: Iterable[Hashable],
) -> bool:
    """Whether some node of ``x`` is d-connected to some node of ``y`` given ``z``.

    The reachability ("Bayes ball") algorithm of Koller and Friedman (Algorithm 3.1): a trail
    passes a non-collider outside ``z`` and a collider that is in ``z`` or has a descendant in it.
    """
    zs, ys = set(z), set(y)
    anc = set(zs)
    stack = list(zs)
    while stack:
        n = stack.pop()
        for p in parents[n]:
            if p not in anc:
                anc.add(p)
                stack.append(p)
    todo = [(n, True) for n in x]  # (node, arrived from a child / going up)
    seen: set[tuple[Hashable, bool]] = set()
    while todo:
        n, up = todo.pop()
        if (n, up) in seen:
            continue
        seen.add((n, up))
        if n not in zs and n in ys:
            return True
        if up:
            if n not in zs:
                todo.extend((p, True) for p in parents[n])
                todo.extend((c, False) for c in children[n])
        else:
            if n not in zs:
                todo.extend((c, False) for c in children[n])
            if n in anc:
                todo.extend((p, True) for p in parents[n])
    return False
