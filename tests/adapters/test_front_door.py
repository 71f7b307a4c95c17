"""One front door for policies: :func:`imitation_meg.adapters.resolve_policy`.

The tabular table, the estimators beyond tabular and the continuous-action reader all read
sources through it, and SB3 policies through one reader (``SB3ActionProbs``): an algorithm the
table accepts is accepted beyond tabular too, with the same probabilities.
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import torch as th

import imitation_meg as im
from imitation_meg.adapters import ResolvedPolicy, policy_table, resolve_policy
from imitation_meg.adapters.sb3 import state_observations
from imitation_meg.approx import as_policy_fn

from .conftest import CLIFF

PACKAGE = pathlib.Path(im.__file__).parent


@pytest.mark.parametrize(
    ("fixture", "epsilon"),
    [("ppo_cliff", None), ("dqn_cliff", 0.2), ("qrdqn_cliff", 0.1), ("ars_cliff", None)],
)
def test_observation_reader_equals_the_table_state_by_state(fixture, epsilon, request):
    """as_policy_fn (beyond tabular) and policy_table (tabular) give the same rows."""
    model = request.getfixturevalue(fixture)
    mdp = im.TabularMDP.from_env(CLIFF)
    table = policy_table(model, mdp, epsilon=epsilon)
    reader = as_policy_fn(model, n_actions=mdp.n_actions, epsilon=epsilon)
    obs = state_observations(mdp, model.observation_space)
    np.testing.assert_allclose(reader.probs(obs), table.numpy(), rtol=0, atol=1e-12)


def test_saved_model_resolves_to_its_policy_and_file(ppo_cliff, tmp_path):
    path = tmp_path / "ppo.zip"
    ppo_cliff.save(path)
    resolved = resolve_policy(path)
    assert isinstance(resolved, ResolvedPolicy)
    assert resolved.model_path == path and resolved.algo == "PPO"
    assert resolved.vec_normalize is None and resolved.mdp_or_env is None
    mdp = im.TabularMDP.from_env(CLIFF)
    # The file and the live model give one table, whichever path reads them.
    th.testing.assert_close(policy_table(path, mdp), policy_table(ppo_cliff, mdp))
    live = as_policy_fn(ppo_cliff, n_actions=4)
    saved = as_policy_fn(str(path), n_actions=4)
    obs = state_observations(mdp, ppo_cliff.observation_space)
    np.testing.assert_allclose(saved.probs(obs), live.probs(obs), rtol=0, atol=1e-12)


def test_live_model_refuses_file_options(ppo_cliff):
    with pytest.raises(ValueError, match=r"algo= only applies to a \.zip path"):
        resolve_policy(ppo_cliff, algo="ppo")
    with pytest.raises(ValueError, match="vec_normalize='auto'"):
        as_policy_fn(ppo_cliff, n_actions=4, vec_normalize="auto")


def test_table_needs_an_environment_for_a_file(ppo_cliff, tmp_path):
    path = tmp_path / "ppo.zip"
    ppo_cliff.save(path)
    with pytest.raises(ValueError, match="needs the environment"):
        policy_table(path)


def _calls(name: str) -> set[str]:
    """Modules of the package whose code calls ``name(...)``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
                if called == name:
                    found.add(path.relative_to(PACKAGE).as_posix())
    return found


def test_one_front_door_loads_every_saved_policy():
    """Saved models are loaded in one place; every scoring path resolves through it."""
    assert _calls("load_model") == {"adapters/dispatch.py"}
    assert {
        "adapters/dispatch.py",
        "approx/policy.py",
        "continuous/densities.py",
        "scoring.py",
    } <= _calls("resolve_policy")
    assert _calls("SB3ActionProbs") == {"adapters/sb3.py", "approx/policy.py"}
