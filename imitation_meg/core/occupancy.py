"""State occupancies of a policy, and the soft-optimal policies' visitation in little memory.

:func:`occupancy_measures` is the fast forward pass on the transition operator's buffers,
:func:`occupancy_reference` the plain loop it is tested against (and its autograd path);
:func:`soft_state_visitation` recomputes each step's soft-optimal policy from stored soft
values, so that MCE IRL on large MDPs never holds ``(K, H, S, A)`` tables. All three are
re-exported from :mod:`imitation_meg.core.soft_vi`.
"""

from __future__ import annotations

from typing import Any

import torch as th

from imitation_meg._validation import as_betas, as_policy
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.progress import long_pass, progress
from imitation_meg.type_aliases import PolicyLike, UtilityLike

__all__ = ["occupancy_measures", "occupancy_reference", "soft_state_visitation"]


def occupancy_reference(mdp: TabularMDP, policy: th.Tensor) -> th.Tensor:
    """State occupancies ``D[t, s] = P(s_t = s)`` as a plain loop: the reference.

    ``D_0 = p0``, ``D_{t+1}(s') = sum_{s, a} D_t(s) pi_t(a | s) T[s, a, s']``. The fast pass of
    :func:`occupancy_measures` is tested against it; it is also its autograd path.

    Args:
        mdp: the MDP.
        policy: checked probabilities ``(S, A)``, ``(H, S, A)`` or ``(K, H, S, A)`` in the MDP's
            dtype.

    Returns:
        ``(H + 1, S)`` (``(K, H + 1, S)`` for a batch).
    """
    d = mdp.initial_state_dist
    if policy.ndim == 4:
        d = d.expand(policy.shape[0], -1)
    rows = [d]
    for t in range(mdp.steps):
        pt = policy[..., t, :, :] if policy.ndim >= 3 else policy
        d = mdp.push_forward(d.unsqueeze(-1) * pt)
        rows.append(d)
    return th.stack(rows, -2)


@_threads.entry_point
def occupancy_measures(mdp: TabularMDP, policy: PolicyLike, *, validate: bool = True) -> th.Tensor:
    """State occupancies ``D[t, s] = P(s_t = s)`` of a policy, for ``t = 0 .. H``.

    Args:
        mdp: the MDP.
        policy: stationary ``(S, A)``, time-dependent ``(H, S, A)``, or batched
            ``(K, H, S, A)`` probabilities (validated with :func:`imitation_meg.core.policies.as_policy`
            unless batched).
        validate: set False only for a policy that already passed ``as_policy`` (in the MDP's
            dtype and device).

    Returns:
        ``(H + 1, S)`` (or ``(K, H + 1, S)`` for a batch). Row ``H`` is the post-horizon state,
        which no decision follows (imitation's convention).
    """
    if isinstance(policy, th.Tensor) and policy.ndim == 4:
        pi = policy.to(mdp.dtype)
        batch = True
    else:
        pi = as_policy(policy, mdp).to(mdp.dtype) if validate else th.as_tensor(policy)
        batch = False
    if pi.requires_grad:
        return occupancy_reference(mdp, pi)
    H, S = mdp.steps, mdp.n_states
    # Working layout as in the backward pass: the policy as (H, A, S, K) (no copy for the
    # permuted outputs of soft_value_iteration), D as (H + 1, S, K).
    if batch:
        pw = pi.permute(1, 3, 2, 0)
    else:
        pw = pi.transpose(-1, -2).unsqueeze(-1)
        pw = pw if pw.ndim == 4 else pw.unsqueeze(0)
    pw = pw.to(mdp.dtype).contiguous()
    K = pw.shape[-1]
    D = mdp.initial_state_dist.new_empty(H + 1, S, K)
    D[0] = mdp.initial_state_dist.unsqueeze(-1)
    prod = mdp.operator.products(mdp.dtype, K)
    k = prod.kernels
    mass = prod.sa_buffer(K, D)  # (A, S, K); state-major storage on large MDPs
    Dv, Pv, Mv = prod.view(D), prod.view(pw), prod.view(mass)
    D_ops, M_op = prod.operands(D, K), prod.flat(mass)
    stationary = pw.shape[0] == 1
    mul, push = k.mul, prod.push
    long = long_pass(H, H * S * mdp.n_actions * K)
    for t in progress(range(H), enabled=long, desc="occupancy", total=H):
        mul(Dv[t], Pv[0] if stationary else Pv[t], Mv)
        push(D_ops[t + 1], M_op)
    return D.permute(2, 0, 1) if batch else D[..., 0]


@_threads.entry_point
def soft_state_visitation(
    mdp: TabularMDP,
    betas: Any = 1.0,
    utility: UtilityLike | None = None,
    *,
    max_bytes: int = 1 << 30,
) -> tuple[th.Tensor, th.Tensor]:
    """Soft VI and the soft-optimal policies' state visitation, without ``(K, H, S, A)`` outputs.

    The memory-lean form of ``soft_value_iteration`` + ``occupancy_measures`` for large MDPs
    (what MCE IRL needs): the backward pass keeps only the soft values ``V (k, H, S)`` of a chunk
    of ``k`` betas (chunked so that they fit in ``max_bytes``), and the forward pass recomputes
    each step's policy from them. Finite betas only.

    Args:
        mdp: the MDP.
        betas: scalar or ``(K,)`` finite rationality parameters.
        utility: as in :func:`soft_value_iteration` (default the MDP's).
        max_bytes: memory budget of the stored soft values per chunk.

    Returns:
        ``(V0 (K, S), visitation (K, S))``: soft values at ``t = 0`` and the expected number of
        visits ``sum_{t=0}^{H} P(s_t = s)`` (imitation's ``Dcum`` with discount 1, including the
        post-horizon row).

    Raises:
        ValueError: infinite betas, or as :func:`soft_value_iteration`.
    """
    r = mdp.reward_sa(utility).detach()
    b = as_betas(betas, dtype=r.dtype, device=r.device)
    if not bool(th.isfinite(b).all()):
        raise ValueError(
            "soft_state_visitation takes finite betas; use soft_value_iteration for +-inf."
        )
    H, S = mdp.steps, mdp.n_states
    per_beta = H * S * r.element_size()
    chunk = int(max(1, min(b.numel(), max_bytes // max(per_beta, 1))))
    V0s, Ds = [], []
    gamma = mdp.discount
    for i in range(0, b.numel(), chunk):
        bc = b[i : i + chunk]
        k = bc.numel()
        scaled = bc.view(k, 1, 1) * r
        V = r.new_empty(k, H, S)
        for t in range(H - 1, -1, -1):
            q = scaled if t == H - 1 else scaled + gamma * mdp.expect_next(V[:, t + 1])
            V[:, t] = th.logsumexp(q, -1)
        d = mdp.initial_state_dist.expand(k, S).clone()
        total = d.clone()
        for t in range(H):
            q = scaled if t == H - 1 else scaled + gamma * mdp.expect_next(V[:, t + 1])
            q.sub_(V[:, t].unsqueeze(-1)).exp_().mul_(d.unsqueeze(-1))
            d = mdp.push_forward(q)
            total += d
        V0s.append(V[:, 0].clone())
        Ds.append(total)
        del V
    return th.cat(V0s), th.cat(Ds)
