"""Scoring continuous-action agents with the interfaces of the discrete ones.

- :func:`score_continuous`: ``imitation-meg score --env ENV --policy MODEL.zip`` for an
  environment with a bounded ``Box`` action space (the estimator of
  :mod:`imitation_meg.continuous.approx`; ``--noise-std`` for TD3 / DDPG).
- :func:`exact_record`: what :class:`~imitation_meg.callbacks.MEGCallback` logs for an agent
  training on a :class:`~imitation_meg.continuous.ContinuousMDP` (exact MEG).
- :func:`score_row`: one row of :func:`imitation_meg.scoring.score_policies` for a saved model
  (or ``"uniform"``) on a :class:`~imitation_meg.continuous.ContinuousMDP` (exact MEG).
"""

from __future__ import annotations

import argparse
import inspect
import math
import pathlib
import time
from typing import Any

__all__ = ["exact_record", "has_box_actions", "is_continuous", "score_continuous", "score_row"]


def is_continuous(obj: Any) -> bool:
    """Whether ``obj`` is a continuous-action MDP, or an environment built on one."""
    from imitation_meg.continuous.envs import ContinuousTabularEnv
    from imitation_meg.continuous.mdp import ContinuousMDP

    return isinstance(obj, ContinuousMDP) or isinstance(
        getattr(obj, "unwrapped", None), ContinuousTabularEnv
    )


def as_mdp(obj: Any) -> tuple[Any, Any]:
    """``(mdp, observations)`` of a :class:`ContinuousMDP` or an environment built on one."""
    from imitation_meg.continuous.mdp import ContinuousMDP

    if isinstance(obj, ContinuousMDP):
        return obj, obj.observations
    env = obj.unwrapped
    return env.mdp, env.obs_matrix


def has_box_actions(env_id: str) -> bool:
    """Whether the gymnasium id ``env_id`` acts in a ``Box``.

    Raises:
        ValueError: an id gymnasium cannot make.
    """
    import gymnasium as gym

    from imitation_meg._env_tables import make_env

    env = make_env(env_id, {})
    try:
        return isinstance(env.action_space, gym.spaces.Box)
    finally:
        env.close()


def exact_record(
    model: Any, mdp: Any, observations: Any, *, noise_std: float | None, unknown: bool
) -> dict[str, Any]:
    """Exact MEG of an SB3 agent on a continuous-action MDP, as the callback's record:
    ``meg``, ``normalized`` (``meg / certificate``), ``beta``, ``expected_return``,
    ``certificate`` (the policy's log-likelihood ratio against the uniform density, which bounds
    its MEG), ``upper_bound`` (None: a density has no ``H log|A|``, the bound of discrete
    records), ``converged`` (and ``unknown`` over every utility of the state)."""
    from imitation_meg.continuous.densities import tabular_policy
    from imitation_meg.continuous.known import meg_continuous

    pol = tabular_policy(model, mdp, observations, noise_std=noise_std)
    res = meg_continuous(pol, mdp)
    record: dict[str, Any] = {
        "meg": res.meg,
        "normalized": res.normalized,
        "beta": res.beta,
        "expected_return": res.expected_utility,
        "upper_bound": None,
        "certificate": res.certificate,
        "converged": bool(res.converged),
    }
    if unknown:
        from imitation_meg.continuous.unknown import meg_continuous_unknown

        unk = meg_continuous_unknown(pol, mdp, "state")
        record["unknown"] = unk.meg
        record["converged"] = record["converged"] and bool(unk.converged)
    return record


def score_row(source: str, mdp: Any, opts: Any) -> dict[str, Any]:
    """One row of :func:`~imitation_meg.scoring.score_policy` on a continuous-action MDP.

    Raises:
        ValueError: a mode other than known / unknown, options that do not apply.
    """
    from imitation_meg.continuous import policies
    from imitation_meg.continuous.densities import tabular_policy
    from imitation_meg.continuous.known import meg_continuous
    from imitation_meg.continuous.unknown import meg_continuous_unknown

    if opts.mode not in ("known", "unknown"):
        raise ValueError(
            f"mode {opts.mode!r} is not available for continuous actions (known or unknown)."
        )
    if opts.epsilon is not None or opts.action_masks is not None:
        raise ValueError("--epsilon / --action-masks apply to discrete actions.")
    about: dict[str, Any] = {"algo": None, "timesteps": None}
    noise = getattr(opts, "noise_std", None)
    if source == "uniform":
        pol: Any = policies.uniform(mdp)
    elif source in ("optimal", "epsilon-greedy"):
        raise ValueError(
            f"{source!r} has no density on a continuous box (a deterministic policy); score "
            "'uniform' or a saved model."
        )
    else:
        from imitation_meg.adapters.saved_models import read_model_info

        p = pathlib.Path(source)
        if not p.exists():
            raise FileNotFoundError(f"no SB3 model file at {source!r}.")
        info = read_model_info(p)
        about = {"algo": (opts.algo or info.algo), "timesteps": info.num_timesteps}
        pol = tabular_policy(source, mdp, algo=opts.algo, noise_std=noise)
    known = meg_continuous(pol, mdp, signed=opts.signed)
    res: Any = known if opts.mode == "known" else meg_continuous_unknown(pol, mdp, "state")
    algo = about["algo"]
    label = (
        source if source == "uniform" else f"{(algo or '?').upper()} {pathlib.Path(source).name}"
    )
    return {
        "policy": label,
        "source": source,
        "algo": algo.lower() if isinstance(algo, str) else algo,
        "timesteps": about["timesteps"],
        "mode": opts.mode,
        "meg": res.meg,
        "normalized": res.normalized,
        "upper_bound": None,  # no H log|A| for a density: the bound is the certificate
        "certificate": known.certificate,
        "known_meg": known.meg,
        "beta": known.beta,
        "expected_return": known.expected_utility,
        "converged": bool(res.converged and known.converged),
        "epsilon": None,
        "vec_normalize": None,
        "noise_std": noise,
    }


def score_continuous(args: argparse.Namespace) -> int:
    """``imitation-meg score`` for a ``Box``-action environment: the estimate, its interval,
    the certificate and the time taken.

    Reads ``env``, ``policy``, ``algo``, ``noise_std``, ``horizon``, ``seed``, ``mode``, ``json``,
    ``approx_options`` (``--approx-option KEY=VALUE`` items: keyword arguments of
    :func:`~imitation_meg.continuous.approx.meg_approx_continuous`) and the optional
    ``approx_models`` / ``approx_episodes`` / ``approx_steps`` / ``approx_data`` (set from
    Python, e.g. by the tests).

    Raises:
        ValueError: options that do not apply; a deterministic agent without ``--noise-std``.
    """
    import torch as th

    from imitation_meg.approx.evaluate import UNSETTLED_NOTE
    from imitation_meg.approx.score import estimator_settings
    from imitation_meg.continuous.approx import meg_approx_continuous
    from imitation_meg.continuous.densities import as_continuous_policy, uniform_policy
    from imitation_meg.continuous.rollouts import BoxEnvSource

    names = args.policy if isinstance(args.policy, list) else [args.policy]
    if len(names) != 1:
        raise ValueError(
            f"the continuous-action estimator scores one policy at a time, got {len(names)}."
        )
    if args.mode != "known":
        raise ValueError(
            f"--mode {args.mode} is not available for continuous actions (known only)."
        )
    for opt in ("signed", "rollouts", "target", "vec_normalize", "epsilon", "action_masks"):
        if getattr(args, opt, None):
            raise ValueError(f"--{opt.replace('_', '-')} is not available for continuous actions.")
    fixed = {"policy", "env", "horizon", "algo", "noise_std", "deterministic", "seed", "progress"}
    allowed = set(inspect.signature(meg_approx_continuous).parameters) - fixed
    settings = estimator_settings(getattr(args, "approx_options", None), allowed)
    th.set_num_threads(1)
    source = BoxEnvSource(args.env, horizon=args.horizon)
    noise = getattr(args, "noise_std", None)
    if names[0] == "uniform":
        if args.algo is not None or noise is not None:
            raise ValueError("--algo / --noise-std apply to a saved model, not to 'uniform'.")
        pol = uniform_policy(source.low, source.high)
    else:
        pol = as_continuous_policy(names[0], algo=args.algo, noise_std=noise)
    H = source.horizon
    kwargs: dict[str, Any] = {"n_eval_episodes": 30 if H >= 200 else 100}
    for attr, key in (
        ("approx_models", "n_models"),
        ("approx_episodes", "n_eval_episodes"),
        ("approx_steps", "steps_per_iteration"),
        ("approx_data", "n_data_steps"),
        ("approx_iterations", "iterations"),
    ):
        if getattr(args, attr, None) is not None:
            kwargs[key] = getattr(args, attr)
    kwargs.update(settings)  # --approx-option wins over the command's own defaults
    print(
        f"Approximate known-utility MEG of {pol.name} in {source.name} (Box of "
        f"{source.action_dim} dimension(s) [{source.low.tolist()}, {source.high.tolist()}], "
        f"H={H}; utility: the environment reward; reference: the uniform density on the box)",
        flush=True,
    )
    t0 = time.perf_counter()
    res = meg_approx_continuous(
        pol, source.make, horizon=H, seed=args.seed, progress=True, **kwargs
    )
    wall = time.perf_counter() - t0
    cert = (
        "inf (point masses on the bounds)"
        if math.isinf(res.certificate)
        else f"{res.certificate:.4f}"
    )
    norm = "n/a" if math.isnan(res.normalized) else f"{res.normalized:.4f}"
    lines = [
        (
            f"MEG estimate        {res.meg:.4f} nats   {res.confidence:.0%} interval "
            f"[{res.low:.4f}, {res.high:.4f}]"
        ),
        (
            f"certificate         {cert}   (the policy's own E[sum_t KL(pi || uniform)]; "
            f"normalized {norm})"
        ),
        f"beta*               {res.beta:.4g}   (utility units)",
        f"mean return         {res.expected_return:.4f}   (E[T] = {res.mean_length:.1f} of H = {H})",
        (
            f"seed spread (std)   {res.seed_std:.4f}   models se {res.model_se:.4f}, rollout se "
            f"{res.bootstrap_se:.4f}"
        ),
        (
            f"stages              {' -> '.join(f'{v:.4f}' for v in res.stages)}   (allowance "
            f"{res.allowance:.4f} in the interval)"
        ),
        f"Bellman residual    {res.residual_rms:.4f}   (RMS, fraction of the largest return)",
        f"action grid         {res.grid}",
        f"environment steps   {res.n_env_steps}",
        f"wall time           {wall:.1f} s",
    ]
    print("\n".join(lines))
    if res.settled is False:
        print(f"\n({UNSETTLED_NOTE})")
    if res.above_certificate:
        print(
            "\n(The fits exceeded the certificate, which no normalised model can: the action "
            "grid could not integrate the models at beta*; the estimate is the certificate by "
            "clipping, not a measured value.)"
        )
    if args.json:
        from imitation_meg.results import library_versions, write_json

        config = {k: v for k, v in vars(args).items() if k != "func"}
        payload = {
            "meg": res.meg,
            "mode": "known (approximate, continuous actions)",
            "policy": pol.name,
            "env": source.name,
            "config": config,
            "library_versions": library_versions(),
            "result": res.to_dict(),
        }
        print(f"\nWrote {write_json(args.json, payload)}.")
    return 0
