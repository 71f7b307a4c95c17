"""The printed result of ``imitation-meg score --approx``: the estimate and its diagnostics.

:func:`print_result` writes the estimate with its interval, the bounds, the method's own
diagnostics (soft Q-fits, linear soft Q-functions, the empirical MDP or the paths method) and
the notes a reader needs to trust it; :func:`how` says in words what scores and what the
progress bar counts.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["how", "print_result"]


def _spread_line(res: Any) -> str:
    """The fits' spread for the printed result."""
    return (
        f"seed spread (std)   {res.seed_std:.4f}   models se {res.model_se:.4f}, "
        f"rollout se {res.bootstrap_se:.4f}"
    )


def _residual_line(res: Any) -> str:
    return f"Bellman residual    {res.residual_rms:.4f}   (RMS, fraction of the largest return)"


def _fit_lines(res: Any) -> list[str]:
    """The soft Q-fits' diagnostics for the printed result."""
    return [
        _spread_line(res),
        (
            f"refits moved it by  {res.refine_shift:+.4f}   (stages "
            f"{' -> '.join(f'{v:.4f}' for v in res.stages)}; the largest move, "
            f"{res.allowance:.4f}, is added to the interval as a convergence allowance)"
        ),
        _residual_line(res),
    ]


def _linear_lines(res: Any) -> list[str]:
    """The linear soft Q-functions' diagnostics for the printed result."""
    return [
        _spread_line(res),
        (
            f"rounds of data      {' -> '.join(f'{v:.4f}' for v in res.stages)}   (the largest "
            f"move, {res.allowance:.4f}, is added to the interval)"
        ),
        _residual_line(res),
    ]


def _empirical_lines(res: Any) -> list[str]:
    """The empirical MDP's diagnostics for the printed result."""
    return [
        (
            f"empirical MDP       {res.n_states} observed states; bootstrap se "
            f"{res.bootstrap_se:.4f} over data episodes"
        ),
        f"rounds of data      {' -> '.join(f'{v:.4f}' for v in res.stages)}",
    ]


def _paths_lines(res: Any) -> list[str]:
    """The paths method's diagnostics for the printed result."""
    return [
        (
            f"random paths        {res.n_particles} from each of {res.n_starts} starts "
            f"({res.particle_steps} simulated steps); their bias allowance "
            f"{res.particle_bias:.4f}"
        ),
        (
            f"bootstrap se        {res.bootstrap_se:.4f}   (over the policy's "
            f"{res.n_eval_episodes} episodes and the starts)"
            + (f"; the curve's own {res.curve_se:.4f}" if res.curve_se > 0 else "")
        ),
        "time split          " + ", ".join(f"{k} {v:.2f} s" for k, v in res.timings.items()),
    ]


def how(method: str | None, n_models: int, *, paths: bool, unknown: bool) -> tuple[str, str]:
    """What scores, and what the progress bar counts, in words."""
    if unknown:  # the empirical MDP, "auto" too: there is nothing to hand over to
        return "the empirical MDP of the observations", "environment steps of data"
    if paths:
        return (
            "the soft-optimal model's paths in the simulated, deterministic environment",
            "steps of the policy's episodes and of the random action sequences",
        )
    how = {
        "soft_q": f"{n_models} soft Q-networks",
        "empirical": "the empirical MDP of the observations",
        "auto": f"the empirical MDP if the observations take few values, else {n_models} soft "
        "Q-networks",
        "linear": f"{n_models} linear soft Q-functions",
    }.get(method or "soft_q", "")
    counts = {
        "linear": "rounds of data",
        "empirical": "environment steps of data",
        "auto": "environment steps of data (then soft Q-iterations, if it fits after all)",
    }.get(method or "soft_q", "soft Q-iterations")
    return how, counts


def _bound_lines(res: Any) -> list[str]:
    """The bounds: ``E[T] log|A|`` and ``H log|A|`` with the Gibbs certificate, or for a box
    (no ``log|A|``) the certificate, which ``normalized`` divides by."""
    if math.isinf(res.upper_bound):
        cert = (
            "inf (point masses on the bounds)"
            if math.isinf(res.certificate)
            else f"{res.certificate:.4f}"
        )
        norm = "n/a" if math.isnan(res.normalized) else f"{res.normalized:.4f}"
        return [
            (
                f"certificate         {cert}   (the policy's own E[sum_t KL(pi || uniform)]; "
                f"normalized {norm})"
            ),
            f"action law          {res.policy}",
        ]
    return [
        (
            f"bound E[T] log|A|   {res.length_bound:.4f}   (normalized "
            f"{res.length_normalized:.4f}; E[T] = {res.mean_length:.1f} of H = {res.horizon})"
        ),
        f"bound H log|A|      {res.upper_bound:.4f}   (normalized {res.normalized:.4f})",
        f"Gibbs certificate   {res.certificate:.4f}   (no model family can exceed it)",
    ]


def print_result(res: Any, wall: float, *, unknown: bool, kwargs: dict[str, Any]) -> None:
    """The estimate, its interval, bounds and the method's diagnostics, then its notes."""
    pct = f"{res.confidence:.0%}"
    lines = [
        f"MEG estimate        {res.meg:.4f} nats   {pct} interval [{res.low:.4f}, {res.high:.4f}]",
        *_bound_lines(res),
        (
            f"utility spread      {res.beta:.4g}   (max - min of the fitted utility; inf: a limit)"
            if unknown
            else f"beta*               {res.beta:.4g}   (utility units)"
        ),
        (
            f"mean return         {res.expected_return:.4f}"
            + (
                f"   (E[T] = {res.mean_length:.1f} of H = {res.horizon})"
                if math.isinf(res.upper_bound)
                else ""
            )
        ),
        *{"empirical": _empirical_lines, "linear": _linear_lines, "paths": _paths_lines}.get(
            res.method, _fit_lines
        )(res),
        *([f"action grid         {res.grid}"] if res.grid else []),
        f"environment steps   {res.n_env_steps}",
        f"wall time           {wall:.1f} s",
    ]
    print("\n".join(lines))
    _print_notes(res, kwargs)


def _print_notes(res: Any, kwargs: dict[str, Any]) -> None:
    """The notes under a printed result: an unsettled estimate, an optimum at the largest
    ``|beta|`` tried, fits above the certificate."""
    from imitation_meg.approx.evaluate import UNSETTLED_NOTE
    from imitation_meg.approx.options import DATA_STEPS

    if res.settled is False and res.method == "linear":
        print(
            "\n(The rounds of data had not settled when the data budget was spent, so the "
            "interval may be too narrow. Pass a larger budget (--approx-option "
            f"n_data_steps={2 * int(kwargs.get('n_data_steps') or DATA_STEPS)}) and compare.)"
        )
    elif res.settled is False and res.curve is not None:
        print(
            "\n(The environment's curve is not reliable at this policy's optimum: the warning "
            "says why and what to do. The interval may not cover the value.)"
        )
    elif res.settled is False:
        print(f"\n({UNSETTLED_NOTE})")
    if res.at_boundary and res.curve is None:
        print("\n(The optimum lies at the largest |beta| tried: the supremum may be a limit.)")
    if res.above_certificate:
        print(
            "\n(The fits exceeded the certificate, which no normalised model can: the action "
            "grid could not integrate the models at beta*; the estimate is the certificate by "
            "clipping, not a measured value.)"
        )
