"""Ordered messages end to end: one key, one queue; one thread per queue in offset order; order kept across a
consumer restart; a suspended batch is consumed again before anything after it."""

from __future__ import annotations

import threading
import time

import pytest

from reference_broker.client.message import ConsumeFromWhere, ConsumeOrderlyStatus, Message
from reference_broker.client.producer import Producer, select_by_hash
from reference_broker.client.push_consumer import PushConsumer
from tests.client.helpers import create_topic, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

KEYS = [f"order-{k}" for k in range(20)]
PER_KEY = 10


class OrderRecorder:
    """An orderly listener recording (session, queue id, offset, key, seq, thread) for each message; it can
    suspend a chosen message once and flags two threads inside one queue at the same time."""

    def __init__(self, session: int, suspend_once: bytes | None = None) -> None:
        self.session = session
        self.got: list[tuple[int, int, int, str, int]] = []
        self.lock = threading.Lock()
        self.inside: dict[int, int] = {}
        self.overlaps = 0
        self.suspend_once = suspend_once

    def __call__(self, msgs, context):
        qid = context.message_queue.queue_id
        with self.lock:
            self.inside[qid] = self.inside.get(qid, 0) + 1
            if self.inside[qid] > 1:
                self.overlaps += 1
        try:
            time.sleep(0.005)  # slow enough that the restart lands mid-stream
            with self.lock:
                for m in msgs:
                    key, seq = m.body.decode().split(":")
                    self.got.append((self.session, qid, m.queue_offset, key, int(seq)))
                if self.suspend_once is not None and any(m.body == self.suspend_once for m in msgs):
                    self.suspend_once = None
                    context.suspend_current_queue_time_millis = 100
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS
        finally:
            with self.lock:
                self.inside[qid] -= 1

    def count(self) -> int:
        with self.lock:
            return len(self.got)


def send_ordered(producer: Producer, topic: str) -> dict[str, int]:
    """PER_KEY messages per key, interleaved across keys; returns key -> queue id."""
    queue_of: dict[str, int] = {}
    for seq in range(PER_KEY):
        for key in KEYS:
            result = producer.send(Message(topic, f"{key}:{seq}".encode(), keys=key), selector=select_by_hash,
                                   arg=key)
            assert queue_of.setdefault(key, result.message_queue.queue_id) == result.message_queue.queue_id
    return queue_of


def orderly(cfg, group: str, topic: str, listener, **kw) -> PushConsumer:
    c = PushConsumer(group, "", client_config=cfg(), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                     await_termination_s_when_shutdown=5.0, **kw)
    c.subscribe(topic, "*")
    c.register_orderly_listener(listener)
    return c


def assert_in_order(got: list[tuple[int, int, int, str, int]]) -> None:
    """Within a session: each queue's offsets and each key's sequence numbers only go up."""
    last_offset: dict[tuple[int, int], int] = {}
    last_seq: dict[tuple[int, str], int] = {}
    for session, qid, offset, key, seq in got:
        assert offset > last_offset.get((session, qid), -1), f"queue {qid} went back to {offset}"
        assert seq > last_seq.get((session, key), -1), f"{key} went back to {seq}"
        last_offset[(session, qid)] = offset
        last_seq[(session, key)] = seq


def test_order_per_queue_is_kept_across_a_consumer_restart(cfg, topo) -> None:
    create_topic(topo, "E2EOrder", 4)
    with Producer("PG_order", "", client_config=cfg()) as producer:
        queue_of = send_ordered(producer, "E2EOrder")
    total = len(KEYS) * PER_KEY
    first = OrderRecorder(1)
    c1 = orderly(cfg, "CG_order", "E2EOrder", first)
    c1.start()
    wait_for(lambda: first.count() >= total // 2, 30, "half the messages")
    c1.shutdown()
    second = OrderRecorder(2)
    with orderly(cfg, "CG_order", "E2EOrder", second):
        def all_seen() -> bool:
            with first.lock, second.lock:
                return {(k, s) for *_, k, s in first.got + second.got} == {
                    (k, s) for k in KEYS for s in range(PER_KEY)}

        wait_for(all_seen, 40, "every message across both sessions")
    got = first.got + second.got
    assert first.got and second.got, "the restart should fall between the first and the last message"
    assert_in_order(got)
    assert first.overlaps == 0 and second.overlaps == 0  # never two threads in one queue
    assert all(queue_of[key] == qid for _s, qid, _o, key, _seq in got)
    # The second session picks up each queue right after the last offset the first one committed: no gap,
    # and (offsets persisted at shutdown) nothing consumed twice.
    for qid in range(4):
        done1 = [o for s, q, o, *_ in first.got if q == qid]
        done2 = [o for s, q, o, *_ in second.got if q == qid]
        if done1 and done2:
            assert done2[0] == max(done1) + 1
    assert len(got) == total


def test_suspended_batch_is_consumed_again_before_later_messages(cfg, topo) -> None:
    create_topic(topo, "E2EOrderSuspend", 2)
    with Producer("PG_order_s", "", client_config=cfg()) as producer:
        queue_of = send_ordered(producer, "E2EOrderSuspend")
    victim = f"{KEYS[0]}:3".encode()
    rec = OrderRecorder(1, suspend_once=victim)
    with orderly(cfg, "CG_order_s", "E2EOrderSuspend", rec):
        wait_for(lambda: rec.count() >= len(KEYS) * PER_KEY + 1, 30, "every message plus the retry")
    qid = queue_of[KEYS[0]]
    in_queue = [(o, k, s) for _sess, q, o, k, s in rec.got if q == qid]
    first_try = in_queue.index(next(x for x in in_queue if (x[1], x[2]) == (KEYS[0], 3)))
    # the suspended message comes again right away; nothing after it in its queue got in between
    assert in_queue[first_try] == in_queue[first_try + 1]
    offsets = [o for o, _k, _s in in_queue]
    assert offsets[:first_try + 1] + offsets[first_try + 2:] == sorted(set(offsets))
