"""One soft Q-network for every rationality: fitted soft Q-iteration conditioned on beta and time.

The model family is the finite-horizon soft-optimal one of the exact code, with episodes that
end early treated as the tabular converters treat them (the state entered on termination is
absorbing and worth nothing). In utility units, with ``m_b`` the exponential mean over actions::

    q_t(s, a) = r(s, a) + E[ m_beta(q_{t+1}(s', .)) ],     q_H = 0,   q = 0 after termination,
    m_beta(y)  = (1 / beta) log( (1/|A|) sum_a exp(beta y_a) )   (mean at 0, max / min at +-inf),
    pi_beta,t  = softmax(beta q_t(s, .)).

This is the paper's soft value iteration ``V = (1/beta) logsumexp(beta Q)`` with the constant
``(H - t) log|A| / beta`` removed, so it stays finite at ``beta = 0`` and gives the same policies;
subtracting ``log|A|`` makes an absorbing (terminated) state worth 0 for every beta, exactly
as an absorbing state with zero utility is in :class:`~imitation_meg.TabularMDP`. No discount.

The model (:class:`SoftQModel`) predicts ``f = q / q_scale`` as a one-step reward network of the
observation plus ``(H - t - 1) / H`` times a continuation network of the standardised flat
observation, the time-to-go fraction ``tau = (H - t) / H`` and bounded features
``b / (c + |b|)`` of the normalised rationality ``b = beta * q_scale``. It is trained on a fixed
set of transitions by regression on targets from a periodically frozen copy (fitted
Q-iteration), each sample with its own ``b`` drawn from a prior over ``0``, ``+-inf`` and a
log-uniform range, so one network serves every beta. The next-state expectation is a regression
target (one sampled ``s'`` per row); the soft mean over actions is computed exactly.

**Box actions.** With a bounded ``Box`` the reference is the uniform density ``u`` on the box,
``m_beta(y) = (1 / beta) log int u(a) exp(beta y(a)) da`` and
``log(pi_beta,t(a | s) / u(a)) = beta (q_t(s, a) - m_beta(q_t(s, .)))``. The second model class,
:class:`BoxSoftQModel`, takes the action (scaled to ``[-1, 1]``) as an input beside the same
observation, time and rationality features and predicts one value; ``m_beta`` is a rule over the
box (:class:`ActionGrid`: tensor-product Gauss-Legendre in 1 and 2 dimensions, scrambled Sobol
points beyond). Both classes are fitted by the same loop (:func:`fit_soft_q_ensemble`: batched
networks, rationality priors, clipped targets, weight averaging); the Box fits compute each
iteration's targets for a pool of rows and draw their minibatches from it.

This module holds the fits (:func:`fit_soft_q`, :func:`fit_soft_q_ensemble`), their settings'
checks and :func:`bellman_residual`; the features and soft means are in
:mod:`~imitation_meg.approx.soft_q_features`, the networks in
:mod:`~imitation_meg.approx.soft_q_models`, the training rows and stacked weights in
:mod:`~imitation_meg.approx.soft_q_batches` (the names the fits' callers use are importable
from here too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg.approx.rollouts import Rollouts
from imitation_meg.approx.soft_q_batches import (
    _average_into,
    _batches,
    _box_batches,
    _clip_each,
    _fit_of,
    _stacked_params,
    _write_back,
    target_pool,
)
from imitation_meg.approx.soft_q_features import (
    BETA_SCALES,  # noqa: F401  (importable from here)
    TIME_SCALES,  # noqa: F401  (importable from here)
    ActionGrid,
    BetaPrior,
    action_grid,
    beta_features,
    row_soft_mean,
    soft_mean,
)
from imitation_meg.approx.soft_q_models import (
    BoxSoftQModel,
    SoftQModel,
    is_null_problem,  # noqa: F401  (importable from here)
    new_model,
    returns_scale,  # noqa: F401  (importable from here)
    stacked_forward,
    standardisation,  # noqa: F401  (importable from here)
)

__all__ = [
    "ActionGrid",
    "BetaPrior",
    "BoxSoftQModel",
    "SoftQModel",
    "action_grid",
    "bellman_residual",
    "beta_features",
    "fit_soft_q",
    "fit_soft_q_ensemble",
    "new_model",
    "row_soft_mean",
    "soft_mean",
    "target_pool",
]


#: Largest gradient norm of one fitting step.
_GRAD_CLIP = 10.0


def fit_soft_q(
    model: SoftQModel,
    data: Rollouts,
    *,
    iterations: int,
    steps_per_iteration: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    prior: BetaPrior | None = None,
    seed: int = 0,
    on_iteration: Callable[[int], None] | None = None,
    average: float = 0.0,
    device: th.device | str = "cpu",
) -> list[float]:
    """Fitted soft Q-iteration on ``data``, in place: returns the loss of each iteration.

    Each iteration freezes a copy of the network, then takes ``steps_per_iteration`` Adam
    steps on the squared error to the soft Bellman targets
    ``r / q_scale + (1 - done) * m_b(f_frozen(x', t + 1, b))``, each row with its own ``b``
    drawn from ``prior``. ``H`` iterations propagate values over the whole horizon. Targets are
    clipped to the range every soft value lies in (``r_lo + (H - t - 1) min(r_lo, 0)`` to
    ``r_hi + (H - t - 1) max(r_hi, 0)``, with the per-step reward range seen in the data) and
    gradients to norm 10, against the divergence of fitted Q-iteration on long horizons.

    Args:
        model: the model to train (from :func:`new_model`, or a previous fit to continue).
        data: the transitions.
        iterations: target-network refreshes.
        steps_per_iteration: gradient steps between refreshes.
        batch_size: rows per step.
        lr: Adam's learning rate (cosine-decayed to a tenth over the run).
        prior: the rationalities to train on (default :class:`BetaPrior`).
        seed: seeds the batches and the rationality draws.
        on_iteration: called after each iteration with its index (progress bars).
        average: the share of each iteration's last steps whose weights are averaged (see
            :func:`fit_soft_q_ensemble`; ``0``: the last step's weights).
        device: where the fit runs (see :func:`fit_soft_q_ensemble`).
    """
    return fit_soft_q_ensemble(
        [model],
        [data],
        iterations=iterations,
        steps_per_iteration=steps_per_iteration,
        batch_size=batch_size,
        lr=lr,
        priors=[prior or BetaPrior()],
        seeds=[seed],
        on_iteration=on_iteration,
        average=average,
        device=device,
    )[0]


def check_average(average: Any) -> None:
    """Raise ``ValueError`` unless ``average`` is a number in ``[0, 1]``."""
    if (
        isinstance(average, bool)
        or not isinstance(average, (int, float, np.floating))
        or not 0.0 <= float(average) <= 1.0
    ):
        raise ValueError(
            f"average must be a number from 0 (no averaging) to 1 (all of each iteration's "
            f"steps), got {average!r}."
        )


def check_lr(lr: Any) -> None:
    """Raise ``ValueError`` unless ``lr`` is a positive finite number (not a bool)."""
    check_positive("lr", lr)


def check_positive(name: str, v: Any) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``v`` is a positive finite number (not a
    bool)."""
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float, np.floating))
        or not 0.0 < float(v) < math.inf
    ):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}.")


def check_device(device: Any) -> str:
    """``device`` as torch names it (``"cpu"``, ``"cuda:0"``, ...).

    Raises:
        TypeError: not a string or a ``torch.device``.
        ValueError: a name torch does not know, or a CUDA device where torch sees none (or
            fewer than its index needs).
    """
    if not isinstance(device, (str, th.device)):
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda', got {device!r}.")
    try:
        dev = th.device(device)
    except RuntimeError as e:
        raise ValueError(
            f"device must be a torch device such as 'cpu', 'cuda' or 'cuda:1', got {device!r}."
        ) from e
    if dev.type == "cuda":
        _check_cuda(dev, device)
    elif dev.type == "meta":
        raise ValueError(
            "device='meta' holds shapes, not numbers: the fits cannot run there; pass "
            "device='cpu' or a GPU such as 'cuda'."
        )
    elif dev.type != "cpu":
        _check_placeable(dev, device)
    return str(dev)


def _check_cuda(dev: th.device, device: Any) -> None:
    """Raise ``ValueError`` unless torch sees the CUDA device ``dev`` (asked for as ``device``)."""
    count = th.cuda.device_count() if th.cuda.is_available() else 0
    if count == 0 or (dev.index is not None and dev.index >= count):
        raise ValueError(
            f"device={device!r}, but torch sees {count} CUDA device(s) "
            f"(torch {th.__version__}, torch.cuda.is_available() is "
            f"{th.cuda.is_available()}): pass device='cpu', or install a CUDA build of torch "
            "on a machine with a GPU."
        )


def _check_placeable(dev: th.device, device: Any) -> None:
    """Raise ``ValueError`` unless torch can place a tensor on ``dev`` (mps, xpu, ...)."""
    try:
        th.zeros(1, device=dev)
    except (RuntimeError, AssertionError) as e:
        raise ValueError(f"device={device!r} is not usable here ({e}); pass device='cpu'.") from e


def _check_int(name: str, v: Any, lo: int) -> None:
    """Raise ``ValueError`` unless ``v`` is an integer (not a bool) ``>= lo``."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}.")


def _adam_step(opt: Any, sched: Any, params: list[th.Tensor], per_model: th.Tensor) -> None:
    """One optimiser step on the stacked models' summed losses ``per_model (K,)``, each
    model's gradient clipped on its own."""
    opt.zero_grad()
    per_model.sum().backward()
    _clip_each(params, _GRAD_CLIP)
    opt.step()
    sched.step()


def fit_soft_q_ensemble(
    models: Sequence[SoftQModel | BoxSoftQModel],
    datas: list[Rollouts],
    *,
    iterations: int,
    steps_per_iteration: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    priors: list[BetaPrior] | None = None,
    seeds: list[int] | None = None,
    on_iteration: Callable[[int], None] | None = None,
    average: float = 0.0,
    device: th.device | str = "cpu",
) -> list[list[float]]:
    """:func:`fit_soft_q` for several models at once, each on its own data: returns each model's
    losses per iteration.

    The models' networks (same layer sizes) are trained together as one batched network, one
    Adam step for all of them per step, which on a CPU costs little more than one model's step
    (the small matrix products are overhead-bound). Each model keeps everything of its own: its
    rows and rationalities (drawn from its own generator, seeded by ``seeds[k]``, in the same
    order as a fit of that model alone), its prior, targets, clipping bounds, gradient norm
    clipping and Adam moments, so the result is what fitting each model alone gives, up to
    floating-point rounding. Null models (no reward to fit) are skipped.

    Box models (:class:`BoxSoftQModel`, all of one kind) are fitted by the same loop; each
    iteration computes the targets of a pool of :func:`target_pool` rows per model (their soft
    means over the action grid are the cost) and draws every step's minibatch from it (the
    draws of the first model's generator), so a Box fit depends on its companions' number.

    Args:
        models, datas: the models and their transitions (same length).
        iterations, steps_per_iteration, batch_size, lr: as for :func:`fit_soft_q`.
        priors: each model's rationality prior (default :class:`BetaPrior` for all).
        seeds: each model's seed of its batches and rationality draws (default ``0, 1, ...``).
        on_iteration: called after each iteration (of all models) with its index.
        average: the share of each iteration's last steps whose weights are averaged
            (Polyak-Ruppert averaging): the average is the next iteration's frozen network and,
            after the last iteration, the fitted one. ``0`` keeps the last step's weights.
            Averaging removes most of the noise the last steps' minibatches leave in the
            weights, which at large rationalities decides near-tied actions (docs/approx.md).
        device: where the networks are trained (``"cpu"``, ``"cuda"``, ...): the data, the
            stacked weights and Adam's moments live there, the draws still come from each
            model's CPU generator (the same rows and rationalities on every device), and the
            fitted weights are written back into the models, which stay where they were.
            Results on two devices agree up to floating-point rounding, which fitted
            Q-iteration's many steps can grow; one device gives the same result for the same
            seeds. Box models are fitted on the CPU.

    Raises:
        ValueError: bad settings, lists of different lengths, networks of different shapes,
            models of both kinds, or Box models on another device than the CPU.
    """
    _check_fit_settings(iterations, steps_per_iteration, batch_size, lr, average)
    dev = th.device(check_device(device))
    K = len(models)
    priors = priors if priors is not None else [BetaPrior()] * K
    seeds = seeds if seeds is not None else list(range(K))
    box = _one_kind(models, datas, priors, seeds)
    losses, active = _skip_null(models, iterations)
    if not active:
        return losses
    if box and dev.type != "cpu":
        raise ValueError(
            f"the Box-action soft Q-fits run on the CPU, got device={device!r}; pass device='cpu'."
        )
    fits = [_fit_of(models[k], datas[k], priors[k], seeds[k], dev) for k in active]
    per_iteration = _train(
        fits, box, iterations, steps_per_iteration, batch_size, lr, average, on_iteration
    )
    for acc in per_iteration:
        for j, k in enumerate(active):
            losses[k].append(float(acc[j]) / steps_per_iteration)
    return losses


def _train(
    fits: list[Any],
    box: bool,
    iterations: int,
    steps_per_iteration: int,
    batch_size: int,
    lr: float,
    average: float,
    on_iteration: Callable[[int], None] | None,
) -> list[th.Tensor]:
    """Fitted soft Q-iteration of the models of ``fits`` stacked into one batched network on the
    fits' device, the fitted weights written back into the models: returns each iteration's
    summed losses of the models ``(K,)``."""
    params = _stacked_params([f.model for f in fits], fits[0].device)
    opt, sched = _optimiser(params, lr, iterations * steps_per_iteration, box)
    batches = _box_batches if box else _batches
    # Weights averaged over each iteration's steps from avg_from on (none with average 0: then
    # the "average" is the last step's weights); the average is the next frozen copy.
    avg_from = steps_per_iteration - round(float(average) * steps_per_iteration)
    avg = [p.detach().clone() for p in params]
    out = []
    for it in range(iterations):
        frozen = [p.clone() for p in avg]
        steps = batches(fits, frozen, steps_per_iteration, batch_size)
        acc, avg = _iteration(steps, opt, sched, params, avg, avg_from)
        out.append(acc)
        if on_iteration is not None:
            on_iteration(it)
    _write_back([f.model for f in fits], avg)
    return out


def _skip_null(
    models: Sequence[SoftQModel | BoxSoftQModel], iterations: int
) -> tuple[list[list[float]], list[int]]:
    """Each model's loss list (``iterations`` zeros for a null model, which is not fitted; empty
    otherwise) and the indices of the models to fit."""
    losses: list[list[float]] = [[0.0] * iterations if m.null else [] for m in models]
    return losses, [k for k, m in enumerate(models) if not m.null]


def _check_fit_settings(
    iterations: Any, steps_per_iteration: Any, batch_size: Any, lr: Any, average: Any
) -> None:
    """Raise ``ValueError`` naming the first bad setting of a fit."""
    _check_int("iterations", iterations, 1)
    check_average(average)
    _check_int("steps_per_iteration", steps_per_iteration, 1)
    _check_int("batch_size", batch_size, 1)
    check_lr(lr)


def _one_kind(
    models: Sequence[SoftQModel | BoxSoftQModel],
    datas: list[Rollouts],
    priors: list[BetaPrior],
    seeds: list[int],
) -> bool:
    """Whether the models fitted together are Box models (all of them), after checking that the
    lists have one length and the models one kind of action.

    Raises:
        ValueError: lists of different lengths, or models of both kinds.
    """
    K = len(models)
    if not (len(datas) == len(priors) == len(seeds) == K):
        raise ValueError(
            f"models ({K}), datas ({len(datas)}), priors ({len(priors)}) and seeds "
            f"({len(seeds)}) must have the same length."
        )
    kinds = {isinstance(m, BoxSoftQModel) for m in models}
    if len(kinds) > 1:
        raise ValueError(
            "models fitted together need one kind of action: got SoftQModel and BoxSoftQModel; "
            "fit each kind on its own."
        )
    return kinds == {True}


def _optimiser(params: list[th.Tensor], lr: float, total: int, box: bool) -> tuple[Any, Any]:
    """Adam over the stacked weights and its cosine decay to a tenth over ``total`` steps."""
    # one kernel per tensor for the Discrete fits (~10% of a step); the Box fits keep the plain
    # loop, which rounds differently in the last bits (their validated numbers are its)
    opt = th.optim.Adam(params, lr=lr, fused=None if box else True)
    sched = th.optim.lr_scheduler.LambdaLR(
        opt, lambda k: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(k / max(total, 1), 1.0)))
    )
    return opt, sched


def _iteration(
    steps: Iterator[Any],
    opt: Any,
    sched: Any,
    params: list[th.Tensor],
    avg: list[th.Tensor],
    avg_from: int,
) -> tuple[th.Tensor, list[th.Tensor]]:
    """One iteration's Adam steps of the stacked models on the minibatches ``steps``: returns
    each model's summed loss ``(K,)`` and the weights averaged from step ``avg_from`` on (the
    last step's weights when no step is averaged)."""
    n_avg = 0
    acc = th.zeros(params[0].shape[0], device=params[0].device)
    for k, batch in enumerate(steps):
        pred = batch.predict(stacked_forward(params, batch.z))
        per_model = th.mean((pred - batch.target) ** 2, dim=1)
        _adam_step(opt, sched, params, per_model)
        acc += per_model.detach()
        if k >= avg_from:
            n_avg += 1
            _average_into(avg, params, n_avg)
    if n_avg == 0:
        avg = [p.detach().clone() for p in params]
    return acc, avg


def bellman_residual(model: Any, data: Rollouts, b: float) -> tuple[float, float]:
    """Mean and root-mean-square soft Bellman residual at normalised ``b`` on ``data``, in
    utility units (a :class:`SoftQModel`, a :class:`BoxSoftQModel`, or a model answering
    ``f``, ``q_scale`` as the first does).

    The residual ``q(s, a) - r - m_b(q(s', .))`` of each row includes the spread of the sampled
    next state, so in stochastic environments its RMS is not zero even for the exact ``q``; its
    mean is (up to sampling noise).
    """
    x = th.as_tensor(data.x)
    xn = th.as_tensor(data.x_next)
    t = th.as_tensor(data.t)
    r = th.as_tensor(data.r / model.q_scale, dtype=th.float32)
    live = th.as_tensor(~data.done, dtype=th.float32)
    bb = th.full((x.shape[0],), float(b))
    with th.no_grad():
        if isinstance(model, BoxSoftQModel):
            a = model.scale_actions(th.as_tensor(data.a)).unsqueeze(1)
            q = model.f_points(x, t, bb, a)[:, 0]
            nxt = model.soft_value(xn, t + 1, bb)
        else:
            a = th.as_tensor(data.a)
            q = model.f(x, t, bb).gather(1, a.reshape(-1, 1)).squeeze(1)
            nxt = soft_mean(model.f(xn, t + 1, bb), bb)
        res = q - r - live * nxt
    res = res.double() * model.q_scale
    return float(res.mean()), float(res.pow(2).mean().sqrt())
