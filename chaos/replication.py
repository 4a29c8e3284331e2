"""This module owns the replication experiments: a broker group (a master and one slave, classic HA) under load
loses its master, and the topic is read back from the slave alone.

- ``master_kill9``: kill -9 the master and leave it dead; its store survives but the run does not use it.
- ``master_disk_destroyed``: kill -9 the master and delete its store directory: the slave is all that remains.
- ``master_power_loss``: the master's store lives on a loop-mounted image (chaos.loopfs; the slave's stays on
  the normal disk); every cycle kills it -9 and swaps in a copy of the image as the device held it (what only
  the page cache held is gone, chaos.power_loss). Earlier cycles restart the master on the crashed image; the
  slave may then hold bytes past the master's recovered end (``slave_ahead_bytes``): 4.9.8's master resumes
  the transfer at the slave's reported offset (HAConnection.WriteSocketService), so the two logs diverge there.
- ``slave_kill9`` / ``slave_paused``: the master lives on; the slave is killed -9 and restarted, or SIGSTOPped
  for ``slave_pause_s`` (a SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT after slaveTimeout, 3 s, meanwhile) and
  resumed. Each cycle waits until the slave's end reaches the master's; the drain reads the master, every
  acknowledged send must be there, and both stores are checked (checkStore) after a clean stop.
- ``partition_master_slave``, ``partition_clients_master``: the group runs on the lab network (a host per broker,
  root only) and each cycle cuts it and heals it under load; the master lives, so the topic is read back from
  it (chaos/replication_partition.py, judged by chaos/partition_verdict.py).

With ``cycles`` N, the first N - 1 cycles kill -9 the master and restart it on its store (the slave reconnects
and goes on replicating; a SYNC_MASTER answers SLAVE_NOT_AVAILABLE meanwhile) and wait until it answers a plain
SEND_OK again (for a SYNC_MASTER: the slave is back and reporting), so that every cycle's window holds promised
sends; the last one is the fault itself. Before each kill the master's and the slave's commit-log ends are
sampled: their difference is the replication lag in the fault's params; the answers in the cycle's window (from
that SEND_OK to the fault) are counted by status (``promised_in_window``: the SEND_OK). The drain then reads
every queue from the slave's address (chaos.drain_source.BrokerSource), the checker judges the events
(``lost_promised``, ``acked_master_only``) and chaos.replication_verdict says what the replication mode allows.
The run record is like any chaos cell's: meta.json (the master's broker.conf, its brokerRole among it), events,
metrics, faults.jsonl, check.json, chaos.json (cycles, verdict, drain, the slave's conf and store check, the
master's for slave faults) and logs/.
"""

from __future__ import annotations

import contextlib
import enum
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from chaos import netns
from chaos.drain_source import BrokerSource
from chaos.experiment import (
    BASE_BROKER_CONF,
    CHAOS_FILE,
    SERVICE_DEADLINE_S,
    CycleRecord,
    FlushMode,
    apply_profile,
    cell_ledger_proc,
    close_cell,
    open_cell,
    wait_first_ack,
    wait_route,
)
from chaos.leftovers import Ledger, ResourceKind
from chaos.load import DrainStats, LoadSpec, Workload
from chaos.loopfs import LoopFs, SwapTiming, unsupported_reason
from chaos.power_loss import read_checkpoint
from chaos.replication_partition import PartitionCycles, PartitionOutcome, judge_partitioned, partition_load
from chaos.replication_verdict import ReplicationMode, ReplicationVerdict, judge
from chaos.sampler import BrokerSample, Sampler, first_status, try_status
from chaos.store_check import check_store_at_cell_end
from harness import rocketmq
from harness.checker import CheckResult, check_run
from harness.launcher import BrokerProcess, LaunchError, Topology
from harness.records import FaultKind, RunRecord, WallClock
from harness.records.run import write_json_atomic
from harness.rocketmq import BrokerImpl
from reference_broker.client import MessageQueue, MQClientError
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import ResponseCode
from reference_broker.tools import admin

PROBE_TOPIC_SUFFIX: Final = "Probe"  # the topic of the sends that wait for replication before the load
SLAVE_SETTLE_S: Final = 1.0  # the slave's end unchanged this long (and its dispatch caught up): settled
REPLICATING_TIMEOUT_S: Final = 60.0  # RocketMQ's slave reports its first offset 5 s after connecting
MASTER_IMAGE_BYTES: Final = 768 << 20  # master_power_loss: the master's loop image (as chaos.power_loss's)
SLAVE_DOWN_S: Final = (0.5, 1.5)  # slave_kill9: how long the slave stays dead before its restart
# slave_paused: longer than slaveTimeout (3 s, how long 4.9.8's CommitLog.submitReplicaRequest waits for the
# slave's report), so a SYNC_MASTER's waits time out with FLUSH_SLAVE_TIMEOUT.
SLAVE_PAUSE_S: Final = 4.0


class ReplicationFault(enum.StrEnum):
    MASTER_KILL9 = "master_kill9"
    MASTER_DISK_DESTROYED = "master_disk_destroyed"
    MASTER_POWER_LOSS = "master_power_loss"
    SLAVE_KILL9 = "slave_kill9"
    SLAVE_PAUSED = "slave_paused"
    PARTITION_MASTER_SLAVE = "partition_master_slave"
    PARTITION_CLIENTS_MASTER = "partition_clients_master"

    @property
    def kind(self) -> FaultKind:
        return FaultKind(self.value)

    @property
    def is_partition(self) -> bool:
        """Cut and healed on the lab network (chaos/replication_partition.py), the master alive throughout."""
        return self in (ReplicationFault.PARTITION_MASTER_SLAVE, ReplicationFault.PARTITION_CLIENTS_MASTER)


# The faults that leave the master alive: the drain reads it, and nothing acknowledged may be missing.
SLAVE_FAULTS: Final = frozenset({ReplicationFault.SLAVE_KILL9, ReplicationFault.SLAVE_PAUSED})


@dataclass(frozen=True)
class ReplicationSpec:
    fault: ReplicationFault
    mode: ReplicationMode
    flush: FlushMode = FlushMode.ASYNC
    cycles: int = 3
    profile: str | None = None  # the page cache outlives a killed process whatever the sysctl values
    runs_dir: Path = Path("runs")
    work_dir: Path | None = None
    seed: int | None = None
    gap_s: tuple[float, float] = (0.5, 2.0)
    load: LoadSpec = field(default_factory=LoadSpec)
    broker_conf: dict[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    broker_impl: BrokerImpl = "reference"
    rocketmq_home: Path | None = None
    slave_pause_s: float = SLAVE_PAUSE_S

    @property
    def scenario(self) -> str:
        prof = (self.profile or "none").replace("_", ".")
        impl = "" if self.broker_impl == "reference" else f"-{self.broker_impl}"
        return (f"chaos-{self.fault.value.replace('_', '.')}-{self.mode.short}.master-{self.flush.short}-{prof}"
                f"{impl}")


@dataclass
class ReplicationResult:
    spec: ReplicationSpec
    run_dir: Path | None
    skipped: str | None = None
    cycles: list[CycleRecord] = field(default_factory=list)
    check: CheckResult | None = None
    verdict: ReplicationVerdict | None = None
    drain: DrainStats | None = None
    sysctl: dict[str, Any] | None = None
    slave_end: int = -1  # the slave's commit-log end once settled after the final fault
    master_end: int = -1  # slave faults: the master's commit-log end once the load stopped
    slave_conf: dict[str, str] = field(default_factory=dict)
    store_check: dict[str, Any] | None = None  # the slave's store, after its clean stop
    master_store_check: dict[str, Any] | None = None  # slave faults: the master's store, after its clean stop
    broker_version: str | None = None
    partition: PartitionOutcome | None = None  # the partition faults' cuts and the master's settled end
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (self.error is None and self.verdict is not None and self.verdict.ok)

    def summary(self) -> dict[str, Any]:
        chk, v = self.check, self.verdict
        lags = [c.extra["lag_bytes"] for c in self.cycles if c.extra.get("lag_bytes", -1) >= 0]
        ahead = [c.extra["slave_ahead_bytes"] for c in self.cycles if "slave_ahead_bytes" in c.extra]
        return {
            "broker_impl": self.spec.broker_impl, "fault": self.spec.fault.value,
            "replication": self.spec.mode.short, "flush": self.spec.flush.short, "profile": self.spec.profile,
            "skipped": self.skipped, "error": self.error, "cycles": len(self.cycles),
            "acknowledged": chk.acknowledged if chk else None, "lost": chk.lost if chk else None,
            "lost_promised": chk.lost_promised if chk else None,
            "acked_master_only": chk.acked_master_only if chk else None,
            "absent": v.absent if v else None, "absent_promised": v.absent_promised if v else None,
            "lost_share": v.lost_share if v else None, "lag_bytes": v.lag_bytes if v else None,
            "lag_bytes_max": max(lags) if lags else None,
            "unreplicated_bytes": v.unreplicated_bytes if v else None,
            "promised_final_window": self.cycles[-1].extra.get("promised_in_window") if self.cycles else None,
            "diverged_cycles": sum(1 for a in ahead if a > 0) if ahead else None,
            "duplicated": chk.duplicated if chk else None,
            "stored_twice": self.partition.stored_twice if self.partition else None,
            "cleaned": v.cleaned if v and self.spec.fault.is_partition else None,
            "answers_cut": _answers_cut(self.cycles) if self.spec.fault.is_partition else None,
            "ok": self.ok, "violations": list(v.violations) if v else ([self.error] if self.error else []),
            "findings": list(v.findings) if v else [],
            "run_dir": str(self.run_dir) if self.run_dir else None, "seconds": round(self.seconds, 1),
        }


def _answers_cut(cycles: list[CycleRecord]) -> dict[str, int]:
    """The answers heard while a partition was in force, over all its cycles."""
    out: dict[str, int] = {}
    for c in cycles:
        for answer, n in c.extra.get("answers", {}).items():
            out[answer] = out.get(answer, 0) + n
    return dict(sorted(out.items()))


class _Group:
    """The running experiment: the group's processes, the load, the record."""

    def __init__(self, spec: ReplicationSpec, record: RunRecord, master: BrokerProcess, slave: BrokerProcess,
                 workload: Workload, ledger: Ledger, rng: random.Random | None = None,
                 fs: LoopFs | None = None) -> None:
        self.spec, self.record, self.master, self.slave = spec, record, master, slave
        self.workload, self.ledger, self.clock = workload, ledger, record.clock
        self.rng = rng or random.Random()
        self.fs = fs  # master_power_loss: the loop image under the master's store
        self.window_from_ns = self.clock.now_ns()  # where the current cycle's window of sends began

    def status(self, b: BrokerProcess) -> BrokerSample | None:
        return try_status(b.addr, self.clock)

    def track_master(self) -> None:
        self.track(self.master, "master")

    def track(self, b: BrokerProcess, what: str) -> None:
        """The restarted process in the ledger in place of its earlier one."""
        for e in self.ledger.entries():
            if e.kind is ResourceKind.PROCESS and e.detail.get("what") == what and e.owner_pid == self.ledger.owner:
                self.ledger.drop(e)
        cell_ledger_proc(self.ledger, b, what)

    def note_window(self, rec: CycleRecord) -> dict[str, int]:
        """The answers to the sends that ended in this cycle's window (since the last restart or the load's
        start, up to the fault), by status: the SEND_OK among them are what a SYNC_MASTER promised."""
        answers = self.workload.answers_between(self.window_from_ns, rec.fault_ns)
        rec.extra.update(window_answers=answers, promised_in_window=answers.get("SEND_OK", 0))
        return {"promised_in_window": answers.get("SEND_OK", 0), "acked_in_window": sum(answers.values())}

    def fault(self, i: int, final: bool) -> CycleRecord:
        """Sample both ends, kill -9 the master, wait for the sends in flight; then restart it (not final), or
        leave it dead, its store deleted for master_disk_destroyed (final). master_power_loss also swaps in
        the crashed copy of its image, every cycle."""
        if self.spec.fault in SLAVE_FAULTS:
            return self.slave_fault(i, final)
        # The slave first: sampled before the master, its end cannot pass the master's, so the lag is >= 0.
        s = self.status(self.slave)
        m = self.status(self.master)
        lag = m.max_offset - s.max_offset if m is not None and s is not None else -1
        in_flight = self.workload.in_flight
        t_kill = self.clock.now_ns()
        self.master.kill()
        swap = self.fs.crash_swap() if self.fs is not None else None  # at once: writeback goes on meanwhile
        kind = self.spec.fault.kind if final or swap is not None else FaultKind.KILL9
        rec = CycleRecord(cycle=i, kind=kind.value, fault_ns=t_kill, written_offset=m.max_offset if m else -1,
                          flushed_offset=m.flushed_offset if m else -1)
        self.workload.hold()
        deadline = time.monotonic() + 3.0
        while self.workload.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)
        acked_end = self.workload.max_acked_end(self.clock.now_ns(), self.workload.record_size())
        rec.written_bound = max(acked_end, rec.written_offset)
        rec.extra.update(lag_bytes=lag, master_offset=m.max_offset if m else -1,
                         slave_offset=s.max_offset if s else -1)
        window = self.note_window(rec)
        crash = self.note_power_loss(rec, swap) if swap is not None else {}
        if final and self.spec.fault is ReplicationFault.MASTER_DISK_DESTROYED:
            shutil.rmtree(self.master.store_root)
            rec.extra["store_deleted"] = str(self.master.store_root)
        self.record.add_fault(kind, self.master.name, ts_ns=t_kill, cycle=i, lag_bytes=lag,
                              master_offset=rec.extra["master_offset"], slave_offset=rec.extra["slave_offset"],
                              written_bound=rec.written_bound, in_flight=in_flight, final=final, **window, **crash)
        if not final:
            self._restart(rec)
        return rec

    def note_power_loss(self, rec: CycleRecord, swap: SwapTiming) -> dict[str, Any]:
        """What the crashed image holds (its checkpoint) and where the slave stands, for faults.jsonl: the
        slave gets nothing more from a dead master, so its end now is what the restarted master meets."""
        s = self.status(self.slave)
        rec.extra.update(copy_s=round(swap.copy_s, 4), image_allocated_bytes=swap.image_bytes_allocated,
                         checkpoint=read_checkpoint(self.master.store_root / "checkpoint"),
                         slave_offset_after_crash=s.max_offset if s is not None else -1)
        return {k: rec.extra[k] for k in ("copy_s", "checkpoint", "slave_offset_after_crash")}

    def _restart(self, rec: CycleRecord) -> None:
        t0 = time.monotonic()
        try:
            self.master.start()
        except LaunchError as e:
            rec.ok, rec.error = False, f"the master did not come back: {e}"
            return
        rec.recovery_s = time.monotonic() - t0
        rec.restored_ns = self.clock.now_ns()
        self.track_master()
        after = first_status(self.master.addr, self.clock)  # 4.9.8 answers SYSTEM_ERROR for a moment after boot
        rec.recovered_offset = after.max_offset if after is not None else -1
        self.workload.release()
        ahead: dict[str, int] = {}
        if "slave_offset_after_crash" in rec.extra and rec.recovered_offset >= 0:
            # > 0: the slave holds bytes at offsets the recovered master will write anew (diverged logs).
            ahead["slave_ahead_bytes"] = rec.extra["slave_offset_after_crash"] - rec.recovered_offset
            rec.extra.update(ahead)
        self.record.add_fault(FaultKind.RESTART, self.master.name, ts_ns=rec.restored_ns, cycle=rec.cycle,
                              recovery_s=round(rec.recovery_s, 4), recovered_offset=rec.recovered_offset, **ahead)
        deadline = time.monotonic() + SERVICE_DEADLINE_S
        while (first := self.workload.first_ok_after(rec.restored_ns)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if first is None:
            rec.ok, rec.error = False, f"no send acknowledged within {SERVICE_DEADLINE_S} s after the restart"
            return
        rec.service_restored_s = (first - rec.restored_ns) / 1e9
        # The next fault should find a replicating group, not one whose slave is still waiting to reconnect
        # (HAClient.run, 4.9.8, waits 5 s after a failed connect): wait until the slave has bytes the restarted
        # master wrote. Having what the master recovered is not enough: the slave had that before the kill.
        t1 = time.monotonic()
        deadline = t1 + REPLICATING_TIMEOUT_S
        floor = max(rec.recovered_offset, rec.written_bound)
        while time.monotonic() < deadline:
            s = self.status(self.slave)
            if s is not None and s.max_offset > floor:
                rec.extra["slave_caught_up_s"] = round(time.monotonic() - t1, 3)
                self.wait_send_ok(rec)
                return
            time.sleep(0.1)
        rec.ok, rec.error = False, f"the slave did not catch up with the restarted master in {REPLICATING_TIMEOUT_S} s"

    def wait_send_ok(self, rec: CycleRecord) -> None:
        """Until a send after the restart is answered with a plain SEND_OK: a SYNC_MASTER answers
        SLAVE_NOT_AVAILABLE until its slave has reconnected and reported an offset (HAClient.run, 4.9.8,
        retries a failed connect every 5 s), and a window of such answers holds no promised send. The next
        cycle's window starts here."""
        assert rec.restored_ns is not None
        deadline = time.monotonic() + REPLICATING_TIMEOUT_S
        while (first := self.workload.first_send_ok_after(rec.restored_ns)) is None:
            if time.monotonic() > deadline:
                rec.ok, rec.error = False, f"no SEND_OK within {REPLICATING_TIMEOUT_S} s after the restart"
                return
            time.sleep(0.05)
        rec.extra["send_ok_after_s"] = round((first - rec.restored_ns) / 1e9, 3)
        self.window_from_ns = first - 1

    def slave_fault(self, i: int, final: bool) -> CycleRecord:
        """slave_kill9: kill -9 the slave, leave it dead for a moment, restart it on its store; slave_paused:
        SIGSTOP it for ``slave_pause_s`` and SIGCONT it. The load goes on throughout (a SYNC_MASTER answers
        SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT meanwhile: counted in the restart's params). Then wait until
        the slave's end reaches the master's (catch-up) and the master answers SEND_OK again."""
        s = self.status(self.slave)
        m = self.status(self.master)
        lag = m.max_offset - s.max_offset if m is not None and s is not None else -1
        kind = self.spec.fault.kind
        t0 = self.clock.now_ns()
        rec = CycleRecord(cycle=i, kind=kind.value, fault_ns=t0, written_offset=m.max_offset if m else -1,
                          flushed_offset=m.flushed_offset if m else -1)
        rec.extra.update(lag_bytes=lag, master_offset=m.max_offset if m else -1,
                         slave_offset=s.max_offset if s else -1)
        window = self.note_window(rec)
        if self.spec.fault is ReplicationFault.SLAVE_KILL9:
            self.slave.kill()
            down_s = self.rng.uniform(*SLAVE_DOWN_S)
            params: dict[str, Any] = {"down_s": round(down_s, 3)}
        else:
            self.slave.pause()
            down_s = self.spec.slave_pause_s
            params = {"pause_s": down_s}
        self.record.add_fault(kind, self.slave.name, ts_ns=t0, cycle=i, lag_bytes=lag,
                              master_offset=rec.extra["master_offset"], slave_offset=rec.extra["slave_offset"],
                              in_flight=self.workload.in_flight, final=final, **params, **window)
        time.sleep(down_s)
        t1 = time.monotonic()
        if self.spec.fault is ReplicationFault.SLAVE_KILL9:
            try:
                self.slave.start()
            except LaunchError as e:
                rec.ok, rec.error = False, f"the slave did not come back: {e}"
                return rec
            self.track(self.slave, "slave")
            back = FaultKind.RESTART
        else:
            self.slave.resume()
            back = FaultKind.RESUME
        rec.recovery_s = time.monotonic() - t1
        rec.restored_ns = self.clock.now_ns()
        answers = self.workload.answers_between(t0, rec.restored_ns)
        rec.extra["answers_while_down"] = answers
        self.record.add_fault(back, self.slave.name, ts_ns=rec.restored_ns, cycle=i,
                              recovery_s=round(rec.recovery_s, 4), answers_while_down=answers)
        self.wait_slave_caught_up(rec)
        if rec.ok:
            self.wait_send_ok(rec)
        return rec

    def wait_slave_caught_up(self, rec: CycleRecord) -> None:
        """Until the slave's end reaches the master's end as sampled now (the load goes on, so the master's end
        moves; reaching where it stood is the catch-up)."""
        t0 = time.monotonic()
        deadline = t0 + REPLICATING_TIMEOUT_S
        m = None
        while m is None and time.monotonic() < deadline:
            m = self.status(self.master)
        target = m.max_offset if m is not None else -1
        while time.monotonic() < deadline:
            s = self.status(self.slave)
            if target >= 0 and s is not None and s.max_offset >= target:
                rec.extra.update(caught_up_to=target, slave_caught_up_s=round(time.monotonic() - t0, 3))
                return
            time.sleep(0.1)
        rec.ok, rec.error = False, f"the slave did not reach the master's end {target} in {REPLICATING_TIMEOUT_S} s"

    def settled_slave_end(self, timeout_s: float = 30.0) -> BrokerSample | None:
        """The slave's status once its end has stopped moving and its dispatch has caught up."""
        deadline = time.monotonic() + timeout_s
        last: BrokerSample | None = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            s = self.status(self.slave)
            if s is not None and last is not None and s.max_offset == last.max_offset and s.dispatch_behind == 0:
                if time.monotonic() - since >= SLAVE_SETTLE_S:
                    return s
            else:
                since = time.monotonic()
            last = s if s is not None else last
            time.sleep(0.1)
        return last


def slave_knows_topic(slave: BrokerProcess, broker_name: str, topic: str, queues: int,
                      timeout_s: float = 40.0) -> None:
    """The slave serves the drain, so it must know the topic (a pull of an unknown one is TOPIC_NOT_EXIST).
    Neither broker's slave takes an UPDATE_AND_CREATE_TOPIC (AdminBrokerProcessor.validateSlave, 4.9.8): each
    copies the master's topics itself (SlaveSynchronize.syncAll, 3 s after its start, then every 10 s), so
    wait until a pull on the topic is answered."""
    source = BrokerSource(slave.addr, broker_name, queues, "CHAOS_PROBE_CG")
    source.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                source.pull(MessageQueue(topic, broker_name, 0), 0, 1)
                return
            except MQClientError as e:
                if e.code != ResponseCode.TOPIC_NOT_EXIST or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)
    finally:
        source.shutdown()


def wait_replicating(master: BrokerProcess, slave: BrokerProcess, topic: str, clock: WallClock,
                     timeout_s: float = REPLICATING_TIMEOUT_S) -> None:
    """Before the load: send to a probe topic until the master answers SEND_OK (a SYNC_MASTER does once its
    slave has reported an offset), then wait until the slave's end has reached the master's."""
    from reference_broker.client import protocol as cp

    deadline = time.monotonic() + timeout_s
    with RemotingClient(master.host, master.port, timeout_s=10) as c:
        while True:
            r = c.invoke(cp.send_request("CHAOS_PROBE_PG", topic, 0, b"probe", "",
                                         born_timestamp=int(time.time() * 1000)))
            if r.code == ResponseCode.SUCCESS:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the master never answered SEND_OK: {r.code} {r.remark}")
            time.sleep(0.2)
    while time.monotonic() < deadline:
        m, s = try_status(master.addr, clock), try_status(slave.addr, clock)
        if m is not None and s is not None and s.max_offset >= m.max_offset:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the slave did not catch up with the master within {timeout_s} s")


def run_replication(spec: ReplicationSpec, *, ledger: Ledger | None = None, log: Any = None) -> ReplicationResult:
    """Run one replication experiment; never leaves a process behind. ``log`` gets progress lines."""
    say = log or (lambda _line: None)
    if spec.cycles < 1:
        raise ValueError("cycles must be >= 1 (the last cycle is the fault that ends the run)")
    if spec.broker_impl == "rocketmq" and (reason := rocketmq.unavailable(spec.rocketmq_home)) is not None:
        return ReplicationResult(spec, None, skipped=reason)
    if spec.fault is ReplicationFault.MASTER_POWER_LOSS and (reason := unsupported_reason()) is not None:
        return ReplicationResult(spec, None, skipped=reason)
    if spec.fault.is_partition and (reason := netns.unavailable()) is not None:
        return ReplicationResult(spec, None, skipped=reason)
    ledger = ledger if ledger is not None else Ledger()
    t_start = time.monotonic()
    seed = spec.seed if spec.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    params = {"fault": spec.fault.value, "replication": spec.mode.value, "flush": spec.flush.value,
              "cycles": spec.cycles, "profile": spec.profile, "broker_impl": spec.broker_impl, "seed": seed,
              "gap_s": list(spec.gap_s), "load": asdict(load := partition_load(spec.load, spec.fault.value)),
              **_fault_params(spec)}
    record, work, client_log = open_cell(spec.scenario, spec.runs_dir, spec.work_dir, params, spec.command,
                                         ledger)
    result = ReplicationResult(spec, record.run_dir)
    workload: Workload | None = None
    try:
        with contextlib.ExitStack() as stack:
            result.sysctl = apply_profile(stack, spec.profile)
            record.update_meta(sysctl=result.sysctl)
            conf = {**BASE_BROKER_CONF, "flushDiskType": spec.flush.value, "brokerRole": spec.mode.value,
                    **spec.broker_conf}
            fs = _master_disk(spec, stack, work, ledger)  # entered before the brokers: unmounted after they end
            lab = stack.enter_context(netns.Lab(ledger)) if spec.fault.is_partition else None
            topo = Topology(work / "topo", broker_conf=conf, brokers=0, impl=spec.broker_impl,
                            rocketmq_home=spec.rocketmq_home, lab=lab)
            stack.callback(topo.stop)
            topo.start()
            assert topo.namesrv is not None
            cell_ledger_proc(ledger, topo.namesrv, "namesrv")
            master = topo.add_broker(
                "broker-a", extra=None if fs is None else {"storePathRootDir": str(fs.mountpoint / "store")})
            cell_ledger_proc(ledger, master, "master")
            topic, queues = spec.load.topic, spec.load.queues
            probe_topic = topic + PROBE_TOPIC_SUFFIX
            # The topics first: the slave's first synchronization (3 s after it starts) then copies them.
            for t in (topic, probe_topic):
                admin.update_topic(topo.namesrv_addr, t, queues, queues, broker_addr=master.addr)
            slave = topo.add_slave(master)
            cell_ledger_proc(ledger, slave, "slave")
            result.slave_conf = dict(slave.conf)
            status = first_status(master.addr, record.clock)
            result.broker_version = status.version if status else None
            record.update_meta(broker=dict(master.conf), broker_impl=result.broker_version)
            slave_knows_topic(slave, master.conf["brokerName"], topic, queues)
            wait_route(topo.namesrv_addr, topic)
            wait_replicating(master, slave, probe_topic, record.clock)
            workload = Workload(topo.namesrv_addr, load, record, record.clock)
            stack.callback(workload.close)
            workload.start()
            sampler = Sampler(lambda: master.addr, lambda: master.pid if master.alive else None,
                              record.metrics_writer(), record.clock, workload.counters)
            sampler.start()
            stack.callback(sampler.stop)
            wait_first_ack(workload)
            group = _Group(spec, record, master, slave, workload, ledger, rng=rng, fs=fs)
            cuts = (PartitionCycles(spec.fault.value, lab, record, master, slave, workload)
                    if lab is not None else None)
            say(f"{spec.scenario}: group up, replicating, load running; {spec.cycles} cycles")
            for i in range(spec.cycles):
                time.sleep(rng.uniform(*spec.gap_s))
                final = i == spec.cycles - 1
                rec = cuts.cycle(i) if cuts is not None else group.fault(i, final)
                result.cycles.append(rec)
                say(f"  cycle {i + 1}/{spec.cycles}: {rec.kind}, lag {rec.extra['lag_bytes']:,} B"
                    + (f", restart {rec.recovery_s:.2f} s" if rec.recovery_s is not None else "")
                    + ("" if rec.ok else f" FAILED: {rec.error}"))
                if not rec.ok:
                    break
            workload.stop_producing()
            workload.stop_consuming()
            if cuts is not None or spec.fault in SLAVE_FAULTS:  # the master lives: read it back
                _drain_live_master(group, result, say)
                if cuts is not None and result.drain is not None:
                    result.partition = cuts.outcome(workload, result.drain, result.master_end)
            else:
                _drain_slave(group, result, say)
    except Exception as e:  # noqa: BLE001 - a cell's boundary: the verdict records it; cleanup below still runs
        result.error = f"{type(e).__name__}: {e}"
        say(f"{spec.scenario}: error: {result.error}")
    finally:
        close_cell(result, record, ledger, work, client_log)
    _judge(result, workload)
    result.seconds = time.monotonic() - t_start
    write_json_atomic(record.run_dir / CHAOS_FILE, _chaos_json(result))
    return result


def _fault_params(spec: ReplicationSpec) -> dict[str, Any]:
    """The fault's own settings for meta.json (each cycle's are in faults.jsonl)."""
    if spec.fault is ReplicationFault.MASTER_POWER_LOSS:
        return {"master_image_bytes": MASTER_IMAGE_BYTES}
    if spec.fault is ReplicationFault.SLAVE_KILL9:
        return {"slave_down_s": list(SLAVE_DOWN_S)}
    if spec.fault is ReplicationFault.SLAVE_PAUSED:
        return {"slave_pause_s": spec.slave_pause_s}
    return {}


def _master_disk(spec: ReplicationSpec, stack: contextlib.ExitStack, work: Path, ledger: Ledger) -> LoopFs | None:
    """master_power_loss: the master's "disk", a loop-mounted ext4 image (the slave's store stays on the
    normal disk: only the master loses power)."""
    if spec.fault is not ReplicationFault.MASTER_POWER_LOSS:
        return None
    return stack.enter_context(LoopFs.create(work / "master-disk.img", MASTER_IMAGE_BYTES, work / "master-mnt",
                                             ledger))


def _drain_slave(group: _Group, result: ReplicationResult, say: Callable[[str], None]) -> None:
    """The master is gone: read every queue from the slave once its end has settled, then check its store."""
    spec, slave = group.spec, group.slave
    settled = group.settled_slave_end()
    if settled is None:
        result.drain = DrainStats(complete=False, problems=["the slave does not answer"])
    else:
        result.slave_end = settled.max_offset
        group.workload.final_min_offset = max(0, settled.min_offset)
        source = BrokerSource(slave.addr, group.master.conf["brokerName"], spec.load.queues, spec.load.drain_group)
        result.drain = group.workload.drain(source=source)
        say(f"{spec.scenario}: drained {result.drain.messages:,} messages from the slave")
    result.store_check = check_store_at_cell_end(slave, slave.store_root, slave.conf)


def _drain_live_master(group: _Group, result: ReplicationResult, say: Callable[[str], None]) -> None:
    """The master lived through the slave's faults: once the slave's end has settled (it must equal the
    master's: caught up), read every queue from the master, then stop both cleanly and check both stores."""
    spec, master, slave = group.spec, group.master, group.slave
    settled = group.settled_slave_end()
    m = group.status(master)
    result.slave_end = settled.max_offset if settled is not None else -1
    result.master_end = m.max_offset if m is not None else -1
    if m is None:
        result.drain = DrainStats(complete=False, problems=["the master does not answer"])
    else:
        group.workload.final_min_offset = max(0, m.min_offset)
        source = BrokerSource(master.addr, master.conf["brokerName"], spec.load.queues, spec.load.drain_group)
        result.drain = group.workload.drain(source=source)
        say(f"{spec.scenario}: drained {result.drain.messages:,} messages from the master; ends: master "
            f"{result.master_end:,}, slave {result.slave_end:,}")
    result.master_store_check = check_store_at_cell_end(master, master.store_root, master.conf)
    result.store_check = check_store_at_cell_end(slave, slave.store_root, slave.conf)


def _judge(result: ReplicationResult, workload: Workload | None) -> None:
    """The checker over the events (loss allowed: what may be lost depends on the answer each send got, judged
    here), then the mode's verdict."""
    assert result.run_dir is not None
    try:
        result.check = check_run(result.run_dir, allow_loss=True)
    except Exception as e:  # noqa: BLE001 - a cell's boundary: a failed check is the cell's error
        result.error = (result.error or "") + f" check failed: {type(e).__name__}: {e}"
    final = result.cycles[-1] if result.cycles else None
    # At least 0: sends in flight at the kill (outcome unknown) may have reached the slave beyond the bound.
    unreplicated = (max(0, final.written_bound - result.slave_end)
                    if final is not None and final.written_bound >= 0 and result.slave_end >= 0 else -1)
    drain = result.drain
    if result.spec.fault.is_partition:
        result.verdict = judge_partitioned(
            result.partition, result.spec.mode, result.check, workload, drain, result.slave_end,
            [f"cycle {c.cycle}: {c.error}" for c in result.cycles if not c.ok], result.error)
    else:
        result.verdict = judge(
            result.spec.mode, result.check, workload.acked() if workload is not None else {},
            set(workload.drained) if workload is not None else set(), result.slave_end,
            final.extra.get("lag_bytes", -1) if final is not None else -1, unreplicated,
            corrupted=len(workload.corrupted) if workload is not None else 0,
            drain_complete=drain is not None and drain.complete,
            drain_problems=drain.problems if drain is not None else ["no drain"],
            cycle_errors=[f"cycle {c.cycle}: {c.error}" for c in result.cycles if not c.ok],
            error=result.error, master_alive=result.spec.fault in SLAVE_FAULTS,
            diverged=sum(1 for c in result.cycles if c.extra.get("slave_ahead_bytes", 0) > 0))
    v = result.verdict
    for who, chk in (("slave", result.store_check), ("master", result.master_store_check)):
        if chk is not None and chk.get("exit_code") != 0:
            # A diverged slave's consume queues break where its log switches to the master's new records.
            (v.findings if v.diverged and who == "slave" else v.violations).append(
                f"the {who}'s store check: {chk.get('outcome')}: " + "; ".join(chk.get("problems", [])[:2]))
    if result.spec.fault in SLAVE_FAULTS and result.slave_end < result.master_end:
        v.violations.append(f"the slave's end {result.slave_end:,} stayed short of the master's "
                            f"{result.master_end:,} after the load stopped (no catch-up)")
    v.ok = not v.violations


def _chaos_json(result: ReplicationResult) -> dict[str, Any]:
    spec = result.spec
    return {
        "schema_version": 1, "fault": spec.fault.value, "replication": spec.mode.value, "flush": spec.flush.value,
        "profile": spec.profile, "sysctl": result.sysctl, "summary": result.summary(),
        "verdict": result.verdict.to_json() if result.verdict else None,
        "drain": asdict(result.drain) if result.drain else None,
        "slave": {"conf": result.slave_conf, "end_offset": result.slave_end, "store_check": result.store_check},
        "master": {"end_offset": result.master_end, "store_check": result.master_store_check},
        "partition": result.partition.to_json() if result.partition else None,
        "cycles": [c.to_json() for c in result.cycles],
    }
