"""This module owns the kill -9 fault: under load, SIGKILL the broker at a random moment, restart it on the
same store, keep producing and consuming; N cycles.

What it shows (docs/claims.md): a process crash loses nothing acknowledged, even with ASYNC_FLUSH, because
written data sits in the page cache, which outlives the process; only a half-written last record may be cut
by recovery. Each cycle records the written and flushed offsets sampled right before the kill, the broker's
restart time and the commit-log end it recovered to.
"""

from __future__ import annotations

from chaos.experiment import Cell, CycleRecord, Fault, FaultName
from harness.records import FaultKind


class Kill9(Fault):
    name = FaultName.KILL9

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        before = cell.status()
        in_flight = cell.workload.in_flight
        t_kill = cell.clock.now_ns()
        cell.broker.kill()
        rec = CycleRecord(cycle=i, kind=self.name.value, fault_ns=t_kill,
                          written_offset=before.max_offset if before else -1,
                          flushed_offset=before.flushed_offset if before else -1)
        # New sends wait until the recovered end has been read (meanwhile they would only be refused).
        cell.settle_after_kill(rec, before)
        cell.record.add_fault(FaultKind.KILL9, cell.broker.name, ts_ns=t_kill, cycle=i,
                              written_offset=rec.written_offset, flushed_offset=rec.flushed_offset,
                              written_bound=rec.written_bound, in_flight=in_flight)
        cell.restart_after_crash(rec)
        return rec
