"""The agent's part of a curve score: its episodes' returns, its Gibbs certificate, the checks.

Known-utility MEG is ``sup_beta beta J - Lambda(beta)`` (:mod:`imitation_meg.approx.curve`):
once the environment's curve ``Lambda`` is known, a policy enters only through its expected
return ``J``, estimated from its episodes. :func:`curve_result` turns a curve and a policy's
episodes into an :class:`~imitation_meg.approx.evaluate.ApproxMEGResult`, with ``settled=False``
and an :class:`~imitation_meg.approx.evaluate.ApproxMEGWarning` wherever the curve cannot be
trusted at the policy's optimum.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from typing import Any, NamedTuple

import numpy as np

from imitation_meg.approx.curve import CurveScore, SoftValueCurve
from imitation_meg.approx.evaluate import ApproxMEGResult, ApproxMEGWarning, no_fits
from imitation_meg.approx.intervals import SETTLE_SHARE

#: The bias allowance (nats) beyond which a curve's noise makes a score unreliable, whatever
#: the estimate (5% of it counts too): the allowance is half a variance of ``log Z``, a
#: first-order correction that holds only while that variance is small.
_NOISY = 0.5

__all__ = [
    "Actor",
    "Episodes",
    "SimulatedEpisodes",
    "curve_problems",
    "curve_result",
    "episodes_of",
    "simulate_episodes",
    "squashed_kl",
]


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


class Actor:
    """The scored policy as a simulator runs it: actions for a batch of observations, and each
    decision's term of the Gibbs certificate.

    Args:
        policy: a :class:`~imitation_meg.approx.policy.PolicyFn` (``Discrete`` actions: its
            probabilities) or a :class:`~imitation_meg.continuous.densities.ContinuousPolicyFn`
            (a box: its action laws).
        actions: the action space.
    """

    def __init__(self, policy: Any, actions: Any) -> None:
        self.policy, self.actions = policy, actions

    def act(self, obs: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Actions ``(n,)`` or ``(n, k)`` and certificate terms ``(n,)``: ``log|A| - H(pi(. |
        s))``, or the law's KL divergence from the uniform density on the box."""
        if self.actions.is_box:
            law = self.policy.law(obs)
            if law.kind == "clipped":  # point masses on the bounds: no density, KL infinite
                return law.sample(rng), np.full(len(law.mean), np.inf)
            if law.kind == "squashed" and np.all(law.std <= _GH_STD):
                return law.sample(rng), squashed_kl(law.mean, law.std)
            return law.sample(rng), _law_kl(law)
        p = self.policy.probs(obs)
        ent = -(p * np.log(np.where(p > 0, p, 1.0))).sum(1)
        cdf = np.cumsum(p, axis=1)
        u = rng.random(len(p)) * cdf[:, -1]
        a = np.minimum((cdf < u[:, None]).sum(1), p.shape[1] - 1)
        return a, self.actions.log_measure - ent


#: Gauss-Hermite nodes and weights (probabilists', normalised) for ``E[f(g)]``, ``g`` Gaussian,
#: and the widest pre-squash standard deviation they serve (64 nodes agree with the laws'
#: panel rules to 2e-6 there; wider laws take the panel rule).
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(64)
_GH_W = _GH_W / _GH_W.sum()
_GH_STD = 2.0


def _law_kl(law: Any) -> np.ndarray:
    """``KL(pi || u)`` ``(n,)`` of an action law by its quadrature rule; beyond 3 dimensions
    (no tensor-product rule there) the sum of its coordinates' (the laws are diagonal, the
    uniform density a product: the divergence adds up over coordinates)."""
    d = law.mean.shape[1]
    if d <= 3:
        return law.rule().kl.double().numpy()
    parts = (
        dataclasses.replace(
            law,
            mean=law.mean[:, k : k + 1],
            std=law.std[:, k : k + 1],
            low=law.low[k : k + 1],
            high=law.high[k : k + 1],
        )
        for k in range(d)
    )
    return np.sum([p.rule().kl.double().numpy() for p in parts], axis=0)


def squashed_kl(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """``KL(pi || u)`` ``(n,)`` of squashed Gaussian laws (``low + (tanh(g) + 1) (high - low) /
    2``, ``g ~ N(mean, diag(std^2))``, ``(n, d)``) from the uniform density on their box:
    ``sum_k (log 2 - h(N(mean_k, std_k^2)) - E[log(1 - tanh(g_k)^2)])``, the expectation by
    64-point Gauss-Hermite quadrature (``log(1 - tanh^2 g) = log 4 - 2|g| - 2 log(1 +
    exp(-2|g|))``, smooth in ``g``). The box's size cancels."""
    g = mean[..., None] + std[..., None] * _GH_X  # (n, d, m)
    a = np.abs(g)
    log_jac = math.log(4.0) - 2.0 * a - 2.0 * np.log1p(np.exp(-2.0 * a))
    e_jac = (log_jac * _GH_W).sum(-1)
    h = 0.5 * np.log(2.0 * math.pi * math.e * std**2)
    return (math.log(2.0) - h - e_jac).sum(-1)


class SimulatedEpisodes(NamedTuple):
    """The scored policy's episodes on a simulator.

    Attributes:
        returns, lengths, certificate: per episode (see :class:`Episodes`).
        states: ``(m, d)`` states of the first episodes, each followed by ``actions[i]``.
        actions: ``(m,)`` or ``(m, k)`` the actions taken there (a check of the simulator
            replays these pairs in the environment).
    """

    returns: np.ndarray
    lengths: np.ndarray
    certificate: np.ndarray
    states: np.ndarray
    actions: np.ndarray

    def episodes(self) -> Episodes:
        return Episodes(self.returns, self.lengths, self.certificate)


def simulate_episodes(
    dyn: Any,
    actor: Actor,
    starts: np.ndarray,
    horizon: int,
    rng: np.random.Generator,
    *,
    keep: int = 3,
    on_step: Any = None,
) -> SimulatedEpisodes:
    """Run ``actor`` from each start ``(n, d)``, all episodes in lockstep on the simulator, for
    at most ``horizon`` decisions; keep the (state, action) pairs of the first ``keep``."""
    n = len(starts)
    state = np.asarray(starts, dtype=np.float64).copy()
    obs = dyn.observe(state)
    live = np.arange(n)
    returns, lengths, cert = np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n)
    kept_s: list[np.ndarray] = []
    kept_a: list[np.ndarray] = []
    for _ in range(horizon):
        a, c = actor.act(obs, rng)
        cert[live] += c
        first = live < keep
        if first.any():
            kept_s.append(state[first])
            kept_a.append(np.asarray(a)[first])
        state, r, term = dyn.step(state, a)
        obs = dyn.observe(state)
        returns[live] += r
        lengths[live] += 1
        if on_step is not None:
            on_step(len(live))
        go = ~np.asarray(term, dtype=bool)
        state, obs, live = state[go], obs[go], live[go]
        if len(live) == 0:
            break
    states = np.concatenate(kept_s) if kept_s else np.zeros((0, starts.shape[1]))
    acts = np.concatenate(kept_a) if kept_a else np.zeros(0)
    return SimulatedEpisodes(returns, lengths, cert, states, acts)


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
    # like with like: the policy's return at the curve's own starts where it has episodes there
    J = sc.expected_return if math.isnan(sc.start_return) else sc.start_return
    tol = 1e-9 * max(1.0, abs(lo), abs(hi))
    if not lo - tol <= J <= hi + tol:
        problems.append(
            f"the policy's mean return {J:.6g} (at the curve's starts) lies beyond the returns "
            f"[{lo:.6g}, {hi:.6g}] that the curve's random action sequences found there (where "
            "the curve has no limit)"
        )
    elif sc.at_edge and _beyond(curve, sc) > max(half, 0.01 * sc.raw):
        problems.append(
            "the maximum lies at the end of the curve's grid of rationalities, where the curve "
            "still rises"
        )
    if sc.bias > max(_NOISY, 0.05 * abs(sc.raw)):
        problems.append(
            f"the curve's two particle populations per start disagree at the optimum (a bias "
            f"allowance of {sc.bias:.3g} nats): its estimate of Z is too noisy there"
        )
    if sc.ess < curve.min_ess:
        problems.append(
            f"only {sc.ess:.0f} effective samples carry the curve at the optimum beta = "
            f"{sc.beta:.4g} (fewer than {curve.min_ess:.0f})"
        )
    scale = bound if math.isfinite(bound) else sc.high  # a box: the certificate clips ``high``
    if math.isfinite(scale) and sc.raw > sc.high + max(half, SETTLE_SHARE * scale):
        problems.append(
            f"the estimate {sc.raw:.4g} exceeds the Gibbs certificate by more than its interval"
        )
    return problems


def _beyond(curve: SoftValueCurve, sc: CurveScore) -> float:
    """How much more the conjugate could gain past the grid's end: ``|J - Lambda'|`` there
    times the end's ``|beta|`` (the gain if the slope closed the gap no faster than 1/beta)."""
    end = -1 if sc.beta > 0 else 0
    gap = abs(sc.expected_return - float(curve.slope[end]))
    return gap * abs(float(curve.betas[end]))


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
    units: np.ndarray | None = None,
) -> ApproxMEGResult:
    """Score ``run``'s policy (a :class:`~imitation_meg.approx.core.Run`: its settings and
    seeds) with ``curve`` from its ``episodes``, as an :class:`ApproxMEGResult`.

    ``units`` (each episode's start among the curve's, -1 for a fresh one) gives the curve its
    control variate (:meth:`~imitation_meg.approx.curve.SoftValueCurve.score`).

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
        units=units,
    )
    timings = dict(timings or {})
    timings["maximum and bootstrap"] = time.perf_counter() - t0
    H = curve.info.horizon
    mean_t = float(episodes.lengths.mean())
    bound, length_bound = _bounds(curve, log_measure, H, mean_t)
    half = max(sc.high - sc.meg, sc.meg - sc.low)
    problems = curve_problems(curve, sc, half, bound)
    if problems:
        warnings.warn(
            f"the {method} estimate is not reliable: " + "; ".join(problems) + f". {fix[0].upper()}"
            f"{fix[1:]}, or score with method='soft_q'.",
            ApproxMEGWarning,
            stacklevel=4,
        )
    normalized, length_normalized = _normalised(sc.meg, bound, length_bound, cert)
    return ApproxMEGResult(
        **_score_fields(sc),
        confidence=opts.confidence,
        upper_bound=bound,
        normalized=normalized,
        length_bound=length_bound,
        length_normalized=length_normalized,
        q_scale=float(max(abs(curve.returns_found[0]), abs(curve.returns_found[1]))),
        certificate=cert,
        horizon=H,
        mean_length=mean_t,
        n_env_steps=run.n_env_steps,
        n_eval_episodes=len(episodes.returns),
        **no_fits(),
        wall_time_s=time.perf_counter() - run.t_start,
        settled=not problems,
        method=method,
        n_particles=int(curve.info.settings.get("n_particles") or 0),  # type: ignore[arg-type]
        n_starts=curve.n_units if curve.info.method != "exact" else 0,
        particle_steps=particle_steps,
        timings=timings,
        curve=curve,
    )


def _bounds(
    curve: SoftValueCurve, log_measure: float, H: int, mean_t: float
) -> tuple[float, float]:
    """``(H log|A|, E[T] log|A|)`` (``log_measure`` the log of the action set's size), or
    infinite for a box: a density has no ceiling."""
    if curve.info.actions.get("kind") == "box":
        return math.inf, math.inf
    return H * log_measure, mean_t * log_measure


def _normalised(meg: float, bound: float, length_bound: float, cert: float) -> tuple[float, float]:
    """``meg`` over each bound, or where a bound is infinite (a box) over the certificate (the
    policy's own log-likelihood ratio to the uniform density; 0 for a certificate of 0, NaN for
    one that is not positive and finite)."""
    by_cert = meg / cert if 0 < cert < math.inf else (0.0 if cert == 0 else math.nan)
    normalized = meg / bound if math.isfinite(bound) and bound > 0 else by_cert
    return normalized, meg / length_bound if 0 < length_bound < math.inf else by_cert


def _score_fields(sc: CurveScore) -> dict[str, Any]:
    """The fields of an :class:`ApproxMEGResult` read off a curve's score: the estimate, its
    interval and maximiser, the policy's return, the bootstrap, and the one stage there is."""
    return {
        "meg": sc.meg,
        "low": sc.low,
        "high": sc.high,
        "beta": sc.beta,
        "expected_return": sc.expected_return,
        "return_se": sc.return_se,
        "bootstrap_se": sc.bootstrap_se,
        "replicates": sc.replicates,
        "at_boundary": sc.at_edge,
        "particle_bias": sc.bias,
        "curve_se": sc.curve_se,
        "stages": (sc.raw,),
        "stage_intervals": ((sc.meg, sc.low, sc.high),),
    }
