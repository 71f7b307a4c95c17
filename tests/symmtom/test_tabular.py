"""The tabular two-agent SymmToM agrees with the environment; MEG of the uniform policy is 0."""

from __future__ import annotations

import numpy as np
import pytest

from imitation_meg.symmtom import parallel_env
from imitation_meg.symmtom.tabular import build_tabular, uniform_policy


@pytest.fixture(scope="module")
def tab():
    return build_tabular("random")


def test_shapes_and_rows(tab):
    S = 16 * 15 * 8
    assert tab.states.shape == (S, 7) and tab.next_state.shape == (S, 10, 20)
    np.testing.assert_allclose(tab.prob.sum(-1), 1.0)
    assert tab.initial_state_dist.sum() == pytest.approx(1.0) and tab.horizon == 20


def test_matches_environment_step(tab, rng):
    env = parallel_env(n_agents=2, width=4, n_pieces=2)
    index = {tuple(s): i for i, s in enumerate(tab.states.tolist())}
    for s in rng.choice(len(tab.states), 40, replace=False):
        x0, y0, x1, y1, k0, k1, _ = tab.states[s]
        for a0 in rng.choice(10, 3, replace=False):
            a1 = int(rng.integers(10))
            env.reset(
                seed=int(rng.integers(1000)),
                options={
                    "positions": [(x0, y0), (x1, y1)],
                    "bases": tab.bases,
                    "first_hand": [[1, 0], [0, 1]],
                    "knowledge": [[1, k0], [k1, 1]],
                },
            )
            _, _rew, *_ = env.step({"agent_0": (a0 // 2, a0 % 2), "agent_1": (a1 // 2, a1 % 2)})
            ns = (
                *env.positions[0],
                *env.positions[1],
                int(env.knowledge[0, 1]),
                int(env.knowledge[1, 0]),
                int(env.last_logs["correct_base_use"][0]),
            )
            branch = tab.next_state[s, a0, 2 * a1 : 2 * a1 + 2][
                tab.prob[s, a0, 2 * a1 : 2 * a1 + 2] > 0
            ]
            assert index[tuple(int(v) for v in ns)] in branch.tolist()


def test_recharge_reward_in_table(tab):
    # agent 0 complete on its base (0, 0), agent 1 far away: staying gives c (n - 1) = 2
    s = {tuple(v): i for i, v in enumerate(tab.states.tolist())}[(0, 0, 3, 2, 1, 0, 0)]
    assert tab.reward[s, 0] == pytest.approx(2.0)  # (move none, say piece 0), nobody in range


def test_uniform_policy_has_zero_meg(tab):
    im = pytest.importorskip("imitation_meg")
    res = im.meg(uniform_policy(tab.states), tab.to_mdp())
    assert res.meg == pytest.approx(0.0, abs=1e-8)


@pytest.mark.expensive
def test_meg_experiment_fast(tmp_path):
    import pathlib

    from imitation_meg.runners import load_driver
    from imitation_meg.runners.config import load_config, load_yaml

    root = pathlib.Path(__file__).resolve().parents[2]
    module = load_driver("symmtom_meg", root / "experiments")
    cfg = load_config(
        {**load_yaml(root / "configs/symmtom_meg_fast.yaml"), "results_dir": str(tmp_path)},
        module.Config,
    )
    out = module.main(cfg)
    assert out["rows"][0]["meg_reward"] == pytest.approx(0.0, abs=1e-8)
