"""Accuracy of exact unknown-utility MEG against independent checks (the numbers of docs/unknown.md).

Usage:
    .venv/bin/python benchmarks/unknown_accuracy.py

Prints one markdown table: each check, our value, the reference and their relative difference.
The references are an independent numpy / scipy solver (L-BFGS-B on the same objective with its
analytic gradient), values derived by hand, the behaviour's Gibbs bound where the theory says the
class attains it, and our own value at feature scale 1 (for the scale sweeps).
"""

from __future__ import annotations

import math

import numpy as np
import torch as th
from scipy.optimize import minimize
from scipy.special import logsumexp

import imitation_meg as im
from imitation_meg import policies
from imitation_meg.core.known import sa_occupancy_of
from imitation_meg.core.likelihood import gibbs_certificate
from imitation_meg.envs import cliff_world, random_mdp


def scipy_meg(pi: np.ndarray, mdp: im.TabularMDP, phi: np.ndarray) -> float:
    """Unknown-utility MEG over ``phi (S, A, F)`` by scipy's L-BFGS-B in numpy (independent)."""
    T = mdp.dense_transition().numpy()
    if mdp.horizon is None:
        raise ValueError("scipy_meg solves finite-horizon MDPs; this one is discounted.")
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    p0 = mdp.initial_state_dist.numpy()
    pi = np.broadcast_to(pi, (H, S, A))
    D: list[np.ndarray] = [p0]
    for t in range(H - 1):
        D.append(np.einsum("s,sa,sat->t", D[-1], pi[t], T))
    w = np.array(D)[:, :, None] * pi

    def neg(theta: np.ndarray) -> tuple[float, np.ndarray]:
        r = phi @ theta
        V = np.zeros(S)
        logp = []
        for _ in range(H):
            Q = r + T @ V
            V = logsumexp(Q, axis=1)
            logp.append(Q - V[:, None])
        logp.reverse()
        L = sum(float(np.sum(w[t] * logp[t])) for t in range(H))
        d, G = p0.copy(), np.zeros((S, A))
        for t in range(H):
            m = d[:, None] * np.exp(logp[t])
            G += m
            d = np.einsum("sa,sat->t", m, T)
        return -L, -np.einsum("saf,sa->f", phi, w.sum(0) - G)

    x = minimize(
        neg,
        np.zeros(phi.shape[-1]),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 50_000, "ftol": 1e-16, "gtol": 1e-12, "maxcor": 50},
    )
    return -x.fun + H * math.log(A)


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def main() -> None:
    th.set_num_threads(1)
    rows: list[tuple[str, float, float]] = []
    for eps in (0.1, 0.5):
        mdp = cliff_world(horizon=12)
        pi = policies.epsilon_greedy(mdp, eps)
        phi = np.repeat(np.eye(40)[:, None, :], 4, 1)
        rows.append(
            (
                f"CliffWorld 10x4, H=12, eps-greedy {eps}, every state utility vs scipy",
                im.meg_unknown(pi, mdp).meg,
                scipy_meg(pi.numpy(), mdp, phi),
            )
        )
    rng = np.random.default_rng(0)
    mdp = random_mdp(30, 3, 8, seed=1, utility="none")
    pi_random = rng.dirichlet(np.ones(3), size=(8, 30))
    phi = rng.standard_normal((30, 3, 5))
    rows.append(
        (
            "random MDP S=30, H=8, random policy, 5 random (S, A) features vs scipy",
            im.meg_unknown(pi_random, mdp, features=phi).meg,
            scipy_meg(pi_random, mdp, phi),
        )
    )
    # Hand-derived limits (tests/core/test_unknown_limits.py derives them).
    T = np.zeros((3, 2, 3))
    T[0, 0, 1] = T[0, 1, 2] = 1.0
    T[1, :, 1] = T[2, :, 2] = 1.0
    r = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    two = im.TabularMDP(T, r, 2)
    # The soft policies tend to (1/3, 2/3) at state 0: both behaviours get the limit's value,
    # log(4/3) (an even split of the ties is not the model at beta = +inf).
    for p0, exact, what in (
        (0.5, math.log(4 / 3), "even split"),
        (1 / 3, math.log(4 / 3), "the limit policy"),
    ):
        pi_two = np.zeros((2, 3, 2))
        pi_two[:, 0] = [p0, 1 - p0]
        pi_two[:, 1] = [1.0, 0.0]
        pi_two[:, 2] = [0.5, 0.5]
        rows.append(
            (
                f"two-step example, limit by hand ({what})",
                im.meg_unknown(pi_two, two, features=r[:, :, None]).meg,
                exact,
            )
        )
    pi = policies.optimal(cliff_world(horizon=30, goal_region=2), tie_break="max_entropy")
    mdp = cliff_world(horizon=30)
    rows.append(
        (
            "CliffWorld H=30, goal-region-2 max-entropy optimal policy vs its Gibbs bound",
            im.meg_unknown(pi, mdp).meg,
            gibbs_certificate(mdp, sa_occupancy_of(mdp, pi)),
        )
    )
    # Scale sweeps: the largest relative deviation from scale 1 over 10^-200 .. 10^200.
    mdp = cliff_world(horizon=30)
    pi = policies.epsilon_greedy(mdp, 0.1)
    scales = [10.0**k for k in range(-200, 201, 25)]
    ref = im.meg_unknown(pi, mdp, features=np.eye(40)).meg
    worst = max(
        (im.meg_unknown(pi, mdp, features=np.eye(40) * c).meg for c in scales),
        key=lambda v: rel(v, ref),
    )
    rows.append(("CliffWorld H=30, eps 0.1, eye(S) * c, worst c in 1e-200..1e200", worst, ref))
    phi = rng.standard_normal((40, 6))
    ref = im.meg_unknown(pi, mdp, features=phi).meg
    worst = max(
        (im.meg_unknown(pi, mdp, features=phi * c + 3.0 * c).meg for c in scales),
        key=lambda v: rel(v, ref),
    )
    rows.append(("same, 6 random features * c + 3c, worst c in 1e-200..1e200", worst, ref))
    print("| check | ours | reference | relative difference |")
    print("|---|---|---|---|")
    for name, ours, refv in rows:
        print(f"| {name} | {ours:.13g} | {refv:.13g} | {rel(ours, refv):.1e} |")


if __name__ == "__main__":
    main()
