"""Scoring continuous-action agents on continuous-action MDPs (exact MEG) with the interfaces of
the discrete ones. (Environments given only through reset / step, Box actions included, are
scored by :mod:`imitation_meg.approx`: ``imitation-meg score`` through
:func:`~imitation_meg.cli.approx.score_approx`.)

- :func:`is_continuous`, :func:`as_mdp`: a :class:`~imitation_meg.continuous.ContinuousMDP` or
  an environment built on one, and its MDP.
- :func:`exact_record`: what :class:`~imitation_meg.callbacks.MEGCallback` logs for an agent
  training on a :class:`~imitation_meg.continuous.ContinuousMDP` (exact MEG).
- :func:`score_row`: one row of :func:`imitation_meg.scoring.score_policies` for a saved model
  (or ``"uniform"``) on a :class:`~imitation_meg.continuous.ContinuousMDP` (exact MEG).
"""

from __future__ import annotations

import pathlib
from typing import Any

__all__ = ["as_mdp", "exact_record", "is_continuous", "score_row"]


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
    from imitation_meg.results import meg_record

    pol = tabular_policy(model, mdp, observations, noise_std=noise_std)
    res = meg_continuous(pol, mdp)
    record = meg_record(
        res,
        expected_return=res.expected_utility,
        upper_bound=None,
        converged=res.converged,
        certificate=res.certificate,
    )
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
    from imitation_meg.continuous.known import meg_continuous
    from imitation_meg.continuous.unknown import meg_continuous_unknown

    if opts.mode not in ("known", "unknown"):
        raise ValueError(
            f"mode {opts.mode!r} is not available for continuous actions (known or unknown)."
        )
    if opts.epsilon is not None or opts.action_masks is not None:
        raise ValueError("--epsilon / --action-masks apply to discrete actions.")
    noise = getattr(opts, "noise_std", None)
    pol, about = _density_of(source, mdp, opts.algo, noise)
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


def _density_of(source: str, mdp: Any, algo: str | None, noise: Any) -> tuple[Any, dict[str, Any]]:
    """The policy density ``source`` names (``"uniform"`` or a saved SB3 model) and its
    ``algo`` / ``timesteps``."""
    from imitation_meg.continuous import policies
    from imitation_meg.continuous.densities import tabular_policy

    if source == "uniform":
        return policies.uniform(mdp), {"algo": None, "timesteps": None}
    if source in ("optimal", "epsilon-greedy"):
        raise ValueError(
            f"{source!r} has no density on a continuous box (a deterministic policy); score "
            "'uniform' or a saved model."
        )
    from imitation_meg.adapters.saved_models import read_model_info

    p = pathlib.Path(source)
    if not p.exists():
        raise FileNotFoundError(f"no SB3 model file at {source!r}.")
    info = read_model_info(p)
    about = {"algo": (algo or info.algo), "timesteps": info.num_timesteps}
    return tabular_policy(source, mdp, algo=algo, noise_std=noise), about
