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
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import statistics
import zipfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

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

#: Decades of ``|beta| * scale`` the grid spans on each side of 0 (``scale`` the utility unit of
#: the curve: the largest return), and its step in decades.
GRID_DECADES = (-4.0, 6.0)
GRID_STEP = 0.02
#: The file format's version (``SoftValueCurve.save``).
FORMAT = 1
#: Relative rounding of the curve's float64 sums (an allowance at large ``|beta| * scale``).
_ROUNDING = 64 * float(np.finfo(np.float64).eps)


def beta_grid(scale: float) -> np.ndarray:
    """The rationalities of a curve of utility unit ``scale``: 0 and ``+-10^d / scale`` for
    ``d`` in :data:`GRID_DECADES`, :data:`GRID_STEP` apart, ascending ``(G,)``.

    Raises:
        ValueError: a scale that is not a positive finite number.
    """
    if not (isinstance(scale, (int, float, np.floating)) and 0 < float(scale) < math.inf):
        raise ValueError(f"a curve's scale must be a positive finite number, got {scale!r}.")
    n = round((GRID_DECADES[1] - GRID_DECADES[0]) / GRID_STEP)
    ups = 10.0 ** np.linspace(GRID_DECADES[0], GRID_DECADES[1], n + 1) / float(scale)
    return np.concatenate([-ups[::-1], [0.0], ups])


# ------------------------------------------------------------------------------ provenance
@dataclasses.dataclass(frozen=True)
class CurveInfo:
    """What a curve was computed for, and how (recorded in its file).

    Attributes:
        env: the environment's gymnasium id, or a name for an MDP or a factory.
        env_kwargs: keyword arguments the environment was made with.
        horizon: decisions per episode ``H``.
        actions: the action space (:meth:`~imitation_meg.approx.spaces.ActionSpace.to_dict`).
        method: how it was computed (``"exact"``, ``"paths"``, ...).
        settings: the estimator's settings.
        seed: the seed of its random draws (None for an exact curve).
        version: the library version that computed it.
        reward: what the utility is.
        starts: where episodes start.
    """

    env: str
    env_kwargs: JSONDict
    horizon: int
    actions: JSONDict
    method: str
    settings: JSONDict = dataclasses.field(default_factory=dict)
    seed: int | None = None
    version: str = ""
    reward: str = "the environment's reward"
    starts: str = "the environment's reset distribution"

    def __post_init__(self) -> None:
        if not self.version:
            object.__setattr__(self, "version", _library_version())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    def differences(
        self, *, env: str, horizon: int, actions: dict[str, Any], env_kwargs: Any
    ) -> str:
        """What differs between this curve's problem and the one given ("" when none)."""
        diffs = []
        if env != self.env:
            diffs.append(f"environment {env!r} (the curve's: {self.env!r})")
        kwargs = _jsonable(dict(env_kwargs or {}))
        if kwargs != self.env_kwargs:
            diffs.append(f"env_kwargs {kwargs} (the curve's: {self.env_kwargs})")
        if int(horizon) != int(self.horizon):
            diffs.append(f"horizon {horizon} (the curve's: {self.horizon})")
        if actions != self.actions:
            diffs.append(f"actions {actions} (the curve's: {self.actions})")
        return "; ".join(diffs)


def _library_version() -> str:
    """This library's version (``imitation_meg.__version__``, read from the package already
    imported: it sits above this module, which does not import it)."""
    import sys

    return str(sys.modules["imitation_meg"].__version__)


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (the form a file stores and compares)."""
    from imitation_meg.results import to_jsonable

    return json.loads(json.dumps(to_jsonable(value)))


# ------------------------------------------------------------------------------ the conjugate
class Conjugate(NamedTuple):
    """``sup_beta beta J - Lambda(beta)`` on a grid, for ``B`` curves at once.

    Attributes:
        meg: ``(B,)`` the maxima.
        beta: ``(B,)`` the maximisers.
        below: ``(B,)`` the grid point nearest each maximiser from below.
        at_edge: ``(B,)`` whether the maximum lies at the grid's first or last point (the
            supremum lies beyond the grid).
    """

    meg: np.ndarray
    beta: np.ndarray
    below: np.ndarray
    at_edge: np.ndarray


def conjugate_on_grid(
    betas: np.ndarray, lam: np.ndarray, slope: np.ndarray, J: np.ndarray
) -> Conjugate:
    """``sup_beta beta J_b - Lambda_b(beta)`` for curves ``lam (B, G)`` with slopes
    ``slope (B, G)`` on ``betas (G,)``, at returns ``J (B,)``.

    The grid's best point, then the exact maximum of the cubic Hermite interpolant (values and
    slopes) on the two intervals beside it: where ``Lambda`` is smooth its error is of fourth
    order in the grid's step, and a maximum is insensitive to first order in where it lies.
    """
    lam = np.atleast_2d(lam)
    slope = np.atleast_2d(slope)
    J = np.broadcast_to(np.asarray(J, dtype=np.float64), (lam.shape[0],))
    G = len(betas)
    f = betas[None, :] * J[:, None] - lam
    best = np.argmax(f, axis=1)
    rows = np.arange(lam.shape[0])
    # ties with beta = 0 (a return no model distinguishes from the uniform one's, a constant
    # reward) go to 0: the maximum there is exactly 0, and no rationality does better
    zero = int(np.searchsorted(betas, 0.0))
    tol = _ROUNDING * (np.abs(betas[best] * J) + np.abs(lam[rows, best]) + 1.0)
    best = np.where(f[rows, best] > f[rows, zero] + tol, best, zero)
    meg, beta = f[rows, best].copy(), betas[best].copy()
    for lo in (best - 1, best):
        ok = (lo >= 0) & (lo + 1 < G)
        i0 = np.clip(lo, 0, G - 2)
        i1 = i0 + 1
        val, arg = _hermite_max(
            betas[i0], betas[i1], lam[rows, i0], lam[rows, i1], slope[rows, i0], slope[rows, i1], J
        )
        better = ok & (val > meg)
        meg = np.where(better, val, meg)
        beta = np.where(better, arg, beta)
    below = np.clip(np.searchsorted(betas, beta, side="right") - 1, 0, G - 1)
    at_edge = (best == 0) | (best == G - 1)
    return Conjugate(meg, beta, below, at_edge)


def _hermite_max(
    b0: np.ndarray,
    b1: np.ndarray,
    L0: np.ndarray,
    L1: np.ndarray,
    S0: np.ndarray,
    S1: np.ndarray,
    J: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The maximum over ``[b0, b1]`` of ``b J - H(b)``, ``H`` the cubic Hermite interpolant of
    values ``L`` and slopes ``S`` at the ends, and where it lies (vectorised)."""
    h = b1 - b0
    # f'(t) / 1 for b = b0 + t h: h J - H'(t) = a t^2 + b t + c
    qa = -(6 * L0 + 3 * h * S0 - 6 * L1 + 3 * h * S1)
    qb = -(-6 * L0 - 4 * h * S0 + 6 * L1 - 2 * h * S1)
    qc = h * (J - S0)

    def f(t: np.ndarray) -> np.ndarray:
        h00 = 2 * t**3 - 3 * t**2 + 1
        h10 = t**3 - 2 * t**2 + t
        h01 = -2 * t**3 + 3 * t**2
        h11 = t**3 - t**2
        H = h00 * L0 + h10 * h * S0 + h01 * L1 + h11 * h * S1
        return (b0 + t * h) * J - H

    cands = [np.zeros_like(h), np.ones_like(h)]
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = qb * qb - 4 * qa * qc
        root = np.sqrt(np.maximum(disc, 0.0))
        small = np.abs(qa) <= 1e-14 * (np.abs(qb) + np.abs(qc))
        lin = np.where(qb != 0, -qc / qb, 0.5)
        # the numerically stable pair of roots
        qq = -0.5 * (qb + np.copysign(root, qb))
        r1 = np.where(small, lin, np.where(qa != 0, qq / qa, 0.5))
        r2 = np.where(small, lin, np.where(qq != 0, qc / qq, 0.5))
    for r in (r1, r2):
        r = np.where(np.isfinite(r) & (disc >= 0) | small, r, 0.5)
        cands.append(np.clip(r, 0.0, 1.0))
    vals = np.stack([f(t) for t in cands])  # (4, B)
    k = np.argmax(vals, axis=0)
    cols = np.arange(vals.shape[1])
    t_best = np.stack(cands)[k, cols]
    return vals[k, cols], b0 + t_best * h


# ------------------------------------------------------------------------------ a score
class CurveScore(NamedTuple):
    """MEG of one policy from a curve and the policy's returns (:meth:`SoftValueCurve.score`).

    Attributes:
        meg: the estimate, clipped to ``[0, certificate]`` (nats).
        low, high: the interval (``z`` bootstrap standard errors plus the curve's bias
            allowance and rounding at ``beta``), clipped the same way.
        beta: the maximiser (utility units; 0 for a policy whose return is the uniform one's).
        raw: the maximum before clipping.
        bootstrap_se: the bootstrap standard error (the policy's episodes and the curve's
            units drawn again, independently).
        bias: the curve's bias allowance at ``beta``.
        expected_return: the policy's mean return ``J``.
        return_se: its standard error.
        at_edge: the maximum lies at the grid's end (beyond the curve: not trusted).
        in_range: ``J`` lies where the curve is trusted (:meth:`SoftValueCurve.trusted_returns`).
        ess: the curve's effective sample size at ``beta`` (inf for an exact curve).
        replicates: ``(n_boot,)`` bootstrap replicates of the maximum.
        start_return: the policy's mean return over the curve's own starts, from the episodes
            that began there (NaN without them): where the start decides much of the return,
            this, not ``expected_return``, is what the curve's returns found compare with.
    """

    meg: float
    low: float
    high: float
    beta: float
    raw: float
    bootstrap_se: float
    bias: float
    expected_return: float
    return_se: float
    at_edge: bool
    in_range: bool
    ess: float
    replicates: np.ndarray
    start_return: float = math.nan


def _checked_returns(returns: ArrayLike | float, confidence: float) -> np.ndarray:
    """The episodes' returns ``(n,)`` as float64, checked with the confidence.

    Raises:
        ValueError: no or non-finite returns, a confidence outside ``(0, 1)``.
    """
    r = np.atleast_1d(np.asarray(returns, dtype=np.float64)).reshape(-1)
    if r.size == 0 or not np.all(np.isfinite(r)):
        raise ValueError(
            f"score needs the finite returns of at least one episode, got {r.size} values"
            + ("" if r.size == 0 else f" ({int((~np.isfinite(r)).sum())} not finite)")
            + "."
        )
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")
    return r


def _checked_grid(
    betas: ArrayLike, log_z: ArrayLike, slopes: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid ``(G,)`` and the units' values and slopes ``(K, G)`` as float64, checked.

    Raises:
        ValueError: an unsorted grid, one without 0, mismatched shapes, non-finite values.
    """
    b = np.asarray(betas, dtype=np.float64)
    lz = np.atleast_2d(np.asarray(log_z, dtype=np.float64))
    sl = np.atleast_2d(np.asarray(slopes, dtype=np.float64))
    G = b.size
    if b.ndim != 1 or G < 3 or np.any(np.diff(b) <= 0) or 0.0 not in b:
        raise ValueError(
            f"a curve needs an ascending grid of at least 3 rationalities that includes 0, "
            f"got {G} values."
        )
    if lz.shape != sl.shape or lz.shape[1] != G:
        raise ValueError(f"log_z and slopes must both be (K, {G}), got {lz.shape} and {sl.shape}.")
    if not (np.all(np.isfinite(lz)) and np.all(np.isfinite(sl))):
        raise ValueError("a curve's values and slopes must be finite.")
    return b, lz, sl


def _trusted_run(betas: np.ndarray, ess: np.ndarray, min_ess: float) -> tuple[float, float]:
    """The rationalities at the ends of the run of grid points around 0 with at least
    ``min_ess`` effective samples."""
    bad = ess < min_ess
    zero = int(np.searchsorted(betas, 0.0))
    below = np.flatnonzero(bad[:zero])
    above = np.flatnonzero(bad[zero + 1 :])
    lo = int(below[-1]) + 1 if below.size else 0
    hi = zero + int(above[0]) if above.size else len(betas) - 1
    return float(betas[lo]), float(betas[hi])


class _Paired(NamedTuple):
    """Episodes that began at a curve's starts: their indices per start, the starts' mean
    returns ``(K,)``, and the indices of the episodes from fresh starts."""

    groups: list[np.ndarray]
    means: np.ndarray
    fresh: np.ndarray


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
        G = betas.size
        self.betas, self.log_z, self.slopes, self.info = betas, log_z, slopes, info
        self.bias = np.zeros(G) if bias is None else np.asarray(bias, dtype=np.float64)
        self.ess = np.full(G, np.inf) if ess is None else np.asarray(ess, dtype=np.float64)
        if self.bias.shape != (G,) or self.ess.shape != (G,):
            raise ValueError(
                f"bias and ess must be ({G},), got {self.bias.shape}, {self.ess.shape}."
            )
        self.min_ess = float(min_ess)
        lo, hi = _trusted_run(betas, self.ess, self.min_ess) if trusted is None else trusted
        self.trusted = (float(lo), float(hi))
        if returns_found is None:
            returns_found = (float(self.slope[0]), float(self.slope[-1]))
        self.returns_found = (float(returns_found[0]), float(returns_found[1]))
        self._exact = exact
        self.problems = tuple(str(p) for p in problems)
        self.starts = None if starts is None else np.asarray(starts, dtype=np.float64)
        if self.starts is not None and len(self.starts) != self.log_z.shape[0]:
            raise ValueError(
                f"starts must give one state per unit ({self.log_z.shape[0]}), got "
                f"{len(self.starts)}."
            )

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
        if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)):
            raise TypeError(f"n_boot must be an integer, got {n_boot!r}.")
        if not noiseless and n_boot < 2:
            raise ValueError(
                f"n_boot={n_boot}: an interval needs at least 2 bootstrap replicates (500 by "
                "default)."
            )
        J = float(r.mean())
        J_se = 0.0 if exact_return or r.size < 2 else float(r.std(ddof=1) / math.sqrt(r.size))
        paired = self._paired(units, r)
        lam, slope, raw, beta = self._maximum(J, paired)
        c = conjugate_on_grid(self.betas, lam, slope, np.array([J]))
        finite = math.isfinite(beta)
        at_edge = bool(c.at_edge[0]) and not (self._exact is not None and finite)
        bias = float(np.interp(beta, self.betas, self.bias)) if finite else 0.0
        ess = float(np.interp(beta, self.betas, self.ess)) if finite else math.inf
        reps, se = np.array([raw]), 0.0
        if not noiseless:
            reps = (
                self._bootstrap(r, n_boot, seed, exact_return)
                if paired is None
                else self._paired_bootstrap(r, paired, n_boot, seed)
            )
            se = float(reps.std(ddof=1))
        z = statistics.NormalDist().inv_cdf(0.5 + float(confidence) / 2.0)
        rounding = self._rounding(J, beta, float(lam[0, int(c.below[0])]))
        half = z * se + bias + rounding
        low, high = raw - half, raw + half
        unseen = self._unseen(r, confidence, exact_return, lam, slope)
        if unseen is not None:  # every episode had one return: the bootstrap sees no spread
            low, high = min(low, unseen - bias - rounding), max(high, unseen + bias + rounding)
        top = max(float(certificate), 0.0)
        ceiling = top + 1e-9 * max(1.0, top) if math.isfinite(top) else math.inf
        return CurveScore(
            meg=float(min(max(raw, 0.0), top)),
            low=float(min(max(low, 0.0), ceiling)),
            high=float(min(max(high, 0.0), ceiling)),
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
        lam, slope = self._adjusted(np.full((1, K), 1.0 / K), paired.means[None], np.array([J]))
        c = conjugate_on_grid(self.betas, lam, slope, np.array([J]))
        return lam, slope, float(c.meg[0]), float(c.beta[0])

    def _rounding(self, J: float, beta: float, lam_at: float) -> float:
        """The float64 rounding of the conjugate's sums at ``beta`` (terms as large as
        ``|beta| x`` the returns, and the curve's value there)."""
        scale = float(max(abs(self.returns_found[0]), abs(self.returns_found[1]), abs(J), 1e-300))
        rounding = _ROUNDING * (1.0 + (abs(beta) if math.isfinite(beta) else 0.0) * scale)
        return rounding + _ROUNDING * abs(lam_at)

    def _unseen(
        self,
        r: np.ndarray,
        confidence: float,
        exact_return: bool,
        lam: np.ndarray,
        slope: np.ndarray,
    ) -> float | None:
        """Where all ``n`` episodes returned the same, the maximum at the return the policy may
        still have: with the chance of an episode ending otherwise at its upper confidence
        bound ``1 - ((1 - confidence) / 2)^(1/n)`` (none in ``n``), and that episode ending at
        the other end of the returns the curve found (None where the returns spread, or are
        exact)."""
        if exact_return or r.size < 2 or np.ptp(r) > 0:
            return None
        J = float(r[0])
        lo, hi = self.returns_found
        other = lo if abs(J - hi) <= abs(J - lo) else hi
        if other == J:
            return None
        p = 1.0 - ((1.0 - float(confidence)) / 2.0) ** (1.0 / r.size)
        shifted = np.array([J + p * (other - J)])
        return float(conjugate_on_grid(self.betas, lam, slope, shifted).meg[0])

    def _paired(self, units: Any, r: np.ndarray) -> _Paired | None:
        """The episodes that began at the curve's starts, per start (None without any).

        Raises:
            ValueError: units of the wrong shape or range, or a start with no episode.
        """
        if units is None:
            return None
        u = np.asarray(units)
        K = self.n_units
        if u.shape != r.shape or u.dtype.kind not in "iu" or u.min() < -1 or u.max() >= K:
            raise ValueError(
                f"units must give each of the {r.size} episodes its start, an integer in "
                f"[0, {K}) or -1 for a fresh start; got shape {u.shape}."
            )
        if not (u >= 0).any():
            return None
        groups = [np.flatnonzero(u == k) for k in range(K)]
        if any(len(g) == 0 for g in groups):
            raise ValueError("units: every start of the curve needs an episode, or none does.")
        means = np.array([r[g].mean() for g in groups])
        return _Paired(groups, means, np.flatnonzero(u < 0))

    def _adjusted(
        self, w: np.ndarray, h: np.ndarray, J: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``Lambda`` and its slope ``(B, G)`` with the control variate: unit weights
        ``w (B, K)`` (rows summing to 1), the units' mean returns ``h (B, K)``, the policy's
        mean return ``J (B,)``."""
        gbar, sbar = w @ self.log_z, w @ self.slopes
        hbar = (w * h).sum(1)
        dh = w * (h - hbar[:, None])
        var = (dh * (h - hbar[:, None])).sum(1)
        safe = np.where(var > 0, var, 1.0)[:, None]
        b = np.where(var[:, None] > 0, (dh @ self.log_z) / safe, 0.0)
        bs = np.where(var[:, None] > 0, (dh @ self.slopes) / safe, 0.0)
        gap = (hbar - J)[:, None]
        return gbar - b * gap, sbar - bs * gap

    def _paired_bootstrap(
        self, r: np.ndarray, paired: _Paired, n_boot: int, seed: int
    ) -> np.ndarray:
        """Replicates of the maximum with the control variate: the starts drawn again (for the
        curve and the policy together), the episodes within each start, and the fresh
        episodes."""
        rng = np.random.default_rng([int(seed), 11])
        K = self.n_units
        counts = rng.multinomial(K, np.full(K, 1.0 / K), size=n_boot)  # (B, K)
        h = np.stack(
            [rng.multinomial(len(g), np.full(len(g), 1.0 / len(g)), size=n_boot) @ r[g] / len(g)
             for g in paired.groups],
            axis=1,
        )  # fmt: skip
        sizes = np.array([len(g) for g in paired.groups])
        total = (counts * sizes * h).sum(1)
        n = (counts * sizes).sum(1).astype(np.float64)
        f = paired.fresh
        if len(f):
            total = (
                total + rng.multinomial(len(f), np.full(len(f), 1.0 / len(f)), size=n_boot) @ r[f]
            )
            n = n + len(f)
        lam, slope = self._adjusted(counts / K, h, total / n)
        return conjugate_on_grid(self.betas, lam, slope, total / n).meg

    def _bootstrap(self, r: np.ndarray, n_boot: int, seed: int, exact_return: bool) -> np.ndarray:
        """Replicates of the maximum: the episodes and the units drawn again."""
        rng = np.random.default_rng([int(seed), 7])
        n, K = r.size, self.n_units
        if exact_return or n == 1:
            Jb = np.full(n_boot, r.mean())
        else:
            Jb = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot) @ r / n
        if K > 1:
            w = rng.multinomial(K, np.full(K, 1.0 / K), size=n_boot) / K  # (B, K)
            lam, slope = w @ self.log_z, w @ self.slopes
        else:
            lam = np.broadcast_to(self.value, (n_boot, len(self.betas)))
            slope = np.broadcast_to(self.slope, (n_boot, len(self.betas)))
        return conjugate_on_grid(self.betas, lam, slope, Jb).meg

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
        p = pathlib.Path(path)
        if p.suffix != ".npz":
            p = p.with_name(p.name + ".npz")
        meta = {
            "format": FORMAT,
            "info": _jsonable(self.info.to_dict()),
            "trusted": list(self.trusted),
            "returns_found": list(self.returns_found),
            "min_ess": self.min_ess,
            "problems": list(self.problems),
        }
        with open(p, "wb") as fh:
            np.savez_compressed(
                fh,
                betas=self.betas,
                log_z=self.log_z,
                slopes=self.slopes,
                bias=self.bias,
                ess=np.where(np.isfinite(self.ess), self.ess, -1.0),
                starts=np.zeros((0, 0)) if self.starts is None else self.starts,
                meta=np.array(json.dumps(meta)),
            )
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SoftValueCurve:
        """Read a curve written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: a file that is not a curve of this format.
        """
        p = pathlib.Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"no soft-value curve file at {str(p)!r}.")
        try:
            with np.load(p, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
            meta = json.loads(str(arrays.pop("meta")))
        except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as e:
            raise ValueError(
                f"{str(p)!r} is not a soft-value curve file written by SoftValueCurve.save "
                f"({type(e).__name__}: {e})."
            ) from None
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"{str(p)!r} has curve format {meta.get('format')!r}; this library reads "
                f"format {FORMAT}: compute the curve again."
            )
        ess = arrays["ess"]
        starts = arrays.get("starts")
        return cls(
            arrays["betas"],
            arrays["log_z"],
            arrays["slopes"],
            CurveInfo(**meta["info"]),
            bias=arrays["bias"],
            ess=np.where(ess < 0, np.inf, ess),
            trusted=(float(meta["trusted"][0]), float(meta["trusted"][1])),
            returns_found=(float(meta["returns_found"][0]), float(meta["returns_found"][1])),
            min_ess=float(meta["min_ess"]),
            problems=tuple(meta.get("problems", ())),
            starts=None if starts is None or starts.size == 0 else starts,
        )

    def __repr__(self) -> str:
        lo, hi = self.trusted_returns()
        return (
            f"SoftValueCurve({self.info.env}, H={self.info.horizon}, method={self.info.method}, "
            f"{self.n_units} unit(s), trusted for returns in [{lo:.6g}, {hi:.6g}])"
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
