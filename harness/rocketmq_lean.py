"""This module owns the lean RocketMQ publisher: SEND_MESSAGE_V2 frames built directly and pipelined over one
plain TCP connection per broker master, no client library on the send path, and ``LeanRocketMQDriver``, the
``RocketMQDriver`` whose single sends take it (topic creation, consumers, batches and the backlog stay on
``reference_broker.client``).

Why: the client library costs ~40 µs of client CPU per message (Message object, validation, header dict, JSON
encoding, futures, its I/O loop), so in compare's unbounded ``max`` workload our own load cost more CPU per
message than our broker and the row read "generator bound" (BENCHMARKS.md). The peers' sends are lean
(``harness.nats_lean``, ``harness.amqp_lean``); this is the same for the RocketMQ side, so brokers are compared,
not clients.

What the broker receives is what the library sends (``frame_parts``: the library's own request, encoded by the
project's codec, split at its varying fields): properties ``KEYS`` (the checker's identity; the broker indexes
it), ``WAIT=true``, the send time in epoch ns (``LAB_BORN_NS``, harness.driver.BORN_NS_PROPERTY: what the
consumer reads back as ``born_ns``) and a ``UNIQ_KEY`` (MessageClientIDSetter's 32 hex), in the library's
order; the born time in epoch ms (``bornTimestamp``). Per message only the born times, the properties and the
opaque are filled in.

The route: the name server's topic route (write queues of writable masters, sorted by broker name and queue id
as the library driver sorts its queues), asked at the first send of a topic and again after a connection was
lost; queues round-robin, or the one the caller asks for (modulo their number). One ``_Link`` per master
address: a socket, its pending sends by opaque, a reader thread that decodes the answers (``FrameDecoder``),
sweeps expired sends and reconnects (every ``RECONNECT_S``) after a loss, e.g. the chaos kill -9 fault.

A send's outcome, by ``harness.send_outcome``'s rules:

==========================================================  =========  =========================================
what happened                                               outcome    why
==========================================================  =========  =========================================
SUCCESS, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,           ok         stored (the code is kept, as the library
SLAVE_NOT_AVAILABLE                                                    driver keeps its SendStatus's code)
any other response code                                     fail       the broker refused it
no route / not connected when the send is made              fail       nothing written
the connection lost with the send pending                   unknown    written, no answer: maybe stored
no answer within ``send_timeout_s``                         unknown    the same
==========================================================  =========  =========================================

Unlike the library there is no retry (``retryTimesWhenSendFailed``): a refusal is reported as it came, which
is the outcome the checker needs; a compare load does not depend on retries.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from harness.driver import BORN_NS_PROPERTY, DriverError, RocketMQDriver, SendCallback, SendOutcome
from harness.lean_link import pop_expired, shut, write_failed
from harness.records.schema import Outcome
from reference_broker.client import protocol
from reference_broker.client.message_id import UniqIdGenerator
from reference_broker.common import message as mc
from reference_broker.remoting.codec import FrameDecoder, ProtocolError
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import FRAME_PREFIX, encode, json_dumps
from reference_broker.remoting.errors import RemotingError
from reference_broker.tools import admin

RECONNECT_S: Final = 0.2  # between connection attempts after a loss; also the route's re-ask interval
CONNECT_TIMEOUT_S: Final = 3.0
SWEEP_S: Final = 0.2  # how often pending sends are checked against their deadline
READ_BYTES: Final = 1 << 16
PERM_WRITE: Final = 0x2  # PermName.PERM_WRITE
STORED_CODES: Final = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                                 ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE})
_OPAQUE_WRAP: Final = 1 << 31
# Sentinels the template request carries where the varying fields go; none can occur elsewhere in a header.
_BORN_SENTINEL: Final = 9_999_999_999_999
_PROPS_SENTINEL: Final = "PROPS~SENTINEL"
_OPAQUE_SENTINEL: Final = 2_000_000_001


# ---- frames (pure) ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FrameParts:
    """One (group, topic, queue)'s SEND_MESSAGE_V2 header, split around its born time, properties and opaque."""

    head: bytes  # up to the born time's digits
    after_born: bytes  # up to the properties' (JSON-escaped) text
    after_props: bytes  # up to the opaque's digits
    tail: bytes


def _json_text(s: str) -> bytes:
    """``s`` as the inside of a JSON string (the codec's encoder: \\x01 and \\x02 become \\u0001, \\u0002)."""
    return json_dumps(s)[1:-1]


def frame_parts(group: str, topic: str, queue_id: int) -> FrameParts:
    """The library's request (``protocol.send_request``) for one message of this queue, encoded by the codec,
    with sentinels in its varying fields; split there."""
    cmd = protocol.send_request(group, topic, queue_id, b"", _PROPS_SENTINEL, born_timestamp=_BORN_SENTINEL)
    cmd.opaque = _OPAQUE_SENTINEL
    header = encode(cmd)[FRAME_PREFIX.size:]
    cuts = []
    for needle in (b'"%d"' % _BORN_SENTINEL, b'"%s"' % _PROPS_SENTINEL.encode(), b":%d" % _OPAQUE_SENTINEL):
        at = header.find(needle)
        if at < 0 or header.find(needle, at + 1) >= 0:
            raise ValueError(f"the send header's field {needle!r} is not where it should be")
        cuts.append((at + 1, at + len(needle) - (0 if needle.startswith(b":") else 1)))
    (b0, b1), (p0, p1), (o0, o1) = cuts
    if not b1 < p0 < p1 < o0:
        raise ValueError("the send header's fields are not in the order the frame is built in")
    return FrameParts(header[:b0], header[b1:p0], header[p1:o0], header[o1:])


_KEYS_PREFIX: Final = _json_text(f"{mc.PROPERTY_KEYS}\x01")
_BORN_NS_PREFIX: Final = _json_text(f"\x02{mc.PROPERTY_WAIT_STORE_MSG_OK}\x01true\x02{BORN_NS_PROPERTY}\x01")
_UNIQ_PREFIX: Final = _json_text(f"\x02{mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x01")


def build_frame(parts: FrameParts, opaque: int, born_ns: int, key: str, uniq: str, body: bytes) -> bytes:
    """A whole SEND_MESSAGE_V2 frame: properties KEYS, WAIT=true, the send time in ns (``BORN_NS_PROPERTY``,
    the library driver's user property) and UNIQ_KEY, in the library's order; bornTimestamp in ms."""
    key_json = key.encode() if key.isalnum() else _json_text(key)  # harness keys need no escaping: the fast path
    header = b"".join((parts.head, b"%d" % (born_ns // 1_000_000), parts.after_born, _KEYS_PREFIX, key_json,
                       _BORN_NS_PREFIX, b"%d" % born_ns, _UNIQ_PREFIX, uniq.encode(), parts.after_props,
                       b"%d" % opaque, parts.tail))
    return b"".join((FRAME_PREFIX.pack(4 + len(header) + len(body), len(header)), header, body))


def outcome_of_response(code: int, ext: dict[str, str], remark: str | None, queue: int) -> SendOutcome:
    """A send's answer classified as ``harness.send_outcome`` classifies the library's result or error."""
    if code in STORED_CODES:
        try:
            return SendOutcome(Outcome.OK, code, int(ext["queueId"]), int(ext["queueOffset"]))
        except (KeyError, ValueError):  # the library raises SYSTEM_ERROR for this: an error answer, so fail
            return SendOutcome(Outcome.FAIL, ResponseCode.SYSTEM_ERROR, queue,
                               error=f"send response lacks queueId/queueOffset: {ext}"[:200])
    return SendOutcome(Outcome.FAIL, code, queue, error=f"CODE: {code} DESC: {remark}"[:200])


# ---- one connection per broker master ---------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    callback: SendCallback
    queue: int
    deadline: float


class _Link:
    """The connection to one broker address; its reader thread answers sends and reconnects after a loss."""

    def __init__(self, addr: str, send_timeout_s: float, on_lost: Callable[[], None]) -> None:
        self.addr = addr
        self.send_timeout_s = send_timeout_s
        self._on_lost = on_lost
        self.sock: socket.socket | None = None
        self.wlock = threading.Lock()  # one writer at a time: frames never interleave
        self.plock = threading.Lock()  # the pending table (the reader never waits on a blocked write)
        self.pending: dict[int, _Pending] = {}
        self._opaques = itertools.count(1)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rmq-lean-{addr}", daemon=True)
        self.reconnects = 0

    def start(self) -> None:
        """Connects now (a first failure raises); the reader thread runs from here on."""
        self.sock = self._connect()
        self._thread.start()

    def _connect(self) -> socket.socket:
        host, _, port = self.addr.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        return sock

    def publish(self, parts: FrameParts, queue: int, key: str, uniq: str, body: bytes,
                callback: SendCallback) -> None:
        with self.wlock:
            sock = self.sock
            if sock is None:
                callback(SendOutcome(Outcome.FAIL, -1, queue, error=f"not connected to {self.addr}"))
                return
            opaque = next(self._opaques) % _OPAQUE_WRAP  # positive int32; a wrap repeats no pending opaque
            frame = build_frame(parts, opaque, time.time_ns(), key, uniq, body)
            with self.plock:
                self.pending[opaque] = _Pending(callback, queue, time.monotonic() + self.send_timeout_s)
            try:
                sock.sendall(frame)
            except OSError as exc:  # part of it may have gone out: maybe stored
                write_failed(self.pending, self.plock, opaque, queue, exc)

    # ---- the reader thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            sock = self.sock
            if sock is None:
                if self._closing.wait(RECONNECT_S):
                    return
                try:
                    new = self._connect()
                except OSError:
                    continue
                with self.wlock:
                    self.sock = new
                self.reconnects += 1
                continue
            why = self._read(sock)
            with self.wlock:  # no send is written to the dead socket from here on
                self.sock = None
            shut(sock)
            self._fail_pending(f"connection lost: {why}")
            if not self._closing.is_set():
                self._on_lost()

    def _read(self, sock: socket.socket) -> str:
        decoder = FrameDecoder()
        last_sweep = time.monotonic()
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([sock], [], [], SWEEP_S)
                data = sock.recv(READ_BYTES) if ready else None
            except (OSError, ValueError) as exc:
                return str(exc)
            if data == b"":
                return "closed by the broker"
            if data:
                decoder.feed(data)
                try:
                    while (cmd := decoder.next_frame()) is not None:
                        if cmd.is_response:
                            self._answer(cmd.opaque, cmd.code, cmd.ext_fields, cmd.remark)
                except ProtocolError as exc:
                    return f"undecodable answer: {exc}"
            now = time.monotonic()
            if now - last_sweep >= SWEEP_S:
                last_sweep = now
                self._sweep(now)
        return "publisher closed"

    def _answer(self, opaque: int, code: int, ext: dict[str, str], remark: str | None) -> None:
        with self.plock:
            p = self.pending.pop(opaque, None)
        if p is not None:  # None: answered after its timeout, already reported unknown
            p.callback(outcome_of_response(code, ext, remark, p.queue))

    def _sweep(self, now: float) -> None:
        """Pending sends past their deadline: unknown. Deadlines grow with insertion order, so only the oldest
        entries are looked at."""
        expired = pop_expired(self.pending, self.plock, now)
        for p in expired:
            p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error="no answer within the send timeout"))

    def _fail_pending(self, why: str) -> None:
        with self.plock:
            lost, self.pending = list(self.pending.values()), {}
        for p in lost:
            p.callback(SendOutcome(Outcome.UNKNOWN, -1, p.queue, error=why[:200]))

    def close(self) -> None:
        self._closing.set()
        with self.wlock:
            sock, self.sock = self.sock, None
        if sock is not None:
            shut(sock)  # wakes the reader
        if self._thread.is_alive():
            self._thread.join(10)
        self._fail_pending("publisher closed")



# ---- the publisher ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    addr: str
    queue_id: int
    parts: FrameParts


class LeanRocketMQPublisher:
    """Pipelined single-message sends to the masters of a topic's route. ``publish`` is called from any thread;
    callbacks come from a link's reader thread (or the caller's, for a send refused before it was written)."""

    def __init__(self, namesrv: str, group: str, send_timeout_s: float = 3.0) -> None:
        self.namesrv = namesrv
        self.group = group
        self.send_timeout_s = send_timeout_s
        self._ids = UniqIdGenerator()
        self._links: dict[str, _Link] = {}
        self._routes: dict[str, list[_Target]] = {}
        self._rr: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()  # links and routes
        self._stale = False  # a connection was lost: ask the name server again (at most every RECONNECT_S)
        self._asked_at = 0.0
        self._closed = False

    # ---- routes ---------------------------------------------------------------------------------------

    def _lookup(self, topic: str) -> list[_Target]:
        route = admin.topic_route(self.namesrv, topic)
        masters = {bd["brokerName"]: bd.get("brokerAddrs", {}).get("0") for bd in route.get("brokerDatas", [])}
        out = []
        for qd in sorted(route.get("queueDatas", []), key=lambda q: str(q["brokerName"])):
            addr = masters.get(qd["brokerName"])
            if addr and int(qd.get("perm", 6)) & PERM_WRITE:
                out += [_Target(addr, q, frame_parts(self.group, topic, q)) for q in range(int(qd["writeQueueNums"]))]
        return out

    def route(self, topic: str) -> list[_Target]:
        """The topic's write queues: cached; asked again after a connection loss. Raises when there is none."""
        with self._lock:
            targets = self._routes.get(topic)
            now = time.monotonic()
            ask = targets is None or (self._stale and now - self._asked_at >= RECONNECT_S)
            if not ask:
                assert targets is not None
                return targets
            self._asked_at = now
            try:
                fresh = self._lookup(topic)
            except (admin.AdminError, RemotingError, OSError, ValueError, KeyError) as exc:  # keep what we had
                if targets:
                    return targets
                raise DriverError(f"no route for topic {topic}: {exc}") from exc
            if not fresh:
                if targets:
                    return targets
                raise DriverError(f"no route for topic {topic}: no writable queue")
            if self._stale:
                self._routes.clear()  # every topic is asked again once
                self._stale = False
            self._routes[topic] = fresh
            return fresh

    def _lost(self) -> None:
        self._stale = True

    def _link(self, addr: str) -> _Link:
        with self._lock:
            link = self._links.get(addr)
            if link is None:
                if self._closed:
                    raise DriverError("publisher closed")
                link = _Link(addr, self.send_timeout_s, self._lost)
                link.start()  # OSError: not connected, nothing written
                self._links[addr] = link
            return link

    # ---- sending --------------------------------------------------------------------------------------

    def publish(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        """One message to the queue ``queue`` of the route (modulo its length), else the next round-robin."""
        try:
            targets = self.route(topic)
            if queue is None:
                rr = self._rr.get(topic)
                if rr is None:
                    rr = self._rr.setdefault(topic, itertools.count())
                i = next(rr)
            else:
                i = queue
            target = targets[i % len(targets)]
            link = self._link(target.addr)
        except (DriverError, OSError) as exc:
            callback(SendOutcome(Outcome.FAIL, -1, -1 if queue is None else queue, error=str(exc)[:200]))
            return
        link.publish(target.parts, target.queue_id, key, self._ids.create(), body, callback)

    def publish_to(self, addr: str, topic: str, queue_id: int, key: str, body: bytes,
                   callback: SendCallback) -> None:
        """One message to a given broker address and queue id, whatever the route says (a refusal test's way to
        send what the route would never pick)."""
        try:
            link = self._link(addr)
        except (DriverError, OSError) as exc:
            callback(SendOutcome(Outcome.FAIL, -1, queue_id, error=str(exc)[:200]))
            return
        link.publish(frame_parts(self.group, topic, queue_id), queue_id, key, self._ids.create(), body, callback)

    def reconnects(self) -> int:
        with self._lock:
            return sum(link.reconnects for link in self._links.values())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links, self._links = list(self._links.values()), {}
        for link in links:
            link.close()


class LeanRocketMQDriver(RocketMQDriver):
    """``RocketMQDriver`` with its single sends (``send``, ``send_async``) on ``LeanRocketMQPublisher``; topics,
    consumers, batches and the backlog through the client library."""

    rocketmq_client = "lean"

    def __init__(self, namesrv: str, *, instance: str, producer_group: str = "lab_producer",
                 send_timeout_s: float = 3.0, **kwargs: Any) -> None:
        super().__init__(namesrv, instance=instance, producer_group=producer_group, send_timeout_s=send_timeout_s,
                         **kwargs)
        self._lean: LeanRocketMQPublisher | None = None

    def start(self) -> None:
        super().start()
        with self._lock:
            if self._lean is None:
                self._lean = LeanRocketMQPublisher(self.namesrv, self.producer_group, self.send_timeout_s)

    def stop(self) -> None:
        with self._lock:
            lean, self._lean = self._lean, None
        if lean is not None:
            lean.close()
        super().stop()

    def publisher(self) -> LeanRocketMQPublisher:
        lean = self._lean
        if lean is None:
            self.start()
            lean = self._lean
            assert lean is not None
        return lean

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        self.publisher().publish(topic, key, body, callback, queue)

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        got: list[SendOutcome] = []
        done = threading.Event()

        def cb(o: SendOutcome) -> None:
            got.append(o)
            done.set()

        self.publisher().publish(topic, key, body, cb, queue)
        if not done.wait(self.send_timeout_s + 5):  # the reader's sweep answers first; this is a backstop
            return SendOutcome(Outcome.UNKNOWN, -1, error="no answer")
        return got[0]
