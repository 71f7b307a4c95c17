"""``imitation-meg score`` in tabular environments: exact MEG of one policy or of many.

The MDP comes from ``--cliff-world``, ``--env`` (gymnasium / seals ids, MiniGrid layouts) or the
environment RL Zoo run folders record; one policy is scored in every requested mode (with a
rollout estimate on request), several into rows (:func:`imitation_meg.scoring.score_policies`).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import time
from collections.abc import Sequence
from typing import Any

from imitation_meg.cli.common import command_config, is_minigrid, minigrid_mdp, write_rows
from imitation_meg.results import format_table


def score_mdp(args: argparse.Namespace, sources: Sequence[str]) -> Any:
    """The MDP to score in; ``--horizon inf --discount G`` makes it the discounted
    infinite-horizon setting, ``--discount G`` alone discounts a finite horizon's utility."""
    infinite = args.horizon == "inf"
    if infinite and args.discount is None:
        raise ValueError(
            "--horizon inf needs --discount below 1 (e.g. --discount 0.9): the discounted "
            "infinite-horizon setting."
        )
    finite = argparse.Namespace(**{**vars(args), "horizon": None if infinite else args.horizon})
    mdp = _score_base_mdp(finite, sources)
    if infinite or args.discount is not None:
        mdp = mdp.with_horizon(None if infinite else mdp.horizon, args.discount)
    return mdp


def _score_base_mdp(args: argparse.Namespace, sources: Sequence[str]) -> Any:
    import imitation_meg as im

    if args.cliff_world:
        return _cliff_world(args)
    given = [
        f"--{n.replace('_', '-')}"
        for n in ("width", "height", "goal_region")
        if getattr(args, n) is not None
    ]
    if given:
        raise ValueError(f"{', '.join(given)} only apply to --cliff-world, not to --env.")
    if args.env is None:
        from imitation_meg.scoring import mdp_of_sources

        return mdp_of_sources(sources, horizon=args.horizon)
    if is_minigrid(args.env):
        return minigrid_mdp(args, sources)
    return im.TabularMDP.from_env(args.env, horizon=args.horizon)


def _cliff_world(args: argparse.Namespace) -> Any:
    """``--cliff-world`` with its size, horizon and goal region (the builder's defaults)."""
    import imitation_meg as im
    from imitation_meg.envs.cliff import DEFAULT_HORIZON

    return im.envs.cliff_world(
        width=args.width if args.width is not None else 10,
        height=args.height if args.height is not None else 4,
        horizon=args.horizon if args.horizon is not None else DEFAULT_HORIZON,
        goal_region=args.goal_region if args.goal_region is not None else 1,
        goal_layout=args.goal_layout,
    )


def _result_dict(res: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(res) and not isinstance(res, type):
        return dataclasses.asdict(res)
    return {k: v for k, v in vars(res).items() if not k.startswith("_")}


def score_options(args: argparse.Namespace) -> Any:
    from imitation_meg.scoring import ScoreOptions

    masks = None
    if args.action_masks is not None:
        import numpy as np

        path = pathlib.Path(args.action_masks)
        if not path.is_file():
            raise FileNotFoundError(f"--action-masks: no file at {args.action_masks!r}.")
        try:
            masks = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise ValueError(
                f"--action-masks {args.action_masks!r} is not a .npy array of (S, A) booleans "
                f"(np.save): {e}"
            ) from e
    vec_normalize: Any = args.vec_normalize
    if vec_normalize == "none":
        vec_normalize = False
    same_name = {
        k: getattr(args, k) for k in ("mode", "target", "signed", "epsilon", "algo", "env")
    }
    return ScoreOptions(**same_name, vec_normalize=vec_normalize, action_masks=masks)


def score_many(args: argparse.Namespace, sources: list[str], mdp: Any, opts: Any) -> int:
    from imitation_meg.scoring import score_policies

    t0 = time.perf_counter()
    rows = score_policies(sources, mdp, opts, jobs=args.jobs, progress=True)
    seconds = time.perf_counter() - t0
    print(
        f"MEG of {len(rows)} policies in {mdp.name} (S={mdp.n_states}, |A|={mdp.n_actions}, "
        f"{horizon_text(mdp)}; mode {args.mode}) in {seconds:.1f} s\n"
    )
    columns = ["policy", "timesteps", "mode", "meg", "normalized", "expected_return", "converged"]
    if args.mode != "known":
        columns.insert(5, "known_meg")
    shown = [{c: ("" if r.get(c) is None else r[c]) for c in columns} for r in rows]
    print(format_table(shown, columns))
    write_rows(args, rows, {"mdp": mdp_dict(mdp)})
    return 0


def mdp_dict(mdp: Any) -> dict[str, Any]:
    from imitation_meg.core.known import meg_upper_bound

    return {
        "name": mdp.name,
        "n_states": mdp.n_states,
        "n_actions": mdp.n_actions,
        "horizon": mdp.horizon,
        "discount": mdp.discount,
        "upper_bound": meg_upper_bound(mdp),
    }


def horizon_text(mdp: Any) -> str:
    """``H=30`` or, in the discounted infinite-horizon setting, ``H=inf, gamma=0.9``."""
    return f"H={mdp.horizon}" if mdp.horizon is not None else f"H=inf, gamma={mdp.discount}"


def score_one(args: argparse.Namespace, source: str, mdp: Any, opts: Any) -> int:
    from imitation_meg.scoring import label_of, policy_of

    pi, about = policy_of(source, mdp, opts)
    label = label_of(source, about.get("algo"), args.epsilon)
    res, known, target = _exact_scores(args, pi, mdp)
    mode = args.mode if target is None else f"target ({target})"
    rows = [_row(label, mode, res.meg, res.normalized, res.upper_bound, res.converged)]
    if args.mode != "known":
        rows.append(
            _row(label, "known", known.meg, known.normalized, known.upper_bound, known.converged)
        )
    estimate = None
    if args.rollouts is not None:
        estimate = _rollout_estimate(args, pi, mdp, target)
        rows.append(_rollout_row(f"{label}, {args.rollouts} rollouts", mode, estimate, res))
    _print_one(args, label, mdp, rows, estimate)
    if args.json:
        _write_one(args, (label, about, target), mdp, (res, known, estimate))
    return 0


def _exact_scores(args: argparse.Namespace, pi: Any, mdp: Any) -> tuple[Any, Any, str | None]:
    """``(result of --mode, known-utility result, the target or None)``."""
    import imitation_meg as im

    known = im.meg(pi, mdp, signed=args.signed)
    if args.mode == "known":
        return known, known, None
    if args.mode == "unknown":
        return im.meg_unknown(pi, mdp), known, None
    target = args.target or "goal"
    return im.meg_target(pi, mdp, _target_of(mdp, target)), known, target


def _row(
    label: str, mode: str, meg: float, normalized: float, bound: float, converged: bool
) -> dict[str, Any]:
    """One row of the printed table."""
    return {
        "policy": label,
        "mode": mode,
        "MEG": meg,
        "normalized": normalized,
        "upper bound": bound,
        "converged": converged,
    }


def _rollout_estimate(args: argparse.Namespace, pi: Any, mdp: Any, target: str | None) -> Any:
    """MEG from ``--rollouts`` sampled trajectories, with its bootstrap interval."""
    from imitation_meg.core.trajectories import meg_from_trajectories, sample_trajectories

    data = sample_trajectories(mdp, pi, args.rollouts, rng=args.seed)
    kwargs: dict[str, Any] = {}
    if args.mode == "unknown":
        kwargs["features"] = "all"
    elif args.mode == "target":
        kwargs["target"] = target
    return meg_from_trajectories(
        data,
        mdp,
        signed=args.signed,
        n_boot=args.n_boot,
        rng=args.seed + 1,
        progress=True,
        **kwargs,
    )


def _rollout_row(label: str, mode: str, estimate: Any, res: Any) -> dict[str, Any]:
    """The rollout estimate's row, with its interval."""
    bound = res.upper_bound
    row = _row(
        label,
        mode,
        estimate.meg,
        estimate.meg / bound if bound else 0.0,
        bound,
        estimate.result.converged,
    )
    row[f"{estimate.confidence:.0%} interval"] = f"[{estimate.low:.4f}, {estimate.high:.4f}]"
    return row


def _print_one(
    args: argparse.Namespace, label: str, mdp: Any, rows: list[dict[str, Any]], estimate: Any
) -> None:
    """The heading, the table and the note on a rollout estimate."""
    print(
        f"MEG of {label} in {mdp.name} (S={mdp.n_states}, |A|={mdp.n_actions}, {horizon_text(mdp)}; "
        f"{'known utility: the environment reward' if args.mode == 'known' else args.mode + ' utility'})\n"
    )
    columns = ["policy", "mode", "MEG", "normalized", "upper bound", "converged"]
    if estimate is not None:
        columns.append(f"{estimate.confidence:.0%} interval")
    print(format_table(rows, columns))
    if estimate is not None:
        print(
            f"\n(The rollout estimate uses {estimate.n_trajectories} sampled trajectories and "
            f"{estimate.n_boot} bootstrap replicates; it is biased upwards at small sample sizes.)"
        )


def _write_one(
    args: argparse.Namespace,
    who: tuple[str, dict[str, Any], str | None],
    mdp: Any,
    results: tuple[Any, Any, Any],
) -> None:
    """The results, the MDP, the settings and the library versions as ``--json``."""
    from imitation_meg.results import library_versions, write_json

    label, about, target = who
    res, known, estimate = results
    config = command_config(args)
    payload: dict[str, Any] = {
        "meg": res.meg,
        "mode": args.mode,
        "target": target,
        "policy": label,
        "algo": about.get("algo"),
        "timesteps": about.get("timesteps"),
        "vec_normalize": about.get("vec_normalize"),
        "mdp": {**mdp_dict(mdp), "upper_bound": res.upper_bound},
        "config": config,
        "library_versions": library_versions(),
        "result": _result_dict(res),
        "known": _result_dict(known),
    }
    if estimate is not None:
        payload["trajectory_estimate"] = estimate.to_dict()
    path = write_json(args.json, payload)
    print(f"\nWrote {path}.")


def _target_of(mdp: Any, kind: str) -> Any:
    """``--target`` for the MDP: MiniGrid layouts read the agent's cell from their metadata."""
    if "agent_pos" in mdp.metadata:
        from imitation_meg.envs.minigrid import minigrid_target

        return minigrid_target(mdp, kind)
    return kind
