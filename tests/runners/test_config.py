"""Typed configs and result writers."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from imitation_meg.results import write_csv, write_json
from imitation_meg.runners import apply_overrides, load_driver, run_config
from imitation_meg.runners.config import check_values, follow_results_dir, load_config, load_yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Inner:
    a: int
    b: float = 1.0


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    values: tuple[float, ...] = ()
    inner: Inner | None = None
    flag: bool = False


def test_load_config_builds_nested_frozen_dataclasses():
    cfg = load_config(
        {"experiment": "x", "name": "n", "values": [1, 2.5], "inner": {"a": 3}}, Outer
    )
    assert cfg == Outer(name="n", values=(1.0, 2.5), inner=Inner(a=3, b=1.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "m"  # type: ignore[misc]


@pytest.mark.parametrize(
    "data, exc, match",
    [
        ({"name": "n", "typo": 1}, ValueError, r"unknown keys \['typo'\]"),
        ({}, ValueError, r"missing required keys \['name'\]"),
        ({"name": 3}, TypeError, "expected a string"),
        ({"name": "n", "values": "abc"}, TypeError, "expected a list"),
        ({"name": "n", "flag": "yes"}, TypeError, "true or false"),
        ({"name": "n", "inner": {"a": 1.5}}, TypeError, "matches none"),
    ],
)
def test_load_config_rejects_bad_values(data, exc, match):
    with pytest.raises(exc, match=match):
        load_config(data, Outer)


def test_run_config_errors(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\n")
    with pytest.raises(ValueError, match="'experiment"):
        run_config(p)
    p.write_text("experiment: nothing_here\n")
    with pytest.raises(ValueError, match="has no driver"):
        run_config(p)
    with pytest.raises(ValueError, match="does not exist"):
        run_config(tmp_path / "missing.yaml")


def test_writers_handle_infinities(tmp_path):
    path = write_json(
        tmp_path / "r.json", {"a": float("inf"), "b": [float("nan")], "c": Inner(a=1)}
    )
    assert json.loads(path.read_text()) == {"a": "inf", "b": [None], "c": {"a": 1, "b": 1.0}}
    csv = write_csv(tmp_path / "r.csv", [{"x": 1, "y": 2.0}, {"x": 3, "z": "q"}])
    assert csv.read_text().splitlines() == ["x,y,z", "1,2.0,", "3,,q"]


@dataclasses.dataclass(frozen=True)
class Fixed:
    shape: tuple[int, int, str]


def test_fixed_length_tuples():
    assert load_config({"shape": [3, 4, "x"]}, Fixed).shape == (3, 4, "x")
    with pytest.raises(ValueError, match="expected 3 entries"):
        load_config({"shape": [3, 4]}, Fixed)
    with pytest.raises(TypeError, match="expected an integer"):
        load_config({"shape": ["a", 4, "x"]}, Fixed)


@dataclasses.dataclass(frozen=True)
class Checked:
    horizon: int = 10
    epsilons: tuple[float, ...] = (0.1,)
    steps: int | None = None
    mode: str = "a"

    def __post_init__(self) -> None:
        check_values(
            self,
            positive=("horizon", "steps"),
            probabilities=("epsilons",),
            choices={"mode": ("a", "b")},
        )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"horizon": 0}, r"c\.yaml: horizon = 0 must be > 0; fix it .* --set horizon=\.\.\."),
        ({"epsilons": [0.5, -0.1]}, r"epsilons\[1\] = -0\.1 must lie in \[0, 1\]"),
        ({"epsilons": [float("nan")]}, r"epsilons\[0\] = nan must lie in \[0, 1\]"),
        ({"steps": -3}, r"steps = -3 must be > 0"),
        ({"mode": "c"}, r"mode = 'c' is not one of \['a', 'b'\]"),
    ],
)
def test_check_values_refuses_bad_values_when_the_config_loads(data, match):
    with pytest.raises(ValueError, match=match):
        load_config(data, Checked, where="c.yaml")


def test_check_values_accepts_good_values_and_skips_none():
    cfg = load_config({"horizon": 3, "epsilons": [0.0, 1.0], "steps": None}, Checked)
    assert cfg == Checked(horizon=3, epsilons=(0.0, 1.0), steps=None)


@dataclasses.dataclass(frozen=True)
class Study:
    results_dir: str = "results/study"
    checkpoint_dir: str | None = None

    def __post_init__(self) -> None:
        follow_results_dir(self, checkpoint_dir="ck")


def test_a_folder_left_at_none_follows_the_results_folder():
    assert Study().checkpoint_dir == "results/study/ck"
    assert load_config({"results_dir": "/tmp/x/"}, Study).checkpoint_dir == "/tmp/x/ck"
    given = load_config({"results_dir": "/tmp/x", "checkpoint_dir": "/tmp/mine"}, Study)
    assert given.checkpoint_dir == "/tmp/mine"
    with pytest.raises(ValueError, match="has no field 'agent_dir'"):
        follow_results_dir(Study(), agent_dir="agents")


def _with_checkpoints() -> list[tuple[str, str]]:
    """Every config whose driver writes checkpoints, with the driver's name."""
    out = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        name = load_yaml(path)["experiment"]
        driver = ROOT / "experiments" / f"{name}.py"
        if driver.is_file() and "checkpoint_dir" in driver.read_text():
            out.append((path.name, name))
    return out


@pytest.mark.parametrize("config, driver", _with_checkpoints())
def test_every_checkpoint_folder_follows_the_results_folder(config, driver, tmp_path):
    """``--set results_dir=X`` moves the checkpoints to a folder inside X, so two runs into
    different results folders never write into one checkpoint folder; an explicit
    ``checkpoint_dir`` stays where it is put."""
    module = load_driver(driver, ROOT / "experiments")
    data = {k: v for k, v in load_yaml(ROOT / "configs" / config).items() if k != "experiment"}
    assert "checkpoint_dir" not in data  # a checkpoint folder in the YAML would not follow

    def cfg(*overrides: str):
        return load_config(apply_overrides(data, overrides), module.Config)

    default = cfg()
    assert pathlib.Path(default.checkpoint_dir).parent == pathlib.Path(default.results_dir)
    a, b = (cfg(f"results_dir={tmp_path / run}") for run in ("a", "b"))
    assert pathlib.Path(a.checkpoint_dir).parent == tmp_path / "a"
    assert pathlib.Path(b.checkpoint_dir).parent == tmp_path / "b"
    mine = cfg(f"results_dir={tmp_path / 'a'}", f"checkpoint_dir={tmp_path / 'mine'}")
    assert mine.checkpoint_dir == str(tmp_path / "mine")


def test_default_checkpoint_folders_keep_their_unit_keys():
    """A default config resolves to the folder its YAML used to name, so the unit keys of the
    studies whose fingerprint holds it (approx / continuous training) stay the same."""
    for name in ("approx_training", "continuous_training", "sb3_training"):
        module = load_driver(name, ROOT / "experiments")
        assert module.Config().checkpoint_dir == f"results/{name}/checkpoints"
    gm = load_driver("goal_misgeneralization", ROOT / "experiments")
    assert gm.Config().checkpoint_dir == "results/goal_misgeneralization/agents"
