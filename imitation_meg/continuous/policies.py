"""Policies with densities on a :class:`~imitation_meg.continuous.ContinuousMDP`'s action box.

A policy is seen through a quadrature rule of its action law at every state (and decision, for
time-dependent policies): points ``(T', S, M, d)`` and probability weights ``(T', S, M)`` with
``T' = 1`` (stationary) or ``H``, and the per-state ``KL(pi || u)`` against the uniform density
``u`` (:class:`TabularRule`). ``level`` refines the rule: each level doubles the panels, which is
how :func:`~imitation_meg.continuous.meg_continuous` measures its quadrature error.

- :class:`DensityPolicy`: any density ``pi(a | s)`` (or ``pi_t(a | s)``) on the box, integrated
  by the box's Gauss-Legendre rule; :func:`uniform` and :func:`soft_optimal` are of this kind.
- :class:`GaussianPolicy`: per-state Gaussians, squashed by ``tanh`` into the box (SAC) or
  clipped to it (PPO as SB3 executes it; point masses on the bounds), integrated by the rules
  of :mod:`imitation_meg.continuous.quadrature`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch as th

from imitation_meg.continuous.mdp import BoxUtility, ContinuousMDP, numeric
from imitation_meg.continuous.quadrature import clipped_gaussian_rule, squashed_gaussian_rule
from imitation_meg.continuous.soft_vi import model_rule, soft_values
from imitation_meg.type_aliases import ArrayLike

__all__ = [
    "GAUSSIAN_KINDS",
    "ContinuousPolicy",
    "DensityPolicy",
    "GaussianPolicy",
    "TabularRule",
    "soft_optimal",
    "uniform",
]

#: How a Gaussian is brought into the box.
GAUSSIAN_KINDS = ("squashed", "clipped")
#: Largest deviation from 1 of a density's integral over the box before it is refused.
MASS_TOL = 1e-6
#: Where a TabularMDP's policies come from, for the refusals of one.
_TABULAR_POLICIES = "its policies are imitation_meg.policies.uniform / soft_optimal / optimal"


def require_continuous_mdp(mdp: object, what: str, tabular: str) -> None:
    """A :class:`ContinuousMDP`, or a ``TypeError`` saying that ``what`` takes one (with
    ``tabular``, what to do with a ``TabularMDP``, when it is one).

    Raises:
        TypeError: any other object.
    """
    if isinstance(mdp, ContinuousMDP):
        return
    from imitation_meg.core.mdp import TabularMDP

    if isinstance(mdp, TabularMDP):
        got = (
            f"the TabularMDP {mdp.name} ({mdp.n_states} states, {mdp.n_actions} discrete "
            f"actions): {tabular}"
        )
    else:
        text = repr(mdp)
        got = f"{type(mdp).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
    raise TypeError(
        f"{what} takes a ContinuousMDP (actions in a bounded box: "
        f"imitation_meg.continuous.ContinuousMDP or random_continuous_mdp), got {got}."
    )


class TabularRule(NamedTuple):
    """A policy's action laws as quadrature rules.

    Attributes:
        points: ``(T', S, M, d)`` actions.
        weights: ``(T', S, M)`` probabilities (rows sum to 1).
        kl: ``(T', S)`` ``KL(pi_t(. | s) || u)`` (``inf`` for laws with point masses).
        has_density: the laws have densities on the box (then ``L(beta) -> -inf`` at both
            ends; see :mod:`imitation_meg.continuous.known`).
    """

    points: th.Tensor
    weights: th.Tensor
    kl: th.Tensor
    has_density: bool


class ContinuousPolicy:
    """A policy on a :class:`ContinuousMDP`, as quadrature rules of its action laws.

    Attributes:
        name: a label.
        time_dependent: the law changes with the decision ``t``.
    """

    name = "policy"
    time_dependent = False

    def rule(self, mdp: ContinuousMDP, level: int = 0) -> TabularRule:
        """The rules at every state (and decision), refined ``level`` times."""
        raise NotImplementedError


class DensityPolicy(ContinuousPolicy):
    """A policy given by its density on the box.

    Args:
        density: ``(states (M,), actions (M, d)) -> (M,)`` densities (per unit volume of the
            box), or with ``time_dependent=True`` ``(t, states, actions) -> (M,)``.
        time_dependent: the density takes the decision ``t`` first.
        name: a label.

    The density is integrated with the box's Gauss-Legendre rule (:func:`~imitation_meg.continuous.soft_vi.model_rule`), so it
    should be smooth on the box; one that integrates to more than ``1e-6`` away from 1 is
    refused (ValueError), and the weights are renormalised.
    """

    def __init__(
        self,
        density: Callable[..., ArrayLike],
        *,
        time_dependent: bool = False,
        name: str = "density",
    ) -> None:
        if not callable(density):
            raise TypeError(f"density must be callable, got {type(density).__name__}.")
        self.density = density
        self.time_dependent = bool(time_dependent)
        self.name = name

    def rule(self, mdp: ContinuousMDP, level: int = 0) -> TabularRule:
        box = model_rule(mdp, level)
        S, N = mdp.n_states, box.points.shape[0]
        states = th.arange(S).repeat_interleave(N)
        acts = box.points.repeat(S, 1)
        steps = range(mdp.horizon) if self.time_dependent else [None]
        ws, kls = [], []
        for t in steps:
            args = (states, acts) if t is None else (t, states, acts)
            dens = th.as_tensor(self.density(*args), dtype=th.float64).reshape(S, N)
            if not bool(th.isfinite(dens).all()) or bool((dens < 0).any()):
                raise ValueError(f"{self.name}: the density has negative or non-finite values.")
            w = dens * box.weights
            mass = w.sum(-1)
            err = float((mass - 1.0).abs().max())
            if err > MASS_TOL:
                raise ValueError(
                    f"{self.name}: the density integrates to {float(mass.min()):.8g}.."
                    f"{float(mass.max()):.8g} over the box, not 1 (a density per unit volume of "
                    "the box must integrate to 1; a narrow or non-smooth one needs a finer rule)."
                )
            w = w / mass.unsqueeze(-1)
            # KL(pi || u) = int pi log(pi * vol): the density at the nodes, weighted by the rule.
            ratio = th.where(dens > 0, (dens * mdp.volume).log(), th.zeros_like(dens))
            ws.append(w)
            kls.append((w * ratio).sum(-1))
        W = th.stack(ws)
        pts = box.points.view(1, 1, N, -1).expand(W.shape[0], S, N, mdp.action_dim)
        return TabularRule(pts, W, th.stack(kls), True)


def uniform(mdp: ContinuousMDP) -> DensityPolicy:
    """The uniform density ``1 / vol`` on the box (MEG 0 for every utility).

    Raises:
        TypeError: an MDP that is no :class:`ContinuousMDP`.
    """
    require_continuous_mdp(mdp, "continuous.policies.uniform", _TABULAR_POLICIES)
    inv = 1.0 / mdp.volume
    pol = DensityPolicy(lambda s, a: th.full((s.shape[0],), inv, dtype=th.float64), name="uniform")
    return pol


class GaussianPolicy(ContinuousPolicy):
    """Per-state diagonal Gaussians brought into the box.

    Args:
        mean, std: ``(S, d)`` (stationary) or ``(H, S, d)`` tables.
        kind: ``"squashed"``: the action is ``low + (tanh(g) + 1) (high - low) / 2`` with
            ``g ~ N(mean, std^2)`` (SAC: ``mean`` and ``std`` are the pre-squash parameters);
            ``"clipped"``: the action is ``clip(g, low, high)`` (PPO as SB3 executes it:
            ``mean`` and ``std`` in the box's units; the mass beyond a bound sits on it).
        name: a label.

    Raises:
        ValueError: an unknown ``kind``; tables of different or wrong shapes; a NaN or infinite
            mean; a standard deviation that is not positive and finite.
    """

    def __init__(
        self, mean: ArrayLike, std: ArrayLike, *, kind: str = "squashed", name: str = "gaussian"
    ) -> None:
        if kind not in GAUSSIAN_KINDS:
            raise ValueError(f"kind must be one of {GAUSSIAN_KINDS}, got {kind!r}.")
        self.mean = th.as_tensor(numeric(mean, "mean"))
        self.std = th.as_tensor(numeric(std, "std"))
        if self.mean.shape != self.std.shape or self.mean.ndim not in (2, 3):
            raise ValueError(
                f"mean and std must both be (S, d) or (H, S, d), got {tuple(self.mean.shape)} and "
                f"{tuple(self.std.shape)}."
            )
        _check_tables(self.mean, self.std, name)
        self.kind = kind
        self.time_dependent = self.mean.ndim == 3
        self.name = name

    def rule(self, mdp: ContinuousMDP, level: int = 0) -> TabularRule:
        mean = self.mean if self.time_dependent else self.mean.unsqueeze(0)
        std = self.std if self.time_dependent else self.std.unsqueeze(0)
        Tn, S, d = mean.shape
        if mdp.n_states != S or d != mdp.action_dim:
            raise ValueError(
                f"{self.name}: tables of {S} states and {d} action dimensions do not fit "
                f"{mdp.name} ({mdp.n_states} states, {mdp.action_dim} dimensions)."
            )
        if self.time_dependent and Tn != mdp.horizon:
            raise ValueError(
                f"{self.name}: {Tn} decisions of tables for a horizon of {mdp.horizon}."
            )
        build = squashed_gaussian_rule if self.kind == "squashed" else clipped_gaussian_rule
        r = build(
            mean.reshape(Tn * S, d),
            std.reshape(Tn * S, d),
            mdp.low,
            mdp.high,
            panels=16 * 2 ** int(level),
        )
        M = r.points.shape[1]
        return TabularRule(
            r.points.view(Tn, S, M, d), r.weights.view(Tn, S, M), r.kl.view(Tn, S), True
        )


def _check_tables(mean: th.Tensor, std: th.Tensor, name: str) -> None:
    """Finite means and positive finite standard deviations, or a ValueError naming the first
    bad entry (its index ``(s, j)`` or ``(t, s, j)``)."""
    where = "(t, s, j)" if mean.ndim == 3 else "(s, j)"
    bad_mean = ~th.isfinite(mean)
    if bool(bad_mean.any()):
        first = tuple(bad_mean.nonzero()[0].tolist())
        raise ValueError(
            f"GaussianPolicy {name!r}: the mean is {float(mean[first])} at {where} = {first} "
            f"({int(th.isnan(mean).sum())} NaN and {int(th.isinf(mean).sum())} infinite of "
            f"{mean.numel()} means); a Gaussian's mean must be finite (a NaN mean comes from a "
            "NaN observation or a diverged network)."
        )
    bad_std = ~(th.isfinite(std) & (std > 0))
    if bool(bad_std.any()):
        first = tuple(bad_std.nonzero()[0].tolist())
        raise ValueError(
            f"GaussianPolicy {name!r}: the std is {float(std[first])} at {where} = {first} "
            f"({int(bad_std.sum())} of {std.numel()} not positive and finite); a std must be "
            "positive and finite (a zero std is a deterministic policy, which has no density)."
        )


def soft_optimal(
    mdp: ContinuousMDP, beta: float, utility: BoxUtility | None = None, *, level: int = 3
) -> DensityPolicy:
    """The time-dependent soft-optimal policy ``pi_beta,t(a | s) = exp(beta (Q_t(s, a) -
    V_t(s))) / vol`` (``V_t`` the soft mean of ``Q_t`` over the box), with the values from the
    box rule at refinement ``level`` (fine by default).

    Raises:
        TypeError: an MDP that is no :class:`ContinuousMDP`.
        ValueError: a non-finite ``beta``.
    """
    require_continuous_mdp(mdp, "continuous.policies.soft_optimal", _TABULAR_POLICIES)
    if not math.isfinite(float(beta)):
        raise ValueError(
            f"beta must be finite, got {beta}: the limits are point masses without a density."
        )
    V = soft_values(mdp, float(beta), utility, level=level)
    log_vol = mdp.log_volume

    def density(t: int, states: th.Tensor, actions: th.Tensor) -> th.Tensor:
        Q = mdp.reward(states, actions, utility) + mdp.transition(states, actions) @ V[t + 1]
        return th.exp(float(beta) * (Q - V[t][states]) - log_vol)

    return DensityPolicy(density, time_dependent=True, name=f"soft-optimal (beta {beta:g})")
