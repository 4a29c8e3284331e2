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

The load (``load_processes``): 1 = one process, this one (``harness.driver_load``: one producer thread, one
consumer, one interpreter lock for all of it); N > 1 = N child processes (``harness.load_procs``), the rate and
the in-flight window split among them (``harness.load_split``; ``one`` stays one send in flight, so one
process). Either way each run records what the load and the broker cost in CPU and which side bounded the
figure (``harness.load_cost``): meta.json ``load``, and each row of ``compare.json``.

Faults (``faults``, ``--faults kill9,power_loss``): after the workloads, each broker's chaos cells for those
faults (``python -m chaos matrix``, harness.compare_faults) into the same session, their rows in compare.json
``faults``; the report's "Loss under each fault" table reads their run records (spark_reports.fault_loss).

The peers' send path (``peer_client``, harness.drivers): ``lean`` (the default: the wire protocol spoken
directly, harness.nats_lean / harness.amqp_lean) or ``library`` (nats-py, pika, ~150-190 µs of client CPU per
message: those runs were bound by the client). Recorded per row (``peer_client``) and in meta.json.
The RocketMQ brokers' send path (``rocketmq_client``): ``lean`` here by default (harness.rocketmq_lean:
SEND_MESSAGE_V2 frames written directly, as lean as the peers') or ``library`` (this project's client, ~40 µs of
client CPU per message: the load then cost more per message than our broker). Recorded per row
(``rocketmq_client``) and in meta.json.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from harness import rocketmq
from harness.compare_faults import run_fault_cells
from harness.driver import Driver
from harness.driver_load import DriverLoad, LoadResult, LoadShape
from harness.drivers import DEFAULT_PEER_CLIENT, PeerClient, RocketMQClient, make_driver
from harness.launcher import Topology
from harness.load_cost import CpuMeter, LoadCost, cores, load_cost
from harness.load_procs import ProcessLoad
from harness.peer_drivers import ACK_PROMISES
from harness.peers import PeerKind, PeerServer, unavailable_reason
from harness.records import RunRecord

SCENARIO: Final = "compare"
BROKERS: Final = ("reference-async", "reference-sync", "rocketmq-async", "rocketmq-sync", "nats",
                  "rabbitmq-classic", "rabbitmq-quorum")
DEFAULT_BROKERS: Final = ("reference-async", "reference-sync", "rocketmq-async", "nats", "rabbitmq-classic",
                          "rabbitmq-quorum")
# Two load processes on this 2-core machine: BENCHMARKS.md "With the load in N processes (session 32)".
DEFAULT_LOAD_PROCESSES: Final = 2


@dataclass(frozen=True)
class CompareSpec:
    seconds: float = 5.0
    rate: float = 2000.0
    in_flight: int = 128
    message_size: int = 1024
    queues: int = 4
    workloads: tuple[str, ...] = ("rate", "max", "one")
    brokers: tuple[str, ...] = DEFAULT_BROKERS
    load_processes: int = DEFAULT_LOAD_PROCESSES
    peer_client: PeerClient = DEFAULT_PEER_CLIENT  # the peers' send path (harness.drivers)
    rocketmq_client: RocketMQClient = "lean"  # the RocketMQ brokers' send path: lean, so brokers are compared
    faults: tuple[str, ...] = ()  # after the workloads, these faults' chaos cells (harness.compare_faults)
    fault_cycles: int = 3


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


@dataclass(frozen=True)
class Target:
    """A started broker: this process's driver to it, and what a load process needs to make its own."""

    driver: Driver
    driver_name: str  # harness.drivers name
    address: str  # name-server list or the peer's URL
    pid: int | None  # the server process whose CPU is the broker's (None: unknown)
    peer_client: PeerClient | None = None  # a peer's send path; None for the RocketMQ brokers
    rocketmq_client: RocketMQClient | None = None  # a RocketMQ broker's send path; None for the peers


@contextmanager
def broker_driver(label: str, root: Path, instance: str,
                  peer_client: PeerClient = DEFAULT_PEER_CLIENT,
                  rocketmq_client: RocketMQClient = "lean") -> Iterator[Target]:
    """Start ``label``'s broker under ``root`` and yield a started driver to it; stop both after."""
    if label.startswith(("reference-", "rocketmq-")):
        flush = "SYNC_FLUSH" if label.endswith("-sync") else "ASYNC_FLUSH"
        impl: rocketmq.BrokerImpl = "reference" if label.startswith("reference-") else "rocketmq"
        with Topology(root, broker_conf={"flushDiskType": flush}, impl=impl) as topo:
            drv: Driver = make_driver("rocketmq", topo.namesrv_addr, instance=instance,
                                      producer_group=f"cmp_{instance}", rocketmq_client=rocketmq_client)
            try:
                drv.start()
                yield Target(drv, "rocketmq", topo.namesrv_addr, topo.brokers[0].pid,
                             rocketmq_client=rocketmq_client)
            finally:
                drv.stop()
        return
    kind: PeerKind = "nats" if label == "nats" else "rabbitmq"
    server = PeerServer(kind, root=root)
    try:
        server.start()
        drv = make_driver(label, server.url, instance=instance, peer_client=peer_client)
        try:
            drv.start()
            yield Target(drv, label, server.url, server.pid, peer_client)
        finally:
            drv.stop()
    finally:
        server.cleanup()


def run_in_process(target: Target, record: RunRecord, shape: LoadShape, topic: str, group: str,
                   extra: dict[str, Any]) -> tuple[LoadResult, LoadCost]:
    """The one-process load (the behaviour before load processes), with its CPU marks around it."""
    load = DriverLoad(target.driver, record, shape, topic=topic, group=group)
    load.prepare()
    meter = CpuMeter({"p0": os.getpid(), "broker": target.pid})
    meter.mark("start")
    t0 = time.monotonic()
    load.go()
    time.sleep(shape.seconds)
    meter.mark("window_end")
    window_s = time.monotonic() - t0
    load.drain()
    meter.mark("end")
    p0 = meter.marks("p0")
    assert p0 is not None
    cost = load_cost([p0], meter.marks("broker"), window_s, load.result.sent_ok, cores(), loadavg=os.getloadavg(),
                     machine=meter.machine())
    return load.finish(allow_loss=False, extra_meta={**extra, "load": cost.to_json()}), cost


def cost_row(cost: LoadCost) -> dict[str, Any]:
    """A compare.json row's CPU columns (meta.json ``load`` has the whole ``LoadCost``)."""
    def r(v: float | None, digits: int) -> float | None:
        return None if v is None else round(v, digits)

    return {"load_processes": cost.processes, "client_util": [round(u, 2) for u in cost.client_util],
            "broker_util": r(cost.broker_util, 2), "client_cpu_us_per_msg": r(cost.client_cpu_us_per_msg, 1),
            "broker_cpu_us_per_msg": r(cost.broker_cpu_us_per_msg, 1), "bound": cost.bound,
            "machine_busy": r(cost.machine_busy, 2), "others_cores": r(cost.others_cores, 2),
            "loadavg_1m": None if cost.loadavg is None else cost.loadavg[0]}


def cost_words(cost: LoadCost) -> str:
    def us(v: float | None) -> str:
        return "?" if v is None else f"{v:.0f}"

    def pct(v: float | None) -> str:
        return "?" if v is None else f"{v:.0%}"

    util = "/".join(pct(u) for u in cost.client_util)
    others = "?" if cost.others_cores is None else f"{cost.others_cores:.2f}"
    return (f"CPU/msg client {us(cost.client_cpu_us_per_msg)} us, broker {us(cost.broker_cpu_us_per_msg)} us; "
            f"busy: load {util}, broker {pct(cost.broker_util)}, machine {pct(cost.machine_busy)} (other work "
            f"{others} cores) -> {cost.bound}-bound")


def run_compare(spec: CompareSpec, out: Path, log: Callable[[str], None] | None = None) -> Path:
    """Every broker x workload of ``spec``; returns the session directory (run records + compare.json)."""
    say = log or (lambda _line: None)
    session = out / time.strftime("compare-%Y%m%dT%H%M%S", time.gmtime())
    session.mkdir(parents=True)
    summary: dict[str, Any] = {"spec": spec.__dict__ | {"workloads": list(spec.workloads),
                                                        "brokers": list(spec.brokers),
                                                        "faults": list(spec.faults)},
                               "skipped": {}, "runs": [], "cores": cores(), "loadavg_start": os.getloadavg()}
    for label in spec.brokers:
        reason = unavailable(label)
        if reason is not None:
            say(f"{label}: skipped ({reason})")
            summary["skipped"][label] = reason
            continue
        root = session / "work" / label
        try:
            instance = f"cmp-{label}-{time.time_ns() % 10**9}"
            with broker_driver(label, root, instance=instance, peer_client=spec.peer_client,
                               rocketmq_client=spec.rocketmq_client) as target:
                for w in spec.workloads:
                    shape = workload_shape(w, spec)
                    record = RunRecord.create(session, f"{SCENARIO}-{label}-{w}", {
                        "broker": label, "workload": w, "rate": shape.rate, "in_flight": shape.in_flight,
                        "message_size": shape.message_size, "queues": shape.queues, "seconds": shape.seconds,
                        "load_processes": spec.load_processes})
                    topic, group = f"Cmp_{w}_{time.time_ns() % 10**9}", f"cmp_{w}"
                    extra: dict[str, Any] = {"compare": {"broker": label, "workload": w,
                                                         "durability": durability_of(label)}}
                    if label.startswith("rocketmq-"):  # 4.9.8's runtime info has no flushDiskType
                        extra["broker"] = {"flushDiskType": durability_of(label)}
                        extra["ack_promise"] = str(ACK_PROMISES[durability_of(label)])
                    if spec.load_processes == 1:
                        res, cost = run_in_process(target, record, shape, topic, group, extra)
                    else:
                        pload = ProcessLoad(target.driver, target.driver_name, target.address, record, shape,
                                            topic, group, processes=spec.load_processes,
                                            instance=f"{instance}-{w}", broker_pid=target.pid,
                                            peer_client=spec.peer_client,
                                            rocketmq_client=spec.rocketmq_client)
                        res = pload.run(allow_loss=False, extra_meta=extra)
                        assert pload.cost is not None
                        cost = pload.cost
                    check = res.check
                    row = {"broker": label, "workload": w, "run": record.run_id, "acked": res.sent_ok,
                           "acked_per_s": round(res.sent_ok / res.seconds) if res.seconds else None,
                           "fail": res.sent_fail, "unknown": res.sent_unknown,
                           "lost": check.lost if check else None, "valid": check.valid if check else None,
                           "peer_client": target.peer_client, "rocketmq_client": target.rocketmq_client,
                           **cost_row(cost)}
                    summary["runs"].append(row)
                    sender = target.peer_client or target.rocketmq_client
                    client = f" ({sender} client)" if sender else ""
                    say(f"{label} {w}{client}: {row['acked_per_s']} acked/s, {res.sent_fail} fail, "
                        f"{res.sent_unknown} unknown, lost {row['lost']}; {cost_words(cost)}")
        except Exception as exc:  # noqa: BLE001 - one broker failing to start is a row, not the session's end
            say(f"{label}: FAILED ({type(exc).__name__}: {exc})")
            summary["skipped"][label] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        finally:
            shutil.rmtree(session / "work", ignore_errors=True)  # stores and logs: only the run records stay
    if spec.faults:
        ran = [label for label in spec.brokers if label not in summary["skipped"]]
        summary["faults"] = run_fault_cells(ran, spec.faults, spec.fault_cycles, session, log=say)
    summary["loadavg_end"] = os.getloadavg()
    (session / "compare.json").write_text(json.dumps(summary, indent=2, default=str))
    return session
