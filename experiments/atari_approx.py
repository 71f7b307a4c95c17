"""The approximate score of an RL Zoo Pong agent (the ALE simulator's soft-value curve, the
agent's episodes) against exact MEG on the same game's enumerated MDP, at short horizons.

Each case ``H:WARMUP[:PARTICLES]`` is a horizon, the decisions after the reset of seed 0 that
lead to the start (the enumerated MDP's one start, ``imitation_meg.envs.enumerate_mdp(...,
warmup=...)``): a number of NOOPs, or the actions themselves separated by commas (Breakout's
``follow`` warmup of configs/atari_exact.yaml is ``2,3,3,2,2,3,3,3,2,2,3,3``), and the curve's
particles per start and rung (default: the SMC's, from the rung budget). Exact: the MDP
enumerated with its 4-frame stacks, the agent's table read off every state's stack, known-utility
MEG. Approximate: :class:`imitation_meg.approx.ale.ALEDynamics` from the same start, the SMC's
curve (its defaults), ``EPISODES`` episodes of the agent on the simulator, the conjugate at their
mean return with its interval. Usage (docs/reports/atari.md)::

    python experiments/atari_approx.py RUN_FOLDER [H:WARMUP[:PARTICLES] ...]
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np

EPISODES = 200
CASES = ("6:0", "8:49")


def main(folder: str, cases: tuple[str, ...] = CASES) -> list[dict[str, float]]:
    import gymnasium as gym
    from stable_baselines3 import PPO

    import imitation_meg as im
    from imitation_meg.adapters.sb3 import SB3ActionProbs
    from imitation_meg.adapters.zoo import read_zoo_run
    from imitation_meg.approx.agent import Actor, simulate_episodes
    from imitation_meg.approx.ale import ALEDynamics, register_games
    from imitation_meg.approx.curve import CurveInfo
    from imitation_meg.approx.policy import PolicyFn
    from imitation_meg.approx.smc import smc_curve
    from imitation_meg.envs.emulator import emulator_policy_table, enumerate_mdp, make_atari

    run = read_zoo_run(folder)
    game = str(run.env_id)
    register_games(game)
    probs = SB3ActionProbs(PPO.load(run.model, device="cpu").policy)
    rows = []
    for case in cases:
        H_text, warmup_text, *more = case.split(":")
        H = int(H_text)
        particles = int(more[0]) if more else None  # None: the SMC's default for the budget
        if "," in warmup_text:
            warmup = [int(a) for a in warmup_text.split(",")]
        else:
            warmup = [0] * int(warmup_text)
        t0 = time.process_time()
        mdp = enumerate_mdp(make_atari(game), H, frame_stack=4, warmup=warmup, seed=0)
        pi = emulator_policy_table(probs, mdp)
        exact = im.meg(pi, mdp)
        t_exact = time.process_time() - t0
        print(
            f"H={H}: {mdp.n_states} states, exact MEG {exact.meg:.6g} ({t_exact:.0f} s)", flush=True
        )
        t0 = time.process_time()
        dyn = ALEDynamics(gym.make(game), warmup=warmup)
        starts = np.array([[-1.0], [-1.0]])  # the reset of seed 0 (two units of one start)
        info = CurveInfo(game, {}, H, dyn.actions.to_dict(), "smc", seed=0)
        rng = np.random.default_rng(0)
        curve = smc_curve(dyn, starts, H, particles, rng, info)
        t_curve = time.process_time() - t0
        t0 = time.process_time()
        fn = PolicyFn(lambda o: probs(o).numpy(), dyn.n_actions, name="agent")
        actor = Actor(fn, dyn.actions)
        eps = simulate_episodes(dyn, actor, np.repeat(starts[:1], EPISODES, axis=0), H, rng)
        sc = curve.score(eps.returns, certificate=float(eps.certificate.mean()))
        t_eps = time.process_time() - t0
        rows.append(
            {
                "horizon": H,
                "warmup": warmup_text,
                "particles": int(curve.info.settings["n_particles"]),
                "states": mdp.n_states,
                "exact_meg": float(exact.meg),
                "approx_meg": float(sc.meg),
                "low": float(sc.low),
                "high": float(sc.high),
                "curve_se": float(sc.curve_se),
                "covered": bool(sc.low - 1e-9 <= exact.meg <= sc.high + 1e-9),
                "agent_return": float(sc.expected_return),
                "exact_return": float(exact.expected_utility),
                "uniform_return": float(exact.uniform_expected_utility),
                "exact_cpu_s": t_exact,
                "curve_cpu_s": t_curve,
                "episodes_cpu_s": t_eps,
                "emulator_steps": dyn.emulator_steps,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2:]) or CASES)
