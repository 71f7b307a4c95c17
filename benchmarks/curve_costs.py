"""What a soft-value curve and each further score cost, as whole processes, quiet or beside a load.

For each ``ENV=AGENT`` pair (a gymnasium id and an SB3 zip or RL Zoo run folder) it runs, each
as its own process under ``/usr/bin/time -v``:

1. ``imitation-meg curve --env ENV --out DIR/ENV.npz`` (the environment's curve, once);
2. ``imitation-meg score --env ENV --policy AGENT --curve DIR/ENV.npz --json ...`` (one agent
   from its episodes alone),

and prints one row per pair: the curve's wall time, CPU (user + system) and peak memory, the
score's, the estimate with its interval and its width as a share of the estimate. With
``--load-procs N`` both run beside ``N`` processes multiplying 1024 x 1024 float32 matrices with
torch's default threads (:mod:`load`: two training jobs beside the score). Usage::

    python benchmarks/curve_costs.py CartPole-v1=logs/dqn/CartPole-v1_1 \
        MountainCar-v0=logs/dqn/MountainCar-v0_1 --out /tmp/costs [--load-procs 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import re
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import load

__all__ = ["main", "timed"]


def timed(argv: list[str]) -> dict[str, float]:
    """Run ``argv`` under ``/usr/bin/time -v``: wall seconds, CPU seconds, peak RSS (GiB).

    Raises:
        RuntimeError: the command failed (its last lines in the message).
    """
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *argv], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    err = proc.stderr

    def field(name: str) -> str:
        m = re.search(rf"{re.escape(name)}: (.+)", err)
        assert m is not None, name
        return m.group(1).strip()

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(p) for p in wall.split(":")]
    seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    rss = float(field("Maximum resident set size (kbytes)")) / 2**20
    return {"wall_s": seconds, "cpu_s": cpu, "peak_gib": rss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="+", metavar="ENV=AGENT")
    parser.add_argument("--out", required=True, help="folder for the curves and the scores")
    parser.add_argument("--load-procs", type=int, default=0)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cli = shutil.which("imitation-meg") or "imitation-meg"
    rows = []
    loaded = load.background_load(args.load_procs) if args.load_procs else contextlib.nullcontext()
    with loaded:
        for pair in args.pairs:
            env, _, agent = pair.partition("=")
            curve = out / f"{env}.npz"
            c = timed([cli, "curve", "--env", env, "--out", str(curve)])
            result = out / f"{env}.json"
            score = [cli, "score", "--env", env, "--policy", agent, "--curve", str(curve)]
            s = timed([*score, "--json", str(result)])
            first = json.loads(result.read_text())["rows"][0]
            rows.append({"env": env, "agent": agent, "curve": c, "score": s, "result": first})
    print(
        f"{'environment':26} {'curve wall/CPU/GiB':22} {'score wall/CPU/GiB':22} MEG [interval] width"
    )
    for r in rows:
        c, s, res = r["curve"], r["score"], r["result"]
        width = (res["high"] - res["low"]) / res["meg"] if res["meg"] > 0 else float("nan")
        print(
            f"{r['env']:26} {c['wall_s']:6.1f} {c['cpu_s']:6.1f} {c['peak_gib']:5.2f}   "
            f"{s['wall_s']:6.1f} {s['cpu_s']:6.1f} {s['peak_gib']:5.2f}   "
            f"{res['meg']:.3f} [{res['low']:.3f}, {res['high']:.3f}] {width:.1%}"
            f" settled={res['settled']}"
        )
    (out / "costs.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
