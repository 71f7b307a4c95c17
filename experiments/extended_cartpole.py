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
import time

import numpy as np
import torch as th

from imitation_meg.extended import envs, run
from imitation_meg.extended.gym_view import combine
from imitation_meg.extended.registry import agent_factory
from imitation_meg.results import write_results


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


def main(cfg: Config) -> dict:
    """Run every (environment, agent, seed); returns the summary rows."""
    th.set_num_threads(1)
    out = pathlib.Path(cfg.results_dir)
    episodes, summary, curves = [], [], {}
    for env_name in cfg.envs:
        combo = combine(cfg.gym_id, envs.get_env(env_name))
        for name in cfg.agents:
            base = name[3:-1] if name.startswith("RC(") else name
            kwargs = {"total_timesteps": cfg.max_steps, **cfg.agent_kwargs.get(base, {})}
            returns, lengths = [], []
            for seed in cfg.seeds:
                t0 = time.perf_counter()
                res = run(
                    combo,
                    agent_factory(name, kwargs),
                    cfg.max_steps,
                    seed=seed,
                    stop=lambda e: len(e.episode_returns) >= cfg.n_episodes,
                )
                rets = list(res.env.episode_returns)
                returns.append(rets)
                lengths.append(list(res.env.episode_lengths))
                for i, (r, n_len) in enumerate(zip(rets, lengths[-1], strict=True)):
                    episodes.append(
                        {
                            "env": combo.__name__,
                            "agent": name,
                            "seed": seed,
                            "episode": i,
                            "return": r,
                            "length": n_len,
                        }
                    )
                print(
                    f"{combo.__name__} {name} seed {seed}: {len(rets)} episodes, "
                    f"{res.n_steps} steps, {time.perf_counter() - t0:.1f}s",
                    flush=True,
                )
            n = min(len(r) for r in returns)
            mat = np.array([r[:n] for r in returns]) if n else np.zeros((len(returns), 0))
            lens = np.array([x[:n] for x in lengths]) if n else np.zeros((len(returns), 0))
            curves[(combo.__name__, name)] = mat.mean(axis=0) if n else np.zeros(0)
            tail, tail_len = (mat[:, -cfg.tail :], lens[:, -cfg.tail :]) if n else (mat, lens)
            head, head_len = (mat[:, : cfg.tail], lens[:, : cfg.tail]) if n else (mat, lens)
            summary.append(
                {
                    "env": combo.__name__,
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


def _match(returns: np.ndarray, lengths: np.ndarray) -> float:
    """Fraction of steps on which the joystick matched (reward +1) in these episodes.

    CartPole's reward is +1 every step, so a step's combined reward is +1 (E's reward was not
    -1) or -1 (penalised): matched steps = (return + length) / 2.
    """
    total = float(lengths.sum())
    return float((returns.sum() + total) / (2 * total)) if total else float("nan")


def _figures(curves: dict, out: pathlib.Path, cfg: Config) -> None:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()

    out.mkdir(parents=True, exist_ok=True)
    for env_name in sorted({k[0] for k in curves}):
        fig, ax = plt.subplots(figsize=(5, 3))
        for (e, agent), curve in curves.items():
            if e == env_name and len(curve):
                ax.plot(np.arange(1, len(curve) + 1), curve, label=agent)
        ax.set_xlabel("episode")
        ax.set_ylabel(f"episode reward (mean of {len(cfg.seeds)} seeds)")
        ax.set_title(env_name)
        ax.legend(fontsize=7)
        save_figure(fig, out / f"{env_name.replace('*', '_x_')}.png", dpi=100)


if __name__ == "__main__":
    import sys

    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
