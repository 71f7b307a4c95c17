"""Random tabular MDPs with sparse (fixed-branching) transitions, for tests and benchmarks."""

from __future__ import annotations

import numpy as np
import torch as th

from imitation_meg.core.mdp import TabularMDP

__all__ = ["random_mdp"]


def random_mdp(
    n_states: int,
    n_actions: int,
    horizon: int | None,
    *,
    branching: int | None = None,
    utility: str = "state",
    discount: float = 1.0,
    seed: int | np.random.Generator = 0,
    dtype: th.dtype = th.float64,
    device: th.device | str | None = None,
) -> TabularMDP:
    """A random MDP: each (s, a) moves to ``branching`` random successors with Dirichlet weights.

    Args:
        n_states: ``S >= 1``.
        n_actions: ``A >= 1``.
        horizon: ``H >= 1``, or None for a discounted infinite-horizon MDP (``discount < 1``).
        branching: successors per state-action (``B``, with replacement merged by weight);
            default ``min(S, 4)``.
        utility: ``"state"`` for a standard-normal ``(S,)`` utility, ``"state_action"`` for
            ``(S, A)``, ``"none"`` for no utility.
        discount: the MDP's discount.
        seed: an integer seed or a ``np.random.Generator``.
        dtype, device: tensor options.

    Returns:
        A :class:`TabularMDP` whose transitions are held sparsely (``(S, A, B)``), with a random
        initial distribution. Memory is ``O(S * A * B)``, so a million states fit easily.

    Raises:
        ValueError: on non-positive sizes or an unknown ``utility`` kind.
    """
    sizes = (("n_states", n_states), ("n_actions", n_actions), ("horizon", horizon))
    for nm, v in sizes if horizon is not None else sizes[:2]:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}.")
    B = min(n_states, 4) if branching is None else int(branching)
    if B < 1:
        raise ValueError(f"branching must be >= 1, got {branching}.")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    next_state = rng.integers(0, n_states, size=(n_states, n_actions, B), dtype=np.int64)
    prob = rng.dirichlet(np.ones(B), size=(n_states, n_actions))
    p0 = rng.dirichlet(np.ones(min(n_states, 8)))
    init = np.zeros(n_states)
    init[rng.choice(n_states, size=p0.size, replace=False)] = p0
    if utility == "state":
        u = rng.standard_normal(n_states)
    elif utility == "state_action":
        u = rng.standard_normal((n_states, n_actions))
    elif utility == "none":
        u = None
    else:
        raise ValueError(f"utility must be 'state', 'state_action' or 'none', got {utility!r}.")
    return TabularMDP(
        (next_state, prob),
        u,
        horizon,
        init,
        discount,
        dtype=dtype,
        device=device,
        name=f"Random(S={n_states}, A={n_actions}, B={B}, H={horizon})",
    )
