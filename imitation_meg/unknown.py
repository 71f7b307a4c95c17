"""Unknown-utility MEG: exact over linear utility classes, targets, and differentiable classes.

For a linear class ``r_theta(s, a) = Phi(s, a) @ theta`` the rationality ``beta`` is absorbed into
``theta`` and

    L(theta) = E_pi[ sum_t log pi_theta,t(a_t | s_t) ]

(``pi_theta`` the soft-optimal policy of ``r_theta`` at ``beta = 1``) is MCE-IRL's causal
log-likelihood: concave in ``theta``, with gradient ``Phi^T (D_pi - D_theta)`` for ``discount = 1``.
Unknown-utility MEG over the class is ``sup_theta L(theta) + H log|A|``, a convex problem with a
global optimum which :func:`meg_unknown` solves with L-BFGS (exact autograd gradients) followed by
damped Newton steps on the exact Hessian for classes of moderate dimension. The supremum may lie
at infinity (near-deterministic policies); the solver then follows the ascent direction outwards
and reports the limit with the size of the last improvement as its tolerance.

:func:`meg_target` is MEG with respect to target variables (paper Definition 4.4): the class of
all utility functions of the target, i.e. one-hot features of ``target(s)``.

With ``utility_model=`` the class is a differentiable model (the paper's Algorithm 2); then only
a lower bound is available, found by joint gradient ascent on ``beta`` and the model's parameters
from several random restarts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg._validation import as_tensor
from imitation_meg.algorithm2 import meg_algorithm2
from imitation_meg.known import MEGResult
from imitation_meg.likelihood import (
    behaviour_occupancy,
    class_result,
    gibbs_certificate,
    log_likelihood,
)
from imitation_meg.mdp import TabularMDP

__all__ = [
    "gibbs_certificate",
    "log_likelihood",
    "meg_target",
    "meg_unknown",
    "target_features",
]

_NEWTON_MAX_FEATURES = 256


def _features_sa(mdp: TabularMDP, features: Any) -> th.Tensor | None:
    """Reduce a feature array to per-step state-action features ``(S, A, F)`` (None = identity)."""
    if features is None:
        return None
    phi = as_tensor(features, name="features", dtype=mdp.dtype, device=mdp.device)
    S, A = mdp.n_states, mdp.n_actions
    if not bool(th.isfinite(phi).all()):
        raise ValueError("features contain NaN or infinite values.")
    if phi.ndim == 2 and phi.shape[0] == S:
        return phi.unsqueeze(1).expand(S, A, phi.shape[1])
    if phi.ndim == 3 and phi.shape[:2] == (S, A):
        return phi
    if phi.ndim == 4 and phi.shape[:3] == (S, A, S):
        F = phi.shape[-1]
        flat = phi.reshape(S * A, S, F)
        sa = (
            th.arange(S, device=mdp.device).view(S, 1, 1) * A
            + th.arange(A, device=mdp.device).view(1, A, 1)
        ).expand_as(mdp.next_state)
        vals = flat[sa.reshape(-1), mdp.next_state.reshape(-1)].view(*mdp.prob.shape, F)
        return (vals * mdp.prob.unsqueeze(-1)).sum(-2)
    raise ValueError(
        f"features must have shape (S, F), (S, A, F) or (S, A, S, F) with S={S}, A={A}; "
        f"got {tuple(phi.shape)}."
    )


def _reward_of(theta: th.Tensor, phi: th.Tensor | None, S: int, A: int) -> th.Tensor:
    if phi is None:
        return theta.unsqueeze(1).expand(S, A)
    return phi @ theta


# --------------------------------------------------------------------------- exact linear classes
def meg_unknown(
    policy: Any,
    mdp: TabularMDP,
    *,
    features: Any = None,
    sa_occupancy: Any = None,
    utility_model: nn.Module | Any = None,
    tol: float = 1e-10,
    max_iter: int = 2000,
    steps: int = 500,
    lr: float = 0.01,
    restarts: int = 4,
    seed: int = 0,
    progress: bool = False,
) -> MEGResult:
    """Unknown-utility MEG of a policy over a utility class.

    Args:
        policy: ``(S, A)`` or ``(H, S, A)`` policy (ignored when ``sa_occupancy`` is given).
        mdp: the MDP.
        features: the linear class ``U_theta = Phi @ theta``: ``None`` for every utility function
            of the state; else ``(S, F)`` state features, ``(S, A, F)`` state-action features or
            ``(S, A, S, F)`` transition features. Solved exactly.
        sa_occupancy: optional ``(H, S, A)`` occupancy replacing the policy's (trajectories).
        utility_model: a differentiable class instead (paper Algorithm 2): a ``torch.nn.Module``
            mapping the ``(S, O)`` observation matrix to ``(S,)`` state utilities, an imitation
            ``RewardNet`` (evaluated on every ``(s, a, s')``), or ``"mlp"`` for the paper's
            one-hidden-layer 256-unit MLP. Gives a lower bound; see
            :func:`imitation_meg.algorithm2.meg_algorithm2`.
        tol: relative tolerance of the exact solver (gradient norm and limit improvements).
        max_iter: L-BFGS iteration budget of the exact solver.
        steps, lr, restarts, seed, progress: settings of the differentiable-class ascent.

    Returns:
        :class:`MEGResult`. ``beta`` is the spread (max - min) of the fitted utility, into which
        the rationality is absorbed; ``grad`` is the final gradient norm; ``extra`` holds
        ``utility`` (the fitted ``(S, A)`` per-step utility, rationality included), ``theta``,
        ``certificate`` (the Gibbs upper bound), ``limit_tolerance`` when ``at_boundary`` and
        ``iterations``. For a differentiable class ``extra`` also holds ``restart_values``,
        ``mean``, ``std`` and ``gap_to_exact``.

    Raises:
        ValueError / TypeError: bad policy, occupancy or feature shapes.

    Example:
        >>> import imitation_meg as im
        >>> mdp = im.envs.cliff_world(horizon=10)
        >>> pi = im.policies.epsilon_greedy(mdp, 0.3)
        >>> im.meg_unknown(pi, mdp).meg >= im.meg(pi, mdp).meg
        True
    """
    if not isinstance(mdp, TabularMDP):
        raise TypeError(f"mdp must be an imitation_meg.TabularMDP, got {type(mdp).__name__}.")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise ValueError(f"tol must be a relative tolerance in (0, 1), got {tol!r}.")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    w = behaviour_occupancy(mdp, policy, sa_occupancy)
    if utility_model is not None:
        if features is not None:
            raise ValueError(
                "pass either features= (exact linear class) or utility_model=, not both."
            )
        res = meg_algorithm2(
            None,
            mdp,
            utility_model,
            sa_occupancy=w,
            steps=steps,
            lr=lr,
            restarts=restarts,
            seed=seed,
            progress=progress,
        )
        if res.extra.get("state_only"):
            # The class of every state utility contains any state-only model: its exact optimum
            # bounds the model's value, and the gap says how far the ascent fell short.
            exact = _meg_linear(mdp, w, None, tol=1e-10, max_iter=2000)
            res.extra["exact"] = exact.meg
            res.extra["gap_to_exact"] = exact.meg - max(res.extra["restart_values"])
        return res
    phi = _features_sa(mdp, features)
    res = _meg_linear(mdp, w, phi, tol=tol, max_iter=max_iter)
    return _with_known_candidate(res, mdp, w, phi)


def _in_class(mdp: TabularMDP, phi: th.Tensor | None) -> th.Tensor | None:
    """The MDP's own per-step utility if the linear class contains it, else None."""
    if mdp.utility is None:
        return None
    r = mdp.reward_sa()
    if phi is None:
        return r if bool((r == r[:, :1]).all()) else None
    S, A, F = phi.shape
    sol = th.linalg.lstsq(phi.reshape(S * A, F), r.reshape(S * A, 1)).solution
    resid = (phi.reshape(S * A, F) @ sol - r.reshape(S * A, 1)).norm()
    return r if float(resid) <= 1e-9 * max(1.0, float(r.norm())) else None


def _with_known_candidate(
    res: MEGResult, mdp: TabularMDP, w: th.Tensor, phi: th.Tensor | None
) -> MEGResult:
    """Compare with the known-utility MEG of the MDP's own utility when the class contains it.

    That utility's +-inf limit (uniform over tied best actions) is in the class but is not a
    limit of finite parameters when the hard Q-values tie, so it is checked explicitly; this
    keeps ``meg_unknown >= meg`` exact.
    """
    r = _in_class(mdp, phi)
    if r is None:
        return res
    from imitation_meg.known import meg

    known = meg(None, mdp, r, sa_occupancy=w)
    res.extra["known_utility_meg"] = known.meg
    if known.meg <= res.meg:
        return res
    import dataclasses

    return dataclasses.replace(
        res,
        meg=known.meg,
        normalized=known.normalized,
        log_likelihood=known.log_likelihood,
        converged=known.converged,
        at_boundary=known.at_boundary,
        model_expected_utility=res.model_expected_utility,
        extra=dict(res.extra, attained_by="environment utility", beta_env=known.beta),
    )


def _meg_linear(
    mdp: TabularMDP, w: th.Tensor, phi: th.Tensor | None, *, tol: float, max_iter: int
) -> MEGResult:
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    F = S if phi is None else phi.shape[-1]
    evals = 0

    def f(theta: th.Tensor) -> th.Tensor:
        nonlocal evals
        evals += 1
        return log_likelihood(mdp, _reward_of(theta, phi, S, A), w)

    def value_and_grad(theta: th.Tensor) -> tuple[float, th.Tensor]:
        th_ = theta.detach().requires_grad_(True)
        L = f(th_)
        (g,) = th.autograd.grad(L, th_)
        return float(L.detach()), g

    theta = th.zeros(F, dtype=mdp.dtype, device=mdp.device)
    gtol = tol * max(1.0, H)
    newton = F <= _NEWTON_MAX_FEATURES
    # 1. L-BFGS on -L with strong-Wolfe line search (a short run when Newton follows).
    param = theta.clone().requires_grad_(True)
    lbfgs_iter = min(max_iter, 200) if newton else max_iter
    opt = th.optim.LBFGS(
        [param],
        lr=1.0,
        max_iter=lbfgs_iter,
        max_eval=2 * lbfgs_iter,
        tolerance_grad=gtol,
        tolerance_change=1e-16,
        history_size=50,
        line_search_fn="strong_wolfe",
    )

    def closure() -> th.Tensor:
        opt.zero_grad()
        loss = -f(param)
        loss.backward()
        return loss

    opt.step(closure)
    theta = param.detach().clone()
    L, g = value_and_grad(theta)
    iterations = int(opt.state[opt._params[0]].get("n_iter", 0))

    # 2. Damped Newton (Levenberg-Marquardt) with the exact Hessian for small classes; the
    # Hessian is singular along directions that do not change the policy, hence the damping.
    if newton:
        for _ in range(50):
            if float(g.norm()) <= gtol:
                break
            neg = -th.autograd.functional.hessian(f, theta)
            lam = 1e-12 * float(neg.diagonal().abs().max().clamp_min(1e-300))
            eye = th.eye(F, dtype=theta.dtype, device=theta.device)
            improved = False
            for _ls in range(30):
                step = th.linalg.lstsq(neg + lam * eye, g.unsqueeze(1)).solution[:, 0]
                cand = theta + step
                Lc, gc = value_and_grad(cand)
                if Lc >= L - 1e-15 * max(1.0, abs(L)) and th.isfinite(gc).all():
                    theta, L, g, improved = cand, Lc, gc, True
                    break
                lam = max(lam * 100, 1e-10)
            iterations += 1
            if not improved:
                break
    grad_norm = float(g.norm())
    converged = grad_norm <= gtol
    at_boundary = False
    limit_tol = 0.0
    # 3. The supremum can lie at infinity only if the behaviour never takes some action in a
    # state it visits (a finite theta gives every action positive probability). Then follow theta
    # outwards while the likelihood keeps improving, and report the limit.
    ws = w.sum(-1, keepdim=True)
    has_zeros = bool(((w == 0) & (ws > 0)).any())
    if has_zeros and float(theta.norm()) > 0:
        direction = theta.clone()
        last_gain = None
        for _ in range(60):
            cand = theta + direction
            Lc = float(f(cand).detach())
            gain = Lc - L
            if not gain > 0:
                break
            theta, L, last_gain = cand, Lc, gain
            direction = direction * 2
            if gain <= tol * max(1.0, abs(L)):
                break
        if last_gain is not None:
            _, g = value_and_grad(theta)
            grad_norm = float(g.norm())
            cert = gibbs_certificate(mdp, w)
            limit_tol = min(last_gain, max(cert - (L + H * math.log(A)), 0.0))
            at_boundary = True
            converged = limit_tol <= max(1e-6, tol * max(1.0, abs(L))) or grad_norm <= gtol
        elif converged:
            # Converged with a finite theta although some actions are never taken: the limit
            # is already reached to within the gradient tolerance.
            at_boundary = float(theta.abs().max()) * 1e-3 > 1.0
    reward = _reward_of(theta, phi, S, A)
    return class_result(
        mdp,
        w,
        reward,
        L,
        grad_norm=grad_norm,
        converged=converged,
        at_boundary=at_boundary,
        evaluations=evals,
        extra={"theta": theta.cpu(), "iterations": iterations, "limit_tolerance": limit_tol},
    )


# --------------------------------------------------------------------------- targets
def target_features(mdp: TabularMDP, target: Any) -> th.Tensor:
    """One-hot state features ``(S, K)`` of a target variable.

    Args:
        mdp: the MDP.
        target: an integer array ``(S,)`` of target values per state; a callable on state
            indices returning hashable values; a grid-helper name (``"row"``, ``"column"``,
            ``"cell"``, ``"goal"``) for MDPs built by :func:`imitation_meg.envs.cliff_world`; or
            a ``(S, K)`` matrix of probabilities ``P(T = k | s)`` for a target that depends on the
            state only stochastically (rows summing to 1); or a tuple of any of the
            deterministic kinds, for several target variables jointly (e.g. an instruction and
            the position, for a goal-conditioned agent).

    Raises:
        ValueError: wrong length, or a probability matrix whose rows do not sum to 1.
        TypeError: a target of unsupported kind.
    """
    S = mdp.n_states
    if isinstance(target, tuple):
        # Several target variables: the class is every function of their joint value.
        if not target:
            raise ValueError("a tuple of targets must name at least one variable.")
        parts = [target_features(mdp, t).argmax(1).cpu().numpy() for t in target]
        _, joint = np.unique(np.stack(parts, 1), axis=0, return_inverse=True)
        target = joint.reshape(-1)
    if isinstance(target, str):
        from imitation_meg.envs.cliff import grid_target

        target = grid_target(mdp, target)
    elif callable(target):
        values = [target(s) for s in range(S)]
        _, inv = np.unique(np.asarray([repr(v) for v in values]), return_inverse=True)
        target = inv
    t = as_tensor(target, name="target", device=mdp.device)
    if t.ndim == 2:
        if t.shape[0] != S:
            raise ValueError(
                f"a probabilistic target must have shape ({S}, K), got {tuple(t.shape)}."
            )
        t = t.to(mdp.dtype)
        if bool((t < 0).any()) or bool(((t.sum(1) - 1).abs() > 1e-6).any()):
            raise ValueError("a probabilistic target's rows must be distributions P(T = k | s).")
        return t
    if t.ndim != 1 or t.shape[0] != S:
        raise ValueError(
            f"target must give one value per state: shape ({S},), got {tuple(t.shape)}."
        )
    if t.is_floating_point() and not bool((t == t.round()).all()):
        raise TypeError("target values must be integers (labels); relabel them with np.unique.")
    _, inv = th.unique(t.to(th.int64), return_inverse=True)
    K = int(inv.max()) + 1
    return th.nn.functional.one_hot(inv, K).to(mdp.dtype)


def meg_target(
    policy: Any, mdp: TabularMDP, target: Any, *, sa_occupancy: Any = None, tol: float = 1e-10
) -> MEGResult:
    """MEG with respect to target variables (paper Definition 4.4), solved exactly.

    The utility class is every function of the target: one-hot features of ``target(s)``
    (see :func:`target_features`). Targets need not be descendants of the decisions (an
    instruction or goal-conditioned input works the same way).

    Args:
        policy: ``(S, A)`` or ``(H, S, A)`` policy.
        mdp: the MDP.
        target: see :func:`target_features`.
        sa_occupancy: optional ``(H, S, A)`` occupancy replacing the policy's.
        tol: solver tolerance.

    Returns:
        :class:`MEGResult` as from :func:`meg_unknown`; ``extra["target_values"]`` is ``K``.
    """
    phi = target_features(mdp, target)
    res = meg_unknown(policy, mdp, features=phi, sa_occupancy=sa_occupancy, tol=tol)
    res.extra["target_values"] = int(phi.shape[1])
    return res
