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
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import ImitationMEGWarning, as_policy, as_tensor
from imitation_meg.known import meg
from imitation_meg.mdp import TabularMDP
from imitation_meg.results import to_jsonable

__all__ = [
    "TrajectoryLengthWarning",
    "TrajectoryMEGResult",
    "empirical_occupancy",
    "meg_from_trajectories",
    "sample_trajectories",
    "trajectory_state_actions",
]

#: Tolerance for "every action gives the same utility" at absorbing states.
_UTILITY_TOL = 1e-9


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
                "result": res,
                "replicates": self.replicates,
            }
        )  # type: ignore[return-value]


# ---------------------------------------------------------------------------------- extraction
def _is_trajectory(x: Any) -> bool:
    return hasattr(x, "acts") and hasattr(x, "obs")


def _int_array(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(as_tensor(x, name=name).cpu()) if not isinstance(x, np.ndarray) else x
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integers, got non-integer values.")
    elif arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}.")
    return arr.astype(np.int64)


def _lookup_states(obs: np.ndarray, mdp: TabularMDP, where: str) -> np.ndarray:
    """States ``(n,)`` whose observation equals each row of ``obs`` ``(n, ...)``."""
    S = mdp.n_states
    if obs.ndim == 1:
        states = _int_array(obs, f"{where} observations")
        bad = (states < 0) | (states >= S)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{where}: observation {int(states[j])} at step {j} is out of range for the "
                f"{S} states of {mdp.name}; integer observations must be state indices."
            )
        return states
    if mdp.observation_matrix is None:
        raise ValueError(
            f"{where}: observations are vectors of shape {obs.shape[1:]} but {mdp.name} has no "
            "observation_matrix to look them up in; record the state in the step infos "
            "(seals does, under 'old_state') or pass (states, actions) arrays."
        )
    table = np.asarray(mdp.observation_matrix.cpu(), dtype=np.float64).reshape(S, -1)
    flat = obs.reshape(obs.shape[0], -1).astype(np.float64)
    if flat.shape[1] != table.shape[1]:
        raise ValueError(
            f"{where}: observations have shape {obs.shape[1:]} but {mdp.name}'s observation_matrix "
            f"rows have {table.shape[1]} entries; the trajectories come from another environment."
        )
    uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    match = np.isclose(uniq[:, None, :], table[None, :, :], rtol=1e-5, atol=1e-6).all(-1)  # (U, S)
    counts = match.sum(1)
    if (counts == 0).any():
        u = int(np.flatnonzero(counts == 0)[0])
        j = int(np.flatnonzero(inverse == u)[0])
        raise ValueError(
            f"{where}: the observation at step {j} matches no state's row of {mdp.name}'s "
            "observation_matrix (out of range); the trajectories come from another environment."
        )
    if (counts > 1).any():
        u = int(np.flatnonzero(counts > 1)[0])
        j = int(np.flatnonzero(inverse == u)[0])
        raise ValueError(
            f"{where}: the observation at step {j} is ambiguous: states "
            f"{np.flatnonzero(match[u]).tolist()} of {mdp.name} share it. Record the state in the "
            "step infos (seals does, under 'old_state') or pass (states, actions) arrays."
        )
    return match.argmax(1)[inverse]


def _from_trajectory(
    traj: Any, i: int, mdp: TabularMDP, state_key: str
) -> tuple[np.ndarray, np.ndarray, int | None]:
    """``(states (T,), actions (T,), final state or None)`` of one imitation Trajectory."""
    where = f"trajectory {i}"
    acts = _int_array(np.asarray(traj.acts), f"{where} acts")
    if acts.ndim != 1:
        raise ValueError(
            f"{where}: acts must be one integer action per step, got shape {acts.shape}."
        )
    T = acts.shape[0]
    infos = getattr(traj, "infos", None)
    if (
        infos is not None
        and len(infos) == T
        and T > 0
        and all(isinstance(info, Mapping) and state_key in info for info in infos)
    ):
        states = _int_array(
            np.array([info[state_key] for info in infos]), f"{where} infos[{state_key!r}]"
        )
        final: int | None = None
        last = infos[-1]
        if "new_state" in last:
            final = int(last["new_state"])
        else:
            try:
                final = int(_lookup_states(np.asarray(traj.obs)[-1:], mdp, where)[0])
            except ValueError:
                final = None
        return states, acts, final
    obs = np.asarray(traj.obs)
    if obs.shape[0] != T + 1:
        raise ValueError(
            f"{where}: expected {T + 1} observations for {T} actions, got {obs.shape[0]}."
        )
    states = _lookup_states(obs, mdp, where)
    return states[:T], acts, int(states[T])


def _split_raw(trajectories: tuple[Any, Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    states, actions = trajectories
    if isinstance(states, (np.ndarray, th.Tensor)) and isinstance(actions, (np.ndarray, th.Tensor)):
        s = _int_array(states, "states")
        a = _int_array(actions, "actions")
        if s.ndim == 1 and a.ndim == 1:
            return [(s, a)]
        if s.ndim != 2 or a.ndim != 2 or s.shape[0] != a.shape[0]:
            raise ValueError(
                "raw trajectories must be (states (N, T) or (N, T + 1), actions (N, T)) integer "
                f"arrays; got shapes {tuple(s.shape)} and {tuple(a.shape)}."
            )
        return list(zip(s, a, strict=True))
    if (
        isinstance(states, Sequence)
        and isinstance(actions, Sequence)
        and len(states) == len(actions)
    ):
        return [
            (_int_array(s, f"states[{i}]").reshape(-1), _int_array(a, f"actions[{i}]").reshape(-1))
            for i, (s, a) in enumerate(zip(states, actions, strict=True))
        ]
    raise TypeError(
        "raw trajectories must be a pair (states, actions) of (N, T) arrays or of equal-length "
        "lists of 1-D arrays."
    )


def trajectory_state_actions(
    trajectories: Any, mdp: TabularMDP, *, state_key: str = "old_state"
) -> list[tuple[np.ndarray, np.ndarray, int | None]]:
    """Per trajectory: decision states ``(T,)``, actions ``(T,)`` and the final state (or None).

    Args:
        trajectories: a sequence of imitation ``Trajectory`` / ``TrajectoryWithRew`` objects,
            or a pair ``(states, actions)``: ``(N, T)`` or ``(N, T + 1)`` states and ``(N, T)``
            actions (integer arrays), or two equal-length lists of 1-D arrays (ragged lengths).
        mdp: the MDP whose state indices the trajectories are mapped to.
        state_key: the step-info key holding the state before each step (seals: ``"old_state"``).

    States of imitation trajectories come from ``infos[t][state_key]`` when every step has it
    (seals environments), else from the observations: integer observations are state indices
    (toy-text), vector observations are looked up in ``mdp.observation_matrix``.

    Raises:
        ValueError: no trajectories, out-of-range states or actions, observations that match no
            state or several states, inconsistent lengths.
        TypeError: input of the wrong kind.
    """
    if (
        isinstance(trajectories, tuple)
        and len(trajectories) == 2
        and not any(_is_trajectory(x) for x in trajectories)
    ):
        out: list[tuple[np.ndarray, np.ndarray, int | None]] = []
        for i, (s, a) in enumerate(_split_raw(trajectories)):
            if s.shape[0] == a.shape[0] + 1:
                out.append((s[:-1], a, int(s[-1])))
            elif s.shape[0] == a.shape[0]:
                out.append((s, a, None))
            else:
                raise ValueError(
                    f"trajectory {i}: {s.shape[0]} states for {a.shape[0]} actions; pass T or "
                    "T + 1 states (the last being the final state) for T actions."
                )
    elif isinstance(trajectories, Sequence) and not isinstance(trajectories, (str, bytes)):
        trajs = list(trajectories)
        bad = [i for i, t in enumerate(trajs) if not _is_trajectory(t)]
        if bad:
            raise TypeError(
                f"trajectories must be imitation Trajectory objects (with .obs and .acts) or a pair "
                f"(states, actions); item {bad[0]} is a {type(trajs[bad[0]]).__name__}."
            )
        out = [_from_trajectory(t, i, mdp, state_key) for i, t in enumerate(trajs)]
    else:
        raise TypeError(
            "trajectories must be a list of imitation Trajectory objects or a pair (states, "
            f"actions) of integer arrays, got {type(trajectories).__name__}."
        )
    if not out:
        raise ValueError("no trajectories given; pass at least one.")
    S, A = mdp.n_states, mdp.n_actions
    for i, (s, a, final) in enumerate(out):
        if s.size and (s.min() < 0 or s.max() >= S):
            raise ValueError(
                f"trajectory {i}: states {s[(s < 0) | (s >= S)][:5].tolist()} outside [0, {S})."
            )
        if final is not None and not 0 <= final < S:
            raise ValueError(f"trajectory {i}: final state {final} outside [0, {S}).")
        if a.size and (a.min() < 0 or a.max() >= A):
            raise ValueError(
                f"trajectory {i}: actions {a[(a < 0) | (a >= A)][:5].tolist()} outside [0, {A}) "
                f"for {mdp.name}."
            )
    return out


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
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
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
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
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


def empirical_occupancy(
    trajectories: Any, mdp: TabularMDP, *, state_key: str = "old_state", utility: Any = None
) -> th.Tensor:
    """Empirical state-action occupancy ``w[t, s, a]`` ``(H, S, A)`` of trajectories.

    ``w[t, s, a]`` is the fraction of trajectories in state ``s`` taking action ``a`` at decision
    ``t``; episodes that ended early in an absorbing state are padded with that state and a
    uniform action (see the module docstring). Each ``w[t]`` sums to 1.

    Args:
        trajectories, state_key: see :func:`trajectory_state_actions`.
        mdp: the MDP.
        utility: if given, checked to be constant over actions at the absorbing end states.

    Raises:
        ValueError: see :func:`trajectory_state_actions`; short trajectories that do not end in
            an absorbing state.
    """
    items = trajectory_state_actions(trajectories, mdp, state_key=state_key)
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
    gen = _generator(rng)
    pi = np.asarray(as_policy(policy, mdp).cpu(), dtype=np.float64)
    H = mdp.horizon
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
        from imitation_meg import unknown  # issue 3 (unknown-utility MEG)
    except ImportError as e:
        raise ValueError(
            "unknown-utility and target MEG need imitation_meg.unknown (meg_unknown / meg_target), "
            f"which this installation does not provide ({e}); use utility= for known-utility MEG."
        ) from e
    if features is not None:
        fn = getattr(unknown, "meg_unknown", None)
        if fn is None:
            raise ValueError("imitation_meg.unknown has no meg_unknown; update imitation_meg.")
        feats = None if isinstance(features, str) and features in ("all", "state") else features
        if isinstance(features, str) and feats is not None:
            raise ValueError(f"features must be an (S, F) array or 'all', got {features!r}.")
        return "unknown", lambda w: fn(None, mdp, features=feats, sa_occupancy=w)
    fn = getattr(unknown, "meg_target", None)
    if fn is None:
        raise ValueError("imitation_meg.unknown has no meg_target; update imitation_meg.")
    return "target", lambda w: fn(None, mdp, target, sa_occupancy=w)


def meg_from_trajectories(
    trajectories: Any,
    mdp: TabularMDP,
    *,
    utility: Any = None,
    features: Any = None,
    target: Any = None,
    signed: bool = False,
    n_boot: int = 200,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
    state_key: str = "old_state",
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
            ``"all"`` for every utility function of the state (needs ``imitation_meg.unknown``).
        target: target-variable MEG for this ``(S,)`` integer target (needs
            ``imitation_meg.unknown``).
        signed: the signed known-utility variant (paper footnote 4).
        n_boot: bootstrap replicates (0 disables the interval: ``low = high = nan``).
        confidence: nominal coverage of the percentile interval, in ``(0, 1)``.
        rng: generator or seed for the bootstrap (default seed 0).
        state_key: the step-info key with the pre-step state (seals: ``"old_state"``).
        progress: show a progress bar over the replicates (needs tqdm).

    Returns:
        :class:`TrajectoryMEGResult` with ``.meg``, ``.low``, ``.high``, ``.n_trajectories``.

    Raises:
        ValueError: invalid trajectories (see :func:`trajectory_state_actions`), early ends in
            non-absorbing states, conflicting modes, bad ``n_boot`` / ``confidence``.
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
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer, got {n_boot!r}.")
    if not isinstance(confidence, (int, float)) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}.")
    gen = _generator(rng)
    mode, score = _scorer(mdp, utility, features, target, signed)

    items = trajectory_state_actions(trajectories, mdp, state_key=state_key)
    r = mdp.reward_sa(utility) if mode == "known" else None
    coded = _encode(items, mdp, r)
    N = len(items)
    if (
        coded.n_padded
        and mode == "unknown"
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
        horizon=mdp.horizon,
    )
