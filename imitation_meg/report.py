"""One call that scores a policy every way the paper does: known, exact unknown, MLP lower bound."""

from __future__ import annotations

import math
import numbers
from typing import Any

from imitation_meg.core.known import meg
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.core.unknown import meg_unknown
from imitation_meg.type_aliases import PolicyLike, UtilityLike

__all__ = ["SUMMARY_COLUMNS", "SUMMARY_SETTINGS", "meg_summary"]

#: The keyword settings of :func:`meg_summary`'s MLP estimate, which a study's config carries
#: under the same names.
SUMMARY_SETTINGS = ("mlp_steps", "mlp_lr", "mlp_seeds", "seed")

#: The table columns :func:`meg_summary` always returns (MLP columns are NaN when skipped).
SUMMARY_COLUMNS = (
    "known",
    "unknown_exact",
    "mlp_mean",
    "mlp_2sigma",
    "mlp_best",
    "certificate",
    "known_beta",
)


def meg_summary(
    policy: PolicyLike,
    mdp: TabularMDP,
    *,
    utility: UtilityLike | None = None,
    mlp_steps: int = 0,
    mlp_lr: float = 0.01,
    mlp_seeds: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """Known-utility MEG, exact unknown-utility MEG over state utilities, and the MLP estimate.

    Args:
        policy: ``(S, A)`` or ``(H, S, A)`` policy.
        mdp: the MDP.
        utility: the known utility (default the MDP's).
        mlp_steps: Adam steps per seed of the paper's Algorithm 2; 0 skips the MLP (its
            columns are NaN), any positive count runs it.
        mlp_lr: its learning rate.
        mlp_seeds: number of random initialisations (the paper reports their mean).
        seed: base seed of the MLP initialisations.

    Returns:
        A flat dict: ``known``, ``known_beta``, ``unknown_exact``, ``unknown_at_boundary``,
        ``certificate`` (Gibbs upper bound), ``upper_bound`` (H log|A|), ``mlp_mean``,
        ``mlp_2sigma`` (twice the sample std over seeds) and ``mlp_best`` (NaN without the MLP)
        and, with the MLP, ``mlp_values``.

    Raises:
        ValueError: a negative ``mlp_steps`` (or one that is not an integer), and with the MLP
            a ``mlp_seeds`` below 1 or a ``mlp_lr`` that is not positive; checked before any
            work. Bad policies and MDPs as in :func:`~imitation_meg.meg`.
    """
    if isinstance(mlp_steps, bool) or not isinstance(mlp_steps, numbers.Integral) or mlp_steps < 0:
        raise ValueError(
            f"mlp_steps must be a non-negative integer (0 skips the MLP estimate), got "
            f"{mlp_steps!r}."
        )
    if mlp_steps > 0:
        if (
            isinstance(mlp_seeds, bool)
            or not isinstance(mlp_seeds, numbers.Integral)
            or mlp_seeds < 1
        ):
            raise ValueError(
                f"mlp_seeds must be a positive integer (or mlp_steps=0 to skip the MLP), got "
                f"{mlp_seeds!r}."
            )
        if not mlp_lr > 0:
            raise ValueError(f"mlp_lr must be a positive learning rate, got {mlp_lr!r}.")
    known = meg(policy, mdp, utility)
    exact = meg_unknown(policy, mdp)
    out: dict[str, Any] = {
        "known": known.meg,
        "known_beta": known.beta,
        "unknown_exact": exact.meg,
        "unknown_at_boundary": exact.at_boundary,
        "certificate": exact.extra["certificate"],
        "upper_bound": mdp.steps * math.log(mdp.n_actions),
        "mlp_mean": math.nan,
        "mlp_2sigma": math.nan,
        "mlp_best": math.nan,
    }
    if mlp_steps > 0:
        mlp = meg_unknown(
            policy,
            mdp,
            utility_model="mlp",
            steps=int(mlp_steps),
            lr=mlp_lr,
            restarts=int(mlp_seeds),
            seed=seed,
        )
        out.update(
            mlp_mean=mlp.extra["mean"],
            mlp_2sigma=2.0 * mlp.extra["std"],
            mlp_best=mlp.meg,
            mlp_values=mlp.extra["restart_values"],
        )
    return out
