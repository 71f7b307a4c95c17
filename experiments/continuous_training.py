"""How goal-directed do SB3 agents with continuous actions become as they learn?

Trains SAC and PPO on Pendulum-v1 and MountainCarContinuous-v0 (hyperparameters after
rl-baselines3-zoo's, without observation normalisation), saves checkpoints, and scores each
with the Box soft Q-fits (:func:`imitation_meg.approx.meg_approx` with ``method="soft_q"``:
known-utility MEG for the environment's reward against the uniform density on the action box,
the episodic finite-horizon model), its interval and the policy's
certificate ``E_pi[sum_t KL(pi || u)]``, beside the checkpoint's mean return. SAC is scored as
its squashed Gaussian, PPO as its Gaussian clipped to the box (what the environment receives).

Units: one per (environment, algorithm, seed): a unit trains its agent once and scores each of
its checkpoints.

Run: ``imitation-meg reproduce configs/continuous_training.yaml``.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pathlib
import sys
from typing import Any

import torch as th

from imitation_meg.approx import ApproxOptions, meg_approx
from imitation_meg.approx.evaluate import exceeds_certificate
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import follow_results_dir
from imitation_meg.training import train_in_stages

UNIT_RESOURCES = {"num_cpus": 1}
# Fields that only choose units (each unit holds its own values): a run of some of them reuses the
# units of a wider run, and the reverse.
SWEEP_FIELDS = ("envs", "timesteps", "horizons", "algos", "seeds")
ENVS = ("Pendulum-v1", "MountainCarContinuous-v0")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the study (YAML keys of the same names)."""

    results_dir: str = "results/continuous_training"
    checkpoint_dir: str | None = None  # None: <results_dir>/checkpoints
    envs: tuple[str, ...] = ENVS
    timesteps: tuple[int, ...] = (20_000, 50_000)
    horizons: tuple[int | None, ...] = (None, None)
    algos: tuple[str, ...] = ("sac", "ppo")
    ppo_timesteps_factor: int = 5
    ppo_n_steps: int | None = None  # None: the zoo's rollout length (the fast config's: 64)
    seeds: tuple[int, ...] = (0,)
    n_checkpoints: int = 3
    n_data_steps: int = 30_000
    n_eval_episodes: int = 30
    n_models: int = 3
    hidden: tuple[int, ...] = (64, 64)
    iterations: int | None = None
    steps_per_iteration: int | None = None
    refine: int = 1
    n_boot: int = 300

    def __post_init__(self) -> None:
        """Put the checkpoints under ``results_dir`` unless given."""
        follow_results_dir(self, checkpoint_dir="checkpoints")


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per (environment, algorithm, seed)."""
    if not (len(cfg.timesteps) == len(cfg.horizons) == len(cfg.envs)):
        raise ValueError(
            f"timesteps {cfg.timesteps} and horizons {cfg.horizons} must give one value per env "
            f"{cfg.envs}."
        )
    out = []
    for (e, n, h), a, s in itertools.product(
        zip(cfg.envs, cfg.timesteps, cfg.horizons, strict=True), cfg.algos, cfg.seeds
    ):
        steps = int(n) * (cfg.ppo_timesteps_factor if a == "ppo" else 1)
        out.append({"env": e, "timesteps": steps, "horizon": h, "algo": a, "seed": int(s)})
    return out


#: rl-baselines3-zoo's settings for MountainCarContinuous (SAC, PPO); the rollout length of PPO
#: is the config's ``ppo_n_steps`` when set.
ZOO_MCC: dict[str, dict[str, Any]] = {
    "sac": {
        "learning_rate": 3e-4,
        "buffer_size": 50_000,
        "batch_size": 512,
        "ent_coef": 0.1,
        "train_freq": 32,
        "gradient_steps": 32,
        "gamma": 0.9999,
        "tau": 0.01,
        "learning_starts": 0,
        "use_sde": True,
        "policy_kwargs": {"log_std_init": -3.67, "net_arch": [64, 64]},
    },
    "ppo": {
        "batch_size": 256,
        "n_steps": 8,
        "gamma": 0.9999,
        "learning_rate": 7.77e-5,
        "ent_coef": 0.00429,
        "clip_range": 0.1,
        "n_epochs": 10,
        "gae_lambda": 0.9,
        "max_grad_norm": 5,
        "vf_coef": 0.19,
        "use_sde": True,
        "policy_kwargs": {"log_std_init": -3.29, "ortho_init": False},
    },
}


def make_agent(env_id: str, algo: str, seed: int, ppo_n_steps: int | None = None) -> Any:
    """An SB3 agent with rl-baselines3-zoo's settings for ``env_id`` (CPU, no normalisation;
    ``ppo_n_steps`` replaces PPO's rollout length)."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env

    common: dict[str, Any] = {"seed": seed, "device": "cpu", "verbose": 0}
    if algo not in ("sac", "ppo"):
        raise ValueError(f"unknown algo {algo!r}; choose sac or ppo.")
    cls = sb3.SAC if algo == "sac" else sb3.PPO
    if env_id == "MountainCarContinuous-v0":
        settings = copy.deepcopy(ZOO_MCC[algo])  # SB3 writes into policy_kwargs
        if algo == "ppo" and ppo_n_steps:
            settings["n_steps"] = ppo_n_steps
        return cls("MlpPolicy", env_id, **settings, **common)
    if algo == "sac":
        return sb3.SAC("MlpPolicy", env_id, learning_rate=1e-3, **common)
    n_steps = ppo_n_steps or 1024
    rollout = {"n_steps": n_steps, "batch_size": min(64, 4 * n_steps), "gae_lambda": 0.95}
    return sb3.PPO(
        "MlpPolicy",
        make_vec_env(env_id, n_envs=4, seed=seed),
        **rollout,
        gamma=0.9,
        n_epochs=10,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        use_sde=True,
        sde_sample_freq=4,
        **common,
    )


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train one agent, score each checkpoint (the first is the untrained agent)."""
    th.set_num_threads(1)
    env_id, algo, seed, total = unit["env"], unit["algo"], unit["seed"], unit["timesteps"]
    model = make_agent(env_id, algo, seed, cfg.ppo_n_steps)
    rows = []
    stem = f"{env_id}_{algo}_seed{seed}"
    for done, path in train_in_stages(model, total, cfg.n_checkpoints, cfg.checkpoint_dir, stem):
        res = meg_approx(
            model,
            env_id,
            horizon=unit["horizon"],
            options=ApproxOptions.from_fields(cfg, method="soft_q", seed=seed),
        )
        rows.append(
            {
                **unit,
                "horizon": res.horizon,
                "steps": done,
                "meg": res.meg,
                "low": res.low,
                "high": res.high,
                "certificate": res.certificate,
                "normalized": res.normalized,
                "beta": res.beta,
                "mean_return": res.expected_return,
                "mean_length": res.mean_length,
                "seed_std": res.seed_std,
                "stages": list(res.stages),
                "residual_rms": res.residual_rms,
                "n_env_steps": res.n_env_steps,
                "checkpoint": str(path),
            }
        )
    return {"rows": rows}


def _mark_clipped(ax: Any, sel: list[Any], color: str | None) -> None:
    """Crosses where the value is the certificate by clipping, not an estimate."""
    flagged = [r for r in sel if r["above_certificate"]]
    if flagged:
        ax.scatter(
            [r["steps"] for r in flagged],
            [r["meg"] for r in flagged],
            marker="x",
            s=70,
            color="black",
            zorder=5,
            label="clipped to the certificate",
        )


def _plot(path: pathlib.Path, cfg: Config, rows: list[dict[str, Any]]) -> pathlib.Path:
    from imitation_meg.plotting import plot_meg_checkpoints

    return plot_meg_checkpoints(
        path,
        rows,
        cfg,
        colors={"sac": "#2ca02c", "ppo": "#1f77b4"},
        ylabel="MEG (nats per episode)",
        title=lambda env_id, sel: f"{env_id} (H = {sel[0]['horizon'] if sel else '?'})",
        decorate=_mark_clipped,
    )


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The table of every checkpoint and the figure."""
    rows = [r for res in results for r in res["rows"]]
    for r in rows:  # the estimator's flag, from the last stage's mean before clipping
        r["above_certificate"] = exceeds_certificate(r["stages"][-1], r["certificate"])
    out = pathlib.Path(cfg.results_dir)
    fig = _plot(out / "meg_vs_steps.png", cfg, rows)
    return write_results(out, cfg, {"results": rows}, figures=[str(fig)])


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)
