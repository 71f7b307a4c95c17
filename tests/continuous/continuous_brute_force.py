"""An independent brute force for continuous-action MEG (shared by the continuous tests):
composite Boole's rule on a dense uniform grid of the box, its own soft value iteration in
numpy, and Brent's method in beta."""

from __future__ import annotations

import numpy as np
import torch as th
from scipy.optimize import minimize_scalar

from imitation_meg.continuous import ContinuousMDP, DensityPolicy


def boole(a: float, b: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Boole's rule with ``n`` (a multiple of 4) intervals: error O(h^6)."""
    assert n % 4 == 0
    x = np.linspace(a, b, n + 1)
    h = (b - a) / n
    w = np.empty(n + 1)
    w[0::4], w[1::2], w[2::4] = 14.0, 32.0, 12.0
    w[0] = w[-1] = 7.0
    return x, w * 2.0 * h / 45.0


def box_grid(mdp: ContinuousMDP, n: int) -> tuple[np.ndarray, np.ndarray]:
    rules = [boole(mdp.low[k], mdp.high[k], n) for k in range(mdp.action_dim)]
    grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
    wgrid = np.ones_like(grids[0])
    for k, (_, w) in enumerate(rules):
        shape = [1] * mdp.action_dim
        shape[k] = -1
        wgrid = wgrid * w.reshape(shape)
    return np.stack([g.reshape(-1) for g in grids], 1), wgrid.reshape(-1)


class BruteForce:
    """``L(beta)`` on a dense grid for a behaviour given as a density on the box (stationary
    ``dens(s, x) -> (N,)`` or a ``(H, S, N)`` table), or as explicit per-state points and
    weights (for the Gaussians)."""

    def __init__(self, mdp: ContinuousMDP, n: int, utility=None) -> None:
        self.mdp = mdp
        self.x, self.w = box_grid(mdp, n)
        self.vol = self.w.sum()
        S, N = mdp.n_states, self.x.shape[0]
        s_rep = th.arange(S).repeat_interleave(N)
        a_rep = th.as_tensor(np.tile(self.x, (S, 1)))
        self.T = mdp.transition(s_rep, a_rep).numpy().reshape(S, N, S)
        self.r = mdp.reward(s_rep, a_rep, utility).numpy().reshape(S, N)
        self.utility = utility

    def set_utility(self, utility) -> None:
        """Another utility at the grid (and the behaviour's points, if given)."""
        S, N = self.mdp.n_states, self.x.shape[0]
        s_rep = th.arange(S).repeat_interleave(N)
        self.r = self.mdp.reward(s_rep, th.as_tensor(np.tile(self.x, (S, 1))), utility)
        self.r = self.r.numpy().reshape(S, N)
        if self.bx is None:
            self.br = self.r
        else:
            M, d = self.bx.shape[1:]
            a_rep = th.as_tensor(self.bx.reshape(-1, d))
            self.br = self.mdp.reward(th.arange(S).repeat_interleave(M), a_rep, utility)
            self.br = self.br.numpy().reshape(S, M)
        self.utility = utility

    def behaviour_from_density(self, dens) -> None:
        S, H = self.mdp.n_states, self.mdp.horizon
        table = np.stack([dens(s, self.x) for s in range(S)])  # (S, N)
        table = np.broadcast_to(table, (H, S, self.x.shape[0]))
        self.bx = None
        self.bw = table * self.w  # (H, S, N) probability weights at the grid points
        self.bT, self.br = self.T, self.r

    def behaviour_from_points(self, pts: np.ndarray, wts: np.ndarray) -> None:
        """``pts (S, M, d)``, ``wts (S, M)``."""
        S, M, d = pts.shape
        s_rep = th.arange(S).repeat_interleave(M)
        a_rep = th.as_tensor(pts.reshape(-1, d))
        self.bT = self.mdp.transition(s_rep, a_rep).numpy().reshape(S, M, S)
        self.br = self.mdp.reward(s_rep, a_rep, self.utility).numpy().reshape(S, M)
        self.bx = pts
        self.bw = np.broadcast_to(wts, (self.mdp.horizon, S, M))

    def occupancy(self) -> np.ndarray:
        D = [self.mdp.initial_state_dist.numpy()]
        for t in range(self.mdp.horizon - 1):
            D.append(np.einsum("s,sm,smu->u", D[-1], self.bw[t], self.bT))
        return np.array(D)

    def soft(self, beta: float) -> list[np.ndarray]:
        """Soft values ``V_t`` for t = 0..H."""
        V = [np.zeros(self.mdp.n_states)]
        for _ in range(self.mdp.horizon):
            Q = self.r + self.T @ V[0]
            if beta == 0:
                V.insert(0, (Q * self.w).sum(-1) / self.vol)
            else:
                m = (beta * Q).max(-1, keepdims=True)
                lse = m[:, 0] + np.log((self.w * np.exp(beta * Q - m)).sum(-1) / self.vol)
                V.insert(0, lse / beta)
        return V

    def L(self, beta: float) -> float:
        V = self.soft(beta)
        D = self.occupancy()
        total = 0.0
        for t in range(self.mdp.horizon):
            Qb = self.br + self.bT @ V[t + 1]
            total += beta * D[t] @ (self.bw[t] * (Qb - V[t][:, None])).sum(-1)
        return total

    def meg(self) -> tuple[float, float]:
        # L is concave: bracket the maximum on a log grid of both signs, then Brent.
        grid = np.concatenate([-np.logspace(2, -3, 26), [0.0], np.logspace(-3, 2, 26)])
        vals = [self.L(b) for b in grid]
        k = int(np.argmax(vals))
        if grid[k] == 0.0:
            return 0.0, 0.0
        res = minimize_scalar(
            lambda b: -self.L(b),
            bracket=(grid[k - 1], grid[k], grid[k + 1]),
            method="brent",
            options={"xtol": 1e-13},
        )
        return -float(res.fun), float(res.x)


def poly_density(coefs: np.ndarray, mdp: ContinuousMDP):
    """Per dimension the mixture ``0.7 tilt_kappa(x) + 0.3 (1 + c P2(x)) / 2`` of the normalised
    exponential tilt ``kappa exp(kappa x) / (2 sinh kappa)`` and a Legendre bump (``x`` the
    action normalised to [-1, 1]; ``coefs[s, k] = (kappa, c)``): exactly normalised."""

    def one(s: int, x: np.ndarray) -> np.ndarray:
        xn = 2.0 * (x - mdp.low) / (mdp.high - mdp.low) - 1.0
        f = np.ones(x.shape[0])
        for k in range(mdp.action_dim):
            kappa, c = coefs[s, k]
            tilt = kappa * np.exp(kappa * xn[:, k]) / (2 * np.sinh(kappa)) if kappa else 0.5
            bump = 0.5 * (1.0 + c * 0.5 * (3 * xn[:, k] ** 2 - 1.0))
            f = f * 2.0 * (0.7 * tilt + 0.3 * bump)
        return f / mdp.volume

    def torch_density(states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        x = actions.numpy()
        out = np.empty(x.shape[0])
        for s in np.unique(states.numpy()):
            idx = states.numpy() == s
            out[idx] = one(int(s), x[idx])
        return th.as_tensor(out)

    return one, DensityPolicy(torch_density, name="polynomial")


def random_coefs(seed: int, S: int, d: int) -> np.ndarray:
    """``(S, d, 2)``: tilts in [-2.5, 2.5], bumps in [-0.9, 1.8] (the density stays positive)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.uniform(-2.5, 2.5, (S, d)), rng.uniform(-0.9, 1.8, (S, d))], -1)


def gaussian_points(mdp: ContinuousMDP, mean, std, kind: str, n: int = 4000):
    """Independent rules for the Gaussians: per dimension Boole's rule in the pre-squash
    variable over mean +- 12 std, or the inside of the box plus the two point masses; a
    product over dimensions. Returns points ``(S, M, d)`` and weights ``(S, M)``."""
    from scipy.stats import norm

    pts, wts = [], []
    for s in range(mean.shape[0]):
        per_dim = []
        for k in range(mdp.action_dim):
            mu, sd, lo, hi = mean[s, k], std[s, k], mdp.low[k], mdp.high[k]
            if kind == "squashed":
                g, w = boole(mu - 12 * sd, mu + 12 * sd, n)
                p = w * norm.pdf(g, mu, sd)
                x = lo + (np.tanh(g) + 1) * 0.5 * (hi - lo)
            else:
                a, b = max(lo, mu - 12 * sd), min(hi, mu + 12 * sd)
                g, w = boole(a, b, n)
                p = np.concatenate(
                    [[norm.cdf(lo, mu, sd)], w * norm.pdf(g, mu, sd), [norm.sf(hi, mu, sd)]]
                )
                x = np.concatenate([[lo], g, [hi]])
            per_dim.append((x, p / p.sum()))
        grids = np.meshgrid(*[x for x, _ in per_dim], indexing="ij")
        wg = np.ones_like(grids[0])
        for k, (_, p) in enumerate(per_dim):
            shape = [1] * mdp.action_dim
            shape[k] = -1
            wg = wg * p.reshape(shape)
        pts.append(np.stack([g.reshape(-1) for g in grids], 1))
        wts.append(wg.reshape(-1))
    return np.stack(pts), np.stack(wts)
