"""The package's layers import one way: no import cycle between its modules (read with ``ast``).

Every import counts, at module level or inside a function, including ``TYPE_CHECKING`` blocks:
an edge ``a -> b`` is an import in ``a`` of the package module ``b`` (``from imitation_meg.x import
y`` is an edge to ``imitation_meg.x.y`` when that is a module, else to ``imitation_meg.x``). The
implicit import of a parent package is not an edge (the root ``__init__`` re-exports everything).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "imitation_meg"


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _resolve(current: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = current.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_import_module_call(node: ast.AST) -> bool:
    """``importlib.import_module("imitation_meg....")`` with a literal name: an import too."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def import_graph() -> dict[str, set[str]]:
    """Edges between the package's modules."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in mods else base)
            elif _is_import_module_call(node):
                assert isinstance(node, ast.Call)
                targets = [node.args[0].value]  # type: ignore[attr-defined]
            for t in targets:
                while t and t not in mods:  # import a.b.c of a module a.b
                    t = t.rpartition(".")[0]
                if t and t != mod and t.startswith("imitation_meg"):
                    graph[mod].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_the_package():
    cycles = find_cycles(import_graph())
    assert cycles == [], f"import cycles between modules: {cycles}"


def test_the_checker_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


def test_core_modules_do_not_import_adapters_or_studies():
    graph = import_graph()
    core = [
        m
        for m in graph
        if m.split(".")[1:2]
        and m.split(".")[1]
        in (
            "_validation",
            "type_aliases",
            "mdp",
            "_operators",
            "soft_vi",
            "policies",
            "beta_solver",
            "_beta_types",
            "_beta_search",
            "_hermite",
            "_known_passes",
            "known",
            "likelihood",
            "unknown",
            "faces",
            "algorithm2",
            "trajectories",
            "trajectory_data",
            "results",
        )
    ]
    for mod in core:
        bad = sorted(
            t
            for t in graph[mod]
            if any(
                t.startswith(f"imitation_meg.{layer}")
                for layer in ("adapters", "cli", "runners", "extended", "symmtom")
            )
        )
        assert not bad, f"{mod} imports the upper layers {bad}"


def test_validation_imports_nothing_above_it():
    graph = import_graph()
    assert graph["imitation_meg._validation"] <= {"imitation_meg.type_aliases"}


def test_meg_is_the_function_and_the_solver_module_has_its_own_name():
    import imitation_meg

    assert callable(imitation_meg.meg)
    assert not (PKG / "meg.py").exists()
    assert imitation_meg.meg.__module__ == "imitation_meg.known"


@pytest.mark.parametrize(
    "call",
    [
        "im.meg_unknown(pi, mdp, utility_model='mlp', steps=2, restarts=1)",
        "im.meg_unknown(pi, mdp)",
    ],
)
def test_core_calls_do_not_import_imitation_or_sb3(call):
    code = (
        "import sys, imitation_meg as im\n"
        "mdp = im.envs.cliff_world(horizon=4); pi = im.policies.epsilon_greedy(mdp, 0.3)\n"
        f"{call}\n"
        "bad = [m for m in ('imitation', 'stable_baselines3') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
