"""Bad input at every public entry point: a clear ``ValueError`` / ``TypeError`` or a correct
result, never a library's internal error or a silently wrong number.

The property test feeds malformed arrays (complex, object, empty, 0-d, ragged) in each array
argument of every function of ``imitation_meg.__all__`` that takes arrays or MDPs (and the
policy builders of ``imitation_meg.core.policies``; the continuous-action MDP, policies and MEG of
``imitation_meg.continuous``), and MDPs whose horizon no memory can hold. A
clear error is one the package raises itself, naming the problem: its innermost frame lies in
``imitation_meg`` (a numpy / torch error escaping from inside is a defect, a wrapped one is
fine). The named regressions of issue 38 follow.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg import continuous as cont
from imitation_meg import policies
from imitation_meg._validation import (
    MEMORY_CHECK_BYTES,
    BetaRangeWarning,
    check_horizon_memory,
    free_memory,
    horizon_bytes,
)
from imitation_meg.adapters import policy_table, resolve_policy
from imitation_meg.cid import Chance, Decision, Utility, examples
from imitation_meg.continuous import policies as cpolicies
from imitation_meg.continuous.densities import as_continuous_policy
from imitation_meg.report import meg_summary

PACKAGE = str(pathlib.Path(im.__file__).parent)
MDP = im.envs.cliff_world(width=3, height=2, horizon=4)  # 6 states, 4 actions
S, A, H = MDP.n_states, MDP.n_actions, MDP.horizon
PI = policies.epsilon_greedy(MDP, 0.3)[0].numpy()  # a valid stationary (S, A) policy
TRAJ = (np.zeros((2, H + 1), dtype=np.int64), np.zeros((2, H), dtype=np.int64))
#: A horizon no machine's memory holds the per-step tables of (6 states: about 0.5 PB).
HUGE = 10**13


def _malformed(kind: str, shape: tuple[int, ...]) -> Any:
    """A malformed stand-in for an array of ``shape``."""
    if kind == "complex":
        return np.full(shape, 1.0 / shape[-1] if shape else 0.5) + 0.25j
    if kind == "complex_tensor":
        return th.full(shape, 0.5, dtype=th.complex128)
    if kind == "object":
        arr = np.empty(shape, dtype=object)
        arr[...] = "0.5"
        return arr
    if kind == "empty":
        return np.zeros((0, *shape[1:]))
    if kind == "zero_d":
        return np.float64(0.5)
    if kind == "ragged":
        return [[0.5] * (shape[-1] if shape else 1), [0.5]]
    raise AssertionError(kind)


KINDS = ("complex", "complex_tensor", "object", "empty", "zero_d", "ragged")


def _box_transition(states: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """Three states; the action's sign picks the next state's odds (smooth in the action)."""
    logits = th.stack([actions[:, 0], -actions[:, 0], th.zeros_like(actions[:, 0])], dim=-1)
    return th.softmax(logits, dim=-1)


def _box_mdp(**kwargs: Any) -> Any:
    args: dict[str, Any] = {"low": [-1.0], "high": [1.0], "utility": [0.0, 1.0, 0.5]}
    args.update(kwargs)
    low, high = args.pop("low"), args.pop("high")
    return cont.ContinuousMDP(3, low, high, 2, _box_transition, **args)


BOX_MDP = _box_mdp()


def _box_meg(policy: Any, **kwargs: Any) -> Any:
    return cont.meg_continuous(policy, BOX_MDP, **kwargs)


def _mouse_policy(table: Any) -> dict[str, Any]:
    return {"D": table}


def _cid_with_cpd(cpd: Any) -> Any:
    return im.CID(
        [
            Chance("S", 2, cpd=cpd),
            Decision("D", 2, parents=["S"]),
            Utility("U", ["S", "D"], table=[[1.0, 0.0], [0.0, 1.0]]),
        ]
    )


#: name -> (call with the bad value, the shape a valid value would have).
ENTRY_POINTS: dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]] = {
    "TabularMDP(transition)": (lambda x: im.TabularMDP(x, np.zeros(S), 3), (S, A, S)),
    "TabularMDP(utility)": (lambda x: MDP.with_utility(x), (S,)),
    "TabularMDP(initial_state_dist)": (
        lambda x: im.TabularMDP((MDP.next_state, MDP.prob), None, 3, x),
        (S,),
    ),
    "meg(policy)": (lambda x: im.meg(x, MDP), (S, A)),
    "meg(utility)": (lambda x: im.meg(PI, MDP, x), (S,)),
    "meg(sa_occupancy)": (lambda x: im.meg(None, MDP, sa_occupancy=x), (H, S, A)),
    "meg_one_step(policy)": (lambda x: im.meg_one_step(x, [1.0, -1.0]), (2,)),
    "meg_one_step(expected_utility)": (lambda x: im.meg_one_step([0.8, 0.2], x), (2,)),
    "meg_one_step(state_dist)": (
        lambda x: im.meg_one_step([[0.8, 0.2]] * 2, [[1.0, -1.0]] * 2, x),
        (2,),
    ),
    "meg_unknown(policy)": (lambda x: im.meg_unknown(x, MDP), (S, A)),
    "meg_unknown(features)": (lambda x: im.meg_unknown(PI, MDP, features=x), (S, 2)),
    "meg_unknown(sa_occupancy)": (lambda x: im.meg_unknown(None, MDP, sa_occupancy=x), (H, S, A)),
    "meg_target(policy)": (lambda x: im.meg_target(x, MDP, "goal"), (S, A)),
    "meg_target(target)": (lambda x: im.meg_target(PI, MDP, x), (S,)),
    "meg_summary(policy)": (lambda x: meg_summary(x, MDP), (S, A)),
    "meg_summary(utility)": (lambda x: meg_summary(PI, MDP, utility=x), (S,)),
    "occupancy_measures(policy)": (lambda x: im.occupancy_measures(MDP, x), (S, A)),
    "soft_value_iteration(betas)": (lambda x: im.soft_value_iteration(MDP, x), (3,)),
    "soft_value_iteration(utility)": (lambda x: im.soft_value_iteration(MDP, 1.0, x), (S,)),
    "meg_from_trajectories(states)": (
        lambda x: im.meg_from_trajectories((x, TRAJ[1]), MDP),
        (2, H + 1),
    ),
    "meg_from_trajectories(actions)": (
        lambda x: im.meg_from_trajectories((TRAJ[0], x), MDP),
        (2, H),
    ),
    "meg_from_trajectories(utility)": (
        lambda x: im.meg_from_trajectories(TRAJ, MDP, utility=x),
        (S,),
    ),
    "meg_cid(policy)": (lambda x: im.meg_cid(examples.mouse(), _mouse_policy(x)), (2, 2)),
    "meg_cid_unknown(policy)": (
        lambda x: im.meg_cid_unknown(examples.mouse(), _mouse_policy(x), "T"),
        (2, 2),
    ),
    "meg_cid_target(policy)": (
        lambda x: im.meg_cid_target(examples.mouse(), "T", policy=_mouse_policy(x)),
        (2, 2),
    ),
    "CID(cpd)": (_cid_with_cpd, (2,)),
    "policies.optimal(utility)": (lambda x: policies.optimal(MDP, x), (S,)),
    "policies.epsilon_greedy(epsilon)": (lambda x: policies.epsilon_greedy(MDP, x), ()),
    "policies.soft_optimal(beta)": (lambda x: policies.soft_optimal(MDP, x), ()),
    # Discounted MDPs (horizon=None), MiniGrid builders and interventions.
    "TabularMDP(transition), discounted": (
        lambda x: im.TabularMDP(x, np.zeros(S), None, discount=0.9),
        (S, A, S),
    ),
    "TabularMDP(initial_state_dist), discounted": (
        lambda x: im.TabularMDP((MDP.next_state, MDP.prob), None, None, x, 0.9),
        (S,),
    ),
    "meg(policy), discounted": (lambda x: im.meg(x, MDP.with_horizon(None, 0.9)), (S, A)),
    "meg(utility), discounted": (lambda x: im.meg(PI, MDP.with_horizon(None, 0.9), x), (S,)),
    "meg_unknown(features), discounted": (
        lambda x: im.meg_unknown(PI, MDP.with_horizon(None, 0.9), features=x),
        (S, 2),
    ),
    "meg_target(policy), discounted": (
        lambda x: im.meg_target(x, MDP.with_horizon(None, 0.9), "goal"),
        (S, A),
    ),
    "policies.optimal(utility), discounted": (
        lambda x: policies.optimal(MDP.with_horizon(None, 0.9), x),
        (S,),
    ),
    "policies.soft_optimal(utility), discounted": (
        lambda x: policies.soft_optimal(MDP.with_horizon(None, 0.9), 1.0, x),
        (S,),
    ),
    **(
        {
            "minigrid_mdp(agent_starts)": (
                lambda x: im.envs.minigrid_mdp("MiniGrid-Empty-5x5-v0", agent_starts=x),
                (2, 2),
            ),
            "minigrid_mdp(seed)": (
                lambda x: im.envs.minigrid_mdp("MiniGrid-Empty-5x5-v0", seed=x),
                (),
            ),
        }
        if __import__("importlib.util").util.find_spec("minigrid") is not None
        else {}
    ),
    "meg_interventional(policy)": (lambda x: im.meg_interventional([x, PI], [MDP, MDP]), (S, A)),
    "meg_interventional(mdps)": (lambda x: im.meg_interventional([PI, PI], [MDP, x]), (S, A, S)),
    "meg_interventional(features)": (
        lambda x: im.meg_interventional([PI, PI], [MDP, MDP], features=[np.ones((S, 2)), x]),
        (S, 2),
    ),
    "meg_interventional(weights)": (
        lambda x: im.meg_interventional([PI, PI], [MDP, MDP], weights=x),
        (2,),
    ),
    "meg_approx(policy)": (lambda x: im.meg_approx(x, "CartPole-v1"), (4, 2)),
    "meg_approx(env)": (lambda x: im.meg_approx("uniform", x), (4,)),
    # Box actions (imitation_meg.continuous): the MDP's arrays, the policies' tables, utilities.
    "ContinuousMDP(low)": (lambda x: _box_mdp(low=x), (1,)),
    "ContinuousMDP(high)": (lambda x: _box_mdp(high=x), (1,)),
    "ContinuousMDP(initial_state_dist)": (lambda x: _box_mdp(initial_state_dist=x), (3,)),
    "ContinuousMDP(observations)": (lambda x: _box_mdp(observations=x), (3, 2)),
    "ContinuousMDP(utility)": (lambda x: _box_mdp(utility=x), (3,)),
    "GaussianPolicy(mean)": (
        lambda x: _box_meg(cpolicies.GaussianPolicy(x, np.ones((3, 1)))),
        (3, 1),
    ),
    "GaussianPolicy(std)": (
        lambda x: _box_meg(cpolicies.GaussianPolicy(np.zeros((3, 1)), x)),
        (3, 1),
    ),
    "meg_continuous(utility)": (lambda x: _box_meg(cpolicies.uniform(BOX_MDP), utility=x), (3,)),
    "meg_continuous_unknown(features)": (
        lambda x: cont.meg_continuous_unknown(cpolicies.uniform(BOX_MDP), BOX_MDP, features=x),
        (3, 2),
    ),
    # The front door (imitation_meg.adapters) and the continuous scorers' policy and MDP: a
    # malformed array in place of a policy source, a ContinuousPolicy or a ContinuousMDP.
    "resolve_policy(source)": (lambda x: resolve_policy(x), (S, A)),
    "policy_table(source)": (lambda x: policy_table(x, MDP), (S, A)),
    "as_continuous_policy(source)": (lambda x: as_continuous_policy(x), (3, 1)),
    "meg_continuous(policy)": (lambda x: _box_meg(x), (3, 1)),
    "meg_continuous(mdp)": (
        lambda x: cont.meg_continuous(cpolicies.uniform(BOX_MDP), x),
        (S, A, S),
    ),
    "meg_continuous_unknown(policy)": (
        lambda x: cont.meg_continuous_unknown(x, BOX_MDP),
        (3, 1),
    ),
    "meg_continuous_unknown(mdp)": (
        lambda x: cont.meg_continuous_unknown(cpolicies.uniform(BOX_MDP), x),
        (S, A, S),
    ),
}


def _assert_clear_error(e: BaseException, name: str) -> None:
    """A ValueError / TypeError the package raised itself, with a message."""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    assert isinstance(e, (ValueError, TypeError)), f"{name}: {type(e).__name__}\n{text}"
    assert len(str(e)) > 20, f"{name}: an unclear message {str(e)!r}"
    innermost = traceback.extract_tb(e.__traceback__)[-1].filename
    assert innermost.startswith(PACKAGE), f"{name}: raised outside the package\n{text}"


def _call(name: str, value: Any) -> Any:
    """The entry point's result, or None after a clear error (anything else fails)."""
    call, _ = ENTRY_POINTS[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning is no answer to malformed input
            return call(value)
    except (ValueError, TypeError) as e:
        _assert_clear_error(e, name)
        return None


#: Malformed values that denote a valid one, and the call with that value to compare against.
CORRECT_AS: dict[tuple[str, str], Any] = {
    ("soft_value_iteration(betas)", "zero_d"): lambda: im.soft_value_iteration(MDP, 0.5),
    ("policies.epsilon_greedy(epsilon)", "zero_d"): lambda: policies.epsilon_greedy(MDP, 0.5),
    ("policies.soft_optimal(beta)", "zero_d"): lambda: policies.soft_optimal(MDP, 0.5),
    # a target is any labelling of the states; six equal labels are a constant target
    ("meg_target(target)", "object"): lambda: im.meg_target(PI, MDP, np.zeros(S)),
    # a scalar bound of a one-dimensional box is that box
    ("ContinuousMDP(low)", "zero_d"): lambda: _box_mdp(low=[0.5]),
    ("ContinuousMDP(high)", "zero_d"): lambda: _box_mdp(low=[-1.0], high=[0.5]),
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, th.Tensor):
        return bool(th.equal(a, b))
    if isinstance(a, cont.ContinuousMDP):
        return bool(np.array_equal(a.low, b.low) and np.array_equal(a.high, b.high))
    if isinstance(a, im.MEGResult):
        return a.meg == b.meg and a.converged == b.converged
    return bool(th.equal(a.log_pi, b.log_pi) and th.equal(a.V, b.V))


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS))
def test_malformed_arrays_get_a_clear_error_or_a_correct_result(name, kind):
    value = _malformed(kind, ENTRY_POINTS[name][1])
    result = _call(name, value)
    if result is not None:
        reference = CORRECT_AS.get((name, kind))
        assert reference is not None, f"{name} accepted a {kind} value: {value!r}"
        assert _same(result, reference())


#: The entry points that take an MDP, called on one whose horizon no memory holds.
HUGE_MDP = im.envs.cliff_world(width=3, height=2, horizon=HUGE)
HUGE_CALLS: dict[str, Callable[[], Any]] = {
    "meg": lambda: im.meg(PI, HUGE_MDP),
    "meg_unknown": lambda: im.meg_unknown(PI, HUGE_MDP),
    "meg_target": lambda: im.meg_target(PI, HUGE_MDP, "goal"),
    "meg_summary": lambda: meg_summary(PI, HUGE_MDP),
    "occupancy_measures": lambda: im.occupancy_measures(HUGE_MDP, PI),
    "soft_value_iteration": lambda: im.soft_value_iteration(HUGE_MDP, 1.0),
    "meg_from_trajectories": lambda: im.meg_from_trajectories(TRAJ, HUGE_MDP),
    "policies.uniform": lambda: policies.uniform(HUGE_MDP),
    "policies.optimal": lambda: policies.optimal(HUGE_MDP),
    "policies.epsilon_greedy": lambda: policies.epsilon_greedy(HUGE_MDP, 0.1),
    "policies.soft_optimal": lambda: policies.soft_optimal(HUGE_MDP, 1.0),
}


@pytest.mark.parametrize("name", sorted(HUGE_CALLS))
def test_a_horizon_beyond_memory_is_refused_with_the_figure_and_the_fix(name):
    """Before allocating: the estimate, the free memory, the largest horizon that fits."""
    with pytest.raises((ValueError, TypeError)) as info:
        HUGE_CALLS[name]()
    _assert_clear_error(info.value, name)
    message = str(info.value)
    assert f"horizon H={HUGE}" in message, message
    assert re.search(r"needs about [\d.]+ [TP]B of memory .* are free", message), message
    assert "smaller horizon (H <= " in message and "infinite-horizon" in message, message


def test_memory_estimate_by_hand():
    # CliffWorld 10x4 (S=40, A=4, B=2) at H=1e9: a uniform (H, S, A) policy and one (H + 1, S)
    # table: 8 * ((1e9 + 1) * 40 * (4 + 1) + 4 * 40 * 4 * 2) bytes.
    assert horizon_bytes(10**9, 40, 4, 2, sa_tables=1) == 8 * ((10**9 + 1) * 200 + 1280)
    assert horizon_bytes(10, 3, 2, itemsize=4, s_tables=2) == 4 * (11 * 3 * 2 + 4 * 3 * 2)
    mdp = im.envs.cliff_world(horizon=10**7)  # 40 states: 8 * 1e7 * 40 * (2 * 4 + 2) = 32 GB
    with pytest.raises(ValueError, match=r"needs about 32\.0 GB .* but 1\.0 GB are free") as info:
        check_horizon_memory(mdp, what="meg", sa_tables=2, s_tables=2, free=10**9)
    # the largest horizon that fits: 8 * ((H + 1) * 40 * 10 + 1280) <= 1e9, H <= 312495
    assert "H <= 312495 fits" in str(info.value)
    check_horizon_memory(mdp, what="meg", sa_tables=2, s_tables=2, free=10**12)  # fits: silent
    small = im.envs.cliff_world(horizon=100)  # below the checked size: not even read
    assert horizon_bytes(100, 40, 4, 2, sa_tables=2, s_tables=2) < MEMORY_CHECK_BYTES
    check_horizon_memory(small, what="meg", sa_tables=2, free=0)
    assert free_memory() is None or free_memory() > 0


def test_cli_score_with_a_huge_horizon_exits_2_with_the_figure(capsys):
    from imitation_meg.cli import main

    argv = ["score", "--cliff-world", "--policy", "uniform", "--horizon", "1000000000"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("imitation-meg score: error: policies.uniform")
    assert "TB of memory" in err and "smaller horizon" in err


def test_complex_policies_are_refused_not_cast():
    """``meg(policy + 0.3j)`` used to score the real part without a word."""
    with pytest.raises(TypeError, match=r"policy holds complex numbers .* pass x\.real"):
        im.meg(PI + 0.3j, MDP)
    with pytest.raises(TypeError, match="utility holds complex numbers"):
        im.meg(PI, MDP, th.as_tensor(MDP.utility).to(th.complex128))


def test_an_mdp_without_states_or_actions_is_named():
    with pytest.raises(ValueError, match="an MDP needs at least one state and one action"):
        im.TabularMDP(np.zeros((0, 2, 0)), np.zeros(0), 3)
    with pytest.raises(ValueError, match=r"got a transition of shape \(2, 0, 2\)"):
        im.TabularMDP(np.zeros((2, 0, 2)), None, 3)
    with pytest.raises(ValueError, match="at least one state"):
        im.TabularMDP((np.zeros((2, 2, 0), dtype=np.int64), np.zeros((2, 2, 0))), None, 3)


@pytest.mark.parametrize("scale", [1e-320, -1e-320])
def test_beta_beyond_float64_is_reported_as_such(scale):
    """A utility of spread ~1e-320: the MEG is that of the unscaled utility, and beta (about
    1e320 in the utility's units) is NaN with a warning, its normalised value in ``extra``."""
    mdp = im.envs.cliff_world(horizon=10)
    pi = policies.epsilon_greedy(mdp, 0.1)
    plain = im.meg(pi, mdp, mdp.utility * math.copysign(1.0, scale))
    with pytest.warns(BetaRangeWarning, match=r"exceeds float64's range .* NaN"):
        tiny = im.meg(pi, mdp, mdp.utility * scale)
    assert tiny.meg == pytest.approx(plain.meg, rel=1e-9) and tiny.at_boundary is False
    assert math.isnan(tiny.beta) and tiny.converged
    unit = tiny.extra["utility_unit"]
    assert 0 < unit < 1e-300
    # the normalised beta is the unscaled one's times the utility's unit: its range (a state
    # utility does not vary across actions); subnormal utilities carry about 6 digits
    r = mdp.reward_sa()
    assert float((r.amax(-1) - r.amin(-1)).max()) == 0.0
    plain_unit = float(r.max() - r.min())
    assert tiny.extra["beta_normalized"] == pytest.approx(plain.beta * plain_unit, rel=1e-4)
    assert tiny.to_dict()["beta"] is None  # valid JSON


def test_beta_within_range_is_unchanged_at_1e_300():
    mdp = im.envs.cliff_world(horizon=10)
    pi = policies.epsilon_greedy(mdp, 0.1)
    res = im.meg(pi, mdp, mdp.utility * 1e-300)
    assert res.beta == pytest.approx(im.meg(pi, mdp).beta * 1e300, rel=1e-6) and not res.extra


def test_meg_summary_skips_the_mlp_at_0_and_refuses_a_negative_count():
    pi = policies.epsilon_greedy(MDP, 0.3)
    s = meg_summary(pi, MDP, mlp_steps=0)
    assert math.isnan(s["mlp_mean"]) and s["known"] == im.meg(pi, MDP).meg
    with pytest.raises(ValueError, match=r"mlp_steps must be a non-negative integer .* got -1"):
        meg_summary(pi, MDP, mlp_steps=-1)
    with pytest.raises(ValueError, match="mlp_seeds must be a positive integer"):
        meg_summary(pi, MDP, mlp_steps=5, mlp_seeds=0)
    s = meg_summary(pi, MDP, mlp_steps=np.int64(5), mlp_seeds=1)
    assert math.isfinite(s["mlp_mean"])


def test_trajectories_without_decisions_are_named():
    """Empty trajectories used to be advised "Use an MDP with horizon <= 0"."""
    for data in (
        (np.zeros((2, 1), dtype=np.int64), np.zeros((2, 0), dtype=np.int64)),
        ([np.array([0]), np.array([0, 1])], [np.array([], dtype=np.int64), np.array([0])]),
    ):
        with pytest.raises(ValueError, match=r"trajectories \[0(, 1)?\] have no decisions") as info:
            im.meg_from_trajectories(data, MDP)
        assert "horizon <= 0" not in str(info.value)


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="reads /proc/meminfo")
def test_free_memory_reads_the_available_memory():
    info = dict(
        line.split(":", 1) for line in pathlib.Path("/proc/meminfo").read_text().splitlines()
    )
    available = int(info["MemAvailable"].split()[0]) * 1024
    free = free_memory()
    assert free is not None and free >= 0.5 * available  # plus free swap, minus what changed
