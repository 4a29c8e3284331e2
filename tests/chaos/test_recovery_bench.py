"""chaos/recovery_bench.py: the four restarts per log size, on the reference broker and on Apache RocketMQ."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.recovery_bench import RecoveryRow, bench_log_size, format_rows
from harness import rocketmq
from harness.records import RunRecord, load_faults, load_meta

CASES = ["clean", "kill9-flushed", "kill9-tail", "kill9-no-checkpoint"]


def test_an_unknown_unflushed_tail_is_printed_as_unknown() -> None:
    text = format_rows([RecoveryRow(32 << 20, "kill9-tail", -1, True, 1.5),
                        RecoveryRow(32 << 20, "kill9-tail", 4096, True, 1.5)])
    lines = text.splitlines()
    assert "unknown" in lines[1] and lines[2].split()[2] == "4"


def _bench(tmp_path: Path, impl: rocketmq.BrokerImpl) -> tuple[list[RecoveryRow], Path]:
    record = RunRecord.create(tmp_path / "runs", "recovery", {"broker_impl": impl}, ["test"])
    rows = bench_log_size(6 << 20, work_dir=tmp_path, file_bytes=4 << 20, body=4 << 10, burst_bytes=1 << 20,
                          record=record, impl=impl)
    record.finish(results={"recovery": [r.to_json() for r in rows]})
    return rows, record.run_dir


@pytest.mark.e2e
def test_reference_broker_rows_and_record(tmp_path: Path) -> None:
    rows, run_dir = _bench(tmp_path, "reference")
    assert [r.case for r in rows] == CASES
    assert all(r.recovery_s > 0 and r.log_bytes >= 6 << 20 for r in rows)
    assert rows[1].unflushed_bytes == 0 and rows[3].checkpoint is False
    assert load_meta(run_dir)["broker_impl"].startswith("reference_broker")
    assert [f["kind"] for f in load_faults(run_dir)] == ["kill9"] * 3
    # The store timed its own start: every restart reports its phases, and the recovery work is among them.
    for r in rows:
        assert {"loadCommitLog", "recoverConsumeQueues", "recoverCommitLog", "dispatchTail"} <= set(r.phases), r
        assert r.work_s is not None and 0 <= r.work_s < r.recovery_s
    assert "truncateIndex" in rows[2].phases and "truncateIndex" not in rows[0].phases  # only after a crash
    recorded = load_meta(run_dir)["results"]["recovery"]
    assert recorded[2]["phases"] == rows[2].phases and recorded[2]["work_s"] == rows[2].work_s


@pytest.mark.e2e
@pytest.mark.slow
def test_rocketmq_rows_and_record(tmp_path: Path, rocketmq_home: Path) -> None:
    rows, run_dir = _bench(tmp_path, "rocketmq")
    assert [r.case for r in rows] == CASES
    assert all(r.recovery_s > 0 for r in rows)
    assert all(r.unflushed_bytes == -1 for r in rows[1:]), "4.9.8 reports no flushed offset"
    assert load_meta(run_dir)["broker_impl"] == "V4_9_8"
    assert all(r.phases == {} and r.work_s is None for r in rows), "4.9.8 reports no start phases"
