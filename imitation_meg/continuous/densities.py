"""The action densities of stable-baselines3 agents on bounded ``Box`` action spaces.

MEG is a ratio of action densities, so it needs the law of the action the environment
receives, at every observation. :func:`as_continuous_policy` reads it from an SB3 model, policy
or ``.zip`` as an :class:`ActionLaw` per batch of observations:

- **SAC** (and TQC): a squashed Gaussian. The actor gives ``g ~ N(mean, std^2)`` per dimension
  (``log_std`` clamped to ``[-20, 2]`` as SB3 does), the action in the box scaled to
  ``[-1, 1]`` is ``tanh(g)``, and SB3 rescales it to the environment's box
  (``low + (tanh(g) + 1) (high - low) / 2``). The density carries the exact ``tanh`` correction
  (SB3's own ``log_prob`` adds ``1e-6`` inside the logarithm; ours does not).
- **PPO / A2C** (and TRPO): a Gaussian ``N(mean, std^2)`` in the environment's units, which SB3
  *clips* to the box before ``env.step``. **We score the action the environment receives**:
  the clipped law, with point masses ``Phi((low - mean) / std)`` on ``low`` and
  ``Phi((mean - high) / std)`` on ``high``. MEG stays finite and well defined (``L(beta)`` is an
  expectation of the model's log-density ratio, finite at the bounds), but the policy has no
  density on the box, so its own log-likelihood ratio, the certificate, is ``+inf`` and
  ``normalized`` is not available. The pre-clip Gaussian lives on all of ``R^d``, where no
  uniform reference exists, so scoring it instead is not an option. (With ``squash_output=True``,
  possible with gSDE, the law is a squashed Gaussian as for SAC.)
- **gSDE** (``use_sde=True``, SAC or PPO): SB3's per-step marginal ``N(mean, sum_i
  latent_i^2 std_ij^2 + 1e-6)`` over the noise matrix, the distribution its ``log_prob`` uses.
  SB3 resamples the noise matrix only every ``sde_sample_freq`` steps (default: once per
  rollout), so successive actions are correlated; the Markov policy scored is the per-step
  marginal.
- **TD3, DDPG** (and SAC with ``deterministic=True``) act deterministically: there is no
  action density, and MEG is not defined (``+inf`` where the action is optimal). They are
  refused with a ``ValueError`` unless ``noise_std=SIGMA`` asks for the smoothed policy
  ``clip(action(s) + SIGMA N(0, I), -1, 1)`` in the box scaled to ``[-1, 1]``, which is what SB3
  runs with ``NormalActionNoise(sigma=SIGMA)`` (a clipped Gaussian; its certificate is
  ``+inf``).

stable_baselines3 is imported only when an SB3 object has to be handled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from imitation_meg._validation import is_loaded_instance
from imitation_meg.continuous.quadrature import (
    MeasureRule,
    box_rule,
    clipped_gaussian_rule,
    squashed_gaussian_rule,
)

__all__ = [
    "ActionLaw",
    "ContinuousPolicyFn",
    "as_continuous_policy",
    "deterministic_error",
    "tabular_policy",
    "uniform_policy",
]


@dataclasses.dataclass(frozen=True)
class ActionLaw:
    """Gaussian action laws of a batch of ``n`` observations, brought into the box.

    Attributes:
        kind: ``"squashed"`` (``mean``, ``std`` of the pre-squash Gaussian in the box scaled to
            ``[-1, 1]``), ``"clipped"`` (``mean``, ``std`` in the environment's units) or
            ``"uniform"`` (the uniform density on the box; ``mean``, ``std`` unused).
        mean: ``(n, d)`` float64.
        std: ``(n, d)`` float64.
        low: ``(d,)`` the environment's box.
        high: ``(d,)`` the environment's box.
    """

    kind: str
    mean: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def rule(self, *, nodes: int = 8, panels: int = 16, extra_breaks: bool = True) -> MeasureRule:
        """The laws as quadrature rules in the environment's units (see
        :mod:`imitation_meg.continuous.quadrature`; ``extra_breaks`` for the squashed kind)."""
        n = self.mean.shape[0]
        if self.kind == "uniform":
            box = box_rule(self.low, self.high, nodes=nodes, panels=max(1, panels // 4))
            w = (box.weights / box.weights.sum()).expand(n, -1)
            pts = box.points.expand(n, -1, -1)
            return MeasureRule(pts, w, th.zeros(n, dtype=th.float64))
        if self.kind == "squashed":
            return squashed_gaussian_rule(
                self.mean,
                self.std,
                self.low,
                self.high,
                nodes=nodes,
                panels=panels,
                extra_breaks=extra_breaks,
            )
        return clipped_gaussian_rule(
            self.mean, self.std, self.low, self.high, nodes=nodes, panels=panels
        )

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One action per row ``(n, d)`` in the environment's units."""
        if self.kind == "uniform":
            return self.low + rng.random(self.mean.shape) * (self.high - self.low)
        g = self.mean + self.std * rng.standard_normal(self.mean.shape)
        if self.kind == "squashed":
            return self.low + (np.tanh(g) + 1.0) * 0.5 * (self.high - self.low)
        return np.clip(g, self.low, self.high)

    def log_density(self, actions: np.ndarray) -> np.ndarray:
        """``log pi(a | s)`` per row ``(n,)`` against Lebesgue measure on the box
        (environment units). For the clipped kind, ``inf`` on a bound (a point mass).

        Raises:
            ValueError: actions outside the box.
        """
        a = np.asarray(actions, dtype=np.float64)
        if np.any(a < self.low) or np.any(a > self.high):
            raise ValueError("actions outside the box have density 0: clip or squash them first.")
        half = 0.5 * (self.high - self.low)
        if self.kind == "uniform":
            return np.full(a.shape[0], -float(np.log(2.0 * half).sum()))
        if self.kind == "squashed":
            x = np.clip((a - self.low) / half - 1.0, -1.0, 1.0)
            with np.errstate(divide="ignore"):
                g = np.arctanh(x)
                out = _log_normal(g, self.mean, self.std) - np.log1p(-x * x) - np.log(half)
            return out.sum(-1)
        on_bound = (a == self.low) | (a == self.high)
        dens = _log_normal(a, self.mean, self.std)
        return np.where(on_bound.any(-1), math.inf, dens.sum(-1))


def _log_normal(x: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * math.log(2.0 * math.pi)


class ContinuousPolicyFn:
    """A policy on raw observations with a Gaussian action law per observation.

    Args:
        law_fn: ``obs_batch -> ActionLaw``.
        low, high: ``(d,)`` the action box.
        name: a label (what is scored, with its smoothing if any).
        kind: ``"squashed"`` or ``"clipped"``.
    """

    def __init__(
        self,
        law_fn: Callable[[Any], ActionLaw],
        low: np.ndarray,
        high: np.ndarray,
        *,
        name: str,
        kind: str,
    ) -> None:
        self._law_fn = law_fn
        self.low = np.asarray(low, dtype=np.float64).reshape(-1)
        self.high = np.asarray(high, dtype=np.float64).reshape(-1)
        self.action_dim = int(self.low.size)
        self.name = name
        self.kind = kind

    def law(self, obs: Any) -> ActionLaw:
        """The action laws of a batch of raw observations.

        Raises:
            ValueError: a law of the wrong shape, with NaN or infinite means, or with standard
                deviations that are not positive and finite (each naming the first
                observation's row).
        """
        law = self._law_fn(obs)
        n = len(obs)
        if law.mean.shape != (n, self.action_dim) or law.std.shape != law.mean.shape:
            raise ValueError(
                f"policy {self.name} must give (n, d) = ({n}, {self.action_dim}) means and "
                f"standard deviations, got {law.mean.shape} and {law.std.shape}."
            )
        bad_mean = ~np.isfinite(law.mean).all(-1)
        if bad_mean.any():
            row = int(np.flatnonzero(bad_mean)[0])
            raise ValueError(
                f"policy {self.name} gave a NaN or infinite mean at {int(bad_mean.sum())} of {n} "
                f"observations (the first, row {row}: mean {law.mean[row].tolist()}); check the "
                "observations for NaN and the network for divergence."
            )
        bad_std = ~(np.isfinite(law.std) & (law.std > 0)).all(-1)
        if bad_std.any():
            row = int(np.flatnonzero(bad_std)[0])
            raise ValueError(
                f"policy {self.name} gave standard deviations that are not positive and finite "
                f"at {int(bad_std.sum())} of {n} observations (the first, row {row}: std "
                f"{law.std[row].tolist()})."
            )
        return law


def deterministic_error(what: str) -> ValueError:
    """The refusal of a deterministic policy, naming the reason and the option."""
    return ValueError(
        f"{what} acts deterministically: it has no action density, so its MEG (a log-density "
        "ratio) is not defined (infinite where it acts optimally). Pass noise_std=SIGMA "
        "(command line: --noise-std SIGMA) to score the smoothed policy clip(action + SIGMA * "
        "N(0, I), -1, 1) in the box scaled to [-1, 1], which SB3 runs with "
        "NormalActionNoise(sigma=SIGMA)."
    )


def _check_box(space: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Box):
        raise TypeError(
            f"{what} has a {type(space).__name__} action space ({space}); the continuous path "
            "needs a Box (Discrete actions: imitation_meg.meg / imitation_meg.approx)."
        )
    low = np.asarray(space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(space.high, dtype=np.float64).reshape(-1)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(
            f"{what} acts in the unbounded box {space}: MEG against the uniform density needs "
            "finite bounds."
        )
    return low, high


def _check_noise(noise_std: Any) -> float | None:
    if noise_std is None:
        return None
    if (
        isinstance(noise_std, bool)
        or not isinstance(noise_std, (int, float))
        or not 0.0 < float(noise_std) < math.inf
    ):
        raise ValueError(f"noise_std must be a positive finite number, got {noise_std!r}.")
    return float(noise_std)


def as_continuous_policy(
    policy: Any,
    *,
    algo: str | None = None,
    noise_std: float | None = None,
    deterministic: bool = False,
    vec_normalize: Any = None,
) -> ContinuousPolicyFn:
    """The action laws of an SB3 agent on a bounded ``Box`` (see the module docstring).

    Args:
        policy: an SB3 algorithm or policy (SAC, TQC, PPO, A2C, TRPO, TD3, DDPG), the path of an
            SB3 ``.zip`` (algorithm read from it unless ``algo`` names it), or a
            :class:`ContinuousPolicyFn`.
        algo: the algorithm of a ``.zip``.
        noise_std: score the smoothed policy ``clip(action + noise_std N(0, I), -1, 1)`` of a
            deterministic agent (TD3, DDPG, SAC with ``deterministic=True``), in the box scaled
            to ``[-1, 1]``. Refused for stochastic policies (they have their own density).
        deterministic: score SAC's deterministic action ``tanh(mean)`` (needs ``noise_std``).
        vec_normalize: a ``VecNormalize`` whose observation statistics the model was trained
            with (default: the model's own env's, when it has one).

    Raises:
        TypeError: not an SB3 continuous-action policy, its path or a ContinuousPolicyFn
            (None, a number, bytes, an array ...); a Discrete action space.
        ValueError: an unbounded box; a deterministic policy without ``noise_std`` (the
            message names the option); ``noise_std`` for a stochastic policy.
    """
    sigma = _check_noise(noise_std)
    _check_source(policy)
    if isinstance(policy, ContinuousPolicyFn):
        if sigma is not None or deterministic:
            raise ValueError(
                "noise_std= / deterministic= apply to SB3 models, not to a ContinuousPolicyFn."
            )
        return policy
    from imitation_meg.adapters import resolve_policy

    resolved = resolve_policy(policy, algo=algo, vec_normalize=vec_normalize)
    obj = resolved.policy
    label = resolved.algo.upper() if resolved.algo else type(obj).__name__
    vec_normalize = resolved.vec_normalize
    if not is_loaded_instance(obj, "stable_baselines3.common.policies", "BasePolicy"):
        raise TypeError(
            f"cannot read action densities from {type(obj).__name__}; pass an SB3 model or "
            "policy (SAC, PPO, A2C, TD3 ...), a .zip path or a ContinuousPolicyFn."
        )
    return _sb3_policy(obj, label, sigma, bool(deterministic), vec_normalize)


def _check_source(policy: object) -> None:
    """An SB3 model or policy, a path, a name or a :class:`ContinuousPolicyFn`; anything else
    is a ``TypeError`` naming it and what is read."""
    import os

    if isinstance(policy, (str, os.PathLike, ContinuousPolicyFn)):
        return
    if is_loaded_instance(
        policy, "stable_baselines3.common.base_class", "BaseAlgorithm"
    ) or is_loaded_instance(policy, "stable_baselines3.common.policies", "BasePolicy"):
        return
    if isinstance(policy, (bytes, bytearray)):
        got = f"bytes {bytes(policy)[:60]!r} (a path must be a str or pathlib.Path: decode it)"
    elif isinstance(policy, (np.ndarray, th.Tensor)):
        got = (
            f"an array {tuple(policy.shape)} (per-state Gaussians on a ContinuousMDP are "
            "imitation_meg.continuous.GaussianPolicy(mean, std))"
        )
    else:
        text = repr(policy)
        got = f"{type(policy).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
    raise TypeError(
        f"cannot read action densities from {got}; pass an SB3 model or policy (SAC, PPO, A2C, "
        "TD3 ...), the path of its saved .zip (str or pathlib.Path) or a ContinuousPolicyFn."
    )


def _sb3_policy(
    policy: Any, label: str, sigma: float | None, deterministic: bool, vec_normalize: Any
) -> ContinuousPolicyFn:
    low, high = _check_box(policy.action_space, label)
    actor: Any = getattr(policy, "actor", None)
    squashing_actor = actor is not None and hasattr(actor, "action_dist")
    deterministic_actor = actor is not None and not squashing_actor and hasattr(actor, "mu")
    on_policy = hasattr(policy, "get_distribution")
    if not (squashing_actor or deterministic_actor or on_policy):
        raise TypeError(f"{label}'s policy {type(policy).__name__} has no action law to read.")
    if deterministic and not squashing_actor:
        raise ValueError(
            "deterministic=True applies to SAC-like agents (a squashed Gaussian with a "
            f"deterministic mode), not to {label}."
        )
    smoothed = deterministic_actor or deterministic
    if smoothed and sigma is None:
        what = f"{label} (deterministic mode)" if deterministic else label
        raise deterministic_error(what)
    if not smoothed and sigma is not None:
        raise ValueError(
            f"noise_std= smooths a deterministic policy; {label} has its own action density. "
            "Drop noise_std= (or pass deterministic=True for SAC's deterministic mode)."
        )
    from imitation_meg.adapters.sb3 import obs_preparer

    prepare = obs_preparer(policy, vec_normalize)

    def normal_of(obs_t: th.Tensor) -> tuple[np.ndarray, np.ndarray]:
        try:  # torch validates the Normal's parameters: a NaN mean is a ValueError there
            if squashing_actor:
                mean, log_std, kwargs = actor.get_action_dist_params(obs_t)
                dist = actor.action_dist.proba_distribution(mean, log_std, **kwargs)
            else:
                dist = policy.get_distribution(obs_t)
        except ValueError as e:
            raise _invalid_law(label, obs_t, e) from e
        normal = dist.distribution
        return (
            normal.loc.to(th.float64).cpu().numpy().reshape(obs_t.shape[0], -1),
            normal.scale.to(th.float64).cpu().numpy().reshape(obs_t.shape[0], -1),
        )

    if smoothed:
        kind = "clipped"
        name = f"{label} smoothed by N(0, {sigma:g}^2) in [-1, 1]"
    elif squashing_actor or getattr(policy, "squash_output", False):
        kind, name = "squashed", f"{label} (squashed Gaussian)"
    else:
        kind, name = "clipped", f"{label} (Gaussian clipped to the box)"
    half = 0.5 * (high - low)

    def law(obs: Any) -> ActionLaw:
        policy.set_training_mode(False)
        with th.no_grad():
            obs_t = prepare(obs)
            if smoothed:
                # the deterministic action in [-1, 1] (SB3's actors end in tanh)
                if deterministic:
                    m, _ = normal_of(obs_t)
                    act = np.tanh(m)
                else:
                    act = actor(obs_t).to(th.float64).cpu().numpy().reshape(obs_t.shape[0], -1)
                mean = low + (act + 1.0) * half
                std = np.broadcast_to(float(sigma) * half, mean.shape).copy()  # type: ignore[arg-type]
                return ActionLaw("clipped", mean, std, low, high)
            mean, std = normal_of(obs_t)
        return ActionLaw(kind, mean, std, low, high)

    return ContinuousPolicyFn(law, low, high, name=name, kind=kind)


def _invalid_law(label: str, obs_t: th.Tensor, error: ValueError) -> ValueError:
    """The refusal of a law torch would not build (NaN or infinite parameters), naming the
    observations that hold NaN or infinite values, or the network when none does."""
    n = obs_t.shape[0]
    bad = (~th.isfinite(obs_t.reshape(n, -1).to(th.float64)).all(-1)).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        why = (
            f"at {bad.numel()} of {n} observations (the first, row {row}, holds NaN or "
            "infinite values: check the observations)"
        )
    else:
        why = "on finite observations (the network's weights may hold NaN: a diverged training run)"
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ValueError(
        f"policy {label} gave a NaN or infinite mean or standard deviation {why}; torch refused "
        f"the Gaussian: {first_line}"
    )


def tabular_policy(policy: Any, mdp: Any, observations: Any = None, **kwargs: Any) -> Any:
    """The laws of an agent at every state of a :class:`~imitation_meg.continuous.ContinuousMDP`
    as a :class:`~imitation_meg.continuous.GaussianPolicy` (stationary), for exact MEG.

    Args:
        policy: anything :func:`as_continuous_policy` accepts.
        mdp: the MDP (its box must be the agent's).
        observations: ``(S, F)`` observation of each state (default ``mdp.observations``).
        **kwargs: passed to :func:`as_continuous_policy` (``noise_std``, ``algo``, ...).

    Raises:
        TypeError: an MDP that is no ContinuousMDP (a ``TabularMDP``'s table comes from
            :func:`imitation_meg.adapters.policy_table`).
        ValueError: no observations, or an agent whose box differs from the MDP's.
    """
    from imitation_meg.continuous.policies import GaussianPolicy, require_continuous_mdp

    require_continuous_mdp(
        mdp, "tabular_policy", "its policy tables come from imitation_meg.adapters.policy_table"
    )
    pol = as_continuous_policy(policy, **kwargs)
    obs = observations if observations is not None else mdp.observations
    if obs is None:
        raise ValueError(f"{mdp.name} has no observations: pass observations=(S, F).")
    if not (np.allclose(pol.low, mdp.low) and np.allclose(pol.high, mdp.high)):
        raise ValueError(
            f"{pol.name} acts in [{pol.low}, {pol.high}], {mdp.name} in [{mdp.low}, {mdp.high}]."
        )
    law = pol.law(np.asarray(obs, dtype=np.float32))
    return GaussianPolicy(law.mean, law.std, kind=law.kind, name=pol.name)


def uniform_policy(low: np.ndarray, high: np.ndarray) -> ContinuousPolicyFn:
    """The uniform policy on the box ``[low, high]`` (MEG 0 for every utility)."""
    lo = np.asarray(low, dtype=np.float64).reshape(-1)
    hi = np.asarray(high, dtype=np.float64).reshape(-1)

    def law(obs: Any) -> ActionLaw:
        z = np.zeros((len(obs), lo.size))
        return ActionLaw("uniform", z, np.ones_like(z), lo, hi)

    return ContinuousPolicyFn(law, lo, hi, name="uniform", kind="uniform")
