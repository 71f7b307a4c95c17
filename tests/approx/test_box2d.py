"""gymnasium's Box2D tasks: no state copy, so no simulator; the soft Q-fits score what they can
integrate (Discrete actions, boxes of at most 3 dimensions) and the rest is refused in one line.
"""

from __future__ import annotations

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
