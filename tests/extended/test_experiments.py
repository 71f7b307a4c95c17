"""Each extended experiment's fast config runs end to end into a tmp dir."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from imitation_meg import extended
from imitation_meg.extended import agents, envs
from imitation_meg.runners import load_driver
from imitation_meg.runners.config import load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_fast(name: str, tmp_path: pathlib.Path) -> dict:
    module = load_driver(f"extended_{name}", ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / f"extended_{name}_fast.yaml")
    cfg = load_config({**data, "results_dir": str(tmp_path)}, module.Config)
    out = module.main(cfg)
    payload = json.loads((tmp_path / "results.json").read_text())
    assert "versions" in payload and "config" in payload
    assert list(tmp_path.glob("*.png")) and list(tmp_path.glob("*.csv"))
    return out


#: The paper's Table 1 (TemptingButton, 100k steps, 5 seeds): mean reward per step and "StdErr".
PAPER_TABLE1 = {
    "Q": (-0.44858, 0.00044),
    "DQN": (-0.46687, 0.00137),
    "A2C": (-0.49820, 0.00045),
    "PPO": (-0.24217, 0.00793),
}


def test_table1_fast(tmp_path):
    out = _run_fast("table1", tmp_path)
    data = load_yaml(ROOT / "configs" / "extended_table1_fast.yaml")
    rows = {r["agent"]: r for r in out["summary"]}
    assert list(rows) == list(data["agents"])
    # the Q rows, recomputed here by running the Q-learner directly (an independent path)
    q_runs = [
        extended.run(envs.TemptingButton, agents.QLearner, data["n_steps"], seed=s).mean_reward
        for s in data["seeds"]
    ]
    got = [r["mean_reward"] for r in out["runs"] if r["agent"] == "Q"]
    np.testing.assert_allclose(got, q_runs, rtol=0, atol=1e-12)
    # every summary row aggregates its runs as the paper does (population sd / number of seeds)
    for name, row in rows.items():
        m = np.array([r["mean_reward"] for r in out["runs"] if r["agent"] == name])
        assert len(m) == len(data["seeds"]) == row["n_seeds"]
        assert row["mean"] == pytest.approx(m.mean(), abs=1e-12)
        assert row["paper_stderr_convention"] == pytest.approx(m.std() / len(m), abs=1e-12)
        # paper values: the paper's own numbers (PPO-upstream is compared with the paper's PPO)
        paper = PAPER_TABLE1["PPO" if name == "PPO-upstream" else name]
        assert (row["paper_mean"], row["paper_stderr"]) == paper


def test_reality_check_fast(tmp_path):
    out = _run_fast("reality_check", tmp_path)
    q = next(r for r in out["summary"] if r["agent"] == "Q")
    assert q["ignore_rewards_reality_check"] > q["ignore_rewards_original"]


def test_cartpole_fast(tmp_path):
    out = _run_fast("cartpole", tmp_path)
    assert len(out["summary"]) == 4 and all(r["episodes"] == 2 for r in out["summary"])


def test_cartpole_paper_config_matches_the_reduced_agents_and_smooths_long_curves():
    """The paper-sized run stands beside the reduced one: same agents and settings, only seeds,
    episodes and the tail differ; its 10,000-episode curves are drawn as 100-episode averages."""
    module = load_driver("extended_cartpole", ROOT / "experiments")
    paper = load_config(load_yaml(ROOT / "configs/extended_cartpole_paper.yaml"), module.Config)
    reduced = load_config(load_yaml(ROOT / "configs/extended_cartpole.yaml"), module.Config)
    assert (paper.n_episodes, len(paper.seeds)) == (10_000, 10)
    for field in ("gym_id", "envs", "agents", "agent_kwargs"):
        assert getattr(paper, field) == getattr(reduced, field), field
    assert [module.smoothing_window(n) for n in (2, 200, 500, 501, 10_000)] == [1, 1, 1, 5, 100]


@pytest.fixture(scope="module")
def meg_fast(tmp_path_factory):
    return _run_fast("meg", tmp_path_factory.mktemp("meg_fast"))


def test_meg_fast(meg_fast):
    out = meg_fast
    rows = {(r["env"], r["policy"], r["measure"]): r for r in out["rows"]}
    closed = (1 + 0.25 * 3) * math.log(2)
    push = rows[("TemptingButton", "always push", "known utility")]
    never = rows[("TemptingButton", "never push", "known utility")]
    assert push["meg"] == pytest.approx(closed, abs=1e-6)
    assert never["meg"] == pytest.approx(closed, abs=1e-6)
    assert push["signed_meg"] == pytest.approx(closed, abs=1e-6)
    assert never["signed_meg"] == pytest.approx(-closed, abs=1e-6)
    uniform = rows[("TemptingButton", "uniform", "known utility")]
    assert uniform["meg"] == pytest.approx(0.0, abs=1e-9)


def test_meg_fast_crying_baby_targets_come_apart(meg_fast):
    """CryingBaby (frozen baby): the two targets rank the parent policies in opposite orders."""
    out = meg_fast
    meg = {
        (r["policy"], r["measure"]): r["meg"]
        for r in out["rows"]
        if r["env"].startswith("CryingBaby")
    }
    laugh, nutri = "target baby_laughs", "target nutrition_in_2_8"
    assert all(v is not None and math.isfinite(v) for v in meg.values())
    # Always feeding makes the baby laugh at every later state: (H - 1) ln 2 with H = 4 ...
    assert meg[("always feed", laugh)] == pytest.approx(3 * math.log(2), abs=1e-6)
    # ... but drives nutrition out of (2, 8): less goal-directed towards the nutrition target.
    assert meg[("always feed", laugh)] > meg[("always feed", nutri)] + 0.1
    # Feeding only when hungry keeps nutrition in range: the order of the targets flips.
    assert meg[("feed iff nutrition < 5", nutri)] > meg[("feed iff nutrition < 5", laugh)] + 0.05
    assert meg[("uniform", laugh)] == pytest.approx(0.0, abs=1e-6)
    assert meg[("uniform", nutri)] == pytest.approx(0.0, abs=1e-6)


def test_reality_check_driver_builds_rc_agents_with_the_original_keywords():
    """Regression: RC(X) once got none of X's ``agent_kwargs`` nor ``total_timesteps``."""
    module = load_driver("extended_reality_check", ROOT / "experiments")
    cfg = module.Config(
        agent_kwargs={"PPO": {"n_steps": 32, "batch_size": 32}, "DQN": {"learning_starts": 7}}
    )
    ppo = module._factory("PPO", cfg, 300)(n_actions=2, n_obs=1, seed=0)
    rc_ppo = module._factory("RC(PPO)", cfg, 300)(n_actions=2, n_obs=1, seed=0)
    assert ppo.model.n_steps == rc_ppo.inner.model.n_steps == 32
    assert ppo.total_timesteps == rc_ppo.inner.total_timesteps == 300
    rc_dqn = module._factory("RC(DQN)", cfg, 300)(n_actions=2, n_obs=1, seed=0)
    assert rc_dqn.inner.model.learning_starts == 7 and rc_dqn.inner.total_timesteps == 300


def test_rc_diagnosis_fast(tmp_path):
    """Before PPO's first update the agent matches its identically seeded sim on every step
    (original and RC alike); against a sim with another seed it does not."""
    module = load_driver("extended_rc_diagnosis", ROOT / "experiments")
    data = load_yaml(ROOT / "configs" / "extended_rc_diagnosis_fast.yaml")
    out = module.main(load_config({**data, "results_dir": str(tmp_path)}, module.Config))
    mean = {r["case"]: r["mean_reward"] for r in out["summary"]}
    assert mean["original"] == 1.0 and mean["reality_check"] == 1.0
    assert mean["original, decoupled sim"] < 1.0
    assert (tmp_path / "runs.csv").exists() and (tmp_path / "results.json").exists()
