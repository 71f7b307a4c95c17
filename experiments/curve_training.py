"""MEG of classic-control agents as they learn, logged by ``MEGCallback`` through the curve.

Each unit trains one agent with the RL Zoo's hyperparameters for its environment (the values
of rl-zoo3 2.2.1's ``hyperparams/*.yml``, :data:`ZOO`) with :class:`~imitation_meg.callbacks.
MEGCallback` attached: the environment's soft-value curve is computed just before training
(timed apart; reaching :data:`CURVE_TARGET` where one is set) and given to the callback, and
every ``eval_freq`` steps the current policy is scored from ``n_eval_episodes`` of its episodes
(known-utility MEG with its interval, to SB3's logger, so TensorBoard, and to a JSON-lines
history). The unit records the history, the training's wall and CPU time, the peak memory and
the callback's share of the training time (the overhead), with the curve and without it (a
curve computed once per environment and read from a file). The combined figure shows MEG with
its interval against training steps, one panel per environment.

Run: ``imitation-meg reproduce configs/curve_training.yaml``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import resource
import sys
import time
from typing import Any

import numpy as np

from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values
from imitation_meg.training import ZOO_DQN

UNIT_RESOURCES = {"num_cpus": 1}
SWEEP_FIELDS = ("envs", "seeds")
#: The measured times and memory, which differ between runs (left out when two are compared).
TIMING_FIELDS = (
    "wall_s",
    "cpu_s",
    "peak_rss_mib",
    "callback_s",
    "curve_s",
    "curve_cpu_s",
    "overhead",
    "overhead_evaluations",
    "timings",
    "eval_seconds",
    "max_overhead",
)

#: The RL Zoo's hyperparameters (rl-zoo3 2.2.1) for the agents trained here: the algorithm,
#: its keyword arguments and the Zoo's training budget.
ZOO: dict[str, tuple[str, dict[str, Any], int]] = {
    "CartPole-v1": (
        "ppo",
        {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": 1e-3,
            "clip_range": 0.2,
            "n_envs": 8,
        },
        100_000,
    ),
    "MountainCar-v0": (
        "dqn",
        {**ZOO_DQN["MountainCar-v0"], "policy_kwargs": {"net_arch": [256, 256]}},
        120_000,
    ),
    "Acrobot-v1": (
        "ppo",
        {
            "normalize": True,
            "n_envs": 16,
            "n_steps": 256,
            "gae_lambda": 0.94,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.0,
        },
        1_000_000,
    ),
    "Pendulum-v1": ("sac", {"learning_rate": 1e-3}, 20_000),
}


#: A mean return each environment's curve reaches before training starts (its twisted SMC
#: climbs until its paths find it), so that the evaluations of a learning agent do not extend
#: the curve again and again: about the return of the Zoo's trained agent (rl-zoo3's benchmark:
#: PPO on Acrobot-v1 -73.5). Environments not named here take the curve as computed.
CURVE_TARGET: dict[str, float] = {"Acrobot-v1": -70.0}


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the study (YAML keys of the same names)."""

    results_dir: str = "results/curve_training"
    envs: tuple[str, ...] = ("CartPole-v1", "MountainCar-v0", "Pendulum-v1")
    seeds: tuple[int, ...] = (0,)
    timesteps: tuple[int, ...] | None = None  # per environment; default the Zoo's budgets
    n_evals: int = 10
    n_eval_episodes: int = 200
    horizon: int | None = None  # default each environment's time limit
    tensorboard: bool = True
    progress: bool = False

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=("n_evals", "n_eval_episodes", "horizon", "timesteps"),
            non_negative=("seeds",),
        )
        unknown = sorted(set(self.envs) - set(ZOO))
        if unknown:
            raise ValueError(f"unknown environments {unknown}; choose from {sorted(ZOO)}.")
        if self.timesteps is not None and len(self.timesteps) != len(self.envs):
            raise ValueError(
                f"timesteps {self.timesteps} must give one budget per environment {self.envs}."
            )


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per (environment, seed)."""
    steps = cfg.timesteps or tuple(ZOO[e][2] for e in cfg.envs)
    return [
        {"env": e, "timesteps": int(n), "seed": int(s)}
        for e, n in zip(cfg.envs, steps, strict=True)
        for s in cfg.seeds
    ]


def _model(env_id: str, seed: int, tb: str | None) -> Any:
    """The Zoo's agent for ``env_id``, untrained."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    algo, kwargs, _ = ZOO[env_id]
    kwargs = dict(kwargs)
    n_envs = int(kwargs.pop("n_envs", 1))
    normalize = bool(kwargs.pop("normalize", False))
    venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:  # as the Zoo: observations and rewards, discounted with the agent's gamma
        venv = VecNormalize(venv, gamma=kwargs.get("gamma", 0.99))
    cls = {"ppo": sb3.PPO, "dqn": sb3.DQN, "sac": sb3.SAC}[algo]
    return cls("MlpPolicy", venv, seed=seed, device="cpu", tensorboard_log=tb, **kwargs)


def _curve(env_id: str, horizon: int | None, seed: int) -> tuple[Any, dict[str, float]]:
    """The environment's soft-value curve (what ``soft_value_curve(env_id, seed=seed)``
    computes, reaching :data:`CURVE_TARGET` where one is set) and its wall and CPU seconds."""
    from imitation_meg.approx.core import curve_rng
    from imitation_meg.approx.deterministic import curve_method, simulated_curve
    from imitation_meg.approx.options import ApproxOptions
    from imitation_meg.approx.rollouts import EnvSource
    from imitation_meg.approx.simulators import simulator

    t0, c0 = time.perf_counter(), time.process_time()
    source = EnvSource(env_id, horizon=horizon)
    dyn, why = simulator(source)
    if dyn is None:
        raise ValueError(f"no curve can be computed for {env_id}: {why}.")
    opts = ApproxOptions.of(None, seed=seed).resolved(
        source, simulated=curve_method(dyn), starts=getattr(dyn, "n_starts", None)
    )
    curve = simulated_curve(
        source, dyn, opts, curve_rng(opts.seed), target=CURVE_TARGET.get(env_id)
    )
    return curve, {"curve_s": time.perf_counter() - t0, "curve_cpu_s": time.process_time() - c0}


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train one agent with the callback attached; its history, wall time and overhead (the
    curve is computed first, timed apart, and given to the callback)."""
    import torch as th

    from imitation_meg.callbacks import MEGCallback

    th.set_num_threads(1)
    out = pathlib.Path(cfg.results_dir) / "runs" / f"{unit['env']}_seed{unit['seed']}"
    out.mkdir(parents=True, exist_ok=True)
    curve, curve_times = _curve(unit["env"], cfg.horizon, unit["seed"])
    history = out / "meg.jsonl"
    history.unlink(missing_ok=True)
    model = _model(unit["env"], unit["seed"], str(out / "tb") if cfg.tensorboard else None)
    n_envs = model.get_env().num_envs
    freq = max(1, unit["timesteps"] // (cfg.n_evals * n_envs))
    cb = MEGCallback(
        unit["env"],
        eval_freq=freq,
        horizon=cfg.horizon,
        n_eval_episodes=cfg.n_eval_episodes,
        history=history,
        eval_at_start=True,
        seed=unit["seed"],
        curve=curve,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(unit["timesteps"], callback=cb, progress_bar=cfg.progress)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    records = [json.loads(line) for line in history.read_text().splitlines()]
    training = max(wall - cb.eval_seconds, 1e-9)
    return {
        **unit,
        "algo": ZOO[unit["env"]][0],
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "callback_s": cb.eval_seconds,
        **curve_times,
        "curve_returns": list(curve.returns_found),
        # the curve computed at the start of this training, and given (saved once per env)
        "overhead": (cb.eval_seconds + curve_times["curve_s"]) / training,
        "overhead_evaluations": cb.eval_seconds / training,
        "timings": _timings(records),
        "records": records,
    }


def _timings(records: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds of each part of the evaluations, summed over them (the policy's episodes, their
    check in the environment, the curve's extensions, the maximum and bootstrap)."""
    total: dict[str, float] = {}
    for r in records:
        for k, v in r.get("timings", {}).items():
            total[k] = total.get(k, 0.0) + float(v)
    return total


def _plot(path: pathlib.Path, results: list[dict[str, Any]]) -> pathlib.Path:
    """MEG with its interval against training steps, one panel per environment."""
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()
    envs = list(dict.fromkeys(r["env"] for r in results))
    fig, axes = plt.subplots(1, len(envs), figsize=(4.2 * len(envs), 3.4), squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        for r in (r for r in results if r["env"] == env):
            steps = np.array([x["timesteps"] for x in r["records"]])
            meg = np.array([x["meg"] for x in r["records"]])
            lo = np.array([x["low"] for x in r["records"]])
            hi = np.array([x["high"] for x in r["records"]])
            ax.plot(steps, meg, marker="o", ms=3, label=f"{r['algo'].upper()} seed {r['seed']}")
            ax.fill_between(steps, lo, hi, alpha=0.25)
            off = [s for s, x in zip(steps, r["records"], strict=True) if not x["converged"]]
            if off:
                ax.plot(off, [0] * len(off), "x", color="red", label="not settled")
        ax.set_title(env, fontsize=9)
        ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}k")
        ax.set_xlabel("training steps")
        ax.set_ylabel("MEG (nats), 95% interval")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


#: The fields of each evaluation in the published history (``history.csv``).
_HISTORY = ("timesteps", "meg", "low", "high", "beta", "expected_return", "epsilon", "converged")


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The histories, the overhead table and the figure."""
    out = pathlib.Path(cfg.results_dir)
    summary = [
        {
            "env": r["env"],
            "algo": r["algo"],
            "seed": r["seed"],
            "timesteps": r["timesteps"],
            "wall_s": r["wall_s"],
            "cpu_s": r["cpu_s"],
            "peak_rss_mib": r["peak_rss_mib"],
            "callback_s": r["callback_s"],
            "curve_s": r["curve_s"],
            "curve_cpu_s": r["curve_cpu_s"],
            "overhead": r["overhead"],
            "overhead_evaluations": r["overhead_evaluations"],
            "timings": r["timings"],
            "curve_returns": r["curve_returns"],
            "final_meg": r["records"][-1]["meg"],
            "final_low": r["records"][-1]["low"],
            "final_high": r["records"][-1]["high"],
            "final_return": r["records"][-1]["expected_return"],
            "evaluations": len(r["records"]),
            "settled": sum(bool(x["converged"]) for x in r["records"]),
        }
        for r in results
    ]
    history = [
        {
            "env": r["env"],
            "algo": r["algo"],
            "seed": r["seed"],
            **{k: x.get(k) for k in _HISTORY},
            "eval_seconds": x["eval_seconds"],
        }
        for r in results
        for x in r["records"]
    ]
    fig = _plot(out / "meg_over_training.png", results)
    return write_results(
        out,
        cfg,
        {"summary": summary, "history": history},
        acceptance={"max_overhead": max(s["overhead"] for s in summary)},
        figures=[str(fig)],
    )


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)
