"""SB3 PPO agents trained on MiniGrid images (CNN) and flat observations (MLP), scored exactly."""

from __future__ import annotations

import json
import pathlib
import warnings

import numpy as np
import pytest
import torch as th

pytest.importorskip("minigrid")
pytest.importorskip("stable_baselines3")

import gymnasium as gym

import imitation_meg as im
from imitation_meg.adapters import policy_table
from imitation_meg.adapters.observations import ObservationAliasingWarning
from imitation_meg.cli import main
from imitation_meg.envs.minigrid import minigrid_mdp, minigrid_target, wrap_observation
from imitation_meg.training import make_minigrid_ppo

ENV = "MiniGrid-DoorKey-5x5-v0"
SEED = 3
# observation stack -> policy
KINDS = {"image": "cnn", "flat": "mlp"}


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """One tiny PPO per observation stack (1024 steps), saved as a zip."""
    from stable_baselines3.common.env_util import make_vec_env

    out = tmp_path_factory.mktemp("minigrid_agents")
    paths = {}
    for observation, policy in KINDS.items():
        venv = make_vec_env(
            lambda observation=observation: wrap_observation(gym.make(ENV), observation),
            n_envs=2,
            seed=0,
        )
        model = make_minigrid_ppo(venv, 0, policy=policy, n_steps=256)
        model.learn(1024)
        paths[observation] = out / f"ppo_{observation}.zip"
        model.save(paths[observation])
    return paths


def _table(path: pathlib.Path, mdp: im.TabularMDP) -> th.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObservationAliasingWarning)
        return policy_table(str(path), mdp)


@pytest.mark.parametrize("observation", list(KINDS))
def test_policy_table_is_what_the_agent_does_in_the_real_env(
    agents: dict[str, pathlib.Path], observation: str
) -> None:
    """Replaying the MDP's shortest paths in the real wrapped environment and asking the agent
    for its action distribution there gives the table's rows."""
    import stable_baselines3 as sb3

    mdp = minigrid_mdp(ENV, seed=SEED, observation=observation)
    pi = _table(agents[observation], mdp)
    model = sb3.PPO.load(agents[observation], device="cpu")
    meta = mdp.metadata
    rng = np.random.default_rng(0)
    for s in rng.choice(mdp.n_states, size=12, replace=False):
        path = []
        t = int(s)
        while meta["parent"][t] >= 0:
            path.append(int(meta["parent_action"][t]))
            t = int(meta["parent"][t])
        env = wrap_observation(gym.make(ENV), observation)
        obs, _ = env.reset(seed=SEED)
        for a in reversed(path):
            obs, *_ = env.step(a)
        obs_t, _ = model.policy.obs_to_tensor(obs)
        with th.no_grad():
            probs = model.policy.get_distribution(obs_t).distribution.probs[0].double()
        th.testing.assert_close(pi[s], probs, rtol=1e-5, atol=1e-6)
    res = im.meg(pi, mdp)
    assert 0.0 <= res.meg <= res.upper_bound and res.converged


def test_cli_scores_a_saved_minigrid_agent(
    agents: dict[str, pathlib.Path], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "score.json"
    argv = ["score", "--env", ENV, "--seed", str(SEED), "--policy", str(agents["image"])]
    with warnings.catch_warnings():  # the egocentric view aliases states (printed in one line)
        warnings.simplefilter("ignore", ObservationAliasingWarning)
        assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{ENV}(seed={SEED})" in printed
    payload = json.loads(out.read_text())
    mdp = minigrid_mdp(ENV, seed=SEED, observation="image")
    expected = im.meg(_table(agents["image"], mdp), mdp).meg
    assert payload["meg"] == pytest.approx(expected, rel=1e-9)
    assert payload["mdp"]["n_states"] == mdp.n_states
    # --target reads the agent's cell of MiniGrid states (not CliffWorld's row-major index).
    tgt = tmp_path / "target.json"
    argv = ["score", "--env", "MiniGrid-Empty-5x5-v0", "--policy", "optimal", "--horizon", "10"]
    assert main([*argv, "--mode", "target", "--target", "cell", "--json", str(tgt)]) == 0
    empty = minigrid_mdp("MiniGrid-Empty-5x5-v0", horizon=10)
    want = im.meg_target(im.policies.optimal(empty), empty, minigrid_target(empty, "cell")).meg
    assert json.loads(tgt.read_text())["meg"] == pytest.approx(want, rel=1e-9)
    # A layout past the limit is refused in one line (exit 2), not scored approximately.
    assert main(["score", "--env", "MiniGrid-Dynamic-Obstacles-5x5-v0", "--policy", "uniform"]) == 2
    assert "moves its obstacles at random" in capsys.readouterr().err


def test_cli_intervene_matches_python(
    agents: dict[str, pathlib.Path], tmp_path: pathlib.Path, capsys: pytest.CaptureFixture
) -> None:
    from imitation_meg.envs.minigrid import agent_cells
    from imitation_meg.interventions import meg_interventional

    out = tmp_path / "do.json"
    envs = [f"{ENV}:{SEED}", f"{ENV}:{SEED + 1}"]
    argv = ["intervene", "--env", *envs, "--policy", str(agents["flat"]), "--mode", "target"]
    argv += ["--horizon", "8"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObservationAliasingWarning)
        assert main([*argv, "--json", str(out)]) == 0
    assert "Interventional MEG" in capsys.readouterr().out
    saved = json.loads(out.read_text())["result"]
    mdps = [minigrid_mdp(ENV, seed=s, horizon=8, observation="flat") for s in (SEED, SEED + 1)]
    tables = [_table(agents["flat"], m) for m in mdps]
    res = meg_interventional(tables, mdps, target=[agent_cells(m) for m in mdps])
    assert saved["meg"] == pytest.approx(res.meg, rel=1e-8)
    assert saved["shares"] == pytest.approx(list(res.shares), rel=1e-6, abs=1e-9)
    assert main(["intervene", "--env", f"{ENV}:x", "--policy", "uniform"]) == 2
