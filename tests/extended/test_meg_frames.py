"""The tabular frames of TemptingButton and CryingBaby."""

from __future__ import annotations

import numpy as np
import pytest

from imitation_meg.extended.meg_frames import (
    crying_baby_frame,
    crying_baby_policy,
    crying_baby_state,
    q_policy,
    tempting_button_frame,
)


def test_tempting_button_frame():
    f = tempting_button_frame(5, sim_pushes=True)
    np.testing.assert_allclose(f.transition.sum(-1), 1.0)
    np.testing.assert_array_equal(f.utility, [[1, -1], [-1, -1]])
    frame = tempting_button_frame(5, sim_pushes=False)
    np.testing.assert_array_equal(frame.utility, [[1, -1], [1, 1]])
    with pytest.raises(ValueError, match="horizon"):
        tempting_button_frame(0, sim_pushes=True)


def test_crying_baby_frame_dynamics_and_targets():
    f = crying_baby_frame(3)
    assert f.transition.shape == (20, 2, 20)
    np.testing.assert_allclose(f.transition.sum(-1), 1.0)
    s = crying_baby_state(9, 1)
    assert f.transition[s, 0, crying_baby_state(9, 0)] == 1.0  # fed at 9: stays 9, baby laughs
    assert f.transition[crying_baby_state(0, 0), 1, crying_baby_state(0, 1)] == 1.0
    assert f.initial_state_dist[crying_baby_state(5, 0)] == 1.0
    assert f.targets["baby_laughs"].tolist() == [1, 0] * 10
    assert f.targets["nutrition_in_2_8"].tolist() == [0] * 6 + [1] * 10 + [0] * 4
    with pytest.raises(ValueError, match="laugh_prob"):
        crying_baby_frame(3, laugh_prob=(1.5, 0.0))
    with pytest.raises(ValueError, match="10 feeding"):
        crying_baby_policy([0.5] * 9)


def test_q_policy():
    pi = q_policy({0: np.array([1.0, 0.0]), 1: np.array([0.0, 0.0])}, 2, 2, 0.1)
    np.testing.assert_allclose(pi, [[0.95, 0.05], [0.5, 0.5]])
