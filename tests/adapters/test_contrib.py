"""sb3-contrib models through policy_table: QR-DQN, TRPO, ARS, MaskablePPO, RecurrentPPO."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.adapters.contrib import ActionMaskWarning, RecurrentPolicyWarning, env_masks
from imitation_meg.adapters.sb3 import read_model_info

from .conftest import CLIFF, cliff_mask, masked_cliff_env

pytest.importorskip("sb3_contrib")


def _obs(s: int) -> np.ndarray:
    import gymnasium as gym
    import seals  # noqa: F401 (registers the seals environment ids)

    return gym.make(CLIFF).unwrapped.obs_from_state(s)


@pytest.fixture(scope="module")
def mdp():
    return im.TabularMDP.from_env(CLIFF)


@pytest.mark.parametrize("epsilon", [0.0, 0.25])
def test_qrdqn_is_epsilon_greedy_over_quantile_means(qrdqn_cliff, mdp, epsilon):
    pi = policy_table(qrdqn_cliff, mdp, epsilon=epsilon)
    for s in range(mdp.n_states):
        obs_t, _ = qrdqn_cliff.policy.obs_to_tensor(_obs(s))
        with th.no_grad():
            quantiles = qrdqn_cliff.policy.quantile_net(obs_t)[0].double().numpy()  # (Nq, A)
        q = quantiles.mean(axis=0)
        best = np.flatnonzero(q == q.max())
        expected = np.full(4, epsilon / 4)
        expected[best] += (1 - epsilon) / best.size
        np.testing.assert_allclose(pi[s].numpy(), expected, atol=1e-12)
        if best.size == 1:  # the greedy action is the one QR-DQN itself predicts
            assert qrdqn_cliff.predict(_obs(s), deterministic=True)[0] == best[0]
    with pytest.raises(ValueError, match=r"a QR-DQN has no action distribution.*pass epsilon="):
        policy_table(qrdqn_cliff, mdp)


def test_ars_is_its_deterministic_argmax(ars_cliff, mdp):
    pi = policy_table(ars_cliff, mdp)
    assert set(np.unique(pi.numpy())) <= {0.0, 0.5, 1 / 3, 0.25, 1.0}
    for s in range(mdp.n_states):
        row = pi[s].numpy()
        if row.max() == 1.0:
            assert ars_cliff.predict(_obs(s), deterministic=True)[0] == row.argmax()
    mixed = policy_table(ars_cliff, mdp, epsilon=0.2)
    th.testing.assert_close(mixed, 0.8 * pi + 0.05)


def test_trpo_uses_its_action_distribution(trpo_cliff, mdp):
    pi = policy_table(trpo_cliff, mdp)
    for s in (0, 7, 20):
        obs_t, _ = trpo_cliff.policy.obs_to_tensor(_obs(s))
        with th.no_grad():
            probs = trpo_cliff.policy.get_distribution(obs_t).distribution.probs[0].double()
        np.testing.assert_allclose(pi[s].numpy(), probs.numpy(), atol=1e-6)
    assert float(pi.min()) > 0  # a stochastic policy


def test_maskable_ppo_applies_the_environment_masks(maskable_cliff, trpo_cliff, mdp):
    masks = np.stack([cliff_mask(s) for s in range(mdp.n_states)])
    np.testing.assert_array_equal(env_masks(masked_cliff_env(), mdp), masks)
    pi = policy_table(maskable_cliff, masked_cliff_env())  # masks read from the env, per state
    assert float(pi[~th.as_tensor(masks)].abs().max()) == 0.0
    for s in (0, 5, 27):
        obs_t, _ = maskable_cliff.policy.obs_to_tensor(_obs(s))
        with th.no_grad():
            dist = maskable_cliff.policy.get_distribution(obs_t, action_masks=masks[s][None])
        np.testing.assert_allclose(pi[s].numpy(), dist.distribution.probs[0].numpy(), atol=1e-6)
    th.testing.assert_close(policy_table(maskable_cliff, mdp, action_masks=masks), pi)
    th.testing.assert_close(policy_table(maskable_cliff, mdp, action_masks=cliff_mask), pi)
    # Without masks: a warning, and the unmasked distribution (mass on forbidden actions).
    with pytest.warns(ActionMaskWarning, match="scored without action masks"):
        raw = policy_table(maskable_cliff, mdp)
    assert float(raw[~th.as_tensor(masks)].min()) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        th.testing.assert_close(policy_table(maskable_cliff, mdp, action_masks=False), raw)
    bad = masks.copy()
    bad[3] = False
    with pytest.raises(ValueError, match=r"allow no action in states \[3\]"):
        policy_table(maskable_cliff, mdp, action_masks=bad)
    with pytest.raises(ValueError, match=r"shape \(S, A\) = \(28, 4\)"):
        policy_table(maskable_cliff, mdp, action_masks=masks[:5])
    with pytest.raises(ValueError, match="action_masks= applies to MaskablePPO"):
        policy_table(trpo_cliff, mdp, action_masks=masks)


def test_recurrent_ppo_is_scored_at_its_fresh_state(recurrent_cliff, mdp):
    with pytest.warns(RecurrentPolicyWarning, match="not a Markov policy"):
        pi = policy_table(recurrent_cliff, mdp)
    for s in range(mdp.n_states):
        # The definition: the action distribution at a zero LSTM state and an episode start.
        policy = recurrent_cliff.policy
        obs_t, _ = policy.obs_to_tensor(_obs(s))
        n_layers, hidden = policy.lstm_actor.num_layers, policy.lstm_actor.hidden_size
        zero = th.zeros(n_layers, 1, hidden)
        with th.no_grad():
            dist, _ = policy.get_distribution(obs_t, (zero, zero), th.ones(1))
        np.testing.assert_allclose(pi[s].numpy(), dist.distribution.probs[0].numpy(), atol=1e-6)
        # ... which is what predict() does at the start of an episode.
        action, _ = recurrent_cliff.predict(
            _obs(s), state=None, episode_start=np.ones(1, bool), deterministic=True
        )
        assert pi[s, int(action)] == pi[s].max()


@pytest.mark.parametrize(
    "fixture, algo",
    [
        ("qrdqn_cliff", "qrdqn"),
        ("trpo_cliff", "trpo"),
        ("ars_cliff", "ars"),
        ("maskable_cliff", "maskableppo"),
        ("recurrent_cliff", "recurrentppo"),
    ],
)
def test_contrib_zips_name_their_algorithm(fixture, algo, request, tmp_path):
    model = request.getfixturevalue(fixture)
    model.save(tmp_path / "m.zip")
    assert read_model_info(tmp_path / "m.zip").algo == algo
    kwargs = {"epsilon": 0.1} if algo == "qrdqn" else {}
    if algo == "maskableppo":
        kwargs["action_masks"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecurrentPolicyWarning)
        th.testing.assert_close(
            policy_table(tmp_path / "m.zip", CLIFF, **kwargs), policy_table(model, CLIFF, **kwargs)
        )
    other = "ppo" if algo != "ppo" else "a2c"
    with pytest.raises(ValueError, match=f"saved by {algo.upper()}"):
        policy_table(tmp_path / "m.zip", CLIFF, algo=other, **kwargs)
    # RL Zoo's names for the two PPO variants.
    if algo in ("maskableppo", "recurrentppo"):
        zoo_name = "ppo_mask" if algo == "maskableppo" else "ppo_lstm"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecurrentPolicyWarning)
            policy_table(tmp_path / "m.zip", CLIFF, algo=zoo_name, **kwargs)


@pytest.mark.parametrize(
    "fixture, extra",
    [
        ("qrdqn_cliff", ["--epsilon", "0.05"]),
        ("trpo_cliff", []),
        ("ars_cliff", []),
        ("maskable_cliff", ["--action-masks", "MASKS"]),
    ],
)
def test_cli_scores_contrib_zips_without_algo(fixture, extra, request, tmp_path, capsys):
    import json

    from imitation_meg.cli import main

    model = request.getfixturevalue(fixture)
    model.save(tmp_path / "m.zip")
    mdp = im.TabularMDP.from_env(CLIFF)
    masks = np.stack([cliff_mask(s) for s in range(mdp.n_states)])
    np.save(tmp_path / "masks.npy", masks)
    extra = [str(tmp_path / "masks.npy") if e == "MASKS" else e for e in extra]
    argv = ["score", "--env", CLIFF, "--policy", str(tmp_path / "m.zip"), "--json"]
    assert main([*argv, str(tmp_path / "r.json"), *extra]) == 0
    payload = json.loads((tmp_path / "r.json").read_text())
    kwargs: dict = {"epsilon": 0.05} if fixture == "qrdqn_cliff" else {}
    if fixture == "maskable_cliff":
        kwargs["action_masks"] = masks
    expected = im.meg(policy_table(model, mdp, **kwargs), mdp)
    assert payload["meg"] == pytest.approx(expected.meg, rel=1e-9, abs=1e-12)
    assert payload["algo"] == read_model_info(tmp_path / "m.zip").algo
    assert payload["policy"].startswith(payload["algo"].upper())


def test_cli_recurrent_and_unmasked_print_one_line_warnings(
    recurrent_cliff, maskable_cliff, tmp_path, capsys
):
    from imitation_meg.cli import main

    recurrent_cliff.save(tmp_path / "rppo.zip")
    maskable_cliff.save(tmp_path / "mppo.zip")
    for name, expected in (("rppo", "RecurrentPolicyWarning"), ("mppo", "ActionMaskWarning")):
        with warnings.catch_warnings():
            warnings.simplefilter("always")  # as outside the test suite, which makes them errors
            assert main(["score", "--env", CLIFF, "--policy", str(tmp_path / f"{name}.zip")]) == 0
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if expected in x]
        assert len(lines) == 1 and lines[0].startswith("imitation-meg score: warning"), err
