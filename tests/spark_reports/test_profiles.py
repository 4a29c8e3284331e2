"""The profiles report's pure parts: which runs it takes, the power-cut figures, and the sentences."""

from __future__ import annotations

from pathlib import Path

from spark_reports.jobs.profiles import (
    MIB,
    STALL_MS,
    ProfileRow,
    counter_delta,
    experiment_runs,
    power_cuts,
    ratio,
    stall_counts,
    trade_sentence,
)
from spark_reports.run_records import RunInfo


def _run(run_id: str, tag: dict | None) -> RunInfo:
    meta = {"run_id": run_id} if tag is None else {"run_id": run_id, "profiles_experiment": tag}
    return RunInfo(run_id, Path("/nonexistent") / run_id, meta)


def test_the_newest_experiment_is_taken_and_a_rerun_step_wins() -> None:
    runs = [
        _run("r1", {"id": "20260101T000000-aa", "profile": "default", "workload": "throughput"}),
        _run("r2", {"id": "20260102T000000-bb", "profile": "default", "workload": "throughput"}),
        _run("r3", {"id": "20260102T000000-bb", "profile": "seed-qa", "workload": "latency"}),
        _run("r4", {"id": "20260102T000000-bb", "profile": "default", "workload": "throughput"}),
        _run("r5", None),
    ]
    experiment, chosen = experiment_runs(runs)
    assert experiment == "20260102T000000-bb"
    assert {k: r.run_id for k, r in chosen.items()} == {("default", "throughput"): "r4", ("seed-qa", "latency"): "r3"}
    assert experiment_runs([_run("x", None)]) == (None, {})


def test_power_cuts_from_chaos_json() -> None:
    chaos = {"verdict": {"per_crash": [
        {"cycle": 0, "lost_log_bytes": 3137540, "window_bytes": 3137540},
        {"cycle": 1, "lost_log_bytes": 282440, "window_bytes": 2998776},
        {"cycle": 2, "lost_log_bytes": 0, "window_bytes": -1},  # RocketMQ: no flushed offset, window unknown
    ]}}
    assert power_cuts(chaos) == ([3137540, 282440, 0], [3137540, 2998776])
    assert power_cuts({}) == ([], [])


def test_ratio() -> None:
    assert ratio(3.0, 2.0) == "1.5×"
    assert ratio(None, 2.0) == "n/a" and ratio(1.0, None) == "n/a"
    assert ratio(0.0, 0.0) == "same" and ratio(1.0, 0.0) == "n/a (default 0)"
    # a base below the figure's shown resolution gives no multiple (0.9 MiB is not "760×" of 1.2 KiB)
    assert ratio(0.9, 0.0012, floor=0.005) == "n/a (default ≈ 0)"
    assert ratio(0.001, 0.0012, floor=0.005) == "same"
    assert ratio(3.0, 2.0, floor=0.005) == "1.5×"


def test_stalls_and_counters() -> None:
    assert stall_counts([1.0, STALL_MS, STALL_MS - 0.1, 500.0]) == (2, 4)
    assert counter_delta([10.0, 12.0, 19.0]) == 9.0
    assert counter_delta([10.0]) is None


def test_the_sentence_is_computed_from_the_measurements() -> None:
    base = ProfileRow("default", throughput=5000.0, p99_ms=10.0, p999_ms=40.0, stall_windows=1, windows=30,
                      dirty_peak=100 * MIB, cut_median=2 * MIB, cuts=3)
    other = ProfileRow("rocketmq-os", throughput=4000.0, p99_ms=25.0, p999_ms=40.0, stall_windows=4, windows=30,
                       dirty_peak=400 * MIB, cut_median=3 * MIB, cuts=3)
    s = trade_sentence(other, base)
    assert s.startswith("rocketmq-os: p99 send latency 25.00 ms (2.5× default)")
    assert "p99.9 40.00 ms (1× default)" in s
    assert "4 of 30 half-seconds with a send ≥ 100 ms" in s
    assert "throughput 4,000 msg/s (0.8× default)" in s
    assert "Dirty peaking at 400.0 MiB (4× default)" in s
    assert "a power cut took 3.00 MiB of acknowledged data (median of 3) (1.5× default)" in s
    own = trade_sentence(base, base)  # the base is not compared with itself
    assert "×" not in own and own.startswith("default: p99 send latency 10.00 ms,")


def test_a_missing_workload_reads_n_a() -> None:
    s = trade_sentence(ProfileRow("seed-qa", p99_ms=5.0), ProfileRow("default", p99_ms=None))
    assert "p99 send latency 5.00 ms (n/a default)" in s and "throughput n/a (n/a default)" in s
