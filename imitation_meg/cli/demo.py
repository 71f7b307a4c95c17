"""``imitation-meg demo``: reference policies (and a small PPO) scored on the paper's CliffWorld."""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from typing import Any

from imitation_meg.cli.common import seed_arg, subcommand
from imitation_meg.results import format_table


def demo(args: argparse.Namespace) -> int:
    import imitation_meg as im
    from imitation_meg.core import policies

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


def add_parser(sub: Any) -> None:
    p = subcommand(sub, "demo", demo, "score reference policies on the paper's CliffWorld")
    p.add_argument("--horizon", type=int, default=30, help="horizon H (default 30)")
    p.add_argument("--no-ppo", action="store_true", help="skip training and scoring a small PPO")
    p.add_argument(
        "--ppo-steps", type=int, default=16_384, help="PPO training steps (default 16384)"
    )
    p.add_argument("--seed", type=seed_arg, default=0, help="PPO seed (default 0)")
