"""Unknown-utility MEG, MEG with respect to targets, and the differentiable-class lower bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th
from scipy.optimize import minimize
from scipy.special import logsumexp

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core.unknown import gibbs_certificate, target_features
from imitation_meg.envs import cliff_world, random_mdp


# ----------------------------------------------------------------------------- independent solver
def _np_soft(theta_sa, T, H):
    S, _A = theta_sa.shape
    V = np.zeros(S)
    logps = []
    for _ in range(H):
        Q = theta_sa + T @ V
        V = logsumexp(Q, axis=1)
        logps.append(Q - V[:, None])
    return logps[::-1]


def _np_occ(pi_t, T, p0):
    d, out = p0.copy(), []
    for p in pi_t:
        out.append(d)
        d = np.einsum("s,sa,sat->t", d, p, T)
    return np.array(out)


def _np_state_meg(pi, mdp):
    """Unknown-utility MEG over all state utilities: scipy L-BFGS-B, analytic D_pi - D_theta."""
    T = mdp.dense_transition().numpy()
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    p0 = mdp.initial_state_dist.numpy()
    pi = np.broadcast_to(np.asarray(pi), (H, S, A))
    D_pi = _np_occ(pi, T, p0)

    def negL(theta):
        logps = _np_soft(np.repeat(theta[:, None], A, 1), T, H)
        L = sum(np.sum(D_pi[t][:, None] * pi[t] * logps[t]) for t in range(H))
        D_th = _np_occ([np.exp(lp) for lp in logps], T, p0)
        return -L, -(D_pi.sum(0) - D_th.sum(0))

    opt = minimize(
        negL,
        np.zeros(S),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12, "maxcor": 50},
    )
    return -opt.fun + H * math.log(A)


@pytest.mark.parametrize("horizon", [5, 12])
@pytest.mark.parametrize("eps", [0.1, 0.5])
def test_matches_independent_solver_on_cliffworld(horizon, eps):
    mdp = cliff_world(horizon=horizon)
    pi = policies.epsilon_greedy(mdp, eps)
    ours = im.meg_unknown(pi, mdp)
    ref = _np_state_meg(pi.numpy(), mdp)
    assert ours.converged and not ours.at_boundary
    assert ours.meg == pytest.approx(ref, rel=1e-5)
    assert ours.meg >= ref - 1e-8
    known = im.meg(pi, mdp).meg
    assert ours.meg >= known - 1e-9
    assert ours.meg <= ours.extra["certificate"] + 1e-9


def test_brute_force_on_small_random_mdps():
    rng = np.random.default_rng(3)
    for seed in range(3):
        mdp = random_mdp(4, 2, 3, seed=seed, utility="none")
        phi = rng.standard_normal((4, 2, 2))
        pi = rng.dirichlet(np.ones(2), size=(3, 4))
        T = mdp.dense_transition().numpy()
        p0 = mdp.initial_state_dist.numpy()
        D = _np_occ(pi, T, p0)

        def negL(theta, phi=phi, T=T, D=D, pi=pi):
            logps = _np_soft(phi @ theta, T, 3)
            return -sum(np.sum(D[t][:, None] * pi[t] * logps[t]) for t in range(3))

        best = min(
            (
                minimize(
                    negL,
                    x0,
                    method="Nelder-Mead",
                    options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000},
                )
                for x0 in (np.zeros(2), rng.standard_normal(2))
            ),
            key=lambda o: o.fun,
        )
        ours = im.meg_unknown(pi, mdp, features=phi)
        assert ours.meg == pytest.approx(-best.fun + 3 * math.log(2), rel=1e-6, abs=1e-9)


def test_feature_shapes_agree(rng):
    mdp = random_mdp(6, 3, 4, seed=2)
    pi = rng.dirichlet(np.ones(3), size=6)
    phi_s = rng.standard_normal((6, 2))
    a = im.meg_unknown(pi, mdp, features=phi_s).meg
    b = im.meg_unknown(pi, mdp, features=np.repeat(phi_s[:, None, :], 3, 1)).meg
    c = im.meg_unknown(pi, mdp, features=np.broadcast_to(phi_s[:, None, None, :], (6, 3, 6, 2))).meg
    assert a == pytest.approx(b, rel=1e-9) and a == pytest.approx(c, rel=1e-9)
    # The identity over states is the default class.
    assert im.meg_unknown(pi, mdp).meg == pytest.approx(
        im.meg_unknown(pi, mdp, features=np.eye(6)).meg, rel=1e-7
    )


def test_equality_cases():
    mdp = cliff_world(horizon=8)
    assert im.meg_unknown(policies.uniform(mdp), mdp).meg == 0.0
    # A unique deterministic optimal policy attains the bound, at infinity.
    rmdp = random_mdp(8, 3, 4, utility="state_action", seed=4)
    res = im.meg_unknown(policies.optimal(rmdp), rmdp, features=np.eye(24).reshape(8, 3, 24))
    assert res.meg == pytest.approx(4 * math.log(3), rel=1e-9)
    assert res.at_boundary and res.converged


def test_unknown_at_least_known_even_with_tied_optimal_policy():
    mdp = cliff_world(horizon=20, goal_region=4)
    pi = policies.optimal(mdp)
    res = im.meg_unknown(pi, mdp)
    assert res.meg >= im.meg(pi, mdp).meg - 1e-12
    assert res.meg <= gibbs_certificate(mdp, res_occ(mdp, pi)) + 1e-9


def res_occ(mdp, pi):
    from imitation_meg.core.known import sa_occupancy_of

    return sa_occupancy_of(mdp, pi)


# ----------------------------------------------------------------------------- targets
def test_target_relabelling_invariance(rng):
    mdp = cliff_world(horizon=10)
    pi = policies.epsilon_greedy(mdp, 0.3)
    col = im.envs.grid_target(mdp, "column")
    perm = rng.permutation(10)
    a = im.meg_target(pi, mdp, col)
    b = im.meg_target(pi, mdp, perm[col] * 7 + 100)
    c = im.meg_target(pi, mdp, "column")
    assert a.meg == pytest.approx(b.meg, rel=1e-9) and a.meg == pytest.approx(c.meg, rel=1e-12)
    assert a.extra["target_values"] == 10
    d = im.meg_target(pi, mdp, lambda s: f"col{s % 10}")
    assert d.meg == pytest.approx(a.meg, rel=1e-9)


def _product_mdp(rng):
    # State (x, y): actions move x on a 3-cycle; y follows its own random chain.
    nx, ny, A = 3, 4, 2
    Ty = rng.dirichlet(np.ones(ny), size=ny)
    T = np.zeros((nx * ny, A, nx * ny))
    for x in range(nx):
        for y in range(ny):
            for a in range(A):
                x2 = (x + a) % nx
                T[x * ny + y, a, x2 * ny : (x2 + 1) * ny] = Ty[y]
    return im.TabularMDP(T, None, 5, np.full(nx * ny, 1 / (nx * ny))), nx, ny


def test_target_the_decisions_cannot_influence_gives_zero(rng):
    mdp, nx, ny = _product_mdp(rng)
    pi = rng.dirichlet(np.ones(2), size=nx * ny)
    y_target = np.arange(nx * ny) % ny
    assert im.meg_target(pi, mdp, y_target).meg == pytest.approx(0.0, abs=1e-12)
    assert im.meg_target(pi, mdp, np.zeros(nx * ny, int)).meg == 0.0
    # The controllable part is goal-directed for some utility.
    assert im.meg_target(pi, mdp, np.arange(nx * ny) // ny).meg > 0


def test_theorem_4_1_pseudo_terminal_goals(rng):
    # T depends on the decisions only through S (T ~ P(T | S)): MEG_T <= MEG_S.
    mdp = random_mdp(7, 3, 5, seed=6, utility="none")
    pi = 0.7 * policies.optimal(mdp, rng.standard_normal(7)) + 0.3 / 3
    p_t = rng.dirichlet(np.ones(3), size=7)
    meg_T = im.meg_target(pi, mdp, p_t).meg
    meg_S = im.meg_unknown(pi, mdp).meg
    assert 0 < meg_T <= meg_S + 1e-9


def test_target_features_validation():
    mdp = cliff_world(horizon=3)
    with pytest.raises(ValueError, match="one value per state"):
        target_features(mdp, np.zeros(5, int))
    with pytest.raises(ValueError, match="one value per state"):
        target_features(mdp, ["a"] * 5)
    with pytest.raises(ValueError, match="rows must be distributions"):
        target_features(mdp, np.ones((40, 2)))
    with pytest.raises(ValueError, match="state 3 is NaN"):
        target_features(mdp, lambda s: math.nan if s == 3 else 0.0)
    with pytest.raises(TypeError, match="state 0 is a list, which is not hashable"):
        target_features(mdp, lambda s: [s])
    with pytest.raises(TypeError, match="not hashable"):
        target_features(mdp, lambda s: (s, [s]))
    assert target_features(mdp, "goal").shape == (40, 2)


@pytest.mark.parametrize(
    "relabel",
    [
        lambda k: f"col{k}",  # strings
        lambda k: ("column", int(k)),  # tuples
        lambda k: float(k) / 3,  # non-integer floats
        lambda k: np.str_("abcdefghij"[k]),  # numpy scalars
        lambda k: int(k) * 10**30,  # big integers
    ],
)
def test_labels_of_any_hashable_kind_give_the_integer_partition_value(relabel):
    mdp = cliff_world(horizon=10)
    pi = policies.epsilon_greedy(mdp, 0.3)
    col = im.envs.grid_target(mdp, "column")
    ref = im.meg_target(pi, mdp, col)
    as_callable = im.meg_target(pi, mdp, lambda s: relabel(col[s]))
    values = np.empty(len(col), dtype=object)  # (S,) even for tuples
    values[:] = [relabel(k) for k in col]
    as_array = im.meg_target(pi, mdp, values)
    as_list = im.meg_target(pi, mdp, [relabel(k) for k in col])
    assert ref.meg > 0.5 and ref.extra["target_values"] == 10
    for res in (as_callable, as_array, as_list):
        assert res.extra["target_values"] == 10
        assert res.meg == pytest.approx(ref.meg, rel=1e-12)
    # Equal values share a label whatever their type: 1, 1.0 and True are one label.
    mixed = im.meg_target(pi, mdp, lambda s: [0, 1.0, True, "x"][col[s] % 4])
    assert mixed.extra["target_values"] == 3


# ----------------------------------------------------------------------------- differentiable classes
def test_mlp_lower_bound_with_spread():
    mdp = cliff_world(horizon=10)
    pi = policies.epsilon_greedy(mdp, 0.3)
    res = im.meg_unknown(pi, mdp, utility_model="mlp", steps=60, lr=0.02, restarts=3, seed=1)
    exact = im.meg_unknown(pi, mdp).meg
    vals = res.extra["restart_values"]
    assert len(vals) == 3 and res.extra["std"] >= 0
    assert res.meg == pytest.approx(max(vals))
    assert all(v <= exact + 1e-9 for v in vals)
    assert res.extra["gap_to_exact"] == pytest.approx(exact - res.meg)
    assert res.meg > 0.2 * exact  # the ascent makes real progress


def test_custom_module_and_errors():
    mdp = cliff_world(horizon=5)
    pi = policies.epsilon_greedy(mdp, 0.3)
    lin = th.nn.Linear(40, 1).double()
    res = im.meg_unknown(pi, mdp, utility_model=lin, steps=30, restarts=2)
    assert 0 <= res.meg <= im.meg_unknown(pi, mdp).meg + 1e-9
    with pytest.raises(ValueError, match="not both"):
        im.meg_unknown(pi, mdp, features=np.eye(40), utility_model="mlp")
    with pytest.raises(ValueError, match="only named model"):
        im.meg_unknown(pi, mdp, utility_model="transformer")
    with pytest.raises(TypeError, match="utility_model must be"):
        im.meg_unknown(pi, mdp, utility_model=object())
    with pytest.raises(ValueError, match="steps must be a positive"):
        im.meg_unknown(pi, mdp, utility_model="mlp", steps=0)
    with pytest.raises(ValueError, match="features must have shape"):
        im.meg_unknown(pi, mdp, features=np.ones((3, 2)))
    with pytest.raises(ValueError, match="to \\(40,\\) utilities"):
        im.meg_unknown(pi, mdp, utility_model=th.nn.Linear(40, 3).double(), steps=1, restarts=1)


def test_goal_conditioned_agent_needs_the_instruction_in_the_target():
    # State (g, x): an instruction g in {left, right} drawn at the start and never changed, and a
    # position x on a line of 5 cells. The agent walks towards the instructed end.
    n, H = 5, 4
    S = 2 * n
    T = np.zeros((S, 2, S))
    for g in range(2):
        for x in range(n):
            T[g * n + x, 0, g * n + max(x - 1, 0)] = 1.0
            T[g * n + x, 1, g * n + min(x + 1, n - 1)] = 1.0
    p0 = np.zeros(S)
    p0[[2, n + 2]] = 0.5
    mdp = im.TabularMDP(T, None, H, p0)
    pi = np.zeros((S, 2))
    pi[:n] = [0.9, 0.1]  # instruction 0: go left
    pi[n:] = [0.1, 0.9]  # instruction 1: go right
    g = np.repeat([0, 1], n)
    x = np.tile(np.arange(n), 2)
    joint = im.meg_target(pi, mdp, (g, x)).meg
    position = im.meg_target(pi, mdp, x).meg
    instruction = im.meg_target(pi, mdp, g).meg
    assert instruction == 0.0  # the decisions cannot influence the instruction
    assert joint > position + 0.5  # only the joint target explains both behaviours
    assert joint == pytest.approx(im.meg_unknown(pi, mdp).meg, rel=1e-7)  # (g, x) is the state


def test_solver_option_validation():
    mdp = cliff_world(horizon=3)
    pi = policies.uniform(mdp)
    with pytest.raises(ValueError, match="tol must be"):
        im.meg_unknown(pi, mdp, tol=0.0)
    with pytest.raises(ValueError, match="max_iter must be"):
        im.meg_unknown(pi, mdp, max_iter=0)
    with pytest.raises(ValueError, match="at least one variable"):
        im.meg_target(pi, mdp, ())


def test_dense_class_that_holds_the_constants():
    # [first half, second half, ramp] spans the constant utility (a null direction of L: it changes
    # no policy); it is the class of [first half, ramp] up to that constant, so the values agree.
    from imitation_meg.core.unknown import class_features

    mdp = im.envs.cliff_world(horizon=10)
    pi = im.policies.epsilon_greedy(mdp, 0.2)
    S = mdp.n_states
    half = (np.arange(S) < S // 2).astype(float)
    ramp = np.arange(S, dtype=float)
    with_constant = np.stack([half, 1.0 - half, ramp], axis=1)
    without = np.stack([half, ramp], axis=1)
    d = class_features(mdp, with_constant).constant_direction()
    assert d is not None and float(d.norm()) == pytest.approx(1.0)
    assert class_features(mdp, without).constant_direction() is None
    a = im.meg_unknown(pi, mdp, features=with_constant)
    b = im.meg_unknown(pi, mdp, features=without)
    assert a.converged and b.converged
    assert a.meg == pytest.approx(b.meg, rel=1e-9)
