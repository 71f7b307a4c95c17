"""Paper Figures 1-2: DQN, PPO and their reality checks on CartPole x IgnoreRewards and
CartPole x IncentivizeLearningRate (gym combination, Definition 12).

Each run lasts ``n_episodes`` CartPole episodes (or ``max_steps`` steps). Writes ``episodes.csv``
(episode returns and lengths per env, agent, seed), ``summary.csv`` (mean return over the
first and the last ``tail`` episodes, mean length of the last ``tail`` episodes, fraction of
steps without E's penalty in the first and last ``tail`` episodes),
``results.json`` and one PNG per environment (average episode reward vs episode, mean over
seeds) into ``results_dir``. The paper ran 10 seeds x 10,000 episodes on CartPole-v0.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any

import numpy as np

from imitation_meg.extended import envs, run
from imitation_meg.extended.gym_view import combine as combine_env
from imitation_meg.extended.registry import agent_factory
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the CartPole figures."""

    gym_id: str = "CartPole-v0"
    envs: tuple[str, ...] = ("IgnoreRewards", "IncentivizeLearningRate")
    agents: tuple[str, ...] = ("DQN", "RC(DQN)", "PPO", "RC(PPO)")
    seeds: tuple[int, ...] = (0, 1)
    n_episodes: int = 30
    max_steps: int = 20_000
    tail: int = 10
    agent_kwargs: dict = dataclasses.field(default_factory=dict)
    results_dir: str = "results/extended_cartpole"

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(self, positive=("n_episodes", "max_steps", "tail"), non_negative=("seeds",))


# Units name their environment, agent and seed.
SWEEP_FIELDS = ("envs", "agents", "seeds")
UNIT_RESOURCES = {"num_cpus": 1}


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per environment, agent and seed (a run of ``n_episodes`` episodes)."""
    return [
        {"env": env_name, "agent": name, "seed": seed}
        for env_name in cfg.envs
        for name in cfg.agents
        for seed in cfg.seeds
    ]


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """One run: the episode returns and lengths."""
    combo = combine_env(cfg.gym_id, envs.get_env(unit["env"]))
    name = unit["agent"]
    base = name[3:-1] if name.startswith("RC(") else name
    kwargs = {"total_timesteps": cfg.max_steps, **cfg.agent_kwargs.get(base, {})}
    res = run(
        combo,
        agent_factory(name, kwargs),
        cfg.max_steps,
        seed=unit["seed"],
        stop=lambda e: len(e.episode_returns) >= cfg.n_episodes,
    )
    return {
        "env": combo.__name__,
        "returns": [float(r) for r in res.env.episode_returns],
        "lengths": [int(n) for n in res.env.episode_lengths],
        "n_steps": int(res.n_steps),
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """``episodes.csv``, ``summary.csv``, ``results.json`` and one figure per environment."""
    out = pathlib.Path(cfg.results_dir)
    episodes, summary, curves = [], [], {}
    by_unit = {
        (u["env"], u["agent"], u["seed"]): r for u, r in zip(units(cfg), results, strict=True)
    }
    for env_name in cfg.envs:
        for name in cfg.agents:
            returns, lengths = [], []
            combo_name = by_unit[(env_name, name, cfg.seeds[0])]["env"] if cfg.seeds else env_name
            for seed in cfg.seeds:
                res = by_unit[(env_name, name, seed)]
                returns.append(res["returns"])
                lengths.append(res["lengths"])
                for i, (r, n_len) in enumerate(zip(res["returns"], res["lengths"], strict=True)):
                    episodes.append(
                        {
                            "env": combo_name,
                            "agent": name,
                            "seed": seed,
                            "episode": i,
                            "return": r,
                            "length": n_len,
                        }
                    )
            n = min(len(r) for r in returns)
            mat = np.array([r[:n] for r in returns]) if n else np.zeros((len(returns), 0))
            lens = np.array([x[:n] for x in lengths]) if n else np.zeros((len(returns), 0))
            curves[(combo_name, name)] = mat.mean(axis=0) if n else np.zeros(0)
            tail, tail_len = (mat[:, -cfg.tail :], lens[:, -cfg.tail :]) if n else (mat, lens)
            head, head_len = (mat[:, : cfg.tail], lens[:, : cfg.tail]) if n else (mat, lens)
            summary.append(
                {
                    "env": combo_name,
                    "agent": name,
                    "episodes": n,
                    "mean_return_first": float(head.mean()) if head.size else float("nan"),
                    "mean_return_last": float(tail.mean()) if tail.size else float("nan"),
                    "mean_return_all": float(mat.mean()) if mat.size else float("nan"),
                    "mean_length_last": float(tail_len.mean()) if tail_len.size else float("nan"),
                    "match_first": _match(head, head_len),
                    "match_last": _match(tail, tail_len),
                    "n_seeds": len(cfg.seeds),
                }
            )
    write_results(out, cfg, {"episodes": episodes, "summary": summary})
    _figures(curves, out, cfg)
    return {"summary": summary}


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


def _match(returns: np.ndarray, lengths: np.ndarray) -> float:
    """Fraction of steps on which the joystick matched (reward +1) in these episodes.

    CartPole's reward is +1 every step, so a step's combined reward is +1 (E's reward was not
    -1) or -1 (penalised): matched steps = (return + length) / 2.
    """
    total = float(lengths.sum())
    return float((returns.sum() + total) / (2 * total)) if total else float("nan")


def smoothing_window(n_episodes: int) -> int:
    """Episodes per moving-average point of the figures: 1 up to 500 episodes, then 1% of the
    run (100 for the paper's 10,000), so that a long run's curve shows its trend, not its noise."""
    return 1 if n_episodes <= 500 else max(1, n_episodes // 100)


def _figures(curves: dict, out: pathlib.Path, cfg: Config) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()

    out.mkdir(parents=True, exist_ok=True)
    n_max = max((len(c) for c in curves.values()), default=0)
    window = smoothing_window(n_max)
    for env_name in sorted({k[0] for k in curves}):
        fig, ax = plt.subplots(figsize=(5, 3))
        for (e, agent), curve in curves.items():
            if e == env_name and len(curve) >= window:
                smooth = np.convolve(curve, np.full(window, 1.0 / window), mode="valid")
                ax.plot(np.arange(window, len(curve) + 1), smooth, label=agent)
        ax.set_xlabel("episode")
        what = f"mean of {len(cfg.seeds)} seeds"
        if window > 1:
            what += f", {window}-episode moving average"
        ax.set_ylabel(f"episode reward\n({what})", fontsize=8)
        ax.set_title(env_name)
        ax.legend(fontsize=7)
        save_figure(fig, out / f"{env_name.replace('*', '_x_')}.png", dpi=100)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
