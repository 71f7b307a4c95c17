"""imitation's TabularPolicy, non-trainable policies and load_policy names through policy_table."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

import imitation_meg as im

pytest.importorskip("imitation")

from imitation_meg.adapters import policy_table
from imitation_meg.adapters.imitation import load_policy, policy_names, tabular_policy_table

from .conftest import CLIFF, LAKE


def _tabular_policy(mdp, pi):
    import gymnasium as gym
    from imitation.algorithms.mce_irl import TabularPolicy

    return TabularPolicy(
        state_space=gym.spaces.Discrete(mdp.n_states),
        action_space=gym.spaces.Discrete(mdp.n_actions),
        pi=np.asarray(pi),
        rng=np.random.default_rng(0),
    )


def test_tabular_policy_from_mce_partition_fh():
    import gymnasium as gym
    import seals  # noqa: F401 (registers the seals environment ids)
    from imitation.algorithms.mce_irl import mce_partition_fh

    env = gym.make(CLIFF).unwrapped
    _, _, pi = mce_partition_fh(env)
    mdp = im.TabularMDP.from_env(CLIFF)
    table = policy_table(_tabular_policy(mdp, pi), mdp)
    assert table.shape == (mdp.horizon, mdp.n_states, mdp.n_actions)
    np.testing.assert_allclose(table.numpy(), pi[: mdp.horizon], atol=1e-12)
    # imitation's soft-optimal policy is beta = 1 for the env reward: MEG finds beta* = 1 exactly.
    res = im.meg(table, mdp)
    assert res.beta == pytest.approx(1.0, rel=1e-6)


def test_tabular_policy_horizon_and_shape_checks():
    mdp = im.TabularMDP.from_env(CLIFF)
    pi = np.full((mdp.horizon + 3, mdp.n_states, mdp.n_actions), 0.25)
    assert tabular_policy_table(_tabular_policy(mdp, pi), mdp).shape[0] == mdp.horizon
    with pytest.raises(ValueError, match=r"covers 3 steps but .* has horizon 9"):
        policy_table(_tabular_policy(mdp, pi[:3]), mdp)
    with pytest.raises(ValueError, match="pi of shape"):
        policy_table(_tabular_policy(mdp, pi[:, :5]), mdp)
    with pytest.raises(ValueError, match="epsilon= applies only to argmax policies"):
        policy_table(_tabular_policy(mdp, pi), mdp, epsilon=0.1)


def test_load_policy_names(ppo_lake, tmp_path):
    assert {"ppo", "random", "zero"} <= set(policy_names())
    uniform = policy_table("random", LAKE)
    th.testing.assert_close(uniform, th.full((16, 4), 0.25, dtype=th.float64))
    zero = policy_table("zero", LAKE)
    assert bool((zero[:, 0] == 1).all()) and float(zero.sum()) == 16
    ppo_lake.save(tmp_path / "model.zip")
    loaded = policy_table("ppo", LAKE, load_kwargs={"path": str(tmp_path / "model.zip")})
    th.testing.assert_close(loaded, policy_table(ppo_lake, LAKE))
    # Through the helper directly, with an environment instance.
    import gymnasium as gym

    pol = load_policy("zero", gym.make(LAKE))
    th.testing.assert_close(policy_table(pol, LAKE), zero)


def test_load_policy_errors():
    mdp = im.TabularMDP.from_env(LAKE)
    with pytest.raises(
        ValueError, match=r"neither an existing \.zip file nor an imitation load_policy name"
    ):
        policy_table("no-such-policy", LAKE)
    with pytest.raises(ValueError, match="needs the environment: pass env="):
        policy_table("random", mdp)
    th.testing.assert_close(
        policy_table("random", mdp, env=LAKE), th.full((16, 4), 0.25, dtype=th.float64)
    )
    with pytest.raises(ValueError, match="could not load 'ppo'"):
        policy_table("ppo", LAKE)  # no path
    with pytest.raises(ValueError, match="unknown imitation policy name"):
        load_policy("nope", LAKE)
