"""This module owns the transaction cells: transactional producers (chaos/tx_producer.py, separate processes)
and a push consumer of the real topic run against one broker while it is killed -9, loses power, or a producer
is killed between prepare and END_TRANSACTION; the run's events are judged by chaos.tx_verdict.

- ``kill9``: SIGKILL the broker at a random moment and restart it on its store.
- ``power_loss``: the store lives on a loop-mounted image (chaos.loopfs); SIGKILL, swap in the image as the
  device held it, restart (root + loop devices; skipped with the reason otherwise).
- ``producer_kill9``: a producer process of its own group (``HOLD_GROUP``) sends ``hold_count``
  transactions whose local transactions never return (and whose check listener never answers), and is
  SIGKILLed once every half message is stored; then a new process of that group comes up, answers the
  broker's check-backs from the key, and the held keys must end as their plans say.

The load producer (worker ``p0``, group ``LOAD_GROUP``) runs throughout with chaos.tx_verdict's default mix
(commit, rollback, UNKNOW then commit, UNKNOW then rollback, never resolved). Both brokers run with short
check settings (``TX_BROKER_CONF``: a check every 500 ms of half messages older than 1 s), so an UNKNOW is
resolved within seconds. After the cycles the load stops; the cell waits until every resolvable key is
resolved and every committed key delivered (or ``RESOLVE_TIMEOUT_S`` passes), then drains the real topic from
its first offset (chaos.load's drain) so that "lost" means "not in the broker". The run record is a chaos
cell's: meta.json, events (send = half message, tx = decisions, receive = deliveries), faults.jsonl,
check.json, chaos.json (cycles, verdict) and logs/ (the broker's and each producer process's stderr).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import chaos
from chaos.experiment import (
    BASE_BROKER_CONF,
    CHAOS_FILE,
    CycleRecord,
    FlushMode,
    cell_ledger_proc,
    close_cell,
    open_cell,
    wait_route,
)
from chaos.leftovers import Ledger, ResourceKind, process_start_time
from chaos.load import DrainStats, LoadSpec, Workload
from chaos.loopfs import LoopFs, unsupported_reason
from chaos.sampler import first_status, try_status
from chaos.tx_verdict import Crash, TxVerdict, gather, judge
from harness import rocketmq
from harness.checker import CheckResult, check_run
from harness.launcher import BrokerProcess, LaunchError, Topology
from harness.records import EventWriter, FaultKind, RunRecord
from harness.records.findings import Finding, FindingKind
from harness.records.reader import load_events
from harness.records.run import write_json_atomic
from harness.rocketmq import BrokerImpl
from reference_broker.tools import admin

TOPIC: Final = "ChaosTxTopic"
QUEUES: Final = 4
LOAD_GROUP: Final = "CHAOS_TX_PG"
HOLD_GROUP: Final = "CHAOS_TX_HOLD_PG"  # producer_kill9's processes: only they can answer for the held keys
CONSUMER_GROUP: Final = "CHAOS_TX_CG"
# BrokerConfig keys, both brokers (4.9.8 reads them from broker.conf): a check every 500 ms of half messages
# older than 1 s, 15 checks at most (RocketMQ's default transactionCheckMax) before a half message is given up.
TX_BROKER_CONF: Final[dict[str, str]] = {"transactionCheckInterval": "500", "transactionTimeOut": "1000",
                                         "transactionCheckMax": "15"}
IMAGE_BYTES: Final = 768 << 20  # power_loss: the loop image (as chaos.power_loss's)
RESOLVE_TIMEOUT_S: Final = 60.0  # after the load stops: every key resolved and every commit delivered by then
READY_TIMEOUT_S: Final = 30.0
HALF_OFFSETS_FILE: Final = "tx_half_offsets.json"


class TxFault(enum.StrEnum):
    KILL9 = "kill9"
    POWER_LOSS = "power_loss"
    PRODUCER_KILL9 = "producer_kill9"


@dataclass(frozen=True)
class TxSpec:
    fault: TxFault
    flush: FlushMode = FlushMode.SYNC
    cycles: int = 3
    runs_dir: Path = Path("runs")
    work_dir: Path | None = None
    seed: int | None = None
    gap_s: tuple[float, float] = (0.5, 2.0)
    msg_size: int = 256
    threads: int = 4  # the load producer's senders (one transaction at a time each)
    hold_count: int = 4  # producer_kill9: transactions the killed producer holds
    command: tuple[str, ...] | None = None
    broker_impl: BrokerImpl = "reference"
    rocketmq_home: Path | None = None

    @property
    def scenario(self) -> str:
        impl = "" if self.broker_impl == "reference" else f"-{self.broker_impl}"
        return f"chaos-tx-{self.fault.value.replace('_', '.')}-{self.flush.short}{impl}"


@dataclass
class TxResult:
    spec: TxSpec
    run_dir: Path | None
    skipped: str | None = None
    cycles: list[CycleRecord] = field(default_factory=list)
    check: CheckResult | None = None
    verdict: TxVerdict | None = None
    drain: DrainStats | None = None
    broker_version: str | None = None
    pending_at_end: int = 0  # keys still unresolved or undelivered when RESOLVE_TIMEOUT_S ran out
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (self.error is None and self.verdict is not None and self.verdict.ok)

    def summary(self) -> dict[str, Any]:
        chk, v = self.check, self.verdict
        return {
            "broker_impl": self.spec.broker_impl, "fault": self.spec.fault.value, "flush": self.spec.flush.short,
            "skipped": self.skipped, "error": self.error, "cycles": len(self.cycles),
            "sends": chk.sends if chk else None,
            "committed": v.committed if v else None, "rolled_back": v.rolled_back if v else None,
            "never_resolved": v.unresolved_never if v else None,
            "resolved_by_check": v.resolved_by_check if v else None,
            "check_ms_median": v.check_latency_ms_median if v else None,
            "check_ms_max": v.check_latency_ms_max if v else None,
            "held": v.held if v else None, "held_resolved": v.held_resolved if v else None,
            "leaked": v.leaked if v else None, "early": v.early if v else None, "lost": v.lost if v else None,
            "lost_excused": v.lost_excused if v else None, "unresolved": v.unresolved if v else None,
            "duplicated": chk.duplicated if chk else None, "pending_at_end": self.pending_at_end,
            "ok": self.ok, "violations": list(v.violations) if v else ([self.error] if self.error else []),
            "findings": list(v.findings) if v else [],
            "run_dir": str(self.run_dir) if self.run_dir else None, "seconds": round(self.seconds, 1),
        }


class TxLog:
    """The parent's side of the producer processes: their stdout lines become run-record rows; what the cell
    needs to wait on (acknowledged half messages, decisions, held keys) is kept here."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.lock = threading.Lock()
        self.writers: dict[str, EventWriter] = {}
        self.half_offsets: dict[str, int] = {}
        self.acked: set[str] = set()
        self.resolved: set[str] = set()
        self.committed: set[str] = set()
        self.held: dict[str, list[str]] = {}

    def on_line(self, worker: str, line: str) -> str | None:
        """Record one line; returns its event name (None for a line that is not one: a killed process's torn
        last line)."""
        try:
            ev = json.loads(line)
            name = str(ev["e"])
        except (ValueError, KeyError, TypeError):
            return None
        with self.lock:
            w = self.writers.get(worker)
            if w is None:
                w = self.writers[worker] = self.record.events_writer(f"producer-{worker}")
            key = str(ev.get("key", ""))
            if name == "send":
                w.record_send(key, TOPIC, int(ev["qid"]), int(ev["qoff"]), int(ev["start"]), int(ev["end"]),
                              str(ev["outcome"]), int(ev["code"]), int(ev["bytes"]))
                if ev["outcome"] == "ok":
                    self.acked.add(key)
                    self.half_offsets[key] = int(ev["phys"])
            elif name == "tx":
                w.record_tx(key, TOPIC, str(ev["d"]), int(ev["t"]), int(ev["t"]), session=str(ev["s"]))
                if ev["d"] in ("ok", "fail"):
                    self.resolved.add(key)
                if ev["d"] == "ok":
                    self.committed.add(key)
            elif name == "held":
                self.held.setdefault(worker, []).append(key)
        return name

    def pending(self, received: set[str]) -> list[str]:
        """Acknowledged keys that their plan resolves and are not resolved yet, and committed keys not
        delivered yet."""
        from chaos.tx_verdict import plan_of

        with self.lock:
            out = [k for k in self.acked if k not in self.resolved and (p := plan_of(k)) is not None and p.resolvable]
            out += [k for k in self.committed if k not in received]
        return out


class TxChild:
    """One producer process (chaos.tx_producer) in the ledger; its stdout read into the TxLog."""

    def __init__(self, log: TxLog, ledger: Ledger, namesrv: str, worker: str, mode: str, group: str,
                 spec: TxSpec, log_dir: Path) -> None:
        self.worker, self.ledger = worker, ledger
        self.ready, self.done = threading.Event(), threading.Event()
        root = Path(chaos.__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        log_dir.mkdir(parents=True, exist_ok=True)
        self._stderr: IO[bytes] = open(log_dir / f"tx-producer-{worker}.log", "ab")  # noqa: SIM115 - closed in reap
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.tx_producer", "--namesrv", namesrv, "--group", group, "--topic", TOPIC,
             "--worker", worker, "--mode", mode, "--threads", str(spec.threads), "--count", str(spec.hold_count),
             "--size", str(spec.msg_size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env, text=True, bufsize=1)
        self.entry = ledger.add(ResourceKind.PROCESS, self.proc.pid, what=f"tx producer {worker}",
                                start_time=process_start_time(self.proc.pid))
        self._reader = threading.Thread(target=self._read, args=(log,), name=f"tx-reader-{worker}", daemon=True)
        self._reader.start()

    def _read(self, log: TxLog) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            name = log.on_line(self.worker, line)
            if name == "ready":
                self.ready.set()
            elif name == "done":
                self.done.set()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tx producer {self.worker} did not come up (exit {self.proc.poll()})")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.reap()

    def stop_sending(self) -> None:
        """No new transactions; the process stays and answers check-backs."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()

    def stop(self, timeout_s: float = 30.0) -> None:
        """``exit`` on stdin: it shuts down cleanly; killed if it does not end in time."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("exit\n")
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout_s)
        self.kill()

    def reap(self) -> None:
        self.proc.wait()
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr.close()
        self.ledger.drop(self.entry)


class _Cell:
    """The running cell, as the faults see it."""

    def __init__(self, spec: TxSpec, record: RunRecord, topo: Topology, broker: BrokerProcess, ledger: Ledger,
                 txlog: TxLog, children: list[TxChild], fs: LoopFs | None, rng: random.Random) -> None:
        self.spec, self.record, self.topo, self.broker, self.ledger = spec, record, topo, broker, ledger
        self.txlog, self.children, self.fs, self.rng = txlog, children, fs, rng
        self.clock = record.clock
        self.crashes: list[Crash] = []

    def spawn(self, worker: str, mode: str, group: str) -> TxChild:
        child = TxChild(self.txlog, self.ledger, self.topo.namesrv_addr, worker, mode, group, self.spec,
                        self.record.run_dir / "logs")
        self.children.append(child)
        child.wait_ready()
        return child

    def cycle(self, i: int) -> CycleRecord:
        if self.spec.fault is TxFault.PRODUCER_KILL9:
            return self.producer_kill9(i)
        return self.broker_crash(i)

    def broker_crash(self, i: int) -> CycleRecord:
        before = try_status(self.broker.addr, self.clock)
        t_kill = self.clock.now_ns()
        self.broker.kill()
        swap = self.fs.crash_swap() if self.fs is not None else None
        rec = CycleRecord(cycle=i, kind=self.spec.fault.value, fault_ns=t_kill,
                          written_offset=before.max_offset if before else -1,
                          flushed_offset=before.flushed_offset if before else -1)
        if swap is not None:
            rec.extra.update(copy_s=round(swap.copy_s, 4))
        self.record.add_fault(self.spec.fault.value, self.broker.name, ts_ns=t_kill, cycle=i,
                              written_offset=rec.written_offset, flushed_offset=rec.flushed_offset)
        t0 = time.monotonic()
        try:
            self.broker.start()
        except LaunchError as e:
            rec.ok, rec.error = False, f"broker did not come back: {e}"
            return rec
        rec.recovery_s = time.monotonic() - t0
        rec.restored_ns = self.clock.now_ns()
        for entry in self.ledger.entries():
            if entry.kind is ResourceKind.PROCESS and entry.detail.get("what") == "broker":
                self.ledger.drop(entry)
        cell_ledger_proc(self.ledger, self.broker, "broker")
        if swap is not None:
            self.crashes.append(Crash(t_kill, rec.flushed_offset, rec.restored_ns))
        after = try_status(self.broker.addr, self.clock)
        rec.recovered_offset = after.max_offset if after is not None else -1
        self.record.add_fault(FaultKind.RESTART, self.broker.name, ts_ns=rec.restored_ns, cycle=i,
                              recovery_s=round(rec.recovery_s, 4), recovered_offset=rec.recovered_offset)
        return rec

    def producer_kill9(self, i: int) -> CycleRecord:
        """A producer that holds ``hold_count`` prepared transactions is killed -9; a new one of its group comes
        up to answer the check-backs."""
        worker = f"k{i}"
        holder = self.spawn(worker, "hold", HOLD_GROUP)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(self.txlog.held.get(worker, [])) < self.spec.hold_count and time.monotonic() < deadline:
            time.sleep(0.01)
        held = list(self.txlog.held.get(worker, []))
        t_kill = self.clock.now_ns()
        holder.kill()
        rec = CycleRecord(cycle=i, kind=TxFault.PRODUCER_KILL9.value, fault_ns=t_kill)
        rec.extra.update(held=held)
        self.record.add_fault(TxFault.PRODUCER_KILL9.value, f"tx producer {worker}", ts_ns=t_kill, cycle=i,
                              held=held, group=HOLD_GROUP)
        if len(held) < self.spec.hold_count:
            rec.ok, rec.error = False, f"the producer held {len(held)} of {self.spec.hold_count} transactions"
            return rec
        self.spawn(f"{worker}c", "check", HOLD_GROUP)
        rec.restored_ns = self.clock.now_ns()
        return rec


def _kill_all(children: list[TxChild]) -> None:
    for c in children:
        c.kill()


def _wait_resolved(txlog: TxLog, workload: Workload, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while (n := len(txlog.pending(workload.received_keys()))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return n


def run_transactions(spec: TxSpec, *, ledger: Ledger | None = None,
                     log: Callable[[str], None] | None = None) -> TxResult:
    """Run one transaction cell; never leaves a process, mount or loop device behind."""
    say = log or (lambda _line: None)
    if spec.broker_impl == "rocketmq" and (reason := rocketmq.unavailable(spec.rocketmq_home)) is not None:
        return TxResult(spec, None, skipped=reason)
    if spec.fault is TxFault.POWER_LOSS and (reason := unsupported_reason()) is not None:
        return TxResult(spec, None, skipped=reason)
    ledger = ledger if ledger is not None else Ledger()
    t_start = time.monotonic()
    seed = spec.seed if spec.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    params = {"fault": spec.fault.value, "flush": spec.flush.value, "cycles": spec.cycles,
              "broker_impl": spec.broker_impl, "seed": seed, "gap_s": list(spec.gap_s), "msg_size": spec.msg_size,
              "threads": spec.threads, "hold_count": spec.hold_count, "topic": TOPIC, "tx_conf": TX_BROKER_CONF}
    record, work, client_log = open_cell(spec.scenario, spec.runs_dir, spec.work_dir, params, spec.command, ledger)
    result = TxResult(spec, record.run_dir)
    txlog = TxLog(record)
    children: list[TxChild] = []
    cell: _Cell | None = None
    try:
        with contextlib.ExitStack() as stack:
            stack.callback(_kill_all, children)
            fs = (stack.enter_context(LoopFs.create(work / "disk.img", IMAGE_BYTES, work / "mnt", ledger))
                  if spec.fault is TxFault.POWER_LOSS else None)
            store_root = fs.mountpoint / "store" if fs is not None else work / "store"
            conf = {**BASE_BROKER_CONF, "flushDiskType": spec.flush.value, **TX_BROKER_CONF}
            topo = Topology(work / "topo", broker_conf=conf, brokers=0, impl=spec.broker_impl,
                            rocketmq_home=spec.rocketmq_home)
            stack.callback(topo.stop)
            topo.start()
            assert topo.namesrv is not None
            cell_ledger_proc(ledger, topo.namesrv, "namesrv")
            broker = topo.add_broker("broker-a", extra={"storePathRootDir": str(store_root)})
            cell_ledger_proc(ledger, broker, "broker")
            status = first_status(broker.addr, record.clock)
            result.broker_version = status.version if status else None
            record.update_meta(broker=dict(broker.conf), broker_impl=result.broker_version)
            admin.update_topic(topo.namesrv_addr, TOPIC, QUEUES, QUEUES, broker_addr=broker.addr)
            wait_route(topo.namesrv_addr, TOPIC)
            # chaos.load's consumer and drain (its producer is never started: the producers are processes).
            workload = Workload(topo.namesrv_addr, LoadSpec(topic=TOPIC, queues=QUEUES, consumer_group=CONSUMER_GROUP,
                                                            producer_group="CHAOS_TX_UNUSED_PG",
                                                            drain_group="CHAOS_TX_DRAIN"),
                                record, record.clock, worker="tx-unused")
            stack.callback(workload.close)
            workload.start_consumer()
            cell = _Cell(spec, record, topo, broker, ledger, txlog, children, fs, rng)
            load = cell.spawn("p0", "load", LOAD_GROUP)
            _wait_first_delivery(workload)
            say(f"{spec.scenario}: broker up, transactions running; {spec.cycles} cycles")
            for i in range(spec.cycles):
                time.sleep(rng.uniform(*spec.gap_s))
                rec = cell.cycle(i)
                result.cycles.append(rec)
                say(f"  cycle {i + 1}/{spec.cycles}: {rec.kind}"
                    + (f", restart {rec.recovery_s:.2f} s" if rec.recovery_s is not None else "")
                    + ("" if rec.ok else f" FAILED: {rec.error}"))
                if not rec.ok:
                    break
            time.sleep(1.0)  # transactions after the last fault
            load.stop_sending()  # it stays: the check-backs of its last UNKNOWs come to it
            result.pending_at_end = _wait_resolved(txlog, workload, RESOLVE_TIMEOUT_S)
            workload.stop_consuming()
            if broker.alive:
                final = try_status(broker.addr, record.clock)
                workload.final_min_offset = max(0, final.min_offset) if final is not None else 0
                result.drain = workload.drain()
                say(f"{spec.scenario}: drained {result.drain.messages:,} messages; "
                    f"{result.pending_at_end} keys pending at the end")
            else:
                result.drain = DrainStats(complete=False, problems=["broker not running at the end"])
            for c in children:
                c.stop(10)
    except Exception as e:  # noqa: BLE001 - a cell's boundary: the verdict records it; cleanup below still runs
        result.error = f"{type(e).__name__}: {e}"
        say(f"{spec.scenario}: error: {result.error}")
    finally:
        _kill_all(children)
        close_cell(result, record, ledger, work, client_log)
    _judge(result, txlog, cell)
    result.seconds = time.monotonic() - t_start
    write_json_atomic(record.run_dir / CHAOS_FILE, _chaos_json(result))
    # The half messages' commit-log offsets (not in the events): the power-loss rule's input, kept so the
    # verdict can be recomputed from the run directory.
    write_json_atomic(record.run_dir / HALF_OFFSETS_FILE, txlog.half_offsets)
    return result


def _wait_first_delivery(workload: Workload, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not workload.received_keys() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not workload.received_keys():
        raise RuntimeError(f"no committed transaction delivered within {timeout_s} s")


def _judge(result: TxResult, txlog: TxLog, cell: _Cell | None) -> None:
    assert result.run_dir is not None
    try:
        result.check = check_run(result.run_dir, allow_loss=True)
        rows = load_events(result.run_dir).to_pylist()
    except Exception as e:  # noqa: BLE001 - a cell's boundary: a failed check is the cell's error
        result.error = (result.error or "") + f" check failed: {type(e).__name__}: {e}"
        rows = []
    drain = result.drain
    cycle_errors = [f"cycle {c.cycle}: {c.error}" for c in result.cycles if not c.ok]
    if drain is not None and not drain.complete:
        cycle_errors.append("the drain did not read every queue: " + "; ".join(drain.problems[:2]))
    asynchronous = result.spec.flush is FlushMode.ASYNC
    result.verdict = judge(
        gather(rows, txlog.half_offsets),
        power_loss_async=cell.crashes if cell is not None and asynchronous else (),
        held=[k for keys in txlog.held.values() for k in keys],
        unexpected=result.check.unexpected if result.check else 0,
        cycle_errors=cycle_errors, error=result.error)


def _chaos_json(result: TxResult) -> dict[str, Any]:
    spec = result.spec
    return {
        "schema_version": 1, "fault": spec.fault.value, "flush": spec.flush.value, "family": "transactions",
        "summary": result.summary(), "verdict": result.verdict.to_json() if result.verdict else None,
        "drain": asdict(result.drain) if result.drain else None, "tx_conf": TX_BROKER_CONF,
        "cycles": [c.to_json() for c in result.cycles],
    }


# ---- the cells of a run -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TxMatrixSpec:
    faults: Sequence[TxFault]
    flushes: Sequence[FlushMode]
    impls: Sequence[BrokerImpl]
    cycles: int = 3
    runs_dir: Path = Path("runs")
    work_dir: Path | None = None
    seed: int | None = None
    gap_s: tuple[float, float] = (0.5, 2.0)
    command: tuple[str, ...] | None = None
    rocketmq_home: Path | None = None

    def cells(self) -> Iterator[TxSpec]:
        for impl in self.impls:
            for flush in self.flushes:
                for fault in self.faults:
                    yield TxSpec(fault=fault, flush=flush, cycles=self.cycles, runs_dir=self.runs_dir,
                                 work_dir=self.work_dir, seed=self.seed, gap_s=self.gap_s, command=self.command,
                                 broker_impl=impl, rocketmq_home=self.rocketmq_home)


def run_cells(spec: TxMatrixSpec, log: Callable[[str], None] | None = None) -> list[TxResult]:
    say = log or (lambda _line: None)
    results = []
    for cell in spec.cells():
        say(f"== {cell.scenario}")
        results.append(run_transactions(cell, log=say))
    return results


COLUMNS: Final = (("broker_impl", "broker"), ("fault", "fault"), ("flush", "flush"), ("cycles", "cycles"),
                  ("sends", "sends"), ("committed", "commit"), ("rolled_back", "rollback"),
                  ("never_resolved", "never"), ("resolved_by_check", "by check"), ("check_ms_median", "check ms p50"),
                  ("held", "held"), ("leaked", "leaked"), ("early", "early"), ("lost", "lost"),
                  ("lost_excused", "lost ok"), ("unresolved", "unresolved"), ("duplicated", "dup"),
                  ("seconds", "s"), ("ok", "ok"))


def summary_rows(results: Iterable[TxResult]) -> list[dict[str, Any]]:
    return [r.summary() for r in results]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    from chaos.matrix import aligned_table

    lines = aligned_table(COLUMNS, rows)
    for row in rows:
        for text in [*(row["violations"] or []), *([row["skipped"]] if row["skipped"] else [])]:
            lines.append(f"  {row['broker_impl']} {row['fault']}/{row['flush']}: {text}")
    return "\n".join(lines)


def gate_failures(results: Iterable[TxResult], require_all: bool = False) -> list[str]:
    """The reference broker's failed cells and any cell that could not run (chaos.matrix's rule); RocketMQ's
    violations are findings (``rocketmq_findings``), not gate failures."""
    from chaos.matrix import cell_gate_failures

    return cell_gate_failures(((f"{r.spec.broker_impl}/tx/{r.spec.fault.value}/{r.spec.flush.short}",
                                r.spec.broker_impl, r) for r in results), require_all)


def reproduce_command(spec: TxSpec) -> str:
    parts = ["python -m chaos transactions", "--broker-impl", spec.broker_impl, "--flush", spec.flush.short,
             "--faults", spec.fault.value, "--cycles", str(spec.cycles)]
    if spec.seed is not None:
        parts += ["--seed", str(spec.seed)]
    return " ".join(parts)


def rocketmq_findings(results: Iterable[TxResult]) -> list[Finding]:
    """A finding per RocketMQ cell whose verdict failed, judged by the rules that hold the reference broker."""
    out = []
    for r in results:
        if r.spec.broker_impl != "rocketmq" or r.skipped is not None or r.error is not None or r.ok:
            continue
        v = r.verdict
        assert v is not None
        kind = FindingKind.LOSS if v.lost or v.leaked or v.early else FindingKind.DIFFERENCE
        cell = f"{r.spec.fault.value}/{r.spec.flush.short}"
        out.append(Finding(
            key=f"chaos/tx/{cell}: {kind.value}", kind=kind, broker=r.broker_version or "RocketMQ",
            title=f"transactions, {r.spec.fault.value} under {r.spec.flush.value}: {v.violations[0]}",
            detail="; ".join(v.violations) + f" ({v.committed} committed, {v.rolled_back} rolled back, "
                                             f"{len(r.cycles)} cycles)",
            reproduce=reproduce_command(r.spec), source="chaos transactions",
            run_dir=str(r.run_dir) if r.run_dir is not None else None))
    return out
