"""The producer against a real name server and broker (subprocesses): every send mode, read back by pulling."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.message import Message, MessageExt, MessageQueue, PullStatus, SendStatus
from reference_broker.client.producer import Producer, select_by_hash
from reference_broker.client.pull_consumer import PullConsumer
from tests.client.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def producer(cfg):
    with Producer("PG_e2e", "", client_config=cfg()) as p:
        yield p


@pytest.fixture
def puller(cfg):
    with PullConsumer("CG_e2e_pull", "", client_config=cfg()) as c:
        yield c


def has_route(puller: PullConsumer, topic: str) -> bool:
    try:
        return bool(puller.fetch_message_queues(topic))
    except MQClientError:
        return False


def read_all(puller: PullConsumer, mq: MessageQueue, start: int = 0) -> list:
    """Every message of ``mq`` from ``start`` (waiting first for the name server to learn a new topic: the broker
    registers an auto-created topic right after creating it, but asynchronously)."""
    wait_for(lambda: has_route(puller, mq.topic), 10, f"route of {mq.topic}")
    out: list[MessageExt] = []
    offset = start
    while True:
        res = puller.pull(mq, "*", offset)
        if res.pull_status is not PullStatus.FOUND:
            return out
        out += res.msg_found_list
        offset = res.next_begin_offset


def test_sync_send_to_a_new_topic_is_stored_where_the_result_says(producer, puller) -> None:
    msg = Message("E2EProdSync", b"hello", tags="TagA", keys=["k1", "k2"])
    result = producer.send(msg)
    assert result.send_status is SendStatus.SEND_OK
    assert result.msg_id == msg.uniq_key and len(result.msg_id) == 32
    assert result.message_queue.topic == "E2EProdSync"
    (stored,) = read_all(puller, result.message_queue, result.queue_offset)
    assert stored.body == b"hello" and stored.tags == "TagA" and stored.keys == "k1 k2"
    assert stored.msg_id == result.msg_id  # UNIQ_KEY travels with the message
    assert stored.offset_msg_id == result.offset_msg_id
    assert stored.queue_offset == result.queue_offset


def test_sends_round_robin_over_the_queues(producer) -> None:
    results = [producer.send(Message("E2EProdRR", b"x")) for _ in range(8)]
    queues = [r.message_queue.queue_id for r in results]
    assert sorted(set(queues)) == [0, 1, 2, 3]  # 4 queues for a topic made from TBW102 (defaultTopicQueueNums)
    assert all(queues[i] != queues[i + 1] for i in range(7))


def test_async_sends_pipeline_and_all_complete(producer, puller) -> None:
    producer.send(Message("E2EProdAsync", b"warm-up"))
    futures = [producer.send_async(Message("E2EProdAsync", f"m{i}".encode())) for i in range(300)]
    results = [f.result(30) for f in futures]
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 300
    per_queue: dict[MessageQueue, set[int]] = {}
    for r in results:
        per_queue.setdefault(r.message_queue, set()).add(r.queue_offset)
    bodies = set()
    for mq in per_queue:
        bodies |= {m.body for m in read_all(puller, mq)}
    assert {f"m{i}".encode() for i in range(300)} <= bodies


def test_async_callback_gets_result_or_error(producer) -> None:
    done = threading.Event()
    got = []

    def callback(result, error) -> None:
        got.append((result, error))
        done.set()

    assert producer.send_async(Message("E2EProdCb", b"x"), callback) is None
    assert done.wait(10)
    (result, error), = got
    assert error is None and result.send_status is SendStatus.SEND_OK


def test_callback_executor_runs_callbacks_off_the_reader_thread(cfg) -> None:
    threads = []
    done = threading.Event()
    with ThreadPoolExecutor(1, "cb") as pool, \
            Producer("PG_e2e_exec", "", client_config=cfg(), callback_executor=pool) as p:
        def callback(result, error) -> None:
            threads.append(threading.current_thread().name)
            done.set()

        p.send_async(Message("E2EProdCb", b"x"), callback)
        assert done.wait(10)
    assert threads[0].startswith("cb")


def test_oneway_send_arrives(producer, puller) -> None:
    first = producer.send(Message("E2EProdOneway", b"first"))
    mq = first.message_queue
    producer.send_oneway(Message("E2EProdOneway", b"second"), mq)
    wait_for(lambda: len(read_all(puller, mq, first.queue_offset)) == 2, 10, "the oneway message")


def test_same_key_same_queue_with_select_by_hash(producer) -> None:
    queues = {}
    for key in ("order-1", "order-2", "order-3"):
        got = {producer.send(Message("E2EProdOrder", key.encode()), selector=select_by_hash,
                             arg=key).message_queue for _ in range(5)}
        assert len(got) == 1
        queues[key] = got.pop()
    mqs = producer.fetch_publish_message_queues("E2EProdOrder")
    assert all(queues[k] == select_by_hash(mqs, Message("E2EProdOrder", b"x"), k) for k in queues)


def test_explicit_queue_and_per_queue_offsets_grow(producer) -> None:
    producer.send(Message("E2EProdFixed", b"warm-up"))
    mq = MessageQueue("E2EProdFixed", producer.fetch_publish_message_queues("E2EProdFixed")[0].broker_name, 2)
    offsets = [producer.send(Message("E2EProdFixed", b"x"), mq).queue_offset for _ in range(5)]
    assert offsets == list(range(offsets[0], offsets[0] + 5))


def test_batch_send(producer, puller) -> None:
    producer.send(Message("E2EProdBatch", b"warm-up"))
    msgs = [Message("E2EProdBatch", f"b{i}".encode(), keys=f"key{i}") for i in range(5)]
    result = producer.send_batch(msgs)  # SEND_BATCH_MESSAGE with SendMessageRequestHeaderV2, as 4.9.8 sends it
    assert result.send_status is SendStatus.SEND_OK
    assert result.msg_id.split(",") == [m.uniq_key for m in msgs]
    assert len(result.offset_msg_id.split(",")) == 5
    stored = read_all(puller, result.message_queue, result.queue_offset)
    assert [m.body for m in stored] == [f"b{i}".encode() for i in range(5)]
    assert [m.msg_id for m in stored] == [m.uniq_key for m in msgs]


def test_invalid_messages_are_refused_before_sending(producer) -> None:
    with pytest.raises(MQClientError) as info:
        producer.send(Message("bad topic", b"x"))
    assert info.value.code == 13 and not info.value.retriable
    with pytest.raises(MQClientError):
        producer.send(Message("E2EProd", b""))


def test_send_to_a_dead_broker_fails_with_a_retriable_transport_error(cfg, topo) -> None:
    with Producer("PG_e2e_dead", "", client_config=cfg(), send_msg_timeout_s=2.0) as p:
        p.send(Message("E2EProdDead", b"x"))
        broker = topo.brokers[0]
        broker.kill()
        try:
            with pytest.raises(MQClientError) as info:
                p.send(Message("E2EProdDead", b"y"))
            assert info.value.retriable
            assert info.value.code in (ClientErrorCode.CONNECT_BROKER_EXCEPTION,
                                       ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION)
            future = p.send_async(Message("E2EProdDead", b"z"))
            assert future is not None
            with pytest.raises(MQClientError):
                future.result(10)
        finally:
            broker.start()
        wait_for(lambda: _sends(p), 20, "sending again after the restart")


def _sends(p: Producer) -> bool:
    try:
        return p.send(Message("E2EProdDead", b"again")).send_status is SendStatus.SEND_OK
    except MQClientError:
        return False


def test_broker_refusal_is_a_non_retriable_mq_broker_error(cfg) -> None:
    # The client would allow 8 MiB; the broker's maxMessageSize is 4 MiB, so it answers MESSAGE_ILLEGAL.
    with Producer("PG_e2e_big", "", client_config=cfg(), max_message_size=8 * 1024 * 1024) as p:
        p.send(Message("E2EProdBig", b"small"))
        with pytest.raises(MQBrokerError) as info:
            p.send(Message("E2EProdBig", b"x" * (5 * 1024 * 1024)))
    assert info.value.code == 13 and not info.value.retriable and info.value.addr
