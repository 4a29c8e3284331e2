"""This module owns the lean JetStream publisher: the NATS protocol (``harness.nats_wire``) over one plain TCP
socket, no client library on the send path, and ``LeanNatsDriver``, the ``NatsDriver`` whose sends take it and
whose consumers are the lean pull consumer (``harness.nats_lean_consumer``; stream creation and the backlog stay
on nats-py).

Why: nats-py costs ~150 µs of client CPU per publish on this machine (an asyncio task, a future and an inbox
subscription per message), so an unbounded run measured the client, not the server (BENCHMARKS.md, "Brokers
compared"). Here a send is one HPUB written from the caller's thread and one dict entry; the answers are read
by one thread that also answers the server's PINGs.

Per connection: one reply subject per publish, ``_INBOX.<token>.<n>``, all under one subscription
``_INBOX.<token>.*``; ``n`` finds the pending send. What a send's outcome is:

==========================================  ===========  =========================================================
what happened                               outcome      why
==========================================  ===========  =========================================================
a PubAck with ``seq``                       ok           stored (offset = seq - 1, as the nats-py path records)
a PubAck with ``error``                     fail         the stream refused it
503 status on the reply (no responders)     fail         no stream on the subject: nothing stored
not connected when the send is made         fail         nothing written
the connection lost with the send pending   unknown      written, no answer: maybe stored
no answer within ``send_timeout_s``         unknown      the same
==========================================  ===========  =========================================================

A lost connection is reconnected by the reader thread (every ``RECONNECT_S``) until the driver stops: the kill -9
fault restarts the server under a running load.
"""

from __future__ import annotations

import secrets
import select
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from harness import nats_wire as wire
from harness.driver import Consumer, DeliveryCallback, DriverError, SendCallback, SendOutcome
from harness.lean_link import pop_expired, shut, write_failed
from harness.nats_lean_consumer import LeanNatsConsumer
from harness.peer_drivers import BORN_HEADER, KEY_HEADER, Gather, NatsDriver
from harness.records.schema import Outcome

RECONNECT_S: Final = 0.2  # nats-py's reconnect_time_wait in the library path
CONNECT_TIMEOUT_S: Final = 5.0
SWEEP_S: Final = 0.2  # how often pending sends are checked against their deadline
READ_BYTES: Final = 1 << 16


@dataclass(slots=True)
class _Pending:
    callback: SendCallback
    queue: int
    deadline: float


class _Connection:
    """One TCP connection after its handshake: its inbox, its pending sends, its write lock."""

    def __init__(self, sock: socket.socket, info: dict[str, Any], parser: wire.Parser) -> None:
        self.sock = sock
        self.info = info
        self.parser = parser
        self.inbox = f"_INBOX.{secrets.token_hex(8)}"
        self.wlock = threading.Lock()  # one writer at a time: a line is never interleaved with another
        self.plock = threading.Lock()  # the pending table (the reader never waits on a blocked write)
        self.pending: dict[int, _Pending] = {}
        self.next_id = 0
        self.dead = False
        self.max_payload = int(info.get("max_payload", 1 << 20))  # nats-server's default: 1 MiB

    def take_all(self) -> list[_Pending]:
        with self.plock:
            self.dead = True
            out = list(self.pending.values())
            self.pending.clear()
        return out


def _connect(host: str, port: int, name: str) -> _Connection:
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _handshake(sock, name)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return conn


def _handshake(sock: socket.socket, name: str) -> _Connection:
    """INFO, CONNECT, the inbox SUB, then a PING whose PONG says the server took all of it."""
    parser = wire.Parser()
    conn: _Connection | None = None
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while time.monotonic() < deadline:
        data = sock.recv(READ_BYTES)
        if not data:
            raise ConnectionError("closed during the handshake")
        for ev in parser.feed(data):
            if ev.kind is wire.Kind.INFO and conn is None:
                conn = _Connection(sock, ev.info, parser)
                sock.sendall(wire.connect_line(name) + wire.sub_line(conn.inbox + ".*", 1) + wire.PING)
            elif ev.kind is wire.Kind.PING:
                sock.sendall(wire.PONG)
            elif ev.kind is wire.Kind.ERR:
                raise ConnectionError(f"server refused the connection: {ev.text}")
            elif ev.kind is wire.Kind.PONG and conn is not None:
                return conn
    raise TimeoutError("no PONG after CONNECT")


class LeanNatsPublisher:
    """JetStream publishes over one connection; answers and reconnects on a reader thread of its own.
    ``publish`` is called from any thread; callbacks come from the reader thread (or the caller's, for a send
    refused before it was written)."""

    def __init__(self, host: str, port: int, send_timeout_s: float, name: str = "lab-lean") -> None:
        self.host, self.port = host, port
        self.send_timeout_s = send_timeout_s
        self.name = name
        self._conn: _Connection | None = None
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nats-lean-reader", daemon=True)
        self.server_info: dict[str, Any] = {}
        self.reconnects = 0

    def start(self) -> None:
        try:
            self._conn = _connect(self.host, self.port, self.name)
        except (OSError, TimeoutError, wire.NatsProtocolError) as exc:
            raise DriverError(f"cannot connect to nats at {self.host}:{self.port}: {exc}") from exc
        self.server_info = self._conn.info
        self._thread.start()

    def publish(self, subject: str, queue: int, key: str, body: bytes, callback: SendCallback) -> None:
        conn = self._conn
        if conn is None or conn.dead:
            callback(SendOutcome(Outcome.FAIL, -1, error="not connected"))  # nothing written
            return
        headers = wire.header_block({KEY_HEADER: key, BORN_HEADER: str(time.time_ns())})
        if len(headers) + len(body) > conn.max_payload:
            # The server would answer -ERR and close the connection (every pending send unknown): refuse here.
            callback(SendOutcome(Outcome.FAIL, -1, queue, error=f"above the server's max_payload {conn.max_payload}"))
            return
        with conn.wlock:
            conn.next_id += 1
            n = conn.next_id
            with conn.plock:
                if conn.dead:
                    refused = True
                else:
                    refused = False
                    conn.pending[n] = _Pending(callback, queue, time.monotonic() + self.send_timeout_s)
            if not refused:
                try:
                    conn.sock.sendall(wire.hpub(subject, f"{conn.inbox}.{n}", headers, body))
                except OSError as exc:  # part of it may have gone out: the reader fails the rest as unknown
                    write_failed(conn.pending, conn.plock, n, queue, exc)
                    return
        if refused:
            callback(SendOutcome(Outcome.FAIL, -1, error="not connected"))

    # ---- the reader thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            conn = self._conn
            if conn is None:
                if self._closing.wait(RECONNECT_S):
                    return
                try:
                    self._conn = _connect(self.host, self.port, self.name)
                    self.reconnects += 1
                except (OSError, TimeoutError, wire.NatsProtocolError):
                    pass
                continue
            error = self._read(conn)
            lost = conn.take_all()
            self._conn = None
            shut(conn.sock)
            for p in lost:
                p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error=f"connection lost: {error}"[:200]))

    def _read(self, conn: _Connection) -> str:
        """Reads until the connection fails or the publisher closes; returns why."""
        last_sweep = time.monotonic()
        prefix = conn.inbox + "."
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([conn.sock], [], [], SWEEP_S)
                data = conn.sock.recv(READ_BYTES) if ready else None
            except (OSError, ValueError) as exc:
                return str(exc)
            if data == b"":
                return "closed by the server"
            if data:
                try:
                    for ev in conn.parser.feed(data):
                        if ev.kind is wire.Kind.MSG and ev.subject.startswith(prefix):
                            self._answer(conn, ev)
                        elif ev.kind is wire.Kind.PING and conn.wlock.acquire(timeout=1.0):
                            # bounded: a publisher blocked on a full socket must not stop the reader; the
                            # server pings every 2 minutes and closes only after two unanswered
                            try:
                                conn.sock.sendall(wire.PONG)
                            finally:
                                conn.wlock.release()
                        elif ev.kind is wire.Kind.ERR:
                            return f"-ERR {ev.text}"  # the server closes the connection after an -ERR
                except (OSError, wire.NatsProtocolError) as exc:
                    return str(exc)
            now = time.monotonic()
            if now - last_sweep >= SWEEP_S:
                last_sweep = now
                self._sweep(conn, now)
        return "publisher closed"

    @staticmethod
    def _answer(conn: _Connection, ev: wire.Event) -> None:
        try:
            n = int(ev.subject.rpartition(".")[2])
        except ValueError:
            return
        with conn.plock:
            p = conn.pending.pop(n, None)
        if p is None:
            return  # answered after its timeout: already reported unknown
        ack = wire.pub_ack(ev)
        if ack.kind is wire.AckKind.OK:
            p.callback(SendOutcome(Outcome.OK, 0, p.queue, ack.seq - 1))
        else:
            p.callback(SendOutcome(Outcome.FAIL, ack.code, p.queue, error=f"{ack.kind.value}: {ack.text}"[:200]))

    @staticmethod
    def _sweep(conn: _Connection, now: float) -> None:
        """Pending sends past their deadline: unknown. Deadlines grow with insertion order, so the oldest
        entries are the only ones to look at."""
        expired = pop_expired(conn.pending, conn.plock, now)
        for p in expired:
            p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error="no PubAck within the timeout"))

    def close(self) -> None:
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(10)
        conn = self._conn
        if conn is not None:
            for p in conn.take_all():
                p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error="publisher closed"))
            shut(conn.sock)
            self._conn = None



class LeanNatsDriver(NatsDriver):
    """``NatsDriver`` with its sends on ``LeanNatsPublisher`` and its consumers ``LeanNatsConsumer``
    (harness.nats_lean_consumer: a JetStream pull consumer on a connection of its own, the same durable and
    the same explicit acks as the library path); topic creation and backlog queries stay on nats-py."""

    peer_client = "lean"

    def __init__(self, url: str, *, send_timeout_s: float = 3.0) -> None:
        super().__init__(url, send_timeout_s=send_timeout_s)
        host_port = url.split("://", 1)[-1]
        host, _, port = host_port.rpartition(":")
        self._host, self._port = host, int(port)
        self._lean: LeanNatsPublisher | None = None
        self._lean_consumers: list[LeanNatsConsumer] = []

    def start(self) -> None:
        super().start()
        if self._lean is None:
            lean = LeanNatsPublisher(self._host, self._port, self.send_timeout_s)
            lean.start()
            self._lean = lean

    def stop(self) -> None:
        for c in self._lean_consumers:
            c.stop()
        self._lean_consumers.clear()
        if self._lean is not None:
            self._lean.close()
            self._lean = None
        super().stop()

    def consumer(self, group: str, topics: Sequence[str], on_delivery: DeliveryCallback, *, name: str,
                 from_timestamp_ms: int | None = None, threads: int = 4, batch: int = 32) -> Consumer:
        """``threads`` has no meaning here (one thread reads, delivers and acknowledges), as in the library
        path."""
        c = LeanNatsConsumer(self._host, self._port, group, topics, on_delivery, from_timestamp_ms=from_timestamp_ms,
                             batch=batch, queue_count=self.queue_count, name=f"lab-lean-{name}")
        self._lean_consumers.append(c)
        return c

    def _publisher(self) -> LeanNatsPublisher:
        if self._lean is None:
            self.start()
        assert self._lean is not None
        return self._lean

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        q = self._pick(topic, queue)
        self._publisher().publish(f"{topic}.{q}", q, key, body, callback)

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        return self.send_batch(topic, [key], [body], queue)

    def send_batch(self, topic: str, keys: Sequence[str], bodies: Sequence[bytes],
                   queue: int | None = None) -> SendOutcome:
        """Pipelined to one subject, as the nats-py path; the worst outcome."""
        q = self._pick(topic, queue)
        gather = Gather(len(keys))
        pub = self._publisher()
        for k, b in zip(keys, bodies, strict=True):
            pub.publish(f"{topic}.{q}", q, k, b, gather.add)
        return gather.worst(self.send_timeout_s + 5, "no PubAck")

    def broker_facts(self) -> dict[str, Any]:
        return {**super().broker_facts(), "peer_client": self.peer_client}
