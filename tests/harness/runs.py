"""Building small run directories for the validation and CLI tests, through the real writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from harness.records import RunRecord


def write_run(runs_dir: Path, rows: list[dict[str, Any]], *, fmt: Literal["parquet", "jsonl"] = "parquet",
              params: dict[str, Any] | None = None) -> Path:
    """A finished run whose events are ``rows`` (dicts as in test_checker: op, key, outcome, ... with defaults)."""
    rec = RunRecord.create(runs_dir, "test", params or {}, ["pytest"])
    writers: dict[str, Any] = {}
    for r in rows:
        worker = r.get("worker", "w0")
        w = writers.get(worker) or writers.setdefault(worker, rec.events_writer(worker, fmt=fmt, background=False))
        common = (r["key"], r.get("topic", "T"), r.get("queue_id", 0), r.get("queue_offset", -1),
                  r.get("start_ns", 0), r.get("end_ns", 0))
        if r["op"] == "send":
            w.record_send(*common, r.get("outcome", "ok"), code=r.get("code", 0), nbytes=r.get("bytes", 100))
        elif r["op"] == "read":
            w.record_read(*common, nbytes=r.get("bytes", 100))
        else:
            w.record_receive(*common, outcome=r.get("outcome", "ok"), session=r.get("session", ""),
                             nbytes=r.get("bytes", 100))
    if not writers:
        rec.events_writer("w0", fmt=fmt).close()
    rec.finish()
    return rec.run_dir
