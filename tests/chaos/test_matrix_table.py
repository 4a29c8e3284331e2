"""The matrix's cells, summary table, gate and findings about RocketMQ (no processes: results are built by
hand)."""

from __future__ import annotations

from pathlib import Path

import click

from chaos.cli import main as chaos_main
from chaos.experiment import CycleRecord, ExperimentResult, ExperimentSpec, FaultName, FlushMode
from chaos.matrix import MatrixSpec, format_table, gate_failures, reproduce_command, rocketmq_findings, summary_rows
from chaos.verdict import Verdict
from harness.records.findings import FindingKind
from harness.rocketmq import BrokerImpl


def _result(fault: FaultName, flush: FlushMode, ok: bool = True, skipped: str | None = None,
            impl: BrokerImpl = "reference", error: str | None = None) -> ExperimentResult:
    spec = ExperimentSpec(fault=fault, flush=flush, cycles=2, broker_impl=impl, seed=7)
    r = ExperimentResult(spec, None if skipped else Path(f"/runs/{fault.value}-{flush.short}"), skipped=skipped,
                         error=error, broker_version="V4_9_8" if impl == "rocketmq" else "reference_broker 0")
    if skipped is None:
        r.cycles = [CycleRecord(cycle=i, kind=fault.value, fault_ns=i, restored_ns=i + 1, recovery_s=0.5 + i,
                                flushed_offset=100, written_bound=300) for i in range(2)]
        r.verdict = Verdict(ok=ok, violations=[] if ok else ["3 acknowledged messages missing"], absent=0 if ok else 3)
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
    assert gate_failures([ok, skipped], require_all=True) == [
        "reference/disk_fill/async/default: skipped (no loop device)"]
    assert gate_failures([ok, bad]) == ["reference/kill9/sync/default: 3 acknowledged messages missing"]


def test_cells_run_each_broker_with_the_same_seeds():
    spec = MatrixSpec(flushes=(FlushMode.SYNC,), faults=(FaultName.KILL9, FaultName.PAUSE), cycles=1, seed=3,
                      impls=("reference", "rocketmq"), rocketmq_home=Path("/opt/rmq"))
    cells = spec.cells()
    assert [(c.broker_impl, c.fault, c.seed) for c in cells] == [
        ("reference", FaultName.KILL9, 3), ("reference", FaultName.PAUSE, 4),
        ("rocketmq", FaultName.KILL9, 3), ("rocketmq", FaultName.PAUSE, 4)]
    assert all(c.rocketmq_home == Path("/opt/rmq") for c in cells)
    assert cells[0].scenario == "chaos-kill9-sync-default" and cells[2].scenario == "chaos-kill9-sync-default-rocketmq"


def test_a_rocketmq_violation_is_a_finding_not_a_gate_failure():
    lost = _result(FaultName.KILL9, FlushMode.SYNC, ok=False, impl="rocketmq")
    broken = _result(FaultName.PAUSE, FlushMode.SYNC, ok=False, impl="rocketmq", error="broker did not start")
    fine = _result(FaultName.PAUSE, FlushMode.ASYNC, impl="rocketmq")
    assert gate_failures([lost, fine]) == []
    assert gate_failures([broken]) == ["rocketmq/pause/sync/default: broker did not start"]
    (finding,) = rocketmq_findings([lost, broken, fine, _result(FaultName.KILL9, FlushMode.SYNC, ok=False)])
    assert finding.kind is FindingKind.LOSS and finding.broker == "V4_9_8"
    assert finding.key == "chaos/kill9/sync/default: loss"
    assert "3 acknowledged messages missing" in finding.detail and finding.run_dir == "/runs/kill9-sync"
    assert finding.reproduce == reproduce_command(lost.spec) == (
        "python -m chaos kill9 --broker-impl rocketmq --flush sync --profile default --cycles 2 --gap 0.5,2 "
        "--size 1024 --in-flight 32 --seed 7")
    _, _, _, name, *args = finding.reproduce.split()  # "python -m chaos kill9 ...": the chaos CLI accepts it
    command = chaos_main.get_command(click.Context(chaos_main), name)  # type: ignore[attr-defined]
    with command.make_context(name, args) as ctx:
        assert ctx.params["seed"] == 7 and ctx.params["in_flight"] == 32 and ctx.params["broker_impl"] == "rocketmq"
    # the kind comes from the verdict's figures: nothing absent but a cycle that did not recover is a stall
    stalled = _result(FaultName.PAUSE, FlushMode.SYNC, ok=False, impl="rocketmq")
    assert stalled.verdict is not None
    stalled.verdict = Verdict(ok=False, violations=["pause cycle 1: no send acknowledged within 20 s"])
    stalled.cycles[1].ok = False
    (stall,) = rocketmq_findings([stalled])
    assert stall.kind is FindingKind.STALL and stall.key == "chaos/pause/sync/default: stall"


def test_the_table_names_the_broker_of_each_row():
    rows = summary_rows([_result(FaultName.KILL9, FlushMode.SYNC), _result(FaultName.KILL9, FlushMode.SYNC,
                                                                           impl="rocketmq", ok=False)])
    text = format_table(rows)
    assert text.splitlines()[0].startswith("broker")
    assert "rocketmq/kill9/sync/default: 3 acknowledged messages missing" in text
