"""Theory-of-mind tests for SymmToM: a harness and four tests with our own documented layouts.

The paper's test layouts were figures that are not available; the four layouts below are ours and
follow the paper's descriptions. In every test the *tested* agent is ``agent_0`` ("red"); the
others are scripted (immobile "gray" agents say their first-hand piece at every step; mobile "blue"
agents follow a fixed path). Each test starts with a *prologue* in which red's actions are scripted
too, while its policy is still called (its actions discarded) so that a policy with memory sees
every observation. Turns are counted from the end of the prologue.

Metrics (over trials): SR = fraction of trials that succeed, FR = fraction that fail (trials that
reach neither outcome within ``max_turns`` count in neither), RATSO = mean turns to succeed in
successful trials divided by the optimum. The optimum is a lower bound by construction: in the
three choice tests it is the fewest moves to the success target (the outcome is a distance test);
in the probabilistic test it is the least *expected* turns, and every trial plays both values of
the hidden event (see 4.), so no policy beats it in any trial as long as it acts on its observations
and its own state (a policy that reads the env's hidden state or draws from a global generator
could). A test is *passed* iff SR >= 0.95 and, where RATSO is reported,
RATSO <= 1.25 (:attr:`ToMTest.pass_sr`, :attr:`ToMTest.pass_ratso`).

Coordinates are ``(x, y)`` with ``+y`` up; ``w = 6`` and hearing range 1 throughout.

1. ``zeroth_order`` (n = 3, c = 3): red (owns 0) starts at (1, 3) next to gray L (owns 1, at (0, 3))
   and hears piece 1, then walks (scripted) to (3, 2). Gray R (owns 2) stands at (5, 5). If red
   remembers piece 1, R is worth 3 (hear 2, tell 0 and 1) at 3 moves against L's 1 (tell 0) at 2
   moves: go to R. A red that forgot sees 2 at both and goes to the closer L. Success = red within
   hearing range of R (optimum 3 turns), failure = within range of L.
2. ``first_order`` (n = 4, c = 4): red (owns 0) at (3, 2) exchanges pieces with blue (owns 1) at
   (2, 3); blue then steps to (1, 3), next to gray L (owns 2, at (0, 3)), out of red's hearing, and
   says 0 then 1. Gray R (owns 3) stands at (5, 5). A red that assumes blue shared optimally knows
   L now holds 0 and 1 (L worth 1, R worth 3 at one move more): go to R; a red without a model of
   others sees L worth 3 and closer. Success = range of R (optimum 3), failure = range of L or blue.
3. ``second_order`` (pass/fail, n = 3, c = 3): red (owns 0, also knows 2) at (5, 3); blue (owns 1)
   at (0, 4); gray G (owns 2) at (0, 0). Red and G exchanged piece 2 out of blue's hearing (given
   as the starting knowledge). Blue, believing red holds only piece 0, rates G (2 at 3 moves) over
   red (2 at 4 moves) and walks down to (0, 1); had blue known that red holds 2 it would come to
   red (3 at 4 moves). Red passes iff it meets blue (within hearing range) at the earliest possible
   turn, i.e. it walks towards G; waiting for blue fails.
4. ``probabilistic`` (n = 3, c = 3, 2 branches per trial): red (owns 0) at (2, 1) and blue (owns 1)
   at (2, 2) exchange pieces; blue walks (2, 3) -> (3, 3), into the range of green (owns 2, at
   (4, 4)) and out of red's, tells green one of red's two pieces, then walks away left. Red sees the
   meeting but cannot hear it; under blue's optimal play both pieces are equally likely. Red must
   complete green's knowledge of its pieces 0 and 1: 3 moves to green's range, then one utterance
   if its first piece is the one green lacks, two otherwise (the missing reward after a wasted
   utterance tells red, retroactively, that green had that piece). Every other utterance of blue is
   its own piece 1, so nothing red observes before its first utterance in green's range depends on
   which piece blue said (a test checks this). A trial plays both branches (blue said 0 / said 1)
   from the same env seed and a copy of the same policy state: it succeeds iff green is complete in
   both, its turns are the mean of the two (the expectation over the 50/50 event, computed exactly)
   and it fails when a branch reaches ``max_turns = 10`` incomplete. A policy that does not see the
   hidden event says the same first piece in both branches, so one branch takes at least 4 turns
   and the other at least 3: optimum 3.5, a per-trial lower bound (a randomised policy's generator is
   part of the copied state, so it draws the same first piece in both branches). (With ``oracle=True`` green's knowledge is observed, the event
   is visible and the optimum is 3.) The correct agent (:class:`ProbabilisticSpeakerPolicy`,
   ``belief="uncertain"``) gets 3 and 4: SR 1, RATSO 1. Wrong agents complete green in one branch
   only and so fail every trial: ``belief="certain"`` treats the unheard exchange as certain
   (assumes blue said its own piece 1 and never says it) and ``belief="no_deduction"`` repeats its
   first piece. Judging a trial on a single sampled branch, as before, let such agents succeed in
   half the trials, faster than the expected optimum (RATSO < 1). Limitation: with two equally
   likely pieces, any agent that says red's two pieces once each passes, with or without a model of
   the unheard exchange; the test separates agents that treat the exchange as certain or that
   cannot use their own utterance history, not finer probability estimates.

The reference policies (the correct and wrong agents of each test) live in
:mod:`imitation_meg.symmtom.tom_policies` and are importable from here.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from imitation_meg.symmtom.agents import Policy, ScriptedPolicy
from imitation_meg.symmtom.env import SymmToMEnv, SymmToMWarning
from imitation_meg.symmtom.tom_policies import (
    MX,
    MY,
    NONE,
    PX,
    PY,
    BeliefGreedyPolicy,
    GrayPolicy,
    MeetPredictedPolicy,
    ProbabilisticSpeakerPolicy,
    moves_to_range,
)

__all__ = [
    "BeliefGreedyPolicy",
    "GrayPolicy",
    "MeetPredictedPolicy",
    "ProbabilisticSpeakerPolicy",
    "ToMResult",
    "ToMTest",
    "moves_to_range",
    "run_tom_test",
    "tom_tests",
]


@dataclasses.dataclass(frozen=True)
class ToMTest:
    """One theory-of-mind test (see the module docstring for the four layouts).

    Attributes:
        name, description: identification.
        n_agents, width, n_pieces: environment sizes (hearing range 1).
        positions, bases: ``(n, 2)`` cells; first_hand: ``(n, c)`` 0/1; knowledge: ``(n, c)`` or None.
        prologue: red's scripted actions before the test starts.
        others: ``(rng, branch) -> [policy of agent 1, ..., agent n-1]``, a fresh set per episode;
            ``rng`` is seeded identically for every branch of one trial.
        max_turns: turns after the prologue.
        optimum: the least (expected) turns to succeed, for RATSO; a lower bound on the turns of
            every successful trial (for a multi-branch test: on the branch mean, for a policy that
            acts on its observations and its own state only).
        outcome: ``(env, turn) -> "success" | "failure" | None`` after every turn (turn from 1).
        metrics: which of SR, FR, RATSO the test reports.
        branches: episodes per trial, one per value of a hidden event (``others`` gets the branch
            index); a trial succeeds iff every branch does, fails iff one fails, and its turns are
            the mean over branches (the expectation over the hidden event, computed exactly).
        oracle_optimum: the optimum for an oracle observation, which may reveal the hidden event
            (None: same as ``optimum``).
        pass_sr, pass_ratso: the test is passed iff SR >= ``pass_sr`` and, where RATSO is
            reported, RATSO <= ``pass_ratso``.
    """

    name: str
    description: str
    n_agents: int
    width: int
    n_pieces: int
    positions: tuple[tuple[int, int], ...]
    bases: tuple[tuple[int, int], ...]
    first_hand: tuple[tuple[int, ...], ...]
    knowledge: tuple[tuple[int, ...], ...] | None
    prologue: tuple[tuple[int, int], ...]
    others: Callable[[np.random.Generator, int], list[Policy]]
    max_turns: int
    optimum: float
    outcome: Callable[[SymmToMEnv, int], str | None]
    metrics: tuple[str, ...] = ("SR", "FR", "RATSO")
    branches: int = 1
    oracle_optimum: float | None = None
    pass_sr: float = 0.95
    pass_ratso: float = 1.25


@dataclasses.dataclass(frozen=True)
class ToMResult:
    """Result of :func:`run_tom_test`: rates over ``n_trials``, the pass verdict and the per-trial record.

    ``turns[k]`` is trial ``k``'s turn of its outcome (the branch mean for a multi-branch test;
    ``-1`` when a trial reached neither outcome or, for a multi-branch trial, did not succeed).
    """

    name: str
    n_trials: int
    sr: float
    fr: float
    ratso: float
    passed: bool
    optimum: float
    outcomes: tuple[str, ...]
    turns: tuple[float, ...]
    metrics: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "test": self.name,
            "trials": self.n_trials,
            "SR": self.sr,
            "FR": self.fr if "FR" in self.metrics else None,
            "RATSO": self.ratso if "RATSO" in self.metrics else None,
            "optimum": self.optimum if "RATSO" in self.metrics else None,
            "pass": self.passed,
        }


def _play(
    test: ToMTest,
    env: SymmToMEnv,
    policy: Policy,
    others: list[Policy],
    seed: int,
    observe: Callable[[np.ndarray], np.ndarray] | None,
) -> tuple[str, int]:
    """One episode of ``test``: the outcome (``"none"`` if neither) and its turn (-1 if none)."""
    options: dict = {
        "positions": test.positions,
        "bases": test.bases,
        "first_hand": test.first_hand,
    }
    if test.knowledge is not None:
        options["knowledge"] = test.knowledge
    obs, _ = env.reset(seed=seed, options=options)
    policy.reset(env, 0)
    for k, pol in enumerate(others, start=1):
        pol.reset(env, k)
    for t in range(len(test.prologue) + test.max_turns):
        in_prologue = t < len(test.prologue)
        chosen = policy(obs["agent_0"] if observe is None else observe(obs["agent_0"]), env, 0)
        actions = {"agent_0": np.asarray(test.prologue[t] if in_prologue else chosen)}
        for k, pol in enumerate(others, start=1):
            actions[f"agent_{k}"] = pol(obs[f"agent_{k}"], env, k)
        obs, *_ = env.step(actions)
        if in_prologue:
            continue
        turn = t - len(test.prologue) + 1
        verdict = test.outcome(env, turn)
        if verdict is not None:
            return verdict, turn
    return "none", -1


def run_tom_test(
    test: ToMTest,
    policy: Policy,
    n_trials: int,
    *,
    seed: int = 0,
    oracle: bool = False,
    observe: Callable[[np.ndarray], np.ndarray] | None = None,
) -> ToMResult:
    """Run ``n_trials`` trials of ``test`` with ``policy`` playing red (``agent_0``).

    In a multi-branch test every branch of a trial starts from a deep copy of the policy as it was
    at the start of the trial (same internal generator state) and from the same env seed, so that
    the branches differ only in the hidden event.

    Args:
        test: the test.
        policy: the tested policy (``reset(env, 0)`` before every episode).
        n_trials: number of trials.
        seed: seeds the env (collision ties) and the scripted agents' per-trial draws.
        oracle: build the env with the oracle observation (for oracle-trained policies); RATSO then
            uses ``test.oracle_optimum`` where the test sets one.
        observe: optional transform of red's observation before the policy sees it (None: identity).

    Returns:
        :class:`ToMResult`.

    Raises:
        ValueError: ``n_trials`` is not a positive int.
    """
    if not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials={n_trials!r} must be a positive int.")
    env = _test_env(test, oracle)
    rng = np.random.default_rng(seed)
    outcomes: list[str] = []
    turns: list[float] = []
    for trial in range(n_trials):
        others_seed = int(rng.integers(2**32))
        snapshot = copy.deepcopy(policy) if test.branches > 1 else policy
        branch_results = []
        for b in range(test.branches):
            pol = policy if b == 0 else copy.deepcopy(snapshot)
            others = test.others(np.random.default_rng(others_seed), b)
            branch_results.append(_play(test, env, pol, others, seed + trial, observe))
        result, when = _trial_verdict(branch_results)
        outcomes.append(result)
        turns.append(when)
    return _result(test, oracle, outcomes, turns)


def _test_env(test: ToMTest, oracle: bool) -> SymmToMEnv:
    """The environment of ``test``, long enough for the prologue and the turns."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SymmToMWarning)
        return SymmToMEnv(
            test.n_agents,
            test.width,
            test.n_pieces,
            oracle=oracle,
            max_steps=len(test.prologue) + test.max_turns + 1,
        )


def _trial_verdict(branch_results: list[tuple[str, int]]) -> tuple[str, float]:
    """A trial succeeds iff every branch does (turns: their mean), fails iff one fails."""
    verdicts = [v for v, _ in branch_results]
    if all(v == "success" for v in verdicts):
        return "success", float(np.mean([w for _, w in branch_results]))
    if "failure" in verdicts:
        return "failure", float(min(w for v, w in branch_results if v == "failure"))
    return "none", -1.0


def _result(test: ToMTest, oracle: bool, outcomes: list[str], turns: list[float]) -> ToMResult:
    """SR, FR, RATSO and the pass verdict of the trials' outcomes and turns."""
    outcomes_arr = np.array(outcomes)
    succ = outcomes_arr == "success"
    optimum = test.oracle_optimum if oracle and test.oracle_optimum is not None else test.optimum
    ratso = float(np.mean(np.array(turns)[succ]) / optimum) if succ.any() else float("nan")
    sr = float(succ.mean())
    passed = sr >= test.pass_sr and ("RATSO" not in test.metrics or ratso <= test.pass_ratso)
    return ToMResult(
        name=test.name,
        n_trials=len(outcomes),
        sr=sr,
        fr=float((outcomes_arr == "failure").mean()),
        ratso=ratso,
        passed=bool(passed),
        optimum=float(optimum),
        outcomes=tuple(outcomes),
        turns=tuple(turns),
        metrics=test.metrics,
    )


def _reach(
    success: Sequence[int], failure: Sequence[int]
) -> Callable[[SymmToMEnv, int], str | None]:
    def outcome(env: SymmToMEnv, turn: int) -> str | None:
        near = env.in_range()[0]
        if any(near[j] for j in success):
            return "success"
        if any(near[j] for j in failure):
            return "failure"
        return None

    return outcome


def _earliest_meeting(
    start: tuple[int, int], path: Sequence[tuple[int, int]], width: int, hearing: int
) -> int:
    """Earliest turn ``t >= 1`` at which a walker from ``start`` can be within range of ``path[t-1]``."""
    for t in range(1, 10 * width):
        target = np.array(path[min(t, len(path)) - 1])
        if moves_to_range(np.array(start), target, hearing) <= t:
            return t
    raise AssertionError("unreachable")


def _layout_test(
    *,
    name: str,
    positions: tuple[tuple[int, int], ...],
    knowledge: tuple[tuple[int, ...], ...] | None = None,
    prologue: tuple[tuple[int, int], ...] = (),
    **rest: Any,
) -> ToMTest:
    """A test of the module docstring: ``w = 6``, as many pieces as agents, each agent owning its
    own piece first-hand (knowledge: the first-hand pieces unless given)."""
    n = len(positions)
    first_hand = tuple(tuple(int(i == j) for j in range(n)) for i in range(n))
    return ToMTest(
        name=name,
        n_agents=n,
        width=6,
        n_pieces=n,
        positions=positions,
        first_hand=first_hand,
        knowledge=knowledge,
        prologue=prologue,
        **rest,
    )


def tom_tests() -> dict[str, ToMTest]:
    """The four tests of the module docstring, keyed by name."""
    tests: dict[str, ToMTest] = {}
    tests["zeroth_order"] = _layout_test(
        name="zeroth_order",
        description="remember a piece heard 4 turns ago: go to the agent that still has something new",
        positions=((1, 3), (0, 3), (5, 5)),
        bases=((0, 0), (1, 0), (2, 0)),
        prologue=((NONE, 2), (PX, 2), (PX, 2), (MY, 2)),  # piece 2 is unknown to red: silent
        others=lambda rng, branch: [GrayPolicy(), GrayPolicy()],
        max_turns=12,
        optimum=3.0,
        outcome=_reach(success=[2], failure=[1]),
    )
    blue_first = ScriptedPolicy([(NONE, 1), (MX, 0), (NONE, 1)], after=(NONE, 1))
    tests["first_order"] = _layout_test(
        name="first_order",
        description="assume blue told gray L what it knows (unheard): go to gray R instead",
        positions=((3, 2), (2, 3), (0, 3), (5, 5)),
        bases=((0, 0), (1, 0), (2, 0), (3, 0)),
        prologue=((NONE, 0), (NONE, 0), (NONE, 0)),
        others=lambda rng, branch: [
            ScriptedPolicy(list(blue_first.actions), after=blue_first.after),
            GrayPolicy(),
            GrayPolicy(),
        ],
        max_turns=12,
        optimum=3.0,
        outcome=_reach(success=[3], failure=[1, 2]),
    )
    blue_path = [(0, 3), (0, 2), (0, 1)]
    earliest = _earliest_meeting((5, 3), blue_path, 6, 1)

    def second_order_outcome(env: SymmToMEnv, turn: int) -> str | None:
        if env.in_range()[0, 1]:
            return "success" if turn <= earliest else "failure"
        return "failure" if turn >= earliest else None

    tests["second_order"] = _layout_test(
        name="second_order",
        description="predict that blue (unaware red knows piece 2) heads for gray G: meet blue there",
        positions=((5, 3), (0, 4), (0, 0)),
        bases=((5, 0), (4, 0), (3, 0)),
        knowledge=((1, 0, 1), (0, 1, 0), (0, 0, 1)),
        others=lambda rng, branch: [ScriptedPolicy([(MY, 1)] * 3, after=(NONE, 1)), GrayPolicy()],
        max_turns=earliest,
        optimum=float(earliest),
        outcome=second_order_outcome,
        metrics=("SR",),
    )

    def prob_others(rng: np.random.Generator, branch: int) -> list[Policy]:
        # branch = the piece blue tells green at step 3, out of red's hearing; every other utterance
        # of blue is its own piece 1, so nothing red can hear depends on the branch
        blue = ScriptedPolicy(
            [(NONE, 1), (PY, 1), (PX, branch), (MX, 1), (MX, 1), (MX, 1)], after=(NONE, 1)
        )
        return [blue, GrayPolicy()]

    prob_max_turns = 10

    def prob_outcome(env: SymmToMEnv, turn: int) -> str | None:
        if env.knowledge[2, :2].all():
            return "success"
        return "failure" if turn >= prob_max_turns else None

    tests["probabilistic"] = _layout_test(
        name="probabilistic",
        description="green heard one of red's two pieces from blue (unheard, 50/50): tell it the other",
        branches=2,
        oracle_optimum=3.0,
        positions=((2, 1), (2, 2), (4, 4)),
        bases=((0, 5), (1, 5), (5, 0)),
        prologue=((NONE, 0), (NONE, 0), (NONE, 0)),
        others=prob_others,
        max_turns=prob_max_turns,
        optimum=3.5,
        outcome=prob_outcome,
    )
    return tests
