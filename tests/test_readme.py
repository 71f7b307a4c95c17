"""The README's examples run as written and print what the README says they print.

Every example is a fenced block after a marker comment:

- ``<!-- runnable -->`` before a Python block: run in this process (the default test run);
- ``<!-- runnable: bash[, expensive][, continues][, checkout] -->`` before a shell block: run
  with bash in a fresh folder, ``imitation-meg`` and ``python`` being this checkout's; with
  ``expensive`` only in ``make test-expensive``; with ``continues`` after the runnable block
  before it, in the same folder (it reads the files that block writes); with ``checkout`` in a
  folder that holds the checkout's ``configs/`` and ``experiments/`` (a clone, as the README
  says).

A shell example starts from an empty folder, so it runs only if the README's own commands make
its inputs; whatever it leaves behind must be named in the README, and on the pinned lane it
prints no warning from a third-party package.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()
# A runnable block, and the sentence after it when that sentence starts with "prints".
BLOCKS = re.findall(
    r"<!-- runnable -->\s*```python\n(.*?)```\n\n?(prints (?:[^`.]|`[^`]*`)*\.)?", TEXT, re.DOTALL
)
MARKED = re.compile(r"<!-- runnable(?::\s*([^>]*?))?\s*-->\s*```(\w+)\n(.*?)```", re.DOTALL)
FLAGS = {"bash", "expensive", "continues", "checkout"}


@dataclasses.dataclass(frozen=True)
class Example:
    """One marked block of the README."""

    language: str  # "python" or "bash"
    code: str
    flags: frozenset[str]
    line: int  # where its marker is (1-based), for messages


def _examples() -> list[Example]:
    out = []
    for m in MARKED.finditer(TEXT):
        flags = frozenset(f.strip() for f in (m.group(1) or "").split(",") if f.strip())
        out.append(Example(m.group(2), m.group(3), flags, TEXT.count("\n", 0, m.start()) + 1))
    return out


EXAMPLES = _examples()
SHELL = [i for i, e in enumerate(EXAMPLES) if e.language == "bash"]


def test_readme_is_short_and_has_runnable_examples():
    assert len(TEXT.splitlines()) <= 290
    assert len(BLOCKS) >= 4
    assert sum(bool(claim) for _, claim in BLOCKS) >= 3
    assert len(SHELL) >= 5


def test_every_marker_is_well_formed():
    """A marker names only known flags and its language, and a shell example that continues
    follows another example."""
    for i, e in enumerate(EXAMPLES):
        where = f"README line {e.line}"
        if e.language == "python":
            assert not e.flags, f"{where}: a Python example takes no flags"
            continue
        assert e.language == "bash" and "bash" in e.flags, f"{where}: mark shell blocks 'bash'"
        assert e.flags <= FLAGS, f"{where}: unknown flags {sorted(e.flags - FLAGS)}"
        assert "continues" not in e.flags or i > 0, f"{where}: nothing to continue"
    # every shell example the README shows after "imitation-meg" or "python" is marked
    marked = {e.code for e in EXAMPLES}
    for m in re.finditer(r"```bash\n(.*?)```", TEXT, re.DOTALL):
        if re.search(r"^(imitation-meg|python) ", m.group(1), re.MULTILINE):
            line = TEXT.count("\n", 0, m.start()) + 1
            assert m.group(1) in marked, f"README line {line}: an unmarked example"


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


def _chain(index: int) -> list[Example]:
    """The example and those it continues, first to last."""
    chain = [EXAMPLES[index]]
    while "continues" in chain[0].flags:
        index -= 1
        chain.insert(0, EXAMPLES[index])
    return chain


def _shims(folder: pathlib.Path) -> dict[str, str]:
    """An environment whose ``imitation-meg`` and ``python`` are this checkout's."""
    folder.mkdir()
    for name, target in (("python", '"$@"'), ("imitation-meg", '-m imitation_meg.cli "$@"')):
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {target}\n')
        shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONWARN"))}
    env["PATH"] = f"{folder}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)
    return env


# A warning as Python prints it: "path/to/file.py:12: SomeWarning: message".
WARNING_LINE = re.compile(r"^(\S+\.py):\d+: (\w*Warning): ", re.MULTILINE)


def _expected_warnings() -> set[str]:
    """Third-party warnings the current stack prints and the pinned lane does not: setuptools
    81 and later warn about pkg_resources (which pygame imports) as a UserWarning, so the
    constraints pin an earlier one (checked only where that pin is installed)."""
    pinned = re.search(r"^setuptools==(\S+)", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    try:
        installed = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return set()
    return set() if pinned and installed == pinned.group(1) else {"pygame/pkgdata.py"}


@pytest.mark.expensive
@pytest.mark.timeout(1800)  # training and scoring a small agent: minutes on a busy machine
@pytest.mark.parametrize("index", SHELL, ids=[f"README-line-{EXAMPLES[i].line}" for i in SHELL])
def test_readme_shell_example_runs_from_an_empty_folder(index, tmp_path):
    """The shell example runs in an empty folder after the examples it continues, prints no
    third-party warning, and leaves behind only files the README names."""
    chain = _chain(index)
    if any(re.search(r"\b(stable_baselines3|sb3)\b|ckpt|\.zip", e.code) for e in chain):
        pytest.importorskip("stable_baselines3")
    env = _shims(tmp_path / "bin")
    work = tmp_path / "work"
    work.mkdir()
    if "checkout" in chain[-1].flags:
        for part in ("configs", "experiments"):
            (work / part).symlink_to(ROOT / part, target_is_directory=True)
    for e in chain:
        if e.language == "python":
            argv = [sys.executable, "-c", e.code]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", e.code]
        proc = subprocess.run(
            argv, check=False, cwd=work, env=env, capture_output=True, text=True, timeout=900
        )
        where = f"README line {e.line}"
        assert proc.returncode == 0, f"{where} exits {proc.returncode}:\n{proc.stderr[-3000:]}"
        noise = [
            f"{path}: {category}"
            for path, category in WARNING_LINE.findall(proc.stderr)
            if "/imitation_meg/" not in path
            and not any(path.endswith(ok) for ok in _expected_warnings())
        ]
        assert not noise, f"{where} prints third-party warnings {noise}:\n{proc.stderr[-3000:]}"
        assert "Hello from the pygame community" not in proc.stdout, f"{where}: pygame greets"
    left = sorted(p.name for p in work.iterdir() if p.name not in ("configs", "experiments"))
    unnamed = [name for name in left if name not in TEXT]
    assert not unnamed, f"README line {chain[-1].line} leaves {unnamed} behind, never named"
