"""The Makefile's install steps say what they install and keep pip's output readable: one line per
package pip collects, pip's errors, a failing pip failing the step, the full output in a log."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

# pip's own lines, as it prints them on this machine (two indexes, one without the package)
PIP_OUTPUT = """\
Looking in indexes: https://pypi.org/simple, file:///opt/pypi/simple
WARNING: Location 'file:///opt/pypi/simple/filelock/' is ignored: it is neither a file nor a directory.
Collecting filelock (from torch==2.13.0)
  Downloading filelock-4.3.1-py3-none-any.whl (244 kB)
WARNING: Location 'file:///opt/pypi/simple/torch/' is ignored: it is neither a file nor a directory.
Processing /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
Installing collected packages: filelock, torch
Successfully installed filelock-4.3.1 torch-2.13.0
"""


def _make(tmp_path: pathlib.Path, recipe: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pip.txt").write_text(PIP_OUTPUT)
    mk = tmp_path / "t.mk"
    mk.write_text(f"include {ROOT / 'Makefile'}\nt:\n\t@{recipe} | $(call SHOW,{tmp_path})\n")
    return subprocess.run(
        ["make", "-s", "-f", str(mk), "t"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_install_says_what_it_installs_and_how_long_it_takes(tmp_path):
    plan = subprocess.run(
        ["make", "-n", "install", f"VENV={tmp_path / 'v'}"],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "--quiet" not in plan and "--progress-bar off" in plan
    assert "about 115 packages" in plan and "5 minutes" in plan
    assert plan.count("pip install") == 3 and plan.count("install.log") >= 3


def test_pip_output_is_shown_one_line_per_package_and_kept_in_the_log(tmp_path):
    done = _make(tmp_path, f"cat {tmp_path / 'pip.txt'}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "      1 filelock",
        "      2 torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "    installing 2 packages ...",
        "    installed 2 packages",
    ]
    assert (tmp_path / "install.log").read_text() == PIP_OUTPUT  # the notes stay in the log


def test_a_failing_pip_fails_the_step_with_its_error_and_the_log(tmp_path):
    error = "ERROR: No matching distribution found for nope"
    done = _make(tmp_path, f"{{ cat {tmp_path / 'pip.txt'}; echo '{error}'; exit 1; }}")
    assert done.returncode != 0
    assert error in done.stdout.splitlines()
    assert f"pip failed; its full output is in {tmp_path}/install.log" in done.stdout
