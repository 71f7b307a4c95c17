"""MEG in CIDs against the paper: the mouse's numbers, Propositions 3.1-3.3, Theorem 4.1, the
maximum entropy property of soft backward induction and the exact derivatives.

The independent checker here enumerates the full joint distribution (one broadcast product of
every table, no variable elimination) and evaluates entropies, expected utilities and
log-likelihoods by summation over it.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from imitation_meg.cid import (
    CBN,
    CID,
    Chance,
    CIDObjective,
    Decision,
    InsufficientRecallError,
    Utility,
    examples,
    maxent_policy,
    meg_cid,
    meg_cid_target,
    meg_cid_unknown,
)

LN2 = math.log(2.0)


# --------------------------------------------------------------------------- brute force
class Brute:
    """Full joint tables of a small CID (axes: ``cid.variables`` in order)."""

    def __init__(self, cid: CID) -> None:
        self.cid = cid
        self.vars = list(cid.variables)
        self.ax = {v: i for i, v in enumerate(self.vars)}
        self.shape = tuple(cid.card(v) for v in self.vars)

    def full(self, scope: tuple[str, ...], table: np.ndarray) -> np.ndarray:
        """Broadcast a table over ``scope`` to the full joint shape."""
        order = sorted(range(len(scope)), key=lambda i: self.ax[scope[i]])
        t = np.transpose(table, order)
        shape = [1] * len(self.vars)
        for i in order:
            shape[self.ax[scope[i]]] = self.shape[self.ax[scope[i]]]
        return np.broadcast_to(t.reshape(shape), self.shape)

    def fam(self, v: str) -> tuple[str, ...]:
        return (*tuple(self.cid.parents[v]), v)

    def joint(self, rules: dict[str, np.ndarray]) -> np.ndarray:
        P = np.ones(self.shape)
        for c in self.cid.chance:
            P = P * self.full(self.fam(c), self.cid.cpds[c])
        for d in self.cid.decisions:
            if d in rules:
                P = P * self.full(self.fam(d), rules[d])
        return P

    def utility(self) -> np.ndarray:
        U = np.zeros(self.shape)
        for u in self.cid.utilities:
            U = U + self.full(tuple(self.cid.parents[u]), self.cid.utility_tables[u])
        return U

    def eu(self, rules: dict[str, np.ndarray]) -> float:
        return float((self.joint(rules) * self.utility()).sum())

    def log_lik(self, rules: dict[str, np.ndarray], model: dict[str, np.ndarray]) -> float:
        P = self.joint(rules)
        total = 0.0
        for d in self.cid.decisions:
            lm = self.full(self.fam(d), np.log(np.maximum(model[d], 1e-300)))
            total += float((P * lm).sum())
        return total

    def entropy(self, rules: dict[str, np.ndarray]) -> float:
        return -self.log_lik(rules, rules)

    def marginal(self, P: np.ndarray, keep: tuple[str, ...]) -> np.ndarray:
        axes = tuple(i for i, v in enumerate(self.vars) if v not in keep)
        m = P.sum(axes)
        kept = [v for v in self.vars if v in keep]
        return np.transpose(m, [kept.index(v) for v in keep])

    def soft_rules(self, beta: float) -> dict[str, np.ndarray]:
        """Soft backward induction in topological order (valid under perfect recall)."""
        cid = self.cid
        rules: dict[str, np.ndarray] = {}
        U = self.utility()
        for d in reversed(cid.decisions):
            tmp = dict(rules)
            for k in cid.decisions:
                if k not in rules and k != d:
                    shape = (*tuple(cid.card(p) for p in cid.parents[k]), cid.card(k))
                    tmp[k] = np.full(shape, 1.0 / cid.card(k))
            P = self.joint(tmp)
            X = beta * U
            for k in rules:
                X = X - self.full(self.fam(k), np.log(np.maximum(rules[k], 1e-300)))
            num = self.marginal(P * X, self.fam(d))
            den = self.marginal(P, self.fam(d))
            q = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
            q = q - q.max(-1, keepdims=True)
            r = np.exp(q)
            rules[d] = r / r.sum(-1, keepdims=True)
        return rules


# --------------------------------------------------------------------------- random diagrams
def random_cid(
    seed: int, *, n_dec: int = 2, card: int = 2, utility_on_descendants: bool = True
) -> CID:
    """A random CID with perfect recall: ``X`` -> observations -> decisions -> outcomes."""
    rng = np.random.default_rng(seed)
    nodes: list = []
    chance: list[str] = []

    def add_chance(name: str, parents: list[str]) -> None:
        shape = [card] * len(parents) + [card]
        nodes.append(
            Chance(name, card, parents, rng.dirichlet(np.full(card, 0.7), size=shape[:-1]))
        )
        chance.append(name)

    add_chance("X", [])
    seen: list[str] = []
    for i in range(n_dec):
        add_chance(f"O{i}", [rng.choice(chance)])
        obs = [f"O{i}", *seen]
        nodes.append(Decision(f"D{i}", card, obs))
        seen = [*obs, f"D{i}"]
        par = [f"D{i}", str(rng.choice(chance))]
        add_chance(f"Y{i}", sorted(set(par), key=par.index))
    roots = ["X"] + [f"O{i}" for i in range(n_dec) if rng.random() < 0.5]
    for j in range(int(rng.integers(1, 3))):
        pool = [f"Y{i}" for i in range(n_dec)] + ["X"] if utility_on_descendants else ["X"]
        if not utility_on_descendants:
            pool = roots[:1]
        k = min(len(pool), int(rng.integers(1, 3)))
        par = list(rng.choice(pool, size=k, replace=False))
        nodes.append(Utility(f"U{j}", par, rng.normal(size=[card] * len(par))))
    return CID(nodes, name=f"random CID {seed}")


def random_policy(cid: CID, rng: np.random.Generator, alpha: float = 1.0) -> dict[str, np.ndarray]:
    out = {}
    for d in cid.decisions:
        shape = tuple(cid.card(p) for p in cid.parents[d])
        out[d] = rng.dirichlet(np.full(cid.card(d), alpha), size=shape)
    return out


# --------------------------------------------------------------------------- the mouse
@pytest.mark.parametrize(
    ("p", "expected", "beta"),
    [(0.8, 0.192745, LN2), (0.5, 0.0, 0.0), (1.0, LN2, math.inf), (0.0, LN2, -math.inf)],
)
def test_mouse_example_1(p: float, expected: float, beta: float) -> None:
    # Hand-derived: the best model goes towards the cheese with 0.8 = sigmoid(2 beta), i.e.
    # beta = ln 2, and scores 0.8 ln 0.8 + 0.2 ln 0.2 + ln 2 = 0.192745.
    assert math.isclose(0.8 * math.log(0.8) + 0.2 * math.log(0.2) + LN2, 0.1927447570, abs_tol=1e-9)
    res = meg_cid(examples.mouse(), {"D": [[p, 1 - p], [1 - p, p]]})
    assert res.meg == pytest.approx(expected, abs=1e-6)
    assert res.beta == pytest.approx(beta, abs=1e-8) if math.isfinite(beta) else res.beta == beta
    assert res.upper_bound == pytest.approx(LN2)
    if 0 < p < 1 and p != 0.5:
        # Theorem 5.1: at an interior optimum the model matches the policy's expected utility.
        assert res.model_expected_utility == pytest.approx(res.expected_utility, abs=1e-9)
        assert res.expected_utility == pytest.approx(2 * p - 1)


def test_mouse_naive_plug_in_is_scale_dependent_meg_is_not() -> None:
    # Paper section 3: plugging U and 2U into a beta = 1 soft policy gives log-likelihoods
    # -0.13 and -0.018 for the always-cheese mouse; MEG is ln 2 for both.
    mouse = examples.mouse()
    pi = {"D": [[1.0, 0.0], [0.0, 1.0]]}
    for a, ll, rounding in ((1.0, -0.13, 0.005), (2.0, -0.018, 0.0005)):
        obj = CIDObjective(mouse.transform_utility(a), pi)
        L, *_ = obj.evaluate_one(1.0)
        assert pytest.approx(ll, abs=rounding) == L  # the paper's rounding
        assert pytest.approx(math.log(1 / (1 + math.exp(-2 * a))), abs=1e-12) == L
        assert meg_cid(mouse.transform_utility(a), pi).meg == pytest.approx(LN2, abs=1e-12)


def test_mouse_targets_definition_4_4() -> None:
    # Every function of the binary T is an affine map of the +-1 utility: the same 0.192745.
    res = meg_cid_target(examples.mouse_cbn(0.8), "T", decisions="D")
    assert res.meg == pytest.approx(0.1927447570, abs=1e-8)
    assert meg_cid_target(examples.mouse_cbn(0.5), ["T"], decisions=["D"]).meg == pytest.approx(
        0.0, abs=1e-10
    )
    full = meg_cid_target(examples.mouse_cbn(1.0), ["T"], decisions=["D"])
    assert full.meg == pytest.approx(LN2, abs=1e-8)
    # The Gibbs certificate bounds it: E_pi[log|D| - H(pi)] is 0.192745 for the 0.8 mouse.
    assert res.extra["certificate"] == pytest.approx(0.1927447570, abs=1e-9)


# --------------------------------------------------------------------------- theory
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.floats(-3, 3))
def test_soft_backward_induction_is_maximum_entropy(seed: int, beta: float) -> None:
    """pi_beta maximises H(pi) + beta E[U] (so it is the maximum entropy policy of its expected
    utility): random policies and perturbations of it never do better."""
    cid = random_cid(seed)
    bf = Brute(cid)
    rules = CIDObjective(cid, cid.uniform_policy()).soft_rules(beta)[1]
    for d in cid.decisions:
        np.testing.assert_allclose(rules[d], bf.soft_rules(beta)[d], atol=1e-10)

    def F(r: dict) -> float:
        return bf.entropy(r) + beta * bf.eu(r)

    best = F(rules)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        assert F(random_policy(cid, rng, alpha=0.5)) <= best + 1e-10
        eps = 10.0 ** rng.uniform(-4, -1)
        pert = {}
        for d, r in rules.items():
            x = r * np.exp(eps * rng.normal(size=r.shape))
            pert[d] = x / x.sum(-1, keepdims=True)
        assert F(pert) <= best + 1e-10


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.floats(-2, 2))
def test_exact_derivatives_match_finite_differences(seed: int, beta: float) -> None:
    cid = random_cid(seed)
    rng = np.random.default_rng(seed + 1)
    pi = random_policy(cid, rng)
    obj = CIDObjective(cid, pi)
    bf = Brute(cid)

    def L(b: float) -> float:
        return bf.log_lik(pi, bf.soft_rules(b))

    h = 1e-4
    Lb, dL, d2L, eu = obj.evaluate_one(beta)
    assert Lb == pytest.approx(L(beta), abs=1e-10)
    assert dL == pytest.approx((L(beta + h) - L(beta - h)) / (2 * h), abs=1e-6)
    assert d2L == pytest.approx((L(beta + h) - 2 * Lb + L(beta - h)) / h**2, abs=2e-4)
    assert d2L <= 1e-12  # concavity
    assert eu == pytest.approx(bf.eu(bf.soft_rules(beta)), abs=1e-10)
    assert obj.expected_utility == pytest.approx(bf.eu(pi), abs=1e-12)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_meg_is_the_supremum_over_beta(seed: int) -> None:
    cid = random_cid(seed)
    pi = random_policy(cid, np.random.default_rng(seed + 2))
    bf = Brute(cid)
    res = meg_cid(cid, pi)
    ub = sum(math.log(cid.card(d)) for d in cid.decisions)
    f = lambda b: -bf.log_lik(pi, bf.soft_rules(b))  # noqa: E731
    # The optimum can lie far out when the utilities are nearly flat (seed 1518: beta = -3213).
    half = np.logspace(-2, 5, 57)
    grid = np.sort(np.concatenate([-half, [0.0], half]))
    vals = [-f(b) + ub for b in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    ref = max(
        vals[i],
        -minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10}).fun + ub,
    )
    assert res.meg >= ref - 1e-9
    if math.isfinite(res.beta):
        assert res.meg == pytest.approx(-f(res.beta) + ub, abs=1e-9)
        assert res.meg == pytest.approx(ref, abs=1e-7)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.05, 20), st.booleans(), st.floats(-50, 50))
def test_prop_3_1_translation_and_scale_invariance(
    seed: int, a: float, neg: bool, b: float
) -> None:
    cid = random_cid(seed)
    pi = random_policy(cid, np.random.default_rng(seed), alpha=0.5)
    a = -a if neg else a
    m1 = meg_cid(cid, pi).meg
    m2 = meg_cid(cid.transform_utility(a, b), pi).meg
    assert m2 == pytest.approx(m1, abs=1e-9)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_prop_3_2_bounds(seed: int) -> None:
    cid = random_cid(seed)
    rng = np.random.default_rng(seed)
    ub = sum(math.log(cid.card(d)) for d in cid.decisions)
    for alpha in (0.3, 1.0, 5.0):
        res = meg_cid(cid, random_policy(cid, rng, alpha))
        assert -1e-12 <= res.meg <= ub + 1e-12
        assert res.upper_bound == pytest.approx(ub)
    assert meg_cid(cid, cid.uniform_policy()).meg == pytest.approx(0.0, abs=1e-12)


def _pure_policies(cid: CID):
    per = []
    for d in cid.decisions:
        shape = tuple(cid.card(p) for p in cid.parents[d])
        ctx = list(itertools.product(*(range(n) for n in shape)))
        choices = []
        for acts in itertools.product(range(cid.card(d)), repeat=len(ctx)):
            r = np.zeros((*shape, cid.card(d)))
            for c, a in zip(ctx, acts, strict=True):
                r[(*c, a)] = 1.0
            choices.append(r)
        per.append(choices)
    for combo in itertools.product(*per):
        yield dict(zip(cid.decisions, combo, strict=True))


def test_prop_3_2_unique_optimal_attains_the_upper_bound() -> None:
    """Brute force over every pure policy: a unique (on its own path) optimal or anti-optimal
    policy scores sum_D log|dom D|; a non-optimal pure policy scores less."""
    checked = 0
    for seed in range(6):
        cid = random_cid(seed, n_dec=2)
        bf = Brute(cid)
        pols = list(_pure_policies(cid))
        eus = np.array([bf.eu(p) for p in pols])
        ub = sum(math.log(cid.card(d)) for d in cid.decisions)
        for sign in (1.0, -1.0):
            order = np.argsort(-sign * eus)
            best = pols[order[0]]
            J = bf.joint(best)
            same = [i for i in order if abs(eus[i] - eus[order[0]]) <= 1e-9]
            unique = all(np.allclose(bf.joint(pols[i]), J) for i in same)
            gap = min(
                (
                    abs(eus[i] - eus[order[0]])
                    for i in order
                    if not np.allclose(bf.joint(pols[i]), J)
                ),
                default=math.inf,
            )
            if not (unique and gap > 1e-6):
                continue
            res = meg_cid(cid, best)
            assert res.meg == pytest.approx(ub, abs=1e-9)
            assert res.at_boundary and res.beta == sign * math.inf
            checked += 1
        worse = pols[int(np.argsort(-eus)[len(pols) // 2])]
        assert meg_cid(cid, worse).meg < ub - 1e-6
    assert checked >= 4  # 8 of the 12 (seed, sign) cases have a unique optimum


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000))
def test_prop_3_3_no_goal_directedness_without_causal_influence(seed: int) -> None:
    cid = random_cid(seed, utility_on_descendants=False)
    assert not (cid.descendants(cid.decisions) & {p for u in cid.utilities for p in cid.parents[u]})
    rng = np.random.default_rng(seed)
    for alpha in (0.2, 1.0):
        assert meg_cid(cid, random_policy(cid, rng, alpha)).meg == pytest.approx(0.0, abs=1e-12)
    # The same diagram with a utility on an outcome of the last decision: MEG is positive for a
    # generic policy, so the check above can fail.
    last = cid.decisions[-1]
    y = f"Y{last[1:]}"
    infl = cid.replace(Utility("U_extra", [y], rng.normal(size=cid.card(y)) * 3))
    assert meg_cid(infl, random_policy(infl, rng, 0.2)).meg > 1e-6


def random_cbn_screened(seed: int, *, screened: bool = True, card: int = 2) -> CBN:
    """Z -> D -> S -> T -> W with Z -> S: S d-separates D from T (``screened``); otherwise T
    also depends on D directly."""
    rng = np.random.default_rng(seed)

    def cpt(n_par: int) -> np.ndarray:
        return rng.dirichlet(np.full(card, 0.4), size=[card] * n_par)

    t_par = ["S"] if screened else ["S", "D"]
    return CBN(
        [
            Chance("Z", card, [], cpt(0)),
            Chance("D", card, ["Z"], cpt(1)),
            Chance("S", card, ["D", "Z"], cpt(2)),
            Chance("T", card, t_par, cpt(len(t_par))),
            Chance("W", card, ["T"], cpt(1)),
        ]
    )


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_theorem_4_1_pseudo_terminal_goals(seed: int) -> None:
    cbn = random_cbn_screened(seed)
    assert nx.is_d_separator(cbn.to_networkx(), {"D"}, {"T"}, {"S"})
    m_s = meg_cid_target(cbn, ["S"], decisions=["D"]).meg
    for target in (["T"], ["W"], ["T", "W"]):
        assert meg_cid_target(cbn, target, decisions=["D"]).meg <= m_s + 1e-9


def test_theorem_4_1_needs_d_separation() -> None:
    """Without D _|_ T | S the inequality fails for some diagram: the test above can fail."""
    found = False
    for seed in range(30):
        cbn = random_cbn_screened(seed, screened=False)
        m_s = meg_cid_target(cbn, ["S"], decisions=["D"]).meg
        m_t = meg_cid_target(cbn, ["T"], decisions=["D"]).meg
        if m_t > m_s + 1e-3:
            found = True
            break
    assert found


def test_pomdp_mouse_pseudo_terminal_goal_and_recall() -> None:
    """Figure 2: the state (cheese side C, final position X3) screens the decisions off from the
    utility, so the mouse is at least as goal-directed towards the state as towards U."""
    cid = examples.mouse_pomdp()
    pol = {
        "D1": lambda O1: O1,  # follow the first smell
        "D2": lambda O1, D1, O2: {O2: 0.9, ("left" if O2 == "right" else "right"): 0.1},
    }
    known = meg_cid(cid, pol)
    state = meg_cid_unknown(cid, pol, ["C", "X3"])
    util = meg_cid_unknown(cid, pol, ["C", "X3", "X2"])  # a richer class contains U's class
    assert 0 < known.meg <= state.meg + 1e-9 <= util.meg + 2e-9
    assert state.meg <= state.extra["certificate"] + 1e-9
    with pytest.raises(InsufficientRecallError, match="relies on the decision rule of the earlier"):
        meg_cid(
            examples.mouse_pomdp(memory=False), examples.mouse_pomdp(memory=False).uniform_policy()
        )


def test_insufficient_recall_is_refused_and_recall_fix_works() -> None:
    base = [
        Chance("S", 2, [], [0.5, 0.5]),
        Decision("D1", 2, ["S"]),
        Chance("X", 2, ["S", "D1"], lambda S, D1: int(S == D1)),
        Decision("D2", 2, []),
        Utility("U", ["X", "D2"], lambda X, D2: float(X == D2)),
    ]
    # D2 sees nothing, D1's rule sets X's distribution: D2 relies on D1, D1 on D2.
    with pytest.raises(InsufficientRecallError, match="'D2' relies on"):
        meg_cid(CID(base), CID(base).uniform_policy())
    fixed = CID([*base[:3], Decision("D2", 2, ["X"]), *base[4:]])
    assert meg_cid(fixed, fixed.uniform_policy()).meg == pytest.approx(0.0, abs=1e-12)


def test_errors() -> None:
    mouse = examples.mouse()
    with pytest.raises(TypeError, match="CID"):
        meg_cid("mouse", {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no decision variables"):
        meg_cid(CID([Chance("A", 2, [], [0.5, 0.5])]), {})
    with pytest.raises(ValueError, match="not a chance or decision variable"):
        meg_cid_unknown(mouse, {"D": [[1, 0], [0, 1]]}, ["Q"])
    with pytest.raises(ValueError, match="pass decisions"):
        meg_cid_target(examples.mouse_cbn(0.8), ["T"])
    with pytest.raises(ValueError, match="pass policy"):
        meg_cid_target(mouse, ["T"])


def test_signed_and_unknown_dominates_known() -> None:
    mouse = examples.mouse()
    away = {"D": [[0.2, 0.8], [0.8, 0.2]]}
    assert meg_cid(mouse, away, signed=True).meg == pytest.approx(-0.1927447570, abs=1e-8)
    rng = np.random.default_rng(3)
    for seed in range(4):
        cid = random_cid(seed)
        pi = random_policy(cid, rng, 0.5)
        variables = sorted({p for u in cid.utilities for p in cid.parents[u]})
        unk = meg_cid_unknown(cid, pi, variables)
        assert unk.meg >= meg_cid(cid, pi).meg - 1e-9
        assert unk.meg <= unk.extra["certificate"] + 1e-9


def test_maxent_policy_limits() -> None:
    mouse = examples.mouse()
    np.testing.assert_allclose(maxent_policy(mouse, 0.0)["D"], 0.5)
    # beta = ln 2 goes towards the cheese with sigmoid(2 ln 2) = 0.8 (hand-derived).
    np.testing.assert_allclose(maxent_policy(mouse, LN2)["D"], [[0.8, 0.2], [0.2, 0.8]], atol=1e-12)
    np.testing.assert_array_equal(maxent_policy(mouse, math.inf)["D"], [[1, 0], [0, 1]])
    np.testing.assert_array_equal(maxent_policy(mouse, -math.inf)["D"], [[0, 1], [1, 0]])
    # Ties split evenly in the limit: a utility that ignores D.
    flat = mouse.with_utilities(Utility("U", ["S"], [1.0, 2.0]))
    np.testing.assert_allclose(maxent_policy(flat, math.inf)["D"], 0.5)
    with pytest.raises(ValueError, match="nan"):
        maxent_policy(mouse, math.nan)


def test_sufficient_but_imperfect_recall_is_solved_exactly() -> None:
    """D2 sees Y (which D1 affects) but not D1: not perfect recall, yet no decision relies on an
    earlier one, and soft backward induction still maximises H + beta E[U]."""
    rng = np.random.default_rng(0)
    cid = CID(
        [
            Chance("S", 3, [], rng.dirichlet(np.ones(3))),
            Decision("D1", 2, ["S"]),
            Chance("Y", 2, ["S", "D1"], rng.dirichlet(np.ones(2), size=(3, 2))),
            Decision("D2", 3, ["S", "Y"]),
            Chance("Z", 2, ["S", "D2"], rng.dirichlet(np.ones(2), size=(3, 3))),
            Utility("U1", ["Y"], rng.normal(size=2)),
            Utility("U2", ["Z", "S"], rng.normal(size=(2, 3))),
        ]
    )
    bf = Brute(cid)
    for beta in (0.7, -2.0, 3.0):
        rules = CIDObjective(cid, cid.uniform_policy()).soft_rules(beta)[1]
        best = bf.entropy(rules) + beta * bf.eu(rules)
        for _ in range(50):
            r = random_policy(cid, rng, 0.5)
            assert bf.entropy(r) + beta * bf.eu(r) <= best + 1e-10


def test_entropy_terms_enter_the_recall_check() -> None:
    """D3 observes X (set by D1's rule) and D2; no utility depends on D2 or D3. The classic
    s-reachability check passes (pycid 0.8.2's sufficient_recall() is True), but D2's maximum
    entropy rule depends on D3's future entropy, whose distribution D1's unobserved rule shapes,
    while D1's depends on D2's: refused."""
    cid = CID(
        [
            Decision("D1", 2),
            Chance("X", 2, ["D1"], [[0.9, 0.1], [0.2, 0.8]]),
            Decision("D2", 2),
            Decision("D3", 2, ["X", "D2"]),
            Utility("U", ["D1"], [0.0, 1.0]),
        ]
    )
    with pytest.raises(InsufficientRecallError):
        meg_cid(cid, cid.uniform_policy())
