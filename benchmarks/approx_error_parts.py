"""Where an approximate MEG estimate's error comes from, on a validation case with a known answer.

The estimate is ``max_beta L_hat(beta)`` on ``n_eval_episodes`` fresh episodes of the scored policy,
with ``L_hat`` computed from fitted soft Q-networks. Its error splits into

- the *evaluation part*: ``max_beta`` of the same objective computed with the exact soft-optimal
  policies on the same episodes, minus the exact MEG (what a perfect fit would still report);
- the *fit part*: the rest, which this script breaks down by fit and by decision ``t``: each fit's
  ``L_hat(beta*) - L_exact(beta*)`` at the exact rationality ``beta*`` on those episodes.

Usage (from the repository root; every number is in % of ``H log|A|`` unless named nats)::

    python benchmarks/approx_error_parts.py eval random_features eps0.1 --episodes 200 --seeds 0-9
    python benchmarks/approx_error_parts.py fits frozenlake_onehot ppo --seed 7 \\
        --set average=0.5 --set lr=0.003 --set last_steps=3
    python benchmarks/approx_error_parts.py eval taxi_onehot dqn --episodes 1000 --seeds 0-9
    python benchmarks/approx_error_parts.py fits taxi_onehot dqn --set method='"linear"'

The cases are those of ``configs/approx_validation.yaml``, ``configs/approx_heldout.yaml`` and
``configs/approx_heldout_empirical_added.yaml``,
each with its config's horizon and agents.

``eval`` is cheap (no fitting); ``fits`` runs one ``meg_approx`` (minutes) with ``--set`` on top of
its defaults (since 2026-11-26 ``average=0.5, lr=0.003, last_steps=3, n_eval_episodes=1000``;
the runs of docs/approx.md made before then name ``--set last_steps=0 --set n_eval_episodes=200``).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

from imitation_meg.approx import core, known, linear
from imitation_meg.approx.policy import as_policy_fn
from imitation_meg.approx.rollouts import EnvSource, Rollouts, collect
from imitation_meg.core.soft_vi import soft_value_iteration
from imitation_meg.runners import load_driver, parse_seeds
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The studies whose cases this script splits: the validation cases and the held-out families.
CONFIGS = (
    "approx_validation.yaml",
    "approx_heldout.yaml",
    "approx_heldout_empirical_added.yaml",
)


#: the study's driver (its cases' policies, and the scoring rate of its DQN agents)
STUDY = load_driver("approx_validation", ROOT / "experiments")


@functools.lru_cache(maxsize=1)
def _configs() -> dict[str, Any]:
    """Each case's study config (the driver's ``Config``, read from :data:`CONFIGS`)."""
    out = {}
    for name in CONFIGS:
        cfg = load_config(load_yaml(ROOT / "configs" / name), STUDY.Config)
        out.update(dict.fromkeys(cfg.cases, cfg))
    return out


def scored(case_name: str, policy: str) -> tuple[Any, Any, Any]:
    """The validation case, the scored policy and its exact MEG, as its study builds them."""
    cfg = _configs()[case_name]
    unit = {
        "case": case_name,
        "horizon": cfg.horizons[cfg.cases.index(case_name)],
        "policy": policy,
    }
    return STUDY.scored_policy(cfg, unit)


def _epsilon(case_name: str, policy: str) -> float | None:
    """The epsilon the study scores a case's ``policy`` at (None but for DQN agents)."""
    return STUDY.scored_epsilon(_configs()[case_name], policy)


def states_and_times(case: Any, ev: Rollouts) -> tuple[np.ndarray, np.ndarray]:
    """The state of every evaluation row (nearest observation row) and its decision ``t``."""
    obs = np.asarray(case.observations, dtype=np.float64)
    x = np.asarray(ev.x, dtype=np.float64)
    return ((x[:, None, :] - obs[None]) ** 2).sum(-1).argmin(1), np.asarray(ev.t)


def exact_terms(case: Any, ev: Rollouts, beta: float) -> np.ndarray:
    """Per evaluation row ``sum_a pi(a|s) log pi*_beta(a|s, t) + log|A|`` (exact policies)."""
    s, t = states_and_times(case, ev)
    log_pi = soft_value_iteration(case.mdp, [beta]).log_pi[0].numpy()
    assert ev.probs is not None
    return (ev.probs * log_pi[t, s]).sum(1) + math.log(case.mdp.n_actions)


def evaluation_part(case_name: str, policy: str, episodes: int, seeds: Sequence[int]) -> None:
    """Print the evaluation part of each seed's episodes (as ``meg_approx`` draws them)."""
    case, pol, exact = scored(case_name, policy)
    source = EnvSource(case.make, horizon=case.mdp.horizon)
    fn = as_policy_fn(pol, n_actions=source.n_actions, epsilon=_epsilon(case_name, policy))
    grid = exact.beta * np.exp(np.linspace(-1.0, 1.0, 81))
    parts = []
    for seed in seeds:
        s_eval = np.random.SeedSequence(seed).spawn(3)[0]  # meg_approx's evaluation stream
        behaviour = core.policy_behaviour(fn)
        ev = collect(source, behaviour, episodes, np.random.default_rng(s_eval), scored=fn)
        best = max(exact_terms(case, ev, b).sum() / ev.n_episodes for b in grid)
        at_star = exact_terms(case, ev, exact.beta).sum() / ev.n_episodes
        part = 100 * (best - exact.meg) / exact.upper_bound
        parts.append(part)
        print(
            f"{case_name} {policy} seed {seed}: evaluation part {part:+.2f}% "
            f"(at the exact beta {100 * (at_star - exact.meg) / exact.upper_bound:+.2f}%)"
        )
    spread = f", SD {np.std(parts, ddof=1):.3f}%" if len(parts) > 1 else ""
    print(f"mean {np.mean(parts):+.3f}%{spread} over {len(parts)} seed(s)")


def fit_part(case_name: str, policy: str, seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    """Run ``meg_approx`` and split its error; print and return the parts."""
    case, pol, exact = scored(case_name, policy)
    seen: dict[str, Any] = {}
    summarise = core.summarise

    def keep(ev: Rollouts, ens: Any, betas: Any, mats: Any, **kw: Any) -> Any:
        seen.update(ev=ev, ens=ens, betas=betas, mats=mats)
        return summarise(ev, ens, betas, mats, **kw)

    core.summarise = linear.summarise = keep  # the soft Q-fits' and the linear method's
    try:
        eps = _epsilon(case_name, policy)
        res = known.meg_approx(pol, case.make, seed=seed, epsilon=eps, **settings)
    finally:
        core.summarise = linear.summarise = summarise
    ev, ens, bound = seen["ev"], seen["ens"], exact.upper_bound
    n, H = ev.n_episodes, case.mdp.horizon
    grid = exact.beta * np.exp(np.linspace(-1.5, 1.5, 121))
    best = max(exact_terms(case, ev, b).sum() / n for b in grid)
    ref = exact_terms(case, ev, exact.beta)
    _, t = states_and_times(case, ev)
    x, tt = th.as_tensor(ev.x), th.as_tensor(ev.t)
    out: dict[str, Any] = {
        "case": case_name,
        "policy": policy,
        "seed": seed,
        "settings": settings,
        "exact": exact.meg,
        "estimate": res.meg,
        "error": 100 * (res.meg - exact.meg) / bound,
        "evaluation_part": 100 * (best - exact.meg) / bound,
        "stages": list(res.stages),
        "fits": [],
    }
    print(
        f"{case_name} {policy} seed {seed}: estimate {res.meg:.3f} against {exact.meg:.3f} "
        f"({out['error']:+.2f}%); evaluation part {out['evaluation_part']:+.2f}%, fit part "
        f"{out['error'] - out['evaluation_part']:+.2f}%"
    )
    for k, m in enumerate(ens.models):
        b = th.full((x.shape[0],), exact.beta * m.q_scale)
        with th.no_grad():
            lp = th.log_softmax(exact.beta * m.q_scale * m.f(x, tt, b).double(), dim=-1)
        terms = (ev.probs * lp.numpy()).sum(1) + math.log(case.mdp.n_actions)
        diff = terms - ref
        by_decision = [float(diff[t == h].sum() / n) for h in range(H)]
        fit = {
            "max_nats": float(seen["mats"][str(k)].mean(0).max()),
            "at_exact_beta_nats": float(diff.sum() / n),
            "by_decision_nats": by_decision,
        }
        out["fits"].append(fit)
        by_t = " ".join(f"{v:+.3f}" for v in by_decision)
        print(
            f"  fit {k}: its maximum {fit['max_nats']:.3f} nats; at the exact beta "
            f"{fit['at_exact_beta_nats']:+.3f} nats, by decision t = 0..{H - 1}: {by_t}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    ev = sub.add_parser("eval", help="the evaluation part of each seed (no fitting)")
    fits = sub.add_parser("fits", help="one estimate's error split by fit and decision")
    for p in (ev, fits):
        p.add_argument("case", choices=sorted(_configs()))
        p.add_argument("policy", help="eps0.1, eps0.3, eps0.5, ppo or dqn (as the study names it)")
    ev.add_argument("--episodes", type=int, default=200)
    ev.add_argument("--seeds", default="0-9")
    fits.add_argument("--seed", type=int, default=0)
    fits.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    fits.add_argument("--out", help="write the parts as JSON here")
    args = parser.parse_args()
    th.set_num_threads(1)
    if args.what == "eval":
        evaluation_part(args.case, args.policy, args.episodes, parse_seeds(args.seeds))
        return
    settings = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.set)}
    out = fit_part(args.case, args.policy, args.seed, settings)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
