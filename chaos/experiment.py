"""This module owns one chaos experiment from start to verdict: a fresh store (on whatever storage the fault
needs), the sysctl profile, a name server and a broker as real processes, the load, N fault cycles at random
moments, the drain, the checker, the verdict, and the cleanup of everything whatever happens.

A fault (kill9.py, power_loss.py, disk_fill.py, pause.py) is a ``Fault``: it may refuse to run here
(``unsupported_reason``), provides the storage for the store and extra broker.conf keys, and performs one
cycle at a time against the running ``Cell``. The run record gets meta.json (broker config, sysctl in force),
events, metrics, faults.jsonl, check.json, and extra files the schema allows: ``chaos.json`` (the cycles,
the verdict, the drain, what each recovery quarantined), ``client.log`` (the client library's warnings) and
``logs/`` (the broker's and the name server's logs: what recovery said it truncated).
"""

from __future__ import annotations

import abc
import contextlib
import enum
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chaos.leftovers import Ledger, ResourceKind, cleanup, process_start_time
from chaos.load import DrainStats, LoadSpec, Workload
from chaos.lookups import LookupCheck, choose_sample, probe
from chaos.payload import classify
from chaos.sampler import BrokerSample, Sampler, first_status, messages_at, try_status
from chaos.store_check import apply_store_check, check_store_at_cell_end
from chaos.verdict import Verdict, evaluate
from harness import containers, rocketmq
from harness.checker import CheckResult, check_run
from harness.launcher import BrokerProcess, LaunchError, Process, Topology
from harness.records import FaultKind, RunRecord, WallClock
from harness.records.run import write_json_atomic
from harness.rocketmq import BrokerImpl
from harness.vm_stats import VmSampler
from reference_broker.remoting.errors import RemotingError
from reference_broker.tools import admin

CHAOS_FILE = "chaos.json"
CLIENT_LOG = "client.log"
SERVICE_DEADLINE_S = 20.0  # a fault whose broker accepts no send for this long after it ends has not recovered

# Broker settings for every chaos store (broker.conf keys). Small files keep crash copies and fills fast; the
# index is shrunk from RocketMQ's 5M slots / 20M entries (a 420 MB file) so it fits a small image.
BASE_BROKER_CONF: dict[str, str] = {
    "mappedFileSizeCommitLog": str(64 << 20),
    "maxHashSlotNum": "50000",
    "maxIndexNum": "200000",
}


class FlushMode(enum.StrEnum):
    SYNC = "SYNC_FLUSH"
    ASYNC = "ASYNC_FLUSH"

    @property
    def short(self) -> str:
        return "sync" if self is FlushMode.SYNC else "async"

    @classmethod
    def parse(cls, text: str) -> FlushMode:
        t = text.strip().upper()
        for m in cls:
            if t in (m.value, m.short.upper()):
                return m
        raise ValueError(f"flush mode {text!r}: expected sync or async")


class FaultName(enum.StrEnum):
    KILL9 = "kill9"
    POWER_LOSS = "power_loss"
    POWER_LOSS_TORN = "power_loss_torn"
    DISK_FILL = "disk_fill"
    PAUSE = "pause"
    PARTITION = "partition"  # the container topology's (chaos/container_faults.py)
    RESTART = "restart"  # a graceful stop and start (either topology)

    @property
    def is_power_loss(self) -> bool:
        return self in (FaultName.POWER_LOSS, FaultName.POWER_LOSS_TORN)


# The matrix's default faults on processes (tox -e crash names them); restart runs there too when asked for.
PROCESS_FAULTS: tuple[FaultName, ...] = (FaultName.KILL9, FaultName.POWER_LOSS, FaultName.POWER_LOSS_TORN,
                                         FaultName.DISK_FILL, FaultName.PAUSE)
# What a container topology can do to its broker (harness/containers.py): power loss and disk fill need the
# store on a host loop device, which a bind-mounted container store is not.
CONTAINER_FAULTS: tuple[FaultName, ...] = (FaultName.KILL9, FaultName.PAUSE, FaultName.PARTITION,
                                           FaultName.RESTART)


class TopologyKind(enum.StrEnum):
    PROCESS = "process"  # harness/launcher.Topology: local subprocesses
    DOCKER = "docker"  # harness/containers.ContainerTopology: containers of the project's image


@dataclass
class CycleRecord:
    """One fault cycle (or one extra phase, ``cycle`` -1) as chaos.json and the verdict see it."""

    cycle: int
    kind: str
    fault_ns: int
    restored_ns: int | None = None  # broker back (restart done, SIGCONT, space freed)
    recovery_s: float | None = None  # broker restart until its boot line (crash faults)
    service_restored_s: float | None = None  # restored_ns until the next acknowledged send
    written_offset: int = -1  # commitLogMaxOffset sampled right before the fault
    flushed_offset: int = -1  # commitLogFlushedOffset sampled right before the fault
    written_bound: int = -1  # max(written_offset, end of the last send acknowledged before the fault)
    recovered_offset: int = -1  # commitLogMaxOffset right after the restart
    # What this restart's recovery cut and kept in {storePathRootDir}/quarantine (reference_broker's
    # store/quarantine.py): none is expected after a kill -9, some after a torn power loss.
    quarantined_files: int = 0
    quarantined_bytes: int = 0
    quarantined_intact_records: int = 0
    quarantine_names: list[str] = field(default_factory=list)
    ok: bool = True
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    lookup: LookupCheck | None = None  # lookups by key and id right after the restart (chaos.lookups)
    store_check: dict[str, Any] | None = None  # checkStore after this recovery (--check-each-recovery)

    @property
    def window_bytes(self) -> int:
        """The unflushed window at the crash: what a power loss may take (bound, in commit-log bytes)."""
        if self.written_bound < 0 or self.flushed_offset < 0:
            return -1
        return max(0, self.written_bound - self.flushed_offset)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "window_bytes": self.window_bytes,
                "lookup": self.lookup.to_json() if self.lookup is not None else None}


@dataclass(frozen=True)
class ExperimentSpec:
    fault: FaultName
    flush: FlushMode
    cycles: int = 20
    profile: str | None = "default"
    runs_dir: Path = Path("runs")
    work_dir: Path | None = None  # scratch (store, images, logs); a temporary directory under it
    seed: int | None = None
    gap_s: tuple[float, float] = (0.5, 2.0)  # load between faults: the fault lands at a random moment
    load: LoadSpec = field(default_factory=LoadSpec)
    broker_conf: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    # After each recovery from a crash: a clean stop, admin checkStore, and a start again (store_check.py).
    check_each_recovery: bool = False
    # Which broker the cell runs: the reference broker, or Apache RocketMQ from a distribution directory
    # (harness/rocketmq.find_home: this path, $ROCKETMQ_HOME, or the one beside the repository).
    broker_impl: BrokerImpl = "reference"
    rocketmq_home: Path | None = None
    topology: TopologyKind = TopologyKind.PROCESS
    image: str = containers.DEFAULT_IMAGE  # the container topology's image (docker/Dockerfile)

    @property
    def scenario(self) -> str:
        prof = (self.profile or "none").replace("_", ".")
        impl = "" if self.broker_impl == "reference" else f"-{self.broker_impl}"
        where = "" if self.topology is TopologyKind.PROCESS else f"-{self.topology.value}"
        return f"chaos-{self.fault.value.replace('_', '.')}-{self.flush.short}-{prof}{impl}{where}"


class Cell:
    """The running experiment, as a fault sees it."""

    def __init__(self, spec: ExperimentSpec, record: RunRecord, topo: Topology | containers.ContainerTopology,
                 broker: BrokerProcess | containers.ContainerBroker,
                 store_root: Path, workload: Workload, ledger: Ledger, rng: random.Random) -> None:
        self.spec = spec
        self.record = record
        self.topo = topo
        self.broker = broker
        self.store_root = store_root
        self.workload = workload
        self.ledger = ledger
        self.rng = rng
        self.clock: WallClock = record.clock
        self.broker_started = time.monotonic()  # of the current broker process (the store's timers start there)
        self._quarantined = {row["name"] for row in admin.store_quarantine(store_root)}

    def status(self) -> BrokerSample | None:
        return try_status(self.broker.addr, self.clock)

    def written_bound(self, sample: BrokerSample | None, before_ns: int) -> int:
        """What the broker had written by ``before_ns``, at least: the sampled max offset, or the end of the
        last acknowledged send if that is further (sends acknowledged between the sample and the fault)."""
        acked = self.workload.max_acked_end(before_ns, self.workload.record_size())
        return max(acked, sample.max_offset if sample is not None else -1)

    def track(self, proc: Process | containers.ContainerProcess, what: str) -> None:
        """Enter a (re)started process in the ledger, replacing its previous pid."""
        for e in self.ledger.entries():
            if e.kind is ResourceKind.PROCESS and e.detail.get("what") == what and e.owner_pid == self.ledger.owner:
                self.ledger.drop(e)
        cell_ledger_proc(self.ledger, proc, what)

    def settle_after_kill(self, rec: CycleRecord, sample: BrokerSample | None, timeout_s: float = 3.0) -> None:
        """With the broker dead and new sends held: wait until every send in flight has completed (answers that
        arrived before the kill are then recorded), and fix the written bound from them."""
        self.workload.hold()
        deadline = time.monotonic() + timeout_s
        while self.workload.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)
        rec.written_bound = self.written_bound(sample, self.clock.now_ns())

    def note_quarantine(self, rec: CycleRecord) -> None:
        """Record in ``rec`` the cuts the last recovery quarantined (new files in the store's quarantine)."""
        new = [row for row in admin.store_quarantine(self.store_root) if row["name"] not in self._quarantined]
        self._quarantined.update(row["name"] for row in new)
        rec.quarantined_files += len(new)
        rec.quarantined_bytes += sum(int(row["bytes"]) for row in new)
        rec.quarantined_intact_records += sum(int(row["intact_records"]) for row in new)
        rec.quarantine_names += [str(row["name"]) for row in new]

    def check_recovered_store(self, rec: CycleRecord) -> dict[str, Any] | None:
        """The recovered store, checked offline: the broker (its sends held) is stopped cleanly, checked and
        started again. A clean stop flushes what recovery left, so the check sees exactly what it made."""
        summary = check_store_at_cell_end(self.broker, self.store_root, self.broker.conf)
        try:
            self.broker.start()
        except LaunchError as e:
            rec.ok = False
            rec.error = f"broker did not start again after the store check: {e}"
            return summary
        self.broker_started = time.monotonic()
        self.track(self.broker, "broker")
        return summary

    def restart_after_crash(self, rec: CycleRecord) -> None:
        """Start the broker again on its store, time it, read the recovered end, let the producer go on."""
        t0 = time.monotonic()
        before_start_ns = self.clock.now_ns()  # every answer recorded by now came from the crashed process
        try:
            self.broker.start()
        except LaunchError as e:
            rec.ok = False
            rec.error = f"broker did not come back: {e}"
            return
        rec.recovery_s = time.monotonic() - t0
        self.broker_started = time.monotonic()
        rec.restored_ns = self.clock.now_ns()
        self.track(self.broker, "broker")
        after = self.status()
        rec.recovered_offset = after.max_offset if after is not None else -1
        self.note_quarantine(rec)
        if self.spec.check_each_recovery:
            rec.store_check = self.check_recovered_store(rec)
        self.workload.release()
        self.record.add_fault(FaultKind.RESTART, self.broker.name, ts_ns=rec.restored_ns, cycle=rec.cycle,
                              recovery_s=round(rec.recovery_s, 4), recovered_offset=rec.recovered_offset)
        acks = self.workload.acked()
        rec.lookup = probe(self.broker.addr, self.spec.load.topic, rec.cycle,
                           choose_sample(acks, before_start_ns), acks)


class Fault(abc.ABC):
    """One kind of fault; subclasses set ``name``."""

    name: FaultName

    def unsupported_reason(self) -> str | None:
        """Why this fault cannot run here (None: it can)."""
        return None

    def broker_conf(self, flush: FlushMode) -> dict[str, str]:
        return {}

    def load_spec(self, load: LoadSpec) -> LoadSpec:
        """The load this fault needs (disk fill paces the producer)."""
        return load

    @contextlib.contextmanager
    def storage(self, work: Path, ledger: Ledger) -> Iterator[Path]:
        """The store root for the broker (default: a plain directory under the scratch directory)."""
        yield work / "store"

    @abc.abstractmethod
    def cycle(self, cell: Cell, i: int) -> CycleRecord: ...

    def extra_phases(self, cell: Cell) -> list[CycleRecord]:
        """Phases after the cycles (disk fill: ENOSPC, cleaning)."""
        return []

    def params(self) -> dict[str, Any]:
        return {}


@dataclass
class ExperimentResult:
    spec: ExperimentSpec
    run_dir: Path | None
    skipped: str | None = None
    cycles: list[CycleRecord] = field(default_factory=list)
    check: CheckResult | None = None
    verdict: Verdict | None = None
    drain: DrainStats | None = None
    sysctl: dict[str, Any] | None = None
    seconds: float = 0.0
    error: str | None = None
    final_min_offset: int = 0  # the commit log's min offset when the drain ran
    lag_held_s: float = 0.0  # time the producer waited for the consumer to come within LoadSpec.max_lag
    # Absent messages looked up directly in the commit log: (probed, found intact there, example keys).
    unreachable: tuple[int, int, list[str]] = (0, 0, [])
    # Acknowledged, still in the broker at the end, but passed over by the live consumer group (chaos.load
    # Workload.passed_over): (count, a few examples).
    passed_over: tuple[int, list[dict[str, Any]]] = (0, [])
    store_check: dict[str, Any] | None = None  # the offline check after the final clean stop (store_check.py)
    broker_version: str | None = None  # the broker's brokerVersionDesc (meta.json's broker_impl)

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (self.error is None and self.verdict is not None and self.verdict.ok)

    def recovery_times(self) -> list[float]:
        """Per cycle: the broker's restart time for crashes, else the time until service came back."""
        out = []
        for c in self.cycles:
            v = c.recovery_s if c.recovery_s is not None else c.service_restored_s
            if v is not None and c.cycle >= 0:
                out.append(v)
        return out

    def summary(self) -> dict[str, Any]:
        """One row of the matrix table."""
        chk, v, rec = self.check, self.verdict, self.recovery_times()
        windows = [c.window_bytes for c in self.cycles if c.window_bytes >= 0]
        if v is not None and not v.complete:
            # Not drained (chaos.verdict rule 8): what the consumer had not seen is no loss count.
            return {**self._summary(None, None, rec, windows), "complete": False, "not_seen": v.absent}
        return {**self._summary(chk, v, rec, windows), "complete": True, "not_seen": None}

    def _summary(self, chk: CheckResult | None, v: Verdict | None, rec: list[float],
                 windows: list[int]) -> dict[str, Any]:
        verdict = self.verdict
        crashes = sum(1 for c in self.cycles if c.cycle >= 0 and c.kind in CRASH_KINDS)
        return {
            "broker_impl": self.spec.broker_impl,
            "fault": self.spec.fault.value, "flush": self.spec.flush.short, "profile": self.spec.profile,
            "sysctl_applied": None if self.sysctl is None else self.sysctl.get("applied"),
            "skipped": self.skipped, "error": self.error,
            "cycles": sum(1 for c in self.cycles if c.cycle >= 0), "cycles_planned": self.spec.cycles,
            "acknowledged": chk.acknowledged if chk else None, "lost": chk.lost if chk else None,
            "lost_bytes": chk.lost_bytes if chk else None,
            "absent": v.absent if v else None, "vanished": v.vanished if v else None,
            "absent_bytes": v.absent_body_bytes if v else None,
            "lost_log_bytes": v.lost_log_bytes if v else None,
            "window_bytes_max": max(windows) if windows else None,
            "window_bytes_median": int(statistics.median(windows)) if windows else None,
            "duplicated": chk.duplicated if chk else None, "recovered": chk.recovered if chk else None,
            "unknown": chk.unknown if chk else None, "failed": chk.failed if chk else None,
            "unexpected": chk.unexpected if chk else None, "corrupted": v.corrupted if v else None,
            "lookups_sampled": v.lookups.sampled if v and v.lookups else None,
            "lookups_found": dict(v.lookups.found) if v and v.lookups else None,
            "lookups_missed": v.lookups.missed_total if v and v.lookups else None,
            "lookups_excused": sum(v.lookups.excused.values()) if v and v.lookups else None,
            "quarantined_files": sum(c.quarantined_files for c in self.cycles),
            "quarantined_bytes": sum(c.quarantined_bytes for c in self.cycles),
            "quarantined_intact_records": sum(c.quarantined_intact_records for c in self.cycles),
            "recovery_s_median": round(statistics.median(rec), 4) if rec else None,
            "recovery_s_max": round(max(rec), 4) if rec else None,
            "ok": self.ok,
            "violations": list(verdict.violations) if verdict else ([self.error] if self.error else []),
            "run_dir": str(self.run_dir) if self.run_dir else None, "seconds": round(self.seconds, 1),
            "lag_held_s": self.lag_held_s,
            "passed_over": self.passed_over[0],
            "crashes_per_hour": round(crashes * 3600 / self.seconds, 1) if crashes and self.seconds > 0 else None,
        }


def wait_route(namesrv: str, topic: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(admin.AdminError, OSError):
            if admin.read_queues(namesrv, topic):
                return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no route after {timeout_s} s")


def wait_first_ack(workload: Workload, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while workload.sent_ok < 64 and time.monotonic() < deadline:
        time.sleep(0.05)
    if workload.sent_ok == 0:
        errs = list(workload.recent_errors)[-3:]
        raise RuntimeError(f"no send acknowledged in {timeout_s} s (last errors: {errs})")


def _await_service(cycles: list[CycleRecord], workload: Workload) -> None:
    """Keep the load on until a send is acknowledged after the last fault ended (or the deadline passes)."""
    last = max((c.restored_ns for c in cycles if c.restored_ns is not None), default=None)
    if last is None:
        return
    deadline = time.monotonic() + SERVICE_DEADLINE_S
    while workload.first_ok_after(last) is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _service_times(cycles: list[CycleRecord], workload: Workload) -> None:
    for c in cycles:
        if c.restored_ns is not None:
            first = workload.first_ok_after(c.restored_ns)
            c.service_restored_s = None if first is None else (first - c.restored_ns) / 1e9
            if c.ok and (c.service_restored_s is None or c.service_restored_s > SERVICE_DEADLINE_S):
                c.ok = False
                c.error = c.error or f"no send acknowledged within {SERVICE_DEADLINE_S} s after the fault ended"


def run_experiment(spec: ExperimentSpec, fault: Fault, *, ledger: Ledger | None = None,
                   log: Any = None) -> ExperimentResult:
    """Run one experiment; never leaves a process, mount or loop device behind. ``log`` (a callable taking a
    line) gets progress lines."""
    say = log or (lambda _line: None)
    reason = fault.unsupported_reason() or _topology_unsupported(spec)
    if reason is None and spec.broker_impl == "rocketmq":
        reason = rocketmq.unavailable(spec.rocketmq_home)
    if reason is not None:
        return ExperimentResult(spec, None, skipped=reason)
    ledger = ledger if ledger is not None else Ledger()
    t_start = time.monotonic()
    seed = spec.seed if spec.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    params = {"fault": spec.fault.value, "flush": spec.flush.value, "cycles": spec.cycles, "profile": spec.profile,
              "broker_impl": spec.broker_impl, "broker_conf": dict(spec.broker_conf),
              "seed": seed, "gap_s": list(spec.gap_s), "load": asdict(spec.load), **fault.params()}
    record, work, client_log = open_cell(spec.scenario, spec.runs_dir, spec.work_dir, params, spec.command,
                                         ledger)
    result = ExperimentResult(spec, record.run_dir)
    workload: Workload | None = None
    try:
        with contextlib.ExitStack() as stack:
            result.sysctl = apply_profile(stack, spec.profile)
            record.update_meta(sysctl=result.sysctl)
            store_root = stack.enter_context(fault.storage(work, ledger))
            conf = {**BASE_BROKER_CONF, "flushDiskType": spec.flush.value, **fault.broker_conf(spec.flush),
                    **spec.broker_conf}
            topo: Topology | containers.ContainerTopology
            if spec.topology is TopologyKind.DOCKER:
                topo = containers.ContainerTopology(work / "topo", broker_conf=conf, brokers=0, image=spec.image)
            else:
                topo = Topology(work / "topo", broker_conf=conf, brokers=0, impl=spec.broker_impl,
                                rocketmq_home=spec.rocketmq_home)
            stack.callback(topo.stop)
            topo.start()
            assert topo.namesrv is not None
            cell_ledger_proc(ledger, topo.namesrv, "namesrv")
            broker = topo.add_broker("broker-a", extra={"storePathRootDir": str(store_root)})
            broker_started = time.monotonic()
            cell_ledger_proc(ledger, broker, "broker")
            status = first_status(broker.addr, record.clock)
            result.broker_version = status.version if status else None
            record.update_meta(broker={**broker.conf, "brokerRole": conf.get("brokerRole", "ASYNC_MASTER")},
                               broker_impl=status.version if status else None)
            admin.update_topic(topo.namesrv_addr, spec.load.topic, spec.load.queues, spec.load.queues,
                               broker_addr=broker.addr)
            wait_route(topo.namesrv_addr, spec.load.topic)
            workload = Workload(topo.namesrv_addr, fault.load_spec(spec.load), record, record.clock)
            stack.callback(workload.close)
            workload.start()
            sampler = Sampler(lambda: broker.addr, lambda: broker.pid if broker.alive else None,
                              record.metrics_writer(), record.clock, workload.counters)
            sampler.start()
            stack.callback(sampler.stop)
            vm_sampler = VmSampler(record.metrics_writer("vm").record, clock=record.clock.now_ns).start()
            stack.callback(vm_sampler.stop)
            wait_first_ack(workload)
            cell = Cell(spec, record, topo, broker, store_root, workload, ledger, rng)
            cell.broker_started = broker_started
            say(f"{spec.scenario}: broker up, load running; {spec.cycles} cycles")
            try:
                _run_cycles(spec, fault, cell, rng, result, say)
            except Exception as e:  # noqa: BLE001 - a cycle that failed outright stops the cycles, not the drain
                # An experiment that stops early still drains what the broker holds: without it every
                # acknowledged message not yet consumed would read as missing (chaos.verdict: "incomplete").
                result.error = f"{type(e).__name__}: {e}"
                say(f"{spec.scenario}: stopped early: {result.error}; draining what the broker holds")
            _await_service(result.cycles, workload)
            workload.stop_producing()
            result.lag_held_s = round(workload.lag_held_s, 2)
            workload.wait_caught_up(5.0)  # the drain finds the rest; this only lets the live consumer finish
            workload.stop_consuming()
            if broker.alive:
                final = try_status(broker.addr, record.clock)
                workload.final_min_offset = max(0, final.min_offset) if final is not None else 0
                result.final_min_offset = workload.final_min_offset
                result.drain = workload.drain()
                result.unreachable = _unreachable(broker.addr, workload)
                result.passed_over = _passed_over(workload)
            else:
                result.drain = DrainStats(complete=False, problems=["broker not running at the end"])
            _service_times(result.cycles, workload)
            result.store_check = check_store_at_cell_end(broker, store_root, conf)
            say(f"{spec.scenario}: store check: {result.store_check['outcome']}")
    except Exception as e:  # noqa: BLE001 - a cell's boundary: the verdict records it; cleanup below still runs
        result.error = f"{type(e).__name__}: {e}"
        say(f"{spec.scenario}: error: {result.error}")
    finally:
        close_cell(result, record, ledger, work, client_log)
    if result.error is None or workload is not None:
        _judge(result, workload)
    result.seconds = time.monotonic() - t_start
    write_json_atomic(record.run_dir / CHAOS_FILE, _chaos_json(result))
    return result


CRASH_KINDS = frozenset({"kill9", "power_loss", "power_loss_torn"})  # the cycles that crash the broker

UNREACHABLE_PROBES = 5000


def _unreachable(addr: str, workload: Workload) -> tuple[int, int, list[str]]:
    """Look the absent messages up in the commit log itself, by their offsets: one found there intact is in
    the log but unreachable through its consume queue (not a loss of data, a loss of the index to it)."""
    absent = sorted(workload.absent().items(), key=lambda kv: kv[1].commit_log_offset)
    known = [(k, a) for k, a in absent if a.commit_log_offset >= 0]
    step = max(1, -(-len(known) // UNREACHABLE_PROBES))  # an even sample over the whole log when there are many
    probe = known[::step]
    if not probe:
        return 0, 0, []
    try:
        found = messages_at(addr, [a.commit_log_offset for _, a in probe])
    except (RemotingError, OSError):
        return 0, 0, []
    hits = [k for k, a in probe
            if (m := found.get(a.commit_log_offset)) is not None and classify(m.keys, m.body, "").key == k]
    return len(probe), len(hits), hits[:10]


def _passed_over(workload: Workload) -> tuple[int, list[dict[str, Any]]]:
    skipped = sorted(workload.passed_over().items(), key=lambda kv: kv[1].end_ns)
    return len(skipped), [{"key": k, "queue_id": a.queue_id, "queue_offset": a.queue_offset,
                           "commit_log_offset": a.commit_log_offset, "acked_ns": a.end_ns} for k, a in skipped[:20]]


KEPT_LOG_BYTES = 16 << 20  # of each RocketMQ log, the last this many bytes


def open_cell(scenario: str, runs_dir: Path, work_dir: Path | None, params: dict[str, Any],
              command: Sequence[str] | None, ledger: Ledger) -> tuple[RunRecord, Path, logging.Handler]:
    """A cell's start: its run record, its scratch directory (in the ledger) and the handler that sends the
    client library's warnings (refused connections, failed pulls: expected under faults) to the run directory
    rather than the terminal; ``close_cell`` undoes it."""
    record = RunRecord.create(runs_dir, scenario, params, list(command) if command is not None else list(sys.argv))
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"rmq-lab-{scenario}-", dir=work_dir))
    ledger.add(ResourceKind.PATH, work, what="chaos scratch directory")
    client_log = logging.FileHandler(record.run_dir / CLIENT_LOG, encoding="utf-8")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("reference_broker").addHandler(client_log)
    return record, work, client_log


class _CellResult(Protocol):
    error: str | None


def close_cell(result: _CellResult, record: RunRecord, ledger: Ledger, work: Path, client_log: logging.Handler) -> None:
    """A cell's teardown, whatever happened in it: the client's log detached, the processes' logs kept in the
    run record, the record finished, and everything the cell left (processes, mounts, files) cleaned up; a
    cleanup that fails is the cell's error."""
    logging.getLogger("reference_broker").removeHandler(client_log)
    client_log.close()
    keep_logs(work / "topo", record.run_dir / "logs")
    try:
        record.finish()
    finally:
        report = cleanup(ledger, only_mine=True)
        shutil.rmtree(work, ignore_errors=True)
        if report.failed:
            result.error = (result.error or "") + f" cleanup failed: {report.failed}"


def keep_logs(topo_root: Path, dest: Path) -> None:
    """Copy the processes' logs (what recovery said it truncated, errors) into the run record; for RocketMQ
    also its own logs (``${user.home}/logs/rocketmqlogs``: store.log says what recovery and dispatch did), each
    cut to its last ``KEPT_LOG_BYTES``, under ``logs/<process>-rocketmqlogs/``."""
    for log_file in sorted(topo_root.glob("*.log")):
        dest.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            shutil.copyfile(log_file, dest / log_file.name)
    for log_file in sorted(topo_root.glob("*/rmq-home/logs/rocketmqlogs/*.log")):
        to = dest / f"{log_file.parents[3].name}-rocketmqlogs" / log_file.name
        to.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError), log_file.open("rb") as src, to.open("wb") as out:
            size = src.seek(0, 2)
            src.seek(max(0, size - KEPT_LOG_BYTES))
            shutil.copyfileobj(src, out)


def cell_ledger_proc(ledger: Ledger, proc: Process | containers.ContainerProcess, what: str) -> None:
    if isinstance(proc, containers.ContainerProcess):
        # The container and its network: `docker rm -f` and `docker network rm` undo them (chaos.leftovers).
        ledger.add(ResourceKind.CONTAINER, proc.container, what=what)
        ledger.add(ResourceKind.DOCKER_NETWORK, proc.network, what="chaos container network")
        return
    ledger.add(ResourceKind.PROCESS, proc.pid, what=what, start_time=process_start_time(proc.pid))


def _topology_unsupported(spec: ExperimentSpec) -> str | None:
    if spec.topology is TopologyKind.PROCESS:
        if spec.fault not in PROCESS_FAULTS and spec.fault is not FaultName.RESTART:
            return f"{spec.fault.value} needs --topology docker"
        return None
    if spec.fault not in CONTAINER_FAULTS:
        return (f"{spec.fault.value} is not a container fault (--topology docker runs "
                f"{', '.join(f.value for f in CONTAINER_FAULTS)})")
    if spec.broker_impl != "reference":
        return "the image runs the reference broker only (--topology docker with --broker-impl reference)"
    return containers.unavailable(spec.image)


def apply_profile(stack: contextlib.ExitStack, profile: str | None) -> dict[str, Any]:
    if profile is None:
        return {"profile": None, "applied": False, "reason": "no profile requested", "values": {}}
    from sysctl_profiles import SysctlProfileError, applied_profile

    try:
        state = stack.enter_context(applied_profile(profile, allow_unapplied=True))
    except SysctlProfileError as e:
        return {"profile": profile, "applied": False, "reason": str(e), "values": {}}
    return state.record()


def _judge(result: ExperimentResult, workload: Workload | None) -> None:
    if result.run_dir is None:
        return
    spec = result.spec
    allow_loss = spec.fault.is_power_loss and spec.flush is FlushMode.ASYNC
    try:
        result.check = check_run(result.run_dir, allow_loss=allow_loss)
    except Exception as e:  # noqa: BLE001 - a cell's boundary: a failed check is the cell's error
        result.error = (result.error or "") + f" check failed: {type(e).__name__}: {e}"
        return
    if workload is None:
        return
    result.verdict = evaluate(spec.fault.value, spec.flush.value, result.check, result.cycles, workload.lost(),
                              workload.absent(), workload.record_size(), workload.spec.msg_size,
                              corrupted=len(workload.corrupted), unreachable=result.unreachable[1],
                              lookups=[c.lookup for c in result.cycles if c.lookup is not None],
                              drain_complete=result.drain is not None
                              and result.drain.complete, drain_problems=result.drain.problems if result.drain
                              else ["no drain"], error=result.error,
                              flushed_reported=spec.broker_impl == "reference")
    for c in result.cycles:
        apply_store_check(result.verdict, c.store_check, f"after the recovery of cycle {c.cycle}")
    apply_store_check(result.verdict, result.store_check)
    # Passing over (Workload.passed_over) is what 4.9.8's dispatch does after a power cut, so it is reported,
    # not judged, unless the broker was told to dispatch only flushed records: then it must not happen.
    if result.passed_over[0] and str(spec.broker_conf.get("dispatchFlushedOnly", "")).lower() == "true":
        result.verdict.violations.append(
            f"{result.passed_over[0]} acknowledged messages passed over by the live group with "
            f"dispatchFlushedOnly=true (e.g. {', '.join(e['key'] for e in result.passed_over[1][:3])})")
        result.verdict.ok = False


def _run_cycles(spec: ExperimentSpec, fault: Fault, cell: Cell, rng: random.Random, result: ExperimentResult,
                say: Callable[[str], None]) -> None:
    for i in range(spec.cycles):
        time.sleep(rng.uniform(*spec.gap_s))
        rec = fault.cycle(cell, i)
        result.cycles.append(rec)
        say(f"  cycle {i + 1}/{spec.cycles}: {_cycle_line(rec)}")
        if not rec.ok:
            return
    for rec in fault.extra_phases(cell):
        result.cycles.append(rec)
        say(f"  {rec.kind}: {_cycle_line(rec)}")


def _cycle_line(rec: CycleRecord) -> str:
    parts = [rec.kind]
    if rec.window_bytes >= 0:
        parts.append(f"unflushed {rec.window_bytes:,} B")
    if rec.recovery_s is not None:
        parts.append(f"restart {rec.recovery_s:.2f} s")
    if rec.quarantined_files:
        parts.append(f"quarantined {rec.quarantined_bytes:,} B ({rec.quarantined_intact_records} intact records)")
    if not rec.ok:
        parts.append(f"FAILED: {rec.error}")
    return ", ".join(parts)


def _chaos_json(result: ExperimentResult) -> dict[str, Any]:
    spec = result.spec
    return {
        "schema_version": 1,
        "fault": spec.fault.value, "flush": spec.flush.value, "profile": spec.profile,
        "sysctl": result.sysctl,
        "summary": result.summary(),
        "verdict": result.verdict.to_json() if result.verdict else None,
        "drain": asdict(result.drain) if result.drain else None,
        "final_min_offset": result.final_min_offset,
        "passed_over": {"count": result.passed_over[0], "examples": result.passed_over[1]},
        "unreachable": {"probed": result.unreachable[0], "in_log": result.unreachable[1],
                        "examples": result.unreachable[2]},
        "cycles": [c.to_json() for c in result.cycles],
        "store_check": result.store_check,
    }

