"""``imitation-meg intervene``: interventional MEG of one agent across intervened environments."""

from __future__ import annotations

import argparse
from typing import Any

from imitation_meg.cli.common import (
    check_outputs,
    command_config,
    is_minigrid,
    minigrid_mdp,
    subcommand,
)
from imitation_meg.results import format_table


def _intervention_mdps(args: argparse.Namespace) -> list[Any]:
    """One MDP per ``--env ID[:SEED]``: MiniGrid layouts observed as the saved model observes
    them, other ids through ``TabularMDP.from_env``."""
    import imitation_meg as im

    mdps = []
    for item in args.env:
        env_id, _, seed = item.partition(":")
        if not is_minigrid(env_id):
            if seed:
                raise ValueError(f"--env {item!r}: a :SEED applies to MiniGrid ids only.")
            mdps.append(im.TabularMDP.from_env(env_id, horizon=args.horizon))
            continue
        if seed and not seed.isdigit():
            raise ValueError(f"--env {item!r}: the seed after ':' must be an integer.")
        ns = argparse.Namespace(env=env_id, seed=int(seed or 0), horizon=args.horizon)
        mdps.append(minigrid_mdp(ns, [args.policy]))
    return mdps


def _policy(policy: str, mdps: list[Any]) -> Any:
    """``--policy``: the uniform policy's table in each intervention, or the saved agent."""
    if policy != "uniform":
        return policy
    import imitation_meg as im

    return [im.policies.uniform(m) for m in mdps]


def intervene(args: argparse.Namespace) -> int:
    from imitation_meg.envs.minigrid import agent_cells
    from imitation_meg.interventions import meg_interventional
    from imitation_meg.results import library_versions, write_json

    check_outputs(args)
    if args.target is not None and args.mode != "target":
        raise ValueError("--target applies to --mode target only.")
    mdps = _intervention_mdps(args)
    kwargs: dict[str, Any] = {"weights": args.weights, "names": args.env}
    if args.mode == "target":
        kwargs["target"] = [agent_cells(m) for m in mdps]
    res = meg_interventional(_policy(args.policy, mdps), mdps, **kwargs)
    what = "the environment reward" if args.mode == "known" else "every utility of the agent's cell"
    print(
        f"Interventional MEG of {args.policy} across {len(mdps)} interventions ({what}; "
        f"H={mdps[0].horizon}, bound {res.result.upper_bound:.4g}): {res.meg:.4f}\n"
        f"On distribution ({args.env[0]}): {res.on_distribution:.4f}\n"
    )
    print(format_table(res.rows()))
    if args.json:
        payload = {
            "config": command_config(args),
            "library_versions": library_versions(),
            "result": res.to_dict(),
        }
        print(f"\nWrote {write_json(args.json, payload)}.")
    return 0


HELP = "interventional MEG: one utility across intervened environments"
DESCRIPTION = """
    Score one agent's MEG across intervened environments (layouts, starts, dynamics): the best
    single utility and rationality over all of them, each intervention's score and share, and the
    MEG on distribution (the first --env).
"""


def add_parser(sub: Any) -> None:
    p = subcommand(sub, "intervene", intervene, HELP, DESCRIPTION)
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
