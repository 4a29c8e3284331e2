"""This module owns the chaos load's ``--driver nats|rabbitmq-classic|rabbitmq-quorum``: the driver workload
(``harness.driver_load``) against a peer broker (``harness.peers``) while kill -9 or SIGSTOP/SIGCONT lands on the
broker's server process at random moments, each fault in faults.jsonl, then the loss checker judging the run
against the broker's own acknowledgement promise (meta.json ``ack_promise``: a process kill leaves the page
cache, so no acknowledged message may be lost under either promise).

Deliberately narrower than ``chaos.experiment`` (the reference broker's and RocketMQ's cells): no power loss or
disk fill here (those need the peer's data directory on the loop-mounted image; not built yet), no per-recovery
store check, and a peer's recovery time is the time until its port answers again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness.driver import Driver
from harness.driver_load import DriverLoad, LoadResult, LoadShape
from harness.drivers import PEER_DRIVERS, is_peer, make_driver, server_kind
from harness.peer_drivers import loss_allowed
from harness.peers import PeerServer, PeerUnavailable, unavailable_reason
from harness.records import RunRecord
from harness.records.schema import FaultKind

PEER_FAULTS: Final = ("kill9", "pause")


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

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.load is not None and self.load.check is not None and \
            self.load.check.valid

    def summary(self) -> dict[str, Any]:
        check = self.load.check if self.load is not None else None
        return {"broker_impl": self.driver, "fault": self.fault, "cycles": self.cycles,
                "acknowledged": check.acknowledged if check else None, "lost": check.lost if check else None,
                "duplicated": check.duplicated if check else None,
                "unknown": check.unknown if check else None,
                "recovery_s_max": round(max(self.recovery_s), 2) if self.recovery_s else None,
                "verdict": "skipped" if self.skipped else ("ok" if self.ok else "FAILED"),
                "skipped": self.skipped, "run_dir": str(self.run_dir) if self.run_dir else None}


def run_peer_fault(driver: str, fault: str = "kill9", *, cycles: int = 3, runs_dir: Path = Path("runs"),
                   gap_s: tuple[float, float] = (0.5, 2.0), seed: int | None = None, shape: LoadShape | None = None,
                   work_dir: Path | None = None, log: Callable[[str], None] | None = None) -> PeerFaultResult:
    """One cell: ``cycles`` faults on the peer's server under the driver load, then drain and check."""
    say = log or (lambda _line: None)
    result = PeerFaultResult(driver, fault, cycles)
    _require_peer(driver)
    reason = unavailable_reason(server_kind(driver))
    if reason is not None:
        result.skipped = reason
        return result
    if fault not in PEER_FAULTS:
        raise ValueError(f"fault {fault!r} on a peer broker: expected one of {', '.join(PEER_FAULTS)}")
    rng = random.Random(seed)
    shape = shape or LoadShape(name=fault, in_flight=32, queues=4, drain_timeout_s=60.0)
    root = None if work_dir is None else Path(work_dir) / f"peer-{driver}-{time.time_ns()}"
    try:
        server = PeerServer(server_kind(driver), root=root)
    except PeerUnavailable as exc:
        result.skipped = str(exc)
        return result
    try:
        server.start()
        record = RunRecord.create(runs_dir, f"chaos-{fault}", {"driver": driver, "fault": fault, "cycles": cycles,
                                                                "in_flight": shape.in_flight,
                                                                "message_size": shape.message_size})
        result.run_dir = record.run_dir
        drv = make_peer_driver(driver, server)
        load = DriverLoad(drv, record, shape, topic="ChaosTopic", group="CHAOS_CG")
        try:
            load.start()
            for i in range(cycles):
                time.sleep(rng.uniform(*gap_s))
                t0 = time.monotonic()
                if fault == "kill9":
                    record.add_fault(FaultKind.KILL9, f"{driver}:{server.pid}")
                    server.kill()
                    server.start()
                    record.add_fault(FaultKind.RESTART, driver)
                else:
                    record.add_fault(FaultKind.PAUSE, f"{driver}:{server.pid}")
                    server.pause()
                    time.sleep(rng.uniform(0.5, 2.0))
                    server.resume()
                    record.add_fault(FaultKind.RESUME, driver)
                result.recovery_s.append(time.monotonic() - t0)
                say(f"[{driver} {fault}] cycle {i + 1}/{cycles}: back in {result.recovery_s[-1]:.1f} s")
            time.sleep(gap_s[1])
            result.load = load.finish(allow_loss=loss_allowed(getattr(drv, "ack_promise", None), power_loss=False),
                                      extra_meta={"fault_recovery_s": result.recovery_s})
        finally:
            drv.stop()
    finally:
        server.cleanup()
    return result
