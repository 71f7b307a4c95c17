"""Box agents on continuous-action MDPs: the callback's exact records and batch scoring
(:mod:`imitation_meg.continuous.score`)."""

from __future__ import annotations

import math

import pytest

from imitation_meg.continuous import ContinuousTabularEnv, meg_continuous, random_continuous_mdp
from imitation_meg.continuous.densities import tabular_policy as tabular_policy_of

sb3 = pytest.importorskip("stable_baselines3")


@pytest.fixture(scope="module")
def mdp():
    return random_continuous_mdp(3, 1, 2, seed=3)


def test_callback_and_batch_scoring_accept_box_agents(mdp, tmp_path):
    from imitation_meg.callbacks import MEGCallback
    from imitation_meg.scoring import ScoreOptions, score_policies

    env = ContinuousTabularEnv(mdp)
    cb = MEGCallback(env, eval_freq=60, history=tmp_path / "h.jsonl")
    model = sb3.SAC("MlpPolicy", env, learning_starts=30, seed=0, policy_kwargs={"net_arch": [16]})
    model.learn(120, callback=cb)
    assert [r["timesteps"] for r in cb.records] == [60, 120]
    for r in cb.records:
        assert 0.0 <= r["meg"] <= r["certificate"] and r["converged"]
        assert r["normalized"] == pytest.approx(r["meg"] / r["certificate"])
        # a density has no H log|A|: upper_bound (that bound, in discrete records) stays empty
        assert r["upper_bound"] is None
    assert len((tmp_path / "h.jsonl").read_text().splitlines()) == 2
    # the training environment itself, when none is given; TD3 with its smoothing
    td3 = sb3.TD3("MlpPolicy", env, learning_starts=20, seed=0, policy_kwargs={"net_arch": [16]})
    cb2 = MEGCallback(eval_freq=40, noise_std=0.2, unknown=True)
    td3.learn(40, callback=cb2)
    # every utility of the state: a class without the MDP's own (action-dependent) utility
    assert cb2.records[0]["unknown"] >= 0.0 and cb2.records[0]["certificate"] == math.inf
    model.save(tmp_path / "sac.zip")
    rows = score_policies([str(tmp_path / "sac.zip"), "uniform"], mdp, ScoreOptions())
    assert rows[0]["algo"] == "sac" and rows[0]["timesteps"] == 120
    # (the callback's last record saw the policy before the step's gradient update)
    direct = meg_continuous(tabular_policy_of(str(tmp_path / "sac.zip"), mdp), mdp)
    assert rows[0]["meg"] == pytest.approx(direct.meg, rel=1e-12)
    assert rows[1]["meg"] == 0.0 and rows[1]["policy"] == "uniform"
    unk = score_policies([str(tmp_path / "sac.zip")], mdp, ScoreOptions(mode="unknown"))
    assert 0.0 <= unk[0]["meg"] <= unk[0]["certificate"] and unk[0]["known_meg"] == rows[0]["meg"]
    assert rows[0]["upper_bound"] is None and unk[0]["upper_bound"] is None
    with pytest.raises(ValueError, match="no density on a continuous box"):
        score_policies(["optimal"], mdp)
