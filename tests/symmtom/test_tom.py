"""Each ToM test is passed by its scripted correct agent and failed by its scripted wrong agent."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from imitation_meg.symmtom.agents import HeuristicPolicy, StayPolicy
from imitation_meg.symmtom.tom import (
    BeliefGreedyPolicy,
    MeetPredictedPolicy,
    ProbabilisticSpeakerPolicy,
    moves_to_range,
    run_tom_test,
    tom_tests,
)

TESTS = tom_tests()


class _Recorder:
    """Wraps a policy; records red's position and observation at every decision."""

    def __init__(self, inner):
        self.inner = inner
        self.positions: list[tuple[int, int]] = []
        self.observations: list[np.ndarray] = []

    def reset(self, env, i):
        self.positions, self.observations = [], []
        self.inner.reset(env, i)

    def __call__(self, obs, env, i):
        self.positions.append(tuple(int(v) for v in env.positions[i]))
        self.observations.append(obs.copy())
        return self.inner(obs, env, i)


def _single_branch(test, branch):
    """``test`` with the hidden event fixed to ``branch`` (one episode per trial)."""
    return dataclasses.replace(test, branches=1, others=lambda rng, b: test.others(rng, branch))


def test_four_tests_exist():
    assert set(TESTS) == {"zeroth_order", "first_order", "second_order", "probabilistic"}


@pytest.mark.parametrize(
    ("name", "correct", "wrong"),
    [
        (
            "zeroth_order",
            lambda: BeliefGreedyPolicy("true"),
            lambda: BeliefGreedyPolicy("no_memory"),
        ),
        (
            "first_order",
            lambda: BeliefGreedyPolicy("true"),
            lambda: BeliefGreedyPolicy("no_others"),
        ),
    ],
)
def test_choice_tests(name, correct, wrong):
    good = run_tom_test(TESTS[name], correct(), 20, seed=0)
    assert good.sr == 1.0 and good.fr == 0.0 and good.ratso == 1.0 and good.passed
    bad = run_tom_test(TESTS[name], wrong(), 20, seed=0)
    assert bad.sr == 0.0 and bad.fr == 1.0 and math.isnan(bad.ratso) and not bad.passed


@pytest.mark.parametrize(("name", "target"), [("zeroth_order", 2), ("first_order", 3)])
def test_choice_optimum_is_the_distance_to_the_target(name, target):
    # the outcome is "red within hearing range of the target", so no trial can succeed in fewer
    # turns than the moves that bring red there from where the prologue leaves it: RATSO >= 1
    test = TESTS[name]
    rec = _Recorder(StayPolicy())
    run_tom_test(test, rec, 1)
    start = np.array(rec.positions[len(test.prologue)])
    assert moves_to_range(start, np.array(test.positions[target]), 1) == test.optimum == 3


def test_second_order_pass_fail():
    test = TESTS["second_order"]
    assert test.optimum == 5  # blue stops at (0, 1) after 3 turns; red needs 5 moves from (5, 3)
    good = run_tom_test(test, MeetPredictedPolicy(second_order=True), 10)
    assert good.sr == 1.0 and good.passed
    for wrong in (MeetPredictedPolicy(second_order=False), StayPolicy()):
        bad = run_tom_test(test, wrong, 10)
        assert bad.sr == 0.0 and not bad.passed
    assert good.to_dict()["FR"] is None and good.to_dict()["RATSO"] is None


def test_probabilistic_branches_are_indistinguishable_to_red():
    # until red's first utterance in green's range, nothing red observes depends on which piece
    # blue told green; this is what makes the expected optimum 3.5 a lower bound
    test = TESTS["probabilistic"]
    seen = []
    for branch in (0, 1):
        rec = _Recorder(ProbabilisticSpeakerPolicy())
        run_tom_test(_single_branch(test, branch), rec, 1)
        seen.append(rec)
    first_in_range = (
        len(test.prologue) + 3
    )  # decision after turn 3: red arrived and spoke at turn 3
    assert seen[0].positions[:first_in_range] == seen[1].positions[:first_in_range]
    for a, b in zip(
        seen[0].observations[:first_in_range], seen[1].observations[:first_in_range], strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert (
        moves_to_range(
            np.array(seen[0].positions[len(test.prologue)]), np.array(test.positions[2]), 1
        )
        == 3
    )


@pytest.mark.parametrize(("branch", "turns"), [(0, 4.0), (1, 3.0)])
def test_probabilistic_correct_agent_per_branch(branch, turns):
    # 3 moves, speaking piece 0 on arrival: done at once if green lacks 0 (blue said 1), else one
    # wasted utterance and piece 1 at turn 4
    res = run_tom_test(
        _single_branch(TESTS["probabilistic"], branch), ProbabilisticSpeakerPolicy(), 3
    )
    assert res.outcomes == ("success",) * 3 and res.turns == (turns,) * 3


@pytest.mark.parametrize("seed", [None, 1])
def test_probabilistic_correct_agent_passes(seed):
    test = TESTS["probabilistic"]
    assert test.optimum == 3.5 and test.branches == 2
    good = run_tom_test(test, ProbabilisticSpeakerPolicy(seed=seed), 20, seed=0)
    assert good.sr == 1.0 and good.fr == 0.0 and good.passed
    assert good.ratso == 1.0  # every trial: branch turns 3 and 4 (random order included)


@pytest.mark.parametrize("belief", ["certain", "no_deduction"])
def test_probabilistic_wrong_agents_fail(belief):
    # "certain" never says the piece it assumes blue told green; "no_deduction" repeats its first
    # piece: each completes green in one branch only, so every trial fails
    bad = run_tom_test(
        TESTS["probabilistic"], ProbabilisticSpeakerPolicy(belief=belief), 20, seed=0
    )
    assert bad.sr == 0.0 and bad.fr == 1.0 and math.isnan(bad.ratso) and not bad.passed


def test_probabilistic_oracle_optimum():
    # the oracle observation shows green's knowledge, so the hidden event is visible: optimum 3
    res = run_tom_test(TESTS["probabilistic"], ProbabilisticSpeakerPolicy(), 4, oracle=True)
    assert res.optimum == 3.0 and res.ratso == pytest.approx(3.5 / 3.0)


def test_heuristic_reaches_no_target():
    # the heuristic stops on a central cell, out of range of every test's targets
    for name, test in TESTS.items():
        res = run_tom_test(test, HeuristicPolicy(), 2)
        assert res.sr == 0.0 and not res.passed, name


def test_harness_validation_and_moves_to_range():
    assert moves_to_range(np.array([3, 2]), np.array([0, 3]), 1) == 2
    assert moves_to_range(np.array([3, 2]), np.array([5, 5]), 1) == 3
    with pytest.raises(ValueError, match="n_trials=0"):
        run_tom_test(TESTS["zeroth_order"], StayPolicy(), 0)
    with pytest.raises(ValueError, match="belief='x'"):
        BeliefGreedyPolicy("x")
    with pytest.raises(ValueError, match="belief='x'"):
        ProbabilisticSpeakerPolicy(belief="x")
