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


# ------------------------------------------------------------- files that hold no rows
@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> pathlib.Path:
    """A real SB3 model's .zip (an untrained PPO: the file is what matters here)."""
    sb3 = pytest.importorskip("stable_baselines3")
    path = tmp_path_factory.mktemp("model") / "ppo.zip"
    sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, device="cpu").save(path)
    return path


def test_plot_refuses_a_saved_model_in_one_line(saved_model, tmp_path, capsys):
    from imitation_meg.cli import main

    assert main(["plot", str(saved_model), "--out", str(tmp_path / "meg.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{str(saved_model)!r} is a zip archive (a saved SB3 model?" in err
    assert "plot reads the CSV / JSON-lines rows written by `imitation-meg score" in err
    assert "codec" not in err
    assert not (tmp_path / "meg.png").exists()


def test_read_history_names_each_kind_of_file_it_cannot_read(tmp_path):
    import pickle

    from imitation_meg.plotting import read_history

    latin = tmp_path / "latin.csv"
    latin.write_bytes("timesteps,meg\n1,0.5\n2,caf\xe9\n".encode("latin-1"))
    pickled = tmp_path / "rows.jsonl"
    pickled.write_bytes(pickle.dumps([{"meg": 1.0}]))
    binary = tmp_path / "rows.bin"
    binary.write_bytes(b"timesteps\x00meg\x00")
    for path, message in (
        (latin, r"is not UTF-8 text \(byte b'\\xe9' at position 25\)"),
        (pickled, "is a Python pickle, not a table of rows"),
        (binary, "is a binary file, not a table of rows"),
    ):
        with pytest.raises(ValueError, match=message) as info:
            read_history(path)
        assert "plot reads the CSV / JSON-lines rows" in str(info.value)
    with pytest.raises(FileNotFoundError, match="no file at"):
        read_history(tmp_path / "missing.csv")


def test_read_history_reads_score_rows_and_callback_histories(tmp_path):
    from imitation_meg.plotting import read_history

    csv_file = tmp_path / "rows.csv"
    csv_file.write_text("timesteps,meg\n100,0.5\n200,0.75\n")
    jsonl = tmp_path / "history.jsonl"
    jsonl.write_text('{"timesteps": 100, "meg": 0.5}\n\n{"timesteps": 200, "meg": 0.75}\n')
    expected = [{"timesteps": 100, "meg": 0.5}, {"timesteps": 200, "meg": 0.75}]
    assert read_history(csv_file) == expected
    assert read_history(jsonl) == expected
