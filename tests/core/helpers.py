"""Helpers shared by the core's tests: hypothesis draws of random MDPs, brute-force suprema."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar


def mdp_sizes(
    *, S: tuple[int, int], A: tuple[int, int], H: tuple[int, int], **more: Any
) -> dict[str, Any]:
    """Keyword strategies for ``@given``: a seed and the sizes ``S``, ``A``, ``H`` of a random
    MDP, each drawn from its inclusive range, beside the ``more`` strategies given."""
    return {
        "seed": st.integers(0, 10_000),
        "S": st.integers(*S),
        "A": st.integers(*A),
        "H": st.integers(*H),
        **more,
    }


def brute_sup(f: Any, spread: float, bound: float, *, n_grid: int = 91) -> float:
    """``sup_beta f(beta) + bound`` over finite betas: a grid of ``n_grid`` points per sign up
    to ``|beta| * spread = 1e6``, then a bounded scalar search between the best grid point's
    neighbours."""
    half = np.logspace(-3, 6, n_grid) / spread
    grid = np.sort(np.concatenate([-half, [0.0], half]))
    vals = [f(b) for b in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    found = minimize_scalar(
        lambda b: -f(b),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-12 * max(1.0, abs(grid[i]))},
    )
    return max(vals[i], -found.fun) + bound
