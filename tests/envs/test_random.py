"""Random sparse MDPs for tests and benchmarks."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from imitation_meg.envs import random_mdp


def test_shapes_rows_and_initial_support():
    mdp = random_mdp(50, 3, 7, seed=1)
    assert (mdp.n_states, mdp.n_actions, mdp.horizon, mdp.branching) == (50, 3, 7, 4)
    np.testing.assert_allclose(mdp.prob.sum(-1).numpy(), 1.0, atol=1e-12)
    assert int((mdp.initial_state_dist > 0).sum()) == 8
    assert mdp.initial_state_dist.sum() == pytest.approx(1.0)
    assert tuple(mdp.utility.shape) == (50,)


def test_seeds_reproduce_and_differ():
    a, b, c = (
        random_mdp(20, 2, 3, seed=5),
        random_mdp(20, 2, 3, seed=5),
        random_mdp(20, 2, 3, seed=6),
    )
    assert th.equal(a.next_state, b.next_state) and th.equal(a.prob, b.prob)
    assert not th.equal(a.prob, c.prob)
    gen = np.random.default_rng(5)
    assert th.equal(random_mdp(20, 2, 3, seed=gen).prob, a.prob)


@pytest.mark.parametrize(
    ("kind", "shape"), [("state", (6,)), ("state_action", (6, 2)), ("none", None)]
)
def test_utility_kinds(kind, shape):
    mdp = random_mdp(6, 2, 2, utility=kind)
    assert (None if mdp.utility is None else tuple(mdp.utility.shape)) == shape


def test_small_state_spaces_and_explicit_branching():
    assert random_mdp(2, 2, 2).branching == 2
    mdp = random_mdp(10, 2, 2, branching=1, discount=0.9, dtype=th.float32)
    assert mdp.branching == 1 and mdp.discount == 0.9 and mdp.dtype == th.float32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_states": 0}, "n_states must be a positive integer"),
        ({"n_actions": 1.5}, "n_actions must be a positive integer"),
        ({"horizon": True}, "horizon must be a positive integer"),
        ({"branching": 0}, "branching must be >= 1"),
        ({"utility": "reward"}, "utility must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"n_states": 4, "n_actions": 2, "horizon": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        random_mdp(**args)
