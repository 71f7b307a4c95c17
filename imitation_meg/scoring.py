"""Scoring many saved policies at once: one row per policy, for CSV / JSON lines and plots.

:func:`score_policies` scores saved SB3 models (``.zip``, algorithm read from each zip), RL Zoo
run folders and the built-in reference policies in one tabular MDP, in one process (or
``jobs`` worker processes), and returns one flat row per policy with the training steps read
from the zip (``timesteps``), so checkpoints of one run plot as MEG against training steps.
:func:`expand_sources` turns shell-style globs into sorted lists of files.

Imports the adapters (and through them SB3) only when a saved model is scored.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import glob
import multiprocessing
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from imitation_meg.core.mdp import TabularMDP

__all__ = [
    "BUILTIN_POLICIES",
    "MODES",
    "ScoreOptions",
    "expand_sources",
    "label_of",
    "mdp_of_sources",
    "policy_of",
    "score_policies",
    "score_policy",
]

#: Reference policies every tabular MDP with a utility has.
BUILTIN_POLICIES = ("uniform", "optimal", "epsilon-greedy")
#: What ``mode`` may be.
MODES = ("known", "unknown", "target")


@dataclasses.dataclass(frozen=True)
class ScoreOptions:
    """How to score each policy.

    Attributes:
        mode: ``"known"`` (the MDP's utility), ``"unknown"`` (every utility of the state) or
            ``"target"`` (every utility of ``target``).
        target: the target variable for ``mode="target"`` (default ``"goal"``).
        signed: signed known-utility MEG.
        epsilon: epsilon-greedy parameter (built-in ``epsilon-greedy``, DQN, QR-DQN, ARS).
        algo: the algorithm of saved models (default read from each zip).
        vec_normalize: statistics for saved models: a path, ``"auto"``, False, or None (see
            :func:`imitation_meg.adapters.policy_table`).
        action_masks: MaskablePPO masks ``(S, A)``.
        env: the environment (id) the MDP came from, for masks.
        noise_std: Box actions: the smoothing of deterministic agents (TD3, DDPG).
    """

    mode: str = "known"
    target: str | None = None
    signed: bool = False
    epsilon: float | None = None
    algo: str | None = None
    vec_normalize: Any = None
    action_masks: Any = None
    env: Any = None
    noise_std: float | None = None


def _steps_key(path: str) -> tuple[Any, ...]:
    """Natural order: ``rl_model_1000_steps`` before ``rl_model_10000_steps``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path))


def expand_sources(patterns: Sequence[str]) -> list[str]:
    """Built-in policy names, files and folders as given; globs expanded in natural order.

    Raises:
        FileNotFoundError: a glob that matches nothing.
    """
    out: list[str] = []
    for pattern in patterns:
        if pattern in BUILTIN_POLICIES or not glob.has_magic(pattern):
            out.append(pattern)
            continue
        matches = sorted(glob.glob(pattern), key=_steps_key)
        if not matches:
            raise FileNotFoundError(f"the pattern {pattern!r} matches no file.")
        out.extend(matches)
    return out


def mdp_of_sources(sources: Sequence[str], *, horizon: int | None = None) -> TabularMDP:
    """The MDP of RL Zoo run folders given without an environment (all must agree).

    Raises:
        ValueError: a source that is not an RL Zoo run folder, or folders of different
            environments.
    """
    from imitation_meg.adapters.zoo import is_zoo_run, not_a_run, read_zoo_run

    ids: dict[tuple[str | None, str], Any] = {}
    for source in sources:
        if os.path.isdir(source) and not is_zoo_run(source):
            raise ValueError(
                f"{not_a_run(source)}; pass such a folder, or a model .zip with --env ENV_ID or "
                "--cliff-world."
            )
        if not is_zoo_run(source):
            raise ValueError(
                f"{source!r} needs an environment: pass --env ENV_ID or --cliff-world (only "
                "RL Zoo run folders record theirs)."
            )
        run = read_zoo_run(source)
        ids[(run.env_id, repr(sorted(run.env_kwargs.items())))] = run
    if len(ids) > 1:
        raise ValueError(
            f"the RL Zoo runs were trained on different environments {sorted(k[0] or '?' for k in ids)}; "
            "score them in separate calls."
        )
    (run,) = ids.values()
    return TabularMDP.from_env(run.make_env(), horizon=horizon)


def label_of(source: str, algo: str | None, epsilon: float | None) -> str:
    """A short name for a policy: ``"PPO rl_model_1000_steps.zip"``, ``"epsilon-greedy 0.1"``."""
    if source in BUILTIN_POLICIES:
        return f"epsilon-greedy {epsilon:g}" if source == "epsilon-greedy" else source
    label = f"{(algo or '?').upper()} {pathlib.Path(source).name}"
    return label + (f" (epsilon {epsilon:g})" if epsilon is not None else "")


def policy_of(source: str, mdp: TabularMDP, opts: ScoreOptions) -> tuple[Any, dict[str, Any]]:
    """The policy table of ``source`` and what is known of it: ``algo``, ``timesteps`` (from
    the zip), ``model`` (the file), ``vec_normalize`` (the statistics used).

    Raises:
        ValueError / TypeError / FileNotFoundError: bad sources or options (from the adapters).
    """
    from imitation_meg.core import policies

    if source in BUILTIN_POLICIES:
        if opts.algo is not None:
            raise ValueError(
                f"--algo applies to a saved model, not to the built-in policy {source!r}."
            )
        if opts.vec_normalize not in (None, False):
            raise ValueError(f"--vec-normalize applies to a saved model, not to {source!r}.")
        if source == "epsilon-greedy":
            if opts.epsilon is None:
                raise ValueError("--policy epsilon-greedy needs --epsilon (in [0, 1]).")
            return policies.epsilon_greedy(mdp, opts.epsilon), {}
        if opts.epsilon is not None:
            raise ValueError(
                f"--epsilon applies to epsilon-greedy and argmax models (DQN, QR-DQN, ARS), not "
                f"to {source!r}."
            )
        return (policies.uniform(mdp) if source == "uniform" else policies.optimal(mdp)), {}
    from imitation_meg.adapters import resolve_policy
    from imitation_meg.adapters.dispatch import table_of
    from imitation_meg.adapters.sb3 import read_model_info

    p = pathlib.Path(source)
    if not p.exists():
        if p.suffix == ".zip" or os.sep in source:
            raise FileNotFoundError(
                f"no SB3 model file at {source!r}; pass the .zip written by model.save()."
            )
        raise ValueError(
            f"--policy {source!r} is neither a saved model (.zip or RL Zoo run folder) nor one "
            f"of {list(BUILTIN_POLICIES)}."
        )
    resolved = resolve_policy(
        source, mdp, algo=opts.algo, env=opts.env, vec_normalize=opts.vec_normalize
    )
    pi = table_of(resolved, mdp, env=opts.env, epsilon=opts.epsilon, action_masks=opts.action_masks)
    assert resolved.model_path is not None  # a file source (checked above)
    info = read_model_info(resolved.model_path)
    algo = opts.algo or info.algo or resolved.algo
    stats = resolved.statistics_path
    return pi, {
        "algo": algo.lower() if isinstance(algo, str) else algo,
        "timesteps": info.num_timesteps,
        "model": str(resolved.model_path),
        "vec_normalize": None if stats is None else str(stats),
    }


def score_policy(source: str, mdp: TabularMDP, opts: ScoreOptions) -> dict[str, Any]:
    """One flat row for ``source``: label, algorithm, training steps, MEG of ``opts.mode``,
    normalised MEG, the known-utility MEG, its beta, the exact expected return, convergence.

    Raises:
        ValueError / TypeError / FileNotFoundError: from the adapters and MEG functions.
    """
    import imitation_meg as im

    if opts.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {opts.mode!r}.")
    if not isinstance(mdp, TabularMDP):  # a ContinuousMDP: Box actions, exact MEG
        from imitation_meg.continuous.score import score_row

        return score_row(source, mdp, opts)
    pi, about = policy_of(source, mdp, opts)
    known = im.meg(pi, mdp, signed=opts.signed)
    res, target = _meg_of_mode(pi, mdp, known, opts.mode, opts.target)
    return {
        "policy": label_of(source, about.get("algo"), opts.epsilon),
        "source": source,
        "algo": about.get("algo"),
        "timesteps": about.get("timesteps"),
        "mode": opts.mode if target is None else f"target ({target})",
        "meg": res.meg,
        "normalized": res.normalized,
        "upper_bound": res.upper_bound,
        "known_meg": known.meg,
        "beta": known.beta,
        "expected_return": known.expected_utility,
        "converged": bool(res.converged and known.converged),
        "epsilon": opts.epsilon,
        "vec_normalize": about.get("vec_normalize"),
    }


def _score_chunk(sources: list[str], mdp_bytes: bytes, opts: ScoreOptions) -> list[dict[str, Any]]:
    import pickle

    import torch as th

    th.set_num_threads(1)
    mdp = pickle.loads(mdp_bytes)  # our own MDP, pickled by the parent
    return [_named(s, mdp, opts) for s in sources]


def _named(source: str, mdp: TabularMDP, opts: ScoreOptions) -> dict[str, Any]:
    """:func:`score_policy`, with the source named in its errors (one of many failed)."""
    try:
        return score_policy(source, mdp, opts)
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise type(e)(f"{source}: {e}") from e


def score_policies(
    sources: Sequence[str],
    mdp: TabularMDP,
    opts: ScoreOptions | None = None,
    *,
    jobs: int = 1,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Score every source in ``mdp``: one row per source, in the order given.

    Args:
        sources: built-in policy names, ``.zip`` files and RL Zoo run folders.
        mdp: the MDP (with a utility); a :class:`~imitation_meg.continuous.ContinuousMDP`
            scores agents acting in its action box exactly (known or unknown mode;
            ``opts.noise_std`` for TD3 / DDPG).
        opts: :class:`ScoreOptions` (default known-utility MEG).
        jobs: worker processes (forked from a ``forkserver`` that imports torch and SB3 once;
            ``spawn`` where there is none), each scoring a contiguous share of the sources.
            1 scores in this process. Worth it when each score is expensive (unknown mode,
            large MDPs); a known-utility score of a small MDP takes a fraction of a second.
        progress: a progress bar over the sources (``jobs=1``).

    Raises:
        ValueError: ``jobs < 1`` or an MDP without a utility; errors of the adapters.
    """
    from imitation_meg.progress import progress as bar

    opts = opts or ScoreOptions()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}.")
    if mdp.utility is None:
        raise ValueError(f"{mdp.name} has no reward to score against.")
    sources = list(sources)
    jobs = min(jobs, len(sources)) or 1
    if jobs == 1:
        return [_named(s, mdp, opts) for s in bar(sources, progress, desc="scoring")]
    import pickle

    chunks = [list(c) for c in np.array_split(np.array(sources, dtype=object), jobs) if len(c)]
    # Plain pickle bytes: torch's multiprocessing reducers would share the MDP's sparse
    # operator caches through shared memory, which the workers cannot rebuild.
    mdp_bytes = pickle.dumps(mdp)
    ctx: Any
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        # The server imports torch and SB3 once; each worker is forked from it.
        ctx.set_forkserver_preload(["imitation_meg.scoring", "torch", "stable_baselines3"])
    else:
        ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(chunks), mp_context=ctx) as pool:
        futures = [pool.submit(_score_chunk, chunk, mdp_bytes, opts) for chunk in chunks]
        return [row for f in futures for row in f.result()]


def _meg_of_mode(
    pi: Any, mdp: TabularMDP, known: Any, mode: str, target: str | None
) -> tuple[Any, str | None]:
    """The result ``mode`` asks for (``known`` is the known-utility one) and the target it used."""
    import imitation_meg as im

    if mode == "known":
        return known, None
    if mode == "unknown":
        return im.meg_unknown(pi, mdp), None
    return im.meg_target(pi, mdp, target or "goal"), target or "goal"
