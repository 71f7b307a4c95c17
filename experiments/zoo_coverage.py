"""Coverage of the RL Zoo's families: an agent per row trained with the Zoo, scored from its run folder.

For each row: train an agent with the RL Zoo's own script (``python -m rl_zoo3.train``: the
Zoo's hyperparameters and wrappers, a short budget, seed 0, one thread, no evaluation during
training), saved as the Zoo saves it (a run folder), unless that folder exists; read how good it
is from the Zoo's monitor files (the mean return of the last training episodes); then score it
with the command line as a user would, ``imitation-meg score --policy <run folder> [--horizon H]``
(as ``python -m imitation_meg.cli``) in a subprocess under ``/usr/bin/time -v``, and record the
exit code, the method, the estimate and its interval, the CPU time (user + system), the peak
resident memory, and the one-line refusal where the command exits 2.

A row whose task the installed Zoo lists under another id (rl-zoo3 2.2.1 gives the MuJoCo
``-v4`` tasks' SAC entry under ``-v3`` only) names that id in ``zoo_entry``: its entry is copied,
unchanged, into a file passed with ``-conf``.

Units: one per row. Run: ``imitation-meg reproduce configs/zoo_coverage.yaml``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from typing import Any

from imitation_meg.results import markdown_table, write_results
from imitation_meg.runners import run_serially


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the coverage table (YAML keys of the same names).

    Attributes:
        name: the row's label (the unit's name; the agent's folder is named after it).
        family: the Zoo's family (classic control, Box2D, MuJoCo, Atari).
        env: the gymnasium id the Zoo trains on.
        algo: the Zoo's algorithm name (``ppo``, ``sac``, ``dqn``).
        timesteps: the training budget (``-n``).
        zoo_args: further ``rl_zoo3.train`` arguments (``--hyperparams``, ``--env-kwargs``).
        zoo_entry: the id whose entry of the Zoo's ``hyperparams/<algo>.yml`` to train with
            (``None``: the Zoo's own entry for ``env``).
        horizon: ``--horizon`` of the score (``None``: the environment's).
        score_args: further ``imitation-meg score`` arguments (``--approx-option``).
        validated: whether and where the docs validate this family's estimate on held-out
            cases.
    """

    name: str
    family: str
    env: str
    algo: str
    timesteps: int
    zoo_args: tuple[str, ...] = ()
    zoo_entry: str | None = None
    horizon: int | None = None
    score_args: tuple[str, ...] = ()
    validated: str = "no"


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the coverage study (YAML keys of the same names)."""

    results_dir: str = "results/zoo_coverage"
    rows: tuple[Row, ...] = ()
    seed: int = 0
    last_episodes: int = 10
    gym_packages: tuple[str, ...] = ("ale_py",)


SWEEP_FIELDS = ("rows",)
# Wall-clock, CPU and memory measurements: they differ between runs and machines.
TIMING_FIELDS = ("train_cpu_s", "train_wall_s", "score_cpu_s", "score_wall_s", "peak_rss_mib")

_CLI = ("-m", "imitation_meg.cli")


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per row (its fields)."""
    names = [r.name for r in cfg.rows]
    if len(set(names)) != len(names):
        raise ValueError(f"rows need distinct names, got {names}; rename the repeated ones.")
    return [dataclasses.asdict(r) for r in cfg.rows]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def agent_dir(cfg: Config, row: Row) -> pathlib.Path:
    """The row's Zoo log folder (``<results_dir>/agents/<name>``)."""
    return pathlib.Path(cfg.results_dir) / "agents" / _slug(row.name)


def run_folder(cfg: Config, row: Row) -> pathlib.Path:
    """Where the Zoo writes the row's run (``<agent_dir>/<algo>/<env>_1``)."""
    return agent_dir(cfg, row) / row.algo / f"{row.env}_1"


def timed(cmd: list[str], *, cwd: str | None = None) -> dict[str, Any]:
    """Run ``cmd`` under ``/usr/bin/time -v`` on one thread: exit code, stdout, its own stderr
    (without time's report), CPU seconds (user + system), wall seconds and peak RSS (MiB)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.setdefault("PYTHONWARNINGS", "default")
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=False, env=env, cwd=cwd
    )
    own, _, report = proc.stderr.partition("\tCommand being timed:")
    own = re.sub(r"^Command exited with non-zero status \d+\n?", "", own, flags=re.MULTILINE)
    stats = dict(re.findall(r"^\s*([^:\n]+?):\s*(\S+)\s*$", report, flags=re.MULTILINE))
    wall = re.search(r"Elapsed \(wall clock\)[^\n]*?\):\s*([\d:.]+)", report)
    parts = [float(p) for p in (wall.group(1) if wall else "0").split(":")]
    wall_s = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    return {
        "rc": proc.returncode,
        "stdout": proc.stdout,
        "stderr": own,
        "cpu_s": float(stats.get("User time (seconds)", 0))
        + float(stats.get("System time (seconds)", 0)),
        "wall_s": wall_s,
        "peak_mib": int(stats.get("Maximum resident set size (kbytes)", 0)) / 1024,
    }


def _zoo_conf(cfg: Config, row: Row) -> list[str]:
    """``-conf FILE`` with the Zoo's entry for ``row.zoo_entry`` filed under ``row.env``."""
    if row.zoo_entry is None:
        return []
    import rl_zoo3
    import yaml

    source = pathlib.Path(rl_zoo3.__file__).parent / "hyperparams" / f"{row.algo}.yml"
    entries = yaml.safe_load(source.read_text())
    if row.zoo_entry not in entries:
        raise ValueError(
            f"zoo_entry {row.zoo_entry!r} is not in {source} ({sorted(entries)[:8]}...); "
            "name an id the installed Zoo lists."
        )
    path = agent_dir(cfg, row) / f"{row.algo}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({row.env: entries[row.zoo_entry]}))
    return ["-conf", str(path.resolve())]


def train_command(cfg: Config, row: Row) -> list[str]:
    """The ``rl_zoo3.train`` command line of the row (the log folder last)."""
    cmd = ["python", "-m", "rl_zoo3.train", "--algo", row.algo, "--env", row.env]
    cmd += ["-n", str(row.timesteps), "--seed", str(cfg.seed), "--num-threads", "1"]
    cmd += ["--eval-freq", "-1", "--device", "cpu", *row.zoo_args]
    if "NoFrameskip" in row.env or row.env.startswith("ALE/"):
        cmd += ["--gym-packages", *cfg.gym_packages]
    return cmd


def score_command(row: Row, folder: str) -> list[str]:
    """The ``imitation-meg score`` command line of the row (without ``--json``)."""
    cmd = ["imitation-meg", "score", "--policy", folder]
    if row.horizon is not None:
        cmd += ["--horizon", str(row.horizon)]
    return cmd + list(row.score_args)


def train(cfg: Config, row: Row) -> dict[str, Any]:
    """Train the row's agent with the Zoo unless its run folder holds a model (a folder left by
    an unfinished training is removed first); the training's measurements (kept in
    ``train.json`` beside the run, so a reused agent keeps them)."""
    folder = run_folder(cfg, row)
    record = agent_dir(cfg, row) / "train.json"
    if (folder / f"{row.env}.zip").is_file() and record.is_file():
        return dict(json.loads(record.read_text()))
    logs = agent_dir(cfg, row)
    # An unfinished earlier training: the Zoo would number a new run ``_2``; start afresh.
    shutil.rmtree(logs, ignore_errors=True)
    cmd = train_command(cfg, row)
    conf = _zoo_conf(cfg, row)
    out = timed([sys.executable, *cmd[1:], *conf, "-f", str(logs)])
    if out["rc"] != 0 or not (folder / f"{row.env}.zip").is_file():
        raise RuntimeError(
            f"rl_zoo3.train failed for row {row.name!r} (exit {out['rc']}):\n"
            + out["stdout"][-2000:]
            + out["stderr"][-3000:]
        )
    shown = [*cmd, *(["-conf", f"{row.algo}.yml"] if conf else []), "-f", "logs"]
    info = {
        "train_command": shlex.join(shown),
        "train_cpu_s": out["cpu_s"],
        "train_wall_s": out["wall_s"],
    }
    record.write_text(json.dumps(info, indent=1))
    return info


def training_returns(folder: pathlib.Path, last: int) -> dict[str, Any]:
    """Mean return and count of the last ``last`` finished training episodes, from the Zoo's
    monitor files (``*.monitor.csv``) in the run folder, ordered by their end time."""
    episodes: list[tuple[float, float]] = []
    for path in sorted(folder.glob("*.monitor.csv")):
        with path.open() as f:
            next(f)  # the monitor's JSON header
            episodes += [(float(r["t"]), float(r["r"])) for r in csv.DictReader(f)]
    episodes.sort()
    tail = [r for _, r in episodes[-last:]]
    return {
        "train_episodes": len(episodes),
        "mean_return": sum(tail) / len(tail) if tail else None,
        "return_episodes": len(tail),
    }


def score(cfg: Config, row: Row, folder: pathlib.Path) -> dict[str, Any]:
    """``imitation-meg score`` on the run folder, timed: the row's result fields."""
    out_json = agent_dir(cfg, row) / "score.json"
    out_json.unlink(missing_ok=True)
    cmd = score_command(row, str(folder))
    run = timed([sys.executable, *_CLI, *cmd[1:], "--json", str(out_json)])
    lines = [ln for ln in run["stderr"].splitlines() if ln.strip()]
    result: dict[str, Any] = {}
    if run["rc"] == 0 and out_json.is_file():
        result = json.loads(out_json.read_text())["result"]
    low, high = result.get("low"), result.get("high")
    return {
        "exit_code": run["rc"],
        "method": result.get("method"),
        "meg": result.get("meg"),
        "low": low,
        "high": high,
        "width": None if low is None or high is None else high - low,
        "settled": result.get("settled"),
        "horizon_scored": result.get("horizon"),
        "refusal": lines[-1] if run["rc"] != 0 and lines else None,
        "score_cpu_s": run["cpu_s"],
        "score_wall_s": run["wall_s"],
        "peak_rss_mib": run["peak_mib"],
    }


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train (or reuse) the row's agent, read its training returns and score its run folder."""
    row = Row(
        **{**unit, "zoo_args": tuple(unit["zoo_args"]), "score_args": tuple(unit["score_args"])}
    )
    info = train(cfg, row)
    folder = run_folder(cfg, row)
    shown = f"logs/{row.algo}/{row.env}_1"
    return {
        "name": row.name,
        "family": row.family,
        "env": row.env,
        "algo": row.algo,
        "timesteps": row.timesteps,
        **training_returns(folder, cfg.last_episodes),
        **score(cfg, row, folder),
        "validated": row.validated,
        "train_command": info["train_command"],
        "score_command": shlex.join(score_command(row, shown)),
        "train_cpu_s": info["train_cpu_s"],
        "train_wall_s": info["train_wall_s"],
    }


def _num(x: Any, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _horizon(r: dict[str, Any]) -> str:
    """The scored horizon, else the one the command asked for, else the environment's."""
    if r.get("horizon_scored") is not None:
        return str(r["horizon_scored"])
    asked = re.search(r"--horizon (\S+)", r.get("score_command", ""))
    return asked.group(1) if asked else "default"


def table(rows: list[dict[str, Any]]) -> str:
    """The coverage table in Markdown (a row per unit, refusals included)."""
    header = [
        "family",
        "environment",
        "algorithm (steps)",
        "training CPU (s)",
        "mean training return (last episodes)",
        "H",
        "exit",
        "method",
        "estimate [95% interval]",
        "interval width",
        "score CPU (s)",
        "peak memory (MiB)",
        "validated",
    ]
    body = []
    for r in rows:
        if r["exit_code"] == 0:
            estimate = f"{_num(r['meg'])} [{_num(r['low'])}, {_num(r['high'])}]"
            if r.get("settled") is False:
                estimate += " (not settled)"
        else:
            estimate = f"refused: {r['refusal']}"
        ret = (
            "no episode finished"
            if r["mean_return"] is None
            else f"{r['mean_return']:.1f} ({r['return_episodes']})"
        )
        setting = re.search(r"--env-kwargs (\S+)", r.get("train_command", ""))
        body.append(
            [
                r["family"],
                r["env"] + (f" ({setting.group(1)})" if setting else ""),
                f"{r['algo'].upper()} ({r['timesteps']:,})",
                f"{r['train_cpu_s']:.0f}",
                ret,
                _horizon(r),
                r["exit_code"],
                r["method"] or "-",
                estimate,
                _num(r["width"]),
                f"{r['score_cpu_s']:.0f}",
                f"{r['peak_rss_mib']:.0f}",
                r["validated"],
            ]
        )
    return markdown_table(header, body)


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``rows.csv`` and ``results.json``."""
    return write_results(cfg.results_dir, cfg, {"rows": results})


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
