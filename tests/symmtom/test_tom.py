"""Each ToM test is passed by its scripted correct agent and failed by its scripted wrong agent."""

from __future__ import annotations

import math

import numpy as np
import pytest

from imitation_meg.symmtom.agents import StayPolicy
from imitation_meg.symmtom.tom import (
    BeliefGreedyPolicy,
    MeetPredictedPolicy,
    ProbabilisticSpeakerPolicy,
    moves_to_range,
    run_tom_test,
    tom_tests,
)

TESTS = tom_tests()


def test_four_tests_exist():
    assert set(TESTS) == {"zeroth_order", "first_order", "second_order", "probabilistic"}


@pytest.mark.parametrize(
    ("name", "correct", "wrong"),
    [
        ("zeroth_order", lambda: BeliefGreedyPolicy("true"), lambda: BeliefGreedyPolicy("no_memory")),
        ("first_order", lambda: BeliefGreedyPolicy("true"), lambda: BeliefGreedyPolicy("no_others")),
    ],
)
def test_choice_tests(name, correct, wrong):
    good = run_tom_test(TESTS[name], correct(), 20, seed=0)
    assert good.sr == 1.0 and good.fr == 0.0 and good.ratso == 1.0
    bad = run_tom_test(TESTS[name], wrong(), 20, seed=0)
    assert bad.sr == 0.0 and bad.fr == 1.0 and math.isnan(bad.ratso)


def test_second_order_pass_fail():
    test = TESTS["second_order"]
    assert test.optimum == 5  # blue stops at (0, 1) after 3 turns; red needs 5 moves from (5, 3)
    assert run_tom_test(test, MeetPredictedPolicy(second_order=True), 10).sr == 1.0
    assert run_tom_test(test, MeetPredictedPolicy(second_order=False), 10).sr == 0.0
    assert run_tom_test(test, StayPolicy(), 10).sr == 0.0
    assert run_tom_test(test, MeetPredictedPolicy(second_order=True), 3).to_dict()["FR"] is None


def test_probabilistic_expected_one_and_a_half_utterances():
    test = TESTS["probabilistic"]
    good = run_tom_test(test, ProbabilisticSpeakerPolicy(seed=1), 400, seed=0)
    assert good.sr == 1.0 and good.fr == 0.0
    assert set(good.turns) == {2, 3}  # one move, then one or two utterances
    assert abs(good.ratso - 1.0) < 0.06  # mean turns 2.5 +- 3 standard errors (0.5 / sqrt(400) / 2.5 * 3)
    bad = run_tom_test(test, ProbabilisticSpeakerPolicy(adaptive=False), 400, seed=0)
    assert 0.4 < bad.sr < 0.6  # succeeds only when green happened to learn the other piece
    assert bad.to_dict()["FR"] is None


def test_harness_validation_and_moves_to_range():
    assert moves_to_range(np.array([3, 2]), np.array([0, 3]), 1) == 2
    assert moves_to_range(np.array([3, 2]), np.array([5, 5]), 1) == 3
    with pytest.raises(ValueError, match="n_trials=0"):
        run_tom_test(TESTS["zeroth_order"], StayPolicy(), 0)
    with pytest.raises(ValueError, match="belief='x'"):
        BeliefGreedyPolicy("x")
