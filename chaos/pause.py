"""This module owns the pause fault: SIGSTOP the broker for a random time, then SIGCONT (Jepsen's hammer-time,
OpenChaos's suspend). Clients time out and recover; a send that timed out is recorded "unknown" (the request
was written and the broker may store it once it runs again), never "lost": the checker counts it as
``recovered`` if it shows up. Nothing acknowledged may be lost, under either flush mode.

The pause lengths straddle the producer's send timeout (3 s by default), so some cycles end before any
client gives up and others make every send in flight time out.
"""

from __future__ import annotations

import time
from typing import Any

from chaos.experiment import Cell, CycleRecord, Fault, FaultName
from harness.records import FaultKind


class Pause(Fault):
    name = FaultName.PAUSE

    def __init__(self, pause_s: tuple[float, float] = (0.5, 4.5)) -> None:
        self.pause_s = pause_s

    def params(self) -> dict[str, Any]:
        return {"pause_s": list(self.pause_s)}

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        duration = cell.rng.uniform(*self.pause_s)
        before = cell.status()
        t0 = cell.clock.now_ns()
        cell.broker.pause()
        cell.record.add_fault(FaultKind.PAUSE, cell.broker.name, ts_ns=t0, cycle=i, planned_s=round(duration, 3),
                              in_flight=cell.workload.in_flight)
        time.sleep(duration)
        cell.broker.resume()
        t1 = cell.clock.now_ns()
        cell.record.add_fault(FaultKind.RESUME, cell.broker.name, ts_ns=t1, cycle=i,
                              paused_s=round((t1 - t0) / 1e9, 3))
        rec = CycleRecord(cycle=i, kind=self.name.value, fault_ns=t0, restored_ns=t1,
                          written_offset=before.max_offset if before else -1,
                          flushed_offset=before.flushed_offset if before else -1)
        rec.extra["paused_s"] = round((t1 - t0) / 1e9, 3)
        if not cell.broker.alive:
            rec.ok = False
            rec.error = "the broker exited while paused"
        return rec
