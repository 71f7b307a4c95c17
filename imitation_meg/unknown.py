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
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg.mdp import TabularMDP, as_tensor
from imitation_meg.meg import MEGResult, as_sa_occupancy, sa_occupancy_of
from imitation_meg.soft_vi import soft_value_iteration

__all__ = [
    "meg_unknown",
    "meg_target",
    "target_features",
    "gibbs_certificate",
    "log_likelihood",
    "default_utility_model",
]

_NEWTON_MAX_FEATURES = 256


# --------------------------------------------------------------------------- building blocks
def _occupancy(mdp: TabularMDP, policy: Any, sa_occupancy: Any) -> th.Tensor:
    if sa_occupancy is not None:
        return as_sa_occupancy(sa_occupancy, mdp)
    if policy is None:
        raise ValueError("pass a policy (S, A) / (H, S, A) or sa_occupancy=(H, S, A).")
    return sa_occupancy_of(mdp, policy)


def gibbs_certificate(mdp: TabularMDP, sa_occupancy: th.Tensor) -> float:
    """Upper bound on every MEG of a behaviour: ``sum_t E[log|A| - H(pi_t(. | s_t))]``.

    By Gibbs' inequality no model's log-likelihood exceeds the behaviour's own, so this bounds
    known- and unknown-utility MEG alike. ``pi_t`` is read off the occupancy
    ``w[t, s, a] / sum_a w[t, s, a]``.

    Args:
        mdp: the MDP.
        sa_occupancy: ``(H, S, A)`` state-action occupancy.
    """
    w = sa_occupancy
    ws = w.sum(-1, keepdim=True)
    cond = th.where(ws > 0, w / ws.clamp_min(1e-300), th.zeros_like(w))
    own = th.where(w > 0, w * cond.clamp_min(1e-300).log(), th.zeros_like(w)).sum()
    return float(mdp.horizon * math.log(mdp.n_actions) + own)


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
        sa = (th.arange(S, device=mdp.device).view(S, 1, 1) * A
              + th.arange(A, device=mdp.device).view(1, A, 1)).expand_as(mdp.next_state)
        vals = flat[sa.reshape(-1), mdp.next_state.reshape(-1)].view(*mdp.prob.shape, F)
        return (vals * mdp.prob.unsqueeze(-1)).sum(-2)
    raise ValueError(
        f"features must have shape (S, F), (S, A, F) or (S, A, S, F) with S={S}, A={A}; "
        f"got {tuple(phi.shape)}."
    )


def log_likelihood(mdp: TabularMDP, reward_sa: th.Tensor, sa_occupancy: th.Tensor) -> th.Tensor:
    """``E[sum_t log pi_t(a_t | s_t)]`` of the soft-optimal policy of ``reward_sa`` (beta = 1).

    Differentiable with respect to ``reward_sa (S, A)``.

    Args:
        mdp: the MDP.
        reward_sa: ``(S, A)`` per-step reward.
        sa_occupancy: ``(H, S, A)`` behaviour occupancy.

    Returns:
        A scalar tensor.
    """
    log_pi = soft_value_iteration(mdp, 1.0, utility=reward_sa).log_pi[0]
    return (sa_occupancy * log_pi).sum()


def _reward_of(theta: th.Tensor, phi: th.Tensor | None, S: int, A: int) -> th.Tensor:
    if phi is None:
        return theta.unsqueeze(1).expand(S, A)
    return phi @ theta


def _result(
    mdp: TabularMDP,
    w: th.Tensor,
    reward: th.Tensor,
    L: float,
    *,
    grad_norm: float,
    converged: bool,
    at_boundary: bool,
    evaluations: int,
    extra: dict[str, Any],
) -> MEGResult:
    H, A = mdp.horizon, mdp.n_actions
    bound = H * math.log(A)
    value = min(max(L + bound, 0.0), bound)
    if value <= 1e-12 * max(1.0, bound):  # rounding of L + H log|A| around 0
        value = 0.0
    r = reward.detach()
    spread = float((r.max() - r.min()))
    gam = mdp.discount ** th.arange(H, dtype=mdp.dtype, device=mdp.device)
    eu = float((gam.view(H, 1, 1) * w * r).sum())
    sv = soft_value_iteration(mdp, [1.0, 0.0], utility=r)
    pis = sv.pi  # (2, H, S, A)
    from imitation_meg.soft_vi import occupancy_measures

    D = occupancy_measures(mdp, pis)[:, :-1]  # (2, H, S)
    eus = (gam.view(1, H, 1, 1) * D.unsqueeze(-1) * pis * r).sum((1, 2, 3))
    return MEGResult(
        meg=float(value),
        beta=spread,
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=eu,
        model_expected_utility=float(eus[0]),
        uniform_expected_utility=float(eus[1]),
        log_likelihood=float(L),
        grad=float(grad_norm),
        converged=bool(converged),
        at_boundary=bool(at_boundary),
        evaluations=evaluations,
        extra=dict(extra, utility=r.cpu(), certificate=gibbs_certificate(mdp, w)),
    )


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
            one-hidden-layer 256-unit MLP. Gives a lower bound; see :func:`_meg_model`.
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
    w = _occupancy(mdp, policy, sa_occupancy)
    if utility_model is not None:
        if features is not None:
            raise ValueError("pass either features= (exact linear class) or utility_model=, not both.")
        return _meg_model(
            mdp, w, utility_model, steps=steps, lr=lr, restarts=restarts, seed=seed, progress=progress
        )
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
    from imitation_meg.meg import meg

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
    return _result(
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
            raise ValueError(f"a probabilistic target must have shape ({S}, K), got {tuple(t.shape)}.")
        t = t.to(mdp.dtype)
        if bool((t < 0).any()) or bool(((t.sum(1) - 1).abs() > 1e-6).any()):
            raise ValueError("a probabilistic target's rows must be distributions P(T = k | s).")
        return t
    if t.ndim != 1 or t.shape[0] != S:
        raise ValueError(
            f"target must give one value per state: shape ({S},), got {tuple(t.shape)}."
        )
    if t.is_floating_point():
        if not bool((t == t.round()).all()):
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


# --------------------------------------------------------------------------- differentiable classes
def default_utility_model(n_inputs: int, hidden: int = 256, *, seed: int = 0) -> nn.Module:
    """The paper's utility network: one hidden layer of 256 ReLU units, scalar output."""
    gen = th.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(n_inputs, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    with th.no_grad():
        for p in model.parameters():
            bound = 1.0 / math.sqrt(p.shape[-1] if p.ndim > 1 else hidden)
            p.uniform_(-bound, bound, generator=gen)
    return model.double()


def _observations(mdp: TabularMDP) -> th.Tensor:
    if mdp.observation_matrix is not None:
        return mdp.observation_matrix.to(mdp.dtype)
    return th.eye(mdp.n_states, dtype=mdp.dtype, device=mdp.device)


def _model_reward_fn(mdp: TabularMDP, model: Any) -> tuple[Callable[[], th.Tensor], bool]:
    """A closure giving the model's per-step ``(S, A)`` reward, and whether it is state-only."""
    obs = _observations(mdp)
    try:  # imitation RewardNet: evaluate on every (s, a, s') of the sparse transitions
        from imitation.rewards.reward_nets import RewardNet
    except ImportError:  # pragma: no cover - imitation not installed
        RewardNet = ()  # type: ignore[assignment]
    if RewardNet and isinstance(model, RewardNet):
        from imitation_meg.adapters.mce_irl import reward_net_sa

        return (lambda: reward_net_sa(model, mdp)), False
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"utility_model must be a torch.nn.Module, an imitation RewardNet or 'mlp', got "
            f"{type(model).__name__}."
        )
    S, A = mdp.n_states, mdp.n_actions
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None else mdp.dtype
    x = obs.to(dtype)

    def fn() -> th.Tensor:
        out = model(x)
        if out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.shape != (S,):
            raise ValueError(
                f"utility_model must map the ({S}, {x.shape[1]}) observation matrix to ({S},) "
                f"utilities, got output shape {tuple(out.shape)}."
            )
        return out.to(mdp.dtype).unsqueeze(1).expand(S, A)

    return fn, True


def _meg_model(
    mdp: TabularMDP,
    w: th.Tensor,
    utility_model: Any,
    *,
    steps: int,
    lr: float,
    restarts: int,
    seed: int,
    progress: bool,
) -> MEGResult:
    import copy

    if isinstance(utility_model, str):
        if utility_model != "mlp":
            raise ValueError(f"utility_model={utility_model!r}: the only named model is 'mlp'.")
        factory = lambda k: default_utility_model(_observations(mdp).shape[1], seed=seed + k)  # noqa: E731
    else:
        base = utility_model

        def factory(k: int) -> Any:
            model = copy.deepcopy(base)
            if k > 0:  # restart k: re-initialise the parameters from a derived seed
                gen = th.Generator().manual_seed(seed + k)
                with th.no_grad():
                    for p in model.parameters():
                        p.copy_((th.rand(p.shape, generator=gen, dtype=p.dtype) * 2 - 1) / math.sqrt(max(p.shape[-1], 1)))
            return model

    for nm, v in (("steps", steps), ("restarts", restarts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}.")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}.")
    H, A = mdp.horizon, mdp.n_actions
    bound = H * math.log(A)
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=restarts * steps, desc="MEG (utility model)", leave=False)
        except ImportError:  # pragma: no cover
            bar = None
    values: list[float] = []
    best = (-math.inf, None)
    state_only = True
    for k in range(restarts):
        model = factory(k)
        reward_fn, state_only = _model_reward_fn(mdp, model)
        log_beta = th.zeros((), dtype=mdp.dtype, requires_grad=True)
        sign = th.ones((), dtype=mdp.dtype)
        params = [p for p in model.parameters() if p.requires_grad] + [log_beta]
        opt = th.optim.Adam(params, lr=lr)
        best_k = -math.inf
        for _step in range(steps):
            opt.zero_grad()
            r = sign * log_beta.exp() * reward_fn()
            L = log_likelihood(mdp, r, w)
            (-L).backward()
            Lv = float(L.detach())
            if Lv > best_k:
                best_k = Lv
                if Lv > best[0]:
                    best = (Lv, r.detach().clone())
            opt.step()
            if bar is not None:
                bar.update(1)
        values.append(max(min(best_k + bound, bound), 0.0))
    if bar is not None:
        bar.close()
    Lbest, reward = best
    assert reward is not None
    vals = np.asarray(values)
    extra: dict[str, Any] = {
        "restart_values": vals.tolist(),
        "mean": float(vals.mean()),
        "std": float(vals.std(ddof=1)) if vals.size > 1 else 0.0,
        "lower_bound": True,
    }
    if state_only:
        exact = _meg_linear(mdp, w, None, tol=1e-10, max_iter=2000)
        extra["exact"] = exact.meg
        extra["gap_to_exact"] = exact.meg - max(values)
    return _result(
        mdp,
        w,
        reward,
        Lbest,
        grad_norm=math.nan,
        converged=False,
        at_boundary=False,
        evaluations=restarts * steps,
        extra=extra,
    )
