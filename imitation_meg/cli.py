"""The ``imitation-meg`` command line: ``demo``, ``score``, ``plot``, ``reproduce`` and ``publish``.

This is the only module that parses command lines; the work is done by library modules
(:mod:`imitation_meg.scoring`, :mod:`imitation_meg.plotting`, the adapters). Errors in user input
end the program with exit code 2 and a one-line message on stderr, Ctrl-C with exit code 130 and
one line (``reproduce``: how many units are saved); the package's warnings and notes are printed
as one line each on stderr. (Over 500 lines: the argument parsers and table printing of all five
subcommands live here by design, as the only place that parses command lines.)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import math
import os
import pathlib
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from imitation_meg.results import format_table

__all__ = ["build_parser", "format_table", "main"]


def _demo(args: argparse.Namespace) -> int:
    import imitation_meg as im
    from imitation_meg import policies

    if args.ppo_steps < 1:
        raise ValueError(f"--ppo-steps must be a positive number of steps, got {args.ppo_steps}.")
    if args.horizon < 1:
        raise ValueError(f"--horizon must be a positive number of decisions, got {args.horizon}.")

    t0 = time.perf_counter()
    mdp = im.envs.cliff_world(width=10, height=4, horizon=args.horizon)
    print(
        f"Known-utility MEG on the paper's 10x4 CliffWorld (horizon H={mdp.steps}, "
        f"|A|={mdp.n_actions}, upper bound H log|A| = {mdp.steps * math.log(mdp.n_actions):.4f} nats)\n"
    )
    candidates = [
        ("uniform", policies.uniform(mdp)),
        ("epsilon-greedy 0.5", policies.epsilon_greedy(mdp, 0.5)),
        ("epsilon-greedy 0.1", policies.epsilon_greedy(mdp, 0.1)),
        ("optimal", policies.optimal(mdp)),
    ]
    rows = [_known_row(name, im.meg(pi, mdp)) for name, pi in candidates]
    print(format_table(rows))
    if not args.no_ppo:
        _demo_ppo(mdp, args, rows)
    print(f"\nDone in {time.perf_counter() - t0:.1f} s.")
    return 0


def _demo_ppo(mdp: Any, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Train a small PPO on seals' CliffWorld for a few seconds and score it beside the others."""
    if importlib.util.find_spec("stable_baselines3") is None:
        print("\n(stable-baselines3 is not installed: skipping the PPO part of the demo.)")
        return
    import torch as th

    import imitation_meg as im
    from imitation_meg.adapters import policy_table
    from imitation_meg.training import train_cliff_ppo

    # A 64-unit MLP trains fastest on one thread; more threads only contend on small machines.
    th.set_num_threads(1)
    print(
        f"\nTraining PPO on seals' CliffWorldEnv(width=10, height=4, horizon={mdp.steps}) for "
        f"{args.ppo_steps} steps (8 envs, seed {args.seed}) ..."
    )
    t0 = time.perf_counter()
    model = train_cliff_ppo(
        width=10,
        height=4,
        horizon=mdp.steps,
        total_timesteps=args.ppo_steps,
        seed=args.seed,
        progress=True,
    )
    pi = policy_table(model, mdp)
    res = im.meg(pi, mdp)
    print(f"trained in {time.perf_counter() - t0:.1f} s; its policy table scored exactly:\n")
    rows.append(_known_row(f"PPO ({args.ppo_steps} steps)", res))
    print(format_table(rows))


def _known_row(name: str, res: Any) -> dict[str, Any]:
    return {
        "policy": name,
        "MEG": res.meg,
        "normalized": res.normalized,
        "beta*": res.beta,
        "E[U] policy": res.expected_utility,
        "E[U] uniform": res.uniform_expected_utility,
        "converged": res.converged,
    }


# ---------------------------------------------------------------------------------- score
MODES = ("known", "unknown", "target")
TARGETS = ("row", "column", "cell", "goal")


def _horizon_arg(text: str) -> int | str:
    """``--horizon``: a positive number of decisions, or ``inf`` (with ``--discount``)."""
    if text.strip().lower() in ("inf", "infinite", "none"):
        return "inf"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of decisions or 'inf', got {text!r}"
        ) from None


def _seed(text: str) -> int:
    """``--seed``: a non-negative integer (numpy, torch and gymnasium seeds)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def _score_mdp(args: argparse.Namespace, sources: Sequence[str]) -> Any:
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
        from imitation_meg.envs.cliff import DEFAULT_HORIZON

        return im.envs.cliff_world(
            width=args.width if args.width is not None else 10,
            height=args.height if args.height is not None else 4,
            horizon=args.horizon if args.horizon is not None else DEFAULT_HORIZON,
            goal_region=args.goal_region if args.goal_region is not None else 1,
            goal_layout=args.goal_layout,
        )
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
    if _is_minigrid(args.env):
        return _minigrid_mdp(args, sources)
    return im.TabularMDP.from_env(args.env, horizon=args.horizon)


def _is_minigrid(env_id: str) -> bool:
    return env_id.startswith("MiniGrid-")


def _minigrid_mdp(args: argparse.Namespace, sources: Sequence[str]) -> Any:
    """The layout of ``--env`` at reset seed ``--seed``, observed as the first saved model
    observes it (the observation stack read from its zip)."""
    from imitation_meg.envs.minigrid import minigrid_mdp
    from imitation_meg.scoring import BUILTIN_POLICIES

    space = None
    saved = [s for s in sources if s not in BUILTIN_POLICIES]
    if saved and pathlib.Path(saved[0]).is_file():
        from imitation_meg.adapters.sb3 import read_model_info

        space = read_model_info(saved[0]).observation_space
    return minigrid_mdp(
        args.env,
        seed=args.seed,
        horizon=args.horizon,
        observation=None if space is None else "auto",
        observation_space=space,
    )


def _result_dict(res: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(res) and not isinstance(res, type):
        return dataclasses.asdict(res)
    return {k: v for k, v in vars(res).items() if not k.startswith("_")}


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output path is checked before any work is done; missing folders are announced."""
    from imitation_meg.results import check_output_path

    seen: dict[str, str] = {}
    for option, suffixes in (("json", (".json",)), ("csv", (".csv",)), ("jsonl", (".jsonl",))):
        value = getattr(args, option, None)
        if value is None:
            continue
        flag = f"--{option}"
        path, new_parent = check_output_path(value, what=flag)
        if path.suffix.lower() not in suffixes:
            raise ValueError(f"{flag} {value!r} should end in {' or '.join(suffixes)}.")
        key = str(path.resolve())
        if key in seen:
            raise ValueError(f"{seen[key]} and {flag} name the same file {value!r}.")
        seen[key] = flag
        if new_parent:  # a note, on stderr: stdout carries the results (and may be redirected)
            _note(f"the folder {str(path.parent)!r} for {flag} does not exist: it will be created")


def _score_options(args: argparse.Namespace) -> Any:
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
    return ScoreOptions(
        mode=args.mode,
        target=args.target,
        signed=args.signed,
        epsilon=args.epsilon,
        algo=args.algo,
        vec_normalize=vec_normalize,
        action_masks=masks,
        env=args.env,
    )


def _check_single_policy_outputs(args: argparse.Namespace) -> None:
    """The approximate estimators score one policy: ``--json`` only, checked before any work."""
    for flag in ("csv", "jsonl"):
        if getattr(args, flag) is not None:
            raise ValueError(
                f"--{flag} is not available with the approximate estimator (it scores one "
                "policy); write its result with --json FILE."
            )
    _check_outputs(args)


@contextlib.contextmanager
def _one_off_passes() -> Iterator[None]:
    """A command that scores once: small MDPs on the torch passes (loading numba's compiled
    pass costs more than it saves), here and in the workers it starts; the caller's setting
    is back afterwards (the command also runs inside other programs: ``main(argv)``)."""
    from imitation_meg import _fused

    key = "IMITATION_MEG_COMPILED_SMALL"
    before, compiled = os.environ.get(key), _fused.COMPILED_SMALL
    os.environ[key], _fused.COMPILED_SMALL = "0", False
    try:
        yield
    finally:
        _fused.COMPILED_SMALL = compiled
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def _score(args: argparse.Namespace) -> int:
    with _one_off_passes():
        return _score_once(args)


def _refuse_discount_beyond_tables(args: argparse.Namespace) -> None:
    """``--discount`` where the score is approximate: refused, not ignored."""
    if args.discount is None or args.env is None or _is_minigrid(args.env):
        return
    if args.approx or args.curve is not None or not _env_is_tabular(args.env):
        raise ValueError(
            "--discount applies to tabular MDPs; the approximate estimators (environments that "
            "are not tabular, --approx, --curve) score the undiscounted finite-horizon model "
            "family, so a discount would be ignored. Drop --discount (or shorten --horizon)."
        )


def _zoo_environment(args: argparse.Namespace) -> None:
    """Without ``--env``: the environment RL Zoo run folders record (their id and keyword
    arguments, the same for all), where it is not tabular (tabular ones are read by the exact
    path, as before)."""
    if args.env is not None or args.cliff_world:
        return
    from imitation_meg.adapters.zoo import is_zoo_run, read_zoo_run

    runs = [read_zoo_run(p) for p in args.policy if is_zoo_run(p)]
    if not runs or len(runs) != len(args.policy):
        return
    first = runs[0]
    env_id = first.env_id
    if env_id is None or any((r.env_id, r.env_kwargs) != (env_id, first.env_kwargs) for r in runs):
        return  # refused later, by the exact path's check
    if _is_minigrid(env_id) or _env_is_tabular(env_id):
        return
    args.env, args.env_kwargs = env_id, first.env_kwargs


def _score_once(args: argparse.Namespace) -> int:
    _zoo_environment(args)
    _refuse_discount_beyond_tables(args)
    if (
        args.approx
        or args.curve is not None
        or (args.env is not None and not _is_minigrid(args.env) and not _env_is_tabular(args.env))
    ):
        from imitation_meg.approx.score import score_approx

        if args.curve is None and len(args.policy) == 1 and "*" not in args.policy[0]:
            _check_single_policy_outputs(args)
        else:
            _check_outputs(args)
        return score_approx(args)
    if args.noise_std is not None:
        raise ValueError("--noise-std applies to deterministic agents in Box action spaces.")
    if getattr(args, "approx_options", None):
        raise ValueError(
            "--approx-option applies to the approximate estimators (--approx, environments "
            "that are not tabular, Box actions); this score is exact."
        )
    if args.mode != "target" and args.target is not None:
        raise ValueError("--target applies to --mode target only.")
    if args.signed and args.mode != "known":
        raise ValueError("--signed applies to --mode known only (it needs the utility's sign).")
    if args.rollouts is not None and args.rollouts < 1:
        raise ValueError(
            f"--rollouts must be a positive number of trajectories, got {args.rollouts}."
        )
    if args.n_boot < 0:
        raise ValueError(f"--n-boot must be >= 0, got {args.n_boot}.")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be a positive number of processes, got {args.jobs}.")
    _check_outputs(args)
    from imitation_meg.scoring import expand_sources

    sources = expand_sources(args.policy)
    if len(sources) > 1 and args.rollouts is not None:
        raise ValueError("--rollouts applies to one policy; score several without it.")
    mdp = _score_mdp(args, sources)
    if mdp.utility is None:
        raise ValueError(f"{mdp.name} has no reward to score against.")
    opts = _score_options(args)
    if len(sources) == 1 and args.csv is None and args.jsonl is None:
        return _score_one(args, sources[0], mdp, opts)
    return _score_many(args, sources, mdp, opts)


def _score_many(args: argparse.Namespace, sources: list[str], mdp: Any, opts: Any) -> int:
    from imitation_meg.results import library_versions, write_csv, write_json, write_jsonl
    from imitation_meg.scoring import score_policies

    t0 = time.perf_counter()
    rows = score_policies(sources, mdp, opts, jobs=args.jobs, progress=True)
    seconds = time.perf_counter() - t0
    print(
        f"MEG of {len(rows)} policies in {mdp.name} (S={mdp.n_states}, |A|={mdp.n_actions}, "
        f"{_horizon_text(mdp)}; mode {args.mode}) in {seconds:.1f} s\n"
    )
    columns = ["policy", "timesteps", "mode", "meg", "normalized", "expected_return", "converged"]
    if args.mode != "known":
        columns.insert(5, "known_meg")
    shown = [{c: ("" if r.get(c) is None else r[c]) for c in columns} for r in rows]
    print(format_table(shown, columns))
    if args.csv:
        print(f"\nWrote {write_csv(args.csv, rows)}.")
    if args.jsonl:
        print(f"\nWrote {write_jsonl(args.jsonl, rows)}.")
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "func"}
        payload = {
            "mdp": _mdp_dict(mdp),
            "config": config,
            "library_versions": library_versions(),
            "rows": rows,
        }
        print(f"\nWrote {write_json(args.json, payload)}.")
    return 0


def _mdp_dict(mdp: Any) -> dict[str, Any]:
    from imitation_meg.known import meg_upper_bound

    return {
        "name": mdp.name,
        "n_states": mdp.n_states,
        "n_actions": mdp.n_actions,
        "horizon": mdp.horizon,
        "discount": mdp.discount,
        "upper_bound": meg_upper_bound(mdp),
    }


def _horizon_text(mdp: Any) -> str:
    """``H=30`` or, in the discounted infinite-horizon setting, ``H=inf, gamma=0.9``."""
    return f"H={mdp.horizon}" if mdp.horizon is not None else f"H=inf, gamma={mdp.discount}"


def _score_one(args: argparse.Namespace, source: str, mdp: Any, opts: Any) -> int:
    import imitation_meg as im
    from imitation_meg.results import library_versions, write_json
    from imitation_meg.scoring import label_of, policy_of

    pi, about = policy_of(source, mdp, opts)
    label = label_of(source, about.get("algo"), args.epsilon)
    known = im.meg(pi, mdp, signed=args.signed)
    target = None
    if args.mode == "known":
        res = known
    elif args.mode == "unknown":
        res = im.meg_unknown(pi, mdp)
    else:
        target = args.target or "goal"
        res = im.meg_target(pi, mdp, _target_of(mdp, target))

    rows = [
        {
            "policy": label,
            "mode": args.mode if target is None else f"target ({target})",
            "MEG": res.meg,
            "normalized": res.normalized,
            "upper bound": res.upper_bound,
            "converged": res.converged,
        }
    ]
    if args.mode != "known":
        rows.append(
            {
                "policy": label,
                "mode": "known",
                "MEG": known.meg,
                "normalized": known.normalized,
                "upper bound": known.upper_bound,
                "converged": known.converged,
            }
        )
    estimate = None
    if args.rollouts is not None:
        from imitation_meg.trajectories import meg_from_trajectories, sample_trajectories

        data = sample_trajectories(mdp, pi, args.rollouts, rng=args.seed)
        kwargs: dict[str, Any] = {}
        if args.mode == "unknown":
            kwargs["features"] = "all"
        elif args.mode == "target":
            kwargs["target"] = target
        estimate = meg_from_trajectories(
            data,
            mdp,
            signed=args.signed,
            n_boot=args.n_boot,
            rng=args.seed + 1,
            progress=True,
            **kwargs,
        )
        rows.append(
            {
                "policy": f"{label}, {args.rollouts} rollouts",
                "mode": rows[0]["mode"],
                "MEG": estimate.meg,
                "normalized": estimate.meg / res.upper_bound if res.upper_bound else 0.0,
                "upper bound": res.upper_bound,
                "converged": estimate.result.converged,
                f"{estimate.confidence:.0%} interval": f"[{estimate.low:.4f}, {estimate.high:.4f}]",
            }
        )
    print(
        f"MEG of {label} in {mdp.name} (S={mdp.n_states}, |A|={mdp.n_actions}, {_horizon_text(mdp)}; "
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
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "func"}
        payload: dict[str, Any] = {
            "meg": res.meg,
            "mode": args.mode,
            "target": target,
            "policy": label,
            "algo": about.get("algo"),
            "timesteps": about.get("timesteps"),
            "vec_normalize": about.get("vec_normalize"),
            "mdp": {**_mdp_dict(mdp), "upper_bound": res.upper_bound},
            "config": config,
            "library_versions": library_versions(),
            "result": _result_dict(res),
            "known": _result_dict(known),
        }
        if estimate is not None:
            payload["trajectory_estimate"] = estimate.to_dict()
        path = write_json(args.json, payload)
        print(f"\nWrote {path}.")
    return 0


def _target_of(mdp: Any, kind: str) -> Any:
    """``--target`` for the MDP: MiniGrid layouts read the agent's cell from their metadata."""
    if "agent_pos" in mdp.metadata:
        from imitation_meg.envs.minigrid import minigrid_target

        return minigrid_target(mdp, kind)
    return kind


def _env_is_tabular(env_id: str) -> bool:
    from imitation_meg.approx.score import is_tabular

    return is_tabular(env_id)


def _add_score_parser(sub: Any) -> None:
    from imitation_meg.scoring import BUILTIN_POLICIES

    score = sub.add_parser(
        "score",
        help="score saved SB3 / sb3-contrib models, RL Zoo runs or a built-in policy",
        description=(
            "Score policies' MEG in a tabular environment: a gymnasium / seals id (--env), the "
            "paper's CliffWorld (--cliff-world), or the environment RL Zoo run folders record. "
            "Policies: saved SB3 / sb3-contrib models (.zip, the algorithm read from the zip), "
            "RL Zoo run folders, globs of checkpoints, or a built-in policy. Several policies "
            "are scored in one process, one row each (--csv / --jsonl)."
        ),
    )
    env = score.add_mutually_exclusive_group()
    env.add_argument(
        "--env",
        metavar="ENV_ID",
        help="gymnasium / seals / MiniGrid id, e.g. seals/CliffWorld7x4-v0, "
        "MiniGrid-DoorKey-5x5-v0 (the layout of --seed)",
    )
    env.add_argument("--cliff-world", action="store_true", help="the paper's CliffWorld builder")
    score.add_argument(
        "--horizon",
        type=_horizon_arg,
        help="horizon H (default: the environment's; 30 for --cliff-world), or 'inf' with "
        "--discount for the discounted infinite-horizon setting",
    )
    score.add_argument(
        "--discount",
        type=float,
        help="discount gamma: with --horizon inf the discounted infinite-horizon setting "
        "(stationary policies, MEG <= log|A| / (1 - gamma)); with a finite horizon it "
        "discounts the utility only",
    )
    score.add_argument("--width", type=int, help="--cliff-world columns (default 10)")
    score.add_argument("--height", type=int, help="--cliff-world rows (default 4)")
    score.add_argument("--goal-region", type=int, help="--cliff-world goal squares k (default 1)")
    score.add_argument(
        "--goal-layout",
        choices=("column", "row"),
        default="column",
        help="--cliff-world goal region layout (default column)",
    )
    score.add_argument(
        "--policy",
        required=True,
        nargs="+",
        metavar="POLICY",
        help="MODEL.zip, an RL Zoo run folder, a glob ('ckpt/rl_model_*_steps.zip'), or one of "
        + ", ".join(BUILTIN_POLICIES),
    )
    score.add_argument(
        "--algo",
        help="algorithm that saved the zips (default: read from each zip; any SB3 / sb3-contrib "
        "name, e.g. ppo, dqn, qrdqn, trpo, ars, maskableppo, recurrentppo)",
    )
    score.add_argument(
        "--epsilon", type=float, help="epsilon for epsilon-greedy, DQN, QR-DQN and ARS policies"
    )
    score.add_argument(
        "--noise-std",
        type=float,
        metavar="SIGMA",
        help="Box actions: score a deterministic agent (TD3, DDPG) smoothed by N(0, SIGMA^2) in "
        "the box scaled to [-1, 1], as SB3's NormalActionNoise(sigma=SIGMA)",
    )
    score.add_argument(
        "--vec-normalize",
        metavar="PKL|auto|none",
        help="VecNormalize statistics the models were trained with: a file, 'auto' (the file "
        "saved beside each model) or 'none'",
    )
    score.add_argument(
        "--action-masks",
        metavar="NPY",
        help="MaskablePPO: (S, A) booleans saved with np.save (default: the env's action_masks())",
    )
    score.add_argument(
        "--mode",
        choices=MODES,
        default="known",
        help="utility: known (env reward, default), unknown (all utilities of the state) or target",
    )
    score.add_argument(
        "--target", choices=TARGETS, help="target variable for --mode target (default goal)"
    )
    score.add_argument("--signed", action="store_true", help="signed known-utility MEG")
    score.add_argument(
        "--rollouts",
        type=int,
        metavar="N",
        help="also estimate MEG from N sampled trajectories with a bootstrap interval",
    )
    score.add_argument(
        "--n-boot", type=int, default=200, help="bootstrap replicates for --rollouts (default 200)"
    )
    score.add_argument(
        "--approx",
        action="store_true",
        help="approximate MEG from rollouts with learned soft Q-functions (the default for "
        "environments that are not tabular; forces it on tabular ones)",
    )
    score.add_argument(
        "--curve",
        metavar="FILE",
        help="the environment's soft-value curve (imitation-meg curve --out FILE): each policy "
        "is then scored from its episodes alone",
    )
    score.add_argument(
        "--approx-option",
        dest="approx_options",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the approximate estimator (any ApproxOptions field but seed, e.g. "
        "refine=4, n_models=5, n_eval_episodes=200, hidden=[128,128], grid_points=32 for the "
        "soft Q-fits of Box actions); repeatable",
    )
    score.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed for --rollouts and --approx, and the reset seed that fixes a MiniGrid "
        "layout (default 0)",
    )
    score.add_argument(
        "--jobs", type=int, default=1, help="worker processes for several policies (default 1)"
    )
    score.add_argument(
        "--json", metavar="FILE", help="write config, library versions and results as JSON"
    )
    score.add_argument("--csv", metavar="FILE", help="write one CSV row per policy")
    score.add_argument("--jsonl", metavar="FILE", help="write one JSON line per policy")
    score.set_defaults(func=_score)


def _curve(args: argparse.Namespace) -> int:
    from imitation_meg.approx.score import curve_command

    return curve_command(args)


def _add_curve_parser(sub: Any) -> None:
    curve = sub.add_parser(
        "curve",
        help="compute an environment's soft-value curve once, to score many policies with it",
        description=(
            "Known-utility MEG is sup_beta beta J - Lambda(beta): the policy enters only through "
            "its expected return J, and Lambda, the soft-value curve, belongs to the "
            "environment. Compute it once and save it; `score --curve FILE` and MEGCallback "
            "then score each policy or checkpoint from its episodes alone."
        ),
    )
    curve.add_argument("--env", required=True, metavar="ENV_ID", help="gymnasium / seals id")
    curve.add_argument("--horizon", type=int, help="horizon H (default: the environment's)")
    curve.add_argument("--out", required=True, metavar="FILE", help="the curve file (.npz)")
    curve.add_argument("--seed", type=int, default=0, help="seed of the random paths (default 0)")
    curve.add_argument(
        "--approx-option",
        dest="approx_options",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the curve's estimator (n_particles, n_starts); repeatable",
    )
    curve.set_defaults(func=_curve)


# ---------------------------------------------------------------------------------- intervene
def _intervention_mdps(args: argparse.Namespace) -> list[Any]:
    """One MDP per ``--env ID[:SEED]``: MiniGrid layouts observed as the saved model observes
    them, other ids through ``TabularMDP.from_env``."""
    import imitation_meg as im

    mdps = []
    for item in args.env:
        env_id, _, seed = item.partition(":")
        if not _is_minigrid(env_id):
            if seed:
                raise ValueError(f"--env {item!r}: a :SEED applies to MiniGrid ids only.")
            mdps.append(im.TabularMDP.from_env(env_id, horizon=args.horizon))
            continue
        if seed and not seed.isdigit():
            raise ValueError(f"--env {item!r}: the seed after ':' must be an integer.")
        ns = argparse.Namespace(env=env_id, seed=int(seed or 0), horizon=args.horizon)
        mdps.append(_minigrid_mdp(ns, [args.policy]))
    return mdps


def _intervene(args: argparse.Namespace) -> int:
    from imitation_meg.envs.minigrid import agent_cells
    from imitation_meg.interventions import meg_interventional
    from imitation_meg.results import library_versions, write_json

    _check_outputs(args)
    if args.target is not None and args.mode != "target":
        raise ValueError("--target applies to --mode target only.")
    mdps = _intervention_mdps(args)
    kwargs: dict[str, Any] = {"weights": args.weights, "names": args.env}
    if args.mode == "target":
        kwargs["target"] = [agent_cells(m) for m in mdps]
    policy: Any = args.policy
    if policy == "uniform":
        import imitation_meg as im

        policy = [im.policies.uniform(m) for m in mdps]
    res = meg_interventional(policy, mdps, **kwargs)
    what = "the environment reward" if args.mode == "known" else "every utility of the agent's cell"
    print(
        f"Interventional MEG of {args.policy} across {len(mdps)} interventions ({what}; "
        f"H={mdps[0].horizon}, bound {res.result.upper_bound:.4g}): {res.meg:.4f}\n"
        f"On distribution ({args.env[0]}): {res.on_distribution:.4f}\n"
    )
    print(format_table(res.rows()))
    if args.json:
        payload = {
            "config": {k: v for k, v in vars(args).items() if k != "func"},
            "library_versions": library_versions(),
            "result": res.to_dict(),
        }
        print(f"\nWrote {write_json(args.json, payload)}.")
    return 0


def _add_intervene_parser(sub: Any) -> None:
    p = sub.add_parser(
        "intervene",
        help="interventional MEG: one utility across intervened environments",
        description=(
            "Score one agent's MEG across intervened environments (layouts, starts, dynamics): "
            "the best single utility and rationality over all of them, each intervention's "
            "score and share, and the MEG on distribution (the first --env)."
        ),
    )
    p.add_argument(
        "--env",
        required=True,
        nargs="+",
        metavar="ID[:SEED]",
        help="the interventions, the on-distribution one first: MiniGrid ids with the layout's "
        "reset seed (MiniGrid-DistShift1-v0:0), or tabular gymnasium / seals ids",
    )
    p.add_argument("--policy", required=True, help="a saved SB3 model (.zip) or 'uniform'")
    p.add_argument("--weights", type=float, nargs="+", help="one weight per --env (default equal)")
    p.add_argument(
        "--mode",
        choices=("known", "target"),
        default="known",
        help="known (the environment reward, default) or target (every utility of --target)",
    )
    p.add_argument("--target", choices=("cell",), help="MiniGrid: the agent's cell (default)")
    p.add_argument("--horizon", type=int, help="horizon H (default: the environments')")
    p.add_argument("--json", metavar="FILE", help="write config, versions and results as JSON")
    p.set_defaults(func=_intervene)


# ---------------------------------------------------------------------------------- plot
def _plot(args: argparse.Namespace) -> int:
    from imitation_meg.results import check_output_path

    out, new_parent = check_output_path(args.out, what="--out")
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {args.out!r} should end in .png.")
    if new_parent:
        _note(f"the folder {str(out.parent)!r} for --out does not exist: it will be created")
    from imitation_meg.plotting import history_labels, plot_meg_history, read_history

    labels = history_labels(args.files)
    histories = {label: read_history(name) for label, name in zip(labels, args.files, strict=True)}
    path = plot_meg_history(out, histories, metrics=args.metric, title=args.title or "")
    n = sum(len(r) for r in histories.values())
    print(f"Wrote {path} ({n} points from {len(histories)} file(s): {', '.join(labels)}).")
    return 0


def _add_plot_parser(sub: Any) -> None:
    plot = sub.add_parser(
        "plot",
        help="plot MEG against training steps from score rows or a callback history",
        description=(
            "Draw MEG against training steps (PNG) from the CSV / JSON-lines rows of "
            "`imitation-meg score --csv/--jsonl` or the history of MEGCallback(history=...)."
        ),
    )
    plot.add_argument("files", nargs="+", metavar="FILE", help=".csv or .jsonl files")
    plot.add_argument("--out", required=True, metavar="PNG", help="the figure to write")
    plot.add_argument(
        "--metric",
        action="append",
        help="column to plot (repeatable): meg, known_meg, unknown, normalized, expected_return "
        "(default: meg, plus unknown / known_meg when present)",
    )
    plot.add_argument("--title", help="figure title")
    plot.set_defaults(func=_plot)


def _reproduce(args: argparse.Namespace) -> int:
    from imitation_meg.runners import ResultsFolderBusyError, UnitsFailedError, run_config

    resources: dict[str, float] = {}
    for flag, key in (("cpus_per_unit", "num_cpus"), ("gpus_per_unit", "num_gpus")):
        value = getattr(args, flag)
        if value is not None:
            if value < 0:
                raise ValueError(f"--{flag.replace('_', '-')} must be >= 0, got {value}.")
            resources[key] = value
    if resources and args.backend != "ray":
        raise ValueError("--cpus-per-unit / --gpus-per-unit apply to --backend ray only.")
    try:
        out = run_config(
            args.config,
            experiments_dir=args.experiments,
            backend=args.backend,
            workers=args.workers,
            address=args.address,
            overrides=args.set or (),
            seeds=args.seeds,
            retries=args.retries,
            resources=resources or None,
            merge=args.merge or (),
            fresh=args.fresh,
            dry_run=args.dry_run,
            progress_bar=not args.no_progress,
        )
    except UnitsFailedError as e:
        print(f"imitation-meg reproduce: {_one_line(e)}", file=sys.stderr)
        return 1
    except ResultsFolderBusyError as e:
        print(f"imitation-meg reproduce: error: {_one_line(e)}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(
            f"{out['study']}: {out['units']} units, {len(out['done'])} done, "
            f"{len(out['missing'])} missing ({out['units_dir']})"
        )
        for unit in out["missing"]:
            print(f"  missing {unit}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    from imitation_meg.runners import publish

    if not args.max_mb >= 0:
        raise ValueError(f"--max-mb must be >= 0 (inf: no limit), got {args.max_mb}.")
    limit = None if math.isinf(args.max_mb) else int(args.max_mb * 1024 * 1024)  # inf: no limit
    status = publish(args.results_dir, to=args.to, max_bytes=limit)
    for kind in ("new", "updated", "unchanged"):
        for path in status[kind]:
            print(f"{kind:9s} {path}")
    for path in status["left_out"]:
        size = pathlib.Path(path).stat().st_size / 1024 / 1024
        print(f"left out  {path} ({size:.1f} MiB > --max-mb; it stays in the results folder)")
    changed = len(status["new"]) + len(status["updated"])
    print(f"published {changed} changed file(s) of {args.results_dir}; review with git diff.")
    return 0


def _add_reproduce_parsers(sub: Any) -> None:
    rep = sub.add_parser(
        "reproduce",
        help="run a study from its YAML config (serial, local processes or Ray)",
        description=(
            "Run a study from its YAML config. Its units (seeds x configurations x agents ...) "
            "run on the chosen backend and are saved one file each under "
            "<results_dir>/units/, so an interrupted run resumes where it stopped; the results "
            "are the same bytes on every backend. Full runs write under results/; "
            "'imitation-meg publish' copies a finished run into docs/results/."
        ),
    )
    rep.add_argument("config", help="path of a config under configs/")
    rep.add_argument(
        "--experiments",
        metavar="DIR",
        help="the folder holding the config's driver <experiment>.py (default: experiments/ "
        "beside the config's folder, else in the checkout the package is installed from)",
    )
    rep.add_argument(
        "--backend",
        choices=("serial", "process", "ray"),
        default="serial",
        help="serial (default), process (local processes) or ray (local Ray or a cluster)",
    )
    rep.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="units in parallel (process: default all CPUs; ray: default what the cluster fits)",
    )
    rep.add_argument(
        "--address",
        metavar="ADDR",
        help="Ray cluster to join ('auto' after 'ray start --head'; default a local Ray)",
    )
    rep.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config value (YAML; repeatable), e.g. --set n_steps=20000",
    )
    rep.add_argument("--seeds", metavar="LIST", help="the seeds to run, e.g. 0-4 or 0,2,5-7")
    rep.add_argument(
        "--retries",
        type=int,
        default=1,
        metavar="N",
        help="further attempts of a unit that fails (default 1)",
    )
    rep.add_argument(
        "--cpus-per-unit",
        type=float,
        metavar="N",
        help="Ray CPUs per unit (default: the study's UNIT_RESOURCES, mostly 1)",
    )
    rep.add_argument(
        "--gpus-per-unit",
        type=float,
        metavar="N",
        help="Ray GPUs per unit, used when the cluster has GPUs (default 0)",
    )
    rep.add_argument(
        "--merge",
        nargs="+",
        metavar="DIR",
        help="first take the finished units of other runs of this config: their results "
        "folders, or, for a study that publishes every unit's result (approx_validation), "
        "their published folders under docs/results/; a unit found twice with different "
        "results is an error",
    )
    rep.add_argument("--fresh", action="store_true", help="rerun every unit instead of resuming")
    rep.add_argument(
        "--dry-run",
        action="store_true",
        help="list finished and missing units (with --merge: counting the units it would bring), "
        "run and write nothing",
    )
    rep.add_argument("--no-progress", action="store_true", help="no progress bar")
    rep.set_defaults(func=_reproduce)

    pub = sub.add_parser(
        "publish",
        help="copy a finished run's results into docs/results/",
        description=(
            "Copy the result files of a finished run (tables, JSON, figures, run log; not its "
            "units/) from its results folder into docs/results/<name>/."
        ),
    )
    pub.add_argument("results_dir", help="the run's results folder, e.g. results/extended_table1")
    pub.add_argument("--to", metavar="DIR", help="destination (default docs/results/<name>)")
    pub.add_argument(
        "--max-mb",
        type=float,
        default=2.0,
        metavar="MB",
        help="leave files larger than this in the results folder (default 2; raw per-episode "
        "logs of long studies do not belong in the repository)",
    )
    pub.set_defaults(func=_publish)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``imitation-meg``."""
    parser = argparse.ArgumentParser(
        prog="imitation-meg",
        description="Maximum entropy goal-directedness (MEG) of policies in tabular environments.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="score reference policies on the paper's CliffWorld")
    demo.add_argument("--horizon", type=int, default=30, help="horizon H (default 30)")
    demo.add_argument("--no-ppo", action="store_true", help="skip training and scoring a small PPO")
    demo.add_argument(
        "--ppo-steps", type=int, default=16_384, help="PPO training steps (default 16384)"
    )
    demo.add_argument("--seed", type=_seed, default=0, help="PPO seed (default 0)")
    demo.set_defaults(func=_demo)

    _add_reproduce_parsers(sub)

    _add_score_parser(sub)
    _add_curve_parser(sub)
    _add_intervene_parser(sub)
    _add_plot_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``imitation-meg`` console script.

    Args:
        argv: the arguments; ``None`` reads the command line (the console script,
            ``python -m imitation_meg.cli``).

    Returns:
        The exit status: 0, 1 (units of ``reproduce`` failed), 2 (bad input: one line on stderr)
        or 130 (Ctrl-C: one line on stderr). Run as a program (``argv=None``), Ctrl-C ends the
        process as soon as that line is printed, without the interpreter's teardown (torch's
        takes a second or more on a busy machine); every output file is closed by then.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    show = warnings.showwarning

    def one_line_warning(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
        from imitation_meg._validation import ImitationMEGWarning

        if issubclass(category, ImitationMEGWarning):
            name = category.__name__
            print(
                f"imitation-meg {args.command}: warning ({name}): {_one_line(message)}",
                file=sys.stderr,
            )
        else:
            show(message, category, *rest, **kw)

    warnings.showwarning = one_line_warning
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"imitation-meg {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C: one line (reproduce: what is saved), no traceback
        print(f"imitation-meg {args.command}: {_one_line(e)}", file=sys.stderr, flush=True)
    finally:
        warnings.showwarning = show
    # reached after Ctrl-C only (every other path returned or raised above)
    if argv is None:  # the program: leave now (see above), its objects released first
        _exit_now(130)
    return 130


def _exit_now(code: int) -> None:
    """End the process at once, skipping the interpreter's teardown: the objects the interrupted
    work left (a process pool's queues, whose named semaphores are unlinked when they are freed)
    are released first, and the output streams flushed."""
    import gc

    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _note(text: str) -> None:
    """A one-line note to the user on stderr (stdout carries the results)."""
    print(f"imitation-meg: {text}", file=sys.stderr, flush=True)


def _one_line(e: BaseException | str) -> str:
    if isinstance(e, KeyboardInterrupt):  # empty for a plain Ctrl-C
        return " ".join(str(e).split()) or "interrupted"
    return " ".join(str(e).split()) or type(e).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
