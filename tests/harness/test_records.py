"""Run records: creating a run, writing events/metrics/faults, reading them back, meta updates, the clock."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.records import (
    EVENTS_FULL_SCHEMA,
    METRICS_SCHEMA,
    SCHEMA_VERSION,
    FaultKind,
    MetricName,
    NotARunDirError,
    Outcome,
    RecordWriteError,
    RunRecord,
    RunRecordError,
    WallClock,
    load_events,
    load_faults,
    load_meta,
    load_metrics,
    new_run_id,
    validate_run,
)
from harness.records.schema import RUN_ID_RE

ROOT = Path(__file__).resolve().parents[2]


def test_run_id_format() -> None:
    # 2023-11-14T22:13:20Z
    rid = new_run_id("crash-kill9", now_ns=1_700_000_000 * 10**9)
    m = RUN_ID_RE.fullmatch(rid)
    assert m is not None
    assert m["ts"] == "20231114T221320" and m["scenario"] == "crash-kill9"


@pytest.mark.parametrize("bad", ["", "a/b", "has space", "-lead", "trail-", "a--b"])
def test_scenario_names_that_would_break_paths_or_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        new_run_id(bad)


def test_create_writes_a_valid_meta_with_host_facts(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path / "runs", "smoke", {"rate": 100}, ["prog", "--rate", "100"])
    meta = load_meta(rec.run_dir)
    assert rec.run_dir.parent == tmp_path / "runs" and rec.run_dir.name == meta["run_id"] == rec.run_id
    assert meta["schema_version"] == SCHEMA_VERSION and meta["scenario"] == "smoke"
    assert meta["command"] == ["prog", "--rate", "100"] and meta["params"] == {"rate": 100}
    assert meta["ended_at_ns"] is None and isinstance(meta["started_at_ns"], int)
    assert meta["host"]["cores"] >= 1 and meta["host"]["ram_bytes"] > 0 and meta["host"]["python"]
    assert meta["host"]["disk"]["total_bytes"] > 0
    assert meta["sysctl"] == {"profile": None, "applied": False, "reason": None, "values": {}}
    # events are still missing: that is the only problem
    assert validate_run(rec.run_dir) == ["no events: neither events/ nor events.jsonl"]
    rec.events_writer("w0").close()
    meta = rec.finish()
    assert meta["ended_at_ns"] >= meta["started_at_ns"]
    assert validate_run(rec.run_dir) == []


def test_update_meta_keeps_what_another_process_added(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "smoke", {})
    # e.g. the sysctl runner, writing meta.json from its own process
    meta = json.loads((rec.run_dir / "meta.json").read_text())
    meta["sysctl"] = {"profile": "rocketmq-os-sh", "applied": True, "reason": None, "values": {"vm.swappiness": 1}}
    (rec.run_dir / "meta.json").write_text(json.dumps(meta))
    rec.update_meta(broker={"flushDiskType": "SYNC_FLUSH"}, broker_impl="reference_broker 0.1.0")
    got = load_meta(rec.run_dir)
    assert got["sysctl"]["profile"] == "rocketmq-os-sh"
    assert got["broker"] == {"flushDiskType": "SYNC_FLUSH"} and got["broker_impl"] == "reference_broker 0.1.0"


def _record_mixed(w: Any, n: int, worker: str) -> list[dict[str, Any]]:
    """Record n sends, n receives and one ack through ``w``; return the rows a reader should give back."""
    expected = []
    for i in range(n):
        key = f"{worker}-{i:06d}"
        outcome = [Outcome.OK, Outcome.FAIL, Outcome.UNKNOWN][i % 3]
        intended = 1000 * i - 7 if i % 2 else -1
        w.record_send(key, "TopicA", i % 4, i, 1000 * i, 1000 * i + 50, outcome, code=i % 5, nbytes=100 + i,
                      intended_ns=intended)
        expected.append(dict(op="send", key=key, topic="TopicA", queue_id=i % 4, queue_offset=i,
                             intended_ns=intended if intended >= 0 else 1000 * i, start_ns=1000 * i,
                             end_ns=1000 * i + 50, outcome=str(outcome), code=i % 5, bytes=100 + i, worker=worker,
                             born_ns=-1, store_ns=-1, session=""))
    for i in range(n):
        key = f"{worker}-{i:06d}"
        w.record_receive(key, "TopicA", i % 4, i, 5000 + i, 5001 + i, born_ns=10 * i, store_ns=10 * i + 1,
                         nbytes=100 + i, session="s1")
        expected.append(dict(op="receive", key=key, topic="TopicA", queue_id=i % 4, queue_offset=i,
                             intended_ns=5000 + i, start_ns=5000 + i, end_ns=5001 + i, outcome="ok", code=-1,
                             bytes=100 + i, worker=worker, born_ns=10 * i, store_ns=10 * i + 1, session="s1"))
    w.record_ack("TopicA", 1, 99, 7, 8)
    expected.append(dict(op="ack", key="", topic="TopicA", queue_id=1, queue_offset=99, intended_ns=7, start_ns=7,
                         end_ns=8, outcome="ok", code=-1, bytes=0, worker=worker, born_ns=-1, store_ns=-1, session=""))
    return expected


@pytest.mark.parametrize("background", [True, False])
def test_parquet_round_trip_several_workers_and_files(tmp_path: Path, background: bool) -> None:
    rec = RunRecord.create(tmp_path, "roundtrip", {})
    w0 = rec.events_writer("w0", rows_per_file=7, background=background)
    w1 = rec.events_writer("locust-worker/1", rows_per_file=1000, background=background)
    want = _record_mixed(w0, 20, "w0") + _record_mixed(w1, 5, "locust-worker/1")
    rec.finish()
    parts = sorted(p.name for p in (rec.run_dir / "events").iterdir())
    assert parts == [f"part-locust_worker_1-{0:06d}.parquet"] + [f"part-w0-{n:06d}.parquet" for n in range(6)]
    table = load_events(rec.run_dir)
    assert table.schema == EVENTS_FULL_SCHEMA
    got = table.to_pylist()
    # Per worker, recording order is kept.
    assert [r for r in got if r["worker"] == "w0"] == [r for r in want if r["worker"] == "w0"]
    assert [r for r in got if r["worker"] != "w0"] == [r for r in want if r["worker"] != "w0"]
    assert validate_run(rec.run_dir) == []


def test_jsonl_round_trip(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "roundtrip", {})
    w = rec.events_writer("w0", fmt="jsonl", rows_per_file=4)
    want = _record_mixed(w, 6, "w0")
    m = rec.metrics_writer(fmt="jsonl")
    m.record(MetricName.BACKLOG_MSGS, 12, label="group-a", ts_ns=5)
    rec.finish()
    assert (rec.run_dir / "events.jsonl").is_file() and not (rec.run_dir / "events").exists()
    assert load_events(rec.run_dir).to_pylist() == want
    assert load_metrics(rec.run_dir).to_pylist() == [dict(ts_ns=5, metric="backlog_msgs", value=12.0,
                                                          label="group-a")]
    assert validate_run(rec.run_dir) == []


def test_load_events_reads_only_the_columns_asked_for(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "cols", {})
    _record_mixed(rec.events_writer("w0"), 3, "w0")
    rec.finish()
    t = load_events(rec.run_dir, columns=["op", "key"])
    assert t.column_names == ["op", "key"] and t.num_rows == 7


def test_metrics_and_faults_round_trip(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "metrics", {})
    m = rec.metrics_writer("broker", rows_per_file=3)
    for i in range(8):
        m.record(MetricName.COMMITLOG_MAX_OFFSET, i * 1024, ts_ns=i)
    m.record("custom_metric", 0.5)
    f1 = rec.add_fault(FaultKind.POWER_LOSS, "broker-0", written_offset=4096, flushed_offset=0)
    f2 = rec.add_fault("kill9", "broker-0", ts_ns=42, pid=1234)
    rec.finish()
    t = load_metrics(rec.run_dir)
    assert t.schema == METRICS_SCHEMA
    rows = t.to_pylist()
    assert rows[:8] == [dict(ts_ns=i, metric="commitlog_max_offset", value=i * 1024.0, label="") for i in range(8)]
    assert rows[8]["metric"] == "custom_metric" and rows[8]["ts_ns"] > 0
    assert load_faults(rec.run_dir) == [f1, f2]
    assert f1["kind"] == "power_loss" and f1["params"] == {"written_offset": 4096, "flushed_offset": 0}
    assert f2 == {"ts_ns": 42, "kind": "kill9", "target": "broker-0", "params": {"pid": 1234}}
    assert validate_run(rec.run_dir) == ["no events: neither events/ nor events.jsonl"]


def test_a_run_without_metrics_reads_as_empty_metrics(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "nometrics", {})
    rec.events_writer("w0").close()
    assert load_metrics(rec.run_dir).num_rows == 0 and load_faults(rec.run_dir) == []


def test_concurrent_recording_from_threads_keeps_every_row_once(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "threads", {})
    w = rec.events_writer("w0", rows_per_file=500)
    threads_n, per_thread = 4, 5000

    def work(t: int) -> None:
        for i in range(per_thread):
            w.record_send(f"t{t}-{i}", "T", t, i, i, i + 1, "ok")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rec.finish()
    keys = load_events(rec.run_dir, columns=["key", "queue_id", "queue_offset"]).to_pylist()
    assert len(keys) == threads_n * per_thread
    assert {r["key"] for r in keys} == {f"t{t}-{i}" for t in range(threads_n) for i in range(per_thread)}
    # Rows stay whole (no interleaving of fields across threads) and each thread's rows stay in order.
    for t in range(threads_n):
        mine = [r for r in keys if r["queue_id"] == t]
        assert [r["key"] for r in mine] == [f"t{t}-{r['queue_offset']}" for r in mine]
        assert [r["queue_offset"] for r in mine] == list(range(per_thread))


def test_two_writers_with_one_worker_name_do_not_overwrite_each_other(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "clash", {})
    a, b = rec.events_writer("w0", rows_per_file=2), rec.events_writer("w0", rows_per_file=2)
    for i in range(4):
        a.record_send(f"a{i}", "T", 0, i, i, i, "ok")
        b.record_send(f"b{i}", "T", 0, i, i, i, "ok")
    rec.finish()
    assert sorted(load_events(rec.run_dir, columns=["key"])["key"].to_pylist()) == [*(f"a{i}" for i in range(4)),
                                                                                   *(f"b{i}" for i in range(4))]


def test_reopening_a_run_continues_the_part_numbers(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "reopen", {})
    w = rec.events_writer("w0", rows_per_file=1)
    w.record_send("a", "T", 0, 0, 0, 0, "ok")
    w.close()
    again = RunRecord.open(rec.run_dir)
    w = again.events_writer("w0")
    w.record_send("b", "T", 0, 1, 1, 1, "ok")
    again.finish()
    assert sorted(p.name for p in (rec.run_dir / "events").iterdir()) == ["part-w0-000000.parquet",
                                                                         "part-w0-000001.parquet"]
    assert load_events(rec.run_dir, columns=["key"])["key"].to_pylist() == ["a", "b"]


@pytest.mark.parametrize("background", [True, False])
def test_a_bad_outcome_is_an_error_not_a_silent_row(tmp_path: Path, background: bool) -> None:
    rec = RunRecord.create(tmp_path, "bad", {})
    w = rec.events_writer("w0", rows_per_file=1000, background=background)
    w.record_send("a", "T", 0, 0, 0, 0, "timeout")
    with pytest.raises(RecordWriteError, match="outcome"):
        w.close()


def test_a_none_field_is_an_error(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "bad", {})
    w = rec.events_writer("w0", background=False)
    w.record_send("a", "T", 0, None, 0, 0, "ok")  # type: ignore[arg-type]
    with pytest.raises(RecordWriteError, match="queue_offset"):
        w.close()


def test_background_write_error_reaches_the_recording_thread(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "bad", {})
    w = rec.events_writer("w0", rows_per_file=2)
    with pytest.raises(RecordWriteError, match="outcome"):
        for i in range(1000):  # the flusher fails on the first batch; the recorder hears of it on a later one
            w.record_send(f"k{i}", "T", 0, i, i, i, "nope")
            time.sleep(0.001)
    with pytest.raises(RecordWriteError, match="dropped"):
        w.close()


def test_recording_after_close_raises(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "closed", {})
    w = rec.events_writer("w0")
    m = rec.metrics_writer()
    rec.finish()
    with pytest.raises(ValueError, match="closed"):
        w.record_send("a", "T", 0, 0, 0, 0, "ok")
    with pytest.raises(ValueError, match="closed"):
        m.record("send_tps", 1.0)


def test_loaders_name_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(NotARunDirError, match=r"no meta\.json"):
        load_events(tmp_path)
    with pytest.raises(NotARunDirError, match="no such directory"):
        load_meta(tmp_path / "missing")
    with pytest.raises(NotARunDirError):
        RunRecord.open(tmp_path)


def test_load_events_on_a_run_without_events_is_an_error(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "empty", {})
    with pytest.raises(RunRecordError, match="no events"):
        load_events(rec.run_dir)


def test_wall_clock_is_on_the_wall_scale_and_monotonic() -> None:
    clock = WallClock()
    before = time.time_ns()
    readings = [clock.now_ns() for _ in range(1000)]
    after = time.time_ns()
    assert readings == sorted(readings)
    # Same scale as time.time_ns: generous bounds (the anchor error is microseconds; this is not a timing test).
    assert before - 10**9 < readings[0] and readings[-1] < after + 10**9
    assert clock.anchor_error_ns >= 0
    p = time.perf_counter_ns()
    assert clock.from_perf_ns(p) == p + clock.offset_ns


def test_writer_uses_a_real_thread_under_gevent_monkey_patching(tmp_path: Path) -> None:
    # In a subprocess: monkey patching is process-wide and would leak into the other tests.
    code = f"""
from gevent import monkey; monkey.patch_all()
import _thread
from harness.records import RunRecord, load_events
from harness.records import writer
start, _ = writer._native_thread_api()
assert start is not _thread.start_new_thread, "expected the unpatched _thread"
rec = RunRecord.create({str(tmp_path)!r}, "gevent", {{}})
w = rec.events_writer("w0", rows_per_file=100)
for i in range(1000):
    w.record_send(f"k{{i}}", "T", 0, i, i, i, "ok")
rec.finish()
print(load_events(rec.run_dir).num_rows)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1000"


def test_a_writer_copied_into_a_forked_child_refuses_to_write_and_does_not_hang_exit(tmp_path: Path) -> None:
    code = f"""
import os, sys
from harness.records import RunRecord, load_events
rec = RunRecord.create({str(tmp_path)!r}, "fork", {{}})
w = rec.events_writer("w0", rows_per_file=5)
w.record_send("parent-0", "T", 0, 0, 0, 0, "ok")
pid = os.fork()
if pid == 0:
    try:
        for i in range(10):
            w.record_send(f"child-{{i}}", "T", 0, i, i, i, "ok")
    except RuntimeError as e:
        assert "forked" in str(e)
        sys.exit(0)  # runs atexit, which must not wait for the parent's flusher thread
    sys.exit(3)
_, status = os.waitpid(pid, 0)
rec.finish()
print(os.waitstatus_to_exitcode(status), load_events(rec.run_dir)["key"].to_pylist())
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 ['parent-0']"


def test_one_bad_batch_does_not_lose_the_batches_after_it(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "bad", {})
    w = rec.events_writer("w0", rows_per_file=2, background=False)
    w.record_send("a", "T", 0, 0, 0, 0, "ok")
    w.record_send("b", "T", 0, 1, 1, 1, "ok")  # first batch: fine
    w.record_send("c", "T", 0, 2, 2, 2, "bogus")
    with pytest.raises(RecordWriteError, match="bogus"):
        w.record_send("d", "T", 0, 3, 3, 3, "ok")  # second batch: dropped, and said so
    w.record_send("e", "T", 0, 4, 4, 4, "ok")
    with pytest.raises(RecordWriteError, match="dropped"):
        w.close()  # the third, partial batch is written, and close() still says that a batch was lost
    assert load_events(rec.run_dir, columns=["key"])["key"].to_pylist() == ["a", "b", "e"]
