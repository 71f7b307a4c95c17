"""The agent's part of a curve score: its episodes' returns, its Gibbs certificate, the checks.

Known-utility MEG is ``sup_beta beta J - Lambda(beta)`` (:mod:`imitation_meg.approx.curve`):
once the environment's curve ``Lambda`` is known, a policy enters only through its expected
return ``J``, estimated from its episodes. :func:`curve_result` turns a curve and a policy's
episodes into an :class:`~imitation_meg.approx.evaluate.ApproxMEGResult`, with ``settled=False``
and an :class:`~imitation_meg.approx.evaluate.ApproxMEGWarning` wherever the curve cannot be
trusted at the policy's optimum.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, NamedTuple

import numpy as np

from imitation_meg.approx.curve import CurveScore, SoftValueCurve
from imitation_meg.approx.evaluate import SETTLE_SHARE, ApproxMEGResult, ApproxMEGWarning

__all__ = ["Episodes", "curve_problems", "curve_result", "episodes_of"]


class Episodes(NamedTuple):
    """What a curve score needs of the scored policy's episodes.

    Attributes:
        returns: ``(n,)`` each episode's return.
        lengths: ``(n,)`` its decisions ``T``.
        certificate: ``(n,)`` its ``sum_t (log|A| - H(pi(. | s_t)))`` (for a box: the KL of the
            policy's law to the uniform density, summed over the decisions).
    """

    returns: np.ndarray
    lengths: np.ndarray
    certificate: np.ndarray


def episodes_of(ev: Any, log_a: float) -> Episodes:
    """:class:`Episodes` of the scored policy's collected episodes
    (:class:`~imitation_meg.approx.rollouts.Rollouts` with its probabilities at every row)."""
    p = np.asarray(ev.probs, dtype=np.float64)
    entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(1)
    cert = np.bincount(ev.episode, weights=log_a - entropy, minlength=ev.n_episodes)
    return Episodes(np.asarray(ev.returns, dtype=np.float64), ev.lengths, cert)


def curve_problems(curve: SoftValueCurve, sc: CurveScore, half: float, bound: float) -> list[str]:
    """Why the score ``sc`` of a policy with ``curve`` is not reliable (empty when it is)."""
    problems = list(curve.problems)
    lo, hi = curve.returns_found
    J = sc.expected_return
    if hi < J or lo > J:
        problems.append(
            f"the policy's mean return {J:.6g} lies beyond the returns [{lo:.6g}, {hi:.6g}] that "
            "the curve's random action sequences found (there the curve has no limit)"
        )
    elif sc.at_edge:
        problems.append("the maximum lies at the end of the curve's grid of rationalities")
    if sc.ess < curve.min_ess:
        problems.append(
            f"only {sc.ess:.0f} effective samples carry the curve at the optimum beta = "
            f"{sc.beta:.4g} (fewer than {curve.min_ess:.0f})"
        )
    if math.isfinite(bound) and sc.raw > sc.high + max(half, SETTLE_SHARE * bound):
        problems.append(
            f"the estimate {sc.raw:.4g} exceeds the Gibbs certificate by more than its interval"
        )
    return problems


def curve_result(
    run: Any,
    curve: SoftValueCurve,
    episodes: Episodes,
    *,
    log_measure: float,
    method: str,
    particle_steps: int = 0,
    timings: dict[str, float] | None = None,
    fix: str = "raise n_particles= (and n_starts=)",
) -> ApproxMEGResult:
    """Score ``run``'s policy (a :class:`~imitation_meg.approx.core.Run`: its settings and
    seeds) with ``curve`` from its ``episodes``, as an :class:`ApproxMEGResult`.

    Warns:
        ApproxMEGWarning: the curve is not reliable at the policy's optimum (``settled=False``;
            the message says why and ``fix`` what to do).
    """
    opts = run.opts
    t0 = time.perf_counter()
    cert = float(episodes.certificate.mean())
    sc = curve.score(
        episodes.returns,
        certificate=cert,
        confidence=opts.confidence,
        n_boot=opts.n_boot,
        seed=int(np.random.default_rng(run.s_boot).integers(2**31)),
    )
    timings = dict(timings or {})
    timings["maximum and bootstrap"] = time.perf_counter() - t0
    H = curve.info.horizon
    bound = H * log_measure if log_measure > 0 else math.inf
    mean_t = float(episodes.lengths.mean())
    length_bound = mean_t * log_measure
    half = max(sc.high - sc.meg, sc.meg - sc.low)
    problems = curve_problems(curve, sc, half, bound)
    if problems:
        warnings.warn(
            f"the {method} estimate is not reliable: " + "; ".join(problems) + f". {fix[0].upper()}"
            f"{fix[1:]}, or score with method='soft_q'.",
            ApproxMEGWarning,
            stacklevel=4,
        )
    finite = math.isfinite(bound) and bound > 0
    return ApproxMEGResult(
        meg=sc.meg,
        low=sc.low,
        high=sc.high,
        confidence=opts.confidence,
        beta=sc.beta,
        upper_bound=bound,
        normalized=sc.meg / bound if finite else (sc.meg / cert if cert > 0 else 0.0),
        length_bound=length_bound,
        length_normalized=sc.meg / length_bound if length_bound > 0 else 0.0,
        certificate=cert,
        horizon=H,
        mean_length=mean_t,
        expected_return=sc.expected_return,
        n_env_steps=run.n_env_steps,
        n_eval_episodes=len(episodes.returns),
        ensemble=math.nan,
        models=[],
        seed_std=math.nan,
        model_se=math.nan,
        bootstrap_se=sc.bootstrap_se,
        residual_rms=math.nan,
        at_boundary=sc.at_edge,
        q_scale=float(max(abs(curve.returns_found[0]), abs(curve.returns_found[1]))),
        replicates=sc.replicates,
        wall_time_s=time.perf_counter() - run.t_start,
        stages=(sc.raw,),
        stage_intervals=((sc.meg, sc.low, sc.high),),
        settled=not problems,
        method=method,
        n_particles=int(curve.info.settings.get("n_particles", 0)),
        n_starts=curve.n_units if curve.info.method != "exact" else 0,
        particle_bias=sc.bias,
        particle_steps=particle_steps,
        timings=timings,
        curve=curve,
        return_se=sc.return_se,
    )
