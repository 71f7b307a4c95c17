"""``imitation-meg plot``, ``reproduce`` and ``publish``: figures and studies."""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
from typing import Any

from imitation_meg.cli.common import note, one_line, subcommand


def plot(args: argparse.Namespace) -> int:
    from imitation_meg.results import check_output_path

    out, new_parent = check_output_path(args.out, what="--out")
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {args.out!r} should end in .png.")
    if new_parent:
        note(f"the folder {str(out.parent)!r} for --out does not exist: it will be created")
    from imitation_meg.plotting import history_labels, plot_meg_history, read_history

    labels = history_labels(args.files)
    histories = {label: read_history(name) for label, name in zip(labels, args.files, strict=True)}
    path = plot_meg_history(out, histories, metrics=args.metric, title=args.title or "")
    n = sum(len(r) for r in histories.values())
    print(f"Wrote {path} ({n} points from {len(histories)} file(s): {', '.join(labels)}).")
    return 0


PLOT_HELP = "plot MEG against training steps from score rows or a callback history"
PLOT_DESCRIPTION = """
    Draw MEG against training steps (PNG) from the CSV / JSON-lines rows of `imitation-meg score
    --csv/--jsonl` or the history of MEGCallback(history=...).
"""


def add_plot_parser(sub: Any) -> None:
    p = subcommand(sub, "plot", plot, PLOT_HELP, PLOT_DESCRIPTION)
    p.add_argument("files", nargs="+", metavar="FILE", help=".csv or .jsonl files")
    p.add_argument("--out", required=True, metavar="PNG", help="the figure to write")
    p.add_argument(
        "--metric",
        action="append",
        help="column to plot (repeatable): meg, known_meg, unknown, normalized, expected_return "
        "(default: meg, plus unknown / known_meg when present)",
    )
    p.add_argument("--title", help="figure title")


def reproduce(args: argparse.Namespace) -> int:
    from imitation_meg.runners import ResultsFolderBusyError, UnitsFailedError, run_config

    resources = _unit_resources(args)
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
        print(f"imitation-meg reproduce: {one_line(e)}", file=sys.stderr)
        return 1
    except ResultsFolderBusyError as e:
        print(f"imitation-meg reproduce: error: {one_line(e)}", file=sys.stderr)
        return 2
    if args.dry_run:
        _print_dry_run(out)
    return 0


def _unit_resources(args: argparse.Namespace) -> dict[str, float]:
    """Ray resources per unit from ``--cpus-per-unit`` / ``--gpus-per-unit`` (``>= 0``, Ray
    only)."""
    resources: dict[str, float] = {}
    for flag, key in (("cpus_per_unit", "num_cpus"), ("gpus_per_unit", "num_gpus")):
        value = getattr(args, flag)
        if value is not None:
            if value < 0:
                raise ValueError(f"--{flag.replace('_', '-')} must be >= 0, got {value}.")
            resources[key] = value
    if resources and args.backend != "ray":
        raise ValueError("--cpus-per-unit / --gpus-per-unit apply to --backend ray only.")
    return resources


def _print_dry_run(out: dict[str, Any]) -> None:
    """What a dry run found: the units done and the ones missing."""
    print(
        f"{out['study']}: {out['units']} units, {len(out['done'])} done, "
        f"{len(out['missing'])} missing ({out['units_dir']})"
    )
    for unit in out["missing"]:
        print(f"  missing {unit}")


def publish(args: argparse.Namespace) -> int:
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


REPRODUCE_HELP = "run a study from its YAML config (serial, local processes or Ray)"
REPRODUCE_DESCRIPTION = """
    Run a study from its YAML config. Its units (seeds x configurations x agents ...) run on the
    chosen backend and are saved one file each under <results_dir>/units/, so an interrupted run
    resumes where it stopped; the results are the same bytes on every backend. Full runs write
    under results/; 'imitation-meg publish' copies a finished run into docs/results/.
"""
PUBLISH_HELP = "copy a finished run's results into docs/results/"
PUBLISH_DESCRIPTION = """
    Copy the result files of a finished run (tables, JSON, figures, run log; not its units/) from
    its results folder into docs/results/<name>/.
"""


def add_reproduce_parsers(sub: Any) -> None:
    rep = subcommand(sub, "reproduce", reproduce, REPRODUCE_HELP, REPRODUCE_DESCRIPTION)
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

    pub = subcommand(sub, "publish", publish, PUBLISH_HELP, PUBLISH_DESCRIPTION)
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
