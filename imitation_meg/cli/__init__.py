"""The ``imitation-meg`` command line: ``demo``, ``score``, ``curve``, ``intervene``, ``plot``,
``reproduce`` and ``publish``.

What lives here: one module per subcommand (its argument parser and what it prints), the only
code of the package that parses command lines; the work is done by the library
(:mod:`imitation_meg.scoring`, :mod:`imitation_meg.plotting`, the adapters, the estimators).

- :mod:`~imitation_meg.cli.demo`: ``demo``; :mod:`~imitation_meg.cli.score`: ``score``, which
  hands tabular environments to :mod:`~imitation_meg.cli.exact` and the others to
  :mod:`~imitation_meg.cli.approx`; :mod:`~imitation_meg.cli.curve`: ``curve``;
  :mod:`~imitation_meg.cli.intervene`: ``intervene``; :mod:`~imitation_meg.cli.study`: ``plot``,
  ``reproduce`` and ``publish``; :mod:`~imitation_meg.cli.common`: what several share (argument
  types, output checks, one-line notes).

Errors in user input end the program with exit code 2 and a one-line message on stderr, Ctrl-C
with exit code 130 and one line (``reproduce``: how many units are saved); the package's warnings
and notes are printed as one line each on stderr.

May import: the whole package (it is the top floor; nothing imports it but ``__main__``).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from imitation_meg.cli import curve, demo, intervene, score, study
from imitation_meg.cli.common import one_line
from imitation_meg.results import format_table

__all__ = ["build_parser", "format_table", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``imitation-meg``."""
    parser = argparse.ArgumentParser(
        prog="imitation-meg",
        description=(
            "Maximum entropy goal-directedness (MEG) of policies: exact in tabular environments, "
            "estimated with an interval beyond them."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo.add_parser(sub)
    study.add_reproduce_parsers(sub)
    score.add_parser(sub)
    curve.add_parser(sub)
    intervene.add_parser(sub)
    study.add_plot_parser(sub)
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
                f"imitation-meg {args.command}: warning ({name}): {one_line(message)}",
                file=sys.stderr,
            )
        else:
            show(message, category, *rest, **kw)

    warnings.showwarning = one_line_warning
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"imitation-meg {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C: one line (reproduce: what is saved), no traceback
        print(f"imitation-meg {args.command}: {one_line(e)}", file=sys.stderr, flush=True)
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
