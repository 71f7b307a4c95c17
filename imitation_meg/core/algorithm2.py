"""The paper's Algorithm 2: a lower bound on unknown-utility MEG over differentiable classes.

The class is a utility network (the paper's one-hidden-layer MLP, any ``torch.nn.Module`` on the
MDP's observations, or an imitation ``RewardNet``); the rationality ``beta`` and the network's
parameters are fitted jointly by gradient ascent on the causal log-likelihood. Unlike the linear
classes of :mod:`imitation_meg.core.unknown`, the problem is not concave: the result is a lower bound,
and :func:`imitation_meg.meg_unknown` reports its gap to the exact optimum over all state
utilities when the model is state-only.

imitation's ``RewardNet`` is recognised by its class path, without importing imitation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from torch import nn

from imitation_meg.core.kernels import threads as _threads
from imitation_meg.core.known import MEGResult
from imitation_meg.core.likelihood import behaviour_occupancy, class_result, log_likelihood
from imitation_meg.core.mdp import TabularMDP
from imitation_meg.type_aliases import ArrayLike, PolicyLike

__all__ = [
    "check_reward_net",
    "default_utility_model",
    "is_reward_net",
    "meg_algorithm2",
    "reward_net_sa",
]


def is_reward_net(obj: object) -> bool:
    """Whether ``obj`` is an imitation ``RewardNet`` (checked by class path: no import)."""
    return any(
        c.__name__ == "RewardNet" and c.__module__ == "imitation.rewards.reward_nets"
        for c in type(obj).__mro__
    )


def check_reward_net(reward_net: object) -> None:
    if not is_reward_net(reward_net):
        raise TypeError(
            f"expected an imitation RewardNet, got {type(reward_net).__name__}; build one with "
            "imitation.rewards.reward_nets.BasicRewardNet(obs_space, action_space, ...)."
        )


def _obs_matrix(mdp: TabularMDP) -> np.ndarray:
    if mdp.observation_matrix is not None:
        return mdp.observation_matrix.detach().cpu().numpy()
    return np.eye(mdp.n_states, dtype=np.float32)


def reward_net_sa(reward_net: nn.Module, mdp: TabularMDP) -> th.Tensor:
    """Evaluate a ``RewardNet`` on every transition of ``mdp`` and return ``r(s, a)`` ``(S, A)``.

    ``r(s, a) = sum_k prob[s, a, k] * R(obs[s], a, obs[next_state[s, a, k]], done=False)``, in the
    MDP's dtype; differentiable with respect to the net's parameters.

    Raises:
        TypeError: if ``reward_net`` is not an imitation ``RewardNet``.
        ValueError: if the net's observation size does not match the MDP's observations.
    """
    check_reward_net(reward_net)
    S, A, B = mdp.next_state.shape
    obs = _obs_matrix(mdp)
    space: Any = reward_net.observation_space
    expected = tuple(space.shape)
    if tuple(obs.shape[1:]) != expected:
        raise ValueError(
            f"the reward net expects observations of shape {expected}, but the MDP's "
            f"observation_matrix rows have shape {obs.shape[1:]}; build the net from the same env."
        )
    s_idx = np.repeat(np.arange(S), A * B)
    a_idx = np.tile(np.repeat(np.arange(A), B), S)
    ns_idx = mdp.next_state.reshape(-1).cpu().numpy()
    state, action, next_state, done = reward_net.preprocess(  # type: ignore[operator]
        obs[s_idx], a_idx, obs[ns_idx], np.zeros(S * A * B, dtype=bool)
    )
    param = next(reward_net.parameters(), None)
    if param is not None:  # preprocess yields float32; follow the net's own dtype
        state, action, next_state, done = (
            x.to(param.dtype) if x.is_floating_point() else x
            for x in (state, action, next_state, done)
        )
    rew = reward_net(state, action, next_state, done).reshape(S, A, B).to(mdp.dtype)
    return (rew * mdp.prob).sum(-1)


def default_utility_model(n_inputs: int, hidden: int = 256, *, seed: int = 0) -> nn.Module:
    """The paper's utility network: one hidden layer of 256 ReLU units, scalar output."""
    gen = th.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(n_inputs, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    with th.no_grad():
        for p in model.parameters():
            bound = 1.0 / math.sqrt(p.shape[-1] if p.ndim > 1 else hidden)
            p.uniform_(-bound, bound, generator=gen)
    return model.double()


def _observations(mdp: TabularMDP) -> th.Tensor:
    if mdp.observation_matrix is not None:
        return mdp.observation_matrix.to(mdp.dtype)
    return th.eye(mdp.n_states, dtype=mdp.dtype, device=mdp.device)


def _model_reward_fn(mdp: TabularMDP, model: Any) -> tuple[Callable[[], th.Tensor], bool]:
    """A closure giving the model's per-step ``(S, A)`` reward, and whether it is state-only."""
    obs = _observations(mdp)
    if is_reward_net(model):  # evaluated on every (s, a, s') of the sparse transitions
        return (lambda: reward_net_sa(model, mdp)), False
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"utility_model must be a torch.nn.Module, an imitation RewardNet or 'mlp', got "
            f"{type(model).__name__}."
        )
    S, A = mdp.n_states, mdp.n_actions
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None else mdp.dtype
    x = obs.to(dtype)

    def fn() -> th.Tensor:
        out = model(x)
        if out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.shape != (S,):
            raise ValueError(
                f"utility_model must map the ({S}, {x.shape[1]}) observation matrix to ({S},) "
                f"utilities, got output shape {tuple(out.shape)}."
            )
        return out.to(mdp.dtype).unsqueeze(1).expand(S, A)

    return fn, True


def _model_factory(
    mdp: TabularMDP, utility_model: nn.Module | str, seed: int
) -> Callable[[int], nn.Module]:
    """The model of restart ``k``: the paper's MLP seeded ``seed + k``, or a copy of the given
    model (restart 0 as given, later ones re-initialised from a derived seed)."""
    import copy

    if isinstance(utility_model, str):
        if utility_model != "mlp":
            raise ValueError(f"utility_model={utility_model!r}: the only named model is 'mlp'.")
        return lambda k: default_utility_model(_observations(mdp).shape[1], seed=seed + k)

    def factory(k: int) -> nn.Module:
        model = copy.deepcopy(utility_model)
        if k > 0:
            gen = th.Generator().manual_seed(seed + k)
            with th.no_grad():
                for p in model.parameters():
                    p.copy_(
                        (th.rand(p.shape, generator=gen, dtype=p.dtype) * 2 - 1)
                        / math.sqrt(max(p.shape[-1], 1))
                    )
        return model

    return factory


def _bar(total: int) -> Any:
    """A tqdm bar over ``total`` ascent steps, or None without tqdm."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc="MEG (utility model)", leave=False)


def _ascend(
    mdp: TabularMDP,
    model: nn.Module,
    w: th.Tensor,
    steps: int,
    lr: float,
    best: tuple[float, th.Tensor | None],
    bar: Any,
) -> tuple[float, tuple[float, th.Tensor | None], bool]:
    """One restart: Adam on ``log beta`` and the model's parameters for ``steps`` steps.

    Returns:
        ``(the restart's best L, the best (L, reward) over all restarts so far, whether the
        model is a function of the state)``.
    """
    reward_fn, state_only = _model_reward_fn(mdp, model)
    log_beta = th.zeros((), dtype=mdp.dtype, requires_grad=True)
    params = [p for p in model.parameters() if p.requires_grad] + [log_beta]
    opt = th.optim.Adam(params, lr=lr)
    best_k = -math.inf
    for _step in range(steps):
        opt.zero_grad()
        r = log_beta.exp() * reward_fn()
        L = log_likelihood(mdp, r, w)
        (-L).backward()
        Lv = float(L.detach())
        if Lv > best_k:
            best_k = Lv
            if Lv > best[0]:
                best = (Lv, r.detach().clone())
        opt.step()
        if bar is not None:
            bar.update(1)
    return best_k, best, state_only


def _check_ascent(steps: Any, restarts: Any, lr: Any) -> None:
    """``steps`` and ``restarts`` positive integers, ``lr`` positive."""
    for nm, v in (("steps", steps), ("restarts", restarts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}.")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}.")


def _restart_record(values: list[float], state_only: bool) -> dict[str, Any]:
    """The restarts' MEG values, their mean and spread, for ``MEGResult.extra``."""
    vals = np.asarray(values)
    return {
        "restart_values": vals.tolist(),
        "mean": float(vals.mean()),
        "std": float(vals.std(ddof=1)) if vals.size > 1 else 0.0,
        "lower_bound": True,
        "state_only": state_only,
    }


@_threads.entry_point
def meg_algorithm2(
    policy: PolicyLike | None,
    mdp: TabularMDP,
    utility_model: nn.Module | str = "mlp",
    *,
    sa_occupancy: ArrayLike | None = None,
    steps: int = 500,
    lr: float = 0.01,
    restarts: int = 4,
    seed: int = 0,
    progress: bool = False,
) -> MEGResult:
    """A lower bound on unknown-utility MEG over a differentiable utility class (Algorithm 2).

    Joint gradient ascent (Adam) on ``log beta`` and the model's parameters of the causal
    log-likelihood ``L`` (:func:`imitation_meg.core.likelihood.log_likelihood`), from ``restarts``
    initialisations; the best value seen is reported. Any value found is attained by a member of
    the class, so the result is a lower bound of the class's supremum (``converged=False``).

    Args:
        policy: ``(S, A)`` or ``(H, S, A)`` policy (ignored when ``sa_occupancy`` is given).
        mdp: the MDP.
        utility_model: a ``torch.nn.Module`` mapping the ``(S, O)`` observation matrix (or the
            identity when the MDP has none) to ``(S,)`` state utilities; an imitation
            ``RewardNet`` (evaluated on every ``(s, a, s')``); or ``"mlp"``, the paper's
            one-hidden-layer 256-unit MLP.
        sa_occupancy: optional ``(H, S, A)`` occupancy replacing the policy's.
        steps: ascent steps per restart.
        lr: Adam's learning rate.
        restarts: random initialisations (restart 0 keeps the given model's parameters).
        seed: seed of the initialisations.
        progress: show a progress bar over all steps.

    Returns:
        :class:`MEGResult` with ``extra``: ``restart_values``, ``mean``, ``std``,
        ``lower_bound=True``, ``state_only`` (whether the model is a function of the state).

    Raises:
        ValueError / TypeError: bad settings, or a model of the wrong kind or output shape.
    """
    w = behaviour_occupancy(mdp, policy, sa_occupancy)
    factory = _model_factory(mdp, utility_model, seed)
    _check_ascent(steps, restarts, lr)
    bound = mdp.steps * math.log(mdp.n_actions)
    bar = _bar(restarts * steps) if progress else None
    values: list[float] = []
    best: tuple[float, th.Tensor | None] = (-math.inf, None)
    state_only = True
    for k in range(restarts):
        best_k, best, state_only = _ascend(mdp, factory(k), w, steps, lr, best, bar)
        values.append(max(min(best_k + bound, bound), 0.0))
    if bar is not None:
        bar.close()
    Lbest, reward = best
    assert reward is not None
    extra = _restart_record(values, state_only)
    return class_result(
        mdp,
        w,
        reward,
        Lbest,
        grad_norm=math.nan,
        converged=False,
        at_boundary=False,
        evaluations=restarts * steps,
        extra=extra,
    )
