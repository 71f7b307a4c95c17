"""Reference policies and policy validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from imitation_meg import policies
from imitation_meg.envs import cliff_world, random_mdp


def test_builders_are_distributions_of_shape_h_s_a():
    mdp = cliff_world(horizon=7)
    for pi in (
        policies.uniform(mdp),
        policies.optimal(mdp),
        policies.anti_optimal(mdp),
        policies.epsilon_greedy(mdp, 0.3),
        policies.soft_optimal(mdp, 0.5),
    ):
        assert pi.shape == (7, 40, 4) and pi.dtype == th.float64
        th.testing.assert_close(pi.sum(-1), th.ones(7, 40, dtype=th.float64))


def test_epsilon_greedy_is_the_mixture():
    # An independent backward induction in numpy (dense T, argmax; this state-action utility has
    # no ties)
    # gives the greedy action of every (t, s): epsilon-greedy puts 1 - eps + eps / A on it and
    # eps / A on the others.
    mdp = random_mdp(10, 3, 4, utility="state_action", seed=1)
    T, U = mdp.dense_transition().numpy(), mdp.utility.numpy()
    V = np.zeros(10)
    greedy = np.zeros((4, 10), dtype=int)
    for t in range(3, -1, -1):
        Q = U + T @ V
        srt = np.sort(Q, axis=1)
        assert (srt[:, -1] - srt[:, -2] > 1e-9).all()  # no ties: the argmax is unique
        greedy[t], V = Q.argmax(1), Q.max(1)
    eps = 0.25
    expected = np.full((4, 10, 3), eps / 3)
    np.put_along_axis(expected, greedy[..., None], 1 - eps + eps / 3, axis=-1)
    np.testing.assert_allclose(policies.epsilon_greedy(mdp, eps).numpy(), expected, rtol=1e-15)
    th.testing.assert_close(policies.epsilon_greedy(mdp, 1.0), policies.uniform(mdp))


def test_optimal_policy_walks_to_the_goal():
    # On CliffWorld the optimal first move from the start goes down-right (action 3), away
    # from the cliff.
    mdp = cliff_world(horizon=30)
    assert policies.optimal(mdp)[0, 0].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_optimal_for_other_utility_and_ties():
    mdp = random_mdp(5, 2, 3, seed=2)
    flat = np.zeros(5)
    th.testing.assert_close(policies.optimal(mdp, flat), policies.uniform(mdp))
    th.testing.assert_close(policies.anti_optimal(mdp), policies.optimal(mdp, -mdp.utility))


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        (np.ones((3, 2)), ValueError, "must have shape"),
        (np.full((5, 2), 0.7), ValueError, "sum to"),
        (np.array([[1.5, -0.5]] * 5), ValueError, "negative probabilities"),
        (np.full((5, 2), np.nan), ValueError, "NaN"),
        ("uniform", TypeError, "numeric"),
    ],
)
def test_as_policy_rejects_bad_input(bad, exc, match):
    mdp = random_mdp(5, 2, 3)
    with pytest.raises(exc, match=match):
        policies.as_policy(bad, mdp)


def test_as_policy_renormalises_within_tolerance():
    mdp = random_mdp(5, 2, 3)
    pi = np.full((5, 2), 0.5 + 2e-6)
    out = policies.as_policy(pi, mdp)
    th.testing.assert_close(out.sum(-1), th.ones(5, dtype=th.float64), rtol=0, atol=1e-15)


def test_epsilon_validation():
    mdp = random_mdp(5, 2, 3)
    with pytest.raises(ValueError, match=r"epsilon must lie in \[0, 1\]"):
        policies.epsilon_greedy(mdp, 1.2)
    with pytest.raises(TypeError, match="epsilon must be a float"):
        policies.epsilon_greedy(mdp, "0.1")


def test_first_tie_break_is_deterministic_argmax():
    mdp = cliff_world(horizon=6, goal_region=4)
    uni = policies.optimal(mdp)
    first = policies.optimal(mdp, tie_break="first")
    assert ((first == 0) | (first == 1)).all()
    # The chosen action is always one of the tied best actions, the lowest-index one.
    chosen = first.argmax(-1)
    assert (th.gather(uni, -1, chosen.unsqueeze(-1)) > 0).all()
    assert (chosen == (uni > 0).to(th.int8).argmax(-1)).all()
    assert (uni < 1).any()  # there are ties to break
    with pytest.raises(ValueError, match="tie_break must be"):
        policies.optimal(mdp, tie_break="random")
