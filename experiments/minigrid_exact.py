"""MiniGrid layouts as exact MDPs: state counts, and the time to build and to score each.

For each layout (an id and the reset seed that fixes it): build the MDP with
:func:`imitation_meg.envs.minigrid_mdp` through the image observation stack, read the policy
table of an SB3 ``CnnPolicy`` with :class:`imitation_meg.adapters.minigrid.MiniGridCNN` (freshly
initialised: reading the table costs the same for a trained agent), and score it: known-utility
MEG (MiniGrid's reward, exactly) and MEG over every utility of the agent's cell. The optimal
policy's known-utility MEG is reported beside (how much evidence of goal-directedness the layout
can give at all), and, for the half-optimal policy (optimal and uniform mixed evenly), MEG of
MiniGrid's reward beside MEG of the bare success indicator (what ignoring the time costs).

Units: one per layout. Run: ``imitation-meg reproduce configs/minigrid_exact.yaml``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.envs.minigrid import agent_cells, minigrid_mdp, wrap_observation
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the MiniGrid table (YAML keys of the same names)."""

    results_dir: str = "results/minigrid_exact"
    layouts: tuple[str, ...] = ("MiniGrid-Empty-5x5-v0:0",)
    observation: str = "image"
    progress: bool = True


SWEEP_FIELDS = ("layouts",)
# The study's subject is time: these fields of its results are wall-clock measurements, which
# differ between runs and backends (everything else is the same bytes on every backend).
TIMING_FIELDS = ("build_s", "table_s", "known_s", "cell_target_s")


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per layout ``ID:SEED``."""
    out = []
    for item in cfg.layouts:
        env_id, _, seed = item.partition(":")
        out.append({"env": env_id, "seed": int(seed or 0)})
    return out


def _fresh_cnn(env_id: str, seed: int) -> Any:
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env

    from imitation_meg.training import make_minigrid_ppo

    venv = make_vec_env(lambda: wrap_observation(gym.make(env_id), "image"), n_envs=1, seed=seed)
    return make_minigrid_ppo(venv, seed, policy="cnn")


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Build one layout's MDP and time reading and scoring a CNN agent in it."""
    import warnings

    from imitation_meg.adapters.observations import ObservationAliasingWarning

    t0 = time.perf_counter()
    mdp = minigrid_mdp(unit["env"], seed=unit["seed"], observation=cfg.observation)
    t1 = time.perf_counter()
    model = _fresh_cnn(unit["env"], unit["seed"])
    t2 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ObservationAliasingWarning)
        pi = policy_table(model, mdp)
    t3 = time.perf_counter()
    known = im.meg(pi, mdp)
    t4 = time.perf_counter()
    cell = im.meg_target(pi, mdp, agent_cells(mdp))
    t5 = time.perf_counter()
    opt_pi = im.policies.optimal(mdp)
    optimal = im.meg(opt_pi, mdp)
    # MiniGrid's reward against the bare success indicator, for a half-optimal policy.
    mix = 0.5 * opt_pi + 0.5 * im.policies.uniform(mdp)
    success = mdp.metadata["success"].astype(float)
    return {
        "env": unit["env"],
        "seed": unit["seed"],
        "states": mdp.n_states,
        "actions": mdp.n_actions,
        "horizon": mdp.horizon,
        "aliased": bool(caught),
        "build_s": t1 - t0,
        "table_s": t3 - t2,
        "known_s": t4 - t3,
        "cell_target_s": t5 - t4,
        "known_meg": known.meg,
        "cell_meg": cell.meg,
        "optimal_known_meg": optimal.meg,
        "half_optimal_reward_meg": im.meg(mix, mdp).meg,
        "half_optimal_success_meg": im.meg(mix, mdp, success).meg,
        "bound": known.upper_bound,
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ``layouts.csv`` and ``results.json``."""
    return write_results(cfg.results_dir, cfg, {"layouts": results})


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)


if __name__ == "__main__":
    from imitation_meg.runners import run_config

    run_config(sys.argv[1])
