"""MEG estimated from sampled trajectories, with a bootstrap interval.

When only rollouts of an agent are available, the policy's own state-action occupancy
``w[t, s, a] = P(s_t = s, a_t = a)`` is replaced by empirical frequencies over ``N``
trajectories, and the known-utility (or unknown-utility) maximisation is solved exactly against
them. The log-likelihood of every fixed model is then an unbiased estimate, but the maximum over
models is **biased upwards at small N**: the fitted model also fits the sampling noise. A uniform
policy, whose MEG is exactly 0, scores positive from a handful of trajectories (about 0.05 from
10 trajectories on a small grid). The bias shrinks roughly like ``1/N``. The bootstrap percentile
interval over trajectories reports the sampling spread; its replicates carry the same upward bias,
so at small N the interval may lie above the exact value. Report ``n_trajectories`` beside every
estimate.

Episodes shorter than the horizon. In an MDP built from a gymnasium toy-text environment
(:meth:`TabularMDP.from_env`) the states entered on a terminating transition are absorbing and
give no further utility. An episode that terminated after ``T < H`` decisions therefore
continues in its absorbing state ``s_T`` for ``H - T`` steps that no-one observed. Every
soft-optimal model is uniform there (all actions lead back to ``s_T`` with the same utility), so
whatever the policy does in those steps contributes exactly ``-log|A|`` per step to every model's
log-likelihood, which cancels against the ``+log|A|`` of ``H log|A|``: the padded steps add
nothing to MEG. We pad with the absorbing state and a uniform action distribution. This requires
the final state to be absorbing and (for a known utility) the utility there to be the same for
every action; both are checked. Episodes that stop early in a non-absorbing state (truncated) are
refused: use an MDP with a shorter horizon.

Impossible steps. A trajectory that starts where ``p0`` is 0, or moves ``(s, a) -> s'`` where
``T[s, a, s'] = 0``, was not generated in this MDP (another environment, a wrong state mapping,
a bug in the recording), and its empirical occupancy is no policy's occupancy here. Such data are
refused by default (``impossible="raise"``); ``impossible="count"`` scores them anyway and reports
how many impossible steps there were (``n_impossible``).

Unknown-utility and target MEG from trajectories. The empirical occupancy of trajectories in a
stochastic MDP satisfies the MDP's flow equations only approximately, and the class's
log-likelihood is then not guaranteed concave (see :mod:`imitation_meg.core.faces`); the solver
returns a stationary point (``result.extra["concave"]`` is False).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning, as_tensor
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import meg
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.sampling import _generator, _refuse_infinite_horizon, sample_trajectories
from imitation_meg.core.trajectory_data import check_transitions, trajectory_state_actions
from imitation_meg.results import to_jsonable
from imitation_meg.type_aliases import ArrayLike, TargetLike, UtilityLike

#: Trajectories: imitation ``Trajectory`` objects, SB3-style step records, or a pair
#: ``(states, actions)`` of integer arrays (see :func:`trajectory_state_actions`).
TrajectoriesLike: TypeAlias = Sequence[object] | tuple[ArrayLike, ArrayLike]

__all__ = [
    "IMPOSSIBLE_MODES",
    "TrajectoryLengthWarning",
    "TrajectoryMEGResult",
    "empirical_occupancy",
    "meg_from_trajectories",
    "sample_trajectories",
    "trajectory_state_actions",
]

#: Tolerance for "every action gives the same utility" at absorbing states.
_UTILITY_TOL = 1e-9
#: What to do with steps the MDP gives probability zero.
IMPOSSIBLE_MODES = ("raise", "count")


class TrajectoryLengthWarning(ImitationMEGWarning):
    """Trajectories are longer than the MDP's horizon; only their first ``H`` decisions are used."""


@dataclasses.dataclass(frozen=True, eq=False)
class TrajectoryMEGResult:
    """MEG estimated from trajectories.

    Attributes:
        meg: point estimate from all trajectories (biased upwards at small ``n_trajectories``).
        low: lower end of the bootstrap percentile interval (``nan`` when ``n_boot == 0``).
        high: upper end of the interval.
        n_trajectories: number of trajectories used.
        confidence: the interval's nominal coverage.
        n_boot: number of bootstrap replicates.
        mode: ``"known"``, ``"unknown"`` or ``"target"``.
        result: the point result (:class:`~imitation_meg.MEGResult` for known utilities).
        replicates: ``(n_boot,)`` bootstrap MEG values.
        n_padded: trajectories that ended early in an absorbing state and were padded.
        n_cut: trajectories longer than the horizon whose tail was dropped.
        horizon: the MDP's horizon ``H``.
        n_impossible: steps the MDP gives probability zero (with ``impossible="count"``).
    """

    meg: float
    low: float
    high: float
    n_trajectories: int
    confidence: float
    n_boot: int
    mode: str
    result: Any
    replicates: np.ndarray = dataclasses.field(repr=False)
    n_padded: int = 0
    n_cut: int = 0
    horizon: int = 0
    n_impossible: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the point result expanded, replicates as a list)."""
        res = self.result
        if hasattr(res, "to_dict"):
            res = res.to_dict()
        return to_jsonable(
            {
                "meg": self.meg,
                "low": self.low,
                "high": self.high,
                "n_trajectories": self.n_trajectories,
                "confidence": self.confidence,
                "n_boot": self.n_boot,
                "mode": self.mode,
                "n_padded": self.n_padded,
                "n_cut": self.n_cut,
                "horizon": self.horizon,
                "n_impossible": self.n_impossible,
                "result": res,
                "replicates": self.replicates,
            }
        )  # type: ignore[return-value]


def _absorbing_states(mdp: TabularMDP) -> np.ndarray:
    S = mdp.n_states
    selfp = (mdp.prob * (mdp.next_state == th.arange(S, device=mdp.device).view(S, 1, 1))).sum(-1)
    return np.asarray((selfp >= 1 - 1e-12).all(-1).cpu())


@dataclasses.dataclass(frozen=True)
class _Coded:
    """Trajectories as flat codes for fast (re)weighted counting."""

    codes: np.ndarray  # (N, H): t*S*A + s*A + a, or -1 on padded steps
    pad_codes: np.ndarray  # (N, H): t*S + s on padded steps, -1 elsewhere
    n_padded: int
    n_cut: int


def _encode(
    items: list[tuple[np.ndarray, np.ndarray, int | None]], mdp: TabularMDP, r_sa: th.Tensor | None
) -> _Coded:
    H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
    N = len(items)
    codes = np.full((N, H), -1, dtype=np.int64)
    pad = np.full((N, H), -1, dtype=np.int64)
    absorbing = None
    n_padded = n_cut = 0
    t_idx = np.arange(H, dtype=np.int64)
    for i, (s, a, final) in enumerate(items):
        T = a.shape[0]
        if T > H:
            n_cut += 1
            s, a, T = s[:H], a[:H], H
        codes[i, :T] = t_idx[:T] * S * A + s * A + a
        if T < H:
            if absorbing is None:
                absorbing = _absorbing_states(mdp)
            if final is None:
                raise ValueError(
                    f"trajectory {i} has {T} decisions, fewer than the horizon H={H}, and its final "
                    "state is unknown; pass T + 1 states (the last being where it ended) so an "
                    "early end in an absorbing state can be recognised."
                )
            if not absorbing[final]:
                raise ValueError(
                    f"trajectory {i} stops after {T} of H={H} decisions in state {final}, which is "
                    f"not absorbing in {mdp.name}: it was truncated, not terminated, and its missing "
                    f"steps cannot be filled in. Use an MDP with horizon <= {T} "
                    "(mdp.with_horizon) or complete episodes."
                )
            if r_sa is not None:
                row = r_sa[final]
                if float(row.max() - row.min()) > _UTILITY_TOL:
                    raise ValueError(
                        f"trajectory {i} ends in absorbing state {final}, where the utility differs "
                        f"between actions ({row.tolist()}); the unobserved remaining steps would "
                        "then matter. Use a utility that is constant over actions there."
                    )
            pad[i, T:] = t_idx[T:] * S + final
            n_padded += 1
    if n_cut:
        warnings.warn(
            f"{n_cut} of {N} trajectories are longer than the horizon H={H}; only their first {H} "
            "decisions are used. Build the MDP with the episodes' horizon if that is not intended.",
            TrajectoryLengthWarning,
            stacklevel=3,
        )
    return _Coded(codes=codes, pad_codes=pad, n_padded=n_padded, n_cut=n_cut)


def _occupancy(coded: _Coded, weights: np.ndarray, mdp: TabularMDP) -> th.Tensor:
    """``(H, S, A)`` weighted empirical occupancy; ``weights (N,)`` sum to the total mass."""
    H, S, A = mdp.steps, mdp.n_states, mdp.n_actions
    total = float(weights.sum())
    wrep = np.broadcast_to(weights[:, None], coded.codes.shape)
    obs = coded.codes >= 0
    w = np.bincount(coded.codes[obs], weights=wrep[obs], minlength=H * S * A).reshape(H, S, A)
    padm = coded.pad_codes >= 0
    if padm.any():
        ws = np.bincount(coded.pad_codes[padm], weights=wrep[padm], minlength=H * S).reshape(
            H, S, 1
        )
        w = w + ws / A
    return th.as_tensor(w / total, dtype=mdp.dtype, device=mdp.device)


def _impossible_steps(
    items: list[tuple[np.ndarray, np.ndarray, int | None]], mdp: TabularMDP, impossible: str
) -> int:
    """The number of impossible steps; raises for ``impossible="raise"`` if there are any."""
    if impossible not in IMPOSSIBLE_MODES:
        raise ValueError(f"impossible must be one of {IMPOSSIBLE_MODES}, got {impossible!r}.")
    found = check_transitions(items, mdp)
    if found.total and impossible == "raise":
        raise ValueError(
            f"{found.total} steps of {found.n_trajectories} trajectories are impossible in "
            f"{mdp.name} ({found.n_starts} starts where p0 = 0, {found.n_transitions} transitions "
            f"with probability 0); the first: {found.first}. The trajectories come from other "
            "dynamics or were mapped to the wrong states; pass impossible='count' to score them "
            "anyway and report the count."
        )
    return found.total


def empirical_occupancy(
    trajectories: Any,
    mdp: TabularMDP,
    *,
    state_key: str = "old_state",
    utility: UtilityLike | None = None,
    impossible: str = "raise",
) -> th.Tensor:
    """Empirical state-action occupancy ``w[t, s, a]`` ``(H, S, A)`` of trajectories.

    ``w[t, s, a]`` is the fraction of trajectories in state ``s`` taking action ``a`` at decision
    ``t``; episodes that ended early in an absorbing state are padded with that state and a
    uniform action (see the module docstring). Each ``w[t]`` sums to 1.

    Args:
        trajectories, state_key: see :func:`trajectory_state_actions`.
        mdp: the MDP.
        utility: if given, checked to be constant over actions at the absorbing end states.
        impossible: ``"raise"`` (default) refuses steps the MDP gives probability zero;
            ``"count"`` accepts them.

    Raises:
        ValueError: see :func:`trajectory_state_actions`; short trajectories that do not end in
            an absorbing state; impossible steps (unless ``impossible="count"``).
    """
    items = trajectory_state_actions(trajectories, mdp, state_key=state_key)
    _impossible_steps(items, mdp, impossible)
    r = None if utility is None else mdp.reward_sa(utility)
    coded = _encode(items, mdp, r)
    return _occupancy(coded, np.ones(len(items)), mdp)


# ---------------------------------------------------------------------------------- estimate
def _scorer(
    mdp: TabularMDP, utility: Any, features: Any, target: Any, signed: bool
) -> tuple[str, Any]:
    """The mode and a function ``w (H, S, A) -> result with .meg``."""
    given = [
        n
        for n, v in (("utility", utility), ("features", features), ("target", target))
        if v is not None
    ]
    if len(given) > 1:
        raise ValueError(
            f"pass at most one of utility= (known), features= (unknown) or target= (target), got {given}."
        )
    if features is None and target is None:
        return "known", lambda w: meg(None, mdp, utility, signed=signed, sa_occupancy=w)
    if signed:
        raise ValueError(
            "signed=True applies to known-utility MEG only (it needs the utility's sign)."
        )
    unknown = _unknown_module()
    if features is not None:
        fn = _unknown_function(unknown, "meg_unknown")
        feats = _feature_argument(features)
        return "unknown", lambda w: fn(None, mdp, features=feats, sa_occupancy=w)
    fn = _unknown_function(unknown, "meg_target")
    return "target", lambda w: fn(None, mdp, target, sa_occupancy=w)


def _feature_argument(features: Any) -> Any:
    """``features=`` as ``meg_unknown`` takes it: None for ``"all"`` (every utility of the
    state), else the ``(S, F)`` array."""
    if not isinstance(features, str):
        return features
    if features in ("all", "state"):
        return None
    raise ValueError(f"features must be an (S, F) array or 'all', got {features!r}.")


def _unknown_module() -> Any:
    """:mod:`imitation_meg.core.unknown`, or a ``ValueError`` saying to score a known utility."""
    try:
        from imitation_meg.core import unknown
    except ImportError as e:
        raise ValueError(
            "unknown-utility and target MEG need imitation_meg.core.unknown (meg_unknown / meg_target), "
            f"which this installation does not provide ({e}); use utility= for known-utility MEG."
        ) from e
    return unknown


def _unknown_function(unknown: Any, name: str) -> Any:
    """``unknown.<name>`` (``meg_unknown`` or ``meg_target``), or a ``ValueError``."""
    fn = getattr(unknown, name, None)
    if fn is None:
        raise ValueError(f"imitation_meg.core.unknown has no {name}; update imitation_meg.")
    return fn


def _check_bootstrap(n_boot: Any, confidence: Any) -> None:
    """``n_boot`` a non-negative integer and ``confidence`` in ``(0, 1)``."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer, got {n_boot!r}.")
    if not isinstance(confidence, (int, float)) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")


def _refuse_padded_action_features(coded: _Coded, mode: str, features: Any) -> None:
    """State-action features would fit the unobserved actions of padded (early-ended) steps."""
    if (
        coded.n_padded
        and mode == "unknown"
        and features is not None
        and not isinstance(features, str)
        and as_tensor(features, name="features").ndim > 2
    ):
        raise ValueError(
            f"{coded.n_padded} trajectories end early in absorbing states, and state-action "
            "features let the fitted utility depend on the unobserved actions there; use "
            "(S, F) state features or full-length trajectories."
        )


def _bootstrap(
    score: Any,
    coded: _Coded,
    mdp: TabularMDP,
    n_boot: int,
    gen: np.random.Generator,
    *,
    progress: bool,
) -> np.ndarray:
    """``(n_boot,)`` MEG of resampled sets of whole trajectories (with replacement)."""
    N = coded.codes.shape[0]
    reps = np.empty(int(n_boot))
    it: Any = range(int(n_boot))
    if progress and n_boot:
        try:
            from tqdm.auto import tqdm

            it = tqdm(it, desc=f"bootstrap ({N} trajectories)", unit="rep", leave=False)
        except ImportError:
            pass
    for b in it:
        counts = np.bincount(gen.integers(0, N, size=N), minlength=N).astype(np.float64)
        reps[b] = float(score(_occupancy(coded, counts, mdp)).meg)
    return reps


def _percentiles(reps: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of the replicates ``reps (n_boot,)``; NaN without any."""
    if not reps.size:
        return math.nan, math.nan
    alpha = 1.0 - float(confidence)
    low, high = (float(v) for v in np.quantile(reps, [alpha / 2, 1 - alpha / 2]))
    return low, high


@_threads.entry_point
def meg_from_trajectories(
    trajectories: TrajectoriesLike,
    mdp: TabularMDP,
    *,
    utility: UtilityLike | None = None,
    features: ArrayLike | str | None = None,
    target: TargetLike | None = None,
    signed: bool = False,
    n_boot: int = 200,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
    state_key: str = "old_state",
    impossible: str = "raise",
    progress: bool = False,
) -> TrajectoryMEGResult:
    """MEG of the policy that generated ``trajectories``, with a bootstrap percentile interval.

    The empirical state-action frequencies at each decision time form the occupancy
    ``w (H, S, A)`` that replaces the policy's own in :func:`imitation_meg.meg` (or in
    ``meg_unknown`` / ``meg_target`` for ``features=`` / ``target=``). The interval resamples
    whole trajectories with replacement ``n_boot`` times.

    The estimate is **biased upwards at small sample sizes**: the maximum over models also fits
    sampling noise (a uniform policy, MEG 0, scores about 0.05 from 10 trajectories on a small
    grid). The replicates share the bias, so a small-N interval can lie above the exact value.
    Always report ``n_trajectories``.

    Args:
        trajectories: imitation ``Trajectory`` / ``TrajectoryWithRew`` objects (states from the
            seals step infos, else looked up from observations), or a ``(states, actions)`` pair
            of integer arrays; see :func:`trajectory_state_actions`.
        mdp: the MDP the trajectories were sampled in (dynamics, horizon ``H``, ``p0``).
        utility: known utility ``(S,)``, ``(S, A)`` or ``(S, A, S)``; default ``mdp.utility``.
        features: unknown-utility MEG over linear utilities of these ``(S, F)`` features, or
            ``"all"`` for every utility function of the state (needs ``imitation_meg.core.unknown``).
        target: target-variable MEG for this target (``(S,)`` labels of any hashable kind, a
            callable on states, a grid-helper name; see :func:`imitation_meg.core.unknown.target_features`).
        signed: the signed known-utility variant (paper footnote 4).
        n_boot: bootstrap replicates (0 disables the interval: ``low = high = nan``).
        confidence: nominal coverage of the percentile interval, in ``(0, 1)``.
        rng: generator or seed for the bootstrap (default seed 0).
        state_key: the step-info key with the pre-step state (seals: ``"old_state"``).
        impossible: ``"raise"`` (default) refuses trajectories holding steps the MDP gives
            probability zero (a start where ``p0 = 0``, a transition with ``T[s, a, s'] = 0``);
            ``"count"`` scores them anyway and reports the count as ``n_impossible``.
        progress: show a progress bar over the replicates (needs tqdm).

    Returns:
        :class:`TrajectoryMEGResult` with ``.meg``, ``.low``, ``.high``, ``.n_trajectories``,
        ``.n_impossible``.

    Raises:
        ValueError: invalid trajectories (see :func:`trajectory_state_actions`), early ends in
            non-absorbing states, impossible steps (unless ``impossible="count"``), conflicting
            modes, bad ``n_boot`` / ``confidence``.
        TypeError: arguments of the wrong kind.

    Example:
        >>> import imitation_meg as im
        >>> mdp = im.envs.cliff_world(width=4, height=2, horizon=4)
        >>> pi = im.policies.epsilon_greedy(mdp, 0.2)
        >>> data = sample_trajectories(mdp, pi, 500, rng=0)
        >>> est = meg_from_trajectories(data, mdp, n_boot=50, rng=1)
        >>> exact = im.meg(pi, mdp).meg
        >>> est.n_trajectories, est.low <= exact <= est.high
        (500, True)
    """
    if not isinstance(mdp, TabularMDP):
        raise TypeError(f"mdp must be an imitation_meg.TabularMDP, got {type(mdp).__name__}.")
    _refuse_infinite_horizon(mdp)
    _check_bootstrap(n_boot, confidence)
    gen = _generator(rng)
    mode, score = _scorer(mdp, utility, features, target, signed)

    items = trajectory_state_actions(trajectories, mdp, state_key=state_key)
    n_impossible = _impossible_steps(items, mdp, impossible)
    r = mdp.reward_sa(utility) if mode == "known" else None
    coded = _encode(items, mdp, r)
    N = len(items)
    _refuse_padded_action_features(coded, mode, features)
    point = score(_occupancy(coded, np.ones(N), mdp))
    reps = _bootstrap(score, coded, mdp, n_boot, gen, progress=progress)
    low, high = _percentiles(reps, confidence)
    return TrajectoryMEGResult(
        meg=float(point.meg),
        low=low,
        high=high,
        n_trajectories=N,
        confidence=float(confidence),
        n_boot=int(n_boot),
        mode=mode,
        result=point,
        replicates=reps,
        n_padded=coded.n_padded,
        n_cut=coded.n_cut,
        horizon=mdp.steps,
        n_impossible=n_impossible,
    )
