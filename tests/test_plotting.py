"""Figures: the legend names of :func:`imitation_meg.plotting.history_labels`."""

from __future__ import annotations

import pathlib

import pytest

from imitation_meg.plotting import history_labels


@pytest.mark.parametrize(
    ("paths", "expected"),
    [
        (["ppo.csv", "dqn.jsonl"], ["ppo", "dqn"]),
        (["runs/ppo/meg.jsonl", "runs/dqn/meg.jsonl"], ["ppo/meg", "dqn/meg"]),
        # only the clashing names grow; the others keep their stem
        (["runs/ppo/meg.jsonl", "runs/dqn/meg.jsonl", "a2c.csv"], ["ppo/meg", "dqn/meg", "a2c"]),
        # a common parent is not enough: the first folder that differs is named
        (["a/x/meg.csv", "b/x/meg.csv"], ["a/x/meg", "b/x/meg"]),
        # the same stem in one folder: the suffix tells them apart
        (["out/meg.csv", "out/meg.jsonl"], ["meg.csv", "meg.jsonl"]),
        # the same file twice: numbered repeats
        (["meg.csv", "meg.csv"], ["meg", "meg (2)"]),
    ],
)
def test_history_labels_name_the_run(paths, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    labels = history_labels(paths)
    assert labels == expected
    assert len(set(labels)) == len(labels)


def test_history_labels_of_absolute_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    here = pathlib.Path("meg.jsonl")
    there = tmp_path / "runs" / "ppo" / "meg.jsonl"
    assert history_labels([here, there]) == [f"{tmp_path.name}/meg", "ppo/meg"]


def test_history_labels_stay_distinct_when_folders_and_suffixes_cross(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = ["x/a/meg.csv", "x/a/meg.jsonl", "y/a/meg.jsonl", "y/a/meg.csv"]
    labels = history_labels(paths)
    assert len(set(labels)) == 4
    assert all(lab.endswith(("meg.csv", "meg.jsonl")) for lab in labels)


def test_history_of_continuous_records_divides_by_the_certificate(tmp_path, monkeypatch):
    """``normalized`` is MEG over H log|A| on discrete records and over the certificate on
    continuous ones (whose ``upper_bound`` is empty): the legend says which."""
    from imitation_meg import plotting

    legends = []

    def keep(fig, path):
        legends.append([t.get_text() for t in fig.axes[0].get_legend().get_texts()])
        return path

    monkeypatch.setattr(plotting, "save_figure", keep)
    box = [
        {"timesteps": 10, "meg": 1.0, "normalized": 0.5, "certificate": 2.0, "upper_bound": None}
    ]
    grid = [{"timesteps": 10, "meg": 1.0, "normalized": 0.1, "upper_bound": 10.0}]
    for rows in (box, grid):
        plotting.plot_meg_history(tmp_path / "h.png", {"run": rows}, metrics=["normalized"])
    assert legends == [["MEG / certificate"], ["MEG / (H log|A|)"]]
