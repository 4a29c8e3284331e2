"""This module owns the partition faults of the replication experiment (chaos/replication.py):
``partition_master_slave`` and ``partition_clients_master``. Their group runs on the lab network (chaos/netns.py,
a host per broker); each cycle cuts the group with chaos/partition.py under load for ``CUT_S``, heals, and waits
until sends are acknowledged again and the slave has caught up with the master. The master stays alive, so the
topic is read back from the master (chaos.drain_source.BrokerSource at its address) and judged by
chaos.partition_verdict.

Each cycle's fault line (faults.jsonl, kind = the fault's name, at the cut) records the cut and heal times, the
replication lag when the cut began and when it healed, the answers the producer heard meanwhile (a SYNC_MASTER
cut from its slave answers FLUSH_SLAVE_TIMEOUT after slaveTimeout, then SLAVE_NOT_AVAILABLE once the master
drops the silent HA connection), and how long the group took to serve again and to catch up; a ``heal`` line
at the heal follows it. Both are written once the group has caught up.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from chaos.experiment import SERVICE_DEADLINE_S, CycleRecord
from chaos.load import DrainStats, LoadSpec, Workload
from chaos.netns import Lab
from chaos.partition import Cut, Partition, plan
from chaos.partition_verdict import CutWindow, answers_during, judge_partition, promised_while_cut
from chaos.replication_verdict import ReplicationMode, ReplicationVerdict
from chaos.sampler import try_status
from harness.launcher import BrokerProcess
from harness.records import FaultKind, RunRecord

CUT_S: Final = 5.0  # past slaveTimeout (3 s, 4.9.8): a SYNC_MASTER's waiting sends answer FLUSH_SLAVE_TIMEOUT
CATCH_UP_TIMEOUT_S: Final = 60.0  # a slave whose connection was dropped reconnects after 5 s (HAClient.run)
# The producer's send timeout when master and slave are cut. A SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT after
# slaveTimeout (3 s), just when a client with RocketMQ's default sendMsgTimeout (3 s) gives up: the answer would
# race the client's timeout and mostly lose, and the answers the cell is there to record would be timeouts.
# (Cut from the clients, the master hears no request: the default stays, and sends time out within the cut.)
SEND_TIMEOUT_S: Final = 5.0


def partition_load(load: LoadSpec, fault_value: str) -> LoadSpec:
    """The load of a cell: with master and slave cut, a send timeout of at least SEND_TIMEOUT_S."""
    if fault_value != "partition_master_slave" or load.send_timeout_s >= SEND_TIMEOUT_S:
        return load
    return replace(load, send_timeout_s=SEND_TIMEOUT_S)


@dataclass
class PartitionOutcome:
    """What the verdict needs beyond the master-loss faults': the cuts, and the master's end once settled."""

    windows: list[CutWindow]
    master_end: int
    master_min_offset: int  # after the drain: what the store's cleaning deleted lies below it
    stored_twice: int  # copies the drain read beyond one per key: sends stored again by the producer's retry

    def to_json(self) -> dict[str, Any]:
        return {"windows": [asdict(w) for w in self.windows], "master_end": self.master_end,
                "master_min_offset": self.master_min_offset, "stored_twice": self.stored_twice}


def judge_partitioned(outcome: PartitionOutcome | None, mode: ReplicationMode, check: Any, workload: Workload | None,
                      drain: DrainStats | None, slave_end: int, cycle_errors: list[str],
                      error: str | None) -> ReplicationVerdict:
    """chaos.partition_verdict.judge_partition over an experiment's figures (an experiment that failed before
    its drain has no outcome: its error is the verdict)."""
    acks = workload.acked() if workload is not None else {}
    windows = outcome.windows if outcome is not None else []
    cut_windows = [w for w in windows if w.master_end >= 0]  # master <-> slave cuts only
    return judge_partition(
        mode, check, acks, set(workload.drained) if workload is not None else set(),
        outcome.master_end if outcome is not None else -1, slave_end,
        next((w.lag_bytes for w in reversed(windows)), -1),
        min_offset=outcome.master_min_offset if outcome is not None else 0,
        promised_cut=promised_while_cut(acks, cut_windows),
        corrupted=len(workload.corrupted) if workload is not None else 0,
        drain_complete=drain is not None and drain.complete,
        drain_problems=drain.problems if drain is not None else ["no drain"],
        cycle_errors=cycle_errors, error=error)


def cut_of(fault_value: str) -> Cut:
    return Cut.MASTER_SLAVE if fault_value == "partition_master_slave" else Cut.CLIENTS_MASTER


@dataclass
class PartitionCycles:
    """The cuts of one experiment: ``cycle(i)`` runs one, ``windows`` keeps them for the verdict."""

    fault: str  # the ReplicationFault's value
    lab: Lab
    record: RunRecord
    master: BrokerProcess
    slave: BrokerProcess
    workload: Workload
    cut_s: float = CUT_S
    windows: list[CutWindow] = field(default_factory=list)

    def _end(self, b: BrokerProcess) -> int:
        s = try_status(b.addr, self.record.clock)
        return s.max_offset if s is not None else -1

    def cycle(self, i: int) -> CycleRecord:
        cut = cut_of(self.fault)
        clock = self.record.clock
        s_end, m_end = self._end(self.slave), self._end(self.master)  # the slave first: lag >= 0
        lag = m_end - s_end if m_end >= 0 and s_end >= 0 else -1
        partition = Partition(plan(cut, self.lab.hosts[self.master.name], self.lab.hosts[self.slave.name],
                                   self.lab.gateway), now_ns=clock.now_ns)
        rec = CycleRecord(cycle=i, kind=self.fault, fault_ns=clock.now_ns(), written_offset=m_end)
        with partition:
            # Reachable only when the clients still are: then every record at or past it was written after the cut.
            master_after_cut = self._end(self.master) if cut is Cut.MASTER_SLAVE else -1
            time.sleep(self.cut_s)
            s_heal = self._end(self.slave)
            m_heal = self._end(self.master) if cut is Cut.MASTER_SLAVE else -1
        assert partition.cut_ns is not None and partition.healed_ns is not None
        window = CutWindow(partition.cut_ns, partition.healed_ns, master_after_cut, lag)
        self.windows.append(window)
        rec.fault_ns, rec.restored_ns = partition.cut_ns, partition.healed_ns
        deadline = time.monotonic() + SERVICE_DEADLINE_S
        while (first := self.workload.first_ok_after(partition.healed_ns)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if first is None:
            rec.ok, rec.error = False, f"no send acknowledged within {SERVICE_DEADLINE_S} s after the heal"
        else:
            rec.service_restored_s = (first - partition.healed_ns) / 1e9
        t0 = time.monotonic()
        target = self._end(self.master)
        caught_up_s: float | None = None
        while time.monotonic() - t0 < CATCH_UP_TIMEOUT_S:
            if target >= 0 and self._end(self.slave) >= target:
                caught_up_s = round(time.monotonic() - t0, 3)
                break
            time.sleep(0.1)
            target = target if target >= 0 else self._end(self.master)
        if caught_up_s is None and rec.ok:
            rec.ok, rec.error = False, f"the slave did not catch up within {CATCH_UP_TIMEOUT_S} s of the heal"
        answers = answers_during(self.workload.acked().values(), list(self.workload.recent_errors), window)
        rec.extra.update(cut=cut.value, lag_bytes=lag, master_offset=m_end, slave_offset=s_end,
                         lag_bytes_at_heal=m_heal - s_heal if m_heal >= 0 and s_heal >= 0 else -1,
                         slave_offset_at_heal=s_heal, master_offset_after_cut=master_after_cut,
                         cut_s=round((partition.healed_ns - partition.cut_ns) / 1e9, 3), answers=answers,
                         slave_caught_up_s=caught_up_s)
        self.record.add_fault(self.fault, self.master.name, ts_ns=partition.cut_ns, cycle=i, cut=cut.value,
                              cut_ns=partition.cut_ns, healed_ns=partition.healed_ns, cut_s=rec.extra["cut_s"],
                              lag_bytes=lag, lag_bytes_at_heal=rec.extra["lag_bytes_at_heal"],
                              master_offset=m_end, slave_offset=s_end, slave_offset_at_heal=s_heal,
                              answers=answers, service_restored_s=rec.service_restored_s,
                              slave_caught_up_s=caught_up_s)
        self.record.add_fault(FaultKind.HEAL, self.master.name, ts_ns=partition.healed_ns, cycle=i, cut=cut.value)
        return rec

    def outcome(self, workload: Workload, drain: DrainStats, master_end: int) -> PartitionOutcome:
        """After the drain (chaos.replication: the master's end and, in ``workload.final_min_offset``, its
        commit-log min offset, sampled once the slave settled): the cuts and the drain's extra copies."""
        return PartitionOutcome(list(self.windows), master_end, workload.final_min_offset,
                                max(0, drain.messages - len(workload.drained) - len(workload.corrupted)))
