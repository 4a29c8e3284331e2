"""Reader and writer hold one run-record schema: a run written by the harness's writer reads back through the
reports' reader with the same columns and types, and its meta.json fields as the reports show them."""

# mypy: disable-error-code="import-untyped"

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StringType

from harness.records import EVENTS_FULL_SCHEMA, METRICS_SCHEMA, SCHEMA_VERSION, RunRecord
from spark_reports.run_records import (
    EVENT_COLUMNS,
    METRIC_COLUMNS,
    discover_runs,
    load_events,
    load_metrics,
    read_check,
    read_faults,
    spark_type,
)


def _write_run(runs_dir, fmt):
    rec = RunRecord.create(runs_dir, f"schema-{fmt}", {"rate": 10})
    rec.update_meta(broker={"flushDiskType": "SYNC_FLUSH"}, broker_impl="reference-broker")
    events = rec.events_writer("w0", fmt=fmt)
    events.record_send("k1", "T", 2, 7, 100, 200, "ok", 0, 64, 90)
    events.record_receive("k1", "T", 2, 7, 300, 310, born_ns=150, store_ns=160, nbytes=64, session="c0#1")
    metrics = rec.metrics_writer(fmt=fmt)
    metrics.record("backlog_msgs", 3.0, "G", ts_ns=1_000)
    metrics.record("commitlog_max_offset", 4096.0, ts_ns=1_000)
    rec.add_fault("kill9", "broker", ts_ns=500, signal=9)
    rec.finish()
    return rec


def test_the_readers_columns_are_the_writers():
    assert list(EVENT_COLUMNS) == EVENTS_FULL_SCHEMA.names
    assert list(METRIC_COLUMNS) == METRICS_SCHEMA.names


def test_a_type_the_reader_does_not_know_fails_loudly():
    with pytest.raises(TypeError, match="no Spark type"):
        spark_type(pa.float32())


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_run_written_by_the_harness_reads_back_with_the_same_columns_and_types(spark, tmp_path, fmt):
    rec = _write_run(tmp_path, fmt)
    if fmt == "parquet":  # what the writer put on disk is the contract, column for column
        for sub, schema in (("events", EVENTS_FULL_SCHEMA), ("metrics", METRICS_SCHEMA)):
            (part,) = (rec.run_dir / sub).glob("*.parquet")
            written = pq.read_schema(part)
            assert [(f.name, f.type) for f in written] == [(f.name, f.type) for f in schema], sub

    (run,) = discover_runs(tmp_path)
    events = load_events(spark, [run])
    assert [(f.name, f.dataType) for f in events.schema.fields] == [
        ("run_id", StringType()), *[(f.name, spark_type(f.type)) for f in EVENTS_FULL_SCHEMA]]
    rows = [r.asDict() for r in events.orderBy("start_ns").collect()]
    assert rows == [
        {"run_id": rec.run_id, "op": "send", "key": "k1", "topic": "T", "queue_id": 2, "queue_offset": 7,
         "intended_ns": 90, "start_ns": 100, "end_ns": 200, "outcome": "ok", "code": 0, "bytes": 64, "worker": "w0",
         "born_ns": -1, "store_ns": -1, "session": ""},
        {"run_id": rec.run_id, "op": "receive", "key": "k1", "topic": "T", "queue_id": 2, "queue_offset": 7,
         "intended_ns": 300, "start_ns": 300, "end_ns": 310, "outcome": "ok", "code": -1, "bytes": 64,
         "worker": "w0", "born_ns": 150, "store_ns": 160, "session": "c0#1"}]

    metrics = load_metrics(spark, [run])
    assert [(f.name, f.dataType) for f in metrics.schema.fields] == [
        ("run_id", StringType()), *[(f.name, spark_type(f.type)) for f in METRICS_SCHEMA]]
    assert sorted((r["metric"], r["value"], r["label"]) for r in metrics.collect()) == [
        ("backlog_msgs", 3.0, "G"), ("commitlog_max_offset", 4096.0, "")]

    # meta.json, faults.jsonl and check.json as the reports read them
    assert (run.run_id, run.scenario, run.flush_mode, run.broker_impl) == (
        rec.run_id, f"schema-{fmt}", "SYNC_FLUSH", "reference-broker")
    assert run.meta["schema_version"] == SCHEMA_VERSION and run.started_at_ns == rec.meta()["started_at_ns"]
    assert run.sysctl_profile == "none" and run.host_summary != "unknown"
    assert [(f["kind"], f["target"], f["params"]) for f in read_faults(run)] == [("kill9", "broker", {"signal": 9})]
    assert read_check(run) is None
