"""gymnasium's Box2D tasks: no state copy, so no simulator; the soft Q-fits score what they can
integrate (Discrete actions, boxes of at most 3 dimensions) and the rest is refused in one line.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import pytest

pytest.importorskip("Box2D")

from imitation_meg.approx.evaluate import ApproxMEGWarning
from imitation_meg.approx.known import meg_approx
from imitation_meg.approx.simulators import dynamics_for

#: The tasks' version on this lane: LunarLander v2 on gymnasium 0.29, v3 on gymnasium 1.x.
LL = "v2" if gym.__version__.startswith("0.") else "v3"


@pytest.mark.parametrize("env_id", [f"LunarLander-{LL}", "BipedalWalker-v3"])
def test_box2d_tasks_have_no_simulator_and_say_so(env_id):
    dyn, why = dynamics_for(gym.make(env_id))
    assert dyn is None and "has no simulator here" in why


def test_a_box_of_four_dimensions_without_a_simulator_is_refused_up_front():
    with pytest.raises(ValueError, match=r"BipedalWalker-v3 acts in a Box of 4 dimensions"):
        meg_approx("uniform", "BipedalWalker-v3", horizon=10)
    with pytest.raises(ValueError, match=r"Box of 4 dimensions.*at most 3"):
        meg_approx("uniform", "BipedalWalker-v3", horizon=10, method="soft_q")


def test_the_cli_refuses_bipedalwalker_in_one_line(capsys):
    from imitation_meg.cli import main

    argv = ["score", "--env", "BipedalWalker-v3", "--policy", "uniform", "--approx"]
    assert main([*argv, "--horizon", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Box of 4 dimensions" in err, err


@pytest.mark.expensive  # about 40 s of CPU: soft Q-fits in a 2-dimensional box
def test_lunarlander_continuous_is_scored_by_the_soft_q_fits():
    with warnings.catch_warnings():  # one small model: it may say so
        warnings.simplefilter("ignore", ApproxMEGWarning)
        res = meg_approx(
            "uniform",
            f"LunarLanderContinuous-{LL}",
            horizon=20,
            n_models=1,
            n_data_steps=1000,
            n_eval_episodes=4,
            iterations=2,
        )
    assert res.method == "soft_q"
    assert res.meg == pytest.approx(0.0, abs=0.05)  # the uniform policy: MEG 0


@pytest.fixture(scope="module")
def lunar_run(tmp_path_factory):
    """A LunarLander PPO run folder written by ``python -m rl_zoo3.train`` (the Zoo's
    hyperparameters but for 2 environments of 128 steps: 256 steps in all)."""
    pytest.importorskip("rl_zoo3")
    from tests.zoo_train import train_zoo

    d = tmp_path_factory.mktemp("zoo")
    small = ("--hyperparams", "n_envs:2", "n_steps:128", "n_epochs:1")
    logs = train_zoo("ppo", f"LunarLander-{LL}", d, "-n", "256", "--num-threads", "1", *small)
    return logs / "ppo" / f"LunarLander-{LL}_1"


@pytest.mark.expensive  # about 25 s: rl_zoo3.train, then small soft Q-fits at H = 10
def test_the_cli_scores_a_zoo_lunarlander_run_with_the_soft_q_fits(lunar_run, tmp_path, capsys):
    import json

    from imitation_meg.cli import main

    out = tmp_path / "score.json"
    argv = ["score", "--policy", str(lunar_run), "--horizon", "10", "--json", str(out)]
    for item in ("n_models=2", "n_data_steps=600", "n_eval_episodes=20", "iterations=2"):
        argv += ["--approx-option", item]
    argv += ["--approx-option", "steps_per_iteration=200"]
    with warnings.catch_warnings():  # small models: they may say so
        warnings.simplefilter("ignore", ApproxMEGWarning)
        assert main(argv) == 0
    assert "interval" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["env"].startswith("LunarLander") and res["result"]["method"] == "soft_q"
    assert res["result"]["horizon"] == 10 and len(res["result"]["models"]) == 2
    assert 0.0 <= res["result"]["low"] <= res["meg"] <= res["result"]["high"]
    assert res["meg"] <= 10 * math.log(4) + 1e-9  # at most H log|A|


@pytest.mark.expensive  # about 10 s: rl_zoo3.train of 120 steps, then the refusal
def test_the_cli_refuses_a_zoo_bipedalwalker_run_in_one_line(tmp_path, capsys):
    pytest.importorskip("rl_zoo3")
    from imitation_meg.cli import main
    from tests.zoo_train import train_zoo

    params = ("--hyperparams", "learning_starts:100", "train_freq:1", "gradient_steps:1")
    logs = train_zoo(
        "sac", "BipedalWalker-v3", tmp_path, "-n", "120", "--num-threads", "1", *params
    )
    assert main(["score", "--policy", str(logs / "sac" / "BipedalWalker-v3_1")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("imitation-meg score: error: BipedalWalker-v3 acts in a Box of 4")
