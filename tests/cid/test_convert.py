"""MDP -> CID -> MEG equals :func:`imitation_meg.meg` on the MDP; pycid conversion."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import imitation_meg as im
from imitation_meg.cid import (
    decision_order,
    from_mdp,
    from_pycid,
    meg_cid,
    meg_cid_unknown,
    policy_from_mdp,
    policy_from_pycid,
)


def _policies(mdp: im.TabularMDP, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    return {
        "uniform": im.policies.uniform(mdp).numpy(),
        "eps0.1": im.policies.epsilon_greedy(mdp, 0.1).numpy(),
        "eps0.5": im.policies.epsilon_greedy(mdp, 0.5).numpy(),
        "optimal": im.policies.optimal(mdp).numpy(),
        "random": rng.dirichlet(np.ones(A), size=(H, S)),
        "sparse": rng.dirichlet(np.full(A, 0.2), size=(H, S)),
    }


@pytest.mark.parametrize("horizon", [1, 2, 4, 6])
def test_cliffworld_mdp_to_cid_matches_meg(horizon: int) -> None:
    mdp = im.envs.cliff_world(horizon=horizon)
    cid = from_mdp(mdp)
    assert decision_order(cid) == tuple(f"D{t}" for t in range(horizon))
    for name, pi in _policies(mdp, horizon).items():
        ref = im.meg(pi, mdp)
        got = meg_cid(cid, policy_from_mdp(pi, mdp))
        assert got.meg == pytest.approx(ref.meg, abs=1e-9), name
        assert got.upper_bound == pytest.approx(ref.upper_bound, abs=1e-12)
        assert got.expected_utility == pytest.approx(ref.expected_utility, abs=1e-9)
        assert got.at_boundary == ref.at_boundary, name


@settings(max_examples=12, deadline=None)
@given(
    st.integers(0, 10_000),
    st.integers(2, 6),
    st.integers(2, 3),
    st.integers(1, 4),
    st.sampled_from(["state", "state_action"]),
)
def test_random_mdp_to_cid_matches_meg(seed: int, S: int, A: int, H: int, kind: str) -> None:
    mdp = im.envs.random_mdp(S, A, H, utility=kind, seed=seed)
    cid = from_mdp(mdp)
    rng = np.random.default_rng(seed)
    for pi in (rng.dirichlet(np.ones(A), size=(H, S)), rng.dirichlet(np.full(A, 0.3), size=(S,))):
        ref = im.meg(pi, mdp)
        got = meg_cid(cid, policy_from_mdp(pi, mdp))
        assert got.meg == pytest.approx(ref.meg, abs=1e-9)
        if not ref.at_boundary and abs(ref.beta) < 50:
            # (Far out L(beta) is flat to rounding and beta is not determined; MEG still is.)
            assert got.beta == pytest.approx(ref.beta, rel=1e-6, abs=1e-9)


def test_transition_utility_and_targets_through_the_cid() -> None:
    mdp = im.envs.random_mdp(4, 2, 3, seed=5)
    rng = np.random.default_rng(0)
    u = rng.normal(size=(4, 2, 4))
    cid = from_mdp(mdp, u)
    assert "S3" in cid.domains and cid.parents["U2"] == ("S2", "D2", "S3")
    pi = rng.dirichlet(np.ones(2), size=(3, 4))
    assert meg_cid(cid, policy_from_mdp(pi, mdp)).meg == pytest.approx(
        im.meg(pi, mdp, u).meg, abs=1e-9
    )
    # Every utility of the state at one step (S2) versus the MDP's exact target solver with a
    # time-indexed target: here compare the CID class against its own known-utility members.
    res = meg_cid_unknown(from_mdp(mdp), policy_from_mdp(pi, mdp), ["S2"])
    sub = from_mdp(mdp).with_utilities(im.cid.Utility("U", ["S2"], res.extra["utility"]))
    assert meg_cid(sub, policy_from_mdp(pi, mdp)).meg == pytest.approx(res.meg, abs=1e-8)


def test_discounted_mdp_warns() -> None:
    mdp = im.envs.random_mdp(3, 2, 3, discount=0.9, seed=1)
    with pytest.warns(im._validation.ImitationMEGWarning, match="undiscounted causal entropy"):
        cid = from_mdp(mdp)
    # The CID scores the discounted utility with the paper's (undiscounted) entropy: a different
    # model family from the discounted soft value iteration of meg().
    pi = np.random.default_rng(0).dirichlet(np.ones(2), size=(3, 3))
    assert meg_cid(cid, policy_from_mdp(pi, mdp)).meg != pytest.approx(
        im.meg(pi, mdp).meg, abs=1e-9
    )


def test_from_mdp_errors() -> None:
    with pytest.raises(TypeError, match="TabularMDP"):
        from_mdp("cliff")  # type: ignore[arg-type]
    mdp = im.envs.random_mdp(3, 2, 2, utility="none", seed=0)
    with pytest.raises(ValueError, match="no utility"):
        from_mdp(mdp)


# --------------------------------------------------------------------------- pycid
def test_pycid_conversion_matches_native() -> None:
    pycid = pytest.importorskip("pycid")
    from pycid.core.cpd import discrete_uniform

    cid = pycid.CID(
        [("S", "D"), ("S", "T"), ("D", "T"), ("T", "U")], decisions=["D"], utilities=["U"]
    )
    cid.add_cpds(
        S=discrete_uniform(["left", "right"]),
        D=["left", "right"],
        T=lambda S, D: "cheese" if S == D else "none",
        U=lambda T: 1 if T == "cheese" else -1,
    )
    ours = from_pycid(cid)
    assert set(ours.decisions) == {"D"} and set(ours.utilities) == {"U"}
    assert ours.domains["D"] == ("left", "right")
    pol = policy_from_pycid(cid)
    np.testing.assert_allclose(pol["D"], 0.5)
    assert meg_cid(ours, pol).meg == pytest.approx(0.0, abs=1e-12)
    # pycid's own decision rules: impute a stochastic one and read it back.
    from pycid.core.cpd import StochasticFunctionCPD

    cid.add_cpds(
        StochasticFunctionCPD(
            "D",
            lambda S: {S: 0.8, ("left" if S == "right" else "right"): 0.2},
            cid,
            domain=["left", "right"],
        )
    )
    pol = policy_from_pycid(cid)
    S_names = list(ours.domains["S"])
    assert pol["D"][S_names.index("left"), 0] == pytest.approx(0.8)
    res = meg_cid(from_pycid(cid), pol)
    assert res.meg == pytest.approx(
        0.8 * math.log(0.8) + 0.2 * math.log(0.2) + math.log(2), abs=1e-8
    )
    # pycid's expected utility agrees with ours.
    assert res.expected_utility == pytest.approx(cid.expected_utility({}), abs=1e-12)


def test_pycid_examples_convert() -> None:
    pytest.importorskip("pycid")
    from pycid.examples.simple_cids import get_2dec_cid, get_5node_cid, get_sequential_cid

    for make in (get_2dec_cid, get_5node_cid, get_sequential_cid):
        cid = make()
        ours = from_pycid(cid)
        pol = policy_from_pycid(cid)
        uni = meg_cid(ours, pol)
        assert uni.meg == pytest.approx(0.0, abs=1e-12)
        cid.impute_optimal_policy()
        opt = meg_cid(ours, policy_from_pycid(cid))
        assert opt.expected_utility == pytest.approx(cid.expected_utility({}), abs=1e-9)
        assert 0.0 < opt.meg <= opt.upper_bound + 1e-12


def test_from_pycid_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match=r"pycid\.CID"):
        from_pycid(object())
