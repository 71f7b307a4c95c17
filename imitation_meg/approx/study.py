"""Resumable studies for today's ``imitation-meg reproduce``: per-unit result files.

A stopgap beside the study-unit protocol's runner (``imitation_meg.runners``), which owns
per-unit result files in general: the approximate studies run for hours on small machines, so
their ``main`` keeps each unit's result and an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from collections.abc import Callable
from typing import Any

from imitation_meg.results import to_jsonable, write_json

__all__ = ["cached_unit"]


def cached_unit(
    cfg: Any, unit: dict[str, Any], fn: Callable[[Any, dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """``fn(cfg, unit)``, read back from ``<cfg.results_dir>/units/`` when an identical run left it.

    The file's name hashes the unit and every setting of ``cfg`` but ``progress``, so a changed
    setting never reuses a stale result. The result is returned as read back from its JSON (the
    same values whether computed now or earlier).
    """
    settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "progress"}
    key = json.dumps(to_jsonable({"unit": unit, "settings": settings}), sort_keys=True)
    name = hashlib.sha256(key.encode()).hexdigest()[:20]
    path = pathlib.Path(cfg.results_dir) / "units" / f"{name}.json"
    if not path.is_file():
        write_json(path, {"unit": unit, "result": fn(cfg, unit)})
    result: dict[str, Any] = json.loads(path.read_text())["result"]
    return result
