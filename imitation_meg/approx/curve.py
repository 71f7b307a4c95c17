"""The soft-value curve of an environment, and MEG of any policy from its expected return.

With the environment's reward ``r`` as utility, the finite-horizon soft value

    W_t(s) = log mean_a exp(beta r(s, a) + E[W_{t+1}(s')]),   W_H = 0,   terminal states 0,

(``mean_a`` the mean over the actions, or over the action box under its uniform density) gives
every soft-optimal model ``log pi_beta,t(a | s) + log|A| = beta r(s, a) + E[W_{t+1}(s')] -
W_t(s)``; summed along an episode this telescopes in expectation, for every policy ``pi``:

    E_pi[ sum_t (log pi_beta,t(a_t | s_t) + log|A|) ] = beta J(pi) - Lambda(beta),
    J(pi) = E_pi[ sum_t r(s_t, a_t) ],   Lambda(beta) = E_{s0}[ W_0(s0) ].

So known-utility MEG is the convex conjugate of one curve ``Lambda`` of the environment,
evaluated at the policy's expected return:

    MEG(pi) = sup_beta  beta J(pi) - Lambda(beta),   attained where Lambda'(beta*) = J(pi).

:class:`SoftValueCurve` holds ``Lambda`` on a grid of rationalities, per *unit* (a start state
of the environment, or the one exact curve of a tabular MDP), with its slope
``Lambda'(beta)`` (the expected return of ``pi_beta``), the allowance for an estimator's bias,
its effective sample size, and what it was computed for (:class:`CurveInfo`). It is computed
once per environment (:func:`exact_curve` on a :class:`~imitation_meg.TabularMDP`; the paths of
a deterministic environment, :mod:`imitation_meg.approx.paths`) and then scores any number of
policies from their returns (:meth:`SoftValueCurve.score`): the conjugate on the grid, refined
by cubic Hermite interpolation between grid points, with a bootstrap interval over the
policy's episodes and the curve's units. :meth:`SoftValueCurve.save` writes it to an ``.npz``
file that records its provenance; :meth:`SoftValueCurve.load` reads it back, and
:meth:`SoftValueCurve.check_for` refuses it for another environment or horizon. The proof of the
identity is in docs/approx.md.

This module holds the curve (:class:`SoftValueCurve`) and the exact curve of a tabular MDP
(:func:`exact_curve`); the grid and the conjugate are in
:mod:`~imitation_meg.approx.curve_conjugate`, the steps of a score in
:mod:`~imitation_meg.approx.curve_score`, the provenance and the file format in
:mod:`~imitation_meg.approx.curve_file` (their public names are importable from here).
"""

from __future__ import annotations

import math
import os
import pathlib
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from imitation_meg.approx.curve_conjugate import (
    GRID_DECADES,
    GRID_STEP,
    Conjugate,  # noqa: F401  (importable from here)
    beta_grid,
    conjugate_on_grid,
)
from imitation_meg.approx.curve_file import (
    CurveInfo,
    _checked_allowances,
    _checked_grid,
    _checked_starts,
    _jsonable,
    _trusted_run,
    read_curve,
    write_curve,
)
from imitation_meg.approx.curve_score import (
    CurveScore,
    _check_n_boot,
    _checked_returns,
    _Paired,
    adjusted,
    bootstrap,
    clipped,
    paired_bootstrap,
    paired_units,
    rounding,
    unseen,
)
from imitation_meg.type_aliases import ArrayLike, EnvKwargs, JSONDict

if TYPE_CHECKING:  # pragma: no cover - typing only
    from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "GRID_DECADES",
    "GRID_STEP",
    "CurveInfo",
    "CurveScore",
    "SoftValueCurve",
    "beta_grid",
    "conjugate_on_grid",
    "exact_curve",
]


# ------------------------------------------------------------------------------ the curve
class SoftValueCurve:
    """``Lambda(beta) = E_{s0}[W_0(s0)]`` of an environment on a grid (module docstring).

    Args:
        betas: ``(G,)`` ascending rationalities (utility units), including 0.
        log_z: ``(K, G)`` each unit's ``W_0`` (the curve is their mean).
        slopes: ``(K, G)`` each unit's ``d W_0 / d beta`` (the expected return of ``pi_beta``).
        info: what it was computed for.
        bias: ``(G,)`` the estimator's bias allowance on ``Lambda`` (0 for an exact curve).
        ess: ``(G,)`` effective samples behind each point (inf for an exact curve).
        trusted: ``(lo, hi)`` the rationalities between which the curve is trusted (default
            where ``ess`` is at least :attr:`min_ess`).
        returns_found: ``(lowest, highest)`` returns the estimator saw (the slope's range).
        exact: a callable ``J -> (meg, beta)`` for the exact conjugate, where one exists (an
            exact curve kept in memory).
        min_ess: the effective sample size below which a point is not trusted.
        problems: what makes the whole curve less reliable than its interval says (each a
            sentence; every score with it is then ``settled=False``, with a warning).
        starts: ``(K, d)`` the simulator states of the units (the starts), kept with the
            curve (and in its file) to say where it was measured.

    Raises:
        ValueError: arrays of mismatched shapes, unsorted betas, a grid without 0, or
            non-finite values.
    """

    def __init__(
        self,
        betas: np.ndarray,
        log_z: np.ndarray,
        slopes: np.ndarray,
        info: CurveInfo,
        *,
        bias: np.ndarray | None = None,
        ess: np.ndarray | None = None,
        trusted: tuple[float, float] | None = None,
        returns_found: tuple[float, float] | None = None,
        exact: Callable[[float], tuple[float, float]] | None = None,
        min_ess: float = 100.0,
        problems: tuple[str, ...] = (),
        starts: np.ndarray | None = None,
    ) -> None:
        betas, log_z, slopes = _checked_grid(betas, log_z, slopes)
        self.betas, self.log_z, self.slopes, self.info = betas, log_z, slopes, info
        self.bias, self.ess = _checked_allowances(betas.size, bias, ess)
        self.min_ess = float(min_ess)
        lo, hi = _trusted_run(betas, self.ess, self.min_ess) if trusted is None else trusted
        self.trusted = (float(lo), float(hi))
        if returns_found is None:
            returns_found = (float(self.slope[0]), float(self.slope[-1]))
        self.returns_found = (float(returns_found[0]), float(returns_found[1]))
        self._exact = exact
        self.problems = tuple(str(p) for p in problems)
        self.starts = _checked_starts(starts, self.log_z.shape[0])

    # -------------------------------------------------------------- the curve itself
    @property
    def n_units(self) -> int:
        """``K``: the units (starts) whose mean is the curve."""
        return int(self.log_z.shape[0])

    @property
    def value(self) -> np.ndarray:
        """``Lambda`` on the grid, ``(G,)``."""
        return self.log_z.mean(0)

    @property
    def slope(self) -> np.ndarray:
        """``Lambda'`` on the grid, ``(G,)``: the expected return of ``pi_beta``."""
        return self.slopes.mean(0)

    @property
    def exact(self) -> bool:
        """Whether the curve is exact (no sampling noise, no bias)."""
        return self.info.method == "exact"

    def trusted_returns(self) -> tuple[float, float]:
        """The returns ``J`` whose maximiser lies where the curve is trusted: the slopes at the
        ends of :attr:`trusted` (an exact curve: every return a policy can have)."""
        if self.exact:
            return self.returns_found
        lo, hi = (int(np.searchsorted(self.betas, b)) for b in self.trusted)
        hi = min(hi, len(self.betas) - 1)
        return float(self.slope[lo]), float(self.slope[hi])

    def covers(self, expected_return: float) -> bool:
        """Whether ``J = expected_return`` lies in :meth:`trusted_returns`."""
        lo, hi = self.trusted_returns()
        return lo <= float(expected_return) <= hi

    def conjugate(self, expected_return: float) -> tuple[float, float]:
        """``(sup_beta beta J - Lambda(beta), beta*)`` for one return ``J`` (the exact solver's
        where the curve has one, else the grid's)."""
        if self._exact is not None:
            return self._exact(float(expected_return))
        c = conjugate_on_grid(
            self.betas, self.value[None], self.slope[None], np.array([expected_return])
        )
        return float(c.meg[0]), float(c.beta[0])

    # -------------------------------------------------------------- scoring a policy
    def score(
        self,
        returns: ArrayLike | float,
        *,
        certificate: float = math.inf,
        confidence: float = 0.95,
        n_boot: int = 500,
        seed: int = 0,
        exact_return: bool = False,
        units: ArrayLike | None = None,
    ) -> CurveScore:
        """MEG of a policy from its episodes' returns (or its exact expected return).

        Args:
            returns: ``(n,)`` the returns of ``n`` episodes of the policy from the curve's start
                distribution, or one number with ``exact_return=True``.
            certificate: the Gibbs bound ``E_pi[sum_t (log|A| - H(pi(. | s_t)))]`` (for a
                box, the policy's KL to the uniform density) that MEG cannot exceed.
            confidence: the interval's nominal coverage.
            n_boot: bootstrap replicates (at least 2 unless the curve is exact and the return
                exact).
            seed: the bootstrap's seed.
            exact_return: ``returns`` is the policy's exact expected return.
            units: ``(n,)`` for each episode the curve's unit (start, :attr:`starts`) it began
                at, or -1 for a fresh start. Where some episodes began at the curve's starts,
                ``Lambda`` is estimated with the policy's mean return per start as a control
                variate: ``mean_k W_k - b (mean_k J_k - J)``, ``b`` the regression of the
                starts' ``W_k(beta)`` on their ``J_k`` (at every ``beta``; redone in every
                bootstrap replicate). Where the start decides much of both (Pendulum: the
                pole's first angle) this removes most of the starts' share of the interval;
                where it does not, ``b`` is near 0 and the estimate is the plain one.

        Returns:
            :class:`CurveScore`.

        Raises:
            ValueError: no or non-finite returns, too few replicates, or a confidence outside
                ``(0, 1)``.
        """
        r = _checked_returns(returns, confidence)
        noiseless = self.exact and (exact_return or r.size == 1)
        _check_n_boot(n_boot, noiseless)
        J = float(r.mean())
        J_se = 0.0 if exact_return or r.size < 2 else float(r.std(ddof=1) / math.sqrt(r.size))
        paired = paired_units(units, r, self.n_units)
        lam, slope, raw, beta = self._maximum(J, paired)
        c = conjugate_on_grid(self.betas, lam, slope, np.array([J]))
        finite = math.isfinite(beta)
        at_edge = bool(c.at_edge[0]) and not (self._exact is not None and finite)
        bias, ess = self._allowances_at(beta)
        reps, se = self._replicates(r, paired, n_boot, seed, exact_return, noiseless, raw)
        curve_se = self._noise_beyond_units(beta)
        z = statistics.NormalDist().inv_cdf(0.5 + float(confidence) / 2.0)
        rnd = rounding(self.returns_found, J, beta, float(lam[0, int(c.below[0])]))
        spread = self._noise_quantile(confidence) * curve_se
        half = math.hypot(z * se, spread) + bias + rnd
        low, high = raw - half, raw + half
        # every episode had one return: the bootstrap sees no spread
        other = unseen(self.betas, self.returns_found, r, confidence, exact_return, lam, slope)
        if other is not None:
            far = spread + bias + rnd
            low, high = min(low, other - far), max(high, other + far)
        meg, low, high = clipped(raw, low, high, certificate)
        return CurveScore(
            meg=meg,
            low=low,
            high=high,
            beta=float(beta) if raw > 0 else 0.0,
            raw=float(raw),
            bootstrap_se=se,
            bias=bias,
            expected_return=J,
            return_se=J_se,
            at_edge=at_edge,
            in_range=self.covers(J),
            ess=ess,
            replicates=reps,
            start_return=math.nan if paired is None else float(paired.means.mean()),
            curve_se=curve_se,
        )

    def _maximum(
        self, J: float, paired: _Paired | None
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """The curve the score uses ``(1, G)`` (with the control variate where paired) with its
        slope, and its conjugate's maximum and maximiser at ``J``."""
        if paired is None:
            raw, beta = self.conjugate(J)
            return self.value[None], self.slope[None], raw, beta
        K = self.n_units
        lam, slope = adjusted(
            self.log_z, self.slopes, np.full((1, K), 1.0 / K), paired.means[None], np.array([J])
        )
        c = conjugate_on_grid(self.betas, lam, slope, np.array([J]))
        return lam, slope, float(c.meg[0]), float(c.beta[0])

    def _replicates(
        self,
        r: np.ndarray,
        paired: _Paired | None,
        n_boot: int,
        seed: int,
        exact_return: bool,
        noiseless: bool,
        raw: float,
    ) -> tuple[np.ndarray, float]:
        """Bootstrap replicates ``(n_boot,)`` of the maximum (with the control variate where
        the episodes are paired with the curve's starts) and their standard error; ``raw``
        alone and 0 for a noiseless score."""
        if noiseless:
            return np.array([raw]), 0.0
        if paired is None:
            reps = bootstrap(self.betas, self.log_z, self.slopes, r, n_boot, seed, exact_return)
        else:
            reps = paired_bootstrap(self.betas, self.log_z, self.slopes, r, paired, n_boot, seed)
        return reps, float(reps.std(ddof=1))

    def _noise_beyond_units(self, beta: float) -> float:
        """The standard deviation of ``Lambda(beta)`` that the curve's populations show beyond
        what the spread of its units shows the bootstrap.

        An estimated curve's populations measure the noise of each unit's ``log Z`` (twice the
        bias allowance is its mean variance, ``v_pop``); the bootstrap sees that noise only
        through the units' spread (``v_units``, their variance at ``beta``), and not at all
        with one unit. This is ``sqrt(max(0, v_pop - v_units) / K)``: 0 where the units
        spread at least as much as their noise (many starts), the whole noise with one unit;
        0 for an exact curve and at an infinite ``beta``.
        """
        if self.exact or not math.isfinite(beta):
            return 0.0
        v_pop = 2.0 * float(np.interp(beta, self.betas, self.bias))
        at_beta = [float(np.interp(beta, self.betas, row)) for row in self.log_z]
        v_units = float(np.var(at_beta))  # the bootstrap's: draws of K from K
        return math.sqrt(max(0.0, v_pop - v_units) / self.n_units)

    def _noise_quantile(self, confidence: float) -> float:
        """Student's quantile for :meth:`_noise_beyond_units`: its variance is measured with
        one degree of freedom per unit (two populations each; more make it conservative)."""
        import scipy.special  # loaded already (scipy.sparse's); scipy.stats would add 0.5 s

        return float(scipy.special.stdtrit(self.n_units, 0.5 + float(confidence) / 2.0))

    def _allowances_at(self, beta: float) -> tuple[float, float]:
        """The bias allowance and the effective sample size at ``beta`` (0 and inf at an
        infinite ``beta``)."""
        if not math.isfinite(beta):
            return 0.0, math.inf
        return float(np.interp(beta, self.betas, self.bias)), float(
            np.interp(beta, self.betas, self.ess)
        )

    # -------------------------------------------------------------- files
    def check_for(
        self,
        *,
        env: str,
        horizon: int,
        actions: JSONDict,
        env_kwargs: EnvKwargs | None = None,
    ) -> None:
        """Refuse the curve for a problem it was not computed for.

        Raises:
            ValueError: what differs, and how to get a curve for the problem given.
        """
        diff = self.info.differences(
            env=env, horizon=horizon, actions=actions, env_kwargs=env_kwargs
        )
        if diff:
            raise ValueError(
                f"this soft-value curve was computed for {self.info.env} with horizon "
                f"{self.info.horizon}, not for this problem: {diff}. Compute one for it "
                f"(imitation-meg curve --env {env} --horizon {horizon} --out FILE, or "
                "imitation_meg.approx.soft_value_curve)."
            )

    def save(self, path: str | os.PathLike[str]) -> pathlib.Path:
        """Write the curve and its provenance to ``path`` (an ``.npz`` file; the suffix is
        added when missing). Returns the path written."""
        arrays = {
            "betas": self.betas,
            "log_z": self.log_z,
            "slopes": self.slopes,
            "bias": self.bias,
            "ess": self.ess,
            "starts": np.zeros((0, 0)) if self.starts is None else self.starts,
        }
        meta = {
            "info": _jsonable(self.info.to_dict()),
            "trusted": list(self.trusted),
            "returns_found": list(self.returns_found),
            "min_ess": self.min_ess,
            "problems": list(self.problems),
        }
        return write_curve(path, arrays, meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SoftValueCurve:
        """Read a curve written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: a file that is not a curve of this format.
        """
        return cls(**read_curve(path))

    def __repr__(self) -> str:
        lo, hi = self.trusted_returns()
        return (
            f"SoftValueCurve({self.info.env}, H={self.info.horizon}, method={self.info.method}, "
            f"{self.n_units} unit(s), trusted for returns in [{lo:.6g}, {hi:.6g}])"
        )


def curve_of_populations(
    betas: np.ndarray,
    lz: np.ndarray,
    slopes: np.ndarray,
    info: CurveInfo,
    *,
    ess: np.ndarray,
    returns_found: tuple[float, float],
    min_ess: float,
    problems: tuple[str, ...] = (),
) -> SoftValueCurve:
    """The curve of an estimator that runs ``n >= 2`` independent populations per start.

    Each start's populations are pooled: from ``lz, slopes (K, n, G)`` (each population's
    ``log Z`` and its slope at the grid ``betas``) the start's ``log`` of the mean ``Z`` and its
    ``Z``-weighted slope; the bias allowance is half the variance of a start's pooled ``log Z``
    (the log of an unbiased estimate is low by about that), measured by its populations'
    disagreement and averaged over the starts. ``ess``, ``returns_found``, ``min_ess`` and
    ``problems`` are the :class:`SoftValueCurve`'s.
    """
    top = lz.max(1)
    weight = np.exp(lz - top[:, None])  # (K, n, G) each population's share of the mean
    pooled = top + np.log(weight.mean(1))
    slope = (weight * slopes).sum(1) / weight.sum(1)
    per_start = lz.var(1, ddof=1) / lz.shape[1]  # variance of each start's pooled log Z
    return SoftValueCurve(
        betas,
        pooled,
        slope,
        info,
        bias=per_start.mean(0) / 2.0,
        ess=ess,
        returns_found=returns_found,
        min_ess=min_ess,
        problems=problems,
    )


# ------------------------------------------------------------------------------ exact curves
def exact_curve(
    mdp: TabularMDP, *, env: str | None = None, env_kwargs: EnvKwargs | None = None
) -> SoftValueCurve:
    """The exact curve of a finite-horizon, undiscounted :class:`~imitation_meg.TabularMDP`
    with its utility as the reward.

    On the grid, ``Lambda`` and its slope come from the exact passes of
    :class:`~imitation_meg.core.known.MEGObjective` for the uniform policy (the identity at
    ``pi = uniform``: ``Lambda(beta) = beta J(uniform) - L_uniform(beta) - H log|A|``); the
    conjugate at a return ``J`` is solved exactly by :func:`imitation_meg.meg` on the
    state-action occupancy ``lam D_max + (1 - lam) D_min`` of the optimal and anti-optimal
    policies with that return (MEG is linear in the occupancy given the model, and any return
    between the two is attained by such a mixture), so the limits at ``beta = +-inf`` are exact.

    Raises:
        TypeError: not a TabularMDP.
        ValueError: an MDP without a utility, a discounted or infinite-horizon one.
    """
    import torch as th

    from imitation_meg.core import policies
    from imitation_meg.core.known import MEGObjective, _normalisation, meg, sa_occupancy_of
    from imitation_meg.core.mdp import TabularMDP

    if not isinstance(mdp, TabularMDP):
        raise TypeError(f"exact_curve takes an imitation_meg.TabularMDP, got {type(mdp).__name__}.")
    if mdp.utility is None:
        raise ValueError(f"{mdp.name} has no utility: the curve is of the MDP's reward.")
    if mdp.horizon is None or mdp.discount != 1.0:
        raise ValueError(
            f"the soft-value curve is of the finite-horizon undiscounted model family; {mdp.name} "
            f"has horizon={mdp.horizon}, discount={mdp.discount}. Use im.meg for it."
        )
    H, A = mdp.steps, mdp.n_actions
    r = mdp.reward_sa().detach()
    shift, unit = _normalisation(r)
    r_n = (r - shift) / unit if unit > 0 else th.zeros_like(r)
    sa_max = sa_occupancy_of(mdp, policies.optimal(mdp))
    sa_min = sa_occupancy_of(mdp, policies.anti_optimal(mdp))
    rr = r.to(sa_max.dtype)
    j_max, j_min = float((sa_max * rr).sum()), float((sa_min * rr).sum())
    scale = max(abs(j_max), abs(j_min), H * unit, 1e-300)
    betas = beta_grid(scale)
    obj = MEGObjective(mdp, policies.uniform(mdp), r_n)
    ev = obj.evaluate_batch(th.as_tensor(betas * unit), second=False)
    L = ev.L.double().cpu().numpy()
    bn = betas * unit
    lam = bn * obj.expected_utility - L - H * math.log(A) + betas * H * shift
    slope = unit * ev.model_eu.double().cpu().numpy() + H * shift

    def solve(J: float) -> tuple[float, float]:
        span = j_max - j_min
        tol = 1e-12 * max(1.0, abs(j_max), abs(j_min))
        if not (j_min - tol <= J <= j_max + tol):
            raise ValueError(
                f"no policy of {mdp.name} has expected return {J:.12g}: the returns lie in "
                f"[{j_min:.12g}, {j_max:.12g}]."
            )
        w = 1.0 if span <= tol else min(max((J - j_min) / span, 0.0), 1.0)
        res = meg(None, mdp, sa_occupancy=w * sa_max + (1.0 - w) * sa_min)
        return float(res.meg), float(res.beta)

    info = CurveInfo(
        env=env or mdp.name,
        env_kwargs=_jsonable(dict(env_kwargs or {})),
        horizon=H,
        actions={"kind": "discrete", "n": A},
        method="exact",
    )
    return SoftValueCurve(
        betas, lam[None], slope[None], info, returns_found=(j_min, j_max), exact=solve
    )
