"""Per-unit result files: ``<results_dir>/units/<key>.json``, one per finished unit.

A unit's key is a hash of the study's name, the config's *fingerprint* (every field except the
output folder, progress switches and the driver's ``SWEEP_FIELDS``, which only choose the units)
and the unit itself. A rerun of the same config finds the finished units by key and runs only
the missing ones; a different config (another ``n_steps``, say) never reuses them. Files are
written atomically (a temporary file, then a rename), so a run killed at any moment leaves only
whole unit files behind.

Unit files are not published (``imitation-meg publish`` leaves ``units/`` behind). A study whose
published ``results.json`` keeps every unit's own result in one list (its driver names that list
in ``PUBLISHED_RESULTS``) can have its unit files rebuilt from a published folder
(``run.json`` + ``results.json``) by :meth:`UnitStore.merge`, so a long study run in pieces over
several machines or fresh checkouts goes on from what was published.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from imitation_meg.results import library_versions, to_jsonable
from imitation_meg.runners._worker import UnitOutcome, loads_result

__all__ = ["ALWAYS_FREE_FIELDS", "PublishedRows", "UnitStore", "canonical", "config_fingerprint"]

#: Config fields that never change a unit's result (where a driver has them).
ALWAYS_FREE_FIELDS = ("results_dir", "progress")


def canonical(obj: Any) -> str:
    """Canonical JSON of plain values: sorted keys, no spaces (the text that keys hash)."""
    return json.dumps(to_jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_fingerprint(cfg: Any, free_fields: Iterable[str]) -> dict[str, Any]:
    """The config fields a unit's result may depend on, as plain JSON values.

    Args:
        cfg: the study's config dataclass instance (or its fields as a dict of JSON values).
        free_fields: fields left out (they only choose units or name outputs).
    """
    data = to_jsonable(cfg if isinstance(cfg, Mapping) else dataclasses.asdict(cfg))
    assert isinstance(data, dict)
    skip = set(free_fields) | set(ALWAYS_FREE_FIELDS)
    return {k: v for k, v in data.items() if k not in skip}


class PublishedRows(NamedTuple):
    """How a study's published folder holds its units' results (see :meth:`UnitStore.merge`)."""

    key: str  # the list in results.json with one row per unit, the unit's own result
    free_fields: tuple[str, ...]  # the driver's SWEEP_FIELDS (left out of the fingerprint)


def _atomic_write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _same_result(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records of one unit hold the same result.

    A published folder's rebuilt record lacks what its tables leave out (e.g. curves), so one
    result's fields may be a subset of the other's: those fields must be equal. Two results
    that each have a field the other lacks are different records, not a full and a trimmed copy.
    """
    ra, rb = a["result"], b["result"]
    if isinstance(ra, Mapping) and isinstance(rb, Mapping):
        shared = ra.keys() & rb.keys()
        if not shared or shared not in (ra.keys(), rb.keys()):
            return False
        return all(canonical(ra[k]) == canonical(rb[k]) for k in shared)
    return canonical(ra) == canonical(rb)


@dataclasses.dataclass
class UnitStore:
    """The finished units of one study and config, under ``<results_dir>/units/``.

    Attributes:
        results_dir: the study's results folder.
        study: the driver's name.
        fingerprint: :func:`config_fingerprint` of the config.
        added: config fields added to the study after some of its runs, each with the value
            those runs had without naming it (the driver's ``ADDED_FIELDS``): a merged unit
            whose config lacks such a field counts as made with that value.
    """

    results_dir: pathlib.Path
    study: str
    fingerprint: dict[str, Any]
    added: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def folder(self) -> pathlib.Path:
        """Where the unit files live."""
        return self.results_dir / "units"

    def key(self, unit: Mapping[str, Any]) -> str:
        """The unit's key: a hash of study, config fingerprint and unit (16 hex digits)."""
        text = canonical({"study": self.study, "config": self.fingerprint, "unit": unit})
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def path(self, key: str) -> pathlib.Path:
        """The file of the unit with ``key``."""
        return self.folder / f"{key}.json"

    def _read(self, path: pathlib.Path) -> dict[str, Any]:
        try:
            record = loads_result(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(
                f"unit file {str(path)!r} cannot be read ({e}); delete it to run that unit again."
            ) from e
        if not isinstance(record, dict) or not {"study", "config", "unit", "result"} <= set(record):
            raise ValueError(
                f"unit file {str(path)!r} is not a unit result of imitation-meg; remove it from "
                f"{str(path.parent)!r}."
            )
        return record

    def load(self, key: str, unit: Mapping[str, Any]) -> tuple[Any, float] | None:
        """The stored result and seconds of ``unit``, or ``None`` when it has not run.

        Raises:
            ValueError: if the file is damaged or belongs to another study, config or unit.
        """
        path = self.path(key)
        if not path.is_file():
            return None
        record = self._read(path)
        if (
            record["study"] != self.study
            or record["config"] != self.fingerprint
            or canonical(record["unit"]) != canonical(unit)
        ):
            raise ValueError(
                f"unit file {str(path)!r} does not hold unit {canonical(unit)} of this config; "
                "delete it to run that unit again."
            )
        return record["result"], float(record.get("seconds", float("nan")))

    def save(self, key: str, unit: Mapping[str, Any], outcome: UnitOutcome) -> pathlib.Path:
        """Write a finished unit's file (atomically)."""
        record = {
            "study": self.study,
            "unit": to_jsonable(unit),
            "config": self.fingerprint,
            "seconds": round(outcome.seconds, 3),
            "versions": library_versions(),
            "result": loads_result(outcome.result_json),
        }
        path = self.path(key)
        _atomic_write(path, json.dumps(record, indent=1, allow_nan=True) + "\n")
        return path

    def merge(
        self,
        sources: Sequence[str | os.PathLike[str]],
        published: PublishedRows | None = None,
        *,
        write: bool = True,
    ) -> list[pathlib.Path]:
        """Copy the unit files of other runs of the same config into this store.

        Each source is a results folder (its ``units/`` is read), a ``units/`` folder, or a
        published folder (``run.json`` and ``results.json``, no ``units/``: what
        ``imitation-meg publish`` copies), whose unit files are rebuilt from the run log's units
        and the rows of ``results.json[published.key]`` (the study must keep every unit's
        result there: ``published`` is None for a study that does not). Nothing is written
        unless every unit passes: all must be units of this study and config, and no unit may
        appear twice with different results (in two sources, or in a source and this store;
        the same result twice is taken once). With ``write=False`` (a dry run) the same checks
        run and nothing is written.

        Returns:
            The paths of the written files (with ``write=False``: of the files it would write).

        Raises:
            ValueError: a missing source, a unit of another config, a unit merged twice with
                different results, a published folder of a study that cannot rebuild units, or
                a unit without its row.
        """
        incoming: dict[str, tuple[str, str, dict[str, Any]]] = {}  # key -> (from, text, record)
        for src in sources:
            for where, record, text in self._source_records(src, published):
                record, text = self._fill_added(record, text)
                self._check_same_config(where, record)
                key = self.key(record["unit"])
                if self._admit(incoming, key, where, record):
                    incoming[key] = (where, text, record)
        written = []
        for key, (_, text, _) in incoming.items():
            if write:
                _atomic_write(self.path(key), text)
            written.append(self.path(key))
        return written

    def _source_records(
        self, src: str | os.PathLike[str], published: PublishedRows | None
    ) -> list[tuple[str, dict[str, Any], str]]:
        """``(where, record, file text)`` of each unit file a ``--merge`` source holds: its
        ``units/`` folder, a folder of unit files, or a published folder (rebuilt).

        Raises:
            ValueError: the source is not a folder, or is this run's own folder.
        """
        folder = pathlib.Path(src)
        if not folder.is_dir():
            raise ValueError(
                f"--merge source {str(src)!r} is not a folder: give a results folder with "
                "units/ in it or a published folder (run.json and results.json)."
            )
        if (folder / "units").is_dir():
            folder = folder / "units"
        if folder.resolve() == self.folder.resolve():
            raise ValueError(
                f"--merge source {str(src)!r} is this run's own results folder; merge other "
                "runs' folders into it."
            )
        if (folder / "run.json").is_file():  # a run's folder without its units/
            return self._published(folder, published)
        return [  # a folder of unit files
            (str(path), self._read(path), path.read_text())
            for path in sorted(folder.glob("*.json"))
        ]

    def _check_same_config(self, where: str, record: dict[str, Any]) -> None:
        """A merged unit file must come from this study and config.

        Raises:
            ValueError: it names another study or config fingerprint.
        """
        if record["study"] != self.study or record["config"] != self.fingerprint:
            raise ValueError(
                f"unit file {where!r} was made by another "
                f"{'study' if record['study'] != self.study else 'config'} "
                f"({_difference(record, self.study, self.fingerprint)}); merge only runs "
                "of the same config (same --set values)."
            )

    def _admit(
        self,
        incoming: dict[str, tuple[str, str, dict[str, Any]]],
        key: str,
        where: str,
        record: dict[str, Any],
    ) -> bool:
        """Whether the unit is new: the same unit with the same result (one run published in
        two folders, say) is taken once; with another result it is refused.

        Raises:
            ValueError: the unit came already, from another source or this store, with
                another result.
        """
        unit = canonical(record["unit"])
        if key in incoming:
            if _same_result(incoming[key][2], record):
                return False
            raise ValueError(
                f"unit {unit} is in both {incoming[key][0]!r} and {where!r} with "
                "different results; merging both would count it twice: remove one of "
                "the two."
            )
        if self.path(key).is_file():
            if _same_result(self._read(self.path(key)), record):
                return False
            raise ValueError(
                f"unit {unit} from {where!r} is already in {str(self.folder)!r} with "
                "another result; merging it again would count it twice: drop that "
                "source from --merge."
            )
        return True

    def _fill_added(self, record: dict[str, Any], text: str) -> tuple[dict[str, Any], str]:
        """``record`` with the fields it predates filled in (see ``added``), and its file text."""
        theirs = record["config"]
        missing = {
            k: v
            for k, v in to_jsonable(dict(self.added)).items()  # type: ignore[union-attr]
            if k not in theirs and k in self.fingerprint
        }
        if not missing:
            return record, text
        record = {**record, "config": {**theirs, **missing}}
        return record, json.dumps(record, indent=1, allow_nan=True) + "\n"

    def _published(
        self, folder: pathlib.Path, published: PublishedRows | None
    ) -> list[tuple[str, dict[str, Any], str]]:
        """Unit records rebuilt from a published folder: ``(where, record, file text)``."""
        if published is None:
            raise ValueError(
                f"--merge source {str(folder)!r} is a published folder, but study "
                f"{self.study!r} does not keep every unit's result in its results.json, so its "
                "units cannot be rebuilt from it; merge the run's results folder (with units/)."
            )
        if not (folder / "results.json").is_file():
            raise ValueError(
                f"--merge source {str(folder)!r} has a run.json but neither units/ nor "
                "results.json: give the run's results folder or its published copy."
            )
        try:
            log = json.loads((folder / "run.json").read_text())
            payload = loads_result((folder / "results.json").read_text())
            seconds = {canonical(u["unit"]): float(u["seconds"]) for u in log["unit_seconds"]}
            rows = payload[published.key]
            cfg = log["config"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"--merge source {str(folder)!r} is not a published run of imitation-meg "
                f"({type(e).__name__}: {e})."
            ) from e
        fingerprint = config_fingerprint(cfg, published.free_fields)
        where = str(folder / "results.json")
        out = []
        for text in seconds:
            unit = json.loads(text)
            match = [
                r
                for r in rows
                if isinstance(r, dict) and all(r.get(k) == v for k, v in unit.items())
            ]
            if len(match) != 1:
                raise ValueError(
                    f"{where!r} has {len(match)} rows of unit {text} (its run.json lists it): "
                    "a published folder must hold one row per unit; merge the run's results "
                    "folder (with units/) instead."
                )
            record = {
                "study": log.get("study"),
                "unit": unit,
                "config": fingerprint,
                "seconds": seconds[text],
                "versions": payload.get("versions", {}),
                "result": match[0],
                "rebuilt_from": where,
            }
            out.append((f"{where} (unit {text})", record, json.dumps(record, indent=1) + "\n"))
        return out


def _difference(record: Mapping[str, Any], study: str, fingerprint: Mapping[str, Any]) -> str:
    if record["study"] != study:
        return f"study {record['study']!r}, not {study!r}"
    theirs = record["config"]
    keys = sorted(set(theirs) | set(fingerprint))
    diff = [k for k in keys if theirs.get(k) != fingerprint.get(k)]
    return ", ".join(
        f"{k}={json.dumps(theirs.get(k))} there, {json.dumps(fingerprint.get(k))} here"
        for k in diff[:3]
    )
