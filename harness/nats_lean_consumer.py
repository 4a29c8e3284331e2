"""This module owns the lean JetStream pull consumer: the consumer side of ``LeanNatsDriver`` (harness.nats_lean)
over one plain TCP socket of its own, the protocol from ``harness.nats_wire``, no client library.

Why: nats-py's ``fetch`` + ``await msg.ack()`` cost ~100 µs of client CPU per consumed message in the compare
load, so the NATS side measured the Python client more than the server ("inconclusive: generator bound").

What it does, all on one thread per consumer (``nats-lean-consumer``), which alone writes to the socket:

=====================  =================================================================================
step                   on the wire
=====================  =================================================================================
connect                the server's INFO; ``CONNECT`` (headers on); ``SUB _INBOX.<token>.api.* 1``; per
                       topic ``SUB _INBOX.<token>.pull.<i> <2 + i>``
bind, per topic        as nats-py's ``pull_subscribe(f"{topic}.*", durable=group, stream=...)``:
                       ``$JS.API.CONSUMER.INFO.<stream>.<group>``; on 404 (no such consumer)
                       ``$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<group>`` with nats-py's config
                       (deliver all or by start time, explicit ack, filter ``<topic>.*``); an existing
                       durable is bound as it is (its config and position kept), as nats-py does
pull                   ``PUB $JS.API.CONSUMER.MSG.NEXT.<stream>.<group> _INBOX.<token>.pull.<i>
                       {"batch":B,"expires":ns}``, ``PULL_DEPTH`` requests kept outstanding, so the next
                       batch is on its way while one is handled; none sent while paused
deliver                MSG/HMSG on the pull sid, reply = the ack subject (stream sequence, store time);
                       ``on_delivery`` once per read (all the messages parsed from one ``recv``), then one
                       ``PUB <ack subject> 4 +ACK`` per message, all in one write (explicit acks, as
                       nats-py's ``msg.ack()``; no AckAll)
end of a pull          a status message on the inbox: 408 (expired), 409 (ended by the server; "Consumer
                       Deleted" binds again), 404; 503 (no responders: JetStream not there) binds again
lost connection        reconnect every ``RECONNECT_S`` and bind again (the kill -9 fault restarts the
                       server): unacknowledged messages are delivered again, a duplicate at worst
=====================  =================================================================================

``on_delivery`` raising: that read's messages are not acknowledged (the server delivers them again after its
ack wait), as the library path, whose fetch loop starts over.
"""

from __future__ import annotations

import secrets
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from harness import nats_wire as wire
from harness.driver import Delivery, DeliveryCallback
from harness.lean_link import shut
from harness.peer_drivers import BORN_HEADER, KEY_HEADER, _AckingConsumer, stream_name

READ_BYTES: Final = 1 << 16
PULL_DEPTH: Final = 2  # outstanding pull requests per topic: one being handled, the next already coming
EXPIRES_S: Final = 0.5  # nats-py's fetch timeout in the library path: a pause takes effect within it
GRACE_S: Final = 2.0  # a pull the server never ended is given up this long after its expiry (PullWindow)
API_TIMEOUT_S: Final = 5.0  # nats-py's JetStream timeout in the library path (the driver's send timeout)
RETRY_S: Final = 0.5  # the library path's wait before binding again after an error
RECONNECT_S: Final = 0.2  # nats-py's reconnect_time_wait in the library path
CONNECT_TIMEOUT_S: Final = 2.0
TICK_S: Final = 0.1  # how long a read waits: stop, pause and the deadlines are looked at this often
API_SID: Final = 1


@dataclass(slots=True)
class _Topic:
    """One topic's durable consumer on the current connection."""

    name: str
    stream: str
    sid: int
    inbox: str  # the pull requests' reply subject: deliveries and status messages arrive on it
    window: wire.PullWindow
    bound: bool = False
    binding: bool = False  # an API request for it is outstanding
    retry_at: float = 0.0


@dataclass(slots=True)
class _ApiCall:
    topic: _Topic
    kind: str  # "info" / "create"
    deadline: float


@dataclass(slots=True)
class _Session:
    """One connection after the server's INFO."""

    sock: socket.socket
    parser: wire.Parser
    inbox: str = field(default_factory=lambda: f"_INBOX.{secrets.token_hex(8)}")
    topics: list[_Topic] = field(default_factory=list)
    by_sid: dict[int, _Topic] = field(default_factory=dict)
    calls: dict[str, _ApiCall] = field(default_factory=dict)  # reply subject -> its request
    next_call: int = 0


class LeanNatsConsumer(_AckingConsumer):
    """A durable JetStream pull consumer of ``topics`` in ``group`` (one durable per topic's stream, as the
    library path); ``on_delivery`` is called from its thread."""

    def __init__(self, host: str, port: int, group: str, topics: Sequence[str], on_delivery: DeliveryCallback, *,
                 from_timestamp_ms: int | None, batch: int, queue_count: Callable[[str], int],
                 name: str = "lab-lean-consumer") -> None:
        self.host, self.port = host, port
        self._group = group
        self._topics = list(topics)
        self._tlock = threading.Lock()  # subscribe() from any thread; the consumer thread reads the list
        self._on_delivery = on_delivery
        self._from_ms = from_timestamp_ms
        self._batch = max(1, batch)
        self._queue_count = queue_count
        self._name = name
        self._paused = False
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._session: _Session | None = None
        self.reconnects = 0  # connections after the first

    def start(self) -> None:
        if self._thread is None:
            self._closing.clear()  # started again after a stop, as the library path allows
            self._thread = threading.Thread(target=self._run, name="nats-lean-consumer", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._closing.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        thread.join(1.0)
        session = self._session
        if thread.is_alive() and session is not None:
            shut(session.sock)  # a write blocked on a stopped server: the error wakes it
        thread.join(5.0)

    def subscribe(self, topics: Sequence[str]) -> None:
        with self._tlock:
            for t in topics:
                if t not in self._topics:
                    self._topics.append(t)  # the thread SUBs and binds it on its next turn

    def owned_queues(self) -> int:
        with self._tlock:
            topics = list(self._topics)
        return sum(self._queue_count(t) for t in topics)

    # ---- the consumer thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        first = True
        while not self._closing.is_set():
            session = self._open()
            if session is None:
                self._closing.wait(RECONNECT_S)
                continue
            if not first:
                self.reconnects += 1
            first = False
            self._session = session
            try:
                self._serve(session)
            except (OSError, wire.NatsProtocolError):
                pass  # the server went away (kill -9) or sent what cannot be read: connect again
            finally:
                self._session = None
                shut(session.sock)

    def _open(self) -> _Session | None:
        """A connection past the server's INFO, CONNECT and the API inbox written; None when the server is not
        there (yet)."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            return None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session = _Session(sock, wire.Parser())
            if not self._await_info(session):
                shut(sock)
                return None
            sock.sendall(wire.connect_line(self._name) + wire.sub_line(f"{session.inbox}.api.*", API_SID))
        except (OSError, wire.NatsProtocolError):
            shut(sock)
            return None
        sock.settimeout(None)
        return session

    def _await_info(self, session: _Session) -> bool:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while time.monotonic() < deadline and not self._closing.is_set():
            ready, _, _ = select.select([session.sock], [], [], TICK_S)
            if not ready:
                continue
            data = session.sock.recv(READ_BYTES)
            if not data:
                return False
            for ev in session.parser.feed(data):
                if ev.kind is wire.Kind.INFO:
                    return True  # anything after it stays in the parser for _serve
        return False

    def _serve(self, session: _Session) -> None:
        """Pulls, delivers and acknowledges until the connection fails (raises) or the consumer stops."""
        while not self._closing.is_set():
            out = bytearray()
            self._add_topics(session, out)
            ready, _, _ = select.select([session.sock], [], [], TICK_S)
            if ready:
                data = session.sock.recv(READ_BYTES)
                if not data:
                    raise ConnectionError("closed by the server")
                self._handle(session, data, out)
            now = time.monotonic()
            self._expire_calls(session, now)
            for t in session.topics:
                self._tend(session, t, now, out)
            if out:
                session.sock.sendall(out)

    def _add_topics(self, session: _Session, out: bytearray) -> None:
        """Topics not yet on this connection (all of them after a connect; then those subscribe() added)."""
        with self._tlock:
            new = self._topics[len(session.topics):]
        for name in new:
            i = len(session.topics)
            t = _Topic(name, stream_name(name), API_SID + 1 + i, f"{session.inbox}.pull.{i}",
                       wire.PullWindow(PULL_DEPTH, self._batch, EXPIRES_S, GRACE_S))
            session.topics.append(t)
            session.by_sid[t.sid] = t
            out += wire.sub_line(t.inbox, t.sid)

    def _tend(self, session: _Session, t: _Topic, now: float, out: bytearray) -> None:
        """What one topic needs next: binding, or its pull requests topped up (not while paused)."""
        if not t.bound:
            if not t.binding and now >= t.retry_at:
                self._call(session, t, "info", now, out)
            return
        if self._paused:
            return
        for _ in range(t.window.wanted(now)):
            out += wire.request(wire.next_subject(t.stream, self._group), t.inbox,
                                wire.pull_request(self._batch, int(EXPIRES_S * 1e9)))
            t.window.sent(now)

    # ---- binding the durable (the JetStream API) -------------------------------------------------------

    def _call(self, session: _Session, t: _Topic, kind: str, now: float, out: bytearray) -> None:
        session.next_call += 1
        reply = f"{session.inbox}.api.{session.next_call}"
        session.calls[reply] = _ApiCall(t, kind, now + API_TIMEOUT_S)
        t.binding = True
        if kind == "info":
            out += wire.request(wire.consumer_info_subject(t.stream, self._group), reply)
        else:
            cfg = wire.consumer_config(self._group, f"{t.name}.*", self._from_ms)
            out += wire.request(wire.consumer_create_subject(t.stream, self._group), reply,
                                wire.create_consumer_body(t.stream, cfg))

    @staticmethod
    def _unbind(t: _Topic, retry_in_s: float) -> None:
        t.bound = False
        t.window.clear()
        t.retry_at = time.monotonic() + retry_in_s

    def _answered(self, session: _Session, ev: wire.Event, out: bytearray) -> None:
        call = session.calls.pop(ev.subject, None)
        if call is None:
            return  # answered after its timeout: a new request went out since
        t = call.topic
        t.binding = False
        answer = wire.api_answer(ev)
        if answer.ok:
            t.bound = True
            t.window.clear()
        elif call.kind == "info" and answer.code == wire.NOT_FOUND and answer.err_code != wire.STREAM_NOT_FOUND:
            self._call(session, t, "create", time.monotonic(), out)
        else:
            # No stream yet, JetStream not ready after a restart (503), a refused config: try again later.
            t.retry_at = time.monotonic() + RETRY_S

    @staticmethod
    def _expire_calls(session: _Session, now: float) -> None:
        for reply in [r for r, c in session.calls.items() if c.deadline < now]:
            call = session.calls.pop(reply)
            call.topic.binding = False
            call.topic.retry_at = now

    # ---- what the server sends --------------------------------------------------------------------------

    def _handle(self, session: _Session, data: bytes, out: bytearray) -> None:
        """One read: control lines answered, API answers applied, deliveries handed over in one call and then
        acknowledged (the acks appended to ``out``, written with the pull requests in one write)."""
        deliveries: list[Delivery] = []
        acks: list[bytes] = []
        for ev in session.parser.feed(data):
            if ev.kind is wire.Kind.MSG:
                if ev.sid == API_SID:
                    self._answered(session, ev, out)
                else:
                    self._pulled(session, ev, deliveries, acks)
            elif ev.kind is wire.Kind.PING:
                out += wire.PONG
            elif ev.kind is wire.Kind.ERR:
                raise ConnectionError(f"-ERR {ev.text}")  # the server closes the connection after it
        if not deliveries:
            return
        try:
            self._on_delivery(deliveries)
        except Exception:  # noqa: BLE001 - the caller's callback: unacknowledged, delivered again later
            return
        out += b"".join(acks)

    def _pulled(self, session: _Session, ev: wire.Event, deliveries: list[Delivery], acks: list[bytes]) -> None:
        """A message on a pull inbox: a stored message or the status that ends a pull request."""
        t = session.by_sid.get(ev.sid)
        if t is None:
            return
        if ev.status:
            if ev.status in wire.PULL_ENDS:
                t.window.ended()
            if ev.status == wire.CONFLICT and "deleted" in ev.text.lower():
                self._unbind(t, 0.0)  # the durable went away under us: create it again
            elif ev.status == wire.NO_RESPONDERS:
                self._unbind(t, RETRY_S)  # nothing took the pull (JetStream off, e.g. its disk full): bind again
            return
        meta = wire.ack_reply(ev.reply)
        if meta is None:
            return  # not a JetStream delivery: nothing to acknowledge or record
        t.window.delivered()
        deliveries.append(_delivery(t.name, ev, meta))
        acks.append(wire.ack(ev.reply))



def _delivery(topic: str, ev: wire.Event, meta: wire.AckReply) -> Delivery:
    """The fields the library path records: key and born time from the headers, queue from the subject's last
    token, the stream sequence, and the store time from the ack subject."""
    hdr = ev.headers
    _, _, q = ev.subject.rpartition(".")
    try:
        born = int(hdr.get(BORN_HEADER, -1))
    except ValueError:
        born = -1
    return Delivery(hdr.get(KEY_HEADER, ""), topic, int(q) if q.isdigit() else -1, meta.stream_seq, born,
                    meta.timestamp_ns, len(ev.payload))
