"""The README's runnable examples run as written and print what the README says they print."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
TEXT = README.read_text()
# A runnable block, and the sentence after it when that sentence starts with "prints".
BLOCKS = re.findall(
    r"<!-- runnable -->\s*```python\n(.*?)```\n\n?(prints (?:[^`.]|`[^`]*`)*\.)?", TEXT, re.DOTALL
)


def test_readme_is_short_and_has_runnable_examples():
    assert len(TEXT.splitlines()) <= 250
    assert len(BLOCKS) >= 4
    assert sum(bool(claim) for _, claim in BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_and_prints_what_it_says(index, capsys, tmp_path, monkeypatch):
    code, claim = BLOCKS[index]
    if re.search(r"^\s*(from|import) (imitation|stable_baselines3)\b(?!_meg)", code, re.MULTILINE):
        pytest.importorskip("stable_baselines3")
        if re.search(r"^\s*(from|import) imitation\b(?!_meg)", code, re.MULTILINE):
            pytest.importorskip("imitation")  # the current-stack lane has no imitation
    monkeypatch.chdir(tmp_path)  # files an example writes stay out of the checkout
    exec(compile(code, f"README block {index}", "exec"), {"__name__": "__readme__"})
    out = capsys.readouterr().out
    assert out.strip()
    for printed in re.findall(r"`([^`]+)`", claim):
        printed = " ".join(printed.split())  # the README wraps its lines
        assert printed in out, f"the README says block {index} prints {printed!r}; it printed {out}"
