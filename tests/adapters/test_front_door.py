"""One front door for policies: :func:`imitation_meg.adapters.resolve_policy`.

The tabular table, the estimators beyond tabular and the continuous-action reader all read
sources through it, and SB3 policies through one reader (``SB3ActionProbs``): an algorithm the
table accepts is accepted beyond tabular too, with the same probabilities.
"""

from __future__ import annotations

import ast
import math
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


# ------------------------------------------------------------------- what the door refuses
def _clear(e: BaseException) -> None:
    """A message the package raised itself (its innermost frame lies in imitation_meg)."""
    import traceback

    innermost = traceback.extract_tb(e.__traceback__)[-1].filename
    assert innermost.startswith(str(PACKAGE)), innermost


class _Untrained:
    """An object that is no policy of any kind."""


@pytest.mark.parametrize(
    ("source", "named"),
    [
        (None, "None"),
        (42, "int 42"),
        (3.5, "float 3.5"),
        (True, "bool True"),
        (b"ppo.zip", "bytes b'ppo.zip'.*decode it"),
        (bytearray(b"ppo.zip"), "bytes b'ppo.zip'"),
        ([[0.5, 0.5]], r"a list \(1 items.*np\.asarray"),
        ({"D": 1}, "dict"),
        (_Untrained(), "_Untrained"),
        (im.envs.cliff_world(width=3, height=2, horizon=2), "TabularMDP .*the policy comes first"),
    ],
)
def test_the_front_door_refuses_what_is_no_policy_naming_it(source, named):
    for call in (
        lambda: resolve_policy(source),
        lambda: policy_table(source, im.envs.cliff_world(width=3, height=2, horizon=2)),
        lambda: as_policy_fn(source, n_actions=4),
    ):
        with pytest.raises(TypeError, match=f"cannot read a policy from {named}") as info:
            call()
        assert "pass an SB3 / sb3-contrib model or policy" in str(info.value)
        _clear(info.value)


def test_the_front_door_refuses_an_algorithm_class():
    import stable_baselines3 as sb3

    with pytest.raises(TypeError, match=r"the class PPO itself.*trained instance"):
        resolve_policy(sb3.PPO)


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.full((4, 2), np.nan), r"\(4, 2\) has 8 NaN or infinite entries"),
        (th.tensor([[0.5, math.inf]]), r"\(1, 2\) has 1 NaN or infinite entries.*\(0, 1\): inf"),
        (np.full((2, 3, 4), -0.25), r"negative entries \(the first at \(0, 0, 0\): -0\.25\)"),
        (np.full(4, 0.25), r"shape \(4,\); an array policy is \(S, A\)"),
        (np.zeros((0, 4)), r"shape \(0, 4\)"),
        (np.full((1, 1, 2, 2), 0.5), r"shape \(1, 1, 2, 2\)"),
    ],
)
def test_the_front_door_refuses_arrays_that_hold_no_probabilities(array, message):
    with pytest.raises(ValueError, match=message) as info:
        resolve_policy(array)
    _clear(info.value)


@pytest.mark.parametrize("name", ["", "   "])
def test_the_front_door_refuses_an_empty_name(name):
    with pytest.raises(ValueError, match="empty name"):
        resolve_policy(name)


def test_the_front_door_still_reads_every_kind_it_accepts(ppo_cliff):
    mdp = im.envs.cliff_world(width=3, height=2, horizon=2)
    table = np.full((mdp.n_states, 4), 0.25)
    for source in (table, th.as_tensor(table), np.full((2, mdp.n_states, 4), 0.25)):
        assert resolve_policy(source).policy is source
    assert resolve_policy(ppo_cliff.policy).policy is ppo_cliff.policy
    assert resolve_policy(ppo_cliff).algo == "PPO"
    th.testing.assert_close(
        policy_table(lambda obs: np.full((len(obs), 4), 0.25), mdp).sum(),
        th.tensor(6.0, dtype=th.float64),
    )


# ----------------------------------------------------------------- damaged model files
def _end_records(data: bytes) -> list[int]:
    at, found = data.find(b"PK\x05\x06"), []
    while at >= 0:
        found.append(at)
        at = data.find(b"PK\x05\x06", at + 1)
    return found


@pytest.fixture(scope="module")
def saved_ppo(ppo_cliff, tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("saved") / "ppo.zip"
    ppo_cliff.save(path)
    return path


def test_a_truncated_zip_is_named_truncated_wherever_it_is_cut(saved_ppo, tmp_path):
    """SB3 stores its torch archives uncompressed: a copy cut just after one of them ends in
    that archive's end record, which zipfile takes for the file's own ("holds no SB3 model")."""
    data = saved_ppo.read_bytes()
    inner = _end_records(data)[:-1]
    assert inner, "the saved model holds no inner archive to cut after"
    cuts = [len(data) // 2, inner[0] + 22, inner[-1] + 30, len(data) - 1]
    for cut in cuts:
        path = tmp_path / f"ppo_{cut}.zip"
        path.write_bytes(data[:cut])
        for call in (resolve_policy, lambda p: policy_table(p, CLIFF)):
            with pytest.raises(ValueError, match="is a truncated zip archive") as info:
                call(path)
            assert repr(str(path)) in str(info.value) and f"({cut} bytes)" in str(info.value)
            assert "holds no SB3 model" not in str(info.value)


def test_empty_damaged_and_foreign_files_are_named(saved_ppo, tmp_path):
    data = saved_ppo.read_bytes()
    empty = tmp_path / "empty.zip"
    empty.write_bytes(b"")
    text = tmp_path / "notes.zip"
    text.write_text("not a model\n")
    # the 'data' entry (the first member) overwritten: its checksum fails
    bad_data = tmp_path / "bad_data.zip"
    bad_data.write_bytes(data[:200] + bytes(40) + data[240:])
    # the policy's weights (an inner archive) overwritten: SB3 cannot load them
    start = data.find(b"policy.pth")
    bad_weights = tmp_path / "bad_weights.zip"
    bad_weights.write_bytes(data[: start + 400] + bytes(64) + data[start + 464 :])
    for path, message in (
        (empty, r"is empty \(0 bytes\)"),
        (text, r"is not a zip file \(it starts with b'not '\)"),
        (bad_data, r"is a damaged zip archive \(BadZipFile"),
        (bad_weights, r"could not load .* as PPO .*may be damaged"),
    ):
        with pytest.raises(ValueError, match=message) as info:
            resolve_policy(path)
        assert str(path) in str(info.value)
        _clear(info.value)


def test_the_command_line_names_a_truncated_model_in_one_line(saved_ppo, tmp_path, capsys):
    from imitation_meg.cli import main

    path = tmp_path / "half.zip"
    path.write_bytes(saved_ppo.read_bytes()[: saved_ppo.stat().st_size // 2])
    assert main(["score", "--env", CLIFF, "--policy", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "is a truncated zip archive" in err and str(path) in err
