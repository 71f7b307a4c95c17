"""docs/sb3.md: its training examples run on the installed lane and train; it quotes no suite
counts of its own (they are kept in one place, the README)."""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

SB3_PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "sb3.md"
TEXT = SB3_PAGE.read_text()
CALLBACK_SECTION = TEXT.split("## Watching goal-directedness while an agent learns")[1].split(
    "\n## "
)[0]
BLOCKS = re.findall(r"```python\n(.*?)```", CALLBACK_SECTION, re.DOTALL)
CLIFF = "seals/CliffWorld7x4-v0"


def test_the_callback_examples_run_on_this_lane_with_fewer_steps(tmp_path, monkeypatch):
    """The two blocks as written, run in order with their step counts cut (50 000 -> 512,
    20 000 -> 1 200): the logger's outputs exist on both lanes (no TensorBoard on the current
    one), and the DQN learns within its run."""
    pytest.importorskip("stable_baselines3")
    assert len(BLOCKS) == 2 and "learning_starts=1_000" in BLOCKS[1]
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "__sb3_page__"}
    code = "\n".join(BLOCKS).replace("50_000", "512").replace("20_000", "1_200")
    exec(compile(code, str(SB3_PAGE), "exec"), scope)
    dqn = scope["dqn"]
    assert dqn.num_timesteps == 1_200 and dqn._n_updates > 0  # gradient steps were taken
    assert (tmp_path / "runs" / "ppo" / "progress.csv").is_file()


def test_the_page_states_the_lane_defaults_of_dqn():
    import stable_baselines3 as sb3

    default = inspect.signature(sb3.DQN.__init__).parameters["learning_starts"].default
    if sb3.__version__.startswith("2.2."):
        assert default == 50_000 and "defaults to `learning_starts=50_000`" in TEXT
    else:
        assert default == 100 and "(SB3 2.9: 100)" in TEXT


def test_the_page_quotes_no_suite_counts():
    """It used to say 455 / 431 tests while the README said 790 / 763."""
    assert not re.search(r"\d+ passed", TEXT)
    assert "README's development section" in TEXT
