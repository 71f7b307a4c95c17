"""Validation of the approximate MEG estimators against exact answers.

Tabular environments seen only through observations that are not state indices (seals'
CliffWorld with (x, y) observations, FrozenLake through one-hot or coordinate observations, a
random MDP through random features): the approximate estimator sees reset / step and the
observation vectors; the exact value comes from :func:`imitation_meg.meg` on the matching
:class:`~imitation_meg.TabularMDP`. Policies: stationary epsilon-greedy (epsilon 0.1, 0.3, 0.5)
and a PPO agent trained on the observation environment. Every (case, policy, seed) is one unit.

The held-out families (``configs/approx_heldout.yaml``: environments never used for tuning, run
with the defaults frozen before them) name one policy per case instead (``case_policies``:
``eps<e>``, ``ppo`` or ``dqn``, a DQN agent scored as its epsilon-greedy policy).

``utility: observation`` (``configs/approx_validation_unknown.yaml``) scores every utility of
the observation through the empirical MDP (``meg_approx_unknown(..., utility="observation")``)
against the exact unknown-utility MEG over every state utility (:func:`imitation_meg.meg_unknown`).

Acceptance: error within 5% of ``H log|A|``, the ordering across epsilon preserved,
the exact value inside the reported interval in at least 9 of 10 seeds. The held-out families are
judged by the stricter yardstick (:func:`within_strict`: 5% of the exact value or 1% of
``H log|A|``, whichever is larger) and coverage, in at least 9 of 10 seeds per row.

Run: ``imitation-meg reproduce configs/approx_validation.yaml``.
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

import imitation_meg as im
from imitation_meg.approx import ApproxOptions, as_policy_fn, meg_approx, meg_approx_unknown
from imitation_meg.approx.envs import (
    CASES,
    CONTINUOUS_CASES,
    CONTINUOUS_HELD_OUT_CASES,
    EMPIRICAL_HELD_OUT_CASES,
    HELD_OUT_CASES,
    TablePolicy,
    state_policy,
    stationary_epsilon_greedy,
    validation_case,
)
from imitation_meg.approx.evaluate import stages_settled
from imitation_meg.approx.options import (
    AVERAGE,
    LAST_STEPS,
    LR,
    MAX_STATES,
    N_EVAL_EPISODES,
    N_FEATURES,
    check_config,
)
from imitation_meg.approx.unknown import OBSERVATION_METHODS
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially
from imitation_meg.runners.config import check_values

UNIT_RESOURCES = {"num_cpus": 1}
# Units name their case, horizon, policy and seed, so a run over some cases, policies or seeds
# keeps its units for the full study.
SWEEP_FIELDS = ("cases", "horizons", "epsilons", "ppo", "case_policies", "seeds")
# Every unit's result is a row of the published results.json (less its curves): `reproduce
# --merge docs/results/<run>` rebuilds the unit files of a published run (the study is run in
# pieces, and results/ does not travel with the repository).
PUBLISHED_RESULTS = "results"
# Fields added after runs were published, with the value those runs used (they merge as such;
# these are not the library's defaults).
ADDED_FIELDS = {
    "average": 0.0,
    "lr": 1e-3,
    "last_steps": 0,
    "dqn_steps": 50_000,
    "dqn_epsilon": 0.05,
    "method": "soft_q",
    "max_states": MAX_STATES,
    "utility": "known",
    "n_features": N_FEATURES,
}

#: The utilities a study scores: the environment's reward (``meg_approx``), or every utility of
#: the observation (``meg_approx_unknown(..., utility="observation")`` against the exact
#: ``meg_unknown`` over every state utility: the same class where each state shows one
#: observation).
UTILITIES = ("known", "observation")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the validation study (YAML keys of the same names)."""

    results_dir: str = "results/approx_validation"
    cases: tuple[str, ...] = ("cliffworld_xy", "frozenlake_onehot", "random_features")
    horizons: tuple[int, ...] = (15, 15, 10)
    epsilons: tuple[float, ...] = (0.1, 0.3, 0.5)
    ppo: bool = True
    ppo_steps: int = 30_000
    ppo_seed: int = 0  # the training seed of the agents (the DQN's too)
    # one policy per case (eps<e>, ppo or dqn) instead of epsilons x ppo; empty: not used
    case_policies: tuple[str, ...] = ()
    dqn_steps: int = 50_000
    dqn_epsilon: float = 0.05
    seeds: tuple[int, ...] = tuple(range(10))
    n_data_steps: int = 180_000
    n_eval_episodes: int = N_EVAL_EPISODES
    n_models: int = 3
    hidden: tuple[int, ...] = (64, 64)
    iterations: int | None = None
    steps_per_iteration: int | None = None
    refine: int = 3
    average: float = AVERAGE
    lr: float = LR
    last_steps: int = LAST_STEPS
    n_boot: int = 500
    method: str = "soft_q"
    max_states: int = MAX_STATES
    n_features: int = N_FEATURES
    utility: str = "known"
    tolerance: float = 0.05
    progress: bool = False

    def __post_init__(self) -> None:
        """Refuse bad values when the config is loaded, before any unit runs."""
        check_config(self)  # the estimator's settings, as meg_approx accepts them
        check_values(
            self,
            positive=("horizons", "ppo_steps", "dqn_steps", "tolerance"),
            non_negative=("ppo_seed", "seeds"),
            probabilities=("epsilons", "dqn_epsilon"),
        )
        _check(self)


KNOWN_CASES = (
    CASES + CONTINUOUS_CASES + HELD_OUT_CASES + EMPIRICAL_HELD_OUT_CASES + CONTINUOUS_HELD_OUT_CASES
)


def _check(cfg: Config) -> None:
    if len(cfg.horizons) != len(cfg.cases):
        raise ValueError(f"horizons {cfg.horizons} must give one horizon per case {cfg.cases}.")
    for c in cfg.cases:
        if c not in KNOWN_CASES:
            raise ValueError(
                f"unknown case {c!r}; choose from {CASES}, {CONTINUOUS_CASES} or the held-out "
                f"{HELD_OUT_CASES}, {EMPIRICAL_HELD_OUT_CASES} or {CONTINUOUS_HELD_OUT_CASES}."
            )
    if cfg.utility not in UTILITIES:
        raise ValueError(f"utility must be one of {UTILITIES}, got {cfg.utility!r}.")
    if cfg.utility == "observation":
        jittered = [c for c in cfg.cases if c in CONTINUOUS_CASES + CONTINUOUS_HELD_OUT_CASES]
        if jittered or cfg.method not in OBSERVATION_METHODS:
            raise ValueError(
                "utility: observation scores every utility of the observation through the "
                "empirical MDP: it needs method: empirical (or auto) and cases whose states show "
                f"one observation each (not {jittered}); got method {cfg.method!r}."
            )
    if cfg.case_policies and len(cfg.case_policies) != len(cfg.cases):
        raise ValueError(
            f"case_policies {cfg.case_policies} must name one policy per case {cfg.cases} "
            "(or be empty: every case gets the epsilons and PPO)."
        )
    for p in cfg.case_policies:
        if p not in ("ppo", "dqn") and not _is_epsilon(p):
            raise ValueError(
                f"case policy {p!r} is not 'ppo', 'dqn' or 'eps<e>' with e in [0, 1] (eps0.2)."
            )


def _is_epsilon(name: str) -> bool:
    try:
        return name.startswith("eps") and 0.0 <= float(name[3:]) <= 1.0
    except ValueError:
        return False


def _policies(cfg: Config) -> list[list[str]]:
    """The policies of each case."""
    if cfg.case_policies:
        return [[p] for p in cfg.case_policies]
    shared = [f"eps{e:g}" for e in cfg.epsilons] + (["ppo"] if cfg.ppo else [])
    return [shared for _ in cfg.cases]


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per (case, policy, seed)."""
    _check(cfg)
    # seed-major, so that a partial run covers every case and policy
    return [
        {"case": c, "horizon": int(h), "policy": p, "seed": int(s)}
        for s in cfg.seeds
        for c, h, pols in zip(cfg.cases, cfg.horizons, _policies(cfg), strict=True)
        for p in pols
    ]


@functools.lru_cache(maxsize=4)
def _train(algo: str, name: str, horizon: int, steps: int, seed: int, epsilon: float = 0.05) -> Any:
    """The PPO or DQN agent of a case (deterministic; kept for the other seeds' units in this
    process). DQN explores down to ``epsilon``, the rate it is scored at."""
    from stable_baselines3.common.env_util import make_vec_env

    from imitation_meg.training import make_model

    case = validation_case(name, horizon=horizon)
    venv = make_vec_env(case.make, n_envs=8 if algo == "ppo" else 1, seed=seed)
    model = make_model(algo, venv, seed, dqn_epsilon=epsilon, timesteps=steps)
    model.learn(steps)
    venv.close()
    return model


def scored_epsilon(cfg: Config, policy: str) -> float | None:
    """The exploration rate a unit's agent is scored at: ``dqn_epsilon`` for the DQN agent (an
    argmax policy), None for the others."""
    return cfg.dqn_epsilon if policy == "dqn" else None


def scored_policy(cfg: Config, unit: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A unit's validation case, its scored policy (epsilon-greedy on observations, or the PPO
    or DQN agent) and the policy's exact MEG result (with ``utility: observation``, the exact
    unknown-utility MEG over every utility of the state)."""
    case = validation_case(unit["case"], horizon=unit["horizon"])
    if unit["policy"] in ("ppo", "dqn"):
        from imitation_meg.adapters import policy_table

        algo = unit["policy"]
        steps = cfg.ppo_steps if algo == "ppo" else cfg.dqn_steps
        policy: Any = _train(
            algo, unit["case"], unit["horizon"], steps, cfg.ppo_seed, cfg.dqn_epsilon
        )
        eps = scored_epsilon(cfg, algo)
        if case.variants is None:
            table = policy_table(policy, case.mdp, observations=case.observations, epsilon=eps)
        else:  # the mean over each state's observation variants, as the estimator acts
            acts = as_policy_fn(policy, n_actions=case.mdp.n_actions, epsilon=eps)
            table = th.as_tensor(state_policy(case, acts.probs))
    else:
        eps = float(unit["policy"][3:])
        table = stationary_epsilon_greedy(case.mdp, eps)
        policy = TablePolicy(table, case.observations)
    if cfg.utility == "observation":
        return case, policy, im.meg_unknown(table, case.mdp)
    return case, policy, im.meg(table, case.mdp)


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """Exact and approximate MEG of one policy in one case with one seed."""
    th.set_num_threads(1)
    case, policy, exact = scored_policy(cfg, unit)
    options = ApproxOptions.from_fields(cfg, seed=unit["seed"])
    eps = scored_epsilon(cfg, unit["policy"])
    if cfg.utility == "observation":
        res = meg_approx_unknown(
            policy, case.make, utility="observation", epsilon=eps, options=options
        ).result
    else:
        res = meg_approx(policy, case.make, epsilon=eps, options=options)
    bound = exact.upper_bound
    return {
        **unit,
        "exact": exact.meg,
        "exact_beta": exact.beta,
        "bound": bound,
        "approx": res.meg,
        "low": res.low,
        "high": res.high,
        "beta": res.beta,
        "covered": bool(res.low <= exact.meg <= res.high),
        "error_rel": (res.meg - exact.meg) / bound,
        "seed_std": res.seed_std,
        "first_stage": res.first_stage,
        "refine_shift": res.refine_shift,
        "allowance": res.allowance,
        "settled": res.settled,
        "stages": list(res.stages),
        "stage_intervals": [list(v) for v in res.stage_intervals],
        "residual_rms": res.residual_rms,
        "certificate": res.certificate,
        "n_env_steps": res.n_env_steps,
        "mean_length": res.mean_length,
        "method": res.method,
        "n_states": res.n_states,
        # every stage's L(beta) curves (kept in the unit files, left out of the tables): other
        # ways of combining the fits can be tried on them without refitting
        "curves": [[b.tolist(), c.tolist()] for b, c in res.stage_curves],
    }


def _groups(rows: list[dict[str, Any]]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The rows grouped by (case, policy), sorted."""
    key = lambda r: (r["case"], r["policy"])  # noqa: E731
    return [(c, p, list(g)) for (c, p), g in itertools.groupby(sorted(rows, key=key), key=key)]


#: The stricter yardstick: an estimate is within it when its error is at most this share of the
#: exact value or ``STRICT_FLOOR`` of ``H log|A|``, whichever is larger (small values are held
#: to 5% of themselves, not of the bound).
STRICT_SHARE = 0.05
STRICT_FLOOR = 0.01


def strict_tolerance(exact: float, bound: float) -> float:
    """The largest error within the stricter yardstick for exact value ``exact`` and bound
    ``H log|A|`` ``bound``."""
    return max(STRICT_SHARE * abs(exact), STRICT_FLOOR * bound)


def within_strict(row: dict[str, Any]) -> bool:
    """Whether a unit's estimate is within the stricter yardstick (:data:`STRICT_SHARE`)."""
    return bool(abs(row["approx"] - row["exact"]) <= strict_tolerance(row["exact"], row["bound"]))


def stage_sampling(row: dict[str, Any], k: int) -> float:
    """Stage ``k``'s sampling half-width, read back from its stored interval: the half-width
    less the allowance (the largest move from an earlier stage), from an end not clipped to
    ``[0, certificate]``; NaN when both ends are clipped."""
    stages = [float(m) for m in row["stages"]]
    k = k % len(stages)
    _, low, high = row["stage_intervals"][k]
    cert = float(row["certificate"])
    allowance = max((abs(stages[k] - m) for m in stages[:k]), default=0.0)
    if 0.0 < low < cert:
        return stages[k] - low - allowance
    if 0.0 < high < cert:
        return high - stages[k] - allowance
    return math.nan


def settled(row: dict[str, Any]) -> bool | None:
    """The unit's ``settled`` flag (:func:`~imitation_meg.approx.evaluate.stages_settled`); for
    units made before the flag was stored, recovered with :func:`stage_sampling` (None when both
    ends of the last interval are clipped or no stages were stored)."""
    if "settled" in row:
        return row["settled"]
    if not row.get("stages") or not row.get("stage_intervals"):
        return None
    sampling = stage_sampling(row, -1)
    if not math.isfinite(sampling):
        return None
    return stages_settled(row["stages"], sampling, row["bound"])


def _summary(cfg: Config, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for case, pol, g in _groups(rows):
        err = np.array([r["error_rel"] for r in g])
        out.append(
            {
                "case": case,
                "policy": pol,
                "exact": g[0]["exact"],
                "approx_mean": float(np.mean([r["approx"] for r in g])),
                "approx_std": float(np.std([r["approx"] for r in g])),
                "max_abs_error_rel": float(np.abs(err).max()),
                "mean_error_rel": float(err.mean()),
                "covered": int(sum(r["covered"] for r in g)),
                "n_seeds": len(g),
                "within_tolerance": bool(np.abs(err).max() <= cfg.tolerance),
                "within_strict": int(sum(within_strict(r) for r in g)),
                # the error in % of the exact value (NaN for an exact 0)
                "max_abs_error_exact_rel": float(
                    max(abs(r["approx"] - r["exact"]) / abs(r["exact"]) for r in g)
                    if g[0]["exact"]
                    else math.nan
                ),
                "unsettled": int(sum(settled(r) is False for r in g)),
                "n_env_steps": int(g[0]["n_env_steps"]),
            }
        )
    return out


def _by_stage(cfg: Config, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case, policy and fitting stage (0: the first fit; ``k``: after ``k`` refits), the
    error the estimate had there (before clipping) and how often that stage's interval held the
    exact value: what ``refine=k`` reports (same seeds). Rows without stages (units made before
    they were stored) are left out; ``covered`` is None where the intervals were not stored."""
    out = []
    for case, pol, grp in _groups(rows):
        g = [r for r in grp if r.get("stages")]
        if not g:
            continue
        for k in range(min(len(r["stages"]) for r in g)):
            err = np.array([(r["stages"][k] - r["exact"]) / r["bound"] for r in g])
            held = [
                r["stage_intervals"][k][1] <= r["exact"] <= r["stage_intervals"][k][2]
                for r in g
                if r.get("stage_intervals")
            ]
            out.append(
                {
                    "case": case,
                    "policy": pol,
                    "stage": k,
                    "mean_error_rel": float(err.mean()),
                    "max_abs_error_rel": float(np.abs(err).max()),
                    "within_tolerance": int((np.abs(err) <= cfg.tolerance).sum()),
                    "covered": int(sum(held)) if len(held) == len(g) else None,
                    "n_seeds": len(g),
                }
            )
    return out


def _ordering(cfg: Config, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per case and seed: is the approximate MEG strictly decreasing in epsilon, as the exact?
    (No rows with fewer than two epsilons: there is no ordering to keep.)"""
    out: list[dict[str, Any]] = []
    eps_names = [f"eps{e:g}" for e in sorted(cfg.epsilons)]
    if len(eps_names) < 2:
        return out
    for case, seed in itertools.product(cfg.cases, cfg.seeds):
        vals = {r["policy"]: r for r in rows if r["case"] == case and r["seed"] == seed}
        if not all(n in vals for n in eps_names):
            continue
        approx = [vals[n]["approx"] for n in eps_names]
        exact = [vals[n]["exact"] for n in eps_names]
        out.append(
            {
                "case": case,
                "seed": seed,
                "exact_decreasing": all(a > b for a, b in itertools.pairwise(exact)),
                "approx_decreasing": all(a > b for a, b in itertools.pairwise(approx)),
            }
        )
    return out


def _plot(path: pathlib.Path, cfg: Config, rows: list[dict[str, Any]]) -> pathlib.Path:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, len(cfg.cases), figsize=(4.2 * len(cfg.cases), 3.8), squeeze=False)
    for ax, case in zip(axes[0], cfg.cases, strict=True):
        sel = [r for r in rows if r["case"] == case]
        pols = sorted({r["policy"] for r in sel}, key=lambda p: (p == "ppo", p))
        for i, pol in enumerate(pols):
            g = [r for r in sel if r["policy"] == pol]
            xs = i + np.linspace(-0.3, 0.3, len(g))
            est = np.array([r["approx"] for r in g])
            lo = est - np.array([r["low"] for r in g])
            hi = np.array([r["high"] for r in g]) - est
            ax.errorbar(xs, est, yerr=[lo, hi], fmt="o", ms=3, color="#1f77b4", lw=0.8)
            ax.hlines(g[0]["exact"], i - 0.4, i + 0.4, color="k", lw=1.5)
        ax.set_xticks(range(len(pols)), pols)
        ax.set_title(f"{case} (H={sel[0]['horizon']})" if sel else case)
        ax.set_ylabel("MEG (nats)")
    fig.suptitle("approximate MEG (dots, 95% intervals, one per seed)\nvs exact (bars)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


def rewiden(row: dict[str, Any]) -> dict[str, Any]:
    """A unit row made with the former allowance (the move from the first stage only), with the
    current interval (the largest move from any earlier stage).

    Each stage's sampling half-width is recovered from its stored interval (the old allowance
    taken off, from whichever end was not clipped to ``[0, certificate]``), then widened by the
    current allowance and clipped again: what a rerun with the current code reports, since the
    fits, bootstrap draws and stage estimates are the same (same seed, same result). Rows that
    already carry ``allowance``, have no stored stages or no interval (``n_boot`` below 2: NaN
    ends), are returned unchanged; a stage whose interval was clipped at both ends cannot be
    recovered and raises ``ValueError``.
    """
    if "allowance" in row or not row.get("stages") or not row.get("stage_intervals"):
        return row
    if not all(math.isfinite(v) for _, low, high in row["stage_intervals"] for v in (low, high)):
        return row
    stages, cert = [float(m) for m in row["stages"]], float(row["certificate"])
    widened, allowance = [], 0.0
    for k, (mean, (est, low, high)) in enumerate(zip(stages, row["stage_intervals"], strict=True)):
        old = abs(mean - stages[0])
        if 0.0 < low < cert:
            sampling = mean - low - old
        elif 0.0 < high < cert:
            sampling = high - mean - old
        else:
            raise ValueError(
                f"stage {k} of unit {row['case']} {row['policy']} seed {row['seed']} has its "
                f"interval [{low}, {high}] clipped at both ends: rerun that unit."
            )
        allowance = max((abs(mean - m) for m in stages[:k]), default=0.0)
        half = sampling + allowance
        widened.append([est, min(max(mean - half, 0.0), cert), min(max(mean + half, 0.0), cert)])
    _, low, high = widened[-1]
    covered = bool(low <= row["exact"] <= high)
    return {
        **row,
        "low": low,
        "high": high,
        "covered": covered,
        "allowance": allowance,
        "stage_intervals": widened,
    }


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Tables (per unit, per case and policy, per fitting stage, ordering) and the figure.

    Rows made before the current interval are re-widened first (:func:`rewiden`)."""
    out = pathlib.Path(cfg.results_dir)
    results = [rewiden({k: v for k, v in r.items() if k != "curves"}) for r in results]
    summary = _summary(cfg, results)
    ordering = _ordering(cfg, results)
    fig = _plot(out / "approx_vs_exact.png", cfg, results)
    acceptance = {
        "max_abs_error_rel": max((s["max_abs_error_rel"] for s in summary), default=math.nan),
        "min_covered": min((s["covered"] for s in summary), default=0),
        "min_within_strict": min((s["within_strict"] for s in summary), default=0),
        "n_seeds": len(cfg.seeds),
        # None when no case had two epsilons to order
        "ordering_preserved": all(o["approx_decreasing"] for o in ordering) if ordering else None,
    }
    return write_results(
        out,
        cfg,
        {
            "results": results,
            "summary": summary,
            "stages": _by_stage(cfg, results),
            "ordering": ordering,
        },
        acceptance=acceptance,
        figures=[str(fig)],
    )


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)
