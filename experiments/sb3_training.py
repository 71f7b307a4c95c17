"""Beyond the paper: how goal-directed do SB3 agents become as they learn?

Trains PPO and DQN on the paper's CliffWorld (seals dynamics) and on FrozenLake with several
seeds, saves checkpoints, and scores every checkpoint's policy table exactly: known-utility MEG
(the environment reward), exact unknown-utility MEG over every utility of the state, and the
policy's exact expected return in the tabular MDP, all plotted against training steps.

DQN has no action distribution; its checkpoints are scored as epsilon-greedy policies over
their Q-values with ``dqn_epsilon`` (the final exploration rate by default).

Units: per environment, the reference policies, then one training run per algorithm and seed.
Run: ``imitation-meg reproduce configs/sb3_training.yaml --backend process --workers 2``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

import numpy as np

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values, follow_results_dir
from imitation_meg.training import ALGOS, make_model, train_in_stages

ENVS = ("cliffworld", "frozenlake")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the training study (YAML keys of the same names)."""

    results_dir: str = "results/sb3_training"
    checkpoint_dir: str | None = None  # None: <results_dir>/checkpoints
    envs: tuple[str, ...] = ENVS
    algos: tuple[str, ...] = ("ppo", "dqn")
    seeds: tuple[int, ...] = (0, 1, 2)
    timesteps: int = 60_000
    n_checkpoints: int = 8
    cliff_horizon: int = 30
    dqn_epsilon: float = 0.05
    unknown: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        """Put the checkpoints under ``results_dir`` unless given; refuse bad values when the
        config is loaded, before any unit runs."""
        follow_results_dir(self, checkpoint_dir="checkpoints")
        check_values(
            self,
            positive=("timesteps", "n_checkpoints", "cliff_horizon"),
            non_negative=("seeds",),
            probabilities=("dqn_epsilon",),
        )


def _make(env_name: str, horizon: int) -> tuple[Any, im.TabularMDP]:
    """A training environment factory and the matching tabular MDP."""
    if env_name == "cliffworld":
        from seals.diagnostics.cliff_world import CliffWorldEnv

        def factory() -> Any:
            return CliffWorldEnv(width=10, height=4, horizon=horizon, use_xy_obs=False)

        return factory, im.envs.cliff_world(width=10, height=4, horizon=horizon)
    if env_name == "frozenlake":
        import gymnasium as gym

        def factory() -> Any:
            return gym.make("FrozenLake-v1")

        return factory, im.TabularMDP.from_env("FrozenLake-v1")
    raise ValueError(f"unknown env {env_name!r}; choose from {ENVS}.")


def _score(model: Any, algo: str, mdp: im.TabularMDP, cfg: Config) -> dict[str, float]:
    pi = policy_table(model, mdp, epsilon=cfg.dqn_epsilon if algo == "dqn" else None)
    known = im.meg(pi, mdp)
    row = {
        "known": known.meg,
        "expected_return": known.expected_utility,
        "optimal_return": float("nan"),
    }
    if cfg.unknown:
        row["unknown_exact"] = im.meg_unknown(pi, mdp).meg
    return row


def _train_one(env_name: str, algo: str, seed: int, cfg: Config) -> list[dict[str, Any]]:
    from stable_baselines3.common.env_util import make_vec_env

    factory, mdp = _make(env_name, cfg.cliff_horizon)
    n_envs = 1 if algo == "dqn" else 8
    venv = make_vec_env(factory, n_envs=n_envs, seed=seed)
    model = make_model(algo, venv, seed, dqn_epsilon=cfg.dqn_epsilon, timesteps=cfg.timesteps)
    stem = f"{env_name}_{algo}_seed{seed}"
    rows = [
        {
            "env": env_name,
            "algo": algo,
            "seed": seed,
            "steps": done,
            **_score(model, algo, mdp, cfg),
        }
        for done, _path in train_in_stages(
            model, cfg.timesteps, cfg.n_checkpoints, cfg.checkpoint_dir, stem
        )
    ]
    venv.close()
    return rows


def _plot(
    path: pathlib.Path,
    rows: list[dict[str, Any]],
    env_name: str,
    cfg: Config,
    reference: dict[str, float],
) -> pathlib.Path:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()
    fig, (ax_meg, ax_ret) = plt.subplots(1, 2, figsize=(10, 3.8))
    colors = {"ppo": "#1f77b4", "dqn": "#d62728", "a2c": "#2ca02c"}
    for algo in cfg.algos:
        sel = [r for r in rows if r["env"] == env_name and r["algo"] == algo]
        if not sel:
            continue
        steps = sorted({r["steps"] for r in sel})

        def stat(
            key: str, sel: list[dict[str, Any]] = sel, steps: list[int] = steps
        ) -> tuple[np.ndarray, np.ndarray]:
            vals = [[r[key] for r in sel if r["steps"] == s] for s in steps]
            return np.array([np.mean(v) for v in vals]), np.array([np.std(v) for v in vals])

        for key, ls, label in (("known", "-", "known"), ("unknown_exact", "--", "unknown (exact)")):
            if key not in sel[0]:
                continue
            m, s = stat(key)
            ax_meg.plot(steps, m, ls, color=colors.get(algo), label=f"{algo.upper()} {label}")
            ax_meg.fill_between(steps, m - s, m + s, color=colors.get(algo), alpha=0.15)
        m, s = stat("expected_return")
        ax_ret.plot(steps, m, color=colors.get(algo), label=algo.upper())
        ax_ret.fill_between(steps, m - s, m + s, color=colors.get(algo), alpha=0.15)
    ax_meg.axhline(reference["optimal_known"], color="gray", lw=0.8, ls=":", label="optimal policy")
    ax_ret.axhline(
        reference["optimal_return"], color="gray", lw=0.8, ls=":", label="optimal policy"
    )
    ax_ret.axhline(
        reference["uniform_return"], color="gray", lw=0.8, ls="-.", label="uniform policy"
    )
    ax_meg.set(xlabel="training steps", ylabel="MEG (nats)", title=f"{env_name}: goal-directedness")
    ax_ret.set(
        xlabel="training steps", ylabel="expected return (exact)", title=f"{env_name}: return"
    )
    for ax in (ax_meg, ax_ret):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save_figure(fig, path)


# Units name their env, algorithm and seed; checkpoints are a by-product.
SWEEP_FIELDS = ("envs", "algos", "seeds", "checkpoint_dir")
UNIT_RESOURCES = {"num_cpus": 1}


def _check(cfg: Config) -> None:
    for name in cfg.envs:
        if name not in ENVS:
            raise ValueError(f"unknown env {name!r} in config; choose from {ENVS}.")
    for algo in cfg.algos:
        if algo not in ALGOS:
            raise ValueError(f"unknown algo {algo!r} in config; choose from {ALGOS}.")
    if cfg.timesteps < cfg.n_checkpoints or cfg.n_checkpoints < 1:
        raise ValueError("need timesteps >= n_checkpoints >= 1.")


def units(cfg: Config) -> list[dict[str, Any]]:
    """Per environment: the reference policies (optimal, uniform), then one training run per
    algorithm and seed (trained, checkpointed and scored at every checkpoint)."""
    _check(cfg)
    out: list[dict[str, Any]] = []
    for env_name in cfg.envs:
        out.append({"env": env_name, "part": "reference"})
        out += [
            {"env": env_name, "part": "training", "algo": algo, "seed": seed}
            for algo in cfg.algos
            for seed in cfg.seeds
        ]
    return out


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """The references of one environment, or one training run's rows (see :func:`units`)."""
    if unit["part"] == "reference":
        _, mdp = _make(unit["env"], cfg.cliff_horizon)
        opt = im.meg(im.policies.optimal(mdp), mdp)
        return {
            "optimal_known": opt.meg,
            "optimal_return": opt.expected_utility,
            "uniform_return": opt.uniform_expected_utility,
        }
    return {"rows": _train_one(unit["env"], unit["algo"], unit["seed"], cfg)}


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``results.csv``, ``results.json`` and one figure per environment."""
    out = pathlib.Path(cfg.results_dir)
    rows: list[dict[str, Any]] = []
    references: dict[str, dict[str, float]] = {}
    for unit, res in zip(units(cfg), results, strict=True):
        if unit["part"] == "reference":
            references[unit["env"]] = res
        else:
            rows.extend(res["rows"])
    for r in rows:
        r["optimal_return"] = references[r["env"]]["optimal_return"]
    figures = [
        str(_plot(out / f"meg_during_training_{e}.png", rows, e, cfg, references[e]))
        for e in cfg.envs
    ]
    return write_results(out, cfg, {"results": rows}, references=references, figures=figures)


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
