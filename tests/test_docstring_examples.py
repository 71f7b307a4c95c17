"""Every example in the package's docstrings runs and shows what it says it shows.

The package's warnings are errors here (setup.cfg), so an example that warns fails too.
"""

from __future__ import annotations

import doctest
import importlib
import pathlib

import pytest

import imitation_meg

_ROOT = pathlib.Path(imitation_meg.__file__).parent


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(_ROOT.rglob("*.py")):
        if ">>>" not in path.read_text():
            continue
        parts = ("imitation_meg", *path.relative_to(_ROOT).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_the_examples_are_found():
    assert {"imitation_meg", "imitation_meg.core.known", "imitation_meg.approx.known"} <= set(
        MODULES
    )


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an optional dependency this lane does not install
        pytest.skip(f"{name} needs {exc.name}")
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, report=True)
    assert result.attempted > 0, f"{name} has '>>>' but doctest found no example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
