"""SymmToM learned baselines (paper Tables 1-2): MADDPG, MADDPG-Oracle, RMADDPG, MADDPG-CE / -GE.

Run: ``python experiments/symmtom_maddpg.py configs/symmtom_maddpg.yaml`` (or ``imitation-meg
reproduce configs/symmtom_maddpg.yaml``). Units are variant x configuration x seed (training, the
best checkpoint evaluated on ``final_episodes`` episodes, and the theory-of-mind tests whose layout
fits the configuration), plus one unit per configuration and scripted baseline (heuristic, random)
evaluated on ``final_episodes`` episodes. Writes ``rewards.csv`` (one row per configuration and
agent: mean over seeds), ``runs.csv`` (one row per unit), ``tom.csv``, ``findings.csv`` (the
paper's qualitative claims, measured), ``curves.png``, ``rewards.png`` and ``results.json`` into
``results_dir``, and each run's best actors to ``results_dir/checkpoints/`` when
``save_checkpoints``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np

from imitation_meg.progress import progress
from imitation_meg.results import write_results
from imitation_meg.symmtom import parallel_env
from imitation_meg.symmtom.agents import HeuristicPolicy, RandomPolicy, run_episodes
from imitation_meg.symmtom.maddpg import (
    VARIANTS,
    LearnedPolicy,
    MADDPGConfig,
    final_evaluation,
    train_maddpg,
)
from imitation_meg.symmtom.tom import run_tom_test, tom_tests

#: Scripted agents evaluated beside the learned ones.
BASELINES = ("heuristic", "random")
#: Display names of the paper.
NAMES = {
    "maddpg": "MADDPG",
    "oracle": "MADDPG-Oracle",
    "rmaddpg": "RMADDPG",
    "ce": "MADDPG-CE",
    "ge": "MADDPG-GE",
    "heuristic": "heuristic",
    "random": "random",
}
UNIT_RESOURCES = {"num_cpus": 1}
#: Config fields that only choose the units (the runner leaves them out of a unit's key).
SWEEP_FIELDS = ("variants", "baselines", "configurations", "seeds")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the study (MADDPG hyperparameters: the original code's, see ``maddpg.py``).

    Attributes:
        results_dir: output folder.
        variants: learned agents (subset of ``maddpg, oracle, rmaddpg, ce, ge``).
        baselines: scripted agents (subset of ``heuristic, random``).
        configurations: ``(n, w, c)`` triples (hearing range 1, as in the paper).
        seeds: training seeds of every learned agent.
        episodes: training episodes per run (the paper: 60,000).
        eval_every, eval_episodes: checkpoint evaluations (the best checkpoint is kept).
        final_episodes: evaluation episodes of the best checkpoint and of the baselines (paper 1000).
        tom_trials: trials per theory-of-mind test (run where the test's n, w, c match).
        lr, tau, gamma, batch_size, update_every, learning_starts, buffer_size, hidden: MADDPG.
        save_checkpoints: write each run's best actors under ``results_dir/checkpoints``.
    """

    results_dir: str = "results/symmtom_maddpg"
    variants: tuple[str, ...] = VARIANTS
    baselines: tuple[str, ...] = BASELINES
    configurations: tuple[tuple[int, ...], ...] = ((3, 6, 3), (3, 6, 6))
    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 10_000
    eval_every: int = 500
    eval_episodes: int = 100
    final_episodes: int = 1000
    tom_trials: int = 200
    lr: float = MADDPGConfig.lr
    tau: float = MADDPGConfig.tau
    gamma: float = MADDPGConfig.gamma
    batch_size: int = MADDPGConfig.batch_size
    update_every: int = MADDPGConfig.update_every
    learning_starts: int | None = MADDPGConfig.learning_starts
    buffer_size: int = MADDPGConfig.buffer_size
    hidden: int = MADDPGConfig.hidden
    save_checkpoints: bool = True

    def __post_init__(self) -> None:
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad:
            raise ValueError(f"unknown variants {bad}; use some of {VARIANTS}.")
        bad = [b for b in self.baselines if b not in BASELINES]
        if bad:
            raise ValueError(f"unknown baselines {bad}; use some of {BASELINES}.")
        for conf in self.configurations:
            if len(conf) != 3:
                raise ValueError(f"configuration {conf!r} must be (n, w, c).")


def units(cfg: Config) -> list[dict[str, Any]]:
    """Scripted: baseline x configuration; learned: variant x configuration x seed.

    Variant-major in the order of ``cfg.variants``, so that a run stopped early has every
    configuration and seed of the first variants.
    """
    out: list[dict[str, Any]] = []
    for b in cfg.baselines:
        for n, w, c in cfg.configurations:
            out.append({"agent": b, "n": n, "w": w, "c": c})
    for v in cfg.variants:
        for n, w, c in cfg.configurations:
            for s in cfg.seeds:
                out.append({"agent": v, "n": n, "w": w, "c": c, "seed": s})
    return out


def maddpg_config(cfg: Config, unit: dict[str, Any]) -> MADDPGConfig:
    """The :class:`MADDPGConfig` of a learned unit: the unit's variant and layout, and every
    training setting the two configs share (``episodes``, ``lr``, ``batch_size``, ...) from ``cfg``."""
    shared = {f.name for f in dataclasses.fields(MADDPGConfig)} & {
        f.name for f in dataclasses.fields(Config)
    }
    return MADDPGConfig(
        variant=unit["agent"],
        n_agents=unit["n"],
        width=unit["w"],
        n_pieces=unit["c"],
        **{name: getattr(cfg, name) for name in sorted(shared)},
    )


def _unit_name(unit: dict[str, Any]) -> str:
    return "_".join(f"{k}{unit[k]}" for k in ("agent", "n", "w", "c", "seed") if k in unit)


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one learned run, or evaluate one scripted baseline.

    A pure function of ``(cfg, unit)`` (no timings in the result: the runner records them).
    """
    import torch as th

    th.set_num_threads(1)
    n, w, c = unit["n"], unit["w"], unit["c"]
    if unit["agent"] in BASELINES:
        env = parallel_env(n_agents=n, width=w, n_pieces=c)
        policy = HeuristicPolicy() if unit["agent"] == "heuristic" else RandomPolicy(12_345)
        out = run_episodes(env, policy, cfg.final_episodes, seed=2024)
        per_episode = out["reward"].mean(axis=1)
        final = {
            "reward": float(per_episode.mean()),
            "reward_se": float(per_episode.std(ddof=1) / np.sqrt(len(per_episode))),
        }
        final.update({k: float(v.mean()) for k, v in out.items() if k != "reward"})
        return {**unit, "final": final}
    mcfg = maddpg_config(cfg, unit)
    run = train_maddpg(mcfg, seed=int(unit["seed"]))
    final = final_evaluation(run, episodes=cfg.final_episodes)
    tom = []
    for test in tom_tests().values():
        if (test.n_agents, test.width, test.n_pieces) != (n, w, c):
            continue
        policy = LearnedPolicy(run.actors, mcfg, agent=0, seed=int(unit["seed"]))
        res = run_tom_test(test, policy, cfg.tom_trials, seed=0, oracle=unit["agent"] == "oracle")
        tom.append(res.to_dict())
    if cfg.save_checkpoints:
        path = pathlib.Path(cfg.results_dir) / "checkpoints" / f"{_unit_name(unit)}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        th.save({"config": dataclasses.asdict(mcfg), "actors": run.actors.state_dict()}, path)
    return {
        **unit,
        "final": final,
        "best_episode": run.best_episode,
        "best_checkpoint_reward": run.best_reward,
        "checkpoints": run.checkpoints,
        "curve": run.curve,
        "steps": run.steps,
        "updates": run.updates,
        "tom": tom,
    }


def _mean_sd(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else float("nan")


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Tables (rewards per configuration and agent, runs, ToM tests, findings) and figures."""
    out_dir = pathlib.Path(cfg.results_dir)
    runs, rewards, tom_rows = [], [], []
    for r in results:
        row = {k: r[k] for k in ("agent", "n", "w", "c") if k in r}
        row["seed"] = r.get("seed", "")
        row.update({f"final_{k}": v for k, v in r["final"].items()})
        for k in ("best_episode", "best_checkpoint_reward", "steps", "updates", "seconds"):
            if k in r:
                row[k] = r[k]
        runs.append(row)
        for t in r.get("tom", []):
            tom_rows.append(
                {"agent": r["agent"], "n": r["n"], "w": r["w"], "c": r["c"], "seed": r["seed"], **t}
            )
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["n"], r["w"], r["c"], r["agent"]), []).append(r)
    for (n, w, c, agent), rs in groups.items():
        mean, sd = _mean_sd([r["final"]["reward"] for r in rs])
        row = {
            "n": n,
            "w": w,
            "c": c,
            "agent": NAMES[agent],
            "runs": len(rs),
            "reward_mean": mean,
            "reward_sd_over_seeds": sd,
        }
        if agent in BASELINES:
            row["reward_se"] = rs[0]["final"]["reward_se"]
        else:
            row["per_seed"] = " ".join(f"{r['final']['reward']:.2f}" for r in rs)
            row["best_episode_mean"] = float(np.mean([r["best_episode"] for r in rs]))
            if all("seconds" in r for r in rs):  # wall time, where the runner recorded it
                row["minutes_mean"] = float(np.mean([r["seconds"] for r in rs]) / 60)
        for k in (
            "wrong_speech",
            "useless_speech",
            "incorrect_base_use",
            "correct_base_use",
            "useless_move",
        ):
            row[k] = float(np.mean([r["final"][k] for r in rs]))
        rewards.append(row)
    tom_summary = _tom_summary(tom_rows)
    findings = _findings(rewards)
    payload = write_results(
        out_dir,
        cfg,
        {
            "rewards": rewards,
            "runs": runs,
            "tom": tom_summary,
            "tom_runs": tom_rows,
            "findings": findings,
        },
        curves={_unit_name(r): r["checkpoints"] for r in results if "checkpoints" in r},
        training_curves={_unit_name(r): r["curve"] for r in results if "curve" in r},
    )
    _plot_curves(results, out_dir / "curves.png")
    _plot_rewards(rewards, out_dir / "rewards.png")
    return payload


def _tom_summary(tom_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for t in tom_rows:
        groups.setdefault((t["n"], t["w"], t["c"], t["agent"], t["test"]), []).append(t)
    out = []
    for (n, w, c, agent, test), ts in groups.items():

        def mean(key: str, ts: list[dict[str, Any]] = ts) -> float | None:
            vals = [t[key] for t in ts if t[key] is not None and np.isfinite(t[key])]
            return float(np.mean(vals)) if vals else None

        out.append(
            {
                "n": n,
                "w": w,
                "c": c,
                "agent": NAMES[agent],
                "test": test,
                "runs": len(ts),
                "SR": mean("SR"),
                "FR": mean("FR"),
                "RATSO": mean("RATSO"),
                "optimum": ts[0]["optimum"],
                "passed": sum(bool(t["pass"]) for t in ts),
            }
        )
    return out


def _findings(rewards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's qualitative claims (Sec. 5), measured per configuration."""
    by = {(r["n"], r["w"], r["c"], r["agent"]): r["reward_mean"] for r in rewards}
    out = []
    for n, w, c in dict.fromkeys((r["n"], r["w"], r["c"]) for r in rewards):

        def get(agent: str, conf: tuple[int, int, int] = (n, w, c)) -> float | None:
            return by.get((*conf, NAMES[agent]))

        def ratio(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None or b == 0 else a / b - 1.0

        memory = [get(v) for v in ("rmaddpg", "ce", "ge")]
        memory_vals = [m for m in memory if m is not None]
        tailored = [m for m in (get("ce"), get("ge")) if m is not None]
        out.append(
            {
                "n": n,
                "w": w,
                "c": c,
                "oracle_over_maddpg": ratio(get("oracle"), get("maddpg")),
                "paper_oracle_over_maddpg": "+127% on average over 12 configurations",
                "memory_mean_over_maddpg": ratio(
                    float(np.mean(memory_vals)) if memory_vals else None, get("maddpg")
                ),
                "paper_memory_over_maddpg": "about +60%",
                "best_tailored_over_rmaddpg": ratio(
                    max(tailored) if tailored else None, get("rmaddpg")
                ),
                "paper_best_tailored_over_rmaddpg": "+42% on average",
                "heuristic_over_oracle": ratio(get("heuristic"), get("oracle")),
                "paper_heuristic_over_oracle": "+92% on average when c > n"
                if c > n
                else "oracle often above when c = n",
            }
        )
    return out


def _plot_curves(results: list[dict[str, Any]], path: pathlib.Path) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    learned = [r for r in results if "checkpoints" in r]
    if not learned:
        return
    plt = pyplot()
    confs = list(dict.fromkeys((r["n"], r["w"], r["c"]) for r in learned))
    fig, axes = plt.subplots(1, len(confs), figsize=(5 * len(confs), 3.5), squeeze=False)
    for ax, (n, w, c) in zip(axes[0], confs, strict=True):
        for agent in dict.fromkeys(r["agent"] for r in learned):
            rs = [r for r in learned if (r["n"], r["w"], r["c"], r["agent"]) == (n, w, c, agent)]
            if not rs:
                continue
            ep = [p["episode"] for p in rs[0]["checkpoints"]]
            vals = np.array([[p["reward"] for p in r["checkpoints"]] for r in rs])
            ax.plot(ep, vals.mean(axis=0), label=NAMES[agent])
        for r in results:
            if "checkpoints" not in r and (r["n"], r["w"], r["c"]) == (n, w, c):
                ax.axhline(r["final"]["reward"], ls="--", lw=1, color="gray")
        ax.set_title(f"n={n} w={w} c={c} (dashed: heuristic, random)")
        ax.set_xlabel("training episodes")
        ax.set_ylabel("evaluation reward per agent")
    axes[0][0].legend(fontsize=8)
    save_figure(fig, path, dpi=100)


def _plot_rewards(rewards: list[dict[str, Any]], path: pathlib.Path) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()
    confs = list(dict.fromkeys((r["n"], r["w"], r["c"]) for r in rewards))
    agents = list(dict.fromkeys(r["agent"] for r in rewards))
    fig, ax = plt.subplots(figsize=(2 + 1.5 * len(agents), 3.5))
    width = 0.8 / len(confs)
    for k, conf in enumerate(confs):
        sel = [r for r in rewards if (r["n"], r["w"], r["c"]) == conf]
        x = np.array([agents.index(r["agent"]) for r in sel]) + k * width
        err = [
            0.0 if not np.isfinite(r["reward_sd_over_seeds"]) else r["reward_sd_over_seeds"]
            for r in sel
        ]
        ax.bar(
            x,
            [r["reward_mean"] for r in sel],
            width,
            yerr=err,
            label="n={} w={} c={}".format(*conf),
        )
    ax.set_xticks(
        np.arange(len(agents)) + width * (len(confs) - 1) / 2, agents, rotation=30, ha="right"
    )
    ax.set_ylabel("reward per agent per episode")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=100)


def main(cfg: Config) -> dict[str, Any]:
    """All units in this process, then :func:`combine`."""
    todo = units(cfg)
    results = [run_unit(cfg, u) for u in progress(todo, desc="symmtom_maddpg", total=len(todo))]
    return combine(cfg, results)


if __name__ == "__main__":
    import sys

    from imitation_meg.runners import run_config

    print(json.dumps(run_config(sys.argv[1])["rewards"], indent=1, default=str))
