"""``imitation-meg score``: its arguments, their checks, and the choice between the exact path
(:mod:`~imitation_meg.cli.exact`) and the approximate one (:mod:`~imitation_meg.cli.approx`)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from imitation_meg.cli.common import (
    check_outputs,
    env_is_tabular,
    horizon_arg,
    is_minigrid,
    seed_arg,
    subcommand,
)
from imitation_meg.cli.exact import score_many, score_mdp, score_one, score_options

# ---------------------------------------------------------------------------------- score
MODES = ("known", "unknown", "target")


TARGETS = ("row", "column", "cell", "goal")


def _check_single_policy_outputs(args: argparse.Namespace) -> None:
    """The approximate estimators score one policy: ``--json`` only, checked before any work."""
    for flag in ("csv", "jsonl"):
        if getattr(args, flag) is not None:
            raise ValueError(
                f"--{flag} is not available with the approximate estimator (it scores one "
                "policy); write its result with --json FILE."
            )
    check_outputs(args)


@contextlib.contextmanager
def _one_off_passes() -> Iterator[None]:
    """A command that scores once: small MDPs on the torch passes (loading numba's compiled
    pass costs more than it saves), here and in the workers it starts; the caller's setting
    is back afterwards (the command also runs inside other programs: ``main(argv)``)."""
    from imitation_meg.core.kernels import fused as _fused

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


def score(args: argparse.Namespace) -> int:
    with _one_off_passes():
        return _score_once(args)


def _refuse_discount_beyond_tables(args: argparse.Namespace) -> None:
    """``--discount`` where the score is approximate: refused, not ignored."""
    if args.discount is None or args.env is None or is_minigrid(args.env):
        return
    if args.approx or args.curve is not None or not env_is_tabular(args.env):
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
    if _one_environment(runs) and not _read_exactly(first.env_id):
        _check_zoo_atari(first)
        args.env, args.env_kwargs = first.env_id, first.env_kwargs


def _one_environment(runs: list[Any]) -> bool:
    """Whether the runs record one environment (id and keyword arguments); a mix is refused
    later, by the exact path's check."""
    env_id, kwargs = runs[0].env_id, runs[0].env_kwargs
    return env_id is not None and all((r.env_id, r.env_kwargs) == (env_id, kwargs) for r in runs)


def _read_exactly(env_id: Any) -> bool:
    """Whether the exact path reads ``env_id`` (MiniGrid or tabular)."""
    return is_minigrid(env_id) or env_is_tabular(env_id)


def _check_zoo_atari(run: Any) -> None:
    """Refuse an Atari game that the run wrapped otherwise than the Zoo's Atari setting (the
    MDP of the ALE simulator), by name."""
    from imitation_meg.approx.ale import is_ale_id, zoo_atari_mismatch

    why = zoo_atari_mismatch(run.config) if is_ale_id(run.env_id) else ""
    if why:
        raise ValueError(f"the RL Zoo run's Atari game cannot be scored here: {why}.")


def _score_once(args: argparse.Namespace) -> int:
    _zoo_environment(args)
    _refuse_discount_beyond_tables(args)
    if _is_approximate(args):
        return _score_approximately(args)
    _check_exact_flags(args)
    check_outputs(args)
    from imitation_meg.scoring import expand_sources

    sources = expand_sources(args.policy)
    if len(sources) > 1 and args.rollouts is not None:
        raise ValueError("--rollouts applies to one policy; score several without it.")
    mdp = score_mdp(args, sources)
    if mdp.utility is None:
        raise ValueError(f"{mdp.name} has no reward to score against.")
    opts = score_options(args)
    if len(sources) == 1 and args.csv is None and args.jsonl is None:
        return score_one(args, sources[0], mdp, opts)
    return score_many(args, sources, mdp, opts)


def _score_approximately(args: argparse.Namespace) -> int:
    """The approximate estimators' score, the outputs checked for one policy or several."""
    from imitation_meg.cli.approx import score_approx

    if args.curve is None and len(args.policy) == 1 and "*" not in args.policy[0]:
        _check_single_policy_outputs(args)
    else:
        check_outputs(args)
    return score_approx(args)


def _is_approximate(args: argparse.Namespace) -> bool:
    """Whether the approximate estimators score: ``--approx``, ``--curve``, or an environment
    that is neither tabular nor MiniGrid."""
    if args.approx or args.curve is not None:
        return True
    return args.env is not None and not is_minigrid(args.env) and not env_is_tabular(args.env)


def _check_exact_flags(args: argparse.Namespace) -> None:
    """Refuse the flags the exact score does not use, and bad values of those it does."""
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
    _check_counts(args)


def _check_counts(args: argparse.Namespace) -> None:
    """``--rollouts``, ``--n-boot`` and ``--jobs`` in range."""
    if args.rollouts is not None and args.rollouts < 1:
        raise ValueError(
            f"--rollouts must be a positive number of trajectories, got {args.rollouts}."
        )
    if args.n_boot < 0:
        raise ValueError(f"--n-boot must be >= 0, got {args.n_boot}.")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be a positive number of processes, got {args.jobs}.")


HELP = "score saved SB3 / sb3-contrib models, RL Zoo runs or a built-in policy"
DESCRIPTION = """
    Score policies' MEG: exactly in a tabular environment, elsewhere estimated with an interval
    (from the environment's soft-value curve, --curve, where the library simulates it; else by
    fits). The environment: a gymnasium / seals id (--env), the paper's CliffWorld (--cliff-world),
    or the one RL Zoo run folders record. Policies: saved SB3 / sb3-contrib models (.zip, the
    algorithm read from the zip), RL Zoo run folders, globs of checkpoints, or a built-in policy.
    Several policies are scored in one process, one row each (--csv / --jsonl).
"""


def add_parser(sub: Any) -> None:
    from imitation_meg.scoring import BUILTIN_POLICIES

    p = subcommand(sub, "score", score, HELP, DESCRIPTION)
    env = p.add_mutually_exclusive_group()
    env.add_argument(
        "--env",
        metavar="ENV_ID",
        help="gymnasium / seals / MiniGrid id, e.g. seals/CliffWorld7x4-v0, "
        "MiniGrid-DoorKey-5x5-v0 (the layout of --seed)",
    )
    env.add_argument("--cliff-world", action="store_true", help="the paper's CliffWorld builder")
    p.add_argument(
        "--horizon",
        type=horizon_arg,
        help="horizon H (default: the environment's; 30 for --cliff-world), or 'inf' with "
        "--discount for the discounted infinite-horizon setting",
    )
    p.add_argument(
        "--discount",
        type=float,
        help="discount gamma: with --horizon inf the discounted infinite-horizon setting "
        "(stationary policies, MEG <= log|A| / (1 - gamma)); with a finite horizon it "
        "discounts the utility only",
    )
    p.add_argument("--width", type=int, help="--cliff-world columns (default 10)")
    p.add_argument("--height", type=int, help="--cliff-world rows (default 4)")
    p.add_argument("--goal-region", type=int, help="--cliff-world goal squares k (default 1)")
    p.add_argument(
        "--goal-layout",
        choices=("column", "row"),
        default="column",
        help="--cliff-world goal region layout (default column)",
    )
    p.add_argument(
        "--policy",
        required=True,
        nargs="+",
        metavar="POLICY",
        help="MODEL.zip, an RL Zoo run folder, a glob ('ckpt/rl_model_*_steps.zip'), or one of "
        + ", ".join(BUILTIN_POLICIES),
    )
    p.add_argument(
        "--algo",
        help="algorithm that saved the zips (default: read from each zip; any SB3 / sb3-contrib "
        "name, e.g. ppo, dqn, qrdqn, trpo, ars, maskableppo, recurrentppo)",
    )
    p.add_argument(
        "--epsilon", type=float, help="epsilon for epsilon-greedy, DQN, QR-DQN and ARS policies"
    )
    p.add_argument(
        "--noise-std",
        type=float,
        metavar="SIGMA",
        help="Box actions: score a deterministic agent (TD3, DDPG) smoothed by N(0, SIGMA^2) in "
        "the box scaled to [-1, 1], as SB3's NormalActionNoise(sigma=SIGMA)",
    )
    p.add_argument(
        "--vec-normalize",
        metavar="PKL|auto|none",
        help="VecNormalize statistics the models were trained with: a file, 'auto' (the file "
        "saved beside each model) or 'none'",
    )
    p.add_argument(
        "--action-masks",
        metavar="NPY",
        help="MaskablePPO: (S, A) booleans saved with np.save (default: the env's action_masks())",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="known",
        help="utility: known (env reward, default), unknown (all utilities of the state) or target",
    )
    p.add_argument(
        "--target", choices=TARGETS, help="target variable for --mode target (default goal)"
    )
    p.add_argument("--signed", action="store_true", help="signed known-utility MEG")
    p.add_argument(
        "--rollouts",
        type=int,
        metavar="N",
        help="also estimate MEG from N sampled trajectories with a bootstrap interval",
    )
    p.add_argument(
        "--n-boot", type=int, default=200, help="bootstrap replicates for --rollouts (default 200)"
    )
    p.add_argument(
        "--approx",
        action="store_true",
        help="approximate MEG from rollouts with learned soft Q-functions (the default for "
        "environments that are not tabular; forces it on tabular ones)",
    )
    p.add_argument(
        "--curve",
        metavar="FILE",
        help="the environment's soft-value curve (imitation-meg curve --out FILE): each policy "
        "is then scored from its episodes alone",
    )
    p.add_argument(
        "--approx-option",
        dest="approx_options",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the approximate estimator (any ApproxOptions field but seed, e.g. "
        "refine=4, n_models=5, n_eval_episodes=200, hidden=[128,128], grid_points=32 for the "
        "soft Q-fits of Box actions); repeatable",
    )
    p.add_argument(
        "--seed",
        type=seed_arg,
        default=0,
        help="seed for --rollouts and --approx, and the reset seed that fixes a MiniGrid "
        "layout (default 0)",
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="worker processes for several policies (default 1)"
    )
    p.add_argument(
        "--json", metavar="FILE", help="write config, library versions and results as JSON"
    )
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per policy")
    p.add_argument("--jsonl", metavar="FILE", help="write one JSON line per policy")
