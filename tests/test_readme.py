"""The README's runnable examples run as written."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"<!-- runnable -->\s*```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_readme_has_runnable_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    if re.search(r"^\s*(from|import) imitation\b(?!_meg)", BLOCKS[index], re.MULTILINE):
        pytest.importorskip("imitation")  # the current-stack lane has no imitation
    exec(compile(BLOCKS[index], f"README block {index}", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip()
