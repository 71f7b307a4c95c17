"""The empirical MDP (``meg_approx(..., method="empirical" | "auto")``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.approx import EnvSource, as_policy_fn, collect, meg_approx, meg_approx_unknown
from imitation_meg.approx.core import uniform_behaviour
from imitation_meg.approx.empirical import EmpiricalMDP
from imitation_meg.approx.envs import TablePolicy, TabularGymEnv
from imitation_meg.approx.evaluate import ApproxMEGWarning
from imitation_meg.approx.options import ApproxOptions

th.set_num_threads(1)


def _case(seed: int, *, branching: int, start: str) -> tuple[im.TabularMDP, np.ndarray, th.Tensor]:
    """A random MDP (10 states, 3 actions, H = 6), one-hot observations, a softmax policy."""
    base = im.envs.random_mdp(10, 3, 6, branching=branching, seed=seed)
    p0 = np.zeros(10)
    if start == "one":
        p0[0] = 1.0
    else:
        p0[:4] = 0.25
    mdp = im.TabularMDP(
        (base.next_state, base.prob), utility=base.reward_sa(), horizon=6, initial_state_dist=p0
    )
    logits = th.as_tensor(np.random.default_rng(seed).normal(size=(10, 3)) * 2)
    return mdp, np.eye(10, dtype=np.float32), th.softmax(logits, -1)


@pytest.mark.parametrize("seed", [0, 1])
def test_deterministic_dynamics_give_the_exact_meg(seed):
    """With deterministic dynamics, a deterministic start and the expected utility as reward,
    the empirical MDP of the reached states is the MDP itself there: the estimate is the exact
    MEG, every bootstrap replicate too (so the interval is a point)."""
    mdp, obs, table = _case(seed, branching=1, start="one")
    exact = im.meg(table, mdp).meg
    res = meg_approx(
        TablePolicy(table, obs), lambda: TabularGymEnv(mdp, obs), seed=3, method="empirical"
    )
    assert res.method == "empirical" and res.settled
    assert 1 <= res.n_states <= 10
    assert res.meg == pytest.approx(exact, abs=1e-9)
    # every replicate is the same MDP: the interval is the solver's rounding, and holds exact
    assert res.low <= exact <= res.high
    assert res.high - res.low == pytest.approx(2e-9 * max(1.0, res.meg), rel=1e-6)
    assert res.certificate >= res.meg - 1e-12


def test_stochastic_case_is_covered_and_repeats_itself():
    """Stochastic dynamics and start: the interval holds the exact MEG and is narrow; the same
    seed gives the same result, another seed another."""
    mdp, obs, table = _case(4, branching=3, start="four")
    exact = im.meg(table, mdp).meg
    make = lambda: TabularGymEnv(mdp, obs)  # noqa: E731
    pol = TablePolicy(table, obs)
    # a budget of one round (3 x 7 000 steps): the interval need not reach its target
    kw = {"method": "auto", "n_data_steps": 7000}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproxMEGWarning)
        a = meg_approx(pol, make, seed=1, **kw)
        b = meg_approx(pol, make, seed=1, **kw)
        c = meg_approx(pol, make, seed=2, **kw)
    assert a.method == "empirical"
    assert a.low <= exact <= a.high
    assert a.high - a.low < 0.05 * a.upper_bound
    assert a.meg == b.meg and np.array_equal(a.replicates, b.replicates)
    assert a.meg != c.meg
    # stages are the rounds of data; the last is the estimate
    assert a.stages[-1] == a.meg and a.stage_intervals[-1] == (a.meg, a.low, a.high)
    assert a.n_eval_episodes == 0 and a.models == []


def test_the_replicates_solved_side_by_side_are_the_one_thread_replicates(monkeypatch):
    """The bootstrap's solves run on the caller's torch threads (here 2, in blocks of 3 so that
    blocks and a short last one occur): the same replicates, in the same order, to the last bit
    as on one thread, and torch's thread count is put back."""
    import imitation_meg.approx.empirical as emp

    mdp, obs, table = _case(4, branching=3, start="four")
    kw = {"method": "empirical", "n_data_steps": 7000, "n_boot": 8}
    monkeypatch.setattr(emp, "_BOOT_BLOCK", 3)
    runs = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproxMEGWarning)
        for n in (1, 2):
            th.set_num_threads(n)
            try:
                runs[n] = meg_approx(
                    TablePolicy(table, obs), lambda: TabularGymEnv(mdp, obs), seed=1, **kw
                )
                assert th.get_num_threads() == n
            finally:
                th.set_num_threads(1)
    assert runs[1].replicates.shape == (8,) and np.unique(runs[1].replicates).size > 1
    assert np.array_equal(runs[1].replicates, runs[2].replicates)
    assert runs[1].meg == runs[2].meg and runs[1].low == runs[2].low


def test_untried_actions_are_found():
    """Data that never try an action leave the pairs the MDP needs, named."""
    mdp, obs, table = _case(0, branching=2, start="four")
    source = EnvSource(lambda: TabularGymEnv(mdp, obs))
    never_2 = lambda raw, x, t: np.tile([0.5, 0.5, 0.0], (len(x), 1))  # noqa: E731
    pol = as_policy_fn(TablePolicy(table, obs), n_actions=3)
    data = collect(source, never_2, 200, np.random.default_rng(0), scored=pol)
    model = EmpiricalMDP(data, 3, source.horizon)
    assert model.missing and all(a == 2 for _, a in model.missing)
    unscored = collect(source, never_2, 20, np.random.default_rng(0))
    with pytest.raises(ValueError, match="scored="):
        EmpiricalMDP(unscored, 3, source.horizon)
    full = collect(source, uniform_behaviour(3), 400, np.random.default_rng(0), scored=pol)
    model = EmpiricalMDP(full, 3, source.horizon)
    assert not model.missing
    # unit weights rebuild the same MDP
    same = model.mdp(np.ones(full.n_episodes))
    assert th.equal(same.prob, model.mdp().prob) and th.equal(
        same.next_state, model.mdp().next_state
    )


def test_continuous_observations_fall_back_and_explicit_method_refuses():
    """MountainCar's observations never repeat; behind a wrapper the library does not simulate
    it: ``auto`` fits soft Q-networks, ``empirical`` says why it cannot run; bad settings are
    refused by name. (On CartPole ``auto`` takes the paths, tests/approx/test_paths.py.)"""
    import gymnasium as gym

    def wrapped() -> gym.Env:
        return gym.wrappers.TransformReward(gym.make("MountainCar-v0"), lambda r: r)

    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    uniform3 = lambda obs: np.full((len(obs), 3), 1 / 3)  # noqa: E731
    small = {"n_data_steps": 300, "n_eval_episodes": 10, "n_models": 2, "iterations": 2}
    small["method"] = "auto"
    with pytest.warns(ApproxMEGWarning, match="same reward on every step"):  # -1 each step
        res = meg_approx(uniform3, wrapped, horizon=30, steps_per_iteration=10, refine=0, **small)
    assert res.method == "soft_q" and res.n_states == 0 and res.meg == 0.0
    assert meg_approx(uniform, "CartPole-v1", horizon=30, method="auto").method == "paths"
    with pytest.raises(ValueError, match=r"distinct observations.*method='soft_q'"):
        meg_approx(uniform, "CartPole-v1", horizon=30, method="empirical")
    with pytest.raises(ValueError, match="method must be None or one of"):
        ApproxOptions(method="tabular")
    with pytest.raises(ValueError, match="max_states"):
        ApproxOptions(max_states=0)
    with pytest.raises(ValueError, match="not available for the unknown-utility bound"):
        meg_approx_unknown(uniform, "CartPole-v1", method="empirical")


class _TimedReward(TabularGymEnv):
    """A tabular environment whose reward grows with the time step (as MiniGrid's shrinks)."""

    scale = 1.0

    def reset(self, **kw):  # type: ignore[no-untyped-def]
        self._clock = 0
        return super().reset(**kw)

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, r, term, trunc, info = super().step(action)
        self._clock += 1
        return obs, self.scale * (r + 0.1 * self._clock), term, trunc, info


@pytest.mark.parametrize("scale", [1.0, 1e-12, 1e9])
def test_a_reward_that_depends_on_the_time_step_is_not_put_in_a_stationary_mdp(scale):
    """The same transition paying two rewards, at any scale of the reward: ``auto`` warns and
    fits soft Q-networks, ``empirical`` refuses, naming the time step."""
    mdp, obs, table = _case(0, branching=1, start="one")

    def make() -> _TimedReward:
        env = _TimedReward(mdp, obs)
        env.scale = scale
        return env

    pol = TablePolicy(table, obs)
    small = {"n_data_steps": 300, "n_eval_episodes": 10, "n_models": 2, "iterations": 2}
    small.update(refine=0, method="auto")
    with pytest.warns(ApproxMEGWarning, match="depends on the time step"):
        res = meg_approx(pol, make, steps_per_iteration=10, **small)
    assert res.method == "soft_q"
    with pytest.raises(ValueError, match="depends on the time step"):
        meg_approx(pol, make, method="empirical")


@pytest.mark.parametrize("n_boot", [0, 1])
def test_without_replicates_there_is_no_interval_and_no_settled_claim(n_boot):
    """With fewer than 2 bootstrap replicates nothing measures the estimate's spread: NaN
    interval ends, the plain value of the empirical MDP, ``settled`` None and the whole data
    budget spent (not a point interval claiming precision)."""
    mdp, obs, table = _case(4, branching=3, start="four")
    make = lambda: TabularGymEnv(mdp, obs)  # noqa: E731
    pol = TablePolicy(table, obs)
    kw = {"method": "empirical", "n_data_steps": 7000, "n_models": 3}
    res = meg_approx(pol, make, seed=1, n_boot=n_boot, **kw)
    assert np.isnan(res.low) and np.isnan(res.high) and np.isnan(res.bootstrap_se)
    assert res.settled is None
    assert res.n_env_steps >= 3 * 7000  # the budget, after the probe
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproxMEGWarning)
        corrected = meg_approx(pol, make, seed=1, **kw)
    assert res.meg != corrected.meg and np.isfinite(corrected.low)


def test_the_progress_bar_counts_data_steps_then_the_fits_it_hands_over_to(monkeypatch):
    """``progress=True``: the empirical MDP's bar counts its data steps (it stood at 0 before);
    when ``auto`` hands over to the soft Q-fits the bar counts their iterations from 0 to the
    end."""
    from imitation_meg.approx import core

    closed: list[tuple[int, int] | None] = []
    close = core.ProgressBar.close

    def spy(self: core.ProgressBar) -> None:
        closed.append(self.counts)
        close(self)

    monkeypatch.setattr(core.ProgressBar, "close", spy)
    mdp, obs, table = _case(4, branching=3, start="four")
    pol = TablePolicy(table, obs)
    with pytest.warns(ApproxMEGWarning, match="interval half-width"):  # the small budget
        res = meg_approx(
            pol,
            lambda: TabularGymEnv(mdp, obs),
            method="empirical",
            n_models=1,
            n_data_steps=20_000,
            progress=True,
        )
    (done, total), *_ = closed  # whole episodes: a little past the budget, which grows with it
    assert res.method == "empirical" and 20_000 <= done == total < res.n_env_steps
    closed.clear()

    def make() -> _TimedReward:
        return _TimedReward(mdp, obs)

    small = {"n_data_steps": 300, "n_eval_episodes": 10, "n_models": 2, "iterations": 2}
    with pytest.warns(ApproxMEGWarning, match="depends on the time step"):
        res = meg_approx(
            pol, make, method="auto", refine=1, steps_per_iteration=10, progress=True, **small
        )
    assert res.method == "soft_q" and closed == [(2 * 2 * 2, 2 * 2 * 2)]


def test_command_line_says_what_the_empirical_mdps_bar_counts(capsys):
    """``imitation-meg score ... --approx-option method=empirical`` names the empirical MDP and
    says that its bar counts data steps (not soft Q-iterations)."""
    from imitation_meg.cli import main

    argv = ["score", "--env", "FrozenLake-v1", "--policy", "uniform", "--approx"]
    for opt in ("method=empirical", "n_data_steps=7000"):
        argv += ["--approx-option", opt]
    th.set_num_threads(2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", ApproxMEGWarning)  # printed as a line, if any
            assert main(argv) == 0
        # the empirical MDP's replicates are solved side by side on the caller's threads
        assert th.get_num_threads() == 2
    finally:
        th.set_num_threads(1)
    printed = capsys.readouterr().out
    assert "the empirical MDP of the observations" in printed
    assert "The bar counts environment steps of data" in printed
    assert "soft Q-iterations" not in printed


@pytest.mark.parametrize("seed", [0, 1])
def test_every_utility_of_the_observation_is_the_exact_unknown_meg_with_deterministic_dynamics(
    seed,
):
    """``utility="observation"``: with deterministic dynamics and start, the empirical MDP of
    the reached states is the MDP there, so the estimate is the exact unknown-utility MEG over
    every state utility; it is an estimate of the class's supremum, not a lower bound, and its
    utility gives each observation seen its fitted value (NaN for one never seen)."""
    mdp, obs, table = _case(seed, branching=1, start="one")
    exact = im.meg_unknown(table, mdp)
    res = meg_approx_unknown(
        TablePolicy(table, obs),
        lambda: TabularGymEnv(mdp, obs),
        utility="observation",
        method="empirical",
        seed=3,
        n_boot=20,
    )
    assert res.utility_class == "observation" and res.result.method == "empirical"
    assert res.meg == pytest.approx(exact.meg, abs=1e-6)
    assert res.low <= exact.meg <= res.high
    assert res.meg > im.meg(table, mdp).meg  # the class holds more than the reward
    out = res.to_dict()
    assert out["lower_bound"] is False and out["utility_class"] == "observation"
    seen = res.utility(th.as_tensor(obs[:1]))
    assert seen.shape == (1,) and bool(th.isfinite(seen).all())
    assert bool(th.isnan(res.utility(th.full((1, 10), 0.5))).all())


def test_terminal_observations_are_absorbing_states_of_their_own():
    """FrozenLake ends on holes and the goal: for a utility of the observation each of them is
    an absorbing state of its own (a goal worth more than a hole), and the estimate covers the
    exact unknown-utility MEG; with one shared absorbing state the class cannot tell them apart
    and the same data give less."""
    from imitation_meg.approx.empirical import observation_features
    from imitation_meg.approx.envs import stationary_epsilon_greedy, validation_case

    case = validation_case("frozenlake_onehot", horizon=8)
    table = stationary_epsilon_greedy(case.mdp, 0.3)
    pol = TablePolicy(table, case.observations)
    exact = im.meg_unknown(table, case.mdp).meg
    res = meg_approx_unknown(
        pol, case.make, utility="observation", method="empirical", seed=0, n_boot=50
    )
    assert res.low <= exact <= res.high
    assert res.high - res.low < 0.05 * res.result.upper_bound
    source = EnvSource(case.make)
    scored = as_policy_fn(pol, n_actions=4)
    data = collect(source, uniform_behaviour(4), 20_000, np.random.default_rng(0), scored=scored)
    split = EmpiricalMDP(data, 4, 8, terminal_states=True)
    ends = np.unique(data.x_next[data.done & (data.t < 7)], axis=0)
    assert split.n_absorbing == len(ends) >= 2  # holes and the goal
    assert {tuple(r) for r in split.observations[split.absorbing_obs]} == {tuple(r) for r in ends}
    m = split.mdp()
    absorbing = np.arange(split.n_states, split.n_states + split.n_absorbing)
    assert th.equal(m.next_state[absorbing, :, 0], th.as_tensor(absorbing)[:, None].expand(-1, 4))
    shared = EmpiricalMDP(data, 4, 8)
    assert shared.n_absorbing == 1 and shared.absorbing_obs.tolist() == [-1]
    one = im.meg_unknown(shared.policy, shared.mdp(), features=observation_features(shared)).meg
    both = im.meg_unknown(split.policy, m, features=observation_features(split)).meg
    assert one < both - 0.01  # 2.344 against 2.366 on these data


def test_the_observation_class_says_what_it_needs():
    """``utility="observation"`` needs the empirical MDP (another method, or observations that
    never repeat, is refused with the way out); the fitted classes refuse the empirical MDP and
    the paths."""
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    with pytest.raises(ValueError, match="pass method='empirical'"):
        meg_approx_unknown(uniform, "CartPole-v1", utility="observation", method="soft_q")
    with pytest.raises(ValueError, match=r"distinct observations.*utility='mlp'"):
        meg_approx_unknown(uniform, "CartPole-v1", utility="observation")  # None: empirical
    with pytest.raises(ValueError, match=r"distinct observations.*utility='mlp'"):
        meg_approx_unknown(uniform, "CartPole-v1", utility="observation", method="empirical")
    with pytest.raises(ValueError, match="utility='observation' with method='empirical'"):
        meg_approx_unknown(uniform, "CartPole-v1", method="empirical")
    with pytest.raises(ValueError, match="method='paths' is not available"):
        meg_approx_unknown(uniform, "CartPole-v1", method="paths")


def test_command_line_scores_every_utility_of_the_observation(capsys, tmp_path):
    """``imitation-meg score --approx --mode unknown --approx-option method=empirical``: every
    utility of the observation through the empirical MDP. The uniform policy is the model of
    the zero utility, so its unknown-utility MEG is 0 (the data's noise leaves it near 0)."""
    import json

    from imitation_meg.cli import main

    argv = ["score", "--env", "FrozenLake-v1", "--policy", "uniform", "--approx"]
    argv += ["--mode", "unknown", "--horizon", "10", "--json", str(tmp_path / "u.json")]
    for opt in ("method=empirical", "n_data_steps=7000", "n_boot=20"):
        argv += ["--approx-option", opt]
    with warnings.catch_warnings():
        warnings.simplefilter("always", ApproxMEGWarning)
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Approximate unknown-utility MEG" in printed
    assert "every utility of the observation" in printed and "utility spread" in printed
    out = json.loads((tmp_path / "u.json").read_text())
    assert out["mode"] == "unknown (approximate)" and out["result"]["method"] == "empirical"
    assert 0.0 <= out["meg"] < 0.05


def test_an_interval_at_the_certificate_keeps_the_solvers_rounding():
    """On seals' InitShift tree every policy is soft-optimal for some utility of the state, so
    unknown-utility MEG is the Gibbs certificate and the interval's upper end is clipped there;
    the clip keeps the solver's rounding, so the exact value (the certificate summed another
    way, an ulp away) stays inside (before, the held-out row missed it by 1.1e-16 in every
    seed)."""
    from imitation_meg.approx.empirical import ROUNDING
    from imitation_meg.approx.envs import stationary_epsilon_greedy, validation_case

    case = validation_case("initshift_onehot", horizon=3)
    table = stationary_epsilon_greedy(case.mdp, 0.3)
    exact = im.meg_unknown(table, case.mdp).meg
    res = meg_approx_unknown(
        TablePolicy(table, case.observations),
        case.make,
        utility="observation",
        method="empirical",
        seed=0,
        n_boot=20,
    )
    cert = res.result.certificate
    assert res.meg == pytest.approx(exact, abs=1e-12) and res.meg == pytest.approx(cert, abs=1e-12)
    assert res.low <= exact <= res.high
    assert res.high == pytest.approx(cert + ROUNDING * max(1.0, cert), abs=1e-15)
