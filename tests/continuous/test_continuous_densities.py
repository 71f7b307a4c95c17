"""The action laws of real SB3 agents (trained here for a few hundred steps on a continuous
tabular environment) against what SB3 itself samples, and their exact MEG."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from imitation_meg.continuous import (
    ContinuousTabularEnv,
    meg_continuous,
    random_continuous_mdp,
)
from imitation_meg.continuous.densities import (
    ActionLaw,
    ContinuousPolicyFn,
    as_continuous_policy,
    tabular_policy,
)

sb3 = pytest.importorskip("stable_baselines3")


def net() -> dict:
    return {"net_arch": [32, 32]}  # a fresh dict: SB3 writes into it


@pytest.fixture(scope="module")
def mdp():
    return random_continuous_mdp(4, 1, 5, seed=0, low=-2.0, high=2.0)


@pytest.fixture(scope="module")
def mdp2():
    return random_continuous_mdp(3, 2, 4, seed=1)


def _sac(mdp, **kw):
    env = ContinuousTabularEnv(mdp)
    model = sb3.SAC(
        "MlpPolicy", env, learning_starts=100, batch_size=64, policy_kwargs=net(), seed=0, **kw
    )
    return model.learn(200)


@pytest.fixture(scope="module")
def sac(mdp):
    return _sac(mdp)


@pytest.fixture(scope="module")
def ppo(mdp):
    env = ContinuousTabularEnv(mdp)
    model = sb3.PPO(
        "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=2, policy_kwargs=net(), seed=0
    )
    return model.learn(128)


def _moments_of_samples(model, obs: np.ndarray, n: int, *, sde: bool = False) -> np.ndarray:
    """Mean of (a, a^2, a at a bound) over ``n`` actions SB3 samples at one observation (with
    gSDE, one noise matrix per sample: the per-step marginal)."""
    batch = np.repeat(obs[None], n, axis=0)
    if sde:
        if hasattr(model, "actor"):
            model.actor.reset_noise(batch_size=n)
        else:
            model.policy.reset_noise(n_envs=n)
    acts, _ = model.predict(batch, deterministic=False)
    acts = np.asarray(acts, dtype=np.float64).reshape(n, -1)
    space = model.action_space
    at_bound = ((acts <= space.low) | (acts >= space.high)).astype(float)
    return np.concatenate([acts, acts**2, at_bound], 1)


def _moments_of_law(law, i: int) -> np.ndarray:
    r = law.rule()
    p, x = r.weights[i].numpy(), r.points[i].numpy()
    lo, hi = law.low, law.high
    at_bound = ((x <= lo) | (x >= hi)).astype(float)
    return np.concatenate([p @ x, p @ x**2, p @ at_bound])


def _agrees_with_sampling(model, law_obs, law, *, sde=False, n=40_000):
    for i in range(len(law_obs)):
        m = _moments_of_samples(model, law_obs[i], n, sde=sde)
        se = m.std(0) / math.sqrt(n) + 1e-12
        z = np.abs(m.mean(0) - _moments_of_law(law, i)) / se
        assert z.max() < 5.0, (i, z)


def test_sac_squashed_gaussian_is_what_sb3_samples(sac, mdp):
    pol = as_continuous_policy(sac)
    assert pol.kind == "squashed"
    law = pol.law(mdp.observations)
    _agrees_with_sampling(sac, mdp.observations, law)
    # its density against SB3's log_prob (in [-1, 1], with 1e-6 in the tanh correction),
    # mapped to the environment's box by the Jacobian of the rescaling
    obs_t, _ = sac.policy.obs_to_tensor(mdp.observations)
    with th.no_grad():
        scaled, logp_sb3 = sac.actor.action_log_prob(obs_t)
    env_act = sac.policy.unscale_action(scaled.numpy())
    ours = law.log_density(env_act.astype(np.float64))
    jac = math.log(0.5 * (mdp.high[0] - mdp.low[0]))
    np.testing.assert_allclose(ours + jac, logp_sb3.numpy(), atol=2e-4)


def test_ppo_clipped_gaussian_is_what_the_environment_receives(ppo, mdp):
    pol = as_continuous_policy(ppo)
    assert pol.kind == "clipped"
    law = pol.law(mdp.observations)
    # a fresh PPO's std is 1 on a box of half-width 2: real mass sits on the bounds
    assert _moments_of_law(law, 0)[2] > 0.01
    _agrees_with_sampling(ppo, mdp.observations, law)


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_gsde_per_step_marginal_is_what_sb3_samples(algo, mdp2):
    env = ContinuousTabularEnv(mdp2)
    if algo == "sac":
        model = sb3.SAC(
            "MlpPolicy", env, use_sde=True, learning_starts=50, policy_kwargs=net(), seed=1
        )
        model.learn(120)
    else:
        model = sb3.PPO(
            "MlpPolicy",
            env,
            use_sde=True,
            n_steps=64,
            batch_size=32,
            n_epochs=1,
            policy_kwargs=net(),
            seed=1,
        )
        model.learn(64)
    law = as_continuous_policy(model).law(mdp2.observations)
    _agrees_with_sampling(model, mdp2.observations, law, sde=True, n=20_000)
    res = meg_continuous(tabular_policy(model, mdp2), mdp2)
    assert res.converged and res.meg >= 0.0


def test_exact_meg_of_real_agents(sac, ppo, mdp, tmp_path):
    res = meg_continuous(tabular_policy(sac, mdp), mdp)
    assert res.converged and 0.0 <= res.meg <= res.certificate < math.inf
    clipped = meg_continuous(tabular_policy(ppo, mdp), mdp)
    assert clipped.converged and clipped.meg >= 0.0 and clipped.certificate == math.inf
    # the saved zip gives the same laws and the same MEG
    path = tmp_path / "sac.zip"
    sac.save(path)
    again = meg_continuous(tabular_policy(str(path), mdp), mdp)
    assert again.meg == pytest.approx(res.meg, rel=1e-12)


def test_deterministic_agents_are_refused_unless_smoothed(mdp, sac):
    env = ContinuousTabularEnv(mdp)
    td3 = sb3.TD3("MlpPolicy", env, learning_starts=50, policy_kwargs=net(), seed=0).learn(80)
    with pytest.raises(ValueError, match=r"TD3 acts deterministically.*noise_std=SIGMA"):
        as_continuous_policy(td3)
    pol = as_continuous_policy(td3, noise_std=0.3)
    assert pol.kind == "clipped" and "0.3" in pol.name
    law = pol.law(mdp.observations)
    with th.no_grad():
        act = td3.actor(td3.policy.obs_to_tensor(mdp.observations)[0]).numpy()
    np.testing.assert_allclose(law.mean, td3.policy.unscale_action(act), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(law.std, 0.3 * 2.0)  # sigma times the half-width
    res = meg_continuous(tabular_policy(td3, mdp, noise_std=0.3), mdp)
    assert res.converged and res.meg >= 0.0
    # SAC's deterministic mode: the same refusal, the same option
    with pytest.raises(ValueError, match=r"deterministic mode\) acts deterministically"):
        as_continuous_policy(sac, deterministic=True)
    smooth = as_continuous_policy(sac, deterministic=True, noise_std=0.1).law(mdp.observations)
    det, _ = sac.predict(mdp.observations, deterministic=True)
    np.testing.assert_allclose(smooth.mean, det, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="has its own action density"):
        as_continuous_policy(sac, noise_std=0.1)
    with pytest.raises(ValueError, match="positive finite"):
        as_continuous_policy(td3, noise_std=-1.0)


def test_discrete_and_unbounded_action_spaces_are_refused():
    dqn = sb3.DQN("MlpPolicy", "CartPole-v1", learning_starts=10)
    with pytest.raises(TypeError, match="needs a Box"):
        as_continuous_policy(dqn)

    # SB3 refuses to build agents on unbounded boxes; a policy object can still carry one
    ppo = sb3.PPO("MlpPolicy", "Pendulum-v1", n_steps=8, batch_size=8)
    ppo.policy.action_space = gym.spaces.Box(-np.inf, np.inf, (1,))
    with pytest.raises(ValueError, match="unbounded box"):
        as_continuous_policy(ppo.policy)
    with pytest.raises(TypeError, match="cannot read action densities"):
        as_continuous_policy(lambda obs: obs)


def test_a_nan_mean_from_a_real_agent_is_named_with_its_observation(ppo, sac, mdp):
    """A NaN observation gives a NaN mean (torch refuses to build the Gaussian): the message
    names the mean and the observation's row, not a standard deviation's range."""
    obs = np.array(mdp.observations, dtype=np.float32)
    obs[2] = np.nan
    named = r"NaN or infinite mean.* at 1 of 4 observations \(the first, row 2"
    for model in (ppo, sac):
        pol = as_continuous_policy(model)
        with pytest.raises(ValueError, match=named) as info:
            pol.law(obs)
        assert "std in [" not in str(info.value)
        with pytest.raises(ValueError, match=named):
            tabular_policy(model, mdp, observations=obs)
    # a law that reaches the reader with a NaN mean (no torch distribution in between)
    law = as_continuous_policy(sac).law
    nan_mean = ContinuousPolicyFn(
        lambda o: ActionLaw("squashed", law(o).mean * np.nan, law(o).std, law(o).low, law(o).high),
        np.array([-2.0]),
        np.array([2.0]),
        name="nan-sac",
        kind="squashed",
    )
    with pytest.raises(ValueError, match=r"nan-sac gave a NaN or infinite mean at 4 of 4"):
        nan_mean.law(mdp.observations)


@pytest.mark.parametrize(
    ("source", "named"),
    [
        (None, "NoneType None"),
        (42, "int 42"),
        (b"sac.zip", r"bytes b'sac\.zip' \(a path must be a str"),
        (np.zeros((4, 1)), r"an array \(4, 1\) \(per-state Gaussians"),
    ],
)
def test_what_is_no_agent_is_refused_by_name(source, named):
    with pytest.raises(TypeError, match=f"cannot read action densities from {named}"):
        as_continuous_policy(source)


def test_tabular_policy_refuses_a_tabular_mdp(sac):
    import imitation_meg as im

    with pytest.raises(
        TypeError,
        match=r"tabular_policy takes a ContinuousMDP .*TabularMDP CliffWorld.*policy_table",
    ):
        tabular_policy(sac, im.envs.cliff_world())
