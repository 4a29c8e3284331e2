"""This module owns the lean RabbitMQ publisher: AMQP 0-9-1 with publisher confirms (``harness.amqp_wire``) over
one plain TCP socket, no client library on the send path, and ``LeanRabbitMQDriver``, the ``RabbitMQDriver``
whose sends take it (queue declares, the consumer and the backlog stay on pika).

Why: pika costs ~190 µs of client CPU per confirmed publish on this machine (a hand-over to its I/O loop, its
frame objects), so an unbounded run measured the client (BENCHMARKS.md, "Brokers compared"). Here a send is
one write of the three frames from the caller's thread and one dict entry; one reader thread takes the
confirms, sends heartbeats (when nothing was written for half the interval), answers the server's Close,
gives up on a connection blocked (a resource alarm) longer than the send timeout, as pika's
``blocked_connection_timeout`` does, and reconnects.

The handshake: protocol header → Start → StartOk (PLAIN) → Tune → TuneOk, Open → OpenOk → Channel.Open →
OpenOk → Confirm.Select → SelectOk. Then each message is Basic.Publish (mandatory, default exchange, routing
key = the queue) + a content header (delivery_mode 2, message_id = the key, headers {born: ns}) + body frames.
What a send's outcome is:

===========================================  ===========  ====================================================
what happened                                outcome      why
===========================================  ===========  ====================================================
Basic.Ack covering its delivery tag          ok           on the disk (offset -1: a queue has no positions)
Basic.Return before its Ack                  fail         mandatory and no queue took it (as the pika path)
Basic.Nack covering it                       fail         the broker refused it
not connected when the send is made          fail         nothing written
the connection or channel lost with it       unknown      written, no answer: maybe stored
no confirm within ``send_timeout_s``         unknown      the same
===========================================  ===========  ====================================================
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from harness import amqp_wire as wire
from harness.driver import DriverError, SendCallback, SendOutcome
from harness.lean_link import pop_expired, shut, write_failed
from harness.peer_drivers import BORN_HEADER, Publisher, RabbitMQDriver
from harness.records.schema import Outcome

CHANNEL: Final = 1
HEARTBEAT_S: Final = 30  # pika's heartbeat in the library path
FRAME_MAX: Final = 131072  # RabbitMQ's default; the server may lower it in Tune
CONNECT_TIMEOUT_S: Final = 10.0
RECONNECT_S: Final = 0.3  # the pika path's reconnect delay
SWEEP_S: Final = 0.2
READ_BYTES: Final = 1 << 16
CLIENT_PROPERTIES: Final = {"product": "rocketmq-store-lab lean publisher",
                            "capabilities": {"publisher_confirms": True, "basic.nack": True,
                                             "connection.blocked": True}}


@dataclass(slots=True)
class _Pending:
    callback: SendCallback
    queue: int
    key: str
    deadline: float


class _Connection:
    """One connection with its confirm-mode channel: delivery tags count from 1 on it, so its pending sends and
    returned messages are its own."""

    def __init__(self, sock: socket.socket, parser: wire.Parser, frame_max: int, heartbeat_s: int,
                 server_properties: dict[str, Any]) -> None:
        self.sock = sock
        self.parser = parser
        self.frame_max = frame_max
        self.heartbeat_s = heartbeat_s
        self.server_properties = server_properties
        self.wlock = threading.Lock()
        self.plock = threading.Lock()
        self.pending: dict[int, _Pending] = {}
        self.returned: set[str] = set()  # message ids returned (mandatory, unroutable) and not yet confirmed
        self.tag = 0
        self.dead = False
        self.last_write = time.monotonic()
        self.return_header_due = False  # a Basic.Return came: its content header (with the key) is next
        self.blocked_since: float | None = None  # Connection.Blocked (a resource alarm): publishes wait

    def write(self, data: bytes, wait_s: float = -1) -> bool:
        """Write ``data`` unless a writer has held the lock ``wait_s`` (-1: wait for it); whether it went out.
        The reader passes a bound: a publisher blocked on a full socket (a blocked connection) must not stop
        it reading and sweeping."""
        if not self.wlock.acquire(timeout=wait_s):
            return False
        try:
            self.sock.sendall(data)
            self.last_write = time.monotonic()
        finally:
            self.wlock.release()
        return True

    def take_all(self) -> list[_Pending]:
        with self.plock:
            self.dead = True
            out = list(self.pending.values())
            self.pending.clear()
        return out


def _expect(sock: socket.socket, parser: wire.Parser, ids: tuple[int, int], deadline: float) -> wire.Frame:
    """Read until the method ``ids`` arrives; a Close from the server is an error with its text."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        data = sock.recv(READ_BYTES)
        if not data:
            raise ConnectionError("closed during the handshake")
        for f in parser.feed(data):
            if f.type is not wire.FrameType.METHOD:
                continue
            if f.ids in (wire.CLOSE, wire.CHANNEL_CLOSE):
                raise ConnectionError(f"server closed: {f.args.get('reply_code')} {f.args.get('reply_text')}")
            if f.ids == ids:
                return f
    raise TimeoutError(f"no method {ids} in the handshake")


def _connect(host: str, port: int, user: str, password: str) -> _Connection:
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _handshake(sock, user, password)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return conn


def _handshake(sock: socket.socket, user: str, password: str) -> _Connection:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    parser = wire.Parser()
    sock.sendall(wire.PROTOCOL_HEADER)
    start = _expect(sock, parser, wire.START, deadline)
    if "PLAIN" not in start.args["mechanisms"]:
        raise ConnectionError(f"no PLAIN among {start.args['mechanisms']}")
    sock.sendall(wire.start_ok(user, password, CLIENT_PROPERTIES))
    tune = _expect(sock, parser, wire.TUNE, deadline)
    frame_max, heartbeat, channel_max = negotiate(tune.args)
    parser.frame_max = frame_max
    sock.sendall(wire.tune_ok(channel_max, frame_max, heartbeat) + wire.connection_open())
    _expect(sock, parser, wire.OPEN_OK, deadline)
    sock.sendall(wire.channel_open(CHANNEL))
    _expect(sock, parser, wire.CHANNEL_OPEN_OK, deadline)
    sock.sendall(wire.confirm_select(CHANNEL))
    _expect(sock, parser, wire.CONFIRM_SELECT_OK, deadline)
    return _Connection(sock, parser, frame_max, heartbeat, start.args["server_properties"])


def negotiate(tune: dict[str, Any]) -> tuple[int, int, int]:
    """(frame_max, heartbeat, channel_max) for TuneOk: the lower of the server's and ours; the server's 0 means
    "no limit", so ours stands then (a heartbeat of 0 from the server turns heartbeats off)."""
    frame_max = min(tune["frame_max"], FRAME_MAX) if tune["frame_max"] else FRAME_MAX
    heartbeat = min(tune["heartbeat"], HEARTBEAT_S) if tune["heartbeat"] else 0
    return frame_max, heartbeat, tune["channel_max"] or 2047


class LeanAmqpPublisher:
    """Confirmed publishes over one connection and channel; confirms, heartbeats and reconnects on a reader
    thread of its own. ``publish`` has the pika publisher's signature (``harness.peer_drivers``)."""

    def __init__(self, host: str, port: int, send_timeout_s: float, user: str = "guest",
                 password: str = "guest") -> None:  # RabbitMQ's default user, allowed from loopback
        self.host, self.port = host, port
        self.user, self.password = user, password
        self.send_timeout_s = send_timeout_s
        self._conn: _Connection | None = None
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="amqp-lean-reader", daemon=True)
        self.server_properties: dict[str, Any] = {}
        self.reconnects = 0

    def start(self) -> None:
        try:
            self._conn = _connect(self.host, self.port, self.user, self.password)
        except (OSError, TimeoutError, wire.AmqpProtocolError) as exc:
            raise DriverError(f"cannot connect to rabbitmq at {self.host}:{self.port}: {exc}") from exc
        self.server_properties = self._conn.server_properties
        self._thread.start()

    def publish(self, routing_key: str, queue: int, key: str, body: bytes, callback: SendCallback) -> None:
        conn = self._conn
        if conn is None or conn.dead:
            callback(SendOutcome(Outcome.FAIL, -1, error="not connected"))  # nothing written
            return
        props = wire.properties({"delivery_mode": 2, "message_id": key, "headers": {BORN_HEADER: time.time_ns()}})
        data = wire.publish(CHANNEL, "", routing_key, body, props, conn.frame_max)
        with conn.wlock:
            with conn.plock:
                if conn.dead:
                    refused = True
                else:
                    refused = False
                    conn.tag += 1
                    tag = conn.tag
                    conn.pending[tag] = _Pending(callback, queue, key, time.monotonic() + self.send_timeout_s)
            if not refused:
                try:
                    conn.sock.sendall(data)
                    conn.last_write = time.monotonic()
                except OSError as exc:  # part of it may have gone out
                    write_failed(conn.pending, conn.plock, tag, queue, exc)
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
                    self._conn = _connect(self.host, self.port, self.user, self.password)
                    self.reconnects += 1
                except (OSError, TimeoutError, wire.AmqpProtocolError):
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
        last_sweep = last_read = time.monotonic()
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([conn.sock], [], [], SWEEP_S)
                data = conn.sock.recv(READ_BYTES) if ready else None
            except (OSError, ValueError) as exc:
                return str(exc)
            if data == b"":
                return "closed by the server"
            now = time.monotonic()
            if data:
                last_read = now
                try:
                    for f in conn.parser.feed(data):
                        why = self._frame(conn, f)
                        if why is not None:
                            return why
                except (OSError, wire.AmqpProtocolError) as exc:
                    return str(exc)
            if conn.heartbeat_s:
                if now - last_read > 2 * conn.heartbeat_s:
                    return "no heartbeat from the server"
                if now - conn.last_write > conn.heartbeat_s / 2:
                    try:
                        conn.write(wire.HEARTBEAT, wait_s=0)  # a writer busy or blocked: it is the sign of life
                    except OSError as exc:
                        return str(exc)
            if conn.blocked_since is not None and now - conn.blocked_since > self.send_timeout_s:
                # pika's blocked_connection_timeout in the library path: give up on the connection, connect again
                return f"blocked by the server for over {self.send_timeout_s} s"
            if now - last_sweep >= SWEEP_S:
                last_sweep = now
                self._sweep(conn, now)
        return "publisher closed"

    def _frame(self, conn: _Connection, f: wire.Frame) -> str | None:
        """Handles one frame; returns why the connection is over, or None."""
        if f.type is wire.FrameType.HEADER:
            if conn.return_header_due:  # the returned message's properties: its message_id is the key
                conn.returned.add(str(f.props.get("message_id", "")))
                conn.return_header_due = False
            return None
        if f.type is not wire.FrameType.METHOD:
            return None  # heartbeats, a returned message's body
        ids = f.ids
        if ids in (wire.BASIC_ACK, wire.BASIC_NACK):
            self._confirm(conn, f.args["delivery_tag"], f.args["multiple"], ids == wire.BASIC_ACK)
        elif ids == wire.BASIC_RETURN:
            conn.return_header_due = True
        elif ids == wire.BLOCKED:
            conn.blocked_since = time.monotonic()
        elif ids == wire.UNBLOCKED:
            conn.blocked_since = None
        elif ids == wire.CLOSE:
            try:
                conn.write(wire.connection_close_ok(), wait_s=1.0)
            except OSError:
                pass
            return f"connection closed by the server: {f.args['reply_code']} {f.args['reply_text']}"
        elif ids == wire.CHANNEL_CLOSE:
            # The channel is gone (a confirm-mode channel closed by an error): this publisher has one channel,
            # so the connection is closed and made again.
            try:
                conn.write(wire.channel_close_ok(f.channel) + wire.connection_close(), wait_s=1.0)
            except OSError:
                pass
            return f"channel closed by the server: {f.args['reply_code']} {f.args['reply_text']}"
        return None

    @staticmethod
    def _confirm(conn: _Connection, tag: int, multiple: bool, ok: bool) -> None:
        with conn.plock:
            if multiple:
                done = []
                while conn.pending:
                    first = next(iter(conn.pending))  # tags are inserted in order: the lowest first
                    if first > tag:
                        break
                    done.append(conn.pending.pop(first))
            else:
                p = conn.pending.pop(tag, None)
                done = [] if p is None else [p]
        for p in done:
            if ok and p.key in conn.returned:
                conn.returned.discard(p.key)
                p.callback(SendOutcome(Outcome.FAIL, wire.NO_ROUTE, p.queue, error="returned: NO_ROUTE"))
            elif ok:
                p.callback(SendOutcome(Outcome.OK, 0, p.queue, -1))
            else:
                p.callback(SendOutcome(Outcome.FAIL, -1, p.queue, error="basic.nack"))

    @staticmethod
    def _sweep(conn: _Connection, now: float) -> None:
        expired = pop_expired(conn.pending, conn.plock, now)
        for p in expired:
            p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error="confirm timeout"))

    def close(self) -> None:
        self._closing.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.write(wire.connection_close(), wait_s=1.0)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(10)
        conn = self._conn
        if conn is not None:
            for p in conn.take_all():
                p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error="publisher closed"))
            shut(conn.sock)
            self._conn = None



class LeanRabbitMQDriver(RabbitMQDriver):
    """``RabbitMQDriver`` with its sends on ``LeanAmqpPublisher``; queues, consumers and backlog through pika."""

    peer_client = "lean"

    def _make_publisher(self) -> Publisher:
        publisher = LeanAmqpPublisher(self.host, self.port, self.send_timeout_s)
        publisher.start()
        props = publisher.server_properties
        self._version = str(props.get("version", "?"))
        return publisher

