"""Figures for MEG studies (matplotlib, imported lazily; files are written with the Agg backend).

- :func:`plot_meg_series`: MEG against a swept parameter (epsilon, training steps, ...), with
  error bars and the paper's numbers as hollow markers.
- :func:`plot_meg_bars`: grouped bars per setting (goal-region sizes), paper values as markers.
- :func:`plot_grid_values`: a per-state quantity (an occupancy measure) drawn on a grid.
- :func:`plot_meg_checkpoints`: MEG with its interval and the mean return at a training run's
  checkpoints, a column per environment.
- :func:`plot_meg_history`: MEG against training steps from ``imitation-meg score`` rows or a
  :class:`~imitation_meg.callbacks.MEGCallback` history.
- :func:`history_labels`: legend names for history files, telling apart files of the same name.
- :func:`read_history`: the rows of one such file, refusing a file of another kind (a saved
  model, an image) by name.
"""

from __future__ import annotations

import itertools
import pathlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "history_labels",
    "plot_grid_values",
    "plot_meg_bars",
    "plot_meg_checkpoints",
    "plot_meg_history",
    "plot_meg_series",
    "pyplot",
    "read_history",
    "save_figure",
]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the Agg backend selected (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | pathlib.Path, *, dpi: int = 120) -> pathlib.Path:
    """Lay out, save as PNG (creating folders) and close ``fig``; returns the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def plot_meg_series(
    path: str | pathlib.Path,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    errors: Mapping[str, Sequence[float]] | None = None,
    reference: Mapping[str, Sequence[float]] | None = None,
    xlabel: str = "epsilon",
    ylabel: str = "MEG (nats)",
    title: str = "",
    log_y: bool = False,
) -> pathlib.Path:
    """Line plot of MEG series against ``x``; returns the PNG path.

    Args:
        path: output PNG.
        x: ``(N,)`` abscissae.
        series: name -> ``(N,)`` values (our results).
        errors: name -> ``(N,)`` half-widths of error bars (e.g. 2 sigma over seeds).
        reference: name -> ``(N,)`` published values, drawn as hollow markers.
        xlabel, ylabel, title: labels.
        log_y: symmetric-log y axis (useful when values span decades).
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for i, (name, ys) in enumerate(series.items()):
        c = _COLORS[i % len(_COLORS)]
        err = None if errors is None else errors.get(name)
        ax.errorbar(x, ys, yerr=err, marker="o", ms=4, color=c, label=name, capsize=3)
    for i, (name, ys) in enumerate((reference or {}).items()):
        c = _COLORS[i % len(_COLORS)]
        ax.plot(x, ys, linestyle="none", marker="s", mfc="none", ms=7, color=c, label=name)
    if log_y:
        ax.set_yscale("symlog", linthresh=0.1)
    return _labelled(fig, ax, path, xlabel, ylabel, title)


def _labelled(
    fig: Any, ax: Any, path: str | pathlib.Path, xlabel: str, ylabel: str, title: str
) -> pathlib.Path:
    """Label the axes (and the title, when given), draw the grid and the legend, save."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_meg_bars(
    path: str | pathlib.Path,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    ylabel: str = "MEG (nats)",
    title: str = "",
    errors: Mapping[str, Sequence[float]] | None = None,
    reference: Mapping[str, Sequence[float]] | None = None,
) -> pathlib.Path:
    """Grouped bar chart, one group per label; paper values as hollow markers on the bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    n = len(series)
    width = 0.8 / max(n, 1)
    pos = np.arange(len(labels))
    for i, (name, ys) in enumerate(series.items()):
        err = None if errors is None else errors.get(name)
        ax.bar(
            pos + (i - (n - 1) / 2) * width,
            ys,
            width,
            yerr=err,
            capsize=3,
            color=_COLORS[i % len(_COLORS)],
            alpha=0.85,
            label=name,
        )
    for i, (name, ys) in enumerate((reference or {}).items()):
        ax.plot(
            pos + (i - (n - 1) / 2) * width,
            ys,
            linestyle="none",
            marker="D",
            mfc="white",
            mec="black",
            ms=6,
            label=name,
        )
    ax.set_xticks(pos, labels)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_meg_checkpoints(
    path: str | pathlib.Path,
    rows: Sequence[Mapping[str, Any]],
    study: Any,
    *,
    colors: Mapping[str, str],
    ylabel: str,
    panel_width: float = 4.5,
    title: Callable[[str, list[Mapping[str, Any]]], str] | None = None,
    decorate: Callable[[Any, list[Mapping[str, Any]], str | None], None] | None = None,
) -> pathlib.Path:
    """MEG with its interval (top) and the mean return (bottom) against training steps, one
    column per environment and one line per (algorithm, seed); returns the PNG path.

    Args:
        path: output PNG.
        rows: one per checkpoint, with ``env``, ``algo``, ``seed``, ``steps``, ``meg``, ``low``,
            ``high`` and ``mean_return``.
        study: a config whose ``envs``, ``algos`` and ``seeds`` say what to draw, in order.
        colors: algorithm -> colour.
        ylabel: the MEG panels' label.
        panel_width: inches per column.
        title: ``(env, its last rows) -> title``; decorate: ``(axes, a run's rows, colour)``
            draws more on a run's MEG panel.
    """
    envs, algos, seeds = study.envs, study.algos, study.seeds
    plt = pyplot()
    fig, axes = plt.subplots(2, len(envs), figsize=(panel_width * len(envs), 6.5), squeeze=False)
    for j, env_id in enumerate(envs):
        ax_m, ax_r = axes[0][j], axes[1][j]
        sel: list[Mapping[str, Any]] = []
        for algo, seed in itertools.product(algos, seeds):
            sel = [r for r in rows if (r["env"], r["algo"], r["seed"]) == (env_id, algo, seed)]
            if sel:
                lab = algo.upper() if seed == seeds[0] else None
                _checkpoint_line(ax_m, ax_r, sel, colors.get(algo), lab, decorate)
        ax_m.set_title(env_id if title is None else title(env_id, sel), fontsize=9)
        ax_m.set_ylabel(ylabel)
        ax_r.set_ylabel("mean return")
        ax_r.set_xlabel("training steps")
        ax_m.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def _checkpoint_line(
    ax_m: Any,
    ax_r: Any,
    sel: list[Mapping[str, Any]],
    color: str | None,
    label: str | None,
    decorate: Callable[[Any, list[Mapping[str, Any]], str | None], None] | None,
) -> None:
    """One training run of :func:`plot_meg_checkpoints`: MEG and its interval, the return."""
    s = np.array([r["steps"] for r in sel])
    ax_m.plot(s, [r["meg"] for r in sel], "o-", color=color, label=label, ms=3)
    ax_m.fill_between(s, [r["low"] for r in sel], [r["high"] for r in sel], color=color, alpha=0.2)
    ax_r.plot(s, [r["mean_return"] for r in sel], "o-", color=color, ms=3)
    if decorate is not None:
        decorate(ax_m, sel, color)


def plot_grid_values(
    path: str | pathlib.Path,
    values: Any,
    grid_shape: tuple[int, int],
    *,
    title: str = "",
    marks: Sequence[tuple[int, int]] = (),
    cmap: str = "viridis",
) -> pathlib.Path:
    """Heatmap of a per-state quantity ``(S,)`` laid out as ``grid_shape = (height, width)``.

    Args:
        path: output PNG.
        values: ``(S,)`` numbers with ``S = height * width`` (state ``row * width + col``).
        grid_shape: ``(height, width)``.
        title: figure title.
        marks: ``(row, col)`` cells outlined in yellow (e.g. the goal region).
        cmap: matplotlib colormap.

    Raises:
        ValueError: if ``values`` does not have ``height * width`` entries.
    """
    h, w = grid_shape
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size != h * w:
        raise ValueError(f"values has {arr.size} entries, expected {h * w} for a {h}x{w} grid.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * w, 0.8 + 0.55 * h))
    im = ax.imshow(arr.reshape(h, w), cmap=cmap)
    for r, c in marks:
        ax.add_patch(
            plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="yellow", lw=2, ls="--")
        )
    for r in range(h):
        for c in range(w):
            ax.text(
                c,
                r,
                f"{arr[r * w + c]:.2f}",
                ha="center",
                va="center",
                fontsize=6,
                color="white" if arr[r * w + c] < arr.max() / 2 else "black",
            )
    ax.set_xticks(range(w))
    ax.set_yticks(range(h))
    fig.colorbar(im, ax=ax, fraction=0.03)
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


#: Column -> axis label of :func:`plot_meg_history`'s metrics.
HISTORY_METRICS = {
    "meg": "MEG",
    "known_meg": "known-utility MEG",
    "unknown": "unknown-utility MEG",
    "normalized": "MEG / (H log|A|)",
    "expected_return": "expected return",
}


def history_labels(paths: Sequence[str | pathlib.Path]) -> list[str]:
    """Legend names for history files: the file name without its suffix, with as many parent
    folders as it takes to tell apart files of the same name.

    Args:
        paths: the files, in plotting order.

    Returns:
        One label per path, all different: ``["ppo/meg", "dqn/meg"]`` for
        ``runs/ppo/meg.jsonl`` and ``runs/dqn/meg.jsonl``, ``["ppo", "dqn"]`` for ``ppo.csv`` and
        ``dqn.csv``; a file named twice gets ``" (2)"``, ``" (3)"`` ... on its repeats.

    Example:
        >>> history_labels(["runs/ppo/meg.jsonl", "runs/dqn/meg.jsonl", "a2c.csv"])
        ['ppo/meg', 'dqn/meg', 'a2c']
    """
    full = [pathlib.Path(p).absolute() for p in paths]
    distinct = list(dict.fromkeys(full))
    # Candidate labels from short to long: stem, file name, parent/stem, ..., the whole path.
    candidates = []
    for path in distinct:
        parts = [*path.parent.parts[1:], path.stem]
        names = ["/".join(parts[-k:]) for k in range(1, len(parts) + 1)]
        candidates.append([names[0], path.name, *names[1:], str(path)])
    label_of = dict(zip(distinct, _shortest_distinct(candidates), strict=True))
    seen: dict[str, int] = {}
    out = []
    for path in full:  # a file named twice (or a clash left) is numbered on its repeats
        label = label_of[path]
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


#: What ``imitation-meg plot`` reads, for the refusals of other files.
HISTORY_FILES = (
    "plot reads the CSV / JSON-lines rows written by `imitation-meg score --csv/--jsonl` or by "
    "MEGCallback(history=...)"
)
#: First bytes of files people pass by mistake, and what they are.
_BINARY_KINDS = (
    (
        b"PK\x03\x04",
        (
            "a zip archive (a saved SB3 model? score it first: imitation-meg score --env ENV "
            "--policy MODEL.zip --jsonl rows.jsonl, then plot rows.jsonl)"
        ),
    ),
    (b"PK\x05\x06", "a zip archive"),
    (b"\x89PNG", "a PNG image"),
    (b"\x80\x02", "a Python pickle"),
    (b"\x80\x03", "a Python pickle"),
    (b"\x80\x04", "a Python pickle"),
    (b"\x80\x05", "a Python pickle"),
    (b"\x93NUMPY", "a numpy .npy array"),
)
#: Bytes looked at to tell a text file from a binary one.
_SNIFF_BYTES = 65_536


def read_history(path: str | pathlib.Path) -> list[dict[str, Any]]:
    """The rows of a score or callback history file (CSV, or JSON lines for any other suffix).

    Args:
        path: a ``.csv`` written by ``imitation-meg score --csv`` or a JSON-lines file
            (``.jsonl``) written by ``score --jsonl`` or ``MEGCallback(history=...)``.

    Returns:
        One dict per row, numbers parsed (see :func:`imitation_meg.results.read_rows`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a binary file (a saved model's ``.zip``, an image, ...) or one that is not
            UTF-8 text, named with what it looks like; an empty file or a line that is not a
            JSON object.
    """
    from imitation_meg.results import read_rows

    p = pathlib.Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no file at {str(p)!r}; {HISTORY_FILES}.")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {str(p)!r}: {e.strerror or e}.") from e
    head = data[:_SNIFF_BYTES]
    kind = next((what for magic, what in _BINARY_KINDS if head.startswith(magic)), None)
    if kind is None and b"\x00" in head:
        kind = "a binary file"
    if kind is not None:
        raise ValueError(f"{str(p)!r} is {kind}, not a table of rows; {HISTORY_FILES}.")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{str(p)!r} is not UTF-8 text (byte {data[e.start : e.start + 1]!r} at position "
            f"{e.start}); {HISTORY_FILES}."
        ) from e
    return read_rows(p)


def _shortest_distinct(candidates: list[list[str]]) -> list[str]:
    """One label per file from its candidates (short to long): each file whose label clashes
    with another's moves to its next longer candidate, until no label that can move clashes."""
    level = [0] * len(candidates)
    while True:
        labels = [c[k] for c, k in zip(candidates, level, strict=True)]
        clashing = {lab for lab in labels if labels.count(lab) > 1}
        movable = [
            i
            for i, lab in enumerate(labels)
            if lab in clashing and level[i] < len(candidates[i]) - 1
        ]
        if not movable:
            return labels
        for i in movable:
            level[i] += 1


def plot_meg_history(
    path: str | pathlib.Path,
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    metrics: Sequence[str] | None = None,
    title: str = "",
) -> pathlib.Path:
    """MEG against training steps, one line per history and metric; returns the PNG path.

    Args:
        path: output PNG.
        histories: name -> rows with ``timesteps`` (training steps; rows without it are
            plotted against their index) and the metric columns.
        metrics: columns to plot (see ``HISTORY_METRICS``); default ``meg`` plus ``unknown``
            where the rows have it, and ``known_meg`` where it differs from ``meg``.
        title: figure title.

    Raises:
        ValueError: no rows, or a metric that no row has.
    """
    if not histories or not any(histories.values()):
        raise ValueError("nothing to plot: the histories hold no rows.")
    rows_all = [r for rows in histories.values() for r in rows]
    metrics = _history_metrics(rows_all, metrics)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    uses_steps = all(isinstance(r.get("timesteps"), (int, float)) for r in rows_all)
    for i, (pts, label) in enumerate(_history_lines(histories, metrics, uses_steps)):
        ax.plot(
            *zip(*pts, strict=True),
            marker="o",
            ms=3,
            color=_COLORS[i % len(_COLORS)],
            label=label,
        )
    xlabel = "training steps" if uses_steps else "policy (in file order)"
    ylabel = "nats" if "expected_return" not in metrics else "value"
    return _labelled(fig, ax, path, xlabel, ylabel, title)


def _history_metrics(
    rows: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None
) -> Sequence[str]:
    """The columns to plot: ``metrics``, or by default ``meg`` plus ``unknown`` where the rows
    have it and ``known_meg`` where it differs from ``meg``.

    Raises:
        ValueError: a metric that no row has a number in.
    """
    if metrics is None:
        metrics = _default_metrics(rows)
    for m in metrics:
        if not any(isinstance(r.get(m), (int, float)) for r in rows):
            raise ValueError(
                f"no row has a number in column {m!r}; columns present: "
                f"{sorted({k for r in rows for k in r})}."
            )
    return metrics


def _metric_label(m: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """The legend's name of column ``m`` in these rows: ``MEG / certificate`` for continuous
    actions (no ``H log|A|`` to divide by), ``MEG (mode)`` for score rows."""
    label = HISTORY_METRICS.get(m, m)
    if m == "normalized" and rows and isinstance(rows[0].get("certificate"), (int, float)):
        label = "MEG / certificate"
    mode = rows[0].get("mode") if rows else None
    if m == "meg" and isinstance(mode, str):  # score rows: the mode the column holds
        label = f"MEG ({mode})"
    return label


def _default_metrics(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``meg``, plus ``unknown`` where the rows have it and ``known_meg`` where it differs
    from ``meg``."""
    metrics = ["meg"]
    if any(r.get("unknown") is not None for r in rows):
        metrics.append("unknown")
    if any(r.get("known_meg") is not None and r.get("known_meg") != r.get("meg") for r in rows):
        metrics.append("known_meg")
    return metrics


def _history_lines(
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    metrics: Sequence[str],
    uses_steps: bool,
) -> Iterator[tuple[list[tuple[float, float]], str]]:
    """Each line to draw: its ``(x, value)`` points in order of ``x`` (training steps, or the
    row's index) and its legend label, by history and metric."""
    for name, rows in histories.items():
        xs = [float(r["timesteps"]) if uses_steps else float(k) for k, r in enumerate(rows)]
        for m in metrics:
            pts = sorted(
                (x, float(r[m]))
                for x, r in zip(xs, rows, strict=True)
                if isinstance(r.get(m), (int, float))
            )
            if pts:
                yield pts, _metric_label(m, rows) + (f" [{name}]" if len(histories) > 1 else "")
