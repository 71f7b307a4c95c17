"""Unknown-utility MEG: exact over linear utility classes, targets, and differentiable classes.

For a linear class ``r_theta(s, a) = Phi(s, a) @ theta`` the rationality ``beta`` is absorbed into
``theta`` and

    L(theta) = E_pi[ sum_t log pi_theta,t(a_t | s_t) ]

(``pi_theta`` the soft-optimal policy of ``r_theta`` at ``beta = 1``) is MCE-IRL's causal
log-likelihood: concave in ``theta`` for a policy's occupancy. Unknown-utility MEG over the class
is the best known-utility MEG of its members,

    MEG_class(pi) = sup_theta L(theta) + H log|A|

a property of the policy, the dynamics and the class alone (not of the utility the MDP carries).
:func:`meg_unknown` computes it exactly:

1. **Normalise the class.** Each feature column is divided by its largest magnitude, shifted to
   start at 0 and divided by its spread; constant columns are dropped (adding a constant to
   every reward leaves every soft policy unchanged), one-hot state features become an index
   map. The optimum depends only on the span, so results agree to solver tolerance for any
   representable positive scale of the features (to the last bit for one-hot features such as
   ``np.eye(S) * c``), and under translation.
2. **Find the face at infinity** when the behaviour leaves some action untried in a state it
   visits: one linear programme gives the smallest set of actions ``Z`` that some member of the
   class makes optimal while keeping the behaviour's actions optimal, and that member's
   direction ``d`` (:mod:`imitation_meg.core.faces`). The supremum of ``L`` is the maximum of the
   class restricted to ``Z`` (the limit along ``theta0 + t d``, with finite ``theta0``: the
   limit policies keep the tied actions soft, as every member's ``beta = +inf`` limit does).
3. **Solve the (restricted) concave problem** by a truncated Newton method with exact gradients
   ``Phi^T (sum_t w_t - sum_t rho_t pi_t)`` and Hessian-vector products, each a backward and a
   forward pass over the MDP (:func:`imitation_meg.core.likelihood.maximise`); it stops when the
   Newton decrement says the remaining gap is below ``tol * max(1, |L|)``.

:func:`meg_target` is MEG with respect to target variables (paper Definition 4.4): the class of
all utility functions of the target, i.e. one-hot features of ``target(s)``.

With ``utility_model=`` the class is a differentiable model (the paper's Algorithm 2); then only
a lower bound is available, found by joint gradient ascent on ``beta`` and the model's parameters
from several random restarts.

(Just over 500 lines: the public entry points of unknown-utility MEG, the damped Newton
solve and the face at infinity are one workflow; the objective itself lives in
:mod:`imitation_meg.core.likelihood`.)
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch as th
from torch import nn

from imitation_meg._validation import ImitationMEGWarning
from imitation_meg.core.algorithm2 import meg_algorithm2
from imitation_meg.core.class_features import (
    ClassFeatures,
    _class_features,
    class_features,
)
from imitation_meg.core.discounted import CONVERGED_RESIDUAL, DiscountedClassObjective
from imitation_meg.core.faces import find_face, needs_face
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.kernels.reductions import dot as _dot
from imitation_meg.core.known import MEGResult, clipped_meg, meg_upper_bound
from imitation_meg.core.likelihood import (
    ClassObjective,
    behaviour_occupancy,
    gibbs_certificate,
    log_likelihood,
    maximise,
)
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.targets import target_features
from imitation_meg.type_aliases import ArrayLike, PolicyLike, TargetLike

__all__ = [
    "FaceWarning",
    "class_features",
    "gibbs_certificate",
    "log_likelihood",
    "meg_target",
    "meg_unknown",
    "target_features",
]


# Doublings of the direction's scale at most when looking for a member that attains a limit.
_LIMIT_DOUBLINGS = 64


class FaceWarning(ImitationMEGWarning):
    """The face at infinity of a linear class could not be determined; the value may be low."""


# --------------------------------------------------------------------------- exact linear classes
@_threads.entry_point
def meg_unknown(
    policy: PolicyLike | None,
    mdp: TabularMDP,
    *,
    features: ArrayLike | None = None,
    sa_occupancy: ArrayLike | None = None,
    utility_model: nn.Module | str | None = None,
    tol: float = 1e-10,
    max_iter: int = 200,
    steps: int = 500,
    lr: float = 0.01,
    restarts: int = 4,
    seed: int = 0,
    progress: bool = False,
) -> MEGResult:
    """Unknown-utility MEG of a policy over a utility class.

    Args:
        policy: ``(S, A)`` or ``(H, S, A)`` policy (ignored when ``sa_occupancy`` is given).
        mdp: the MDP (its utility, if any, plays no part).
        features: the linear class ``U_theta = Phi @ theta``: ``None`` for every utility function
            of the state; else ``(S, F)`` state features, ``(S, A, F)`` state-action features or
            ``(S, A, S, F)`` transition features. Solved exactly.
        sa_occupancy: optional ``(H, S, A)`` occupancy replacing the policy's (trajectories).
        utility_model: a differentiable class instead (paper Algorithm 2): a ``torch.nn.Module``
            mapping the ``(S, O)`` observation matrix to ``(S,)`` state utilities, an imitation
            ``RewardNet`` (evaluated on every ``(s, a, s')``), or ``"mlp"`` for the paper's
            one-hidden-layer 256-unit MLP. Gives a lower bound; see
            :func:`imitation_meg.core.algorithm2.meg_algorithm2`.
        tol: relative tolerance of the exact solver: it stops when the Newton decrement bounds
            the remaining gap of ``L`` by ``tol * max(1, |L|)``.
        max_iter: Newton-step budget of the exact solver.
        steps, lr, restarts, seed: settings of the differentiable-class ascent.
        progress: show a progress bar (Newton steps, or ascent steps for ``utility_model``).

    Returns:
        :class:`MEGResult`. ``beta`` is the spread (max - min) of the fitted utility, into which
        the rationality is absorbed (``+inf`` when the supremum is a limit); ``grad`` is the final
        gradient norm; ``converged`` says the solve met its tolerance; ``at_boundary`` that the
        supremum lies at infinity. ``extra`` holds ``utility``, the fitted ``(S, A)`` per-step
        utility up to an additive constant: a member of the class whose log-likelihood falls
        short of the value by ``utility_gap`` (0 at an interior optimum; at most
        ``tol * max(1, |L|)`` at a limit unless rounding stops the approach first), so
        ``meg(policy, mdp, extra["utility"])`` gives ``meg`` to that tolerance; at a limit it is
        ``theta0 + limit_scale * d``, far enough along the direction; the expected utilities
        are those of this utility and of its soft-optimal model. Also ``theta`` (the optimum in
        the user's coordinates; at a limit the finite part ``theta0``), ``attained_by``
        (``"interior"`` or ``"limit"``), ``direction`` (``d`` for a limit), ``face_excluded``
        (actions the face excludes), ``certificate`` (the Gibbs upper bound), ``decrement`` (the last Newton
        decrement; ``limit_tolerance`` is half of it at a limit), ``iterations``,
        ``cg_iterations``, ``passes``, ``trace`` and ``concave`` (False for an occupancy that is
        not a policy's, such as trajectories in a stochastic MDP: then the result is a stationary
        point). For a differentiable class ``extra`` holds ``restart_values``, ``mean``, ``std``
        and ``gap_to_exact``.

    Raises:
        ValueError / TypeError: bad policy, occupancy, feature shapes or settings.

    Example:
        >>> import imitation_meg as im
        >>> mdp = im.envs.cliff_world(horizon=10)
        >>> pi = im.policies.epsilon_greedy(mdp, 0.3)
        >>> im.meg_unknown(pi, mdp).meg >= im.meg(pi, mdp).meg
        True
    """
    _check_options(mdp, tol, max_iter, utility_model)
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
            exact = _meg_linear(mdp, w, None, tol=1e-10, max_iter=200, progress=False)
            res.extra["exact"] = exact.meg
            res.extra["gap_to_exact"] = exact.meg - max(res.extra["restart_values"])
        return res
    return _meg_linear(mdp, w, features, tol=tol, max_iter=max_iter, progress=progress)


def _check_options(mdp: Any, tol: Any, max_iter: Any, utility_model: Any) -> None:
    """Refuse another kind of MDP, a ``tol`` outside ``(0, 1)``, a ``max_iter`` below 1, and
    Algorithm 2 on a discounted infinite-horizon MDP."""
    if not isinstance(mdp, TabularMDP):
        raise TypeError(f"mdp must be an imitation_meg.TabularMDP, got {type(mdp).__name__}.")
    if not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise ValueError(f"tol must be a relative tolerance in (0, 1), got {tol!r}.")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    if utility_model is not None and mdp.horizon is None:
        raise ValueError(
            f"utility_model= (the paper's Algorithm 2) needs a finite horizon, and {mdp.name} is "
            "a discounted infinite-horizon MDP; use features= (exact over linear classes, every "
            "state utility by default) or mdp.with_horizon(H)."
        )


def _meg_linear(
    mdp: TabularMDP,
    w: th.Tensor,
    features: ArrayLike | None,
    *,
    tol: float,
    max_iter: int,
    progress: bool,
) -> MEGResult:
    if mdp.horizon is None and mdp.device.type != "cpu":
        # The discounted solvers work in numpy on the CPU: solve a CPU copy there (the result's
        # tensors are CPU ones whatever the device).
        mdp, w = mdp.to("cpu"), w.cpu()
    feats, coords = _class_features(mdp, features)
    face, face_ok = _checked_face(mdp, w, feats)
    allowed = _face_allowed(face)
    restricted = allowed is not None
    obj = _objective(mdp, w, feats, allowed)
    sol = maximise(obj, tol=tol, max_iter=max_iter, progress=progress)
    S, A = mdp.n_states, mdp.n_actions
    extra = _solve_record(sol, coords, obj, face)
    L_soft = sol["L"]
    converged = bool(sol["converged"]) and face_ok
    if isinstance(obj, DiscountedClassObjective):
        extra["bellman_residual"] = obj.dyn.residual
        converged = converged and obj.dyn.residual <= CONVERGED_RESIDUAL
    if restricted:
        assert face is not None
        return _limit_result(mdp, w, feats, coords, face, sol, (tol, converged), extra)
    r = feats.reward(sol["theta"], S, A)
    obj.value(sol["theta"])
    spread = float(r.max() - r.min()) if r.numel() else 0.0
    extra.update(attained_by="interior", utility_gap=0.0)
    at_boundary = not face_ok
    return _result(
        mdp, obj, w, r, obj.pi, L_soft, spread, sol["grad"], converged, at_boundary, extra
    )


def _solve_record(sol: dict[str, Any], coords: Any, obj: Any, face: Any) -> dict[str, Any]:
    """The solve's record for ``MEGResult.extra``: the parameters in the user's coordinates,
    the Newton and conjugate-gradient steps, the passes, the trace, the face excluded."""
    return {
        "theta": coords.to_user(sol["theta"]).cpu(),
        "iterations": sol["iterations"],
        "cg_iterations": sol["cg_iterations"],
        "passes": sol["passes"],
        "decrement": sol["decrement"],
        "trace": sol["trace"],
        "concave": obj.concave,
        "face_excluded": 0 if face is None else face.n_excluded,
        "limit_tolerance": 0.0,
    }


def _face_allowed(face: Any) -> th.Tensor | None:
    """The ``(S, A)`` actions a face allows, or None when there is no face to keep to."""
    return face.allowed if face is not None and face.n_excluded > 0 else None


def _checked_face(mdp: TabularMDP, w: th.Tensor, feats: ClassFeatures) -> tuple[Any, bool]:
    """``(face, ok)``: the face of the class where its supremum lies at infinity (None for an
    interior one), and False with a :class:`FaceWarning` when it could not be determined."""
    if feats.n_features == 0 or not needs_face(w):
        return None, True
    face = find_face(mdp, w, feats)
    if face is not None and face.verified:
        return face, True
    reason = (
        "its linear programme is too large or failed"
        if face is None
        else "the hard values of the programme's direction do not confirm it"
    )
    warnings.warn(
        "the behaviour leaves actions untried, so the class's supremum may lie at "
        f"infinity, but its face could not be determined ({reason}); the value is the "
        "best finite one found (converged=False).",
        FaceWarning,
        stacklevel=4,
    )
    return None, False


def _limit_result(
    mdp: TabularMDP,
    w: th.Tensor,
    feats: ClassFeatures,
    coords: Any,
    face: Any,
    sol: dict[str, Any],
    tol_converged: tuple[float, bool],
    extra: dict[str, Any],
) -> MEGResult:
    """The result of a supremum at infinity, along the face's ``direction``: the value of the
    solve restricted to the face, attained to the solver's tolerance by a member of the class
    (``theta + t * direction``)."""
    tol, converged = tol_converged
    L_soft = sol["L"]
    full = _objective(mdp, w, feats, None)
    t, L_t = _attaining_scale(
        full, sol["theta"], face.direction, L_soft, tol * max(1.0, abs(L_soft))
    )
    theta_t = sol["theta"] + t * face.direction
    extra.update(
        attained_by="limit",
        direction=coords.to_user(face.direction).cpu(),
        limit_tolerance=max(sol["decrement"], 0.0) / 2,
        limit_scale=t,
        utility_gap=max(L_soft - L_t, 0.0),
    )
    full.value(theta_t)  # the model's policy at that member
    r = feats.reward(theta_t, mdp.n_states, mdp.n_actions)
    return _result(mdp, full, w, r, full.pi, L_soft, math.inf, sol["grad"], converged, True, extra)


def _objective(
    mdp: TabularMDP, w: th.Tensor, feats: ClassFeatures, allowed: th.Tensor | None
) -> ClassObjective | DiscountedClassObjective:
    """The class's log-likelihood in ``mdp``, restricted to the face ``allowed`` when given."""
    if mdp.horizon is None:  # w is (1, S, A): the discounted occupancy
        face_sa = None if allowed is None else allowed[0].cpu().numpy()
        return DiscountedClassObjective(mdp, w[0].double().cpu().numpy(), feats, allowed=face_sa)
    return ClassObjective(mdp, w, feats, allowed=allowed)


def _attaining_scale(
    full: ClassObjective | DiscountedClassObjective,
    theta0: th.Tensor,
    d: th.Tensor,
    L_sup: float,
    target: float,
) -> tuple[float, float]:
    """``(t, L(theta0 + t d))`` for the first ``t = 1, 2, 4, ...`` whose log-likelihood in the
    whole class is within ``target`` of the limit ``L_sup``.

    ``L`` is concave along the ray and tends to ``L_sup``, so it rises with ``t`` (the actions
    the face excludes lose probability like ``exp(-t * gap)``); where rounding stops the rise
    first, the best point found.
    """
    t, best_t, best = 1.0, 1.0, -math.inf
    for _ in range(_LIMIT_DOUBLINGS):
        value = full.value(theta0 + t * d)
        if math.isnan(value) or value <= best:
            break
        best_t, best = t, value
        if L_sup - value <= target:
            break
        t *= 2.0
    return best_t, best


def _result(
    mdp: TabularMDP,
    obj: ClassObjective | DiscountedClassObjective,
    w: th.Tensor,
    r: th.Tensor,
    model: th.Tensor,
    L: float,
    beta: float,
    grad: float,
    converged: bool,
    at_boundary: bool,
    extra: dict[str, Any],
) -> MEGResult:
    """The result of a class's best model: ``r (A, S)`` the reported utility, ``model (H, A, S)``
    the model's policy."""
    bound = meg_upper_bound(mdp)
    value = clipped_meg(L, bound)
    H = w.shape[0]  # 1 for a discounted MDP, whose occupancy carries the discounting
    gam = (1.0 if mdp.horizon is None else mdp.discount) ** th.arange(
        H, dtype=w.dtype, device=w.device
    )
    r_sa = r.T
    eu = _dot(gam.view(H, 1, 1) * w, r_sa.expand(H, *r_sa.shape))
    return MEGResult(
        meg=float(value),
        beta=float(beta),
        upper_bound=bound,
        normalized=float(value / bound) if bound > 0 else 0.0,
        expected_utility=eu,
        model_expected_utility=obj.expected_return(r, model),
        uniform_expected_utility=obj.expected_return(r, None),
        log_likelihood=float(L),
        grad=float(grad),
        converged=bool(converged),
        at_boundary=bool(at_boundary),
        evaluations=int(extra["passes"]),
        extra=dict(extra, utility=r_sa.contiguous().cpu(), certificate=gibbs_certificate(mdp, w)),
    )


@_threads.entry_point
def meg_target(
    policy: PolicyLike | None,
    mdp: TabularMDP,
    target: TargetLike,
    *,
    sa_occupancy: ArrayLike | None = None,
    tol: float = 1e-10,
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
