"""chaos/replication_matrix.py: the cells of broker x flush mode x fault x replication mode, and their table."""

from __future__ import annotations

from chaos.experiment import FlushMode
from chaos.replication import ReplicationFault, ReplicationResult
from chaos.replication_matrix import ReplicationMatrixSpec, format_table, gate_failures, summary_rows
from chaos.replication_verdict import ReplicationMode, ReplicationVerdict


def test_cells_cross_flush_modes_faults_and_replication_modes_with_distinct_seeds() -> None:
    spec = ReplicationMatrixSpec(modes=(ReplicationMode.SYNC,), flushes=(FlushMode.SYNC, FlushMode.ASYNC),
                                 faults=(ReplicationFault.MASTER_DISK_DESTROYED, ReplicationFault.SLAVE_PAUSED),
                                 seed=7, impls=("reference", "rocketmq"))
    cells = spec.cells()
    assert [(c.broker_impl, c.flush, c.fault) for c in cells[:4]] == [
        ("reference", FlushMode.SYNC, ReplicationFault.MASTER_DISK_DESTROYED),
        ("reference", FlushMode.SYNC, ReplicationFault.SLAVE_PAUSED),
        ("reference", FlushMode.ASYNC, ReplicationFault.MASTER_DISK_DESTROYED),
        ("reference", FlushMode.ASYNC, ReplicationFault.SLAVE_PAUSED)]
    assert len(cells) == 8 and len({c.scenario for c in cells}) == 8
    assert [c.seed for c in cells[:4]] == [7, 8, 9, 10] and [c.seed for c in cells[4:]] == [7, 8, 9, 10]


def test_the_gate_and_the_table_name_the_flush_mode_and_list_findings_apart() -> None:
    spec = ReplicationMatrixSpec(modes=(ReplicationMode.SYNC,), flushes=(FlushMode.SYNC,),
                                 faults=(ReplicationFault.MASTER_POWER_LOSS,))
    (cell,) = spec.cells()
    failed = ReplicationResult(cell, None, verdict=ReplicationVerdict(
        ok=False, mode="SYNC_MASTER", acknowledged=10, absent=1, absent_promised=1, absent_master_only=0,
        absent_below_slave_end=0, lost_share=0.1, lag_bytes=0, unreplicated_bytes=0, violations=["lost one"]))
    assert gate_failures([failed]) == ["reference/master_power_loss/sync/sync: lost one"]
    found = ReplicationResult(cell, None, verdict=ReplicationVerdict(
        ok=True, mode="SYNC_MASTER", acknowledged=10, absent=1, absent_promised=1, absent_master_only=0,
        absent_below_slave_end=1, lost_share=0.1, lag_bytes=0, unreplicated_bytes=0, diverged=1,
        findings=["the logs diverged"]))
    assert gate_failures([found]) == []
    table = format_table(summary_rows([found]))
    assert "reference/master_power_loss/sync/sync: finding: the logs diverged" in table
