"""CID / CBN representation: validation, tables, graph queries and exact inference."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imitation_meg.cid import CBN, CID, Chance, Decision, Utility, examples
from imitation_meg.cid._infer import Factor, contract, d_connected


def test_mouse_tables() -> None:
    cid = examples.mouse()
    assert cid.order == ("S", "D", "T", "U")
    assert cid.decisions == ("D",) and cid.utilities == ("U",) and cid.chance == ("S", "T")
    # T is "cheese" iff D == S: the callable became a (S, D, T) table.
    expected = np.zeros((2, 2, 2))
    expected[0, 0, 1] = expected[1, 1, 1] = expected[0, 1, 0] = expected[1, 0, 0] = 1.0
    np.testing.assert_array_equal(cid.cpds["T"], expected)
    np.testing.assert_array_equal(cid.utility_tables["U"], [-1.0, 1.0])
    assert cid.descendants("D") == {"T", "U"}
    assert cid.ancestors("U") == {"S", "D", "T"}
    g = cid.to_networkx()
    assert set(g.edges) == {("S", "D"), ("S", "T"), ("D", "T"), ("T", "U")}
    assert g.nodes["D"]["kind"] == "decision"


def test_callable_tables_mappings_and_vectors() -> None:
    cid = CID(
        [
            Chance("A", 3, cpd={0: 0.2, 2: 0.8}),
            Chance("B", ["x", "y"], parents=["A"], cpd=lambda A: [1 - A / 2, A / 2]),
            Chance(
                "C",
                ["x", "y"],
                parents=["B"],
                cpd=lambda B: {B: 0.9, ("y" if B == "x" else "x"): 0.1},
            ),
            Decision("D", 2, parents=["C"]),
            Utility("U", ["A", "D"], table=lambda A, D: A * D),
        ]
    )
    np.testing.assert_allclose(cid.cpds["A"], [0.2, 0.0, 0.8])
    np.testing.assert_allclose(cid.cpds["B"], [[1, 0], [0.5, 0.5], [0, 1]])
    np.testing.assert_allclose(cid.cpds["C"], [[0.9, 0.1], [0.1, 0.9]])
    np.testing.assert_allclose(cid.utility_tables["U"], [[0, 0], [0, 1], [0, 2]])
    # Constant utility, broadcast over its parents.
    c2 = cid.replace(Utility("U", ["A"], table=2.5))
    np.testing.assert_allclose(c2.utility_tables["U"], [2.5, 2.5, 2.5])


@pytest.mark.parametrize(
    ("nodes", "exc", "match"),
    [
        ([Chance("A", 2, cpd=[0.5, 0.6])], ValueError, "does not sum to 1"),
        ([Chance("A", 2, cpd=[1.5, -0.5])], ValueError, "negative probabilities"),
        ([Chance("A", 2, cpd=[np.nan, 1.0])], ValueError, "NaN"),
        ([Chance("A", 2, cpd=[0.5, 0.5, 0.0])], ValueError, r"shape \(2,\)"),
        ([Chance("A", 2)], ValueError, "has no cpd"),
        ([Chance("A", float, cpd=[1.0])], TypeError, "continuous"),
        ([Chance("A", 0.5, cpd=[1.0])], TypeError, "continuous"),
        ([Chance("A", 0, cpd=[])], ValueError, ">= 1"),
        ([Chance("A", ["a", "a"], cpd=[0.5, 0.5])], ValueError, "repeated"),
        ([Chance("A", iter([0, 1]), cpd=[0.5, 0.5])], TypeError, "finite sequence"),
        ([Chance("A", 2, parents=["Z"], cpd=[0.5, 0.5])], ValueError, "not a variable"),
        ([Chance("A", 2, parents="B", cpd=[0.5, 0.5])], TypeError, "string"),
        (
            [Chance("A", 2, cpd=[1, 0]), Chance("A", 2, cpd=[1, 0])],
            ValueError,
            "defined twice",
        ),
        (
            [
                Chance("A", 2, parents=["B"], cpd=[[1, 0], [0, 1]]),
                Chance("B", 2, parents=["A"], cpd=[[1, 0], [0, 1]]),
            ],
            ValueError,
            "cycle A -> B -> A|cycle B -> A -> B",
        ),
        (
            [
                Decision("D", 2),
                Utility("U", ["D"], [0.0, 1.0]),
                Chance("X", 2, ["U"], [[1, 0]] * 2),
            ],
            ValueError,
            "must have no children",
        ),
        ([Decision("D", 2), Utility("U", ["D"], [0.0, np.inf])], ValueError, "finite"),
        ([Decision("D", 2), Utility("U", ["D"], ["a", "b"])], TypeError, "numeric"),
        ([Decision("D", 2), Utility("U", ["D"], [1.0, 2.0, 3.0])], ValueError, r"shape \(2,\)"),
        ([Decision("D", 2), Utility("U", ["D"], lambda D: "high")], TypeError, "number"),
        ([Decision("D", 2), Utility("U", ["D"], lambda X: 1.0)], TypeError, "named like"),
        (["not a node"], TypeError, "Chance, Decision or Utility"),
        ([], ValueError, "at least one"),
    ],
)
def test_validation_errors(nodes: list, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        CID(nodes)


def test_decisions_have_no_table() -> None:
    with pytest.raises(TypeError):
        Decision("D", 2, (), [0.5, 0.5])  # type: ignore[call-arg]


def test_cpd_callable_outside_domain() -> None:
    with pytest.raises(ValueError, match="not in the domain"):
        CID([Chance("A", 2, cpd={0: 0.5, 5: 0.5})])
    with pytest.raises(ValueError, match="not a value of the domain"):
        CID([Chance("A", 2, cpd=[1, 0]), Chance("B", 2, ["A"], cpd=lambda A: 7)])


def test_cbn_and_policies() -> None:
    cbn = examples.mouse_cbn(0.8)
    with pytest.raises(TypeError, match="chance variables only"):
        CBN([Decision("D", 2)])
    cid, pol = cbn.as_cid(["D"])
    assert cid.decisions == ("D",)
    np.testing.assert_allclose(pol["D"], [[0.8, 0.2], [0.2, 0.8]])
    mouse = examples.mouse()
    with pytest.raises(ValueError, match="lacks decision rules"):
        mouse.validate_policy({})
    with pytest.raises(ValueError, match="not decisions"):
        mouse.validate_policy({"D": [[1, 0], [0, 1]], "S": [0.5, 0.5]})
    with pytest.raises(TypeError, match="mapping"):
        mouse.validate_policy([[1, 0], [0, 1]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not sum to 1"):
        mouse.validate_policy({"D": [[0.7, 0.2], [0, 1]]})
    rule = mouse.validate_policy({"D": lambda S: S})["D"]
    np.testing.assert_array_equal(rule, [[1, 0], [0, 1]])


def _random_dag(draw: st.DrawFn) -> tuple[dict[str, list[str]], list[str]]:
    n = draw(st.integers(2, 7))
    names = [f"V{i}" for i in range(n)]
    parents: dict[str, list[str]] = {}
    for i, v in enumerate(names):
        parents[v] = [names[j] for j in range(i) if draw(st.booleans())]
    return parents, names


@st.composite
def dag_query(draw: st.DrawFn) -> tuple[dict[str, list[str]], list[str], str, str, list[str]]:
    parents, names = _random_dag(draw)
    x, y = draw(st.sampled_from(names)), draw(st.sampled_from(names))
    z = [v for v in names if v not in (x, y) and draw(st.booleans())]
    return parents, names, x, y, z


@settings(max_examples=150, deadline=None)
@given(dag_query())
def test_d_separation_matches_networkx(q: tuple) -> None:
    parents, names, x, y, z = q
    if x == y:
        return
    children = {v: [c for c in names if v in parents[c]] for v in names}
    g = nx.DiGraph()
    g.add_nodes_from(names)
    g.add_edges_from((p, c) for c in names for p in parents[c])
    expected = not nx.is_d_separator(g, {x}, {y}, set(z))
    assert d_connected(parents, children, [x], [y], z) == expected


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_contract_matches_enumeration(data: st.DataObject) -> None:
    """Variable elimination with additive terms equals summing the full joint table."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = data.draw(st.integers(1, 5))
    card = {i: int(rng.integers(1, 4)) for i in range(n)}
    factors, joint_p_terms, add_terms = [], [], []
    for i in range(n):
        scope = (*tuple(j for j in range(i) if rng.random() < 0.5), i)
        p = rng.random([card[v] for v in scope])
        factors.append(Factor(scope, p, None))
        joint_p_terms.append((scope, p))
    K = 2
    for _ in range(data.draw(st.integers(0, 3))):
        scope = tuple(sorted({int(v) for v in rng.integers(0, n, size=2)}))
        e = rng.normal(size=[card[v] for v in scope] + [K])
        factors.append(Factor(scope, None, e))
        add_terms.append((scope, e))
    keep = tuple(v for v in range(n) if rng.random() < 0.4)
    p, e = contract(factors, keep, card, n_add=K)
    P = np.zeros([card[v] for v in keep])
    E = np.zeros([card[v] for v in keep] + [K])
    for x in itertools.product(*(range(card[v]) for v in range(n))):
        w = math.prod(float(t[tuple(x[v] for v in sc)]) for sc, t in joint_p_terms)
        add = sum((t[tuple(x[v] for v in sc)] for sc, t in add_terms), np.zeros(K))
        k = tuple(x[v] for v in keep)
        P[k] += w
        E[k] += w * add
    np.testing.assert_allclose(p, P, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(e, E, rtol=1e-10, atol=1e-12)
