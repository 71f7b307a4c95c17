"""The ``imitation-meg`` command line: ``demo``, ``score`` and ``reproduce``.

This is the only module that parses command lines. Errors in user input end the program with
exit code 2 and a one-line message on stderr.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "format_table"]


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Render rows of a table as aligned plain text (floats with 4 decimals).

    Args:
        rows: mappings from column name to value.
        columns: column order; default the keys of the first row.
    """
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())

    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            if math.isinf(v):
                return "+inf" if v > 0 else "-inf"
            if math.isnan(v):
                return "nan"
            return f"{v:.4f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.rjust(w) for c, w in zip(columns, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join([line, sep, *body])


def _demo(args: argparse.Namespace) -> int:
    import imitation_meg as im
    from imitation_meg import policies

    t0 = time.perf_counter()
    mdp = im.envs.cliff_world(width=10, height=4, horizon=args.horizon)
    print(
        f"Known-utility MEG on the paper's 10x4 CliffWorld (horizon H={mdp.horizon}, "
        f"|A|={mdp.n_actions}, upper bound H log|A| = {mdp.horizon * math.log(mdp.n_actions):.4f} nats)\n"
    )
    candidates = [
        ("uniform", policies.uniform(mdp)),
        ("epsilon-greedy 0.5", policies.epsilon_greedy(mdp, 0.5)),
        ("epsilon-greedy 0.1", policies.epsilon_greedy(mdp, 0.1)),
        ("optimal", policies.optimal(mdp)),
    ]
    rows = []
    for name, pi in candidates:
        res = im.meg(pi, mdp)
        rows.append(
            {
                "policy": name,
                "MEG": res.meg,
                "normalized": res.normalized,
                "beta*": res.beta,
                "E[U] policy": res.expected_utility,
                "E[U] uniform": res.uniform_expected_utility,
                "converged": res.converged,
            }
        )
    print(format_table(rows))
    if not args.no_ppo:
        _demo_ppo(mdp, args, rows)
    print(f"\nDone in {time.perf_counter() - t0:.1f} s.")
    return 0


def _demo_ppo(mdp: Any, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Train a small PPO for a few seconds and score it (needs the sb3 extra)."""
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print("\n(stable-baselines3 is not installed: skipping the PPO part of the demo.)")
        return
    try:
        from imitation_meg.adapters.sb3 import policy_table, train_demo_ppo
    except ImportError:
        return
    import imitation_meg as im

    print(f"\nTraining PPO on seals CliffWorld 10x4 for {args.ppo_steps} steps ...")
    model = train_demo_ppo(mdp, total_timesteps=args.ppo_steps, seed=0)
    pi = policy_table(model, mdp)
    res = im.meg(pi, mdp)
    print(
        format_table(
            [
                {
                    "policy": f"PPO ({args.ppo_steps} steps)",
                    "MEG": res.meg,
                    "normalized": res.normalized,
                    "beta*": res.beta,
                    "E[U] policy": res.expected_utility,
                    "E[U] uniform": res.uniform_expected_utility,
                    "converged": res.converged,
                }
            ]
        )
    )


def _reproduce(args: argparse.Namespace) -> int:
    from imitation_meg.config import run_config

    run_config(args.config)
    return 0


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
    demo.add_argument("--ppo-steps", type=int, default=20_000, help="PPO training steps")
    demo.set_defaults(func=_demo)

    rep = sub.add_parser("reproduce", help="run an experiment from its YAML config")
    rep.add_argument("config", help="path of a config under configs/")
    rep.set_defaults(func=_reproduce)

    try:
        from imitation_meg.score_cli import add_score_parser
    except ImportError:
        pass
    else:
        add_score_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``imitation-meg`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"imitation-meg {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
