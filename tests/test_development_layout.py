"""docs/development.md's layout names every module of the package, and only modules that exist.

The layout is the first code block under "## The layout": a line ``imitation_meg/``, then one
entry per top-level module or folder, indented by two spaces (``name.py`` or ``name/`` first),
its description continued on more deeply indented lines. A folder's entry names each of its
modules (``x.py``, at any depth below it; a name that is not there is an error) and each of its
sub-packages (``sub/``); a module's entry may name other top-level modules (``_beta_types.py`` under ``beta_solver.py``). Nothing here lists
the modules: the test reads the tree, so moving modules into folders means updating the page.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "imitation_meg"
PAGE = ROOT / "docs" / "development.md"
MODULE = re.compile(r"(?<![\w./-])([A-Za-z_]\w*\.py)\b")
FOLDER = re.compile(r"(?<![\w./-])([A-Za-z_]\w*)/(?!\w)")


@dataclasses.dataclass
class Entry:
    """One entry of the layout: its first word and its whole text (continuation lines included)."""

    name: str
    text: str


def _layout_block(text: str) -> list[str]:
    section = text.split("## The layout", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert match, "no code block under '## The layout' in docs/development.md"
    return match.group(1).splitlines()


def _package_entries(lines: list[str]) -> list[Entry]:
    """The entries under ``imitation_meg/``, up to the next line that is not indented."""
    start = lines.index("imitation_meg/")
    entries: list[Entry] = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):
            break
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 2:
            entries.append(Entry(line.split()[0], line.strip()))
        else:
            assert entries, f"a continuation line before any entry: {line!r}"
            entries[-1].text += " " + line.strip()
    return entries


def _top_level_names(lines: list[str]) -> list[str]:
    """The first words of the lines that are not indented (``experiments/``, ``docs/`` ...)."""
    return [line.split()[0] for line in lines if line and not line.startswith(" ")]


def _modules(folder: pathlib.Path) -> set[str]:
    return {p.name for p in folder.rglob("*.py") if p.name != "__init__.py"}


def _folders(folder: pathlib.Path) -> set[str]:
    return {p.name for p in folder.rglob("*") if p.is_dir() and (p / "__init__.py").is_file()}


def _packages() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def _check(lines: list[str]) -> list[str]:
    """Every disagreement between the layout's lines and the tree, as one message each."""
    problems: list[str] = []
    entries = _package_entries(lines)
    by_name = {e.name: e for e in entries}
    top_modules = {p.name for p in PACKAGE.glob("*.py")}
    # folders: an entry each, naming every module and sub-folder below it, and nothing else
    for folder in _packages():
        entry = by_name.get(f"{folder.name}/")
        if entry is None:
            problems.append(f"imitation_meg/{folder.name}/ has no entry")
            continue
        named = set(MODULE.findall(entry.text))
        for module in sorted(_modules(folder) - named):
            problems.append(f"imitation_meg/{folder.name}/: {module} is not named")
        for module in sorted(named - _modules(folder)):
            problems.append(f"imitation_meg/{folder.name}/: {module} is named but not in it")
        subfolders = set(FOLDER.findall(entry.text.split(None, 1)[1] if " " in entry.text else ""))
        for sub in sorted(_folders(folder) - {folder.name} - subfolders):
            problems.append(f"imitation_meg/{folder.name}/: the folder {sub}/ is not named")
    # top-level modules: named in a module's entry (as its first word or in its text)
    named_top: set[str] = set()
    for entry in entries:
        if entry.name.endswith("/"):
            if not (PACKAGE / entry.name).is_dir():
                problems.append(f"imitation_meg/{entry.name} is named but not in the tree")
            continue
        named_top |= set(MODULE.findall(entry.text))
    for module in sorted(top_modules - named_top):
        problems.append(f"imitation_meg/{module} is not named")
    for module in sorted(named_top - top_modules):
        problems.append(f"imitation_meg/{module} is named but not in the tree")
    # the lines beside the package name folders of the repository
    for name in _top_level_names(lines):
        if name != "imitation_meg/" and not (ROOT / name).exists():
            problems.append(f"{name} is named but not in the repository")
    return problems


def test_the_layout_names_every_module_of_the_tree_and_nothing_else():
    problems = _check(_layout_block(PAGE.read_text()))
    assert problems == [], "docs/development.md's layout and the tree disagree:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda b: b.replace("  discounted.py", "  discounting.py"), "discounted.py is not named"),
        (lambda b: b.replace("smc.py (twisted", "gone.py (twisted"), "smc.py is not named"),
        (
            lambda b: b.replace("smc.py (twisted", "gone.py (twisted"),
            "gone.py is named but not in it",
        ),
        (lambda b: b.replace("  cid/ ", "  cidx/ "), "imitation_meg/cid/ has no entry"),
        (lambda b: b + "  extra.py          nothing\n", "extra.py is named but not in the tree"),
    ],
    ids=["module-renamed", "folder-module-missing", "folder-module-extra", "folder", "extra"],
)
def test_the_layout_check_sees_a_stale_entry(edit, expected):
    """The check fails on each kind of staleness (the page edited in memory, not on disk)."""
    text = PAGE.read_text()
    section = text.split("## The layout", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert block is not None
    package = block.group(1).split("experiments/", 1)
    edited = edit(package[0]) + "experiments/" + package[1]
    problems = _check(edited.splitlines())
    assert any(expected in p for p in problems), problems
