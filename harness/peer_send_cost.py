"""This module owns one measurement: the client CPU a send path costs per acknowledged message, lean
(harness.nats_lean, harness.amqp_lean, harness.rocketmq_lean) against library (nats-py, pika, this project's
RocketMQ client), in one sitting, alternating.

``python -m harness.peer_send_cost [--peers nats,rabbitmq-quorum,rocketmq] [--messages 5000] [--rounds 3]``

Per peer one server (harness.peers; for ``rocketmq`` a name server and the reference broker, ASYNC_FLUSH,
harness.launcher) and one driver per client; each round sends ``messages`` messages of
``size`` bytes with ``in_flight`` outstanding through ``send_async`` (the compare load's call), in the order
lean, library, library, lean, ... (ABBA: a drift in the machine's load falls on both). The figure is this
process's user + system CPU (every thread: the caller, the reader or the library's I/O loop) from the first
send to the last answer ÷ the acknowledged sends, with the wall time's rate beside it and the load average at
the end of each round. No consumer runs: the send path alone.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.driver import Driver, SendOutcome
from harness.drivers import PEER_CLIENTS, PeerClient, make_driver, server_kind
from harness.launcher import Topology
from harness.load_cost import cpu_seconds
from harness.peers import PeerServer, unavailable_reason
from harness.records.schema import Outcome


@dataclass(frozen=True)
class Round:
    peer: str
    client: PeerClient
    acked: int
    cpu_us_per_msg: float
    msgs_per_s: float
    loadavg_1m: float


def one_round(drv: Driver, topic: str, messages: int, size: int, in_flight: int) -> tuple[int, float, float]:
    """(acknowledged, CPU seconds, wall seconds) of ``messages`` sends with ``in_flight`` outstanding."""
    slots = threading.Semaphore(in_flight)
    done = threading.Semaphore(0)
    acked = [0]
    body = os.urandom(size)

    def cb(o: SendOutcome) -> None:
        if o.outcome == Outcome.OK:
            acked[0] += 1  # one reader thread calls back: no lock needed for the count
        slots.release()
        done.release()

    pid = os.getpid()
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    for i in range(messages):
        slots.acquire()
        drv.send_async(topic, f"k{i}", body, cb)
    for _ in range(messages):
        done.acquire()
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    assert cpu0 is not None and cpu1 is not None
    return acked[0], cpu1 - cpu0, t1 - t0


@contextmanager
def _drivers(peer: str, root: Path) -> Iterator[dict[PeerClient, Driver]]:
    """One unstarted driver per send path, to a server started for them (stopped after)."""
    if peer == "rocketmq":
        with Topology(root / peer, broker_conf={"flushDiskType": "ASYNC_FLUSH"}) as topo:
            yield {c: make_driver("rocketmq", topo.namesrv_addr, instance=f"cost-{c}-{os.getpid()}",
                                  producer_group=f"cost_{c}", rocketmq_client=c) for c in PEER_CLIENTS}
        return
    with PeerServer(server_kind(peer), root=root / peer) as server:
        yield {c: make_driver(peer, server.url, instance=f"cost-{c}", peer_client=c) for c in PEER_CLIENTS}


def measure(peer: str, messages: int, rounds: int, size: int, in_flight: int, root: Path) -> list[Round]:
    out: list[Round] = []
    with _drivers(peer, root) as drivers:
        try:
            for c, drv in drivers.items():
                drv.start()
                drv.create_topic(f"Cost_{c}", 4)
                one_round(drv, f"Cost_{c}", min(500, messages), size, in_flight)  # warm: connections, caches
            for r in range(rounds):
                order = PEER_CLIENTS if r % 2 == 0 else tuple(reversed(PEER_CLIENTS))
                for c in order:
                    acked, cpu, wall = one_round(drivers[c], f"Cost_{c}", messages, size, in_flight)
                    out.append(Round(peer, c, acked, cpu / max(1, acked) * 1e6, acked / wall if wall else 0.0,
                                     os.getloadavg()[0]))
        finally:
            for drv in drivers.values():
                drv.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--peers", default="nats,rabbitmq-quorum")
    ap.add_argument("--messages", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--in-flight", type=int, default=128)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="peer-send-cost-") as tmp:
        for peer in (p.strip() for p in args.peers.split(",") if p.strip()):
            reason = None if peer == "rocketmq" else unavailable_reason(server_kind(peer))
            if reason is not None:
                print(f"{peer}: skipped ({reason})")
                continue
            for r in measure(peer, args.messages, args.rounds, args.size, args.in_flight, Path(tmp)):
                print(f"{r.peer:16} {r.client:8} acked {r.acked:6}  client CPU {r.cpu_us_per_msg:6.1f} us/msg  "
                      f"{r.msgs_per_s:8.0f} msg/s  loadavg {r.loadavg_1m:.2f}", flush=True)


if __name__ == "__main__":
    main()
