"""One known-utility MEG call, quiet and beside a load, for one or more copies of the package.

Each copy (a checkout's root, e.g. this one and an exported ``main``) runs in a fresh process
per measurement (its own imports; torch's default threads, as in a user's process). The copies
and the two conditions alternate round by round, so a change in the machine's other work hits
them alike. The load is :mod:`load`'s: ``--load-procs`` processes multiplying 1024 x 1024
float32 matrices with torch's default threads. Prints one line per measurement (best of
``--repeats`` calls after one warm-up call) and a summary.

Usage (from a checkout's root; ``git archive main | tar -x -C /tmp/main-copy`` makes a copy of
``main`` to compare against)::

    python benchmarks/beside_load.py . /tmp/main-copy --rounds 2 --repeats 3
    python benchmarks/beside_load.py . /tmp/main-copy --random 20000 --grid 0 0 20
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import load

__all__ = ["main", "measure"]

_CHILD = """
import json, sys, time
import torch as th
import imitation_meg as im
from imitation_meg.envs import cliff_world, random_mdp
width, height, horizon, eps, repeats, n_random = json.loads(sys.argv[1])
if n_random:
    mdp = random_mdp(n_random, 4, horizon, branching=4, seed=0)
else:
    mdp = cliff_world(width=width, height=height, horizon=horizon)
pi = im.policies.epsilon_greedy(mdp, eps)
threads = th.get_num_threads()
res = im.meg(pi, mdp)  # warm-up (imports, caches)
times = []
for _ in range(repeats):
    t0 = time.perf_counter()
    res = im.meg(pi, mdp)
    times.append(time.perf_counter() - t0)
print(json.dumps({"best_s": min(times), "times_s": times, "meg": res.meg,
                  "converged": bool(res.converged), "threads": threads,
                  "threads_after": th.get_num_threads()}))
"""


def measure(
    root: str, grid: tuple[int, int, int], eps: float, repeats: int, n_random: int = 0
) -> dict:
    """Time one ``meg`` call of the copy at ``root`` in a fresh process (see the module
    docstring) on CliffWorld ``grid`` (width, height, horizon), or with ``n_random`` on a
    random MDP of that many states (4 actions, 4 successors, the grid's horizon); returns the
    child's JSON record."""
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(root).resolve()))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([*grid, eps, repeats, n_random])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the measurement of {root} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[tuple[str, str], list[float]]:
    """Run the rounds; returns ``{(root, condition): [best time of each round]}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("roots", nargs="+", help="checkout roots to compare")
    p.add_argument("--grid", type=int, nargs=3, default=(100, 20, 110), metavar=("W", "H", "T"))
    p.add_argument("--random", type=int, default=0, help="states of a random MDP instead")
    p.add_argument("--eps", type=float, default=0.1, help="epsilon of the eps-greedy policy")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load-procs", type=int, default=2)
    a = p.parse_args(argv)
    best: dict[tuple[str, str], list[float]] = {}
    for rnd in range(a.rounds):
        for root in a.roots:
            for cond in ("quiet", "loaded"):
                procs = a.load_procs if cond == "loaded" else 0
                with load.background_load(procs):
                    rec = measure(root, tuple(a.grid), a.eps, a.repeats, a.random)
                best.setdefault((root, cond), []).append(rec["best_s"])
                print(
                    f"round {rnd} {root} {cond}: best {rec['best_s']:.3f} s of "
                    f"{[round(t, 3) for t in rec['times_s']]}, meg {rec['meg']:.6f}, "
                    f"converged {rec['converged']}, torch threads {rec['threads']} -> "
                    f"{rec['threads_after']}, load avg {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    for (root, cond), ts in best.items():
        print(f"{root} {cond}: best per round {[round(t, 3) for t in ts]}", flush=True)
    return best


if __name__ == "__main__":
    main()
