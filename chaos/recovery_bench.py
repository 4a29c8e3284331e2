"""This module owns the recovery-time benchmark: how long the broker takes to come back after kill -9, as a
function of the commit log's size, of the unflushed tail at the crash, and of whether the checkpoint is there
(docs/claims.md: with the checkpoint, abnormal recovery scans from the last flush; without it, the whole log).

For each log size: fill a fresh store (ASYNC_FLUSH) to that size, then restart the broker four ways — clean
stop (reference), kill -9 with the flush caught up (no tail), kill -9 right after a burst (a tail of unflushed
bytes), and kill -9 with the checkpoint file removed — and time each from process start to the boot line.

``impl="rocketmq"`` runs Apache RocketMQ 4.9.8 the same way. Its runtime info has no flushed offset, so "the
flush caught up" is waited for as the written offset standing still for longer than RocketMQ's thorough flush
interval (``flushCommitLogThoroughInterval``, 10 s: the async flush leaves fewer than 4 dirty pages until
then); its unflushed column is -1 (unknown). Its times include the JVM's start (about 1 s here).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.payload import make_body, make_key
from chaos.sampler import BrokerSample, first_status, read_status
from harness.launcher import Topology
from harness.records import FaultKind, RunRecord, wall_clock
from harness.rocketmq import BrokerImpl
from reference_broker.client import ClientConfig, Message, MQClientError, Producer
from reference_broker.common.start_phases import (
    DISPATCH_TAIL,
    RECOVER_COMMIT_LOG,
    RUNTIME_KEY,
    parse_runtime_value,
)
from reference_broker.tools import admin

TOPIC = "RecoveryBench"
RECOVERY_WORK_PHASES = (RECOVER_COMMIT_LOG, DISPATCH_TAIL)


@dataclass(frozen=True)
class RecoveryRow:
    log_bytes: int
    case: str  # clean | kill9-flushed | kill9-tail | kill9-no-checkpoint
    unflushed_bytes: int
    checkpoint: bool
    recovery_s: float  # process start to the boot line
    # The store's own timing of its start (reference_broker.common.start_phases), seconds per phase; empty for
    # a broker that reports none (RocketMQ 4.9.8).
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def work_s(self) -> float | None:
        """The recovery work: scanning the log's tail (re-dispatching what it scans after a crash) and
        dispatching what the consume queues lack — the part that should grow with the tail, not the log."""
        if not self.phases:
            return None
        return sum(self.phases.get(k, 0.0) for k in RECOVERY_WORK_PHASES)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "work_s": self.work_s}


def _fill(namesrv: str, nbytes: int, body: int, tag: str) -> None:
    """Send ``nbytes`` of ``body``-byte messages, 256 in flight; a refused send (flow control) is sent again."""
    cfg = ClientConfig(namesrv, f"rb-{tag}", poll_name_server_interval_s=1.0)
    with Producer("RECOVERY_BENCH_PG", namesrv, client_config=cfg) as p:
        todo = list(range(max(1, nbytes // body)))
        while todo:
            retry: list[int] = []
            for start in range(0, len(todo), 256):
                batch = todo[start:start + 256]
                futures = [(i, p.send_async(Message(TOPIC, make_body(make_key(tag, i), body), keys=make_key(tag, i))))
                           for i in batch]
                for i, f in futures:
                    try:
                        if f is not None:
                            f.result(60)
                    except MQClientError:
                        retry.append(i)
            if retry:
                time.sleep(0.5)
            todo = retry


# FlushRealTimeService flushes everything at least every flushCommitLogThoroughInterval (10 s, 4.9.8's default).
THOROUGH_FLUSH_S = 10.0


def _wait_flushed(addr: str, timeout_s: float = 60.0) -> BrokerSample:
    """The broker's status once its flush caught up: unflushed 0, or (a broker that reports no flushed offset)
    the written offset unchanged for longer than the thorough flush interval."""
    deadline = time.monotonic() + timeout_s
    still_since, last = time.monotonic(), -2
    while True:
        s = first_status(addr, wall_clock())  # RocketMQ answers runtime info a moment after its boot line
        if s is None:
            s = read_status(addr, wall_clock())  # still nothing: the error says why
        if s.flushed_offset < 0:
            if s.max_offset != last:
                still_since, last = time.monotonic(), s.max_offset
            if time.monotonic() - still_since > THOROUGH_FLUSH_S + 0.5:
                return s
        elif s.unflushed == 0:
            return s
        if time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def _unflushed(s: BrokerSample) -> int:
    return s.unflushed if s.flushed_offset >= 0 else -1


def _timed_start(topo: Topology) -> tuple[float, dict[str, float]]:
    """The restart's time from process start to the boot line, and the store's phases as it reports them."""
    t0 = time.monotonic()
    broker = topo.brokers[0]
    broker.start(timeout_s=600)
    took = time.monotonic() - t0
    phases: dict[str, float] = {}
    if topo.impl == "reference":
        with contextlib.suppress(admin.AdminError, OSError):
            phases = parse_runtime_value(admin.broker_status(broker.addr).get(RUNTIME_KEY, ""))
    return took, phases


def bench_conf(file_bytes: int) -> dict[str, Any]:
    return {"mappedFileSizeCommitLog": file_bytes, "flushDiskType": "ASYNC_FLUSH", "maxHashSlotNum": 100_000,
            "maxIndexNum": 400_000}


def bench_log_size(log_bytes: int, *, work_dir: Path | None = None, file_bytes: int = 256 << 20,
                   body: int = 16 << 10, burst_bytes: int = 8 << 20,
                   record: RunRecord | None = None, impl: BrokerImpl = "reference",
                   rocketmq_home: Path | None = None) -> list[RecoveryRow]:
    """The four restarts for one log size; with ``record``, each kill -9 is logged in its faults.jsonl and the
    broker's configuration and version in its meta.json."""
    root = Path(tempfile.mkdtemp(prefix="rmq-lab-recovery-bench-", dir=work_dir))
    rows = []

    def kill(case: str, s: BrokerSample) -> None:
        broker.kill()
        if record is not None:
            record.add_fault(FaultKind.KILL9, broker.name, case=case, log_bytes=s.max_offset,
                             written_offset=s.max_offset, flushed_offset=s.flushed_offset)

    try:
        with Topology(root / "topo", broker_conf=bench_conf(file_bytes), impl=impl,
                      rocketmq_home=rocketmq_home) as topo:
            broker = topo.brokers[0]
            if record is not None:
                status = first_status(broker.addr, wall_clock())
                record.update_meta(broker={**broker.conf, "brokerRole": "ASYNC_MASTER"},
                                   broker_impl=(status.version or None) if status is not None else None)
            admin.update_topic(topo.namesrv_addr, TOPIC, 4, 4, broker_addr=broker.addr)
            time.sleep(0.5)
            _fill(topo.namesrv_addr, log_bytes, body, "fill")
            size = _wait_flushed(broker.addr).max_offset

            broker.stop()
            rows.append(RecoveryRow(size, "clean", 0, True, *_timed_start(topo)))

            s = _wait_flushed(broker.addr)
            kill("kill9-flushed", s)
            rows.append(RecoveryRow(size, "kill9-flushed", _unflushed(s), True, *_timed_start(topo)))

            # RocketMQ answers runtime info only once its stats service sampled (F4): wait for that before the
            # burst, so the status right after it is read at once and the tail is still unflushed at the kill.
            first_status(broker.addr, wall_clock())
            _fill(topo.namesrv_addr, burst_bytes, body, "burst")
            s = read_status(broker.addr, wall_clock())
            kill("kill9-tail", s)
            rows.append(RecoveryRow(s.max_offset, "kill9-tail", _unflushed(s), True, *_timed_start(topo)))

            s = _wait_flushed(broker.addr)
            kill("kill9-no-checkpoint", s)
            (broker.store_root / "checkpoint").unlink(missing_ok=True)
            rows.append(RecoveryRow(s.max_offset, "kill9-no-checkpoint", _unflushed(s), False,
                                    *_timed_start(topo)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def format_rows(rows: list[RecoveryRow]) -> str:
    lines = [f"{'log MiB':>8}  {'case':<20}  {'unflushed KiB':>13}  {'checkpoint':>10}  {'recovery s':>10}  "
             f"{'work s':>8}"]
    for r in rows:
        unflushed = "unknown" if r.unflushed_bytes < 0 else f"{r.unflushed_bytes / 1024:.0f}"
        work = "-" if r.work_s is None else f"{r.work_s:.3f}"
        lines.append(f"{r.log_bytes / 2**20:8.0f}  {r.case:<20}  {unflushed:>13}  "
                     f"{('yes' if r.checkpoint else 'no'):>10}  {r.recovery_s:10.3f}  {work:>8}")
    return "\n".join(lines)
