"""The run summary, from a record whose latencies are known."""

import numpy as np

from harness.checker import check_run
from harness.records import RunRecord
from scenarios.summary import format_summary, percentiles_ms, summarize

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def test_percentiles_are_nearest_rank():
    p = percentiles_ms(np.arange(1, 101, dtype=np.int64) * MS)
    assert p is not None
    assert (p["p50"], p["p90"], p["p99"], p["p99.9"], p["max"], p["n"]) == (50.0, 90.0, 99.0, 100.0, 100.0, 100.0)
    assert percentiles_ms(np.array([], dtype=np.int64)) is None


def _record(tmp_path, phases=None):
    rec = RunRecord.create(tmp_path, "unit", {"rate": 100.0, "message_size": 10, "batch": 1, "record": True})
    w = rec.events_writer("w0")
    for i in range(1, 101):  # send i takes i ms, starts 2 ms after its intended time, is received 10 ms later
        start = T0 + i * 10 * MS
        topic = "A" if i <= 50 else "B"
        w.record_send(f"k{i}", topic, 0, i, start, start + i * MS, "ok", 0, 10, intended_ns=start - 2 * MS)
        w.record_receive(f"k{i}", topic, 0, i, start + 10 * MS, start + 10 * MS, born_ns=start, store_ns=start)
    w.record_send("k-lost", "A", 0, 200, T0, T0 + MS, "unknown", -1, 10)
    w.close()
    rec.finish(results={"drain_at_end": {"waited_s": 0.5, "reason": "caught up"}}, phases=phases or [])
    return rec.run_dir


def test_summary_figures(tmp_path):
    run = _record(tmp_path)
    check = check_run(run).to_json()
    s = summarize(run, check)
    c = s["counts"]
    assert (c["attempted"], c["ok"], c["unknown"], c["received"]) == (101, 100, 1, 100)
    assert s["latency_ms"]["send"]["p50"] == 50.0 and s["latency_ms"]["send"]["max"] == 100.0
    assert s["latency_ms"]["publish_delay"]["p99"] == 2.0
    assert s["latency_ms"]["end_to_end"]["p50"] == 10.0 and s["latency_ms"]["end_to_end"]["n"] == 100
    # 100 acknowledged sends spanning 10 ms .. 1100 ms (the last one ends at 1000 + 100 ms).
    assert abs(c["send_rate"] - 100 / 1.09) < 1e-6
    text = format_summary(s)
    assert "check   VALID" in text and "end to end" in text and "caught up" in text
    assert len(text.splitlines()) <= 24  # one screen


def test_summary_per_phase(tmp_path):
    run = _record(tmp_path, phases=[{"label": "q=1", "topics": [["A", 1]]}, {"label": "q=2", "topics": [["B", 2]]}])
    s = summarize(run)
    a, b = s["phases"]
    assert (a["label"], a["queues"], a["counts"]["ok"], b["counts"]["ok"]) == ("q=1", 1, 50, 50)
    assert b["latency_ms"]["send"]["p50"] == 75.0
    assert "phase q=2" in format_summary(s) and "check   not run" in format_summary(s)
