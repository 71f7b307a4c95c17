"""Validation of the continuous-action estimator against exact answers seen through observations.

Random smooth continuous-action MDPs (:func:`imitation_meg.continuous.random_continuous_mdp`,
``S`` states, action boxes of 1 and 2 dimensions) become gymnasium environments whose
observation of a state is a row of random features (:class:`~imitation_meg.continuous.
ContinuousTabularEnv`); the estimator (the Box soft Q-fits of :func:`~imitation_meg.approx.
meg_approx`, ``method="soft_q"``) sees only ``reset`` / ``step``, the observations and the scored
policy's action law at each observation. The exact value comes from :func:`~imitation_meg.continuous.
meg_continuous` on the MDP. Policies (stationary, acting on observations):

- ``uniform``: the uniform density (exact MEG 0);
- ``squashed``: a SAC-like squashed Gaussian per state, centred on the peak of the state's
  utility, pre-squash standard deviation ``std``;
- ``clipped``: a PPO-like Gaussian clipped to the box, centred on the same peak, standard
  deviation ``std`` (in units of the box's half-width).

One unit per (dimension, policy, seed); the MDP is the same for every seed of a row (its seed is
``mdp_seed + d``), the estimator's seed varies, so a row's coverage is the estimator's.

Run: ``imitation-meg reproduce configs/continuous_validation.yaml``.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import sys
from typing import Any

import numpy as np
import torch as th

from imitation_meg.approx import ApproxOptions, meg_approx
from imitation_meg.continuous import (
    ContinuousTabularEnv,
    GaussianPolicy,
    meg_continuous,
    random_continuous_mdp,
)
from imitation_meg.continuous.envs import table_policy
from imitation_meg.results import write_results
from imitation_meg.runners import run_serially

UNIT_RESOURCES = {"num_cpus": 1}
# Fields that only choose units (each unit holds its own values): a run of some of them reuses the
# units of a wider run, and the reverse.
SWEEP_FIELDS = ("dims", "policies", "seeds")
POLICIES = ("uniform", "squashed", "clipped")


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of the study (YAML keys of the same names)."""

    results_dir: str = "results/continuous_validation"
    dims: tuple[int, ...] = (1, 2)
    policies: tuple[str, ...] = POLICIES
    seeds: tuple[int, ...] = tuple(range(10))
    n_states: int = 6
    horizon: int = 5
    mdp_seed: int = 100
    std: float = 0.35
    n_data_steps: int = 6_000
    n_eval_episodes: int = 150
    n_models: int = 3
    hidden: tuple[int, ...] = (64, 64)
    steps_per_iteration: int = 200
    refine: int = 1
    n_boot: int = 300
    tolerance_abs: float = 0.05
    tolerance_rel: float = 0.10


def units(cfg: Config) -> list[dict[str, Any]]:
    """One unit per (dimension, policy, seed), seed-major (a partial run covers every row)."""
    for p in cfg.policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; choose from {POLICIES}.")
    return [
        {"dim": int(d), "policy": p, "seed": int(s)}
        for s, d, p in itertools.product(cfg.seeds, cfg.dims, cfg.policies)
    ]


def problem(cfg: Config, dim: int, policy: str) -> tuple[Any, Any]:
    """The row's MDP and its tabular policy (``"uniform"`` or a :class:`GaussianPolicy`)."""
    mdp = random_continuous_mdp(cfg.n_states, dim, cfg.horizon, seed=cfg.mdp_seed + dim)
    if policy == "uniform":
        return mdp, "uniform"
    peak = mdp.utility.m.numpy()  # (S, d), normalised coordinates in [-0.8, 0.8]
    std = np.full_like(peak, cfg.std)
    if policy == "squashed":
        return mdp, GaussianPolicy(np.arctanh(peak), std, kind="squashed", name="squashed")
    half = 0.5 * (mdp.high - mdp.low)
    centre = mdp.low + (peak + 1.0) * half
    return mdp, GaussianPolicy(centre, std * half, kind="clipped", name="clipped")


def run_unit(cfg: Config, unit: dict[str, Any]) -> dict[str, Any]:
    """The exact value and the estimate of one (dimension, policy, seed)."""
    th.set_num_threads(1)
    mdp, pol = problem(cfg, unit["dim"], unit["policy"])
    from imitation_meg.continuous import policies

    exact = meg_continuous(policies.uniform(mdp) if pol == "uniform" else pol, mdp)
    res = meg_approx(
        table_policy(pol, mdp),
        lambda: ContinuousTabularEnv(mdp),
        horizon=cfg.horizon,
        options=ApproxOptions.from_fields(cfg, method="soft_q", seed=unit["seed"]),
    )
    err = res.meg - exact.meg
    return {
        **unit,
        "exact": exact.meg,
        "exact_beta": exact.beta,
        "certificate": exact.certificate,
        "approx": res.meg,
        "low": res.low,
        "high": res.high,
        "beta": res.beta,
        "error": err,
        "error_rel": err / exact.meg if exact.meg > 0 else float("nan"),
        "covered": bool(res.low <= exact.meg <= res.high),
        "within": bool(abs(err) <= cfg.tolerance_abs + cfg.tolerance_rel * exact.meg),
        "stages": list(res.stages),
        "seed_std": res.seed_std,
        "residual_rms": res.residual_rms,
        "n_env_steps": res.n_env_steps,
    }


def _summary(cfg: Config, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for d, p in itertools.product(cfg.dims, cfg.policies):
        sel = [r for r in rows if r["dim"] == d and r["policy"] == p]
        if not sel:
            continue
        err = np.array([r["error"] for r in sel])
        out.append(
            {
                "dim": d,
                "policy": p,
                "n_seeds": len(sel),
                "exact": sel[0]["exact"],
                "mean_estimate": float(np.mean([r["approx"] for r in sel])),
                "mean_error": float(err.mean()),
                "max_abs_error": float(np.abs(err).max()),
                "mean_error_rel": float(err.mean() / sel[0]["exact"])
                if sel[0]["exact"] > 0
                else None,
                "covered": int(sum(r["covered"] for r in sel)),
                "within_tolerance": int(sum(r["within"] for r in sel)),
            }
        )
    return out


def _plot(path: pathlib.Path, cfg: Config, rows: list[dict[str, Any]]) -> pathlib.Path:
    from imitation_meg.plotting import pyplot, save_figure

    plt = pyplot()
    groups = [(d, p) for d in cfg.dims for p in cfg.policies]
    fig, axes = plt.subplots(1, len(groups), figsize=(2.6 * len(groups), 3.2), squeeze=False)
    for ax, (d, p) in zip(axes[0], groups, strict=True):
        sel = sorted(
            (r for r in rows if r["dim"] == d and r["policy"] == p), key=lambda r: r["seed"]
        )
        if not sel:
            continue
        s = [r["seed"] for r in sel]
        est = np.array([r["approx"] for r in sel])
        lo = est - np.array([r["low"] for r in sel])
        hi = np.array([r["high"] for r in sel]) - est
        ax.errorbar(s, est, yerr=[lo, hi], fmt="o", ms=3, capsize=2, label="estimate")
        ax.axhline(sel[0]["exact"], color="k", lw=1, label="exact")
        ax.set_title(f"{d}-D, {p}", fontsize=9)
        ax.set_xlabel("seed")
    axes[0][0].set_ylabel("MEG (nats)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def combine(cfg: Config, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-unit table, the per-row summary and the figure."""
    rows = sorted(results, key=lambda r: (r["dim"], r["policy"], r["seed"]))
    out = pathlib.Path(cfg.results_dir)
    fig = _plot(out / "continuous_vs_exact.png", cfg, rows)
    return write_results(
        out, cfg, {"results": rows, "summary": _summary(cfg, rows)}, figures=[str(fig)]
    )


def main(cfg: Config) -> dict[str, Any]:
    """Run every unit in this process and combine."""
    return run_serially(sys.modules[__name__], cfg)
