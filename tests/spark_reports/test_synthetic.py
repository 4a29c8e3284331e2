"""The synthetic generator's claims hold on the files it writes (checked with pyarrow, without Spark)."""

import json

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner

from spark_reports.cli import cli
from spark_reports.percentiles import LABELS, PERCENTILES, nearest_rank
from spark_reports.synthetic import LatencyShape, SynthRunSpec, default_specs, generate
from spark_reports.synthetic_check import Delivery, Send, check_history


def test_check_history_counts_like_total_queue():
    sends = [Send("a", "ok", 10), Send("b", "ok", 20), Send("c", "unknown", 30), Send("d", "fail", 40),
             Send("e", "unknown", 50), Send("f", "ok", 60), Send("f", "unknown", 60)]
    deliveries = [Delivery("a", "T", 0, 0), Delivery("c", "T", 0, 1), Delivery("a", "T", 0, 0),
                  Delivery("x", "T", 2, 5), Delivery("f", "T", 1, 3), Delivery("b", "T", 1, 2)]
    check = check_history(sends, deliveries)
    assert {k: check[k] for k in ("attempted", "acknowledged", "failed", "unknown", "lost", "lost_bytes",
                                   "unexpected", "duplicated", "recovered")} == {
        "attempted": 6, "acknowledged": 3, "failed": 1, "unknown": 2, "lost": 0, "lost_bytes": 0,
        "unexpected": 1, "duplicated": 1, "recovered": 1}
    assert check["order_violations"] == {"T/1": 1}  # b (offset 2) delivered after f (offset 3)
    assert check["valid"] is False  # an unexpected message invalidates the run
    lossy = check_history(sends[:2], [Delivery("a", "T", 0, 0)], allow_loss=True)
    assert (lossy["lost"], lossy["lost_bytes"], lossy["samples"]["lost"], lossy["valid"]) == (1, 20, ["b"], True)
    assert check_history(sends[:2], [Delivery("a", "T", 0, 0)])["valid"] is False


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("small")
    spec = SynthRunSpec("t", "ASYNC_FLUSH", "power_loss", "p", True, messages=600, failed=3, unknown=6,
                        recovered=4, lost=5, duplicated=7, unexpected=2, windows=3,
                        send=LatencyShape(1_000, 50_000))
    return spec, next(iter(generate(out, [spec]).values()))


def test_check_json_holds_the_chosen_counts(small):
    spec, expected = small
    check = json.loads((expected.path / "check.json").read_text())
    assert {k: check[k] for k in ("attempted", "failed", "unknown", "lost", "duplicated", "recovered",
                                   "unexpected")} == {
        "attempted": spec.messages, "failed": spec.failed, "unknown": spec.unknown, "lost": spec.lost,
        "duplicated": spec.duplicated, "recovered": spec.recovered, "unexpected": spec.unexpected}
    assert check["acknowledged"] == 600 - 3 - 6
    assert check["valid"] is False  # two unexpected deliveries, though this async power-loss run allows loss


def test_constructed_percentiles_hold_on_the_written_events(small):
    _, expected = small
    table = pq.read_table(expected.path / "events").to_pylist()
    sends = [r for r in table if r["op"] == "send"]
    latencies = sorted(r["end_ns"] - r["start_ns"] for r in sends if r["outcome"] == "ok")
    delays = sorted(r["start_ns"] - r["intended_ns"] for r in sends)
    first_start = {r["key"]: r["start_ns"] for r in sends}
    e2e = sorted(r["end_ns"] - first_start[r["key"]] for r in table if r["op"] == "receive" and r["key"] in first_start)
    for metric, values in (("send_latency", latencies), ("publish_delay", delays), ("send_to_consume_latency", e2e)):
        stats = expected.latency[metric]
        assert stats["samples"] == len(values)
        assert [stats[lab] for lab in LABELS] == [nearest_rank(values, p) for p in PERCENTILES]
        assert stats["max"] == values[-1]
    assert len(table) == expected.event_rows


def test_every_sample_lands_in_its_window(small):
    _, expected = small
    meta = json.loads((expected.path / "meta.json").read_text())
    rows = pq.read_table(expected.path / "events").to_pylist()
    per_window: dict[str, list[int]] = {}
    for r in rows:
        if r["op"] == "send" and r["outcome"] == "ok":
            per_window.setdefault(str((r["end_ns"] - meta["started_at_ns"]) // 10**10), []).append(
                r["end_ns"] - r["start_ns"])
    windows = expected.latency["send_latency"]["windows"]
    assert set(per_window) == set(windows)
    for w, values in per_window.items():
        values.sort()
        assert windows[w]["p99"] == nearest_rank(values, 0.99)
        assert windows[w]["max"] == values[-1]


def test_default_specs_size_and_synth_command(tmp_path):
    specs = default_specs(40_000)
    assert len(specs) == 4 and {s.flush_mode for s in specs} == {"ASYNC_FLUSH", "SYNC_FLUSH"}
    result = CliRunner().invoke(cli, ["synth", "--out", str(tmp_path), "--events", "2000"])
    assert result.exit_code == 0, result.output
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert len(expected) == 4
    assert 1800 <= sum(e["event_rows"] for e in expected.values()) <= 2200


def test_spec_validation():
    with pytest.raises(ValueError):
        SynthRunSpec("bad", "SYNC_FLUSH", None, None, False, messages=10, unknown=1, recovered=2).validate()
    with pytest.raises(ValueError):
        too_slow = LatencyShape(2_000_000_000, 0)
        SynthRunSpec("bad", "SYNC_FLUSH", None, None, False, messages=10, send=too_slow).validate()
