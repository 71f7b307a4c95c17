"""Shared fixtures: a seeded generator and single-threaded torch (the CI machine has 2 cores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

th.set_num_threads(1)


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator seeded with 0 for each test."""
    return np.random.default_rng(0)
