"""Run records, schema v1: ``runs/<run-id>/`` with meta.json, events, metrics, faults.jsonl and check.json.

The format tables (columns, types, meanings) are in :mod:`harness.records.schema`. Writing:
``RunRecord.create(runs_dir, scenario, params)`` then ``events_writer(worker)`` / ``metrics_writer()`` /
``add_fault(...)`` / ``update_meta(...)`` / ``finish()``. Reading: ``load_events`` / ``load_metrics`` /
``load_meta`` / ``load_faults`` / ``load_check``, and ``validate_run`` for a list of problems.
"""

from harness.records.clock import WallClock, wall_clock
from harness.records.reader import (
    NotARunDirError,
    RunRecordError,
    load_check,
    load_events,
    load_faults,
    load_meta,
    load_metrics,
    require_run_dir,
)
from harness.records.run import RunRecord
from harness.records.schema import (
    EVENTS_FULL_SCHEMA,
    EVENTS_OPTIONAL_SCHEMA,
    EVENTS_SCHEMA,
    METRICS_SCHEMA,
    SCHEMA_VERSION,
    FaultKind,
    MetricName,
    Op,
    Outcome,
    new_run_id,
)
from harness.records.validate import validate_run
from harness.records.writer import EventWriter, MetricsWriter, RecordWriteError

__all__ = [
    "EVENTS_FULL_SCHEMA",
    "EVENTS_OPTIONAL_SCHEMA",
    "EVENTS_SCHEMA",
    "METRICS_SCHEMA",
    "SCHEMA_VERSION",
    "EventWriter",
    "FaultKind",
    "MetricName",
    "MetricsWriter",
    "NotARunDirError",
    "Op",
    "Outcome",
    "RecordWriteError",
    "RunRecord",
    "RunRecordError",
    "WallClock",
    "load_check",
    "load_events",
    "load_faults",
    "load_meta",
    "load_metrics",
    "new_run_id",
    "require_run_dir",
    "validate_run",
    "wall_clock",
]
