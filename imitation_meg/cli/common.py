"""What the subcommands share: their parsers' set-up, argument types, output checks, MiniGrid
layouts, one-line notes."""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any


def subcommand(
    sub: Any,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name``, which runs ``handler(args)``.

    Args:
        sub: the subparsers of ``imitation-meg`` (``parser.add_subparsers()``).
        name: the subcommand, e.g. ``"curve"``.
        handler: what the subcommand runs; it returns the exit status.
        help: its line in ``imitation-meg --help``.
        description: the text atop its own ``--help`` (default: none); its white space is
            folded, so it may be written as an indented paragraph.

    Returns:
        The subcommand's parser, to add its options to.
    """
    if description is not None:
        description = " ".join(description.split())
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    p.set_defaults(func=handler)
    return p


def horizon_arg(text: str) -> int | str:
    """``--horizon``: a positive number of decisions, or ``inf`` (with ``--discount``)."""
    if text.strip().lower() in ("inf", "infinite", "none"):
        return "inf"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of decisions or 'inf', got {text!r}"
        ) from None


def seed_arg(text: str) -> int:
    """``--seed``: a non-negative integer (numpy, torch and gymnasium seeds)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def is_minigrid(env_id: str) -> bool:
    return env_id.startswith("MiniGrid-")


def minigrid_mdp(args: argparse.Namespace, sources: Sequence[str]) -> Any:
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


def check_outputs(args: argparse.Namespace) -> None:
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
            note(f"the folder {str(path.parent)!r} for {flag} does not exist: it will be created")


def env_is_tabular(env_id: str) -> bool:
    from imitation_meg.approx.ale import register_games
    from imitation_meg.core.env_tables import is_tabular

    register_games(env_id)  # an Atari id: ale_py registers it with gymnasium
    return is_tabular(env_id)


def note(text: str) -> None:
    """A one-line note to the user on stderr (stdout carries the results)."""
    print(f"imitation-meg: {text}", file=sys.stderr, flush=True)


def one_line(e: BaseException | str) -> str:
    if isinstance(e, KeyboardInterrupt):  # empty for a plain Ctrl-C
        return " ".join(str(e).split()) or "interrupted"
    return " ".join(str(e).split()) or type(e).__name__


def command_config(args: argparse.Namespace) -> dict[str, Any]:
    """The command's settings as written beside its results (every argument but the handler)."""
    return {k: v for k, v in vars(args).items() if k != "func"}


def write_rows(args: argparse.Namespace, rows: list[dict[str, Any]], head: dict[str, Any]) -> None:
    """Write the rows as ``--csv`` / ``--jsonl``, and as ``--json`` after ``head`` with the
    command's settings and the library versions; one line per file written."""
    from imitation_meg.results import library_versions, write_csv, write_json, write_jsonl

    if args.csv:
        print(f"\nWrote {write_csv(args.csv, rows)}.")
    if args.jsonl:
        print(f"\nWrote {write_jsonl(args.jsonl, rows)}.")
    if args.json:
        payload = {
            **head,
            "config": command_config(args),
            "library_versions": library_versions(),
            "rows": rows,
        }
        print(f"\nWrote {write_json(args.json, payload)}.")
