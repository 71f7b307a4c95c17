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

from imitation_meg._validation import ImitationMEGWarning, as_policy, as_tensor
from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import meg
from imitation_meg.core.mdp import TabularMDP
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


def sample_trajectories(
    mdp: TabularMDP, policy: Any, n: int, *, rng: np.random.Generator | int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Roll out a tabular policy in the MDP for its full horizon.

    Args:
        mdp: the MDP (initial distribution, dynamics, horizon ``H``).
        policy: ``(S, A)`` or ``(H, S, A)`` probabilities.
        n: number of trajectories.
        rng: generator or seed (default seed 0).

    Returns:
        ``(states (n, H + 1), actions (n, H))`` int64 arrays, ready for
        :func:`meg_from_trajectories` as a ``(states, actions)`` pair.
    """

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of trajectories, got {n!r}.")
    _refuse_infinite_horizon(mdp)
    gen = _generator(rng)
    pi = np.asarray(as_policy(policy, mdp).cpu(), dtype=np.float64)
    H = mdp.steps
    ns = np.asarray(mdp.next_state.cpu())
    pr = np.asarray(mdp.prob.cpu(), dtype=np.float64)
    p0 = np.asarray(mdp.initial_state_dist.cpu(), dtype=np.float64)
    states = np.empty((n, H + 1), dtype=np.int64)
    actions = np.empty((n, H), dtype=np.int64)
    states[:, 0] = _choice_rows(np.broadcast_to(p0, (n, p0.size)), gen)
    for t in range(H):
        s = states[:, t]
        rows = pi[t, s] if pi.ndim == 3 else pi[s]
        a = _choice_rows(rows, gen)
        actions[:, t] = a
        k = _choice_rows(pr[s, a], gen)
        states[:, t + 1] = ns[s, a, k]
    return states, actions


def _refuse_infinite_horizon(mdp: TabularMDP) -> None:
    """Trajectory estimates are finite-horizon: sampled episodes end, while the discounted
    infinite-horizon MEG weights every step of an endless episode."""
    if mdp.horizon is None:
        raise ValueError(
            f"{mdp.name} is a discounted infinite-horizon MDP: trajectory estimates need a "
            "finite horizon (sampled episodes end, and a truncated discounted sum is another "
            "quantity). Score the stationary policy exactly with meg / meg_unknown, or use "
            "mdp.with_horizon(H) for a finite-horizon copy."
        )


def _choice_rows(p: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """One index per row of probabilities ``p (n, k)``."""
    c = np.cumsum(p, axis=1)
    u = gen.random(p.shape[0]) * c[:, -1]
    return np.minimum((c < u[:, None]).sum(1), p.shape[1] - 1)


def _generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng(0)
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator or an integer seed, got {type(rng).__name__}.")


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
    try:
        from imitation_meg.core import unknown
    except ImportError as e:
        raise ValueError(
            "unknown-utility and target MEG need imitation_meg.core.unknown (meg_unknown / meg_target), "
            f"which this installation does not provide ({e}); use utility= for known-utility MEG."
        ) from e
    if features is not None:
        fn = getattr(unknown, "meg_unknown", None)
        if fn is None:
            raise ValueError("imitation_meg.core.unknown has no meg_unknown; update imitation_meg.")
        feats = None if isinstance(features, str) and features in ("all", "state") else features
        if isinstance(features, str) and feats is not None:
            raise ValueError(f"features must be an (S, F) array or 'all', got {features!r}.")
        return "unknown", lambda w: fn(None, mdp, features=feats, sa_occupancy=w)
    fn = getattr(unknown, "meg_target", None)
    if fn is None:
        raise ValueError("imitation_meg.core.unknown has no meg_target; update imitation_meg.")
    return "target", lambda w: fn(None, mdp, target, sa_occupancy=w)


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
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer, got {n_boot!r}.")
    if not isinstance(confidence, (int, float)) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")
    gen = _generator(rng)
    mode, score = _scorer(mdp, utility, features, target, signed)

    items = trajectory_state_actions(trajectories, mdp, state_key=state_key)
    n_impossible = _impossible_steps(items, mdp, impossible)
    r = mdp.reward_sa(utility) if mode == "known" else None
    coded = _encode(items, mdp, r)
    N = len(items)
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
    point = score(_occupancy(coded, np.ones(N), mdp))

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
    if n_boot:
        alpha = 1.0 - float(confidence)
        low, high = (float(v) for v in np.quantile(reps, [alpha / 2, 1 - alpha / 2]))
    else:
        low = high = math.nan
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
