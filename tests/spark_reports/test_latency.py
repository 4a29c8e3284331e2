"""The latency report finds the constructed percentiles per run and per 10 s window, from raw events."""

import csv
import json
from pathlib import Path

import pytest

from spark_reports.jobs.latency import WINDOW_NS, Metric, compute
from spark_reports.percentiles import LABELS
from spark_reports.run_records import discover_runs

VALUE_LABELS = (*LABELS, "max")


def _ns(us: str) -> int:
    return round(float(us) * 1000)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_run_percentiles_equal_the_constructed_answers(reports, synth):
    rows = _read(reports.out_dir / "latency" / "latency_summary.csv")
    assert len(rows) == len(synth.expected) * len(Metric)
    for row in rows:
        expected = synth.expected[row["run_id"]].latency[row["metric"]]
        assert int(row["samples"]) == expected["samples"]
        assert {lab: _ns(row[f"{lab}_us"]) for lab in VALUE_LABELS} == {lab: expected[lab] for lab in VALUE_LABELS}


def test_window_percentiles_equal_the_constructed_answers(reports, synth):
    rows = _read(reports.out_dir / "latency" / "latency_windows.csv")
    seen = set()
    for row in rows:
        window = str(int(row["window_start_s"]) // (WINDOW_NS // 10**9))
        expected = synth.expected[row["run_id"]].latency[row["metric"]]["windows"][window]
        assert int(row["samples"]) == expected["samples"]
        assert {lab: _ns(row[f"{lab}_us"]) for lab in VALUE_LABELS} == {lab: expected[lab] for lab in VALUE_LABELS}
        seen.add((row["run_id"], row["metric"], window))
    wanted = {(r, m, w) for r, e in synth.expected.items() for m, stats in e.latency.items() for w in stats["windows"]}
    assert seen == wanted


def test_run_p99_is_not_the_mean_of_window_p99s(reports, synth):
    # The constructed latencies rise window by window, so averaging windows would give a different answer.
    for run_id, expected in synth.expected.items():
        stats = expected.latency["send_latency"]
        mean_of_windows = sum(w["p99"] for w in stats["windows"].values()) / len(stats["windows"])
        assert stats["p99"] != pytest.approx(mean_of_windows, rel=0.01)
        summary = [r for r in _read(reports.out_dir / "latency" / "latency_summary.csv")
                   if r["run_id"] == run_id and r["metric"] == "send_latency"]
        assert _ns(summary[0]["p99_us"]) == stats["p99"]


def test_unmatched_receives_are_counted_not_joined(reports, synth):
    rows = _read(reports.out_dir / "latency" / "latency_summary.csv")
    for row in rows:
        if row["metric"] == Metric.SEND_TO_CONSUME:
            assert int(row["unmatched"]) == synth.expected[row["run_id"]].latency[row["metric"]]["unmatched"]


def test_report_page_has_cdf_and_window_figures_for_every_metric(reports, synth):
    out = reports.out_dir / "latency"
    page = (out / "index.html").read_text(encoding="utf-8")
    for metric in Metric:
        assert f'src="cdf_{metric.value}.png"' in page
        assert f'src="windows_{metric.value}.png"' in page
        assert (out / f"cdf_{metric.value}.png").stat().st_size > 1000
    cdf = _read(out / "latency_cdf.csv")
    assert {(r["run_id"], r["metric"]) for r in cdf} == {(run, m.value) for run in synth.expected for m in Metric}


def _jsonl_run(root: Path) -> Path:
    """A hand-written run in events.jsonl form: a retried send, a failed send, a stray delivery."""
    run = root / "20260102T000000-hand-abcdef"
    run.mkdir(parents=True)
    t0 = 1_000_000_000_000_000_000
    meta = {"schema_version": 1, "run_id": run.name, "scenario": "hand", "started_at_ns": t0,
            "broker": {"flushDiskType": "SYNC_FLUSH"}, "sysctl": {"profile": None}, "host": {"cores": 2}}
    (run / "meta.json").write_text(json.dumps(meta), encoding="utf-8")

    def ev(op, key, intended, start, end, outcome):
        return {"op": op, "key": key, "topic": "T", "queue_id": 0, "queue_offset": -1, "intended_ns": t0 + intended,
                "start_ns": t0 + start, "end_ns": t0 + end, "outcome": outcome, "code": -1, "bytes": 10,
                "worker": "w0", "born_ns": -1, "store_ns": -1}

    rows = [
        ev("send", "a", 0, 100, 1_100, "unknown"),      # first attempt times out …
        ev("send", "a", 2_000, 2_000, 2_500, "ok"),     # … the retry is acknowledged after 500 ns
        ev("send", "b", 0, 40, 1_040, "fail"),          # refused: no send latency, but a publish delay of 40
        ev("send", "c", 11 * 10**9, 11 * 10**9 + 7, 11 * 10**9 + 307, "ok"),  # second window: latency 300
        ev("receive", "a", 9_000, 9_000, 9_100, "ok"),  # 9,000 after the FIRST send start of "a"
        ev("receive", "c", 0, 0, 11 * 10**9 + 1_007, "ok"),
        ev("receive", "zz", 0, 0, 5_000, "ok"),          # never sent: unmatched
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return run


def test_hand_written_jsonl_run(spark, tmp_path):
    run = _jsonl_run(tmp_path)
    stats = {(s.metric, s.window): s for s in compute(spark, discover_runs(run))}
    send = stats[(Metric.SEND, None)]
    assert (send.samples, send.value("p50"), send.maximum) == (2, 300, 500)
    assert stats[(Metric.SEND, 0)].maximum == 500 and stats[(Metric.SEND, 1)].maximum == 300
    delay = stats[(Metric.PUBLISH_DELAY, None)]
    assert (delay.samples, delay.value("p50"), delay.maximum) == (4, 7, 100)
    e2e = stats[(Metric.SEND_TO_CONSUME, None)]
    assert (e2e.samples, e2e.unmatched, e2e.value("p50"), e2e.maximum) == (2, 1, 1_000, 9_000)
