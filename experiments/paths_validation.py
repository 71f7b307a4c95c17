"""Validation of the paths method (``meg_approx(..., method="paths")``) against exact answers.

Families of the simulated classic-control tasks (gymnasium's ``CartPoleEnv``,
``MountainCarEnv``, ``AcrobotEnv``, ``PendulumEnv``, ``Continuous_MountainCarEnv``, with their
own physics or changed constants) at horizons short enough for an exact answer. Discrete
actions: from each start every action sequence is followed (complete enumeration). Box actions:
``log Z_beta(s0)`` is a tensor Gauss-Legendre quadrature over the action sequences (``box_nodes``
per decision, its accuracy measured by halving them), and the policy's expected return a mean
over ``box_returns`` of its own episodes per start (its standard error is in ``exact_se``). From each of ``ref_starts``
start states (``reset(seed=ref_seed + i)``) every sequence of actions is followed to its end,
which gives ``Z_beta(s0) = E_uniform[exp(beta R)]`` exactly and the policy's exact expected
return (each sequence weighted by the policy's probability of it), and the exact MEG of the
start distribution is ``max_beta mean_starts(beta E_pi[R | s0] - log Z_beta(s0))``, maximised by
a scan and scipy's bounded scalar minimiser (code independent of the estimator's). The mean over
``ref_starts`` starts stands for the expectation over CartPole's continuous start distribution;
``exact_se`` (a bootstrap over those starts) says how well.

The estimator runs with the library's defaults (or the config's settings) on the environment
itself; every (case, policy, seed) is one unit. Policies: ``ppo`` / ``dqn`` (SB3 agents trained
on the case's environment; DQN scored at ``dqn_epsilon``), ``lean`` (CartPole: a stochastic
controller pushing against the pole's lean), ``ppo_eps<e>`` (the PPO agent mixed with uniform
actions), ``energy<e>`` (MountainCar: push the way the car moves, uniform actions a share
``e`` of the time), ``pump<e>`` (Acrobot: torque the way the first link swings, the same
mix), ``pd<s>`` (Pendulum: torque towards the top, damped, Gaussian noise ``s`` clipped to
the box), ``bang<s>`` (MountainCarContinuous: full push the way the car moves, noise ``s``).

Acceptance, per row: the error within the stricter yardstick and the exact value inside the
interval, in at least 9 of 10 seeds. The yardstick is 5% of the exact value or 1% of
``H log|A|``, whichever is larger; for a box (whose MEG has no ceiling) ``log|A|`` is replaced
by ``log 2``, the nats one binary choice per decision carries, so that the floor (0.01 nats a
decision) means the same as for two actions.

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
from imitation_meg.approx.options import N_EVAL_EPISODES
from imitation_meg.approx.paths import MAX_ENUMERATED, enumerate_paths
from imitation_meg.approx.simulators import dynamics_for
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values

UNIT_RESOURCES = {"num_cpus": 1}
SWEEP_FIELDS = ("cases", "horizons", "case_policies", "seeds")
#: The yardstick: 5% of the exact value or 1% of ``H log|A|``, whichever is larger.
STRICT_SHARE, STRICT_FLOOR = 0.05, 0.01
#: The rounding of the reference's own maximisation (nats).
_REF_ROUNDING = 1e-9
#: The families: a gymnasium id and changes to the environment's constants (after
#: ``gym.make``).
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "cartpole": ("CartPole-v1", {}),
    "cartpole_semi_implicit": ("CartPole-v1", {"kinematics_integrator": "semi-implicit euler"}),
    "cartpole_long_pole": ("CartPole-v1", {"length": 1.0}),
    "cartpole_weak_push": ("CartPole-v1", {"force_mag": 5.0}),
    "cartpole_short_pole": ("CartPole-v1", {"length": 0.25}),
    "cartpole_strong_push": ("CartPole-v1", {"force_mag": 20.0}),
    # goal-reaching: the goal reachable within the horizon (a stronger engine, a faster car)
    "mountaincar_fast": ("MountainCar-v0", {"force": 0.05, "max_speed": 0.35}),
    "mountaincar_light": ("MountainCar-v0", {"force": 0.03, "gravity": 0.0015, "max_speed": 0.3}),
    "mountaincar_near_goal": (
        "MountainCar-v0",
        {"force": 0.02, "max_speed": 0.25, "goal_position": 0.2},
    ),
    "acrobot_strong": ("Acrobot-v1", {"AVAIL_TORQUE": [-12.0, 0.0, 12.0]}),
    "pendulum": ("Pendulum-v1", {}),
    "pendulum_light": ("Pendulum-v1", {"g": 5.0}),
    "mountaincar_continuous_fast": (
        "MountainCarContinuous-v0",
        {"power": 0.2, "max_speed": 0.5},
    ),
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
    box_nodes: int = 32
    box_returns: int = 2000
    n_eval_episodes: int = N_EVAL_EPISODES
    n_particles: int | None = None
    n_starts: int | None = None
    n_boot: int = 500
    method: str = "paths"
    progress: bool = False

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_values(
            self,
            positive=(
                "horizons",
                "ppo_steps",
                "dqn_steps",
                "ref_starts",
                "box_nodes",
                "box_returns",
            ),
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
        for c, h in zip(self.cases, self.horizons, strict=True):
            if _is_box(c) and self.box_nodes**h > 4_000_000:
                raise ValueError(
                    f"horizon {h} of {c} needs box_nodes^{h} = {self.box_nodes**h} quadrature "
                    "paths per start; lower box_nodes or the horizon."
                )
            if h > MAX_ENUMERATED:
                raise ValueError(
                    f"horizon {h} is too long to follow every action sequence (at most "
                    f"{MAX_ENUMERATED})."
                )
        for p in self.case_policies:
            if p not in ("ppo", "dqn", "lean") and _mix(p) is None and _controller(p) is None:
                raise ValueError(
                    f"policy {p!r} is not 'ppo', 'dqn', 'lean', 'ppo_eps<e>', 'energy<e>', "
                    "'pump<e>', 'pd<s>' or 'bang<s>'."
                )


def _mix(name: str) -> float | None:
    """The uniform share of ``ppo_eps<e>``, else None."""
    if not name.startswith("ppo_eps"):
        return None
    try:
        e = float(name[len("ppo_eps") :])
    except ValueError:
        return None
    return e if 0.0 <= e <= 1.0 else None


def _controller(name: str) -> tuple[str, float] | None:
    """``(kind, parameter)`` of ``energy<e>``, ``pump<e>``, ``pd<s>``, ``bang<s>``, else None."""
    for kind in ("energy", "pump", "pd", "bang"):
        if name.startswith(kind):
            try:
                return kind, float(name[len(kind) :])
            except ValueError:
                return None
    return None


def _is_box(case: str) -> bool:
    return CASES[case][0] in ("Pendulum-v1", "MountainCarContinuous-v0")


def make_env(case: str) -> Any:
    """A fresh environment of the case (gymnasium's, its constants changed)."""
    import gymnasium as gym

    env_id, changes = CASES[case]
    env = gym.make(env_id)
    core = env.unwrapped
    for key, value in changes.items():
        setattr(core, key, value)
    if env_id == "CartPole-v1":
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


def _mixed_push(obs: np.ndarray, towards: np.ndarray, share: float) -> np.ndarray:
    """Action 2 where ``towards`` is non-negative, else action 0, mixed with uniform actions."""
    p = np.full((len(obs), 3), share / 3.0)
    p[np.arange(len(obs)), np.where(towards >= 0, 2, 0)] += 1.0 - share
    return p


def _box_law(kind: str, sd: float, low: np.ndarray, high: np.ndarray) -> Any:
    """A Gaussian law clipped to the box around a controller's action."""
    from imitation_meg.continuous.densities import ActionLaw, ContinuousPolicyFn

    def law(obs: Any) -> Any:
        o = np.asarray(obs, dtype=np.float64)
        if kind == "pd":  # Pendulum: torque towards the top, damped
            theta = np.arctan2(o[:, 1], o[:, 0])
            u = -10.0 * theta - 2.0 * o[:, 2]
        else:  # bang: the continuous car, full push the way it moves
            u = np.where(o[:, 1] >= 0, high[0], low[0])
        mean = np.clip(u, low[0], high[0])[:, None]
        return ActionLaw("clipped", mean, np.full_like(mean, sd), low, high)

    return ContinuousPolicyFn(law, low, high, name=f"{kind}{sd:g}", kind="clipped")


def scored_policy(cfg: Config, unit: dict[str, Any]) -> tuple[Any, Any, float | None]:
    """The policy the estimator gets, its ``probs`` function (Discrete actions; its action law
    for a box), and the DQN's epsilon."""
    name = unit["policy"]
    if name == "lean":
        return _lean, _lean, None
    ctrl = _controller(name)
    if ctrl is not None:
        kind, value = ctrl
        if kind in ("pd", "bang"):
            env = make_env(unit["case"])
            low, high = (
                env.action_space.low.astype(np.float64),
                env.action_space.high.astype(np.float64),
            )
            env.close()
            pol = _box_law(kind, value, low, high)
            return pol, pol, None
        col = 1 if kind == "energy" else 4  # the car's velocity, the first link's
        fn = lambda obs: _mixed_push(np.asarray(obs), np.asarray(obs)[:, col], value)  # noqa: E731
        return fn, fn, None
    algo = "dqn" if name == "dqn" else "ppo"
    steps = cfg.dqn_steps if algo == "dqn" else cfg.ppo_steps
    model = _agent(algo, unit["case"], steps, cfg.train_seed, cfg.dqn_epsilon)
    eps = cfg.dqn_epsilon if algo == "dqn" else None
    n_actions = int(make_env(unit["case"]).action_space.n)
    probs = as_policy_fn(model, n_actions=n_actions, epsilon=eps).probs
    share = _mix(name)
    if share is None:
        return model, probs, eps

    def mixed(obs: np.ndarray) -> np.ndarray:
        return (1.0 - share) * probs(obs) + share / n_actions

    return mixed, mixed, None


@functools.lru_cache(maxsize=8)
def _reference_cached(cfg: Config, case: str, horizon: int, policy: str) -> dict[str, Any]:
    _, probs, _ = scored_policy(cfg, {"case": case, "policy": policy})
    if _is_box(case):
        return box_reference(
            case, horizon, probs, cfg.ref_starts, cfg.ref_seed, cfg.box_nodes, cfg.box_returns
        )
    return exact_reference(case, horizon, probs, cfg.ref_starts, cfg.ref_seed)


def exact_reference(
    case: str, horizon: int, probs: Any, n_starts: int, seed: int
) -> dict[str, Any]:
    """The exact MEG of ``probs`` over ``n_starts`` starts by complete enumeration (module
    docstring), with a bootstrap standard error over the starts."""
    env = make_env(case)
    dyn, why = dynamics_for(env)
    assert dyn is not None, why
    paths = []
    for i in range(n_starts):
        env.reset(seed=seed + i)
        paths.append(enumerate_paths(dyn, dyn.start(env), horizon, probs))
    env.close()
    returns_arr = np.array([p.expected_return for p in paths])
    return _solve_reference([p.log_partition for p in paths], returns_arr, seed)


def box_reference(
    case: str,
    horizon: int,
    policy: Any,
    n_starts: int,
    seed: int,
    nodes: int,
    n_returns: int,
) -> dict[str, Any]:
    """MEG of a Box-action policy over ``n_starts`` starts: ``log Z`` by tensor Gauss-Legendre
    quadrature over the action sequences (``nodes`` per decision; ``quadrature_gap`` the largest
    change of the value with half the nodes), the policy's return by ``n_returns`` of its own
    episodes per start (their standard error goes into ``exact_se``)."""
    from imitation_meg.approx.agent import Actor, simulate_episodes

    env = make_env(case)
    dyn, why = dynamics_for(env)
    assert dyn is not None, why
    starts = []
    for i in range(n_starts):
        env.reset(seed=seed + i)
        starts.append(dyn.start(env))
    env.close()
    rng = np.random.default_rng(seed)
    returns_arr, return_se = np.zeros(n_starts), np.zeros(n_starts)
    for k, s0 in enumerate(starts):
        eps = simulate_episodes(
            dyn, Actor(policy, dyn.actions), np.repeat(s0[None], n_returns, 0), horizon, rng
        )
        returns_arr[k] = eps.returns.mean()
        return_se[k] = eps.returns.std(ddof=1) / math.sqrt(n_returns)
    fine = [_box_ends(dyn, s0, horizon, nodes) for s0 in starts]
    ref = _solve_reference([e.log_partition for e in fine], returns_arr, seed, exact_boot=False)
    coarse = [_box_ends(dyn, s0, horizon, max(2, nodes // 2)) for s0 in starts]
    half = _solve_reference([e.log_partition for e in coarse], returns_arr, seed, exact_boot=False)
    gap = abs(half["exact"] - ref["exact"])
    # the returns' own noise moves the value by beta times their standard error
    noise = abs(ref["exact_beta"]) * float(np.sqrt((return_se**2).sum())) / n_starts
    ref["exact_se"] = float(math.hypot(ref["exact_se"], noise))
    ref["quadrature_gap"] = float(gap)
    return ref


def _box_ends(dyn: Any, start: np.ndarray, horizon: int, nodes: int) -> Any:
    """Every sequence of Gauss-Legendre actions from ``start``, as (log weight, return) ends:
    the quadrature of ``E_uniform[exp(beta R)]`` over the box's action sequences."""
    from imitation_meg.approx.paths import EnumeratedPaths

    box = dyn.actions
    x, w = np.polynomial.legendre.leggauss(nodes)
    acts = box.low + (box.high - box.low) * (x[:, None] + 1.0) / 2.0  # (m, 1)
    logw = np.log(w / 2.0)
    states, lw, ret = start[None].astype(np.float64), np.zeros(1), np.zeros(1)
    ended_lw: list[np.ndarray] = []
    ended_ret: list[np.ndarray] = []
    for t in range(horizon):
        states = np.repeat(states, nodes, axis=0)
        lw = np.repeat(lw, nodes) + np.tile(logw, len(lw))
        ret = np.repeat(ret, nodes)
        states, r, term = dyn.step(states, np.tile(acts, (len(states) // nodes, 1)))
        ret = ret + r
        done = term if t < horizon - 1 else np.ones(len(ret), dtype=bool)
        ended_lw.append(lw[done])
        ended_ret.append(ret[done])
        states, lw, ret = states[~done], lw[~done], ret[~done]
    return EnumeratedPaths(
        math.nan, np.stack([np.concatenate(ended_lw), np.concatenate(ended_ret)], 1)
    )


def _solve_reference(
    log_partitions: list[Any], returns_arr: np.ndarray, seed: int, *, exact_boot: bool = True
) -> dict[str, Any]:
    """``max_beta mean_starts(beta J_s - log Z_s(beta))`` by a scan and scipy's bounded
    minimiser, with a bootstrap standard error over the starts (``exact_boot=False``: the
    replicates maximise on the scan's grid with a parabola through the best three points,
    where exact evaluations would take too long: a box's quadrature has a return per path)."""
    from scipy.optimize import minimize_scalar

    n_starts = len(log_partitions)
    ups = 10.0 ** np.linspace(-4.0, 4.0, 81)
    grid = np.concatenate([-ups[::-1], [0.0], ups])
    on_grid = None if exact_boot else np.stack([lp(grid) for lp in log_partitions])  # (K, G)

    def log_z(beta: float, idx: np.ndarray) -> float:
        return float(np.mean([log_partitions[k](np.array([beta]))[0] for k in idx]))

    def solve(idx: np.ndarray, exact: bool) -> tuple[float, float]:
        r = float(returns_arr[idx].mean())
        if exact:  # start by start, as the published references were computed
            values = np.array([b * r - log_z(b, idx) for b in grid])
        else:
            assert on_grid is not None
            values = grid * r - on_grid[idx].mean(0)
        i = int(np.argmax(values))
        if i in (0, len(grid) - 1):  # a limit: the value far out
            return float(values[i]), float(grid[i])
        if not exact:
            a, b, c = values[i - 1 : i + 2]
            bend = a - 2 * b + c
            return float(b - (a - c) ** 2 / (8 * bend)) if bend < 0 else float(b), float(grid[i])
        best = minimize_scalar(
            lambda x: -(x * r - log_z(x, idx)),
            bounds=(grid[i - 1], grid[i + 1]),
            method="bounded",
            options={"xatol": 1e-12},
        )
        return max((-float(best.fun), float(best.x)), (float(values[i]), float(grid[i])))

    value, beta = solve(np.arange(n_starts), True)
    rng = np.random.default_rng(seed)
    boots = [solve(rng.integers(0, n_starts, size=n_starts), exact_boot)[0] for _ in range(50)]
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
    bound = res.upper_bound if math.isfinite(res.upper_bound) else unit["horizon"] * math.log(2.0)
    tol = max(STRICT_SHARE * abs(ref["exact"]), STRICT_FLOOR * bound)
    return {
        **unit,
        **ref,
        "bound": bound,
        "approx": res.meg,
        "low": res.low,
        "high": res.high,
        "beta": res.beta,
        # the reference's own rounding (an exact 0 comes out as about 1e-12)
        "covered": bool(res.low - _REF_ROUNDING <= ref["exact"] <= res.high + _REF_ROUNDING),
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
