"""Exact MEG of RL Zoo Atari agents on their games' own enumerated MDPs.

For each game: train an agent with the RL Zoo (``python -m rl_zoo3.train``: the Zoo's Atari
hyperparameters, its ``AtariWrapper`` and 4-frame stack; a short budget), saved as the Zoo saves
it (a run folder), and measure its mean return over whole games. For each case: enumerate every
state the game reaches within the horizon (:func:`imitation_meg.envs.enumerate_mdp`: the
emulator state with the agent's frame stack, the environment exactly as the run's
``config.yml`` wraps it, the Zoo's clipped reward), from the reset or after a number of no-ops
(``GAME:HORIZON:NOOPS``) or after a named list of actions (``GAME:HORIZON:NAME``, ``NAME`` a key
of ``warmups``): short horizons from the reset reach no reward, so there every policy's
known-utility MEG is 0. Read the agent's policy in every state in batches, and compute exact
known-utility MEG (the clipped reward) and unknown-utility MEG over every utility of the state,
with the sizes, times and the peak resident memory of the enumeration.

Units: one per case. Run: ``imitation-meg reproduce configs/atari_exact.yaml``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import subprocess
import sys
import time
import warnings
from typing import Any

import numpy as np

import imitation_meg as im
from imitation_meg.envs.emulator import emulator_policy_table, enumerate_mdp, make_atari
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the Atari study (YAML keys of the same names)."""

    results_dir: str = "results/atari_exact"
    agents_dir: str = "results/atari_exact/agents"
    cases: tuple[str, ...] = ("BreakoutNoFrameskip-v4:2",)
    algo: str = "ppo"
    timesteps: int = 20_000
    zoo_args: tuple[str, ...] = ()
    warmups: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    seed: int = 0
    eval_episodes: int = 3
    max_states: int = 200_000
    unknown: bool = True
    batch_size: int = 512
    progress: bool = True


# (A unit carries its warmup's actions, so the names in warmups only choose units.)
SWEEP_FIELDS = ("cases", "warmups")
# Wall-clock and memory measurements: they differ between runs and machines.
TIMING_FIELDS = ("build_s", "peak_rss_mb", "table_s", "known_s", "unknown_s", "train_s")


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per ``GAME:HORIZON``, ``GAME:HORIZON:NOOPS`` or ``GAME:HORIZON:NAME`` case
    (no-ops, or the actions ``warmups[NAME]``, before the start)."""
    out = []
    for item in cfg.cases:
        game, *rest = item.split(":")
        if len(rest) not in (1, 2) or not rest[0].isdigit():
            raise ValueError(f"cases entries are 'GAME:HORIZON[:NOOPS or NAME]', got {item!r}.")
        unit: dict[str, Any] = {"game": game, "horizon": int(rest[0])}
        if len(rest) == 2:
            if rest[1].isdigit():
                if int(rest[1]) > 0:
                    unit["warmup"] = [0] * int(rest[1])
            elif rest[1] in cfg.warmups:
                unit["warmup"] = [int(a) for a in cfg.warmups[rest[1]]]
                unit["warmup_name"] = rest[1]
            else:
                raise ValueError(
                    f"case {item!r} names the warmup {rest[1]!r}, which warmups does not hold "
                    f"({sorted(cfg.warmups)})."
                )
        out.append(unit)
    return out


def run_folder(cfg: Config, game: str) -> pathlib.Path:
    """Where the Zoo writes the game's run (``<agents_dir>/<game>/<algo>/<game>_1``)."""
    return pathlib.Path(cfg.agents_dir) / game / cfg.algo / f"{game}_1"


def train(cfg: Config, game: str) -> tuple[pathlib.Path, float]:
    """The game's Zoo run folder, trained with ``rl_zoo3.train`` unless it exists; and the
    training's wall-clock seconds (0 when it existed)."""
    folder = run_folder(cfg, game)
    if (folder / f"{game}.zip").is_file():
        return folder, 0.0
    cmd = [
        sys.executable,
        "-m",
        "rl_zoo3.train",
        "--algo",
        cfg.algo,
        "--env",
        game,
        "-n",
        str(cfg.timesteps),
        "--seed",
        str(cfg.seed),
        "--num-threads",
        "1",
        "--eval-freq",
        "-1",
        "--gym-packages",
        "ale_py",
        "--device",
        "cpu",
        "-f",
        str(pathlib.Path(cfg.agents_dir) / game),
        *cfg.zoo_args,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not (folder / f"{game}.zip").is_file():
        raise RuntimeError(
            f"rl_zoo3.train failed for {game} (exit {proc.returncode}):\n"
            + proc.stdout[-2000:]
            + proc.stderr[-3000:]
        )
    return folder, time.perf_counter() - t0


def _wrapper_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """``AtariWrapper``'s keyword arguments from a Zoo ``config.yml`` (``env_wrapper`` is a
    class path, or a list / dict of them with their arguments)."""
    wrapper = config.get("env_wrapper")
    items = wrapper if isinstance(wrapper, list) else [wrapper]
    for item in items:
        if isinstance(item, dict):
            for path, kwargs in item.items():
                if path.endswith("AtariWrapper"):
                    return dict(kwargs or {})
        elif isinstance(item, str) and item.endswith("AtariWrapper"):
            return {}
    raise ValueError(f"the run's config.yml has no AtariWrapper (env_wrapper: {wrapper!r}).")


def _load(folder: pathlib.Path) -> tuple[Any, Any]:
    """The run (read as the library reads Zoo folders) and its model."""
    from imitation_meg.adapters.saved_models import load_model
    from imitation_meg.adapters.zoo import ZooWrapperWarning, read_zoo_run

    with warnings.catch_warnings():
        # The wrapper and frame stack are applied here, by the enumeration.
        warnings.simplefilter("ignore", ZooWrapperWarning)
        run = read_zoo_run(folder)
    return run, load_model(run.model, device="cpu")


def mean_return(run: Any, model: Any, episodes: int, seed: int) -> tuple[float, float]:
    """Mean and standard deviation of the agent's score over whole games (its stochastic
    policy; the game's own, unclipped score, from the Monitor beneath the ``AtariWrapper``)."""
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecFrameStack

    venv = make_atari_env(
        run.env_id,
        n_envs=1,
        seed=seed + 1000,
        wrapper_kwargs=_wrapper_kwargs(run.config),
        env_kwargs=run.env_kwargs,
    )
    venv = VecFrameStack(venv, n_stack=int(run.config.get("frame_stack", 1)))
    returns, _lengths = evaluate_policy(
        model, venv, n_eval_episodes=episodes, deterministic=False, return_episode_rewards=True
    )
    venv.close()
    return float(np.mean(returns)), float(np.std(returns))


def _reset_peak_rss() -> None:
    """Reset the kernel's high-water mark of resident memory (Linux ``clear_refs``)."""
    with contextlib.suppress(OSError):
        pathlib.Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mb() -> float:
    """The process's peak resident memory since the last reset, in MiB (``VmHWM``)."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _start_label(unit: dict[str, Any]) -> str:
    """Where the enumeration starts: ``reset``, ``N no-ops`` or ``NAME (N actions)``."""
    warmup = unit.get("warmup", [])
    if not warmup:
        return "reset"
    if "warmup_name" in unit:
        return f"{unit['warmup_name']} ({len(warmup)} actions)"
    return f"{len(warmup)} no-ops"


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train (or reuse) the game's agent, enumerate the game to the horizon and score it."""
    from imitation_meg.adapters.sb3 import SB3ActionProbs

    game, horizon, warmup = unit["game"], unit["horizon"], unit.get("warmup", [])
    folder, train_s = train(cfg, game)
    run, model = _load(folder)
    # (make_atari first: it registers the ALE's ids with gymnasium.)
    env = make_atari(game, wrapper_kwargs=_wrapper_kwargs(run.config), **run.env_kwargs)
    ret, ret_std = mean_return(run, model, cfg.eval_episodes, cfg.seed)
    stack = int(run.config.get("frame_stack", 1))
    _reset_peak_rss()
    t0 = time.perf_counter()
    mdp = enumerate_mdp(
        env,
        horizon,
        frame_stack=stack,
        seed=cfg.seed,
        warmup=warmup,
        max_states=cfg.max_states,
        observation_matrix=False,
    )
    build_s = time.perf_counter() - t0
    peak = peak_rss_mb()
    t1 = time.perf_counter()
    pi = emulator_policy_table(
        SB3ActionProbs(model.policy), mdp, channels_first=True, batch_size=cfg.batch_size
    )
    t2 = time.perf_counter()
    known = im.meg(pi, mdp)
    t3 = time.perf_counter()
    unknown = im.meg_unknown(pi, mdp) if cfg.unknown else None
    t4 = time.perf_counter()
    optimal = im.meg(im.policies.optimal(mdp), mdp)
    md = mdp.metadata
    return {
        "game": game,
        "horizon": horizon,
        "start": _start_label(unit),
        "states": mdp.n_states,
        "actions": mdp.n_actions,
        "frontier": int(md["frontier"].sum()),
        "terminal": int(md["terminal"].sum()),
        "frames": int(md["frames"].shape[0] - 1),
        "frame_stack": stack,
        "reward": md["reward"],
        "timesteps": cfg.timesteps,
        "mean_return": ret,
        "return_std": ret_std,
        "episodes": cfg.eval_episodes,
        "agent_clipped_return_h": known.expected_utility,
        "uniform_clipped_return_h": known.uniform_expected_utility,
        "optimal_clipped_return_h": optimal.expected_utility,
        "known_meg": known.meg,
        "known_beta": known.beta,
        "unknown_meg": None if unknown is None else unknown.meg,
        "unknown_converged": None if unknown is None else bool(unknown.converged),
        "optimal_known_meg": optimal.meg,
        "bound": known.upper_bound,
        "train_s": train_s,
        "build_s": build_s,
        "peak_rss_mb": peak,
        "table_s": t2 - t1,
        "known_s": t3 - t2,
        "unknown_s": t4 - t3,
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``cases.csv`` and ``results.json``."""
    return write_results(cfg.results_dir, cfg, {"cases": results})


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
