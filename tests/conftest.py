"""Shared fixtures: a seeded generator and single-threaded torch (the CI machine has 2 cores)."""

from __future__ import annotations

import math
import os
import pathlib
from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import settings

th.set_num_threads(1)


# Property tests draw the same examples on every run by default, so a landing never depends on
# the luck of the draw; ``HYPOTHESIS_PROFILE=explore make test`` draws fresh, and more, examples
# (a failure there prints the example to pin as a regression test).
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator seeded with 0 for each test."""
    return np.random.default_rng(0)


#: Every path of the transition operator's products (see ``imitation_meg.core.kernels.operators``).
LAYOUTS = ("dense", "csr", "scipy", "state_major")


@pytest.fixture
def torch_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch MEG passes on every MDP: no compiled whole pass on small MDPs (numba's, see
    ``imitation_meg.core.kernels.fused``), as on an install without the ``fast`` extra."""
    from imitation_meg.core.kernels import fused as _fused

    monkeypatch.setattr(_fused, "SMALL_MAX_WORK", -1)


@pytest.fixture(params=LAYOUTS)
def layout(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, torch_passes: None
) -> str:
    """Force one operator path on the MDPs a test builds after requesting this fixture (the
    state-major path also without the dense state-major matrix, as on large MDPs), with the
    torch MEG passes (whose products the layouts are)."""
    from imitation_meg.core.kernels import operators as _operators

    monkeypatch.setattr(_operators, "LAYOUT_OVERRIDE", request.param)
    if request.param == "state_major":
        monkeypatch.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)
    return str(request.param)


# ------------------------------------------------------------------------- the suite's budget
# The default run (``make test``: every test not marked ``expensive``) has a CPU budget, so the
# suite cannot grow unnoticed: a new feature pays for its tests by making others cheaper or by
# marking its slow ones ``expensive``. CPU time (the process and the subprocesses it waited for)
# is counted, not wall time, so a busy machine does not fail the run; it is expressed in units of
# a fixed calibration workload (torch products and a Python loop, about 0.1 s here) so that a
# slower or faster machine scales both alike. The figure is printed after every full default
# run; ``IMITATION_MEG_SUITE_BUDGET=0`` reports it without enforcing it.

#: The default run's budget in calibration units (docs/development.md states the measurement).
SUITE_BUDGET_UNITS = 9000.0


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _calibration_seconds() -> float:
    """CPU seconds of a fixed workload (best of three)."""
    import time

    best = math.inf
    for _ in range(3):
        t0 = time.process_time()
        g = th.Generator().manual_seed(0)
        x = th.randn(128, 128, dtype=th.float64, generator=g)
        for _ in range(400):
            x = th.tanh(x @ x / 128)
        s = 0
        for i in range(400_000):
            s += i * i % 7
        best = min(best, time.process_time() - t0)
    return best


def _is_full_default_run(config: pytest.Config) -> bool:
    """``make test``: the default marker selection over the whole ``tests`` folder, no ``-k``."""
    if config.option.markexpr != "not expensive" or config.option.keyword:
        return False
    root = pathlib.Path(str(config.rootpath)) / "tests"
    return [pathlib.Path(a).resolve() for a in config.args] in ([], [root.resolve()])


_TEST_CPU: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    t0 = _cpu_seconds()
    yield
    _TEST_CPU[item.nodeid] = _cpu_seconds() - t0


def _budget_report(config: pytest.Config) -> tuple[float, str] | None:
    if not _is_full_default_run(config) or not _TEST_CPU:
        return None
    total = sum(_TEST_CPU.values())
    unit = _calibration_seconds()
    units = total / unit
    top = sorted(_TEST_CPU.items(), key=lambda kv: -kv[1])[:8]
    lines = [
        (
            f"suite budget: {len(_TEST_CPU)} tests took {total:.0f} s of CPU = {units:.0f} "
            f"calibration units of {unit:.3f} s (budget {SUITE_BUDGET_UNITS:.0f})"
        ),
        "the most expensive tests (CPU s):",
        *(f"  {cpu:7.1f}  {nodeid}" for nodeid, cpu in top),
    ]
    return units, "\n".join(lines)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    report = _budget_report(session.config)
    if report is None:
        return
    units, text = report
    session.config.stash[_BUDGET_TEXT] = text
    enforce = os.environ.get("IMITATION_MEG_SUITE_BUDGET", "1") != "0"
    if enforce and units > SUITE_BUDGET_UNITS and exitstatus == 0:
        session.config.stash[_BUDGET_TEXT] = (
            text + "\nFAILED: the default run is over its budget; make tests cheaper or mark "
            "the slow ones `expensive` (IMITATION_MEG_SUITE_BUDGET=0 reports without failing)."
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BUDGET_TEXT = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    text = config.stash.get(_BUDGET_TEXT, None)
    if text:
        terminalreporter.write_line(text)
