"""The runner's log of a run, ``run.json`` beside a study's results (timings, not results).

:func:`_write_run_log` records a finished run: its settings, the config, each unit's seconds;
:func:`_merged_runs` reads the logs of the folders a ``--merge`` took its units from, so that
a run which only merged still says which runs computed them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from imitation_meg.results import to_jsonable, write_json
from imitation_meg.runners._store import UnitStore

__all__ = ["RUN_LOG"]

#: The runner's log of a run in the results folder (timings; not part of the results proper).
RUN_LOG = "run.json"

# What a run log keeps of each run whose units it merged (the runs that computed them).
_MERGED_RUN_FIELDS = (
    "backend",
    "workers",
    "units",
    "units_run",
    "units_reused",
    "units_merged",
    "merged_runs",
    "wall_seconds",
    "finished",
)


def _merged_runs(sources: Sequence[str]) -> list[dict[str, Any]]:
    """Per ``--merge`` source, the record of the run that made it (from its ``run.json``, where
    it has one), so that a run which only merged still says which runs computed its units."""
    out: list[dict[str, Any]] = []
    for src in sources:
        folder = pathlib.Path(src)
        log_path = (folder.parent if folder.name == "units" else folder) / RUN_LOG
        try:
            log = json.loads(log_path.read_text())
        except (OSError, ValueError):  # no run log (a bare folder of unit files), or unreadable
            log = {}
        out.append({"source": str(src), **{k: log[k] for k in _MERGED_RUN_FIELDS if k in log}})
    return out


def _write_run_log(
    store: UnitStore,
    cfg: Any,
    *,
    units: list[dict[str, Any]],
    keys: list[str],
    seconds: Mapping[str, float],
    info: dict[str, Any],
) -> None:
    """``run.json`` of a finished run: ``info`` (backend, workers, counts ...), the config and
    each unit's seconds."""
    log = {
        **info,
        "complete": True,
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": to_jsonable(dataclasses.asdict(cfg)),
        "unit_seconds": [
            {"unit": unit, "seconds": round(seconds.get(key, float("nan")), 2)}
            for key, unit in zip(keys, units, strict=True)
        ],
    }
    write_json(store.results_dir / RUN_LOG, log)
