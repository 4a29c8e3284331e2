"""Push-consumer flow control against a real broker: with a backlog and a listener that does not finish, pulling
stops once a queue buffers more than pull_threshold_for_queue messages, pull_threshold_size_for_queue_mib
MiB, or (consuming concurrently) spans more than consume_concurrently_max_span offsets; the overshoot is at most
the one pull that was still allowed (pull_batch_size, 32). Releasing the listener resumes consumption."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from reference_broker.client.message import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    SendStatus,
)
from reference_broker.client.process_queue import ProcessQueue
from reference_broker.client.producer import Producer
from reference_broker.client.push_consumer import PushConsumer
from tests.client.helpers import create_topic, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

PULL_BATCH = 32  # pull_batch_size default
# Flow control retries a pull every 50 ms: over this window an unthrottled consumer would pull many times.
STALL_WINDOW_S = 0.5


class Gate:
    """A concurrent listener that records every body and, until ``release``, blocks on those ``holds`` picks."""

    def __init__(self, holds: Callable[[bytes], bool]) -> None:
        self.holds = holds
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.done: list[bytes] = []

    def __call__(self, msgs, context):
        if any(self.holds(m.body) for m in msgs):
            self.released.wait(30)
        with self.lock:
            self.done.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def release(self) -> None:
        self.released.set()

    def count(self) -> int:
        with self.lock:
            return len(self.done)


class Peak:
    """The largest count, size (bytes) and offset span any ProcessQueue held, taken right after each pull's
    messages went in (when the buffer is largest)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = self.size = self.span = 0
        real = ProcessQueue.put_messages

        def put_messages(pq: ProcessQueue, msgs):
            dispatch = real(pq, msgs)
            self.count = max(self.count, pq.msg_count)
            self.size = max(self.size, pq.msg_size)
            self.span = max(self.span, pq.max_span())
            return dispatch

        monkeypatch.setattr(ProcessQueue, "put_messages", put_messages)


def send_backlog(cfg, topo, topic: str, n: int, size: int) -> list[bytes]:
    """``n`` bodies of ``size`` bytes ("m00000...") into the topic's one queue, in batches of at most 1 MiB."""
    create_topic(topo, topic, 1)
    bodies = [f"m{i:05d}".encode().ljust(size, b".") for i in range(n)]
    per_batch = max(1, min(100, (1 << 20) // size))
    mq = MessageQueue(topic, topo.brokers[0].name, 0)
    with Producer(f"PG_{topic}", "", client_config=cfg()) as producer:
        for i in range(0, n, per_batch):
            result = producer.send_batch([Message(topic, b) for b in bodies[i:i + per_batch]], mq)
            assert result.send_status is SendStatus.SEND_OK
    return bodies


def the_queue(c: PushConsumer, topic: str) -> ProcessQueue | None:
    return next((pq for mq, pq in c.process_queues().items() if mq.topic == topic and not pq.dropped), None)


def consume_held_backlog(cfg, topo, topic: str, gate: Gate, n: int, size: int,
                         limited: Callable[[ProcessQueue], bool], **settings: Any) -> None:
    """Consume a backlog of ``n`` messages with ``gate`` holding until the buffer is over its limit (``limited``)
    and no pull has added to it for STALL_WINDOW_S; then release the gate and wait for every message."""
    bodies = send_backlog(cfg, topo, topic, n, size)
    c = PushConsumer(f"CG_{topic}", "", client_config=cfg(),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, consume_thread_min=4,
                     consume_thread_max=4, **settings)
    c.subscribe(topic, "*")
    c.register_message_listener(gate)
    c.start()
    try:
        wait_for(lambda: (pq := the_queue(c, topic)) is not None and limited(pq), 10, "the buffer over its limit")
        pq = the_queue(c, topic)
        assert pq is not None
        last_pulled = pq.queue_offset_max  # the highest offset ever buffered: moves only when a pull brings more
        deadline = time.monotonic() + STALL_WINDOW_S
        while time.monotonic() < deadline:
            assert pq.queue_offset_max == last_pulled, "pulled again although the buffer is over its limit"
            time.sleep(0.01)
        assert last_pulled < n - 1  # the rest of the backlog waits on the broker
        gate.release()
        wait_for(lambda: gate.count() >= n, 20, "the whole backlog consumed once the listener is released")
        assert sorted(gate.done) == bodies  # each message once
    finally:
        gate.release()
        c.shutdown()


def test_pull_threshold_for_queue_caps_buffered_messages(cfg, topo, monkeypatch) -> None:
    threshold = 50
    peak = Peak(monkeypatch)
    consume_held_backlog(cfg, topo, "E2EFlowCount", Gate(lambda body: True), 400, 16,
                         lambda pq: pq.msg_count > threshold, pull_threshold_for_queue=threshold)
    assert threshold < peak.count <= threshold + PULL_BATCH


def test_pull_threshold_size_for_queue_caps_buffered_bytes(cfg, topo, monkeypatch) -> None:
    mib, size = 1 << 20, 64 * 1024
    peak = Peak(monkeypatch)
    consume_held_backlog(cfg, topo, "E2EFlowSize", Gate(lambda body: True), 64, size,  # 4 MiB of backlog
                         lambda pq: pq.msg_size > mib, pull_threshold_size_for_queue_mib=1)
    assert mib < peak.size <= mib + PULL_BATCH * size


def test_consume_concurrently_max_span_caps_the_offset_span(cfg, topo, monkeypatch) -> None:
    max_span = 100
    peak = Peak(monkeypatch)
    # pull_threshold_for_queue stays 1000, more than the backlog: only the span rule can stop the pulls. (The span
    # is of the buffered offsets, as getMaxSpan's lastKey - firstKey: one stuck message alone does not widen it
    # once the messages after it are consumed, so every message is held here.)
    consume_held_backlog(cfg, topo, "E2EFlowSpan", Gate(lambda body: True), 400, 16,
                         lambda pq: pq.max_span() > max_span, consume_concurrently_max_span=max_span)
    assert max_span < peak.span <= max_span + PULL_BATCH
