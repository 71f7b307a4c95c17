"""Reading trajectories into state and action indices of a tabular MDP, and checking them.

Imitation ``Trajectory`` objects (states from the seals step infos, else looked up from the
observations) and raw ``(states, actions)`` arrays become, per trajectory, the decision states,
the actions and the final state. :func:`check_transitions` finds the steps the MDP gives
probability zero (a start outside ``p0``'s support, or a transition ``T[s, a, s'] = 0``), which
:func:`imitation_meg.meg_from_trajectories` refuses by default: such data come from other
dynamics, and their empirical occupancy is no occupancy of any policy in this MDP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import as_tensor, check_horizon_memory
from imitation_meg.core.mdp import TabularMDP

__all__ = ["ImpossibleSteps", "check_transitions", "trajectory_state_actions"]


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
    infos: Any = getattr(traj, "infos", None)
    if _infos_hold_states(infos, T, state_key):
        states = _int_array(
            np.array([info[state_key] for info in infos]), f"{where} infos[{state_key!r}]"
        )
        return states, acts, _final_state(traj, infos[-1], mdp, where)
    obs = np.asarray(traj.obs)
    if obs.shape[0] != T + 1:
        raise ValueError(
            f"{where}: expected {T + 1} observations for {T} actions, got {obs.shape[0]}."
        )
    states = _lookup_states(obs, mdp, where)
    return states[:T], acts, int(states[T])


def _infos_hold_states(infos: Any, T: int, state_key: str) -> bool:
    """Whether every one of the ``T > 0`` steps' infos holds the state under ``state_key``."""
    return (
        infos is not None
        and len(infos) == T
        and T > 0
        and all(isinstance(info, Mapping) and state_key in info for info in infos)
    )


def _final_state(traj: Any, last: Mapping[str, Any], mdp: TabularMDP, where: str) -> int | None:
    """The state after the last step: the last info's ``new_state``, else the last
    observation's state, else None (an observation that matches no single state)."""
    if "new_state" in last:
        return int(last["new_state"])
    try:
        return int(_lookup_states(np.asarray(traj.obs)[-1:], mdp, where)[0])
    except ValueError:
        return None


def _split_raw(trajectories: tuple[Any, Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    states, actions = trajectories
    if isinstance(states, (np.ndarray, th.Tensor)) and isinstance(actions, (np.ndarray, th.Tensor)):
        return _split_arrays(_int_array(states, "states"), _int_array(actions, "actions"))
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


def _split_arrays(s: np.ndarray, a: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The rows of ``(N, T)`` or ``(N, T + 1)`` states and ``(N, T)`` actions (1-D arrays: one
    trajectory).

    Raises:
        ValueError: other shapes.
    """
    if s.ndim == 1 and a.ndim == 1:
        return [(s, a)]
    if s.ndim != 2 or a.ndim != 2 or s.shape[0] != a.shape[0]:
        raise ValueError(
            "raw trajectories must be (states (N, T) or (N, T + 1), actions (N, T)) integer "
            f"arrays; got shapes {tuple(s.shape)} and {tuple(a.shape)}."
        )
    return list(zip(s, a, strict=True))


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
        ValueError: no trajectories, a trajectory without decisions, out-of-range states or
            actions, observations that match no state or several states, inconsistent lengths,
            or a horizon whose per-step tables cannot fit in memory.
        TypeError: input of the wrong kind.
    """
    if (
        isinstance(trajectories, tuple)
        and len(trajectories) == 2
        and not any(_is_trajectory(x) for x in trajectories)
    ):
        out = _from_arrays(trajectories)
    elif isinstance(trajectories, Sequence) and not isinstance(trajectories, (str, bytes)):
        out = _from_trajectories(list(trajectories), mdp, state_key)
    else:
        raise TypeError(
            "trajectories must be a list of imitation Trajectory objects or a pair (states, "
            f"actions) of integer arrays, got {type(trajectories).__name__}."
        )
    _check_decisions(out)
    # the estimators count per step: (H, S, A) tables, (H + 1, S) occupancies
    check_horizon_memory(mdp, what="scoring trajectories", sa_tables=2, s_tables=2)
    for i, item in enumerate(out):
        _check_indices(i, item, mdp)
    return out


def _check_decisions(out: list[tuple[np.ndarray, np.ndarray, int | None]]) -> None:
    """At least one trajectory, each with at least one decision.

    Raises:
        ValueError: none, or some without actions.
    """
    if not out:
        raise ValueError("no trajectories given; pass at least one.")
    empty = [i for i, (_, a, _) in enumerate(out) if a.size == 0]
    if empty:
        raise ValueError(
            f"trajectories {empty[:5]} have no decisions (0 actions) ({len(empty)} of "
            f"{len(out)}); every trajectory needs at least one step: leave out the empty ones."
        )


def _from_arrays(pair: tuple[Any, Any]) -> list[tuple[np.ndarray, np.ndarray, int | None]]:
    """Per trajectory of a ``(states, actions)`` pair: ``T`` decision states (``T + 1`` states
    end with the final one), ``T`` actions.

    Raises:
        ValueError: a trajectory with neither ``T`` nor ``T + 1`` states.
    """
    out: list[tuple[np.ndarray, np.ndarray, int | None]] = []
    for i, (s, a) in enumerate(_split_raw(pair)):
        if s.shape[0] == a.shape[0] + 1:
            out.append((s[:-1], a, int(s[-1])))
        elif s.shape[0] == a.shape[0]:
            out.append((s, a, None))
        else:
            raise ValueError(
                f"trajectory {i}: {s.shape[0]} states for {a.shape[0]} actions; pass T or "
                "T + 1 states (the last being the final state) for T actions."
            )
    return out


def _from_trajectories(
    trajs: list[Any], mdp: TabularMDP, state_key: str
) -> list[tuple[np.ndarray, np.ndarray, int | None]]:
    """Per imitation ``Trajectory``: its decision states, actions and final state.

    Raises:
        TypeError: an item that is not a trajectory.
    """
    bad = [i for i, t in enumerate(trajs) if not _is_trajectory(t)]
    if bad:
        raise TypeError(
            f"trajectories must be imitation Trajectory objects (with .obs and .acts) or a pair "
            f"(states, actions); item {bad[0]} is a {type(trajs[bad[0]]).__name__}."
        )
    return [_from_trajectory(t, i, mdp, state_key) for i, t in enumerate(trajs)]


def _check_indices(
    i: int, item: tuple[np.ndarray, np.ndarray, int | None], mdp: TabularMDP
) -> None:
    """Trajectory ``i``'s states and actions are indices of ``mdp``.

    Raises:
        ValueError: a state or action out of range.
    """
    s, a, final = item
    S, A = mdp.n_states, mdp.n_actions
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


@dataclasses.dataclass(frozen=True)
class ImpossibleSteps:
    """Steps of trajectories that the MDP gives probability zero.

    Attributes:
        n_starts: trajectories whose first state has ``p0 = 0``.
        n_transitions: transitions ``(s, a) -> s'`` with ``T[s, a, s'] = 0``.
        n_trajectories: trajectories holding at least one of them.
        first: a description of the first one, or ``""``.
    """

    n_starts: int
    n_transitions: int
    n_trajectories: int
    first: str

    @property
    def total(self) -> int:
        """``n_starts + n_transitions``."""
        return self.n_starts + self.n_transitions


def check_transitions(
    items: list[tuple[np.ndarray, np.ndarray, int | None]], mdp: TabularMDP
) -> ImpossibleSteps:
    """Count the steps of trajectories that are impossible in ``mdp`` (within its horizon).

    Args:
        items: per trajectory ``(states (T,), actions (T,), final state or None)``, as from
            :func:`trajectory_state_actions`.
        mdp: the MDP.

    Returns:
        :class:`ImpossibleSteps`.
    """
    H = mdp.steps
    ns = mdp.next_state.cpu().numpy()
    pos = mdp.prob.cpu().numpy() > 0
    p0 = mdp.initial_state_dist.cpu().numpy()
    n_starts = n_trans = n_traj = 0
    first = ""
    for i, (s, a, final) in enumerate(items):
        T = min(a.shape[0], H)
        bad_start = s.size > 0 and p0[s[0]] <= 0
        nxt = s[1:T] if final is None or a.shape[0] > T else np.append(s[1:T], final)
        k = nxt.shape[0]
        ok = ((ns[s[:k], a[:k]] == nxt[:, None]) & pos[s[:k], a[:k]]).any(-1)
        bad = np.flatnonzero(~ok)
        n_starts += int(bad_start)
        n_trans += int(bad.size)
        n_traj += int(bad_start or bad.size > 0)
        if not first and bad_start:
            first = f"trajectory {i} starts in state {int(s[0])}, where p0 is 0"
        elif not first and bad.size:
            t = int(bad[0])
            first = (
                f"trajectory {i} moves from state {int(s[t])} with action {int(a[t])} to state "
                f"{int(nxt[t])} at step {t}, which has probability 0"
            )
    return ImpossibleSteps(n_starts, n_trans, n_traj, first)
