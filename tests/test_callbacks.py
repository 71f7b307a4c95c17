"""MEGCallback: the values it logs to SB3's logger are the exact MEG of the policy at those steps."""

from __future__ import annotations

import csv
import json
import warnings

import pytest
import torch as th

import imitation_meg as im

pytest.importorskip("stable_baselines3")

CLIFF = "seals/CliffWorld7x4-v0"


def _read_csv(path):
    with open(path) as f:
        return [row for row in csv.DictReader(f) if row.get("meg/known")]


def _train_with_callback(tmp_path, *, normalize: bool, unknown: bool = False):
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    from imitation_meg.callbacks import MEGCallback

    th.set_num_threads(1)
    venv = make_vec_env(CLIFF, n_envs=2, seed=0)
    if normalize:
        venv = VecNormalize(venv, norm_reward=False)
    tiny = {"seed": 0, "device": "cpu", "policy_kwargs": {"net_arch": [16]}}
    model = sb3.PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, **tiny)
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    meg_cb = MEGCallback(CLIFF, eval_freq=96, unknown=unknown, history=tmp_path / "history.jsonl")
    # Checkpoints at the same calls: an independent copy of the policy the callback scored.
    ckpt = CheckpointCallback(96, str(tmp_path / "ckpt"), save_vecnormalize=normalize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.learn(384, callback=[meg_cb, ckpt])
    return model, meg_cb


@pytest.mark.parametrize("normalize", [False, True])
def test_logged_values_equal_meg_of_the_checkpoints(tmp_path, normalize):
    from imitation_meg.adapters import policy_table

    _, cb = _train_with_callback(tmp_path, normalize=normalize)
    rows = _read_csv(tmp_path / "log" / "progress.csv")
    # 384 steps on 2 envs = 192 calls: evaluations at calls 96 and 192 (timesteps 192 and 384).
    assert [int(float(r["time/total_timesteps"])) for r in rows] == [192, 384]
    mdp = im.TabularMDP.from_env(CLIFF)
    for row in rows:
        steps = int(float(row["time/total_timesteps"]))
        zip_path = tmp_path / "ckpt" / f"rl_model_{steps}_steps.zip"
        stats = "auto" if normalize else False
        exact = im.meg(policy_table(zip_path, mdp, vec_normalize=stats), mdp)
        assert float(row["meg/known"]) == pytest.approx(exact.meg, rel=1e-9, abs=1e-12)
        assert float(row["meg/normalized"]) == pytest.approx(exact.normalized, rel=1e-9, abs=1e-12)
        assert float(row["meg/expected_return"]) == pytest.approx(exact.expected_utility, rel=1e-9)
        assert int(float(row["meg/converged"])) == int(exact.converged)
    if normalize:  # the statistics matter: the raw-observation table scores differently
        raw = im.meg(policy_table(zip_path, mdp, vec_normalize=False), mdp)
        assert raw.meg != pytest.approx(float(rows[-1]["meg/known"]), rel=1e-6)
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [h["timesteps"] for h in history] == [192, 384]
    assert [h["meg"] for h in history] == [r["meg"] for r in cb.records]
    assert history[-1]["meg"] == pytest.approx(float(rows[-1]["meg/known"]), rel=1e-12)


def test_unknown_utility_and_training_env_default(tmp_path):
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import CheckpointCallback

    from imitation_meg.adapters import policy_table
    from imitation_meg.callbacks import MEGCallback

    th.set_num_threads(1)
    model = sb3.A2C("MlpPolicy", CLIFF, n_steps=8, seed=0, device="cpu")
    cb = MEGCallback(
        eval_freq=50, unknown=True, eval_at_start=True
    )  # the MDP from the training env
    model.learn(100, callback=[cb, CheckpointCallback(50, str(tmp_path))])
    assert [r["timesteps"] for r in cb.records] == [0, 50, 100]
    mdp = im.TabularMDP.from_env(CLIFF)
    last = cb.records[-1]
    pi = policy_table(tmp_path / "rl_model_100_steps.zip", mdp)
    assert last["unknown"] == pytest.approx(im.meg_unknown(pi, mdp).meg, rel=1e-8)
    assert last["unknown"] >= last["meg"] - 1e-9  # the env reward is a utility of the state


def test_dqn_uses_its_exploration_rate_and_errors(tmp_path):
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import CheckpointCallback

    from imitation_meg.adapters import policy_table
    from imitation_meg.callbacks import MEGCallback

    model = sb3.DQN("MlpPolicy", CLIFF, learning_starts=50, seed=0, device="cpu")
    cb = MEGCallback(CLIFF, eval_freq=100, eval_at_start=True)
    model.learn(100, callback=[cb, CheckpointCallback(100, str(tmp_path))])
    mdp = im.TabularMDP.from_env(CLIFF)
    # at the start, the rate of the first actions (SB3's exploration_rate is 0 until then)
    assert cb.records[0]["timesteps"] == 0 and cb.records[0]["epsilon"] == pytest.approx(1.0)
    record = cb.records[-1]
    # The exploration rate of that moment: 1.0 decaying linearly over 10% of 100 steps to 0.05.
    assert record["epsilon"] == pytest.approx(0.05)
    pi = policy_table(tmp_path / "rl_model_100_steps.zip", mdp, epsilon=record["epsilon"])
    assert record["meg"] == pytest.approx(im.meg(pi, mdp).meg, rel=1e-9)
    with pytest.raises(ValueError, match="eval_freq must be a positive integer"):
        MEGCallback(CLIFF, eval_freq=0)
    import gymnasium as gym

    doubled = gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 2.0 * r)
    with pytest.raises(
        ValueError, match="none can be computed for it: its wrapper TransformReward"
    ):
        MEGCallback(doubled)
    with pytest.raises(ValueError, match="unknown=True needs a tabular environment"):
        MEGCallback("CartPole-v1", unknown=True)
    with pytest.raises(ValueError, match=r"history='/proc/nope/h\.jsonl' cannot be written"):
        MEGCallback(CLIFF, history="/proc/nope/h.jsonl")


def test_the_callback_scores_cartpole_through_its_curve(tmp_path):
    """A non-tabular environment: the curve is computed once when training starts, each
    evaluation scores the current policy from its episodes (MEG with its interval, logged and
    in the history); a saved curve serves instead, and one of another horizon is refused."""
    import json

    import stable_baselines3 as sb3

    from imitation_meg.approx import SoftValueCurve, meg_approx, soft_value_curve
    from imitation_meg.callbacks import MEGCallback

    model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=128, batch_size=64, seed=0, device="cpu")
    hist = tmp_path / "h.jsonl"
    cb = MEGCallback(
        "CartPole-v1", eval_freq=128, horizon=60, n_eval_episodes=50, history=hist, seed=3
    )
    model.learn(256, callback=cb)
    assert isinstance(cb.curve, SoftValueCurve) and cb.curve.info.horizon == 60
    lines = [json.loads(x) for x in hist.read_text().splitlines()]
    assert [r["timesteps"] for r in lines] == [128, 256]
    # the callback's seconds: the curve, then each evaluation (with its parts in the history)
    assert cb.curve_seconds > 0
    assert cb.eval_seconds == pytest.approx(
        cb.curve_seconds + sum(r["eval_seconds"] for r in lines), rel=1e-9
    )
    for r in lines:
        assert set(r["timings"]) >= {"policy episodes", "maximum and bootstrap"}
        assert 0 < sum(r["timings"].values()) <= r["eval_seconds"]
    # the model as learn() left it (PPO updated once more after the last evaluation): its record
    # is meg_approx with that curve, the same episodes (seed + evaluations so far)
    last = cb.evaluate()
    assert last["low"] <= last["meg"] <= last["high"] and last["upper_bound"] > 0
    again = meg_approx(model, "CartPole-v1", horizon=60, curve=cb.curve, n_eval_episodes=50, seed=5)
    assert again.meg == pytest.approx(last["meg"], rel=1e-12)
    path = soft_value_curve("CartPole-v1", horizon=60, seed=3).save(tmp_path / "c.npz")
    from_file = MEGCallback("CartPole-v1", horizon=60, curve=path, n_eval_episodes=50)
    assert from_file.curve is not None and from_file.curve.info.horizon == 60
    assert from_file.curve_seconds == 0.0  # a given curve costs the training nothing
    with pytest.raises(ValueError, match=r"horizon 70 \(the curve's: 60\)"):
        MEGCallback("CartPole-v1", horizon=70, curve=path)


def test_the_curve_route_reads_the_policy_through_its_vec_normalize():
    """A PPO trained in a ``VecNormalize`` (as the RL Zoo's Acrobot agent): the callback scores
    the policy that acts on normalised observations, the same number as a policy function that
    normalises the raw observations itself with the running statistics."""
    import numpy as np
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from imitation_meg.approx import meg_approx
    from imitation_meg.callbacks import MEGCallback

    th.set_num_threads(1)
    venv = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    model = sb3.PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    cb = MEGCallback("CartPole-v1", eval_freq=64, horizon=40, n_eval_episodes=30, seed=1)
    model.learn(256, callback=cb)
    assert not np.allclose(venv.obs_rms.mean, 0.0)  # statistics that change the policy's input
    rec = cb.evaluate()  # seed 1 + 2 evaluations so far

    def probs(obs):
        o = th.as_tensor(venv.normalize_obs(np.asarray(obs, dtype=np.float32)))
        with th.no_grad():
            return model.policy.get_distribution(o).distribution.probs.numpy()

    by_hand = meg_approx(
        probs, "CartPole-v1", horizon=40, curve=cb.curve, n_eval_episodes=30, seed=3
    )
    assert rec["expected_return"] == pytest.approx(by_hand.expected_return, rel=1e-9)
    assert rec["meg"] == pytest.approx(by_hand.meg, rel=1e-9)


def test_a_box_environment_takes_its_curve_from_a_file(tmp_path):
    """Box actions (Pendulum): a saved curve of the environment serves the callback (its actions
    checked as a box, not as a Discrete count), whose evaluation is meg_approx with that curve;
    a curve of another horizon is refused."""
    import stable_baselines3 as sb3

    from imitation_meg.approx import meg_approx, soft_value_curve
    from imitation_meg.callbacks import MEGCallback

    th.set_num_threads(1)
    curve = soft_value_curve("Pendulum-v1", horizon=5, n_particles=8, n_starts=4, seed=0)
    path = curve.save(tmp_path / "pendulum.npz")
    model = sb3.SAC("MlpPolicy", "Pendulum-v1", learning_starts=10, seed=0, device="cpu")
    cb = MEGCallback("Pendulum-v1", horizon=5, curve=path, eval_freq=20, n_eval_episodes=20)
    assert cb.curve_seconds == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model.learn(20, callback=cb)
        again = meg_approx(model, "Pendulum-v1", horizon=5, curve=path, n_eval_episodes=20, seed=1)
        last = cb.evaluate()  # seed 0 + 1 evaluation so far (a tiny curve: warned unsettled)
    rec = cb.records[0]
    assert rec["low"] <= rec["meg"] <= rec["high"]
    assert last["meg"] == pytest.approx(again.meg, rel=1e-9)
    with pytest.raises(ValueError, match=r"horizon 6 \(the curve's: 5\)"):
        MEGCallback("Pendulum-v1", horizon=6, curve=path)


def test_an_environment_id_gymnasium_cannot_make_is_refused_when_the_callback_is_built():
    from imitation_meg.callbacks import MEGCallback

    with pytest.raises(ValueError, match=r"could not make environment 'NoSuchEnv-v0': .* id"):
        MEGCallback("NoSuchEnv-v0")
    with pytest.raises(ValueError, match="could not make environment 'seals/NoSuch-v0'"):
        MEGCallback("seals/NoSuch-v0", eval_freq=10)


def test_a_dqn_learns_only_after_learning_starts():
    """Before ``learning_starts`` a DQN takes no gradient step, so its MEG at a fixed epsilon is
    exactly constant; after it, the policy moves (docs/sb3.md: a 20 000-step DQN with SB3
    2.2.1's default of 50 000 never trains)."""
    import seals  # noqa: F401 (registers the seals environment ids)
    import stable_baselines3 as sb3

    from imitation_meg.callbacks import MEGCallback

    model = sb3.DQN("MlpPolicy", CLIFF, learning_starts=1_000, seed=0, device="cpu")
    cb = MEGCallback(CLIFF, eval_freq=500, epsilon=0.05, eval_at_start=True)
    model.learn(2_000, callback=cb)
    megs = {r["timesteps"]: r["meg"] for r in cb.records}
    assert sorted(megs) == [0, 500, 1_000, 1_500, 2_000]
    assert megs[0] == megs[500] == megs[1_000]  # no gradient step yet: the same policy
    assert megs[2_000] != megs[0]
