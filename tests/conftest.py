"""Shared fixtures: a seeded generator and single-threaded torch (the CI machine has 2 cores)."""

from __future__ import annotations

import os

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


#: Every path of the transition operator's products (see ``imitation_meg._operators``).
LAYOUTS = ("dense", "csr", "scipy", "state_major")


@pytest.fixture
def torch_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch MEG passes on every MDP: no compiled whole pass on small MDPs (numba's, see
    ``imitation_meg._fused``), as on an install without the ``fast`` extra."""
    from imitation_meg import _fused

    monkeypatch.setattr(_fused, "SMALL_MAX_WORK", -1)


@pytest.fixture(params=LAYOUTS)
def layout(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, torch_passes: None
) -> str:
    """Force one operator path on the MDPs a test builds after requesting this fixture (the
    state-major path also without the dense state-major matrix, as on large MDPs), with the
    torch MEG passes (whose products the layouts are)."""
    from imitation_meg import _operators

    monkeypatch.setattr(_operators, "LAYOUT_OVERRIDE", request.param)
    if request.param == "state_major":
        monkeypatch.setattr(_operators, "DENSE_FAST_PATH_ENTRIES", 0)
    return str(request.param)
