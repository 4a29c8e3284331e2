"""This module owns the faults that the container topology adds to the chaos matrix (``--topology docker``,
harness/containers.py), and the clean restart, which runs on either topology:

=============  =================================================================================================
partition      ``docker network disconnect`` the broker for 1-5 s under load, then ``connect`` it at the same
               address: clients and the name server hear nothing from it meanwhile (sends time out: "unknown",
               never "lost"); nothing acknowledged may be lost, under either flush mode
restart        the broker stopped gracefully (SIGTERM; ``docker stop`` in a container) and started again on its
               store under load: nothing acknowledged may be lost, and the restart is timed like a crash's
=============  =================================================================================================

kill -9 and pause (chaos/kill9.py, chaos/pause.py) need nothing more: on a container the broker's kill() is
``docker kill -s KILL`` and its pause() is ``docker pause``.
"""

from __future__ import annotations

import time
from typing import Any

from chaos.experiment import Cell, CycleRecord, Fault, FaultName
from harness.containers import ContainerBroker
from harness.records import FaultKind


class Partition(Fault):
    name = FaultName.PARTITION

    def __init__(self, cut_s: tuple[float, float] = (1.0, 5.0)) -> None:
        self.cut_s = cut_s

    def params(self) -> dict[str, Any]:
        return {"cut_s": list(self.cut_s)}

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        duration = cell.rng.uniform(*self.cut_s)
        before = cell.status()
        t0 = cell.clock.now_ns()
        broker = cell.broker
        assert isinstance(broker, ContainerBroker)  # run_experiment runs a partition on containers only
        broker.disconnect()
        cell.record.add_fault(FaultKind.PARTITION, cell.broker.name, ts_ns=t0, cycle=i, planned_s=round(duration, 3),
                              in_flight=cell.workload.in_flight)
        time.sleep(duration)
        broker.connect()
        t1 = cell.clock.now_ns()
        cell.record.add_fault(FaultKind.HEAL, cell.broker.name, ts_ns=t1, cycle=i, cut_s=round((t1 - t0) / 1e9, 3))
        rec = CycleRecord(cycle=i, kind=self.name.value, fault_ns=t0, restored_ns=t1,
                          written_offset=before.max_offset if before else -1,
                          flushed_offset=before.flushed_offset if before else -1)
        rec.extra["cut_s"] = round((t1 - t0) / 1e9, 3)
        if not cell.broker.alive:
            rec.ok = False
            rec.error = "the broker exited while cut off"
        return rec


class Restart(Fault):
    name = FaultName.RESTART

    def cycle(self, cell: Cell, i: int) -> CycleRecord:
        before = cell.status()
        t0 = cell.clock.now_ns()
        code = cell.broker.stop()
        rec = CycleRecord(cycle=i, kind=self.name.value, fault_ns=t0,
                          written_offset=before.max_offset if before else -1,
                          flushed_offset=before.flushed_offset if before else -1)
        rec.extra["exit_code"] = code
        cell.settle_after_kill(rec, before)
        cell.record.add_fault("graceful_stop", cell.broker.name, ts_ns=t0, cycle=i, exit_code=code)
        if code not in (0, None):
            rec.ok = False
            rec.error = f"the graceful stop ended with exit code {code}"
        cell.restart_after_crash(rec)
        return rec
