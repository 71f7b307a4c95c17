"""Where the supremum of a linear class's log-likelihood lies when no finite parameter attains it.

For a linear class ``r_theta = phi @ theta`` and a behaviour with state-action occupancy
``w (H, S, A)``, ``L(theta) = E_w[sum_t log pi_theta,t(a | s)]`` is concave, and its supremum
is attained by no finite ``theta`` as soon as the behaviour never takes some action in a state
it visits. This module finds the supremum exactly in that case.

**The limit along a direction.** Let ``d`` be a direction and ``Q*``, ``V*`` the hard (optimal)
values of the utility ``phi @ d``, with ``A*_t(s)`` its optimal actions. For any ``theta0``,
``Q_t(theta0 + lam d) = lam Q*_t + Q0_t + o(1)`` as ``lam -> inf``, where ``Q0`` is the soft
Q-function of ``phi @ theta0`` in the MDP whose actions at ``(t, s)`` are restricted to
``A*_t(s)`` (by induction over ``t``: the log-sum-exp over all actions is dominated by the
optimal ones). So the model's policy tends to the softmax of ``Q0`` over the tied optimal
actions ("ties kept soft"), and ``L(theta0 + lam d)`` tends to ``-inf`` if the behaviour takes a
non-optimal action of ``d``, else to ``L_A*(theta0)``: the log-likelihood of the same class
restricted to the face ``A*`` -- a problem of the same kind in fewer actions.

**The cone of rationalising directions.** The directions along which ``L`` stays finite are the
utilities ``phi @ d`` for which the behaviour is optimal on its support: with ``C`` the set of
``(d, V)`` satisfying, for every time ``t``, state ``s`` reachable at ``t`` and action ``a``,

    slack_t(s, a) = V_t(s) - phi(s, a) @ d - gamma * sum_s' T[s, a, s'] V_{t+1}(s') >= 0,

with equality wherever ``w_t(s, a) > 0``, ``d`` rationalises the behaviour iff ``(d, V*) in C``
(``V >= V*`` always; equality along the behaviour's support forces ``V = V*`` on the states it
visits when ``w`` is a policy's occupancy). ``C`` is a polyhedral cone, closed under sums, and the
sum of two rationalising directions has the intersection of their faces on the visited states.
One linear programme -- maximise ``sum z`` subject to ``slack >= z``, ``0 <= z <= 1`` over the
actions the behaviour never takes -- finds a direction ``d`` in the relative interior of ``C``,
whose face ``Z`` excludes every action that any rationalising direction excludes.

**The supremum.** For a policy's occupancy (``nu_t = w_t - gamma push(w_{t-1}) >= 0``, see
:class:`imitation_meg.core.likelihood.ClassObjective`), ``L = <w, r> - sum_t nu_t . V_t`` and smaller
faces give smaller soft values, so ``Z`` (the smallest face) gives the largest limit for every
``theta0``; and ``L_Z`` attains its supremum at a finite ``theta0`` (a further direction of ascent
inside ``Z`` would give a rationalising direction with a smaller face). Hence

    sup_theta L(theta) = max_theta0 L_Z(theta0),

reached along ``theta0 + lam d``. By duality this is also ``-max{causal entropy of w' : w'
matches the behaviour's feature expectations}`` for ``gamma = 1`` (maximum causal entropy IRL),
whose solution's support is ``Z``.

The linear programme has a variable per reachable ``(t, s)`` and a row per reachable
``(t, s, a)``; it is solved by HiGHS (scipy) and needed only when the behaviour leaves some
action untried in a state it visits. Its direction is checked against the hard values of
``phi @ d`` (:func:`imitation_meg.core.soft_vi.hard_value_iteration`).

Empirical occupancies (trajectories in a stochastic MDP) satisfy the flow equations only
approximately; the programme's cone then contains the rationalising directions but may be
larger, so the direction is accepted only if the check confirms it, and the face found is then
an attained limit but not necessarily the best one (``L`` itself need not be concave).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import scipy.sparse as sp
import torch as th

from imitation_meg.core.discounted import Dynamics, hard_values
from imitation_meg.core.likelihood import ClassFeatures
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.soft_vi import hard_value_iteration

__all__ = ["Face", "find_face", "needs_face", "reachable"]

#: Largest linear programme (rows = reachable (t, s, a)) solved for a face.
FACE_LP_MAX_ROWS = 2_000_000
# Slack that separates excluded from optimal actions in the programme's units (z = 1).
_SEPARATION = 0.5
# Interior point (with crossover): much faster than simplex on the large, sparse programmes here.
_LP_METHOD = "highs-ipm"


@dataclasses.dataclass(frozen=True)
class Face:
    """A face of the class at infinity and the direction that reaches it.

    Attributes:
        allowed: ``(H, S, A)`` bool: the face ``Z`` (every action at ``(t, s)`` the face's model
            never visits).
        direction: ``(F,)`` direction ``d`` in the class's coordinates (``phi @ d`` is a member
            of the class whose optimal actions on the visited states are ``Z``).
        n_excluded: number of excluded ``(t, s, a)`` at states the face's model visits.
        verified: the hard values of ``phi @ d`` confirm the face on every state it visits.
        lp_rows: rows of the linear programme.
        seconds: time spent.
    """

    allowed: th.Tensor
    direction: th.Tensor
    n_excluded: int
    verified: bool
    lp_rows: int
    seconds: float


def needs_face(w: th.Tensor) -> bool:
    """Whether some state the behaviour visits has an action it never takes (``w (H, S, A)``)."""
    visited = w.sum(-1, keepdim=True) > 0
    return bool(((w <= 0) & visited).any())


def reachable(mdp: TabularMDP, allowed: np.ndarray | None = None) -> np.ndarray:
    """``(H, S)`` bool: states reachable at each step from ``p0`` (through ``allowed`` actions);
    for a discounted infinite-horizon MDP ``(1, S)``: the states reachable at any step."""
    S = mdp.n_states
    ns = mdp.next_state.cpu().numpy()
    pos = mdp.prob.cpu().numpy() > 0
    start = mdp.initial_state_dist.cpu().numpy() > 0
    if mdp.horizon is None:  # the closure under the allowed actions
        seen = start.copy()
        frontier = np.flatnonzero(seen)
        while frontier.size:
            ok = (
                pos[frontier]
                if allowed is None
                else pos[frontier] & allowed[0, frontier][..., None]
            )
            nxt = np.unique(ns[frontier][ok])
            frontier = nxt[~seen[nxt]]
            seen[frontier] = True
        return seen[None]
    H = mdp.horizon
    reach = np.zeros((H, S), dtype=bool)
    reach[0] = start
    for t in range(H - 1):
        st = np.flatnonzero(reach[t])
        ok = pos[st] if allowed is None else pos[st] & allowed[t, st][:, :, None]
        reach[t + 1, ns[st][ok]] = True
    return reach


def _feature_rows(features: ClassFeatures, S_: np.ndarray, A_: np.ndarray) -> sp.csr_matrix:
    """``phi(s, a)`` for each row ``(S_[i], A_[i])`` as a sparse ``(R, F)`` matrix."""
    R, F = S_.size, features.n_features
    if features.kind == "index":
        assert features.labels is not None
        lab = features.labels.cpu().numpy()[S_]
        return sp.csr_matrix((np.ones(R), (np.arange(R), lab)), shape=(R, F))
    assert features.phi is not None
    phi = features.phi.cpu().numpy()
    dense = phi[S_] if features.kind == "state" else phi[S_, A_]
    return sp.csr_matrix(dense)


def find_face(
    mdp: TabularMDP, w: th.Tensor, features: ClassFeatures, *, max_rows: int = FACE_LP_MAX_ROWS
) -> Face | None:
    """The smallest face of the class that keeps the behaviour's support (see the module doc).

    Args:
        mdp: the MDP.
        w: ``(H, S, A)`` behaviour occupancy (for a discounted infinite-horizon MDP
            ``(1, S, A)``, the discounted occupancy: the values ``V`` are then stationary and
            every row's successors are in the same layer).
        features: the class (normalised features).
        max_rows: refuse (return None) when the linear programme would have more rows.

    Returns:
        The face, or None when the programme is too large or HiGHS fails.
    """
    from scipy.optimize import linprog

    start = time.perf_counter()
    H, S, A = w.shape
    F = features.n_features
    gamma = mdp.discount
    wn = w.cpu().numpy()
    reach = reachable(mdp)
    ts, ss = np.nonzero(reach)
    R = ts.size * A
    if max_rows < R:
        return None
    vidx = np.full((H, S), -1, dtype=np.int64)
    vidx[ts, ss] = np.arange(ts.size)
    nV = ts.size
    T_ = np.repeat(ts, A)
    S_ = np.repeat(ss, A)
    A_ = np.tile(np.arange(A), ts.size)
    cand = wn[T_, S_, A_] <= 0
    nz = int(cand.sum())
    # Columns: d (F), V (nV), z (nz). Rows: slack_t(s, a) (- z) for each reachable (t, s, a).
    phi_rows = _feature_rows(features, S_, A_).tocoo()
    ns = mdp.next_state.cpu().numpy()
    pr = mdp.prob.cpu().numpy()
    B = ns.shape[-1]
    stationary = mdp.horizon is None
    inner = np.arange(T_.size) if stationary else np.flatnonzero(T_ < H - 1)
    nxt_s = ns[S_[inner], A_[inner]].reshape(-1)
    nxt_p = pr[S_[inner], A_[inner]].reshape(-1)
    nxt_r = np.repeat(inner, B)
    nxt_t = np.repeat(T_[inner] + (0 if stationary else 1), B)
    keep = nxt_p > 0
    rows = np.concatenate([np.arange(R), phi_rows.row, nxt_r[keep], np.flatnonzero(cand)])
    cols = np.concatenate(
        [
            F + vidx[T_, S_],
            phi_rows.col,
            F + vidx[nxt_t[keep], nxt_s[keep]],
            F + nV + np.arange(nz),
        ]
    )
    vals = np.concatenate([np.ones(R), -phi_rows.data, -gamma * nxt_p[keep], -np.ones(nz)])
    M = sp.csr_matrix((vals, (rows, cols)), shape=(R, F + nV + nz))
    c = np.zeros(F + nV + nz)
    c[F + nV :] = -1.0
    bounds = np.zeros((F + nV + nz, 2))
    bounds[: F + nV] = (-np.inf, np.inf)
    bounds[F + nV :] = (0.0, 1.0)
    eq = ~cand
    res = linprog(
        c,
        A_ub=-M[cand],
        b_ub=np.zeros(nz),
        A_eq=M[eq],
        b_eq=np.zeros(int(eq.sum())),
        bounds=bounds,
        method=_LP_METHOD,
    )
    if res.status != 0 or res.x is None:
        return None
    x = res.x
    excluded = np.zeros((H, S, A), dtype=bool)
    excluded[T_[cand], S_[cand], A_[cand]] = x[F + nV :] > _SEPARATION
    allowed = ~excluded
    # States whose every action is excluded are never visited by the face's model.
    allowed[~allowed.any(-1)] = True
    seen = reachable(mdp, allowed)
    d = th.as_tensor(x[:F], dtype=w.dtype, device=w.device)
    verified = _check(mdp, features, d, allowed, seen, wn)
    return Face(
        allowed=th.as_tensor(allowed, device=w.device),
        direction=d,
        n_excluded=int((excluded & seen[..., None]).sum()),
        verified=verified,
        lp_rows=R,
        seconds=time.perf_counter() - start,
    )


def _check(
    mdp: TabularMDP,
    features: ClassFeatures,
    d: th.Tensor,
    allowed: np.ndarray,
    seen: np.ndarray,
    wn: np.ndarray,
) -> bool:
    """Whether ``phi @ d``'s optimal actions are the face on every state the face visits and
    include every action the behaviour takes."""
    r = features.utility(d, mdp.n_states, mdp.n_actions)
    if mdp.horizon is None:
        Qn, Vn = hard_values(Dynamics.of(mdp), r.double().cpu().numpy())
        gap = (Vn[:, None] - Qn)[None]
    else:
        Q, V, _ = hard_value_iteration(mdp, r)
        gap = (V.unsqueeze(-1) - Q).cpu().numpy()
    optimal = gap <= _SEPARATION
    if not math.isfinite(float(np.abs(gap[seen]).max(initial=0.0))):
        return False
    same = (optimal == allowed)[seen].all()
    taken = (wn > 0) & ~optimal
    return bool(same and not taken.any())
