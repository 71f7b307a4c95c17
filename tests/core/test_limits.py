"""MEG at ties: the members at beta = +-inf are the limits of the soft-optimal policies.

Paper Definition 3.1 takes, for each attainable expected utility, the policy of highest causal
entropy attaining it; for the best (worst) attainable utility that is the limit of the soft
policies as beta -> +inf (-inf), which weights tied actions by the causal entropy after them. So
MEG is the supremum of ``L(beta) + H log|A|`` over finite betas. The brute force here is
independent of the package: its own soft value iteration in extended precision (numpy
``longdouble``) on dense transitions, a grid of betas up to ``|beta| * range(U) = 1e6`` and a
bounded scalar search around the best grid point.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.cid import CID, Decision, Utility, maxent_policy, meg_cid

from .helpers import brute_sup

LD = np.longdouble


def _brute_L(T: np.ndarray, r: np.ndarray, H: int, p0: np.ndarray, pi: np.ndarray, beta: float):
    """``E_pi[sum_t log pi_beta,t]`` by a plain soft Bellman loop in extended precision."""
    T, r, p0, pi = (np.asarray(x, dtype=LD) for x in (T, r, p0, pi))
    b = LD(beta)
    V = np.zeros(r.shape[0], dtype=LD)
    log_pis = []
    for _ in range(H):
        Q = b * r + T @ V  # (S, A)
        m = Q.max(-1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(Q - m).sum(-1))
        log_pis.append(Q - lse[:, None])
        V = lse
    log_pis.reverse()
    d, L = p0, LD(0)
    for t in range(H):
        pt = pi[t] if pi.ndim == 3 else pi
        w = d[:, None] * pt
        L += np.where(w > 0, w * log_pis[t], LD(0)).sum()
        d = np.einsum("sa,sax->x", w, T)
    return float(L)


def _two_step_mdp():
    """State 0: a0 -> state 1, a1 -> state 2 (both absorbing), H = 2; ``U[1, :] = 1``,
    ``U[2, 0] = 1``, else 0. Both first moves are optimal; state 1 has two optimal actions and
    state 2 one."""
    T = np.zeros((3, 2, 3))
    T[0, 0, 1] = T[0, 1, 2] = 1.0
    T[1, :, 1] = T[2, :, 2] = 1.0
    U = np.zeros((3, 2))
    U[1, :] = 1.0
    U[2, 0] = 1.0
    return im.TabularMDP(T, U, 2), T, U


def test_tied_first_moves_are_weighted_by_what_follows_mdp():
    # The policy takes a1 in state 0, then a0. The limit of the soft policies plays (2/3, 1/3)
    # at state 0 (two tied continuations after a0, one after a1), so the supremum is
    # 2 log 2 + log(1/3) = log(4/3); an even split of the ties would give log 2.
    mdp, T, U = _two_step_mdp()
    pi = np.zeros((3, 2))
    pi[0, 1] = pi[1, 0] = pi[2, 0] = 1.0
    res = im.meg(pi, mdp)
    assert res.meg == pytest.approx(math.log(4 / 3), rel=1e-14)
    assert res.beta == math.inf and res.at_boundary and res.converged
    # By hand: pi_beta(a1 | 0) = (e^b + 1) / (3 e^b + 1) and pi_beta(a0 | 2) = e^b / (e^b + 1),
    # so L(b) = b - log(3 e^b + 1), rising to -log 3 (0.2436 at b = 2, 0.28767 at b = 10).
    for beta in (2.0, 10.0):
        value = _brute_L(T, U, 2, np.eye(3)[0], pi, beta)
        assert value == pytest.approx(beta - math.log(3 * math.exp(beta) + 1), rel=1e-13)
        assert value + 2 * math.log(2) < res.meg
    limit = policies.optimal(mdp, tie_break="max_entropy")
    np.testing.assert_allclose(limit[0, 0].numpy(), [2 / 3, 1 / 3], rtol=1e-14)


def test_tied_first_decisions_are_weighted_by_what_follows_cid():
    # D1 = 0 leaves one optimal D2 (utility 1), D1 = 1 two: the maximum-entropy optimal rule
    # plays D1 = (1/3, 2/3) (Definition 3.2), so the deterministic rule (D1 = 0, D2 = 0) has
    # MEG = log 2 + log 3 + log(1/3) = log 2, not log 3.
    cid = CID(
        [
            Decision("D1", 2),
            Decision("D2", 3, parents=["D1"]),
            Utility("U", ["D1", "D2"], table=[[1, -1, -1], [1, -1, 1]]),
        ]
    )
    res = meg_cid(cid, {"D1": [1, 0], "D2": [[1, 0, 0], [1, 0, 0]]})
    assert res.meg == pytest.approx(math.log(2), rel=1e-14)
    assert res.beta == math.inf and res.converged
    rules = maxent_policy(cid, math.inf)
    np.testing.assert_allclose(rules["D1"], [1 / 3, 2 / 3], rtol=1e-14)
    np.testing.assert_allclose(rules["D2"], [[1, 0, 0], [0.5, 0, 0.5]], rtol=1e-14)


# ----------------------------------------------------------------------------- properties
def _tie_rich_mdp(seed: int):
    """A small MDP with 0/1 utilities and deterministic transitions (hard values tie often), and
    a deterministic or sparse stochastic behaviour."""
    rng = np.random.default_rng(seed)
    S, A, H = int(rng.integers(2, 6)), int(rng.integers(2, 4)), int(rng.integers(1, 5))
    T = np.zeros((S, A, S))
    T[np.arange(S)[:, None], np.arange(A)[None, :], rng.integers(0, S, (S, A))] = 1.0
    U = rng.integers(0, 2, (S, A)).astype(float)
    if np.ptp(U) == 0:
        U[0, 0] = 1.0 - U[0, 0]
    if rng.random() < 0.5:  # deterministic behaviour
        pi = np.eye(A)[rng.integers(0, A, (H, S))]
    else:  # stochastic with zeros
        pi = rng.dirichlet(np.ones(A), (H, S)) * (rng.random((H, S, A)) < 0.6)
        pi[pi.sum(-1) == 0, 0] = 1.0
        pi /= pi.sum(-1, keepdims=True)
    p0 = np.eye(S)[0] if rng.random() < 0.5 else rng.dirichlet(np.ones(S))
    return im.TabularMDP(T, U, H, p0), T, U, pi, p0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000))
def test_property_mdp_meg_is_the_supremum_over_finite_beta(seed):
    mdp, T, U, pi, p0 = _tie_rich_mdp(seed)
    H, A = mdp.horizon, mdp.n_actions
    bound = H * math.log(A)
    ref = brute_sup(lambda b: _brute_L(T, U, H, p0, pi, b), float(np.ptp(U)), bound)
    res = im.meg(pi, mdp)
    assert res.converged
    assert res.meg == pytest.approx(min(max(ref, 0.0), bound), abs=1e-9)
    # A one-member linear class is the known utility.
    one = im.meg_unknown(pi, mdp, features=U[:, :, None])
    assert one.meg == pytest.approx(res.meg, abs=1e-9)


def _tie_rich_cid(seed: int):
    """Two or three decisions with perfect recall, a deterministic chance start and integer
    utilities in {-1, 0, 1} (ties everywhere), and a deterministic or sparse behaviour."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 4))
    cards = [int(rng.integers(2, 4)) for _ in range(n)]
    nodes: list = []
    for i, c in enumerate(cards):
        nodes.append(Decision(f"D{i}", c, parents=[f"D{j}" for j in range(i)]))
    scope = [f"D{i}" for i in range(n)]
    table = rng.integers(-1, 2, cards).astype(float)
    if np.ptp(table) == 0:
        table.flat[0] += 1.0
    nodes.append(Utility("U", scope, table))
    cid = CID(nodes, name=f"tie-rich CID {seed}")
    policy = {}
    for i, c in enumerate(cards):
        shape = (*cards[:i], c)
        if rng.random() < 0.5:
            rule = np.eye(c)[rng.integers(0, c, shape[:-1])]
        else:
            rule = rng.dirichlet(np.ones(c), shape[:-1]) * (rng.random(shape) < 0.6)
            rule[rule.sum(-1) == 0, 0] = 1.0
            rule /= rule.sum(-1, keepdims=True)
        policy[f"D{i}"] = rule
    return cid, policy, np.asarray(nodes[-1].table, dtype=float), cards


def _brute_cid_L(U: np.ndarray, cards: list[int], policy: dict, beta: float) -> float:
    """``E_pi[sum_i log pi_beta,i]`` for a chain of decisions that see all earlier ones, by soft
    backward induction over the full joint in extended precision."""
    n = len(cards)
    V = LD(beta) * U.astype(LD)  # the soft value of the remaining decisions, over D_0..D_{n-1}
    log_rules = []
    for _ in range(n):
        m = V.max(-1, keepdims=True)
        lse = m[..., 0] + np.log(np.exp(V - m).sum(-1))
        log_rules.append(V - lse[..., None])
        V = lse
    log_rules.reverse()
    L, P = LD(0), np.ones((), dtype=LD)
    for i in range(n):
        rule = np.asarray(policy[f"D{i}"], dtype=LD)
        w = P[..., None] * rule
        L += np.where(w > 0, w * log_rules[i], LD(0)).sum()
        P = w
    return float(L)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000))
def test_property_cid_meg_is_the_supremum_over_finite_beta(seed):
    cid, policy, U, cards = _tie_rich_cid(seed)
    bound = sum(math.log(c) for c in cards)
    ref = brute_sup(lambda b: _brute_cid_L(U, cards, policy, b), float(np.ptp(U)), bound)
    res = meg_cid(cid, policy)
    assert res.converged
    assert res.meg == pytest.approx(min(max(ref, 0.0), bound), abs=1e-9)
