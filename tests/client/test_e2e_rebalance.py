"""Consumers joining and leaving a group: queues are reassigned, none is consumed by two consumers at once
(orderly consumers hold broker locks), none is left without a consumer, and no message is lost."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from reference_broker.client.message import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageQueue,
)
from reference_broker.client.producer import Producer
from reference_broker.client.push_consumer import PushConsumer
from tests.client.helpers import create_topic, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

QUEUES = 8


class Log:
    """Every listener call: (consumer name, queue id, start, end, bodies)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, float, float, list[bytes]]] = []
        self.lock = threading.Lock()

    def listener(self, name: str, orderly: bool):
        def listen(msgs, context):
            start = time.monotonic()
            time.sleep(0.002)
            end = time.monotonic()
            with self.lock:
                self.calls.append((name, context.message_queue.queue_id, start, end, [m.body for m in msgs]))
            return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        return listen

    def bodies(self) -> set[bytes]:
        with self.lock:
            return {b for call in self.calls for b in call[4]}


class Feeder:
    """Sends a message every few milliseconds until stopped."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.wait(0.005):
            body = f"m{i}".encode()
            self.producer.send(Message(self.topic, body))
            self.sent.append(body)
            i += 1

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def owned(c: PushConsumer, topic: str) -> set[MessageQueue]:
    return {mq for mq, pq in c.process_queues().items() if mq.topic == topic and not pq.dropped}


def settled(consumers: list[PushConsumer], topic: str) -> bool:
    """Each queue held by exactly one consumer, shares differing by at most one (AVG allocation)."""
    shares = [owned(c, topic) for c in consumers]
    every = [mq for share in shares for mq in share]
    sizes = [len(s) for s in shares]
    return len(every) == QUEUES and len(set(every)) == QUEUES and max(sizes) - min(sizes) <= 1


def start_consumer(cfg, name: str, group: str, topic: str, log: Log, orderly: bool) -> PushConsumer:
    c = PushConsumer(group, "", client_config=cfg(name), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     await_termination_s_when_shutdown=5.0)
    c.subscribe(topic, "*")
    if orderly:
        c.register_orderly_listener(log.listener(name, True))
    else:
        c.register_message_listener(log.listener(name, False))
    c.start()
    c.rebalance.unlock_delay_s = 0.5  # RocketMQ waits 20 s before unlocking a queue with buffered messages
    return c


def run_join_and_leave(cfg, topo, topic: str, group: str, orderly: bool) -> Log:
    create_topic(topo, topic, QUEUES)
    log = Log()
    with Producer(f"PG_{group}", "", client_config=cfg()) as producer, Feeder(producer, topic) as feeder:
        a = start_consumer(cfg, f"{group}-a", group, topic, log, orderly)
        consumers = [a]
        try:
            wait_for(lambda: settled(consumers, topic), 30, "a alone holds every queue")
            b = start_consumer(cfg, f"{group}-b", group, topic, log, orderly)
            consumers.append(b)
            wait_for(lambda: settled(consumers, topic), 60, "a and b share the queues")
            c = start_consumer(cfg, f"{group}-c", group, topic, log, orderly)
            consumers.append(c)
            wait_for(lambda: settled(consumers, topic), 60, "a, b and c share the queues")
            b.shutdown()
            consumers.remove(b)
            wait_for(lambda: settled(consumers, topic), 60, "a and c take over b's queues")
            feeder.stop.set()
            feeder.thread.join(10)
            wait_for(lambda: set(feeder.sent) <= log.bodies(), 60, "every message consumed")
        finally:
            for consumer in consumers:
                consumer.shutdown()
    return log


def test_orderly_consumers_never_share_a_queue_while_joining_and_leaving(cfg, topo) -> None:
    log = run_join_and_leave(cfg, topo, "E2ERebalOrder", "CG_rebal_order", orderly=True)
    by_queue: dict[int, list[tuple[float, float, str]]] = {}
    for name, qid, start, end, _ in log.calls:
        by_queue.setdefault(qid, []).append((start, end, name))
    handovers = 0
    for qid, calls in by_queue.items():
        calls.sort()
        for (_s1, e1, n1), (s2, _e2, n2) in itertools.pairwise(calls):
            assert s2 >= e1, f"queue {qid}: {n1} and {n2} consumed it at the same time"
            handovers += n1 != n2
    assert handovers >= 3  # queues did move between consumers
    assert {name for name, *_ in log.calls} == {"CG_rebal_order-a", "CG_rebal_order-b", "CG_rebal_order-c"}


def test_concurrent_consumers_rebalance_without_orphans(cfg, topo) -> None:
    log = run_join_and_leave(cfg, topo, "E2ERebalConc", "CG_rebal_conc", orderly=False)
    assert {name for name, *_ in log.calls} == {"CG_rebal_conc-a", "CG_rebal_conc-b", "CG_rebal_conc-c"}
