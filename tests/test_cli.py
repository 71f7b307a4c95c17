"""The imitation-meg command line."""

from __future__ import annotations

import re

from imitation_meg.cli import format_table, main


def test_demo_prints_the_table(capsys):
    assert main(["demo", "--no-ppo", "--horizon", "30"]) == 0
    out = capsys.readouterr().out
    for name in ("uniform", "epsilon-greedy 0.1", "epsilon-greedy 0.5", "optimal"):
        assert name in out
    rows = {}
    for line in out.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 7 and cells[1][0].isdigit():
            rows[cells[0]] = float(cells[1])
    assert rows["uniform"] == 0.0
    assert rows["optimal"] > rows["epsilon-greedy 0.1"] > rows["epsilon-greedy 0.5"] > 0


def test_format_table_aligns_and_formats():
    text = format_table([{"a": 1.0, "b": float("inf")}, {"a": 22.5, "b": "x"}])
    lines = text.splitlines()
    assert lines[0].split() == ["a", "b"]
    assert "+inf" in lines[2] and "22.5000" in lines[3]
    assert len({len(line) for line in lines}) == 1
