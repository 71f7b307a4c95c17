"""Validation of the paths method (``meg_approx(..., method="paths")``) against exact answers.

CartPole families (gymnasium's ``CartPoleEnv``, its own physics or changed: a pole twice as
long or half as long, a weaker or a stronger push, the semi-implicit integrator) at horizons short enough to follow every
action sequence: the exact value comes from complete enumeration. From each of ``ref_starts``
start states (``reset(seed=ref_seed + i)``) every sequence of actions is followed to its end,
which gives ``Z_beta(s0) = E_uniform[exp(beta R)]`` exactly and the policy's exact expected
return (each sequence weighted by the policy's probability of it), and the exact MEG of the
start distribution is ``max_beta mean_starts(beta E_pi[R | s0] - log Z_beta(s0))``, maximised by
a scan and scipy's bounded scalar minimiser (code independent of the estimator's). The mean over
``ref_starts`` starts stands for the expectation over CartPole's continuous start distribution;
``exact_se`` (a bootstrap over those starts) says how well.

The estimator runs with the library's defaults (or the config's settings) on the environment
itself; every (case, policy, seed) is one unit. Policies: ``ppo`` / ``dqn`` (SB3 agents trained
on the case's environment; DQN scored at ``dqn_epsilon``), ``lean`` (a stochastic controller
pushing against the pole's lean), ``ppo_eps<e>`` (the PPO agent mixed with uniform actions).

Acceptance, per row: the error within the stricter yardstick (5% of the exact value or 1% of
``H log|A|``, whichever is larger) and the exact value inside the interval, in at least 9 of 10
seeds.

Run: ``imitation-meg reproduce configs/paths_heldout.yaml``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import pathlib
import sys
from typing import Any

import numpy as np
import torch as th

from imitation_meg.approx import ApproxOptions, as_policy_fn, meg_approx
from imitation_meg.approx.options import N_EVAL_EPISODES, N_PARTICLES, N_STARTS
from imitation_meg.approx.paths import MAX_ENUMERATED, enumerate_paths
from imitation_meg.approx.simulators import CartPoleDynamics
from imitation_meg.config import check_values
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially

UNIT_RESOURCES = {"num_cpus": 1}
SWEEP_FIELDS = ("cases", "horizons", "case_policies", "seeds")
#: The yardstick: 5% of the exact value or 1% of ``H log|A|``, whichever is larger.
STRICT_SHARE, STRICT_FLOOR = 0.05, 0.01
#: The CartPole families: changes to the environment's constants (after ``gym.make``).
CASES: dict[str, dict[str, Any]] = {
    "cartpole": {},
    "cartpole_semi_implicit": {"kinematics_integrator": "semi-implicit euler"},
    "cartpole_long_pole": {"length": 1.0},
    "cartpole_weak_push": {"force_mag": 5.0},
    "cartpole_short_pole": {"length": 0.25},
    "cartpole_strong_push": {"force_mag": 20.0},
}


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the paths validation (YAML keys of the same names)."""

    results_dir: str = "results/paths_heldout"
    cases: tuple[str, ...] = tuple(CASES)
    horizons: tuple[int, ...] = (20, 18, 22, 20)
    case_policies: tuple[str, ...] = ("ppo", "dqn", "lean", "ppo_eps0.2")
    ppo_steps: int = 30_000
    dqn_steps: int = 50_000
    dqn_epsilon: float = 0.05
    train_seed: int = 0
    seeds: tuple[int, ...] = tuple(range(10))
    ref_starts: int = 400
    ref_seed: int = 1_000_000
    n_eval_episodes: int = N_EVAL_EPISODES
    n_particles: int = N_PARTICLES
    n_starts: int = N_STARTS
    n_boot: int = 500
    method: str = "paths"
    progress: bool = False

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=("horizons", "ppo_steps", "dqn_steps", "ref_starts"),
            non_negative=("train_seed", "seeds", "ref_seed"),
            probabilities=("dqn_epsilon",),
        )
        ApproxOptions.from_fields(self)  # the estimator's own checks
        if len(self.horizons) != len(self.cases) or len(self.case_policies) != len(self.cases):
            raise ValueError(
                f"horizons {self.horizons} and case_policies {self.case_policies} must give one "
                f"entry per case {self.cases}."
            )
        for c in self.cases:
            if c not in CASES:
                raise ValueError(f"unknown case {c!r}; choose from {sorted(CASES)}.")
        for h in self.horizons:
            if h > MAX_ENUMERATED:
                raise ValueError(
                    f"horizon {h} is too long to follow every action sequence (at most "
                    f"{MAX_ENUMERATED})."
                )
        for p in self.case_policies:
            if p not in ("ppo", "dqn", "lean") and _mix(p) is None:
                raise ValueError(f"policy {p!r} is not 'ppo', 'dqn', 'lean' or 'ppo_eps<e>'.")


def _mix(name: str) -> float | None:
    """The uniform share of ``ppo_eps<e>``, else None."""
    if not name.startswith("ppo_eps"):
        return None
    try:
        e = float(name[len("ppo_eps") :])
    except ValueError:
        return None
    return e if 0.0 <= e <= 1.0 else None


def make_env(case: str) -> Any:
    """A fresh CartPole of the case (gymnasium's environment, its constants changed)."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    core = env.unwrapped
    for key, value in CASES[case].items():
        setattr(core, key, value)
    core.total_mass = core.masspole + core.masscart
    core.polemass_length = core.masspole * core.length
    return env


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per (case, policy, seed), seed-major."""
    return [
        {"case": c, "horizon": int(h), "policy": p, "seed": int(s)}
        for s in cfg.seeds
        for c, h, p in zip(cfg.cases, cfg.horizons, cfg.case_policies, strict=True)
    ]


@functools.lru_cache(maxsize=8)
def _agent(algo: str, case: str, steps: int, seed: int, epsilon: float) -> Any:
    """An SB3 agent trained on the case's environment (kept for the other seeds' units)."""
    from stable_baselines3.common.env_util import make_vec_env

    from imitation_meg.training import make_model

    venv = make_vec_env(lambda: make_env(case), n_envs=8 if algo == "ppo" else 1, seed=seed)
    model = make_model(algo, venv, seed, dqn_epsilon=epsilon, timesteps=steps)
    model.learn(steps)
    venv.close()
    return model


def _lean(obs: np.ndarray) -> np.ndarray:
    """Push against the pole's lean (angle plus a share of its angular velocity), softly."""
    right = 1.0 / (1.0 + np.exp(-40.0 * (obs[:, 2] + 0.3 * obs[:, 3])))
    return np.stack([1.0 - right, right], axis=1)


def scored_policy(cfg: Config, unit: dict[str, Any]) -> tuple[Any, Any, float | None]:
    """The policy the estimator gets, its ``probs`` function, and the DQN's epsilon."""
    name = unit["policy"]
    if name == "lean":
        return _lean, _lean, None
    algo = "dqn" if name == "dqn" else "ppo"
    steps = cfg.dqn_steps if algo == "dqn" else cfg.ppo_steps
    model = _agent(algo, unit["case"], steps, cfg.train_seed, cfg.dqn_epsilon)
    eps = cfg.dqn_epsilon if algo == "dqn" else None
    probs = as_policy_fn(model, n_actions=2, epsilon=eps).probs
    share = _mix(name)
    if share is None:
        return model, probs, eps

    def mixed(obs: np.ndarray) -> np.ndarray:
        return (1.0 - share) * probs(obs) + share / 2.0

    return mixed, mixed, None


@functools.lru_cache(maxsize=8)
def _reference_cached(cfg: Config, case: str, horizon: int, policy: str) -> dict[str, Any]:
    _, probs, _ = scored_policy(cfg, {"case": case, "policy": policy})
    return exact_reference(case, horizon, probs, cfg.ref_starts, cfg.ref_seed)


def exact_reference(
    case: str, horizon: int, probs: Any, n_starts: int, seed: int
) -> dict[str, Any]:
    """The exact MEG of ``probs`` over ``n_starts`` starts by complete enumeration (module
    docstring), with a bootstrap standard error over the starts."""
    from scipy.optimize import minimize_scalar

    env = make_env(case)
    dyn = CartPoleDynamics(env.unwrapped)
    paths = []
    for i in range(n_starts):
        env.reset(seed=seed + i)
        paths.append(enumerate_paths(dyn, dyn.start(env), horizon, probs))
    env.close()
    returns_arr = np.array([p.expected_return for p in paths])

    def log_z(beta: float, idx: np.ndarray) -> float:
        return float(np.mean([paths[k].log_partition(np.array([beta]))[0] for k in idx]))

    ups = 10.0 ** np.linspace(-4.0, 4.0, 81)
    grid = np.concatenate([-ups[::-1], [0.0], ups])

    def solve(idx: np.ndarray) -> tuple[float, float]:
        r = float(returns_arr[idx].mean())
        curve = lambda b: b * r - log_z(b, idx)  # noqa: E731
        values = [curve(b) for b in grid]
        i = int(np.argmax(values))
        if i in (0, len(grid) - 1):  # a limit: the value far out
            return float(values[i]), float(grid[i])
        best = minimize_scalar(
            lambda b: -curve(b),
            bounds=(grid[i - 1], grid[i + 1]),
            method="bounded",
            options={"xatol": 1e-12},
        )
        return max((-float(best.fun), float(best.x)), (float(values[i]), float(grid[i])))

    all_idx = np.arange(n_starts)
    value, beta = solve(all_idx)
    rng = np.random.default_rng(seed)
    boots = [solve(rng.integers(0, n_starts, size=n_starts))[0] for _ in range(50)]
    return {
        "exact": value,
        "exact_beta": beta,
        "exact_se": float(np.std(boots, ddof=1)),
        "exact_return": float(returns_arr.mean()),
    }


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """The exact value and the estimate of one policy in one case with one seed."""
    th.set_num_threads(1)
    ref = _reference_cached(cfg, unit["case"], unit["horizon"], unit["policy"])
    policy, _, eps = scored_policy(cfg, unit)
    options = ApproxOptions.from_fields(cfg, seed=unit["seed"])
    res = meg_approx(
        policy,
        functools.partial(make_env, unit["case"]),
        horizon=unit["horizon"],
        epsilon=eps,
        options=options,
    )
    bound = res.upper_bound
    tol = max(STRICT_SHARE * abs(ref["exact"]), STRICT_FLOOR * bound)
    return {
        **unit,
        **ref,
        "bound": bound,
        "approx": res.meg,
        "low": res.low,
        "high": res.high,
        "beta": res.beta,
        "covered": bool(res.low <= ref["exact"] <= res.high),
        "within_strict": bool(abs(res.meg - ref["exact"]) <= tol),
        "error": res.meg - ref["exact"],
        "error_rel_bound": (res.meg - ref["exact"]) / bound,
        "error_rel_exact": (res.meg - ref["exact"]) / ref["exact"] if ref["exact"] else math.nan,
        "settled": res.settled,
        "expected_return": res.expected_return,
        "certificate": res.certificate,
        "particle_bias": res.particle_bias,
        "bootstrap_se": res.bootstrap_se,
        "method": res.method,
        "wall_time_s": res.wall_time_s,
    }


def _summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    key = lambda r: (r["case"], r["policy"], r["horizon"])  # noqa: E731
    out = []
    for (case, policy, horizon), group in itertools.groupby(sorted(rows, key=key), key=key):
        g = list(group)
        out.append(
            {
                "case": case,
                "policy": policy,
                "horizon": horizon,
                "exact": g[0]["exact"],
                "exact_se": g[0]["exact_se"],
                "mean_approx": float(np.mean([r["approx"] for r in g])),
                "max_abs_error_rel_exact": float(max(abs(r["error_rel_exact"]) for r in g)),
                "max_abs_error_rel_bound": float(max(abs(r["error_rel_bound"]) for r in g)),
                "mean_half_width": float(np.mean([(r["high"] - r["low"]) / 2 for r in g])),
                "covered": sum(r["covered"] for r in g),
                "within_strict": sum(r["within_strict"] for r in g),
                "settled": sum(bool(r["settled"]) for r in g),
                "seeds": len(g),
                "mean_wall_s": float(np.mean([r["wall_time_s"] for r in g])),
            }
        )
    return out


def _plot(path: pathlib.Path, rows: list[dict[str, Any]]) -> pathlib.Path:
    """Each row's estimates minus the exact value, with their intervals, one per seed, and the
    yardstick around 0."""
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()
    cases = sorted({r["case"] for r in rows})
    fig, ax = plt.subplots(figsize=(1.6 * len(cases) + 2.0, 3.8))
    for i, case in enumerate(cases):
        g = [r for r in rows if r["case"] == case]
        xs = i + np.linspace(-0.3, 0.3, len(g))
        err = np.array([r["approx"] - r["exact"] for r in g])
        lo = np.array([r["approx"] - r["low"] for r in g])
        hi = np.array([r["high"] - r["approx"] for r in g])
        ax.errorbar(xs, err, yerr=[lo, hi], fmt="o", ms=3, color="#1f77b4", lw=0.8)
        tol = max(STRICT_SHARE * abs(g[0]["exact"]), STRICT_FLOOR * g[0]["bound"])
        ax.fill_between([i - 0.4, i + 0.4], -tol, tol, color="0.85", zorder=0)
    ax.axhline(0.0, color="k", lw=1.0)
    labels = [f"{c}\n{next(r['policy'] for r in rows if r['case'] == c)}" for c in cases]
    ax.set_xticks(range(len(cases)), labels, fontsize=7)
    ax.set_ylabel("estimate - exact (nats)")
    ax.set_title(
        "paths method vs complete enumeration: 95% intervals, one per seed;\n"
        "grey: the yardstick (5% of the exact value or 1% of H log|A|)",
        fontsize=9,
    )
    fig.tight_layout()
    return save_figure(fig, path)


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-unit and per-row tables, the figure and the acceptance."""
    summary = _summary(results)
    acceptance = {
        "min_covered": min((s["covered"] for s in summary), default=0),
        "min_within_strict": min((s["within_strict"] for s in summary), default=0),
        "n_seeds": len(cfg.seeds),
        "rows_passing": sum(
            s["covered"] >= 0.9 * s["seeds"] and s["within_strict"] >= 0.9 * s["seeds"]
            for s in summary
        ),
        "rows": len(summary),
    }
    out = pathlib.Path(cfg.results_dir)
    fig = _plot(out / "paths_vs_exact.png", results)
    return write_results(
        out,
        cfg,
        {"results": results, "summary": summary},
        acceptance=acceptance,
        figures=[str(fig)],
    )


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)
