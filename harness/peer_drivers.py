"""Drivers for brokers no one here wrote: NATS JetStream (``nats``) and RabbitMQ (``rabbitmq``, classic or quorum
queues), through their own Python clients (nats-py, pika; the ``peers`` extra), behind the same ``Driver`` the
scenarios and the compare workload speak to.

A RocketMQ topic with N queues maps onto each peer as:

==============  =============================================================================================
RocketMQ        NATS JetStream                            RabbitMQ
==============  =============================================================================================
topic           a stream named after the topic,           N durable queues ``<topic>.<i>`` (x-queue-type
                file storage, subjects ``<topic>.<i>``     classic or quorum), published to through the
                                                           default exchange, ``delivery_mode`` 2 (persistent)
queue i         subject ``<topic>.<i>``                   queue ``<topic>.<i>``
send ack        the stream's PubAck (JetStream publish)   a publisher confirm (confirm mode; basic.ack)
queue offset    the stream sequence (one per stream,      none (-1): a queue has no positions
                over all subjects)
consumer group  a durable pull consumer per topic         competing consumers on the N queues (manual ack)
backlog         consumer info: pending + ack pending      passive declare: messages ready
==============  =============================================================================================

What an acknowledgement promises (``ACK_PROMISES``; recorded in meta.json as ``ack_promise`` so the loss
checker judges each broker against its own promise), measured on this machine with
``strace -f -e trace=fsync,fdatasync`` on the server under a few hundred sends (docs/interop.md, "Peer brokers"):
NATS 2.9 JetStream answers from the page cache (its file store syncs its blocks on a 2-minute timer), as
RocketMQ's ASYNC_FLUSH does; RabbitMQ 3.10 confirms a persistent message only after fsync (classic queues'
message store and quorum queues' Raft log, both group commit), as SYNC_FLUSH does.

Outcomes follow ``harness.send_outcome``'s vocabulary: ok = acknowledged; fail = refused or never written (not
connected, no stream: NATS "no responders", a RabbitMQ basic.nack); unknown = written without an answer (a
timeout, the connection lost while the confirm was pending).
"""

# nats-py and pika ship no type information; their names are Any here.
# mypy: disable-error-code="import-untyped,import-not-found,unused-ignore"

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, Literal, Protocol, TypeVar

from harness.driver import (
    Backlog,
    Consumer,
    Delivery,
    DeliveryCallback,
    Driver,
    DriverError,
    SendCallback,
    SendOutcome,
)
from harness.records.schema import Outcome

T = TypeVar("T")
BORN_HEADER: Final = "lab-born-ns"  # the producer's wall clock at send, for send-to-consume latency
KEY_HEADER: Final = "lab-key"
QueueType = Literal["classic", "quorum"]


class AckPromise(StrEnum):
    """What a broker has done with a message when it acknowledges it."""

    PAGE_CACHE = "page_cache"  # written to the OS; a power loss may lose it, a process kill may not
    FSYNC = "fsync"  # on the disk: neither may lose it


ACK_PROMISES: Final[dict[str, AckPromise]] = {
    "nats": AckPromise.PAGE_CACHE,
    "rabbitmq-classic": AckPromise.FSYNC,
    "rabbitmq-quorum": AckPromise.FSYNC,
    "ASYNC_FLUSH": AckPromise.PAGE_CACHE,
    "SYNC_FLUSH": AckPromise.FSYNC,
}


def loss_allowed(promise: str | None, power_loss: bool) -> bool:
    """Whether an acknowledged message may be lost under the fault: only what sat in the page cache, and only
    when the machine (not just the process) went down."""
    return power_loss and promise == AckPromise.PAGE_CACHE


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _queue_of(topic: str, queue: int | None, counter: itertools.count[int], n: int) -> int:
    return (next(counter) if queue is None else queue) % max(1, n)


def worst(outs: Sequence[SendOutcome]) -> SendOutcome:
    """A batch's outcome from its messages': unknown before fail before ok."""
    for kind in (Outcome.UNKNOWN, Outcome.FAIL):
        for o in outs:
            if o.outcome == kind:
                return o
    return outs[0]


class Gather:
    """The outcomes of ``n`` pipelined sends, collected from the publisher's callbacks (any thread)."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._outs: list[SendOutcome] = []
        self._lock = threading.Lock()
        self._done = threading.Event()

    def add(self, outcome: SendOutcome) -> None:
        with self._lock:
            self._outs.append(outcome)
            if len(self._outs) == self._n:
                self._done.set()

    def worst(self, timeout_s: float, missing: str) -> SendOutcome:
        """The worst outcome of the sends; unknown (``missing``) when not all answered within ``timeout_s``."""
        if not self._done.wait(timeout_s):
            return SendOutcome(Outcome.UNKNOWN, -1, error=missing)
        return worst(self._outs)


class _AckingConsumer(Consumer):
    """A peer's consumer: it acknowledges each delivery after its callback, so there is nothing to commit;
    pausing stops fetching."""

    _paused = False

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def commit(self) -> None:
        """Every delivery is acknowledged as it is handled: nothing to report."""


# ---- NATS JetStream ------------------------------------------------------------------------------------


def stream_name(topic: str) -> str:
    """A JetStream stream name for a topic (no ``.``, ``*``, ``>`` or whitespace allowed there)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in topic)


class _NatsConsumer(_AckingConsumer):
    def __init__(self, driver: NatsDriver, group: str, topics: Sequence[str], on_delivery: DeliveryCallback,
                 from_timestamp_ms: int | None, batch: int) -> None:
        self._driver = driver
        self._group = group
        self._topics = list(topics)
        self._on_delivery = on_delivery
        self._from_ms = from_timestamp_ms
        self._batch = batch
        self._running = False
        self._paused = False
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        self._running = True
        for t in self._topics:
            self._driver.call(self._spawn(t))

    async def _spawn(self, topic: str) -> None:
        self._tasks[topic] = asyncio.get_running_loop().create_task(self._fetch_loop(topic))

    async def _fetch_loop(self, topic: str) -> None:
        from nats.js.api import ConsumerConfig, DeliverPolicy

        psub = None
        while self._running:
            try:
                if psub is None:
                    js = self._driver.js
                    if self._from_ms is not None:
                        start = datetime.fromtimestamp(self._from_ms / 1000, tz=UTC)
                        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
                    else:
                        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
                    psub = await js.pull_subscribe(f"{topic}.*", durable=self._group, stream=stream_name(topic),
                                                   config=cfg)
                if self._paused:
                    await asyncio.sleep(0.05)
                    continue
                try:
                    msgs = await psub.fetch(self._batch, timeout=0.5)
                except TimeoutError:
                    continue
                out = []
                for m in msgs:
                    meta = m.metadata
                    hdr = m.headers or {}
                    born = int(hdr.get(BORN_HEADER, -1))
                    stored = int(meta.timestamp.timestamp() * 1e9) if meta.timestamp else -1
                    queue = int(m.subject.rsplit(".", 1)[1])
                    out.append(Delivery(hdr.get(KEY_HEADER, ""), topic, queue, int(meta.sequence.stream), born,
                                        stored, len(m.data)))
                self._on_delivery(out)
                for m in msgs:
                    await m.ack()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the server restarting (kill -9): fetch again when it is back
                psub = None
                await asyncio.sleep(0.5)

    def stop(self) -> None:
        self._running = False
        tasks, self._tasks = list(self._tasks.values()), {}

        async def cancel_all() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if tasks:
            self._driver.call(cancel_all(), 10)

    def subscribe(self, topics: Sequence[str]) -> None:
        for t in topics:
            if t not in self._topics:
                self._topics.append(t)
                if self._running:
                    self._driver.call(self._spawn(t))

    def owned_queues(self) -> int:
        return sum(self._driver.queue_count(t) for t in self._topics)


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def shared_loop() -> asyncio.AbstractEventLoop:
    """The process's one asyncio loop for nats-py, running on a thread of its own. One, not one per driver:
    under locust (gevent) threads are greenlets of one OS thread, and asyncio allows one running loop per OS
    thread; a single loop greenlet cooperates with the others through gevent's patched selectors."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="nats-loop", daemon=True).start()
            _LOOP = loop
        return _LOOP


class NatsDriver(Driver):
    """NATS JetStream through nats-py, on the process's shared asyncio loop (callers block on ``call``; send
    callbacks come from the loop's thread)."""

    impl = "nats"
    ack_promise = AckPromise.PAGE_CACHE
    peer_client = "library"  # the send path's client (meta.json peer_client); harness.nats_lean: "lean"

    def __init__(self, url: str, *, send_timeout_s: float = 3.0) -> None:
        self.url = url
        self.send_timeout_s = send_timeout_s
        self.loop = shared_loop()
        self._started = False
        self._nc: Any = None
        self.js: Any = None
        self._rr = itertools.count()
        self._queues: dict[str, int] = {}
        self._consumers: list[_NatsConsumer] = []
        self.connection_errors = 0

    async def _on_error(self, exc: Exception) -> None:
        """A lost connection (the server killed) is reconnected by the client and shows in the send outcomes;
        nats-py's default callback would print each failed reconnect attempt."""
        self.connection_errors += 1

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = 30.0) -> T:
        if not self._started:
            self.start()  # connect on first use, as RocketMQDriver does
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def start(self) -> None:
        if self._started:
            return
        import nats

        self.loop = shared_loop()
        self._started = True

        async def connect() -> None:
            # Reconnect forever: the kill -9 fault restarts the server under a running workload.
            self._nc = await nats.connect(self.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2,
                                          connect_timeout=5, allow_reconnect=True, error_cb=self._on_error)
            self.js = self._nc.jetstream(timeout=self.send_timeout_s)

        try:
            self.call(connect())
        except Exception as exc:
            raise DriverError(f"cannot connect to {self.url}: {exc}") from exc

    def stop(self) -> None:
        for c in self._consumers:
            c.stop()
        self._consumers.clear()
        if not self._started:
            return
        if self._nc is not None:
            try:
                self.call(self._nc.close(), 10)
            except Exception:  # noqa: BLE001 - closing a connection to a server that may be gone
                pass
        self._nc = None
        self._started = False

    def create_topic(self, topic: str, queues: int) -> None:
        from nats.js.api import StorageType, StreamConfig

        cfg = StreamConfig(name=stream_name(topic), subjects=[f"{topic}.{i}" for i in range(queues)],
                           storage=StorageType.FILE)

        async def create() -> None:
            try:
                await self.js.add_stream(cfg)
            except Exception:  # noqa: BLE001 - it exists already: resize it
                await self.js.update_stream(cfg)

        try:
            self.call(create())
        except Exception as exc:
            raise DriverError(f"cannot create stream for {topic}: {exc}") from exc
        self._queues[topic] = queues

    def queue_count(self, topic: str) -> int:
        if topic in self._queues:
            return self._queues[topic]
        try:
            info = self.call(self.js.stream_info(stream_name(topic)))
        except Exception:  # noqa: BLE001 - no such stream
            return 0
        n = len(info.config.subjects or [])
        self._queues[topic] = n
        return n

    async def _publish(self, topic: str, key: str, body: bytes, queue: int) -> SendOutcome:
        import nats.errors
        from nats.js.errors import APIError

        headers = {KEY_HEADER: key, BORN_HEADER: str(time.time_ns())}
        try:
            ack = await self.js.publish(f"{topic}.{queue}", body, timeout=self.send_timeout_s, headers=headers)
        except nats.errors.NoRespondersError as exc:  # no stream took it: nothing stored
            return SendOutcome(Outcome.FAIL, 503, error=_err(exc))
        except APIError as exc:
            return SendOutcome(Outcome.FAIL, int(exc.code or -1), error=_err(exc))
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
                nats.errors.OutboundBufferLimitError) as exc:
            return SendOutcome(Outcome.FAIL, -1, error=_err(exc))  # refused before it was written
        except Exception as exc:  # noqa: BLE001 - a timeout, or anything after the write: maybe stored
            return SendOutcome(Outcome.UNKNOWN, -1, error=_err(exc))
        return SendOutcome(Outcome.OK, 0, queue, int(ack.seq) - 1)

    def _pick(self, topic: str, queue: int | None) -> int:
        return _queue_of(topic, queue, self._rr, self.queue_count(topic))

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        try:
            return self.call(self._publish(topic, key, body, self._pick(topic, queue)), self.send_timeout_s + 5)
        except Exception as exc:  # noqa: BLE001 - the loop did not answer in time
            return SendOutcome(Outcome.UNKNOWN, -1, error=_err(exc))

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        if not self._started:
            self.start()
        fut = asyncio.run_coroutine_threadsafe(self._publish(topic, key, body, self._pick(topic, queue)), self.loop)

        def done(f: Future[SendOutcome]) -> None:
            try:
                callback(f.result())
            except Exception as exc:  # noqa: BLE001 - the coroutine itself failed
                callback(SendOutcome(Outcome.UNKNOWN, -1, error=_err(exc)))

        fut.add_done_callback(done)

    def send_batch(self, topic: str, keys: Sequence[str], bodies: Sequence[bytes],
                   queue: int | None = None) -> SendOutcome:
        """JetStream has no batch publish: the messages are published pipelined; the batch's outcome is the
        worst of theirs (its offset the first one's, which JetStream does not make consecutive under load)."""
        q = self._pick(topic, queue)

        async def publish_all() -> list[SendOutcome]:
            return list(await asyncio.gather(*(self._publish(topic, k, b, q)
                                               for k, b in zip(keys, bodies, strict=True))))

        return worst(self.call(publish_all(), self.send_timeout_s + 5))

    def consumer(self, group: str, topics: Sequence[str], on_delivery: DeliveryCallback, *, name: str,
                 from_timestamp_ms: int | None = None, threads: int = 4, batch: int = 32) -> Consumer:
        c = _NatsConsumer(self, group, topics, on_delivery, from_timestamp_ms, batch)
        self._consumers.append(c)
        return c

    def backlog(self, group: str, topics: Sequence[str]) -> Backlog:
        per: dict[str, int] = {}
        for t in topics:
            try:
                info = self.call(self.js.consumer_info(stream_name(t), group))
                per[t] = int(info.num_pending) + int(info.num_ack_pending)
            except Exception as exc:
                raise DriverError(f"backlog of {group} on {t}: {exc}") from exc
        return Backlog(sum(per.values()), per)

    def broker_addrs(self) -> dict[str, str]:
        return {"nats": self.url.split("://", 1)[-1]}

    def runtime_info(self, addr: str) -> dict[str, str]:
        info = self._nc._server_info if self._nc is not None else {}  # the server's INFO line
        return {"brokerVersionDesc": f"nats-server {info.get('version', '?')}"}

    def broker_facts(self) -> dict[str, Any]:
        return {"broker": {"jetstream": "file"}, "broker_impl": self.runtime_info("")["brokerVersionDesc"],
                "brokers": self.broker_addrs(), "ack_promise": str(self.ack_promise),
                "peer_client": self.peer_client}


# ---- RabbitMQ ------------------------------------------------------------------------------------------


class _Pending:
    __slots__ = ("callback", "deadline", "key", "queue")

    def __init__(self, callback: SendCallback, queue: int, key: str, deadline: float) -> None:
        self.callback = callback
        self.queue = queue
        self.key = key
        self.deadline = deadline


class _Session:
    """One confirm-mode channel: its delivery tags count from 1, so its pending sends and its returned
    messages are its own — a confirm is never matched against another channel's tags."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.tag = 0
        self.pending: dict[int, _Pending] = {}
        self.returned: set[str] = set()  # message ids the broker returned (mandatory, unroutable)

    def fail_all(self, outcome: SendOutcome) -> None:
        pending, self.pending = self.pending, {}
        for p in pending.values():
            p.callback(outcome)


class Publisher(Protocol):
    """A RabbitMQ send path: pika's (``_RabbitPublisher``) or the lean one (``harness.amqp_lean``)."""

    def publish(self, routing_key: str, queue: int, key: str, body: bytes, callback: SendCallback) -> None: ...

    def close(self) -> None: ...


class _RabbitPublisher:
    """One pika SelectConnection with a confirm-mode channel on an I/O thread of its own; publishes are
    handed over with ``add_callback_threadsafe``. Messages are ``mandatory``: one no queue takes (a queue not
    available yet after a restart) comes back as basic.return before its ack and is a "fail", not an ack.
    A lost channel is reopened and a lost connection reconnected; what was pending on either is unknown."""

    def __init__(self, host: str, port: int, send_timeout_s: float) -> None:
        import pika

        self._pika = pika
        self._params = pika.ConnectionParameters(host, port, heartbeat=30, connection_attempts=1,
                                                 blocked_connection_timeout=send_timeout_s)
        self._send_timeout_s = send_timeout_s
        self._conn: Any = None
        self._session: _Session | None = None
        self._ioloop: Any = None
        self._ready = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="rabbitmq-publisher", daemon=True)

    def start(self, timeout_s: float = 15.0) -> None:
        from pika.adapters.select_connection import IOLoop

        self._ioloop = IOLoop()
        self._connect()
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise DriverError("rabbitmq: no confirm channel within the timeout")

    def _connect(self) -> None:
        if self._closing:
            return
        self._conn = self._pika.SelectConnection(self._params, on_open_callback=self._on_open,
                                                 on_open_error_callback=self._on_lost,
                                                 on_close_callback=self._on_lost, custom_ioloop=self._ioloop)

    def _run(self) -> None:
        self._ioloop.call_later(0.2, self._sweep)
        self._ioloop.start()

    def _on_open(self, conn: Any) -> None:
        if conn is self._conn:
            conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, channel: Any) -> None:
        session = _Session(channel)
        channel.confirm_delivery(lambda frame: self._on_confirm(session, frame))
        channel.add_on_return_callback(lambda _ch, _m, props, _b: session.returned.add(str(props.message_id)))
        channel.add_on_close_callback(lambda _ch, reason: self._on_channel_closed(session, reason))
        self._session = session
        self._ready.set()

    def _on_channel_closed(self, session: _Session, reason: Any) -> None:
        session.fail_all(SendOutcome(Outcome.UNKNOWN, -1, error=f"channel closed: {reason}"[:200]))
        if self._session is session:
            self._session = None
            self._ready.clear()
            conn = self._conn
            if not self._closing and conn is not None and conn.is_open:
                self._ioloop.call_later(0.2, lambda: conn.is_open and conn.channel(on_open_callback=self._on_channel))

    def _on_lost(self, conn: Any, reason: Any) -> None:
        session, self._session = self._session, None
        self._ready.clear()
        if session is not None:
            session.fail_all(SendOutcome(Outcome.UNKNOWN, -1, error=f"connection lost: {reason}"[:200]))
        if conn is self._conn and not self._closing:
            self._ioloop.call_later(0.3, self._connect)

    def _on_confirm(self, session: _Session, frame: Any) -> None:
        method = frame.method
        tag = int(method.delivery_tag)
        tags = [t for t in session.pending if t <= tag] if method.multiple else [tag]
        ok = method.NAME == "Basic.Ack"
        for t in sorted(tags):
            p = session.pending.pop(t, None)
            if p is None:
                continue
            if ok and p.key in session.returned:
                session.returned.discard(p.key)
                p.callback(SendOutcome(Outcome.FAIL, 312, p.queue, error="returned: NO_ROUTE"))
            elif ok:
                p.callback(SendOutcome(Outcome.OK, 0, p.queue, -1))
            else:
                p.callback(SendOutcome(Outcome.FAIL, -1, p.queue, error="basic.nack"))

    def _sweep(self) -> None:
        now = time.monotonic()
        session = self._session
        if session is not None:
            for t in [t for t, p in session.pending.items() if p.deadline < now]:
                session.pending.pop(t).callback(SendOutcome(Outcome.UNKNOWN, -1, error="confirm timeout"))
        if not self._closing:
            self._ioloop.call_later(0.2, self._sweep)

    def publish(self, routing_key: str, queue: int, key: str, body: bytes, callback: SendCallback) -> None:
        def on_loop() -> None:
            session = self._session
            if session is None or not session.channel.is_open:
                callback(SendOutcome(Outcome.FAIL, -1, error="not connected"))  # nothing written
                return
            props = self._pika.BasicProperties(delivery_mode=2, message_id=key,
                                               headers={BORN_HEADER: time.time_ns()})
            try:
                session.channel.basic_publish("", routing_key, body, props, mandatory=True)
            except Exception as exc:  # noqa: BLE001 - the channel closed under us: nothing written
                callback(SendOutcome(Outcome.FAIL, -1, error=_err(exc)))
                return
            session.tag += 1
            session.pending[session.tag] = _Pending(callback, queue, key, time.monotonic() + self._send_timeout_s)

        self._ioloop.add_callback_threadsafe(on_loop)

    def close(self) -> None:
        def on_loop() -> None:
            self._closing = True
            if self._conn is not None and self._conn.is_open:
                self._conn.close()
            if self._session is not None:
                self._session.fail_all(SendOutcome(Outcome.UNKNOWN, -1, error="driver stopped"))
            self._ioloop.call_later(0.3, self._ioloop.stop)

        if self._thread.is_alive():
            self._ioloop.add_callback_threadsafe(on_loop)
            self._thread.join(10)
        if self._ioloop is not None and not self._thread.is_alive():
            self._ioloop.close()  # its wake-up socket pair


class _RabbitConsumer(_AckingConsumer):
    """Competing consumers on a topic's queues: a BlockingConnection on a thread of its own, manual acks after
    the delivery callback, reconnecting after a lost connection."""

    def __init__(self, driver: RabbitMQDriver, topics: Sequence[str], on_delivery: DeliveryCallback,
                 prefetch: int) -> None:
        self._driver = driver
        self._topics = list(topics)
        self._on_delivery = on_delivery
        self._prefetch = prefetch
        self._running = False
        self._paused = False
        self._resubscribe = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="rabbitmq-consumer", daemon=True)
        self._thread.start()

    def _deliver(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        rk = str(method.routing_key)
        topic, _, q = rk.rpartition(".")
        born = int((props.headers or {}).get(BORN_HEADER, -1))
        store = int(props.timestamp) * 1_000_000_000 if props.timestamp else -1
        self._on_delivery([Delivery(str(props.message_id or ""), topic, int(q) if q.isdigit() else -1, -1, born,
                                    store, len(body))])
        ch.basic_ack(method.delivery_tag)

    def _run(self) -> None:
        import pika

        while self._running:
            conn = None
            try:
                conn = pika.BlockingConnection(self._driver.params())
                ch = conn.channel()
                ch.basic_qos(prefetch_count=self._prefetch)
                # The broker cancels a consumer whose queue went away or moved (a quorum queue restarting):
                # consume again, else that queue would silently stop being read.
                ch.add_on_cancel_callback(lambda _frame: self._resubscribe.set())
                tags: list[str] = []
                while self._running:
                    if self._paused and tags:
                        for tag in tags:
                            ch.basic_cancel(tag)
                        tags = []
                    if not self._paused and (not tags or self._resubscribe.is_set()):
                        self._resubscribe.clear()
                        for tag in tags:
                            ch.basic_cancel(tag)
                        tags = [ch.basic_consume(f"{t}.{i}", self._deliver)
                                for t in self._topics for i in range(self._driver.queue_count(t))]
                    conn.process_data_events(time_limit=0.2)
            except Exception:  # noqa: BLE001 - the server went away (kill -9): connect again
                time.sleep(0.3)
            finally:
                if conn is not None and conn.is_open:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001 - already broken
                        pass

    def stop(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(10)

    def subscribe(self, topics: Sequence[str]) -> None:
        new = [t for t in topics if t not in self._topics]
        if new:
            self._topics.extend(new)
            self._resubscribe.set()

    def owned_queues(self) -> int:
        return sum(self._driver.queue_count(t) for t in self._topics)


class RabbitMQDriver(Driver):
    """RabbitMQ through pika: durable queues of ``queue_type`` (classic or quorum), persistent messages,
    publisher confirms."""

    ack_promise = AckPromise.FSYNC
    peer_client = "library"  # the send path's client (meta.json peer_client); harness.amqp_lean: "lean"

    def __init__(self, url: str, *, queue_type: QueueType = "quorum", send_timeout_s: float = 3.0) -> None:
        host_port = url.split("://", 1)[-1]
        host, _, port = host_port.rpartition(":")
        self.host, self.port = host, int(port)
        self.queue_type = queue_type
        self.impl = f"rabbitmq-{queue_type}"
        self.send_timeout_s = send_timeout_s
        self._publisher: Publisher | None = None
        self._rr = itertools.count()
        self._queues: dict[str, int] = {}
        self._consumers: list[_RabbitConsumer] = []
        self._version = "?"

    def params(self) -> Any:
        import pika

        return pika.ConnectionParameters(self.host, self.port, heartbeat=30, connection_attempts=1)

    def _admin(self) -> Any:
        import pika

        try:
            return pika.BlockingConnection(self.params())
        except Exception as exc:
            raise DriverError(f"cannot connect to rabbitmq at {self.host}:{self.port}: {exc}") from exc

    def start(self) -> None:
        if self._publisher is None:
            self._publisher = self._make_publisher()

    def _make_publisher(self) -> Publisher:
        """The send path: pika's (the lean driver, harness.amqp_lean, has its own)."""
        conn = self._admin()
        self._version = str(conn._impl.server_properties.get("version", b"?"), "ascii", "replace") \
            if isinstance(conn._impl.server_properties.get("version"), bytes) \
            else str(conn._impl.server_properties.get("version", "?"))
        conn.close()
        publisher = _RabbitPublisher(self.host, self.port, self.send_timeout_s)
        publisher.start()
        return publisher

    def stop(self) -> None:
        for c in self._consumers:
            c.stop()
        self._consumers.clear()
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def create_topic(self, topic: str, queues: int) -> None:
        conn = self._admin()
        try:
            ch = conn.channel()
            for i in range(queues):
                ch.queue_declare(f"{topic}.{i}", durable=True, arguments={"x-queue-type": self.queue_type})
        except Exception as exc:
            raise DriverError(f"cannot declare the queues of {topic}: {exc}") from exc
        finally:
            if conn.is_open:
                conn.close()
        self._queues[topic] = queues

    def queue_count(self, topic: str) -> int:
        """Known from create_topic, else probed with passive declares (a missing queue closes the channel)."""
        if topic in self._queues:
            return self._queues[topic]
        n = 0
        try:
            conn = self._admin()
        except DriverError:
            return 0
        try:
            while n < 1024:
                ch = conn.channel()
                try:
                    ch.queue_declare(f"{topic}.{n}", passive=True)
                except Exception:  # noqa: BLE001 - 404: the last queue was n - 1
                    break
                ch.close()
                n += 1
        finally:
            if conn.is_open:
                conn.close()
        if n:
            self._queues[topic] = n
        return n

    def _running(self) -> Publisher:
        if self._publisher is None:
            self.start()
        assert self._publisher is not None
        return self._publisher

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        q = _queue_of(topic, queue, self._rr, self.queue_count(topic))
        self._running().publish(f"{topic}.{q}", q, key, body, callback)

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        done = threading.Event()
        box: list[SendOutcome] = []

        def cb(o: SendOutcome) -> None:
            box.append(o)
            done.set()

        self.send_async(topic, key, body, cb, queue)
        if not done.wait(self.send_timeout_s + 5):
            return SendOutcome(Outcome.UNKNOWN, -1, error="no confirm")
        return box[0]

    def send_batch(self, topic: str, keys: Sequence[str], bodies: Sequence[bytes],
                   queue: int | None = None) -> SendOutcome:
        """No batch in AMQP 0-9-1: the messages are published pipelined to one queue; the worst outcome."""
        q = _queue_of(topic, queue, self._rr, self.queue_count(topic))
        gather = Gather(len(keys))
        for k, b in zip(keys, bodies, strict=True):
            self._running().publish(f"{topic}.{q}", q, k, b, gather.add)
        return gather.worst(self.send_timeout_s + 5, "no confirm")

    def consumer(self, group: str, topics: Sequence[str], on_delivery: DeliveryCallback, *, name: str,
                 from_timestamp_ms: int | None = None, threads: int = 4, batch: int = 32) -> Consumer:
        """``group`` is implicit (a queue's consumers compete); ``from_timestamp_ms`` has no meaning for a
        queue (it holds what is not yet consumed)."""
        c = _RabbitConsumer(self, topics, on_delivery, prefetch=max(1, threads * batch))
        self._consumers.append(c)
        return c

    def backlog(self, group: str, topics: Sequence[str]) -> Backlog:
        """Messages ready per queue; a queue that no longer exists (passive declare: 404, which closes the
        channel) is -1 in ``per_queue`` and counts nothing, so the others are still counted (chaos.peer_faults:
        a durable queue gone after a disk fill)."""
        import pika.exceptions

        per: dict[str, int] = {}
        conn = self._admin()
        try:
            ch = conn.channel()
            for t in topics:
                for i in range(self.queue_count(t)):
                    try:
                        per[f"{t}/{i}"] = int(ch.queue_declare(f"{t}.{i}", passive=True).method.message_count)
                    except pika.exceptions.ChannelClosedByBroker as exc:
                        if exc.reply_code != 404:
                            raise
                        per[f"{t}/{i}"] = -1
                        ch = conn.channel()
        except Exception as exc:
            raise DriverError(f"backlog on {topics}: {exc}") from exc
        finally:
            if conn.is_open:
                conn.close()
        return Backlog(sum(n for n in per.values() if n > 0), per)

    def broker_addrs(self) -> dict[str, str]:
        return {"rabbitmq": f"{self.host}:{self.port}"}

    def runtime_info(self, addr: str) -> dict[str, str]:
        return {"brokerVersionDesc": f"rabbitmq-server {self._version}"}

    def broker_facts(self) -> dict[str, Any]:
        return {"broker": {"queueType": self.queue_type, "deliveryMode": 2, "confirms": True},
                "broker_impl": self.runtime_info("")["brokerVersionDesc"], "brokers": self.broker_addrs(),
                "ack_promise": str(self.ack_promise), "peer_client": self.peer_client}
