"""This module owns ``python -m harness compare``: the same short workloads against every broker available here,
in one sitting, with one load generator (``harness.driver_load``), each run a run record under one session
directory that ``python -m spark_reports compare`` renders side by side.

Brokers (``BROKERS``), each with the durability mode its acknowledgement has (harness.peer_drivers.ACK_PROMISES):

================  ==================================================  ============
label             what runs                                            ack promise
================  ==================================================  ============
reference-async   the reference broker, flushDiskType=ASYNC_FLUSH      page cache
reference-sync    the reference broker, flushDiskType=SYNC_FLUSH       fsync
rocketmq-async    Apache RocketMQ 4.9.8 (ROCKETMQ_HOME), ASYNC_FLUSH   page cache
rocketmq-sync     Apache RocketMQ 4.9.8, SYNC_FLUSH                    fsync
nats              nats-server -js, a file-storage stream               page cache
rabbitmq-classic  rabbitmq-server, durable classic queues, confirms    fsync
rabbitmq-quorum   rabbitmq-server, quorum queues, confirms             fsync
================  ==================================================  ============

Workloads (``WORKLOADS``): ``rate`` (a fixed rate, open loop), ``max`` (unbounded: ``in_flight`` outstanding),
``one`` (one send in flight: latency without queueing). A broker that cannot run here is skipped with its
reason (printed, and in the session's ``compare.json``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from harness import rocketmq
from harness.driver import Driver, RocketMQDriver
from harness.driver_load import DriverLoad, LoadShape
from harness.drivers import make_driver
from harness.launcher import Topology
from harness.peer_drivers import ACK_PROMISES
from harness.peers import PeerKind, PeerServer, unavailable_reason
from harness.records import RunRecord

SCENARIO: Final = "compare"
BROKERS: Final = ("reference-async", "reference-sync", "rocketmq-async", "rocketmq-sync", "nats",
                  "rabbitmq-classic", "rabbitmq-quorum")
DEFAULT_BROKERS: Final = ("reference-async", "reference-sync", "rocketmq-async", "nats", "rabbitmq-classic",
                          "rabbitmq-quorum")


@dataclass(frozen=True)
class CompareSpec:
    seconds: float = 5.0
    rate: float = 2000.0
    in_flight: int = 128
    message_size: int = 1024
    queues: int = 4
    workloads: tuple[str, ...] = ("rate", "max", "one")
    brokers: tuple[str, ...] = DEFAULT_BROKERS


def workload_shape(name: str, spec: CompareSpec) -> LoadShape:
    base = LoadShape(name=name, seconds=spec.seconds, message_size=spec.message_size, queues=spec.queues,
                     in_flight=spec.in_flight, drain_timeout_s=30.0)
    if name == "rate":
        return replace(base, rate=spec.rate)
    if name == "max":
        return replace(base, rate=0.0)
    if name == "one":
        return replace(base, rate=0.0, in_flight=1)
    raise ValueError(f"unknown workload {name!r}: rate, max or one")


def durability_of(label: str) -> str:
    """The RocketMQ flush mode whose promise the broker's acknowledgement matches (what it is compared with)."""
    promise = ACK_PROMISES[label] if label in ACK_PROMISES else ACK_PROMISES[
        "SYNC_FLUSH" if label.endswith("-sync") else "ASYNC_FLUSH"]
    return "SYNC_FLUSH" if promise == ACK_PROMISES["SYNC_FLUSH"] else "ASYNC_FLUSH"


def unavailable(label: str) -> str | None:
    if label.startswith("rocketmq-"):
        return rocketmq.unavailable(None)
    if label == "nats":
        return unavailable_reason("nats")
    if label.startswith("rabbitmq-"):
        return unavailable_reason("rabbitmq")
    return None


@contextmanager
def broker_driver(label: str, root: Path, instance: str) -> Iterator[Driver]:
    """Start ``label``'s broker under ``root`` and yield a started driver to it; stop both after."""
    if label.startswith(("reference-", "rocketmq-")):
        flush = "SYNC_FLUSH" if label.endswith("-sync") else "ASYNC_FLUSH"
        impl: rocketmq.BrokerImpl = "reference" if label.startswith("reference-") else "rocketmq"
        with Topology(root, broker_conf={"flushDiskType": flush}, impl=impl) as topo:
            drv: Driver = RocketMQDriver(topo.namesrv_addr, instance=instance, producer_group=f"cmp_{instance}")
            try:
                drv.start()
                yield drv
            finally:
                drv.stop()
        return
    kind: PeerKind = "nats" if label == "nats" else "rabbitmq"
    server = PeerServer(kind, root=root)
    try:
        server.start()
        drv = make_driver(label, server.url, instance=instance)
        try:
            drv.start()
            yield drv
        finally:
            drv.stop()
    finally:
        server.cleanup()


def run_compare(spec: CompareSpec, out: Path, log: Callable[[str], None] | None = None) -> Path:
    """Every broker x workload of ``spec``; returns the session directory (run records + compare.json)."""
    say = log or (lambda _line: None)
    session = out / time.strftime("compare-%Y%m%dT%H%M%S", time.gmtime())
    session.mkdir(parents=True)
    summary: dict[str, Any] = {"spec": spec.__dict__ | {"workloads": list(spec.workloads),
                                                        "brokers": list(spec.brokers)},
                               "skipped": {}, "runs": []}
    for label in spec.brokers:
        reason = unavailable(label)
        if reason is not None:
            say(f"{label}: skipped ({reason})")
            summary["skipped"][label] = reason
            continue
        root = session / "work" / label
        try:
            with broker_driver(label, root, instance=f"cmp-{label}-{time.time_ns() % 10**9}") as drv:
                for w in spec.workloads:
                    shape = workload_shape(w, spec)
                    record = RunRecord.create(session, f"{SCENARIO}-{label}-{w}", {
                        "broker": label, "workload": w, "rate": shape.rate, "in_flight": shape.in_flight,
                        "message_size": shape.message_size, "queues": shape.queues, "seconds": shape.seconds})
                    load = DriverLoad(drv, record, shape, topic=f"Cmp_{w}_{time.time_ns() % 10**9}",
                                      group=f"cmp_{w}")
                    extra: dict[str, Any] = {"compare": {"broker": label, "workload": w,
                                                         "durability": durability_of(label)}}
                    if label.startswith("rocketmq-"):  # 4.9.8's runtime info has no flushDiskType
                        extra["broker"] = {"flushDiskType": durability_of(label)}
                        extra["ack_promise"] = str(ACK_PROMISES[durability_of(label)])
                    res = load.run(allow_loss=False, extra_meta=extra)
                    check = res.check
                    row = {"broker": label, "workload": w, "run": record.run_id, "acked": res.sent_ok,
                           "acked_per_s": round(res.sent_ok / res.seconds) if res.seconds else None,
                           "fail": res.sent_fail, "unknown": res.sent_unknown,
                           "lost": check.lost if check else None, "valid": check.valid if check else None}
                    summary["runs"].append(row)
                    say(f"{label} {w}: {row['acked_per_s']} acked/s, {res.sent_fail} fail, "
                        f"{res.sent_unknown} unknown, lost {row['lost']}")
        except Exception as exc:  # noqa: BLE001 - one broker failing to start is a row, not the session's end
            say(f"{label}: FAILED ({type(exc).__name__}: {exc})")
            summary["skipped"][label] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            shutil.rmtree(session / "work", ignore_errors=True)  # stores and logs: only the run records stay
    (session / "compare.json").write_text(json.dumps(summary, indent=2, default=str))
    return session
