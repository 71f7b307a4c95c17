"""How goal-directed do SB3 agents become on classic control tasks as they learn?

Trains PPO and DQN on CartPole-v1, Acrobot-v1 and MountainCar-v0 (small MLPs, hyperparameters
after rl-baselines3-zoo's, scaled to a short budget), saves checkpoints, and scores every
checkpoint with the approximate known-utility MEG (the environment's reward, the episodic
finite-horizon model of :mod:`imitation_meg.approx`), its bootstrap interval and the bound
``E_pi[T] log|A|``, beside the checkpoint's mean return. DQN is scored as its epsilon-greedy
policy with ``dqn_epsilon``.

Units: one per (environment, algorithm, seed): a unit trains its agent once and scores each of
its checkpoints (training is sequential, so finer units would retrain).

Run: ``imitation-meg reproduce configs/approx_training.yaml``.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys
from typing import Any

import torch as th

from imitation_meg.approx import ApproxOptions, meg_approx
from imitation_meg.approx.options import AVERAGE, LAST_STEPS, LR, check_config
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values, follow_results_dir
from imitation_meg.training import ZOO_DQN, train_in_stages

UNIT_RESOURCES = {"num_cpus": 1}
# Fields that only choose units (each unit holds its own values): a run of some of them reuses the
# units of a wider run, and the reverse.
SWEEP_FIELDS = ("envs", "timesteps", "algos", "seeds")
ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the training study (YAML keys of the same names)."""

    results_dir: str = "results/approx_training"
    checkpoint_dir: str | None = None  # None: <results_dir>/checkpoints
    envs: tuple[str, ...] = ENVS
    timesteps: tuple[int, ...] = (60_000, 100_000, 120_000)
    algos: tuple[str, ...] = ("ppo", "dqn")
    seeds: tuple[int, ...] = (0,)
    n_checkpoints: int = 4
    dqn_epsilon: float = 0.05
    horizon: int | None = None
    n_data_steps: int = 15_000
    n_eval_episodes: int = 60
    n_models: int = 2
    hidden: tuple[int, ...] = (64, 64)
    iterations: int | None = None
    steps_per_iteration: int | None = None
    refine: int = 1
    average: float = AVERAGE
    lr: float = LR
    last_steps: int = LAST_STEPS
    n_boot: int = 300
    method: str | None = None  # the library's default: the paths on CartPole, else soft Q-fits
    progress: bool = False

    def __post_init__(self) -> None:
        """Put the checkpoints under ``results_dir`` unless given; refuse bad values when the
        config is loaded, before any unit runs."""
        follow_results_dir(self, checkpoint_dir="checkpoints")
        check_config(self)  # the estimator's settings, as meg_approx accepts them
        check_values(
            self,
            positive=("timesteps", "n_checkpoints", "horizon"),
            non_negative=("seeds",),
            probabilities=("dqn_epsilon",),
        )


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per (environment, algorithm, seed)."""
    if len(cfg.timesteps) != len(cfg.envs):
        raise ValueError(f"timesteps {cfg.timesteps} must give one budget per env {cfg.envs}.")
    return [
        {"env": e, "timesteps": int(n), "algo": a, "seed": int(s)}
        for (e, n), a, s in itertools.product(
            zip(cfg.envs, cfg.timesteps, strict=True), cfg.algos, cfg.seeds
        )
    ]


def make_agent(env_id: str, algo: str, seed: int, timesteps: int) -> Any:
    """An SB3 agent with zoo-like settings for ``env_id`` (64-unit MLPs, CPU)."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env

    common: dict[str, Any] = {"seed": seed, "device": "cpu", "verbose": 0}
    if algo == "ppo":
        n_envs, n_steps = (8, 32) if env_id == "CartPole-v1" else (16, 256)
        venv = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        return sb3.PPO(
            "MlpPolicy",
            venv,
            n_steps=n_steps,
            batch_size=256,
            gae_lambda=0.8 if env_id == "CartPole-v1" else 0.94,
            gamma=0.98 if env_id == "CartPole-v1" else 0.99,
            n_epochs=20 if env_id == "CartPole-v1" else 4,
            learning_rate=1e-3 if env_id == "CartPole-v1" else 3e-4,
            ent_coef=0.0,
            policy_kwargs={"net_arch": [64, 64]},
            **common,
        )
    if algo == "dqn":
        venv = make_vec_env(env_id, n_envs=1, seed=seed)
        settings = ZOO_DQN.get(env_id, {})
        return sb3.DQN(
            "MlpPolicy", venv, policy_kwargs={"net_arch": [64, 64]}, **settings, **common
        )
    raise ValueError(f"unknown algo {algo!r}; choose ppo or dqn.")


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train one agent, score each checkpoint."""
    th.set_num_threads(1)
    env_id, algo, seed, total = unit["env"], unit["algo"], unit["seed"], unit["timesteps"]
    model = make_agent(env_id, algo, seed, total)
    rows = []
    stem = f"{env_id}_{algo}_seed{seed}"
    for done, path in train_in_stages(model, total, cfg.n_checkpoints, cfg.checkpoint_dir, stem):
        res = meg_approx(
            model,
            env_id,
            epsilon=cfg.dqn_epsilon if algo == "dqn" else None,
            horizon=cfg.horizon,
            options=ApproxOptions.from_fields(cfg, seed=seed),
        )
        rows.append(
            {
                **unit,
                "steps": done,
                "meg": res.meg,
                "low": res.low,
                "high": res.high,
                "length_normalized": res.length_normalized,
                "bound": res.length_bound,
                "certificate": res.certificate,
                "beta": res.beta,
                "mean_return": res.expected_return,
                "mean_length": res.mean_length,
                "seed_std": res.seed_std,
                "refine_shift": res.refine_shift,
                "residual_rms": res.residual_rms,
                "n_env_steps": res.n_env_steps,
                "checkpoint": str(path),
            }
        )
    return {"rows": rows}


def _plot(path: pathlib.Path, cfg: Config, rows: list[dict[str, Any]]) -> pathlib.Path:
    from imitation_meg.plotting import plot_meg_checkpoints

    def bound(ax: Any, sel: list[Any], color: str | None) -> None:
        ax.plot([r["steps"] for r in sel], [r["bound"] for r in sel], ":", color=color, lw=0.8)

    return plot_meg_checkpoints(
        path,
        rows,
        cfg,
        colors={"ppo": "#1f77b4", "dqn": "#d62728"},
        ylabel="MEG (nats); dotted: E[T] log|A|",
        panel_width=4.3,
        decorate=bound,
    )


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The table of every checkpoint and the figure (wall times are in the runner's ``run.json``)."""
    rows = [r for res in results for r in res["rows"]]
    out = pathlib.Path(cfg.results_dir)
    fig = _plot(out / "meg_vs_steps.png", cfg, rows)
    return write_results(out, cfg, {"results": rows}, figures=[str(fig)])


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)
