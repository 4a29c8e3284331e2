"""The matrix's cells, summary table and gate (no processes: results are built by hand)."""

from __future__ import annotations

from pathlib import Path

from chaos.experiment import CycleRecord, ExperimentResult, ExperimentSpec, FaultName, FlushMode
from chaos.matrix import MatrixSpec, format_table, gate_failures, summary_rows
from chaos.verdict import Verdict


def _result(fault: FaultName, flush: FlushMode, ok: bool = True, skipped: str | None = None) -> ExperimentResult:
    spec = ExperimentSpec(fault=fault, flush=flush, cycles=2)
    r = ExperimentResult(spec, None if skipped else Path(f"/runs/{fault.value}-{flush.short}"), skipped=skipped)
    if skipped is None:
        r.cycles = [CycleRecord(cycle=i, kind=fault.value, fault_ns=i, restored_ns=i + 1, recovery_s=0.5 + i,
                                flushed_offset=100, written_bound=300) for i in range(2)]
        r.verdict = Verdict(ok=ok, violations=[] if ok else ["3 acknowledged messages missing"])
    return r


def test_cells_cover_every_combination_with_distinct_seeds():
    spec = MatrixSpec(flushes=(FlushMode.SYNC, FlushMode.ASYNC), faults=(FaultName.KILL9, FaultName.PAUSE),
                      profiles=("default", "rocketmq-os"), cycles=3, seed=10)
    cells = spec.cells()
    assert len(cells) == 8
    assert len({(c.fault, c.flush, c.profile) for c in cells}) == 8
    assert len({c.seed for c in cells}) == 8
    assert all(c.cycles == 3 for c in cells)


def test_table_lists_every_column_the_violations_and_the_run_records():
    results = [_result(FaultName.KILL9, FlushMode.ASYNC),
               _result(FaultName.POWER_LOSS, FlushMode.SYNC, ok=False),
               _result(FaultName.DISK_FILL, FlushMode.SYNC, skipped="needs root")]
    rows = summary_rows(results)
    assert [r["verdict"] for r in rows] == ["ok", "FAIL", "skipped"]
    assert rows[0]["window_bytes_max"] == 200 and rows[0]["recovery_s_median"] == 1.0
    text = format_table(rows)
    for header in ("cycles", "acked", "lost", "lost B", "unflushed B (max)", "dup", "recovered", "unexpected",
                   "recovery s (med)", "verdict"):
        assert header in text
    assert "3 acknowledged messages missing" in text
    assert "skipped: needs root" in text
    assert "/runs/kill9-async" in text


def test_the_gate_fails_on_a_failed_cell_and_on_a_skipped_one_only_when_asked():
    ok, bad = _result(FaultName.PAUSE, FlushMode.ASYNC), _result(FaultName.KILL9, FlushMode.SYNC, ok=False)
    skipped = _result(FaultName.DISK_FILL, FlushMode.ASYNC, skipped="no loop device")
    assert gate_failures([ok, skipped]) == []
    assert gate_failures([ok, skipped], require_all=True) == ["disk_fill/async/default: skipped (no loop device)"]
    assert gate_failures([ok, bad]) == ["kill9/sync/default: 3 acknowledged messages missing"]
