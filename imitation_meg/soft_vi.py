"""Finite-horizon soft value iteration, batched over rationality parameters, in log-space.

For a rationality ``beta`` the soft-optimal policy is computed through Lemma C.1 of the MEG paper
(``pi_{beta, U} = pi_{1, beta U}``): with the scaled reward ``beta * r``,

    Q_t(s, a) = beta * r(s, a) + gamma * sum_s' T[s, a, s'] V_{t+1}(s'),   V_H = 0,
    V_t(s)    = logsumexp_a Q_t(s, a),
    log pi_t(a | s) = Q_t(s, a) - V_t(s).

These are the log-partition (soft) values of ``beta * U``; at ``beta = 1`` they are exactly
imitation's ``mce_partition_fh`` outputs. ``beta = 0`` gives the uniform policy and every
quantity stays finite for ``|beta|`` up to ``1e15 / max|r|``. ``beta = +inf`` / ``-inf`` use the
hard backup (max / min) and split probability evenly over the actions whose hard Q lies within
``tie_tol * (1 + max|Q_t|)`` of the best (worst); their ``Q`` and ``V`` are the hard values of ``U``.
(Where hard Q-values tie exactly, large finite betas break the tie towards actions with more
future entropy, so the finite-beta policies approach the +-inf policy only where there are no
ties; MEG compares both, see :mod:`imitation_meg.meg`.)

Everything is differentiable with respect to the utility through autograd.

The module also carries drop-in twins of imitation's ``mce_partition_fh`` and
``mce_occupancy_measures`` (same signatures, same numpy return conventions).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch as th

from imitation_meg.mdp import TabularMDP, as_tensor

__all__ = [
    "SoftVIResult",
    "TIE_TOL",
    "soft_value_iteration",
    "hard_value_iteration",
    "occupancy_measures",
    "as_betas",
    "mce_partition_fh",
    "mce_occupancy_measures",
]

#: Relative tolerance under which hard Q-values count as tied (beta = +-inf).
TIE_TOL = 1e-9


@dataclasses.dataclass(frozen=True)
class SoftVIResult:
    """Output of :func:`soft_value_iteration`.

    Attributes:
        betas: ``(K,)`` rationality parameters (may contain 0 and +-inf).
        log_pi: ``(K, H, S, A)`` log-probabilities of the soft-optimal policies.
        Q: ``(K, H, S, A)`` soft Q-values of ``beta * U`` (hard Q of ``U`` for infinite beta).
        V: ``(K, H, S)`` soft values of ``beta * U`` (hard values of ``U`` for infinite beta).
    """

    betas: th.Tensor
    log_pi: th.Tensor
    Q: th.Tensor
    V: th.Tensor

    @property
    def pi(self) -> th.Tensor:
        """``(K, H, S, A)`` policy probabilities."""
        return self.log_pi.exp()


def as_betas(betas: Any, *, dtype: th.dtype, device: th.device) -> th.Tensor:
    """Read a scalar or 1-D sequence of rationality parameters as a ``(K,)`` tensor.

    Raises:
        ValueError: NaN entries or more than one dimension.
        TypeError: non-numeric input.
    """
    b = as_tensor(betas, name="betas", dtype=dtype, device=device)
    if b.ndim == 0:
        b = b.reshape(1)
    if b.ndim != 1:
        raise ValueError(f"betas must be a scalar or a 1-D sequence, got shape {tuple(b.shape)}.")
    if bool(th.isnan(b).any()):
        raise ValueError("betas contains NaN; pass real numbers or +-inf.")
    if b.numel() == 0:
        raise ValueError("betas is empty; pass at least one rationality parameter.")
    return b


def _tie_log_policy(Q: th.Tensor, sign: float, tie_tol: float) -> th.Tensor:
    """Uniform log-policy over the argmax (sign=+1) or argmin (sign=-1) of ``Q (..., A)``."""
    Qs = sign * Q
    best = Qs.max(-1, keepdim=True).values
    tol = tie_tol * (1.0 + Qs.abs().amax(-1, keepdim=True))
    ties = Qs >= best - tol
    n = ties.sum(-1, keepdim=True).to(Q.dtype)
    return th.where(ties, -th.log(n), th.full_like(Q, -math.inf))


def hard_value_iteration(
    mdp: TabularMDP, utility: Any = None, *, sign: float = 1.0, tie_tol: float = TIE_TOL
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """Optimal (``sign=+1``) or anti-optimal (``sign=-1``) finite-horizon values of a utility.

    Args:
        mdp: the MDP.
        utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)``; default the MDP's.
        sign: +1 maximises, -1 minimises.
        tie_tol: relative tie tolerance for the returned log-policy.

    Returns:
        ``(Q (H, S, A), V (H, S), log_pi (H, S, A))``; ``log_pi`` splits probability evenly over
        tied best actions and is ``-inf`` elsewhere.
    """
    r = mdp.reward_sa(utility)
    H = mdp.horizon
    S = mdp.n_states
    V_next = th.zeros(S, dtype=r.dtype, device=r.device)
    Qs, Vs, logps = [], [], []
    for _t in range(H - 1, -1, -1):
        Q = r + mdp.discount * mdp.expect_next(V_next)
        V = Q.amax(-1) if sign > 0 else Q.amin(-1)
        Qs.append(Q)
        Vs.append(V)
        logps.append(_tie_log_policy(Q, sign, tie_tol))
        V_next = V
    return th.stack(Qs[::-1]), th.stack(Vs[::-1]), th.stack(logps[::-1])


def soft_value_iteration(
    mdp: TabularMDP, betas: Any = 1.0, utility: Any = None, *, tie_tol: float = TIE_TOL
) -> SoftVIResult:
    """Soft value iteration for a vector of rationality parameters in one batched pass.

    Args:
        mdp: the MDP (its horizon ``H``, discount and transitions are used).
        betas: scalar or ``(K,)`` rationality parameters; ``0`` gives the uniform policy and
            ``+inf`` / ``-inf`` the optimal / anti-optimal policies with ties split evenly.
        utility: ``(S,)``, ``(S, A)`` or ``(S, A, S)`` utility; default the MDP's. May require
            grad: the outputs are differentiable with respect to it.
        tie_tol: relative tolerance for ties at infinite beta.

    Returns:
        :class:`SoftVIResult` with ``log_pi``/``Q`` of shape ``(K, H, S, A)`` and ``V`` of shape
        ``(K, H, S)``.

    Raises:
        ValueError: if no utility is available, or on bad betas.

    Example:
        >>> from imitation_meg.envs import cliff_world
        >>> res = soft_value_iteration(cliff_world(horizon=5), [0.0, 1.0, float("inf")])
        >>> tuple(res.log_pi.shape)
        (3, 5, 40, 4)
    """
    r = mdp.reward_sa(utility)
    b = as_betas(betas, dtype=r.dtype, device=r.device)
    K, H, S, A = b.numel(), mdp.horizon, mdp.n_states, mdp.n_actions
    finite = th.isfinite(b)
    log_pi = r.new_empty(K, H, S, A)
    Q = r.new_empty(K, H, S, A)
    V = r.new_empty(K, H, S)
    parts: dict[int, tuple[th.Tensor, th.Tensor, th.Tensor]] = {}
    if bool(finite.any()):
        idx = finite.nonzero().flatten()
        bf = b[idx].view(-1, 1, 1)
        scaled = bf * r  # (Kf, S, A)
        V_next = r.new_zeros(idx.numel(), S)
        Qf, Vf, Lf = [], [], []
        for _t in range(H - 1, -1, -1):
            q = scaled + mdp.discount * mdp.expect_next(V_next)
            lp = th.log_softmax(q, -1)
            v = th.logsumexp(q, -1)
            Qf.append(q)
            Vf.append(v)
            Lf.append(lp)
            V_next = v
        Qf_t, Vf_t, Lf_t = th.stack(Qf[::-1], 1), th.stack(Vf[::-1], 1), th.stack(Lf[::-1], 1)
        for j, k in enumerate(idx.tolist()):
            parts[k] = (Lf_t[j], Qf_t[j], Vf_t[j])
    for k in (~finite).nonzero().flatten().tolist():
        sign = 1.0 if float(b[k]) > 0 else -1.0
        q, v, lp = hard_value_iteration(mdp, r, sign=sign, tie_tol=tie_tol)
        parts[k] = (lp, q, v)
    if r.requires_grad:
        log_pi = th.stack([parts[k][0] for k in range(K)])
        Q = th.stack([parts[k][1] for k in range(K)])
        V = th.stack([parts[k][2] for k in range(K)])
    else:
        for k in range(K):
            log_pi[k], Q[k], V[k] = parts[k]
    return SoftVIResult(betas=b, log_pi=log_pi, Q=Q, V=V)


def occupancy_measures(mdp: TabularMDP, policy: Any) -> th.Tensor:
    """State occupancies ``D[t, s] = P(s_t = s)`` of a policy, for ``t = 0 .. H``.

    Args:
        mdp: the MDP.
        policy: stationary ``(S, A)``, time-dependent ``(H, S, A)``, or batched
            ``(K, H, S, A)`` probabilities (validated with :func:`imitation_meg.policies.as_policy`
            unless batched).

    Returns:
        ``(H + 1, S)`` (or ``(K, H + 1, S)`` for a batch). Row ``H`` is the post-horizon state,
        which no decision follows (imitation's convention).
    """
    from imitation_meg.policies import as_policy

    if isinstance(policy, th.Tensor) and policy.ndim == 4:
        pi = policy.to(mdp.dtype)
        batch = True
    else:
        pi = as_policy(policy, mdp)
        batch = False
    H = mdp.horizon
    d = mdp.initial_state_dist
    if batch:
        d = d.expand(pi.shape[0], -1)
    rows = [d]
    for t in range(H):
        pt = pi[..., t, :, :] if pi.ndim >= 3 else pi
        d = mdp.push_forward(d.unsqueeze(-1) * pt)
        rows.append(d)
    return th.stack(rows, -2)


# ---------------------------------------------------------------------- imitation twins
def _mdp_from_imitation_env(env: Any, reward: np.ndarray | None, discount: float) -> TabularMDP:
    u = getattr(env, "unwrapped", env)
    horizon = getattr(u, "horizon", None)
    if horizon is None:
        raise ValueError("Only finite-horizon environments are supported.")
    R = np.asarray(u.reward_matrix if reward is None else reward, dtype=np.float64)
    return TabularMDP(
        np.asarray(u.transition_matrix, dtype=np.float64),
        R,
        int(horizon),
        np.asarray(u.initial_state_dist, dtype=np.float64),
        float(discount),
    )


def mce_partition_fh(
    env: Any, *, reward: np.ndarray | None = None, discount: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop-in twin of ``imitation.algorithms.mce_irl.mce_partition_fh``.

    Args:
        env: a seals ``TabularModelPOMDP`` (``transition_matrix``, ``reward_matrix``,
            ``horizon``, ``initial_state_dist``).
        reward: a state reward ``(S,)``; defaults to ``env.reward_matrix``.
        discount: discount rate.

    Returns:
        ``(V (H, S), Q (H, S, A), pi (H, S, A))`` as numpy float64 arrays, equal to imitation's.

    Raises:
        ValueError: if ``env.horizon`` is None.
    """
    mdp = _mdp_from_imitation_env(env, reward, discount)
    res = soft_value_iteration(mdp, 1.0)
    return res.V[0].numpy(), res.Q[0].numpy(), res.log_pi[0].exp().numpy()


def mce_occupancy_measures(
    env: Any,
    *,
    reward: np.ndarray | None = None,
    pi: np.ndarray | None = None,
    discount: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Drop-in twin of ``imitation.algorithms.mce_irl.mce_occupancy_measures``.

    Args:
        env: a seals ``TabularModelPOMDP``.
        reward: state reward ``(S,)``; defaults to ``env.reward_matrix``.
        pi: ``(H, S, A)`` policy; defaults to the soft-optimal policy for ``reward``
            (computed, like imitation, without discount).
        discount: discount applied to the cumulative occupancy ``Dcum``.

    Returns:
        ``(D (H + 1, S), Dcum (S,))``: per-step state probabilities including the post-horizon
        row, and their discounted sum.

    Raises:
        ValueError: if ``env.horizon`` is None.
    """
    mdp = _mdp_from_imitation_env(env, reward, 1.0)
    if pi is None:
        policy = soft_value_iteration(mdp, 1.0).log_pi[0].exp()
    else:
        policy = th.as_tensor(np.asarray(pi, dtype=np.float64))
    D = occupancy_measures(mdp, policy).numpy()
    weights = discount ** np.arange(D.shape[0])
    return D, (weights[:, None] * D).sum(0)
