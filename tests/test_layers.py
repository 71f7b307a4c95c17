"""The package's layers import one way: no import cycle between its modules (read with ``ast``).

Every import counts, at module level or inside a function, including ``TYPE_CHECKING`` blocks:
an edge ``a -> b`` is an import in ``a`` of the package module ``b`` (``from imitation_meg.x import
y`` is an edge to ``imitation_meg.x.y`` when that is a module, else to ``imitation_meg.x``). The
implicit import of a parent package is not an edge (the root ``__init__`` re-exports everything).
"""

from __future__ import annotations

import ast
import pathlib
import re
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


#: The modules directly under ``imitation_meg/`` that everything may import: they import only
#: each other (named types, input checks, the JSON layer and writers, progress bars).
GROUND = ("type_aliases", "_validation", "results", "progress")
#: Most modules directly under ``imitation_meg/`` besides ``__init__.py``.
MAX_TOP_MODULES = 12
_MAY_IMPORT = re.compile(r"^May import:(.*?)(?:\n\s*\n|\Z)", re.DOTALL | re.MULTILINE)
_FOLDER_TOKEN = re.compile(r"``([\w/]+)/``")


def folders() -> list[str]:
    """Every folder of the package, as a path below ``imitation_meg/`` (``core/kernels``)."""
    return sorted(
        str(p.parent.relative_to(PKG)) for p in PKG.rglob("__init__.py") if p.parent != PKG
    )


def unit_of(module: str, names: list[str]) -> str:
    """The folder a module lives in (its deepest folder), or its own name at the top
    (``imitation_meg.core.kernels.fused`` -> ``core/kernels``; ``imitation_meg.results`` ->
    ``results``; the root package -> ``""``)."""
    parts = module.split(".")[1:]
    for depth in range(len(parts), 0, -1):
        path = "/".join(parts[:depth])
        if path in names:
            return path
    return parts[0] if parts else ""


def allowed_imports(docstring: str) -> set[str] | None:
    """What a folder's docstring says it may import: folder paths, ``ground`` for the modules
    of :data:`GROUND`, ``*`` for the whole package; None when it says nothing."""
    match = _MAY_IMPORT.search(docstring)
    if match is None:
        return None
    text = match.group(1)
    allowed = set(_FOLDER_TOKEN.findall(text))
    if "the ground modules" in text:
        allowed.add("ground")
    if "the whole package" in text:
        allowed.add("*")
    return allowed


def folder_rules() -> dict[str, set[str] | None]:
    """Each folder's allowed imports, read from its ``__init__`` docstring."""
    rules = {}
    for folder in folders():
        tree = ast.parse((PKG / folder / "__init__.py").read_text())
        rules[folder] = allowed_imports(ast.get_docstring(tree) or "")
    return rules


def layer_violations(graph: dict[str, set[str]], rules: dict[str, set[str] | None]) -> list[str]:
    """Every import that leaves its folder for something the folder may not import, and every
    ground module importing anything but the ground."""
    names = list(rules)
    out = []
    for mod, targets in sorted(graph.items()):
        unit = unit_of(mod, names)
        if unit in GROUND:
            allowed: set[str] | None = {"ground"}
        elif unit in rules:
            allowed = rules[unit]
        else:
            continue  # the root package and the entry points at the top import anything
        if allowed is None or "*" in allowed:
            continue
        for target in sorted(targets):
            other = unit_of(target, names)
            if other == unit or (other in GROUND and "ground" in allowed):
                continue
            if not any(other == a or other.startswith(a + "/") for a in allowed):
                out.append(f"{mod} -> {target}")
    return out


def rule_cycles(rules: dict[str, set[str] | None]) -> list[list[str]]:
    """Folders that may import each other (directly or around a loop): the rules must be
    layers, each folder above everything it may import."""
    graph: dict[str, set[str]] = {f: set() for f in rules}
    for folder, allowed in rules.items():
        for a in allowed or ():
            graph[folder] |= {f for f in rules if f != folder and (f == a or f.startswith(a + "/"))}
    return find_cycles(graph)


def test_every_folder_says_what_lives_there_and_what_it_may_import():
    rules = folder_rules()
    silent = [f for f, allowed in rules.items() if allowed is None]
    assert not silent, f"folders whose __init__ docstring has no 'May import:' paragraph: {silent}"
    for folder in rules:
        doc = ast.get_docstring(ast.parse((PKG / folder / "__init__.py").read_text())) or ""
        assert len(doc.split("May import:")[0].split()) >= 8, f"{folder}: say what lives there"


def test_each_folder_imports_only_the_folders_below_it():
    rules = folder_rules()
    assert rule_cycles(rules) == [], "folders allowed to import each other"
    bad = layer_violations(import_graph(), rules)
    assert bad == [], "imports a folder's docstring does not allow:\n" + "\n".join(bad)


def test_the_layer_check_sees_an_import_against_the_rules():
    rules = {"core": {"ground"}, "adapters": {"ground", "core"}, "approx": {"*"}}
    graph = {
        "imitation_meg.core.known": {"imitation_meg.results", "imitation_meg.adapters.sb3"},
        "imitation_meg.adapters.sb3": {"imitation_meg.core.mdp", "imitation_meg"},
        "imitation_meg.approx.known": {"imitation_meg.cli"},
        "imitation_meg.results": {"imitation_meg.core.mdp"},
    }
    assert layer_violations(graph, rules) == [
        "imitation_meg.adapters.sb3 -> imitation_meg",
        "imitation_meg.core.known -> imitation_meg.adapters.sb3",
        "imitation_meg.results -> imitation_meg.core.mdp",
    ]
    assert rule_cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]
    assert allowed_imports("Lives here.\n\nMay import: the ground modules and ``core/``.") == {
        "ground",
        "core",
    }


def test_the_top_holds_few_modules():
    top = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top
    assert set(GROUND) <= {p.removesuffix(".py") for p in top}


def test_validation_imports_nothing_above_it():
    graph = import_graph()
    assert graph["imitation_meg._validation"] <= {"imitation_meg.type_aliases"}


def test_meg_is_the_function_and_the_solver_module_has_its_own_name():
    import imitation_meg

    assert callable(imitation_meg.meg)
    assert not (PKG / "meg.py").exists()
    assert imitation_meg.meg.__module__ == "imitation_meg.core.known"


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
