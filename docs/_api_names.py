"""The public names the API reference must document, and the ones its pages document.

Used by ``docs/conf.py`` (after a build: every public name must be in Sphinx's Python index) and
by ``tests/test_docs.py`` (without a build: every public name must be named by a directive of the
API pages).
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import re
import types
from collections.abc import Iterator

API_DIR = pathlib.Path(__file__).resolve().parent / "api"


def packages() -> list[str]:
    """``imitation_meg`` and every subpackage of it (a folder with an ``__init__.py``)."""
    import imitation_meg

    subs = [m.name for m in pkgutil.iter_modules(imitation_meg.__path__) if m.ispkg]
    return ["imitation_meg", *(f"imitation_meg.{name}" for name in sorted(subs))]


def public_names() -> Iterator[tuple[str, str, object]]:
    """``(package, name, object)`` for every name in a package's ``__all__``."""
    for pkg in packages():
        module = importlib.import_module(pkg)
        for name in getattr(module, "__all__", ()):
            yield pkg, name, getattr(module, name)


def is_covered(pkg: str, name: str, obj: object, documented: set[str]) -> bool:
    """Whether ``pkg.name`` has an entry among the ``documented`` full names (a module in
    ``__all__`` counts when it has its own entry under its real name)."""
    if f"{pkg}.{name}" in documented:
        return True
    return isinstance(obj, types.ModuleType) and obj.__name__ in documented


_DIRECTIVE = re.compile(r"^\s*\.\. (auto\w+|py:\w+):: ([\w.]+)\s*$", re.MULTILINE)
_MODULE_OPTION = re.compile(r"^\s*:module: ([\w.]+)\s*$", re.MULTILINE)
_EXCLUDE_OPTION = re.compile(r"^\s*:exclude-members: (.*)$", re.MULTILINE)


def _excluded(text: str, end: int) -> set[str]:
    """The names of the ``:exclude-members:`` option of the directive whose line ends at
    ``end``: read from the option lines right below it (indented, ``:name: value``), not from
    the next directive's."""
    rest = text[end:].removeprefix("\n")
    for line in rest.splitlines():
        if not re.match(r"^\s+:[\w-]+:", line):
            break
        found = _EXCLUDE_OPTION.match(line)
        if found:
            return {n.strip() for n in found.group(1).split(",")}
    return set()


def documented_in_pages() -> set[str]:
    """The full names the API pages' directives document, as autodoc expands them: an
    ``automodule`` documents the module and the classes and functions of its ``__all__``
    (members are on by default in ``conf.py``) but those its ``:exclude-members:`` names (a
    class documented at its own module, re-exported here); ``autofunction`` and friends their target; a
    hand-written ``py:`` entry its name under its ``:module:``."""
    names: set[str] = set()
    for page in sorted(API_DIR.glob("*.md")):
        text = page.read_text()
        for match in _DIRECTIVE.finditer(text):
            kind, target = match.groups()
            options = text[match.end() :].split("\n\n", 1)[0]  # the directive's option lines
            if kind == "automodule":
                module = importlib.import_module(target)
                names.add(target)
                members = () if ":no-members:" in options else getattr(module, "__all__", ())
                excluded = _excluded(text, match.end())
                for member in (m for m in members if m not in excluded):
                    obj = getattr(module, member)
                    # autodoc documents the classes and functions of __all__; data imported
                    # from another module (a constant, a type alias) needs its own autodata.
                    if inspect.isclass(obj) or inspect.isroutine(obj):
                        names.add(f"{target}.{member}")
            elif kind.startswith("auto"):
                names.add(target)
            else:
                option = _MODULE_OPTION.search(options)
                names.add(f"{option.group(1)}.{target}" if option else target)
    return names
