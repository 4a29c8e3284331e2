"""This module owns one measurement: the client CPU a NATS JetStream consumer costs per consumed message, lean
(harness.nats_lean_consumer) against library (nats-py's pull consumer, harness.peer_drivers), on the same
backlog, in one sitting, alternating. The send side's counterpart is harness.peer_send_cost.

``python -m harness.peer_consume_cost [--messages 20000] [--size 1024] [--rounds 3] [--batch 32]``

One nats-server (harness.peers) and one stream of 4 subjects, filled once with ``messages`` messages of ``size``
bytes (the lean publisher). Each round consumes that whole backlog with each client in turn, each time under a
new durable (deliver all, explicit acks: the compare load's consumer), in the order lean, library, library,
lean, ... (ABBA: a drift in the machine's load falls on both). The figure is this process's user + system CPU
(every thread: the consumer's, nats-py's event loop, the idle publisher reader) from the consumer's start to
its ``messages``-th delivery ÷ ``messages``, with the wall time's rate and the load average at the end of the
round beside it. No producer runs while a consumer is measured.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.driver import Delivery, Driver
from harness.drivers import PEER_CLIENTS, PeerClient, make_driver
from harness.load_cost import cpu_seconds
from harness.peer_send_cost import one_round
from harness.peers import PeerServer, unavailable_reason

TOPIC = "ConsumeCost"


@dataclass(frozen=True)
class Round:
    client: PeerClient
    consumed: int
    cpu_us_per_msg: float
    msgs_per_s: float
    loadavg_1m: float


def fill(drv: Driver, messages: int, size: int, in_flight: int = 256) -> int:
    """The backlog: ``messages`` sends with ``in_flight`` outstanding (peer_send_cost's round); returns how many
    were acknowledged."""
    return one_round(drv, TOPIC, messages, size, in_flight)[0]


def consume_round(drv: Driver, group: str, messages: int, batch: int,
                  timeout_s: float = 300.0) -> tuple[int, float, float]:
    """(consumed, CPU seconds, wall seconds) of one consumer reading the backlog from its start under a new
    durable ``group``."""
    count = [0]
    all_in = threading.Event()

    def on_delivery(batch_: list[Delivery]) -> None:
        count[0] += len(batch_)  # one thread delivers, in either client
        if count[0] >= messages:
            all_in.set()

    pid = os.getpid()
    consumer = drv.consumer(group, [TOPIC], on_delivery, name=group, batch=batch)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    consumer.start()
    all_in.wait(timeout_s)
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    consumer.stop()
    assert cpu0 is not None and cpu1 is not None
    return count[0], cpu1 - cpu0, t1 - t0


def measure(messages: int, size: int, rounds: int, batch: int, root: Path) -> list[Round]:
    out: list[Round] = []
    with PeerServer("nats", root=root / "nats") as server:
        drivers = {c: make_driver("nats", server.url, instance=f"consume-cost-{c}", peer_client=c)
                   for c in PEER_CLIENTS}
        try:
            for drv in drivers.values():
                drv.start()
            drivers["lean"].create_topic(TOPIC, 4)
            acked = fill(drivers["lean"], messages, size)
            assert acked == messages, f"{acked} of {messages} acknowledged"
            for c, drv in drivers.items():
                consume_round(drv, f"warm_{c}", min(500, messages), batch)  # warm: connections, imports
            for r in range(rounds):
                order = PEER_CLIENTS if r % 2 == 0 else tuple(reversed(PEER_CLIENTS))
                for c in order:
                    n, cpu, wall = consume_round(drivers[c], f"cost_{c}_{r}", messages, batch)
                    out.append(Round(c, n, cpu / max(1, n) * 1e6, n / wall if wall else 0.0, os.getloadavg()[0]))
        finally:
            for drv in drivers.values():
                drv.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="the consumer's batch (the compare load's default)")
    args = ap.parse_args(argv)
    reason = unavailable_reason("nats")
    if reason is not None:
        print(f"nats: skipped ({reason})")
        return
    with tempfile.TemporaryDirectory(prefix="peer-consume-cost-") as tmp:
        rows = measure(args.messages, args.size, args.rounds, args.batch, Path(tmp))
    for r in rows:
        print(f"nats {r.client:8} consumed {r.consumed:6}  client CPU {r.cpu_us_per_msg:6.1f} us/msg  "
              f"{r.msgs_per_s:8.0f} msg/s  loadavg {r.loadavg_1m:.2f}")
    for c in PEER_CLIENTS:
        figs = [r.cpu_us_per_msg for r in rows if r.client == c]
        print(f"nats {c:8} {min(figs):.1f}-{max(figs):.1f} us/msg over {len(figs)} rounds")
    lean = sorted(r.cpu_us_per_msg for r in rows if r.client == "lean")
    lib = sorted(r.cpu_us_per_msg for r in rows if r.client == "library")
    print(f"library / lean (medians): {lib[len(lib) // 2] / lean[len(lean) // 2]:.1f}x")


if __name__ == "__main__":
    main()
