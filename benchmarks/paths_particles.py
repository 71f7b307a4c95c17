"""The paths method at CartPole's full horizon as the splitting grows: does the estimate move?

No exact value exists at ``H = 500`` (complete enumeration stops near ``H = 24``), so this
checks the splitting against itself: the same agent scored with ``n_particles`` from a quarter
to sixteen times the default, three seeds each. An estimate that drifts with the particles, or
intervals that do not overlap, would say the default is too few.

Usage (from the repository root; about 5 minutes on one core)::

    python benchmarks/paths_particles.py PPO_ZIP [ALGO]

Prints one row per (particles, seed): the estimate, its interval, the splitting's bias
allowance, and the seconds of the call.
"""

from __future__ import annotations

import sys

import torch as th

from imitation_meg.approx import meg_approx


def main(path: str, algo: str = "ppo") -> None:
    th.set_num_threads(1)
    print("particles  seed  MEG       interval              bias      seconds")
    for n in (256, 1024, 4096, 16384):
        for seed in (0, 1, 2):
            res = meg_approx(path, "CartPole-v1", algo=algo, n_particles=n, seed=seed)
            assert res.method == "paths"
            print(
                f"{n:9d}  {seed:4d}  {res.meg:8.4f}  [{res.low:8.4f}, {res.high:8.4f}]  "
                f"{res.particle_bias:8.5f}  {res.wall_time_s:7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main(*sys.argv[1:])
