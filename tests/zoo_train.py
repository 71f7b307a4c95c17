"""Train a real RL Zoo run folder for a test: ``python -m rl_zoo3.train`` in a subprocess."""

from __future__ import annotations

import pathlib
import subprocess
import sys


def train_zoo(
    algo: str,
    env_id: str,
    folder: pathlib.Path,
    *extra: str,
    timeout: float = 600,
    cwd: pathlib.Path | None = None,
) -> pathlib.Path:
    """Run the RL Zoo's own training script for ``algo`` on ``env_id`` into ``folder / "logs"``
    (seed 0, on the CPU, no evaluation during training; ``extra``: further arguments such as
    ``-n``, ``-conf`` or ``--gym-packages``) and return that logs folder; the test fails with
    the script's output tail where it fails."""
    logs = pathlib.Path(folder) / "logs"
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", env_id, *extra]
    cmd += ["-f", str(logs), "--seed", "0", "--device", "cpu", "--eval-freq", "-1"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return logs
