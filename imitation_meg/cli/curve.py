"""``imitation-meg curve``: an environment's soft-value curve, computed once and saved."""

from __future__ import annotations

import argparse
import time
from typing import Any

from imitation_meg.cli.approx import estimator_settings, is_tabular
from imitation_meg.cli.common import subcommand


def curve(args: argparse.Namespace) -> int:
    """``imitation-meg curve --env ENV --out FILE``: compute an environment's soft-value curve
    once and save it (with its provenance) for ``score --curve FILE`` and ``MEGCallback``.

    Raises:
        ValueError: an environment no curve can be computed for, bad settings or output path.
    """
    from imitation_meg.approx.known import soft_value_curve
    from imitation_meg.results import check_output_path

    check_output_path(args.out, what="--out")
    settings = estimator_settings(
        getattr(args, "approx_options", None), {"n_particles", "n_starts"}
    )
    t0 = time.perf_counter()
    print(f"Computing the soft-value curve of {args.env} ...", flush=True)
    bar: dict[str, Any] = {} if is_tabular(args.env) else {"progress": True}
    lam = soft_value_curve(args.env, horizon=args.horizon, seed=args.seed, **bar, **settings)
    seconds = time.perf_counter() - t0
    path = lam.save(args.out)
    lo, hi = lam.trusted_returns()
    print(
        f"{lam.info.env}, H={lam.info.horizon}, actions {lam.info.actions}: method "
        f"{lam.info.method}, {lam.n_units} unit(s), trusted for mean returns in "
        f"[{lo:.6g}, {hi:.6g}], in {seconds:.1f} s.\nWrote {path}."
    )
    for problem in lam.problems:
        print(f"(Note: {problem}.)")
    return 0


HELP = "compute an environment's soft-value curve once, to score many policies with it"
DESCRIPTION = """
    Known-utility MEG is sup_beta beta J - Lambda(beta): the policy enters only through its
    expected return J, and Lambda, the soft-value curve, belongs to the environment. Compute it
    once and save it; `score --curve FILE` and MEGCallback then score each policy or checkpoint
    from its episodes alone.
"""


def add_parser(sub: Any) -> None:
    p = subcommand(sub, "curve", curve, HELP, DESCRIPTION)
    p.add_argument("--env", required=True, metavar="ENV_ID", help="gymnasium / seals id")
    p.add_argument("--horizon", type=int, help="horizon H (default: the environment's)")
    p.add_argument("--out", required=True, metavar="FILE", help="the curve file (.npz)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random paths (default 0)")
    p.add_argument(
        "--approx-option",
        dest="approx_options",
        action="append",
        metavar="KEY=VALUE",
        help="a setting of the curve's estimator (n_particles, n_starts); repeatable",
    )
