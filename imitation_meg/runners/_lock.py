"""One run at a time per results folder: an advisory lock on ``<results_dir>/.lock``.

Two runs writing the same unit files would each run every unit and overwrite each other's
files and tables. A run holds an exclusive, non-blocking OS lock (``flock``; ``msvcrt.locking``
on Windows) on the lock file for as long as it writes; a second run finds it held and is
refused with the first run's process id, host and start time. The OS drops the lock when the
holder exits, however it ends (finished, interrupted, killed), so no stale lock is ever left to
remove by hand; the file itself stays, holding the last holder's details.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import socket
import sys
from collections.abc import Iterator
from typing import IO

__all__ = ["LOCK_NAME", "ResultsFolderBusyError", "results_lock"]

#: The lock file in the results folder (a hidden file: ``imitation-meg publish`` leaves it behind).
LOCK_NAME = ".lock"


class ResultsFolderBusyError(RuntimeError):
    """Another run is writing the same results folder."""


def _try_lock(f: IO[str]) -> bool:
    """Take an exclusive lock on ``f`` without waiting; False when another process holds it."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import msvcrt

        try:
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _holder(path: pathlib.Path) -> str:
    """The running holder, as its lock file describes it."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another run"
    return (
        f"the run with process id {info.get('pid')} on {info.get('host', '?')}, started "
        f"{info.get('started', '?')} ({info.get('command', '?')})"
    )


@contextlib.contextmanager
def results_lock(results_dir: pathlib.Path, study: str) -> Iterator[None]:
    """Hold the results folder of ``study`` for this process while the body runs.

    Args:
        results_dir: the run's results folder (created if missing).
        study: the driver's name, for the message.

    Raises:
        ResultsFolderBusyError: another process holds the folder.
    """
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / LOCK_NAME
    f = path.open("a+")
    try:
        if not _try_lock(f):
            raise ResultsFolderBusyError(
                f"the results folder {str(results_dir)!r} of {study!r} is in use by "
                f"{_holder(path)}; wait for it to finish (then rerun to resume from its units), "
                "or run into another folder with --set results_dir=<folder>."
            )
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": " ".join(sys.argv) or "python",
        }
        f.seek(0)
        f.truncate()
        f.write(json.dumps(info) + "\n")
        f.flush()
        yield
    finally:
        f.close()  # closing the file releases the lock
