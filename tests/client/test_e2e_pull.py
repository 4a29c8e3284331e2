"""The pull consumer against a real name server and broker: pulling, tags, long polling, offsets, queries."""

from __future__ import annotations

import threading
import time

import pytest

from reference_broker.client.errors import MQBrokerError, MQClientError
from reference_broker.client.message import Message, MessageModel, PullStatus
from reference_broker.client.producer import Producer
from reference_broker.client.pull_consumer import PullConsumer
from reference_broker.remoting.codes import ResponseCode
from tests.client.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def producer(cfg):
    with Producer("PG_e2e_p", "", client_config=cfg()) as p:
        yield p


@pytest.fixture
def consumer(cfg):
    with PullConsumer("CG_e2e_p", "", client_config=cfg()) as c:
        yield c


def queues_of(consumer: PullConsumer, topic: str):
    def ready() -> bool:
        try:
            return bool(consumer.fetch_message_queues(topic))
        except MQClientError:
            return False

    wait_for(ready, 10, f"route of {topic}")
    return consumer.fetch_message_queues(topic)


def test_fetch_queues_and_pull_everything_in_order(producer, consumer) -> None:
    first = producer.send(Message("E2EPull", b"m0"))
    mq = first.message_queue
    for i in range(1, 40):
        producer.send(Message("E2EPull", f"m{i}".encode()), mq)
    assert mq in queues_of(consumer, "E2EPull")
    got, offset = [], 0
    while True:
        res = consumer.pull(mq, "*", offset, 16)
        if res.pull_status is PullStatus.NO_NEW_MSG:
            break
        assert res.pull_status is PullStatus.FOUND and len(res.msg_found_list) <= 16
        got += res.msg_found_list
        offset = res.next_begin_offset
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(40)]
    assert [m.queue_offset for m in got] == list(range(40))
    assert (res.min_offset, res.max_offset, res.next_begin_offset) == (0, 40, 40)


def test_tag_expression_filters_on_broker_and_client(producer, consumer) -> None:
    first = producer.send(Message("E2EPullTags", b"a0", tags="TagA"))
    mq = first.message_queue
    for body, tags in [(b"b0", "TagB"), (b"c0", "TagC"), (b"a1", "TagA"), (b"none", None), (b"b1", "TagB")]:
        producer.send(Message("E2EPullTags", body, tags=tags), mq)
    queues_of(consumer, "E2EPullTags")
    bodies, offset = [], 0
    for _ in range(20):
        res = consumer.pull(mq, "TagA || TagB", offset)
        offset = res.next_begin_offset
        bodies += [m.body for m in res.msg_found_list]
        if res.pull_status is PullStatus.NO_NEW_MSG:
            break
    assert bodies == [b"a0", b"b0", b"a1", b"b1"]


def test_long_polling_returns_when_a_message_arrives(producer, consumer) -> None:
    first = producer.send(Message("E2EPullLong", b"first"))
    mq = first.message_queue
    queues_of(consumer, "E2EPullLong")
    timer = threading.Timer(0.5, lambda: producer.send(Message("E2EPullLong", b"late"), mq))
    timer.start()
    res = consumer.pull_block_if_not_found(mq, "*", first.queue_offset + 1)
    timer.join()
    assert res.pull_status is PullStatus.FOUND
    assert [m.body for m in res.msg_found_list] == [b"late"]


def test_long_polling_without_messages_ends_with_no_new_msg(cfg, producer) -> None:
    first = producer.send(Message("E2EPullIdle", b"only"))
    with PullConsumer("CG_e2e_idle", "", client_config=cfg(), broker_suspend_max_time_ms=800) as c:
        queues_of(c, "E2EPullIdle")
        started = time.monotonic()
        res = c.pull_block_if_not_found(first.message_queue, "*", first.queue_offset + 1)
        assert res.pull_status is PullStatus.NO_NEW_MSG
        assert time.monotonic() - started >= 0.5  # the broker held it rather than answering at once


def test_offsets_min_max_and_search(producer, consumer) -> None:
    first = producer.send(Message("E2EPullOff", b"x"))
    mq = first.message_queue
    for _ in range(4):
        producer.send(Message("E2EPullOff", b"x"), mq)
    queues_of(consumer, "E2EPullOff")
    assert consumer.min_offset(mq) == 0
    assert consumer.max_offset(mq) == 5
    assert consumer.search_offset(mq, 0) == 0
    assert consumer.search_offset(mq, int(time.time() * 1000) + 60_000) in (4, 5)
    assert consumer.earliest_msg_store_time(mq) > 0


def test_broker_offsets_query_and_update(producer, consumer) -> None:
    first = producer.send(Message("E2EPullCommit", b"x"))
    mq = first.message_queue
    queues_of(consumer, "E2EPullCommit")
    try:
        before = consumer.query_broker_offset(mq)
        assert before == 0  # a young topic whose first message is in memory reads 0 for a new group
    except MQBrokerError as exc:
        assert exc.code == ResponseCode.QUERY_NOT_FOUND
    consumer.update_broker_offset(mq, 1)
    assert consumer.query_broker_offset(mq) == 1
    consumer.update_consume_offset(mq, 1)
    assert consumer.fetch_consume_offset(mq) == 1


def test_offsets_recorded_in_memory_reach_the_broker_at_shutdown(cfg, producer) -> None:
    first = producer.send(Message("E2EPullPersist", b"x"))
    mq = first.message_queue
    c = PullConsumer("CG_e2e_persist", "", client_config=cfg(persist_consumer_offset_interval_s=3600))
    c.start()
    queues_of(c, "E2EPullPersist")
    c.update_consume_offset(mq, 1)
    c.shutdown()
    with PullConsumer("CG_e2e_persist", "", client_config=cfg()) as again:
        wait_for(lambda: again.fetch_consume_offset(mq, from_store=True) == 1, 10, "the persisted offset")


def test_query_by_key_and_view_by_offset_id(producer, consumer) -> None:
    result = producer.send(Message("E2EPullQuery", b"findme", keys="order-77 other"))
    queues_of(consumer, "E2EPullQuery")
    now = int(time.time() * 1000)

    def found(key: str) -> list[bytes]:
        try:
            return [m.body for m in consumer.query_message("E2EPullQuery", key, 32, now - 60_000, now + 60_000)]
        except MQClientError:
            return []

    wait_for(lambda: found("order-77") == [b"findme"], 10, "the message by key")
    assert found(result.msg_id) == [b"findme"]  # by UNIQ_KEY too
    assert found("absent") == []
    viewed = consumer.view_message(result.offset_msg_id)
    assert viewed.body == b"findme" and viewed.msg_id == result.msg_id


def test_broadcasting_pull_consumer_keeps_offsets_in_a_local_file(cfg, producer, tmp_path) -> None:
    first = producer.send(Message("E2EPullLocal", b"x"))
    mq = first.message_queue
    config = cfg("local-offsets")
    with PullConsumer("CG_e2e_local", "", client_config=config, message_model=MessageModel.BROADCASTING,
                      offset_store_dir=tmp_path) as c:
        queues_of(c, "E2EPullLocal")
        c.update_consume_offset(mq, 1)
    with PullConsumer("CG_e2e_local", "", client_config=config, message_model=MessageModel.BROADCASTING,
                      offset_store_dir=tmp_path) as c:
        assert c.fetch_consume_offset(mq) == 1
    assert list(tmp_path.glob("*/CG_e2e_local/offsets.json"))
