"""Two measurements for the SB3 integration (docs/sb3.md):

- ``callback``: wall time of PPO training on the paper's 10x4 CliffWorld (seals, H = 30, the
  demo's PPO settings, 8 envs) with and without :class:`imitation_meg.callbacks.MEGCallback`,
  interleaved ``--repeats`` times in this one process (ratios under the same load).
- ``checkpoints``: eight checkpoints of one PPO run scored by eight ``imitation-meg score``
  processes against one ``imitation-meg score`` call over the glob, interleaved.

Usage:
    .venv/bin/python benchmarks/sb3_integration.py callback [--steps 16384] [--eval-freq 256]
    .venv/bin/python benchmarks/sb3_integration.py checkpoints [--repeats 2]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch as th


def _ppo(seed: int):
    from seals.diagnostics.cliff_world import CliffWorldEnv
    from stable_baselines3.common.env_util import make_vec_env

    from imitation_meg.training import make_model

    venv = make_vec_env(
        lambda: CliffWorldEnv(width=10, height=4, horizon=30, use_xy_obs=False), n_envs=8, seed=seed
    )
    return make_model("ppo", venv, seed)


def callback_overhead(steps: int, eval_freq: int, repeats: int, unknown: bool) -> None:
    from imitation_meg.callbacks import MEGCallback

    th.set_num_threads(1)
    plain, with_cb, evals, eval_s = [], [], [], []
    for r in range(repeats):
        for use in (False, True):
            model = _ppo(r)
            cb = MEGCallback(_env(), eval_freq=eval_freq, unknown=unknown) if use else None
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.learn(steps, callback=cb)
            dt = time.perf_counter() - t0
            if cb is None:
                plain.append(dt)
            else:
                with_cb.append(dt)
                evals.append(len(cb.records))
                eval_s.append(cb.eval_seconds)
    p, w = statistics.median(plain), statistics.median(with_cb)
    share = sum(eval_s) / sum(with_cb)
    print(
        f"PPO {steps} steps (8 envs), MEGCallback every {eval_freq} calls ({evals[0]} evaluations"
        f"{', unknown utility too' if unknown else ''}), {repeats} interleaved runs: median "
        f"without {p:.2f} s, with {w:.2f} s (wall ratio {w / p:.3f}); time inside the "
        f"callback's evaluations {100 * share:.2f}% of the training run "
        f"({1e3 * sum(eval_s) / sum(evals):.1f} ms per evaluation)"
    )


def _env():
    from seals.diagnostics.cliff_world import CliffWorldEnv

    return CliffWorldEnv(width=10, height=4, horizon=30, use_xy_obs=False)


def checkpoints(repeats: int) -> None:
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import CheckpointCallback

    env_id = "seals/CliffWorld7x4-v0"
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        model = sb3.PPO("MlpPolicy", env_id, n_steps=64, batch_size=64, seed=0, device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.learn(1024, callback=CheckpointCallback(128, str(d)))
        files = sorted(str(p) for p in d.glob("rl_model_*_steps.zip"))
        assert len(files) == 8, files
        base = [sys.executable, "-m", "imitation_meg.cli", "score", "--env", env_id, "--policy"]
        separate, one = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for f in files:
                subprocess.run([*base, f], check=True, capture_output=True)
            separate.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            out = d / "rows.csv"
            subprocess.run([*base, *files, "--csv", str(out)], check=True, capture_output=True)
            one.append(time.perf_counter() - t0)
            assert len(out.read_text().splitlines()) == 9  # header + 8 rows
        s, o = min(separate), min(one)
        print(
            f"8 checkpoints, best of {repeats}: 8 separate `score` calls {s:.1f} s "
            f"({s / 8:.2f} s each), one call over the 8 files {o:.1f} s: {s / o:.1f}x faster"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    cb = sub.add_parser("callback")
    cb.add_argument("--steps", type=int, default=16_384)
    cb.add_argument("--eval-freq", type=int, default=256)
    cb.add_argument("--repeats", type=int, default=3)
    cb.add_argument("--unknown", action="store_true")
    ck = sub.add_parser("checkpoints")
    ck.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.what == "callback":
        callback_overhead(args.steps, args.eval_freq, args.repeats, args.unknown)
    else:
        checkpoints(args.repeats)


if __name__ == "__main__":
    main()
