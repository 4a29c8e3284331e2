"""The push consumer (concurrently) against a real name server and broker: delivery, tags, retry, offsets
across a restart, broadcasting."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest

from reference_broker.client.message import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageModel,
)
from reference_broker.client.producer import Producer
from reference_broker.client.pull_consumer import PullConsumer
from reference_broker.client.push_consumer import PushConsumer
from tests.client.helpers import create_topic, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


class Recorder:
    """A concurrent listener that records (body, topic, queue id, offset, reconsume times) per message."""

    def __init__(self, fail_first: set[bytes] | None = None, delay_level: int = 0) -> None:
        self.got: list[tuple[bytes, str, int, int, int]] = []
        self.lock = threading.Lock()
        self.fail_first = set(fail_first or ())
        self.delay_level = delay_level

    def __call__(self, msgs, context):
        with self.lock:
            for m in msgs:
                self.got.append((m.body, m.topic, m.queue_id, m.queue_offset, m.reconsume_times))
            if any(m.body in self.fail_first and m.reconsume_times == 0 for m in msgs):
                context.delay_level_when_next_consume = self.delay_level
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def bodies(self) -> set[bytes]:
        with self.lock:
            return {g[0] for g in self.got}

    def count(self) -> int:
        with self.lock:
            return len(self.got)


@pytest.fixture
def producer(cfg):
    with Producer("PG_e2e_push", "", client_config=cfg()) as p:
        yield p


def consumer(cfg, group: str, topic: str, listener, expr: str = "*", config=None, **kw) -> PushConsumer:
    c = PushConsumer(group, "", client_config=config or cfg(),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw)
    c.subscribe(topic, expr)
    c.register_message_listener(listener)
    return c


def test_every_message_is_delivered_once_and_offsets_are_committed(cfg, topo, producer) -> None:
    create_topic(topo, "E2EPush", 4)
    sent = [producer.send(Message("E2EPush", f"m{i}".encode())) for i in range(200)]
    rec = Recorder()
    c = consumer(cfg, "CG_push_all", "E2EPush", rec)
    c.start()
    try:
        wait_for(lambda: rec.bodies() == {f"m{i}".encode() for i in range(200)}, 30, "all 200 messages")
        assert rec.count() == 200  # once each
        assert {(g[2], g[3]) for g in rec.got} == {(r.message_queue.queue_id, r.queue_offset) for r in sent}
        owned = {mq for mq in c.process_queues() if mq.topic == "E2EPush"}
        assert len(owned) == 4
    finally:
        c.shutdown()
    with PullConsumer("CG_push_all", "", client_config=cfg()) as check:
        for mq in owned:
            assert check.query_broker_offset(mq) == check.max_offset(mq)  # persisted at shutdown


def test_messages_sent_after_start_arrive_by_long_polling(cfg, topo, producer) -> None:
    create_topic(topo, "E2EPushLive", 2)
    rec = Recorder()
    with consumer(cfg, "CG_push_live", "E2EPushLive", rec) as c:
        wait_for(lambda: len([mq for mq in c.process_queues() if mq.topic == "E2EPushLive"]) == 2, 20,
                 "queues assigned")
        for i in range(20):
            producer.send(Message("E2EPushLive", f"live{i}".encode()))
        wait_for(lambda: len(rec.bodies()) == 20, 20, "the live messages")


def test_tag_subscription_delivers_only_matching_tags(cfg, topo, producer) -> None:
    create_topic(topo, "E2EPushTags", 2)
    tags = ["ABC"[i % 3] for i in range(10)]
    for i, tag in enumerate(tags):
        producer.send(Message("E2EPushTags", f"{tag}{i}".encode(), tags=tag))
    producer.send(Message("E2EPushTags", b"untagged"))
    rec = Recorder()
    with consumer(cfg, "CG_push_tags", "E2EPushTags", rec, "A || C"):
        expected = {f"{tag}{i}".encode() for i, tag in enumerate(tags) if tag != "B"}
        wait_for(lambda: rec.bodies() == expected, 20, "the A and C messages")
        time.sleep(0.5)  # the B messages and the untagged one are filtered out, so nothing else arrives
        assert rec.bodies() == expected


def test_reconsume_later_redelivers_through_the_retry_topic(cfg, topo, producer) -> None:
    create_topic(topo, "E2EPushRetry", 1)
    producer.send(Message("E2EPushRetry", b"ok"))
    producer.send(Message("E2EPushRetry", b"again"))
    rec = Recorder(fail_first={b"again"}, delay_level=1)  # level 1 = 1 s
    with consumer(cfg, "CG_push_retry", "E2EPushRetry", rec):
        wait_for(lambda: any(g[0] == b"again" and g[4] == 1 for g in rec.got), 40, "the redelivery")
    retried = [g for g in rec.got if g[0] == b"again"]
    assert [g[4] for g in retried] == [0, 1]
    assert all(g[1] == "E2EPushRetry" for g in retried)  # the retry shows the original topic


def test_restart_resumes_from_the_committed_offset(cfg, topo, producer) -> None:
    create_topic(topo, "E2EPushRestart", 2)
    for i in range(50):
        producer.send(Message("E2EPushRestart", f"a{i}".encode()))
    first = Recorder()
    c = consumer(cfg, "CG_push_restart", "E2EPushRestart", first)
    c.start()
    wait_for(lambda: len(first.bodies()) == 50, 30, "the first 50")
    c.shutdown()
    for i in range(50):
        producer.send(Message("E2EPushRestart", f"b{i}".encode()))
    second = Recorder()
    with consumer(cfg, "CG_push_restart", "E2EPushRestart", second):
        wait_for(lambda: {f"b{i}".encode() for i in range(50)} <= second.bodies(), 30, "the next 50")
    # offsets were committed at shutdown, so nothing of the first round comes again
    assert not any(b.startswith(b"a") for b in second.bodies())


def test_broadcasting_gives_every_consumer_every_message(cfg, topo, producer, tmp_path) -> None:
    create_topic(topo, "E2EPushBcast", 2)
    for i in range(20):
        producer.send(Message("E2EPushBcast", f"m{i}".encode()))
    recs = [Recorder(), Recorder()]
    consumers = [consumer(cfg, "CG_push_bcast", "E2EPushBcast", r, message_model=MessageModel.BROADCASTING,
                          offset_store_dir=tmp_path) for r in recs]
    for c in consumers:
        c.start()
    try:
        for r in recs:
            wait_for(partial(lambda rec: len(rec.bodies()) == 20, r), 30, "every message at each consumer")
        assert all(r.count() == 20 for r in recs)
        assert all(len([mq for mq in c.process_queues() if mq.topic == "E2EPushBcast"]) == 2 for c in consumers)
    finally:
        for c in consumers:
            c.shutdown()
    assert len(list(tmp_path.glob("*/CG_push_bcast/offsets.json"))) == 2  # one file per client


def test_consumer_recovers_after_a_broker_restart(cfg, topo, producer) -> None:
    create_topic(topo, "E2EPushRestartBroker", 2)
    for i in range(10):
        producer.send(Message("E2EPushRestartBroker", f"before{i}".encode()))
    rec = Recorder()
    # No periodic heartbeat or rebalance during the test: the restarted broker learns of the consumer again
    # because a pull answered SUBSCRIPTION_NOT_EXIST makes the client send a heartbeat at once.
    config = cfg(heartbeat_broker_interval_s=3600, rebalance_interval_s=3600, poll_name_server_interval_s=3600)
    with consumer(cfg, "CG_push_broker_restart", "E2EPushRestartBroker", rec, config=config):
        wait_for(lambda: len(rec.bodies()) == 10, 20, "the messages sent before the restart")
        time.sleep(1.5)  # past the instance's first scheduled heartbeat (1 s after start), the last one it sends
        broker = topo.brokers[0]
        broker.stop()
        broker.start()
        after = {f"after{i}".encode() for i in range(10)}

        def sent_after() -> bool:
            try:
                for body in after - sent:
                    producer.send(Message("E2EPushRestartBroker", body))
                    sent.add(body)
            except Exception:  # noqa: BLE001 - a probe: any failure means not back yet
                return False
            return True

        sent: set[bytes] = set()
        wait_for(sent_after, 30, "sending after the restart")
        wait_for(lambda: after <= rec.bodies(), 30, "the messages sent after the restart")
