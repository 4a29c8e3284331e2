"""The driver under the scenarios: what a workload needs of a broker, and its RocketMQ implementation.

Scenarios speak only to ``Driver`` (send, consume, pause/resume, backlog, topics, broker facts), so other
brokers (NATS JetStream, RabbitMQ; docs/design.md) can be driven by the same workloads later. A send's outcome
is classified by ``harness.send_outcome``, the rule the chaos load follows too: "ok" = acknowledged, "fail" =
definitely not stored, "unknown" = the request may have been acted on (a timeout or a lost connection after it
was written).

``RocketMQDriver`` drives the project's client (``reference_broker.client``): one ``Producer`` per driver
(every User of a process shares it, as RocketMQ shares one MQClientInstance per client id), push consumers
(long polling) for consumption, and the admin protocol over persistent connections for backlog queries.
Each message's identity is its KEYS property (indexed by the broker, so ``admin queryMsgByKey`` finds a lost
message's neighbours).
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.send_outcome import SendOutcome as SendOutcome
from harness.send_outcome import outcome_of, outcome_of_error, outcome_of_result
from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageQueue,
    MQClientError,
    Producer,
    PushConsumer,
    SendResult,
)
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, fastjson_loads, json_loads
from reference_broker.remoting.errors import RemotingError
from reference_broker.tools import admin

# How long after a broker's boot GET_BROKER_RUNTIME_INFO may still fail on RocketMQ 4.9.8 (runtime_info).
RUNTIME_INFO_BOOT_S = 5.0


class DriverError(RuntimeError):
    """A setup or admin operation failed (topic creation, a backlog query): not a per-message outcome."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer; times in wall-clock ns (the broker's ms times x 1e6)."""

    key: str
    topic: str
    queue_id: int
    queue_offset: int
    born_ns: int
    store_ns: int
    nbytes: int


@dataclass(frozen=True)
class Backlog:
    """Messages stored but not yet consumed by a group, as the broker reports it (max offset - committed
    consumer offset per queue; a queue without a committed offset counts from 0)."""

    total: int
    per_queue: dict[str, int] = field(default_factory=dict)  # "topic/queueId" -> messages


SendCallback = Callable[[SendOutcome], None]
DeliveryCallback = Callable[[list[Delivery]], None]


class Consumer(abc.ABC):
    """One consumer instance of a group; ``on_delivery`` is called from the client's consume threads."""

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def pause(self) -> None: ...

    @abc.abstractmethod
    def resume(self) -> None: ...

    @abc.abstractmethod
    def commit(self) -> None:
        """Report the consumed offsets to the broker now (else it learns them with the next pull or persist)."""

    @abc.abstractmethod
    def subscribe(self, topics: Sequence[str]) -> None:
        """Also consume ``topics`` (after start too)."""

    @abc.abstractmethod
    def owned_queues(self) -> int:
        """Queues this instance consumes now (after rebalancing)."""


class Driver(abc.ABC):
    """What a workload needs of a broker. ``send``/``send_batch`` block; ``send_async`` calls back from a
    client thread. Sends never raise for a per-message failure: it is in the outcome."""

    impl: str = "abstract"

    @abc.abstractmethod
    def start(self) -> None:
        """Connect the producer side (consumers start on their own)."""

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def create_topic(self, topic: str, queues: int) -> None:
        """Create (or resize) ``topic`` with ``queues`` queues per broker and wait until it is routable."""

    @abc.abstractmethod
    def queue_count(self, topic: str) -> int:
        """Queues of an existing topic, over all brokers (0 when it has no route)."""

    @abc.abstractmethod
    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome: ...

    @abc.abstractmethod
    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        ...

    @abc.abstractmethod
    def send_batch(self, topic: str, keys: Sequence[str], bodies: Sequence[bytes],
                   queue: int | None = None) -> SendOutcome: ...

    @abc.abstractmethod
    def consumer(self, group: str, topics: Sequence[str], on_delivery: DeliveryCallback, *, name: str,
                 from_timestamp_ms: int | None = None, threads: int = 4, batch: int = 32) -> Consumer:
        """A consumer of ``topics`` in ``group``; from the first offset unless ``from_timestamp_ms``."""

    @abc.abstractmethod
    def backlog(self, group: str, topics: Sequence[str]) -> Backlog: ...

    @abc.abstractmethod
    def broker_addrs(self) -> dict[str, str]:
        """Broker name -> address of every broker serving the cluster."""

    @abc.abstractmethod
    def runtime_info(self, addr: str) -> dict[str, str]:
        """A broker's report on itself, under RocketMQ's GET_BROKER_RUNTIME_INFO key names (commitLogMaxOffset,
        commitLogFlushedOffset, dispatchBehindBytes, commitLogDiskRatio, ...); another broker maps onto them."""

    @abc.abstractmethod
    def broker_facts(self) -> dict[str, Any]:
        """``{"broker": {...config...}, "broker_impl": str | None, "brokers": {name: addr}}`` for meta.json."""


# ---- delivery and offset parsing (pure) ----------------------------------------------------------------


# The send time in epoch ns, a user property the harness's RocketMQ producers set on each message: RocketMQ's
# bornTimestamp has millisecond resolution, so send-to-consume latency read from it carries up to 1 ms of
# truncation (0.5 ms on average), where the peers' drivers carry nanoseconds in a header.
BORN_NS_PROPERTY = "LAB_BORN_NS"


def born_message(topic: str, body: bytes, key: str) -> Message:
    """A message for the harness's load: its key (the checker's identity) and its send time in ns."""
    msg = Message(topic, body, keys=key)
    msg.put_user_property(BORN_NS_PROPERTY, str(time.time_ns()))
    return msg


def delivery_of(msg: MessageExt) -> Delivery:
    born = msg.properties.get(BORN_NS_PROPERTY)
    born_ns = int(born) if born and born.isdigit() else msg.born_timestamp * 1_000_000
    return Delivery(msg.keys, msg.topic, msg.queue_id, msg.queue_offset, born_ns, msg.store_timestamp * 1_000_000,
                    len(msg.body))


def parse_offset_table(body: bytes, group: str) -> dict[tuple[str, int], int]:
    """GET_ALL_CONSUMER_OFFSET's body (ConsumerOffsetManager's JSON: ``{"offsetTable": {"topic@group":
    {queueId: offset}}}``) reduced to one group: (topic, queueId) -> committed offset. RocketMQ 4.9.8's fastjson
    writes the queue ids as bare numbers (``{0:5}``, not JSON): read as fastjson writes them."""
    table = fastjson_loads(body).get("offsetTable", {}) if body else {}
    out: dict[tuple[str, int], int] = {}
    suffix = "@" + group
    for topic_at_group, queues in table.items():
        if not str(topic_at_group).endswith(suffix):
            continue
        topic = str(topic_at_group)[: -len(suffix)]
        for qid, off in queues.items():
            out[(topic, int(qid))] = int(off)
    return out


# ---- RocketMQ ------------------------------------------------------------------------------------------


class _RocketMQConsumer(Consumer):
    def __init__(self, consumer: PushConsumer, topics: Sequence[str]) -> None:
        self._consumer = consumer
        self._topics = list(topics)
        self._started = False

    def start(self) -> None:
        for topic in self._topics:
            self._consumer.subscribe(topic, "*")
        self._consumer.start()
        self._started = True

    def stop(self) -> None:
        if self._started:
            self._started = False
            self._consumer.shutdown()

    def pause(self) -> None:
        self._consumer.suspend()

    def resume(self) -> None:
        self._consumer.resume()

    def commit(self) -> None:
        if self._started:
            self._consumer.persist_consumer_offset()

    def subscribe(self, topics: Sequence[str]) -> None:
        for topic in topics:
            if topic not in self._topics:
                self._topics.append(topic)
                if self._started:
                    self._consumer.subscribe(topic, "*")

    def owned_queues(self) -> int:
        return sum(1 for mq in self._consumer.process_queues() if mq.topic in self._topics)


class _AdminConnections:
    """One persistent admin connection per broker address (tools.admin opens one per call, too slow for
    per-second queries over thousands of queues)."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self._timeout_s = timeout_s
        self._clients: dict[str, RemotingClient] = {}
        self._lock = threading.Lock()

    def get(self, addr: str) -> RemotingClient:
        with self._lock:
            client = self._clients.get(addr)
            if client is None:
                client = self._clients[addr] = RemotingClient.from_addr(addr, self._timeout_s)
            return client

    def drop(self, addr: str) -> None:
        with self._lock:
            client = self._clients.pop(addr, None)
        if client is not None:
            client.close()

    def invoke(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return self.get(addr).invoke(cmd)
        except RemotingError:
            self.drop(addr)  # a fresh connection next time
            raise

    def invoke_many(self, addr: str, cmds: list[RemotingCommand], timeout_s: float = 30.0) -> list[RemotingCommand]:
        """Pipelined: every request written before the first answer is awaited."""
        answers: list[RemotingCommand | None] = [None] * len(cmds)
        errors: list[RemotingError] = []
        done = threading.Semaphore(0)

        def callback(i: int) -> Callable[[RemotingCommand | None, RemotingError | None], None]:
            def on_answer(resp: RemotingCommand | None, err: RemotingError | None) -> None:
                answers[i] = resp
                if err is not None:
                    errors.append(err)
                done.release()
            return on_answer

        client = self.get(addr)
        for i, cmd in enumerate(cmds):
            client.invoke_async(cmd, callback(i), timeout_s)
        deadline = time.monotonic() + timeout_s + 1
        for _ in cmds:
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                self.drop(addr)
                raise DriverError(f"{addr}: no answer to {len(cmds)} pipelined admin requests in {timeout_s} s")
        if errors:
            self.drop(addr)
            raise DriverError(f"{addr}: {errors[0]}")
        return [a for a in answers if a is not None]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()


class RocketMQDriver(Driver):
    """The RocketMQ 4.x protocol through ``reference_broker.client``; ``namesrv`` is "host:port[;host:port]".

    ``instance`` names this process's client (RocketMQ's instanceName): it must differ between processes on
    one host and between drivers in one process."""

    impl = "rocketmq"
    rocketmq_client = "library"  # the send path (harness.drivers.ROCKETMQ_CLIENTS); harness.rocketmq_lean: lean

    def __init__(self, namesrv: str, *, instance: str, producer_group: str = "lab_producer",
                 send_timeout_s: float = 3.0, retries: int = 2, rebalance_interval_s: float = 5.0,
                 poll_name_server_interval_s: float = 5.0) -> None:
        self.namesrv = namesrv
        self.instance = instance
        self.producer_group = producer_group
        self.send_timeout_s = send_timeout_s
        self.retries = retries
        self._config_args: dict[str, Any] = {"rebalance_interval_s": rebalance_interval_s,
                                             "poll_name_server_interval_s": poll_name_server_interval_s}
        self._producer: Producer | None = None
        self._queues: dict[str, list[MessageQueue]] = {}
        self._admin = _AdminConnections()
        self._consumers: list[_RocketMQConsumer] = []
        self._lock = threading.Lock()

    def _client_config(self, suffix: str = "") -> ClientConfig:
        return ClientConfig(self.namesrv, self.instance + suffix, **self._config_args)

    # ---- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._producer is None:
                producer = Producer(self.producer_group, "", client_config=self._client_config(),
                                    send_msg_timeout_s=self.send_timeout_s, retry_times_when_send_failed=self.retries,
                                    retry_times_when_send_async_failed=self.retries)
                producer.start()
                self._producer = producer

    def stop(self) -> None:
        for c in list(self._consumers):
            c.stop()
        self._consumers.clear()
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.shutdown()
        self._admin.close()

    def _running(self) -> Producer:
        producer = self._producer
        if producer is None:
            self.start()
            producer = self._producer
            assert producer is not None
        return producer

    # ---- topics ---------------------------------------------------------------------------------------

    def create_topic(self, topic: str, queues: int, timeout_s: float = 30.0) -> None:
        try:
            brokers = admin.update_topic(self.namesrv, topic, queues, queues)
        except (admin.AdminError, RemotingError, OSError) as exc:
            raise DriverError(f"cannot create topic {topic} with {queues} queues: {exc}") from exc
        deadline = time.monotonic() + timeout_s
        want = queues * len(brokers)
        while True:
            try:
                if len(admin.read_queues(self.namesrv, topic)) >= want:
                    return
            except (admin.AdminError, RemotingError, OSError):
                pass  # the broker has not registered it with the name server yet
            if time.monotonic() > deadline:
                raise DriverError(f"topic {topic} not routable with {want} queues after {timeout_s} s")
            time.sleep(0.05)

    def queue_count(self, topic: str) -> int:
        try:
            return len(admin.read_queues(self.namesrv, topic))
        except (admin.AdminError, RemotingError, OSError):
            return 0

    def _queue(self, topic: str, queue: int) -> MessageQueue:
        mqs = self._queues.get(topic)
        if mqs is None:
            mqs = self._queues[topic] = sorted(self._running().fetch_publish_message_queues(topic))
        return mqs[queue % len(mqs)]

    # ---- sending --------------------------------------------------------------------------------------

    def send(self, topic: str, key: str, body: bytes, queue: int | None = None) -> SendOutcome:
        producer = self._running()
        try:
            mq = None if queue is None else self._queue(topic, queue)
            return outcome_of_result(producer.send(born_message(topic, body, key), mq))
        except Exception as exc:  # noqa: BLE001 - the send's outcome; GreenletExit & co. propagate (abandoned send)
            return outcome_of_error(exc)

    def send_async(self, topic: str, key: str, body: bytes, callback: SendCallback, queue: int | None = None) -> None:
        producer = self._running()

        def done(result: SendResult | None, error: MQClientError | None) -> None:
            callback(outcome_of(result, error))

        try:
            mq = None if queue is None else self._queue(topic, queue)
            producer.send_async(born_message(topic, body, key), done, mq)
        except Exception as exc:  # noqa: BLE001 - the send's outcome: refused before anything was written
            callback(outcome_of_error(exc))

    def send_batch(self, topic: str, keys: Sequence[str], bodies: Sequence[bytes],
                   queue: int | None = None) -> SendOutcome:
        producer = self._running()
        try:
            mq = None if queue is None else self._queue(topic, queue)
            msgs = [born_message(topic, body, key) for key, body in zip(keys, bodies, strict=True)]
            return outcome_of_result(producer.send_batch(msgs, mq))
        except Exception as exc:  # noqa: BLE001 - the send's outcome, whatever the client raised
            return outcome_of_error(exc)

    # ---- consuming ------------------------------------------------------------------------------------

    def consumer(self, group: str, topics: Sequence[str], on_delivery: DeliveryCallback, *, name: str,
                 from_timestamp_ms: int | None = None, threads: int = 4, batch: int = 32) -> Consumer:
        def listener(msgs: list[MessageExt], _ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
            on_delivery([delivery_of(m) for m in msgs])
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        where = (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if from_timestamp_ms is None
                 else ConsumeFromWhere.CONSUME_FROM_TIMESTAMP)
        # Its own client instance: a consumer's shutdown then never takes the shared producer's connection down.
        push = PushConsumer(group, "", client_config=self._client_config(f"-{name}"), consume_from_where=where,
                            consume_timestamp_ms=from_timestamp_ms, consume_thread_min=threads,
                            consume_thread_max=threads, pull_batch_size=batch,
                            consume_message_batch_max_size=batch)
        push.register_message_listener(listener)
        c = _RocketMQConsumer(push, topics)
        self._consumers.append(c)
        return c

    # ---- broker-side views ----------------------------------------------------------------------------

    def backlog(self, group: str, topics: Sequence[str]) -> Backlog:
        """Max offset minus the group's committed offset per queue: one offset-table request per broker and the
        max-offset requests pipelined on one connection (the reference broker has no GET_CONSUME_STATS)."""
        per_queue: dict[str, int] = {}
        try:
            by_addr: dict[str, list[tuple[str, int]]] = {}
            for topic in topics:
                for ref in admin.read_queues(self.namesrv, topic):
                    by_addr.setdefault(ref.broker_addr, []).append((topic, ref.queue_id))
            for addr, queues in by_addr.items():
                committed = parse_offset_table(
                    self._admin.invoke(addr, create_request(RequestCode.GET_ALL_CONSUMER_OFFSET, {})).body, group)
                answers = self._admin.invoke_many(addr, [
                    create_request(RequestCode.GET_MAX_OFFSET, {"topic": t, "queueId": str(q)}) for t, q in queues])
                for (t, q), resp in zip(queues, answers, strict=True):
                    max_off = int(resp.ext_fields.get("offset") or 0) if resp.code == ResponseCode.SUCCESS else 0
                    per_queue[f"{t}/{q}"] = max(0, max_off - max(committed.get((t, q), 0), 0))
        except (admin.AdminError, RemotingError, OSError, ValueError) as exc:
            raise DriverError(f"backlog of {group}: {exc}") from exc
        return Backlog(sum(per_queue.values()), per_queue)

    def broker_addrs(self) -> dict[str, str]:
        """brokerName -> master address."""
        try:
            return admin.master_addrs(self.namesrv)
        except (admin.AdminError, RemotingError, OSError) as exc:
            raise DriverError(f"cluster info from {self.namesrv}: {exc}") from exc

    def runtime_info(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table, over the persistent admin connection.

        RocketMQ 4.9.8 answers SYSTEM_ERROR (``NoSuchElementException`` from ``LinkedList.getLast``) until its
        StoreStatsService has taken its first sample, about a second after boot: that answer is asked again,
        for up to RUNTIME_INFO_BOOT_S."""
        deadline = time.monotonic() + RUNTIME_INFO_BOOT_S
        while True:
            try:
                resp = self._admin.invoke(addr, create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
            except RemotingError as exc:
                raise DriverError(f"{addr}: runtime info: {exc}") from exc
            if not (resp.code == ResponseCode.SYSTEM_ERROR and "NoSuchElementException" in (resp.remark or "")
                    and time.monotonic() < deadline):
                break
            time.sleep(0.2)
        if resp.code != ResponseCode.SUCCESS:
            raise DriverError(f"{addr}: runtime info: code {resp.code} {resp.remark}")
        table: dict[str, str] = json_loads(resp.body).get("table", {})
        return table

    def broker_facts(self) -> dict[str, Any]:
        addrs = self.broker_addrs()
        facts: dict[str, Any] = {"broker": {}, "broker_impl": None, "brokers": dict(sorted(addrs.items())),
                                 "rocketmq_client": self.rocketmq_client}
        for _name, addr in sorted(addrs.items()):
            info = self.runtime_info(addr)
            for key in ("flushDiskType", "brokerRole"):  # the reference broker's; RocketMQ's table has neither
                if info.get(key) is not None:
                    facts["broker"].setdefault(key, info[key])
            facts["broker_impl"] = facts["broker_impl"] or info.get("brokerVersionDesc")
        return facts
