"""This module owns the chaos load's ``--driver nats|rabbitmq-classic|rabbitmq-quorum``: the driver workload
(``harness.driver_load``) against a peer broker (``harness.peers``) while a fault lands on the broker at random
moments, each fault in faults.jsonl, then the loss checker judging the run against the broker's own
acknowledgement promise (meta.json ``ack_promise``).

===============  ==============================================================================================
fault            what happens to the peer, and what is judged
===============  ==============================================================================================
kill9            SIGKILL to the server's session, restart on the same directory. A process kill leaves the page
                 cache: no acknowledged message may be lost under either promise.
pause            SIGSTOP / SIGCONT for 0.5-2 s. Nothing may be lost.
power_loss       The data directory lives on a loop-mounted ext4 image (chaos.loopfs); SIGKILL, then the image
                 copied as the device holds it (the page cache's unsynced pages are not in the copy), the copy
                 mounted in its place and the server restarted on it — as for the reference broker
                 (chaos.power_loss). Loss is judged by time (chaos.peer_verdict): an fsync promise (RabbitMQ)
                 allows none; a page-cache promise (NATS JetStream) allows what was acknowledged within its
                 2-minute sync interval before a crash, counted and reported as allowed, as ASYNC_FLUSH loss
                 is for the reference broker.
disk_fill        A small image; a filler file takes all its free space for ``DISK_FULL_HOLD_S``, then goes. What
                 the peer answered meanwhile (outcomes, error texts, its own log lines about the disk) is recorded
                 per cycle; after the space is back, the time until a send is acknowledged again (a peer that
                 does not come back within ``RECOVER_TIMEOUT_S`` is restarted, as an operator would, and that is
                 recorded). No acknowledged message may be lost.
===============  ==============================================================================================

Not built for peers: ``power_loss_torn``. It tears pages past the commit log's flushed offset; a peer's store
exposes no such offset, and tearing a page the peer had fsynced would emulate a lying disk, not a power loss.

A violation of the peer's own promise is a finding about that peer (runs/findings.jsonl, ``peer_findings``), not
a failed gate; the gate fails only on a cell that could not run as planned (``error``). A cycle's recovery time is
the time from the fault until a send started after the restart (resume, freed space) is acknowledged.
"""

from __future__ import annotations

import collections
import contextlib
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from chaos.disk_fill import DISK_FREE_KIND, Filler, used_ratio
from chaos.leftovers import Ledger, run_cmd
from chaos.loopfs import LoopFs
from chaos.loopfs import unsupported_reason as image_unsupported_reason
from chaos.peer_verdict import LossVerdict, exposure_window_s, judge_losses, lost_acks
from harness.driver import Driver, DriverError
from harness.driver_load import DriverLoad, LoadResult, LoadShape
from harness.drivers import PEER_DRIVERS, is_peer, make_driver, server_kind
from harness.peer_drivers import loss_allowed
from harness.peers import PeerLaunchError, PeerServer, PeerUnavailable, unavailable_reason
from harness.records import RunRecord
from harness.records.findings import Finding, FindingKind
from harness.records.reader import load_events, load_meta
from harness.records.schema import FaultKind

PEER_FAULTS: Final = ("kill9", "pause", "power_loss", "disk_fill")
IMAGE_FAULTS: Final = ("power_loss", "disk_fill")
# Sparse: only what the peer writes is allocated (and copied at each crash). RabbitMQ's disk alarm
# (disk_free_limit 50 MB, harness.peers) must stay far away outside the disk-fill fault.
POWER_LOSS_IMAGE_BYTES: Final = 1 << 30
DISK_FILL_IMAGE_BYTES: Final = 256 << 20
# The image faults pace the load (msgs/s) so a few minutes of it fit the image whatever the peer keeps: NATS's
# stream keeps every message (limits retention), RabbitMQ's quorum WAL grows to 512 MB before it rolls over.
IMAGE_FAULT_RATE: Final = 1000.0
DISK_FULL_HOLD_S: Final = 12.0  # RabbitMQ checks free space every 1-10 s (its disk monitor's adaptive interval)
RECOVER_TIMEOUT_S: Final = 60.0
# A peer's log lines about its disk while it was full (RabbitMQ's disk alarm, NATS's JetStream store errors).
DISK_LOG_LINE: Final = re.compile(r"disk|space|alarm|enospc|storage|resource|jetstream", re.IGNORECASE)


def _require_peer(driver: str) -> None:
    if not is_peer(driver):
        raise ValueError(f"unknown peer driver {driver!r}; expected one of {', '.join(PEER_DRIVERS)}")


def make_peer_driver(driver: str, server: PeerServer, send_timeout_s: float = 3.0) -> Driver:
    _require_peer(driver)
    return make_driver(driver, server.url, instance=f"chaos-{driver}", send_timeout_s=send_timeout_s)


@dataclass
class PeerFaultResult:
    driver: str
    fault: str
    cycles: int
    run_dir: Path | None = None
    load: LoadResult | None = None
    recovery_s: list[float] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None  # the cell did not run as planned (the harness, not the peer)
    violations: list[str] = field(default_factory=list)  # the peer broke its own promise
    loss: LossVerdict | None = None  # power loss: the losses judged by time against the promise
    cycle_info: list[dict[str, Any]] = field(default_factory=list)  # per cycle: what the fault saw
    broker: str | None = None  # the peer's version (meta.json broker_impl)
    promise: str | None = None

    @property
    def ok(self) -> bool:
        return (self.skipped is None and self.error is None and not self.violations and self.load is not None
                and self.load.check is not None and self.load.check.valid)

    def summary(self) -> dict[str, Any]:
        check = self.load.check if self.load is not None else None
        return {"broker_impl": self.driver, "fault": self.fault, "cycles": self.cycles, "broker": self.broker,
                "ack_promise": self.promise,
                "acknowledged": check.acknowledged if check else None, "lost": check.lost if check else None,
                "lost_allowed": self.loss.allowed if self.loss else None,
                "lost_beyond_promise": self.loss.beyond_promise if self.loss else None,
                "duplicated": check.duplicated if check else None,
                "unknown": check.unknown if check else None,
                # Of the lost (acknowledged, never delivered): how many the broker still reported stored at the
                # end (-1: it did not answer), and the queues it no longer had.
                "backlog_at_end": self.load.backlog_at_end if self.load else None,
                "missing_queues": list(self.load.missing_queues) if self.load else [],
                "recovery_s_max": round(max(self.recovery_s), 2) if self.recovery_s else None,
                "verdict": ("skipped" if self.skipped else "ERROR" if self.error else "ok" if self.ok else "FAIL"),
                "violations": list(self.violations), "skipped": self.skipped, "error": self.error,
                "cycle_info": self.cycle_info, "run_dir": str(self.run_dir) if self.run_dir else None}


def _skip_reason(driver: str, fault: str) -> str | None:
    reason = unavailable_reason(server_kind(driver))
    if reason is None and fault in IMAGE_FAULTS:
        reason = image_unsupported_reason()
    return reason


# How long the final drain waits for every acknowledged message (it ends as soon as all are in). A RabbitMQ quorum
# queue on a busy machine was not serving again for over 60 s after a kill -9 (its consumer refused with
# INTERNAL_ERROR meanwhile): a shorter wait would call messages the broker still holds lost.
DRAIN_TIMEOUT_S: Final = 180.0


def run_peer_fault(driver: str, fault: str = "kill9", *, cycles: int = 3, runs_dir: Path = Path("runs"),
                   gap_s: tuple[float, float] = (0.5, 2.0), seed: int | None = None, shape: LoadShape | None = None,
                   work_dir: Path | None = None, log: Callable[[str], None] | None = None,
                   ledger: Ledger | None = None, hold_s: float = DISK_FULL_HOLD_S) -> PeerFaultResult:
    """One cell: ``cycles`` faults on the peer's server under the driver load, then drain and check."""
    say = log or (lambda _line: None)
    result = PeerFaultResult(driver, fault, cycles)
    _require_peer(driver)
    if fault not in PEER_FAULTS:
        raise ValueError(f"fault {fault!r} on a peer broker: expected one of {', '.join(PEER_FAULTS)}")
    result.skipped = _skip_reason(driver, fault)
    if result.skipped is not None:
        return result
    rng = random.Random(seed)
    shape = shape or LoadShape(name=fault, in_flight=32, queues=4, drain_timeout_s=DRAIN_TIMEOUT_S)
    if fault in IMAGE_FAULTS and shape.rate <= 0:
        shape = replace(shape, rate=IMAGE_FAULT_RATE)
    try:
        with contextlib.ExitStack() as stack:
            work = Path(tempfile.mkdtemp(prefix=f"peer-{driver}-", dir=work_dir))
            stack.callback(shutil.rmtree, work, True)  # last: after the image is unmounted and detached
            fs: LoopFs | None = None
            if fault in IMAGE_FAULTS:
                size = POWER_LOSS_IMAGE_BYTES if fault == "power_loss" else DISK_FILL_IMAGE_BYTES
                fs = stack.enter_context(LoopFs.create(work / "disk.img", size, work / "mnt",
                                                       ledger if ledger is not None else Ledger()))
            try:
                server = PeerServer(server_kind(driver), root=work / "server",
                                    data_root=None if fs is None else fs.mountpoint / "data")
            except PeerUnavailable as exc:
                result.skipped = str(exc)
                return result
            stack.callback(server.cleanup)  # before the image goes: nothing may hold the mount
            server.start()
            record = RunRecord.create(runs_dir, f"chaos-{fault}", {"driver": driver, "fault": fault, "cycles": cycles,
                                                                    "in_flight": shape.in_flight, "rate": shape.rate,
                                                                    "message_size": shape.message_size})
            result.run_dir = record.run_dir
            drv = make_peer_driver(driver, server)
            stack.callback(drv.stop)
            result.promise = str(getattr(drv, "ack_promise", None))
            load = DriverLoad(drv, record, shape, topic="ChaosTopic", group="CHAOS_CG")
            load.start()
            if fs is not None:
                # The stream / queues and the durable consumer exist on the disk before the first fault, as on a
                # machine that made them long ago: what is judged is the messages, not whether a just-declared queue
                # or consumer survives (NATS's consumer, created ~1 s before a power loss, did not: "consumer not
                # found" until the end). The first delivery shows the consumer exists.
                _wait_first_delivery(load, 15.0)
                run_cmd(["sync", "-f", str(fs.mountpoint)])
            crashes_ns: list[int] = []
            try:
                for i in range(cycles):
                    time.sleep(rng.uniform(*gap_s))
                    t0 = time.monotonic()
                    if fault == "kill9":
                        record.add_fault(FaultKind.KILL9, f"{driver}:{server.pid}")
                        server.kill()
                        server.start()
                        record.add_fault(FaultKind.RESTART, driver)
                    elif fault == "pause":
                        record.add_fault(FaultKind.PAUSE, f"{driver}:{server.pid}")
                        server.pause()
                        time.sleep(rng.uniform(0.5, 2.0))
                        server.resume()
                        record.add_fault(FaultKind.RESUME, driver)
                    elif fault == "power_loss":
                        assert fs is not None
                        crashes_ns.append(_power_loss(server, fs, record, driver, i, result))
                    else:
                        assert fs is not None
                        _disk_fill(server, fs, record, load, driver, i, hold_s, result)
                    if fault != "disk_fill":  # (disk fill times its own recovery: from when the space is back)
                        _wait_serving(load, time.time_ns(), result, i)
                    result.recovery_s.append(time.monotonic() - t0)
                    say(f"[{driver} {fault}] cycle {i + 1}/{cycles}: serving again {result.recovery_s[-1]:.1f} s "
                        f"after the fault")
            except PeerLaunchError as exc:
                # The peer did not come back on its own directory after the fault: a finding about the peer.
                result.violations.append(f"did not restart after the fault: {str(exc).splitlines()[0]}")
                server.start()  # once more, to drain what it kept; a second failure is the cell's error
            time.sleep(gap_s[1])
            power_loss = fault == "power_loss"
            result.load = load.finish(allow_loss=loss_allowed(result.promise, power_loss=power_loss),
                                      extra_meta={"fault_recovery_s": result.recovery_s,
                                                  "fault_cycles": result.cycle_info})
            result.broker = _broker_version(record.run_dir)
            if power_loss:
                result.loss = judge_losses(lost_acks(load_events(record.run_dir, ["op", "key", "outcome", "end_ns"])),
                                           crashes_ns, exposure_window_s(result.promise))
                if not result.loss.ok:
                    result.violations.append(
                        f"{result.loss.beyond_promise} acknowledged messages lost beyond the {result.promise} promise "
                        f"(window {result.loss.window_s:g} s before a crash), e.g. {result.loss.samples_beyond}")
                record.update_meta(peer_loss={"lost": result.loss.lost, "allowed": result.loss.allowed,
                                              "beyond_promise": result.loss.beyond_promise,
                                              "window_s": result.loss.window_s})
            elif result.load.check is not None and result.load.check.lost:
                result.violations.append(f"{result.load.check.lost} acknowledged messages lost under {fault} (the "
                                         f"broker still reported {result.load.backlog_at_end} stored at the end)")
            if result.load.missing_queues:
                gone = ", ".join(result.load.missing_queues)
                result.violations.append(f"durable queues gone after {fault}: {gone}")
    except (PeerLaunchError, DriverError, RuntimeError, OSError) as exc:
        # The cell could not run as planned (the server did not come back twice, a loop device or mount
        # failed): the gate fails on it; what was torn down is torn down (the ExitStack above).
        result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else exc!r}"[:300]
    return result


def _wait_first_delivery(load: DriverLoad, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while load.result.received == 0 and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_serving(load: DriverLoad, since_ns: int, result: PeerFaultResult, i: int) -> None:
    """Until a send started after ``since_ns`` (the restart or resume) is acknowledged: the next fault lands on a
    serving broker, and the cycle's recovery time is the time until the peer serves again, not until its port
    answers (RabbitMQ recovers its queues after it listens). Not back within ``RECOVER_TIMEOUT_S``: recorded."""
    deadline = time.monotonic() + RECOVER_TIMEOUT_S
    while load.last_ok_start_ns <= since_ns and time.monotonic() < deadline:
        time.sleep(0.05)
    if load.last_ok_start_ns <= since_ns:
        result.cycle_info.append({"cycle": i, "not_serving": f"no acknowledged send {RECOVER_TIMEOUT_S:g} s after "
                                                             "the restart"})


def _broker_version(run_dir: Path) -> str | None:
    value = load_meta(run_dir).get("broker_impl")
    return None if value is None else str(value)


def _power_loss(server: PeerServer, fs: LoopFs, record: RunRecord, driver: str, i: int,
                result: PeerFaultResult) -> int:
    """SIGKILL, the image copied as the device holds it and mounted in place, the server restarted on it; returns
    when the server was dead (ns), the bound of what it may have acknowledged before the crash."""
    pid = server.pid
    server.kill()
    dead_ns = time.time_ns()
    swap = fs.crash_swap()  # first, before anything else: every moment here is more kernel writeback
    info = {"cycle": i, "copy_s": round(swap.copy_s, 3), "image_allocated_bytes": swap.image_bytes_allocated}
    record.add_fault(FaultKind.POWER_LOSS, f"{driver}:{pid}", ts_ns=dead_ns, **info)
    t0 = time.monotonic()
    server.start()
    info["restart_s"] = round(time.monotonic() - t0, 2)
    record.add_fault(FaultKind.RESTART, driver)
    result.cycle_info.append(info)
    return dead_ns


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _log_lines_since(path: Path, offset: int, limit: int = 6) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read(1 << 20).decode(errors="replace")
    except OSError:
        return []
    return [line.strip()[:200] for line in text.splitlines() if DISK_LOG_LINE.search(line)][:limit]


def answers_while_full(errors: Iterable[tuple[int, str, int, str]], t0_ns: int, t1_ns: int,
                       limit: int = 5) -> list[dict[str, Any]]:
    """The distinct failed / unknown answers that ended in [t0, t1] (outcome, code, error text with its digits
    masked, so a sequence number does not make each answer distinct), most frequent first."""
    seen: collections.Counter[tuple[str, int, str]] = collections.Counter()
    for end, outcome, code, error in errors:
        if t0_ns <= end <= t1_ns:
            seen[(outcome, code, re.sub(r"\d+", "N", error)[:160])] += 1
    return [{"outcome": o, "code": c, "error": e, "count": n} for (o, c, e), n in seen.most_common(limit)]


def _fill_all(filler: Filler) -> int:
    """Take all free space but a few KiB; the peer writes meanwhile, so an attempt may meet ENOSPC first (then
    the disk is full already, which is the point) and the next one leaves a little more."""
    for margin in (64 << 10, 1 << 20, 4 << 20):
        try:
            return filler.leave_free(margin)
        except OSError:
            continue
    return filler.path.stat().st_size if filler.path.exists() else 0


def _disk_fill(server: PeerServer, fs: LoopFs, record: RunRecord, load: DriverLoad, driver: str, i: int,
               hold_s: float, result: PeerFaultResult) -> None:
    """All free space taken for ``hold_s``, what the peer answered recorded, the space freed, its recovery timed."""
    filler = Filler(fs.mountpoint)
    log_at = _log_size(server.log_path)
    before = load.counts()
    t0 = time.time_ns()
    size = _fill_all(filler)
    ratio, free_left = used_ratio(fs.mountpoint), filler.free_bytes()
    record.add_fault(FaultKind.DISK_FILL, driver, ts_ns=t0, cycle=i, used_ratio=round(ratio, 4), filler_bytes=size,
                     free_bytes=free_left)
    time.sleep(hold_s)
    during = load.counts()
    alive_full = server.alive
    filler.release()
    t1 = time.time_ns()
    record.add_fault(DISK_FREE_KIND, driver, ts_ns=t1, cycle=i, used_ratio=round(used_ratio(fs.mountpoint), 4))
    answers = answers_while_full(list(load.recent_errors), t0, t1)  # now: the deque keeps only the latest
    deadline = time.monotonic() + RECOVER_TIMEOUT_S
    while load.last_ok_start_ns <= t1 and server.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    recovered_s = (load.last_ok_start_ns - t1) / 1e9 if load.last_ok_start_ns > t1 else None
    info: dict[str, Any] = {
        "cycle": i, "used_ratio": round(ratio, 4), "free_bytes": free_left,
        "acked_while_full": during[0] - before[0], "failed_while_full": during[1] - before[1],
        "unknown_while_full": during[2] - before[2], "answers": answers,
        "server_alive_while_full": alive_full, "log": _log_lines_since(server.log_path, log_at),
        "recovered_s": None if recovered_s is None else round(recovered_s, 2), "restarted": False}
    if recovered_s is None:
        # Not back on its own (or exited): restarted as an operator would (recorded; not a loss by itself).
        info["restarted"] = True
        server.stop_server()
        server.start()
        record.add_fault(FaultKind.RESTART, driver, cycle=i, reason="no acknowledged send after the disk was freed")
        deadline = time.monotonic() + RECOVER_TIMEOUT_S
        t2 = time.time_ns()
        while load.last_ok_start_ns <= t2 and time.monotonic() < deadline:
            time.sleep(0.05)
        info["recovered_after_restart"] = load.last_ok_start_ns > t2
    result.cycle_info.append(info)


def peer_findings(results: Iterable[PeerFaultResult], reproduce: str = "") -> list[Finding]:
    """A finding per peer cell that broke the peer's own promise (or did not come back after a fault)."""
    out = []
    for r in results:
        if r.skipped is not None or r.error is not None or not r.violations:
            continue
        # A queue that never served again leaves its acknowledged messages undelivered: counted lost by the checker,
        # but what was seen is a stall, not a proven loss.
        kind = (FindingKind.WEDGE if any("did not restart" in v for v in r.violations)
                else FindingKind.STALL if any("not_serving" in c for c in r.cycle_info) else FindingKind.LOSS)
        out.append(Finding(
            key=f"chaos/peer/{r.driver}/{r.fault}: {kind.value}", kind=kind, broker=r.broker or r.driver,
            title=f"{r.driver} under {r.fault}: {r.violations[0][:120]}",
            detail="; ".join(r.violations) + f" (ack promise {r.promise}, {r.cycles} cycles)",
            reproduce=reproduce or f"python -m chaos matrix --driver {r.driver} --faults {r.fault} --cycles {r.cycles}",
            source="chaos peer faults", run_dir=str(r.run_dir) if r.run_dir is not None else None))
    return out
