"""``RunRecord``: creates ``runs/<run-id>/``, keeps meta.json current, hands out writers, logs faults.

meta.json is always re-read before an update and replaced atomically, because other tools (the sysctl
profile runner, the chaos driver) add their parts to it from other processes while a run is going.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import orjson

from harness.records.clock import WallClock, wall_clock
from harness.records.host import git_state, host_facts
from harness.records.reader import load_meta, require_run_dir
from harness.records.schema import (
    EVENTS_DIR,
    EVENTS_JSONL,
    FAULTS_FILE,
    META_FILE,
    METRICS_DIR,
    METRICS_JSONL,
    SCHEMA_VERSION,
    new_run_id,
)
from harness.records.writer import (
    EVENT_DICTIONARY_COLUMNS,
    METRIC_DICTIONARY_COLUMNS,
    EventWriter,
    JsonlSink,
    MetricsWriter,
    ParquetPartSink,
)

Format = Literal["parquet", "jsonl"]


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace ``path`` whole (readers never see half a file); values JSON lacks (a Path) become strings."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class RunRecord:
    """One run directory. ``create`` starts a run; ``open`` attaches another process (a locust worker) to it."""

    def __init__(self, run_dir: Path, clock: WallClock | None = None) -> None:
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.clock = clock if clock is not None else wall_clock()
        self._writers: list[EventWriter | MetricsWriter] = []

    @classmethod
    def create(cls, runs_dir: str | os.PathLike[str], scenario: str, params: dict[str, Any] | None = None,
               command: Sequence[str] | None = None, *, clock: WallClock | None = None) -> RunRecord:
        """Make ``<runs_dir>/<run-id>/`` and its first meta.json (host facts, git revision, start time)."""
        runs = Path(runs_dir)
        runs.mkdir(parents=True, exist_ok=True)
        clock = clock if clock is not None else wall_clock()
        started = clock.now_ns()
        while True:
            run_id = new_run_id(scenario, started)
            try:
                (runs / run_id).mkdir()
                break
            except FileExistsError:  # same second, same 24-bit tag: draw again
                continue
        rec = cls(runs / run_id, clock)
        rev, dirty = git_state()
        meta: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "run_id": run_id,
            "scenario": scenario,
            "command": list(sys.argv if command is None else command),
            "started_at_ns": started,
            "ended_at_ns": None,
            "broker": {},
            "broker_impl": None,
            "sysctl": {"profile": None, "applied": False, "reason": None, "values": {}},
            "host": host_facts(runs),
            "fio": None,
            "git_rev": rev,
            "git_dirty": dirty,  # optional key: tracked files differed from git_rev
            "params": dict(params or {}),
        }
        write_json_atomic(rec.run_dir / META_FILE, meta)
        return rec

    @classmethod
    def open(cls, run_dir: str | os.PathLike[str], clock: WallClock | None = None) -> RunRecord:
        return cls(require_run_dir(run_dir), clock)

    def events_writer(self, worker: str, *, fmt: Format = "parquet", rows_per_file: int = 65536,
                      background: bool = True) -> EventWriter:
        """A writer for one worker's events (``events/part-<worker>-<n>.parquet``, or ``events.jsonl``)."""
        sink = (ParquetPartSink(self.run_dir / EVENTS_DIR, worker, EVENT_DICTIONARY_COLUMNS) if fmt == "parquet"
                else JsonlSink(self.run_dir / EVENTS_JSONL))
        w = EventWriter(sink, worker, rows_per_file=rows_per_file, background=background)
        self._writers.append(w)
        return w

    def metrics_writer(self, source: str = "main", *, fmt: Format = "parquet",
                       rows_per_file: int = 4096) -> MetricsWriter:
        """A writer for samples (``metrics/part-<source>-<n>.parquet``, or ``metrics.jsonl``)."""
        sink = (ParquetPartSink(self.run_dir / METRICS_DIR, source, METRIC_DICTIONARY_COLUMNS) if fmt == "parquet"
                else JsonlSink(self.run_dir / METRICS_JSONL))
        w = MetricsWriter(sink, self.clock.now_ns, rows_per_file=rows_per_file)
        self._writers.append(w)
        return w

    def add_fault(self, kind: str, target: str, *, ts_ns: int | None = None, **params: Any) -> dict[str, Any]:
        """Append one line to faults.jsonl (``kind`` a ``FaultKind`` value; ``ts_ns`` defaults to now)."""
        fault = {"ts_ns": self.clock.now_ns() if ts_ns is None else ts_ns, "kind": str(kind), "target": target,
                 "params": params}
        line = orjson.dumps(fault, default=str) + b"\n"
        fd = os.open(self.run_dir / FAULTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write with O_APPEND: lines from several processes do not interleave
        finally:
            os.close(fd)
        return fault

    def meta(self) -> dict[str, Any]:
        return load_meta(self.run_dir)

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        """Set top-level meta.json keys (e.g. ``broker=``, ``broker_impl=``, ``fio=``) and return the result."""
        meta = load_meta(self.run_dir)
        meta.update(fields)
        write_json_atomic(self.run_dir / META_FILE, meta)
        return meta

    def close_writers(self) -> None:
        """Close every writer handed out; the first write error is raised after all are closed."""
        first: BaseException | None = None
        for w in self._writers:
            try:
                w.close()
            except BaseException as e:  # noqa: BLE001 - every writer is closed; the first error is raised below
                first = first or e
        self._writers.clear()
        if first is not None:
            raise first

    def finish(self, **fields: Any) -> dict[str, Any]:
        """Close the writers and record ``ended_at_ns`` (plus any other meta fields given)."""
        try:
            self.close_writers()
        finally:
            meta = self.update_meta(ended_at_ns=self.clock.now_ns(), **fields)
        return meta

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.finish()
