"""What a concurrent consume result does to the process queue and the offset (ConsumeMessageConcurrentlyService
.processConsumeResult), with a stand-in consumer whose send-back answer the test chooses."""

from __future__ import annotations

import threading

import pytest

from reference_broker.client.consume_concurrently import ConsumeMessageConcurrentlyService, reset_retry_topic
from reference_broker.client.message import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    MessageModel,
    MessageQueue,
)
from reference_broker.client.offset_store import OffsetTable, ReadOffsetType
from reference_broker.client.process_queue import ProcessQueue
from reference_broker.client.scheduler import Scheduler
from reference_broker.common.record import MessageExt
from tests.client.helpers import wait_for

MQ = MessageQueue("T", "broker-a", 0)


def msg(offset: int, props: dict[str, str] | None = None, topic: str = "T") -> MessageExt:
    return MessageExt(topic, b"x", 0, 0, offset, 1000 + offset, 0, 0, ("127.0.0.1", 1), 0, ("127.0.0.1", 2), 0, 0,
                      dict(props or {}), 0, 0)


class Store:
    def __init__(self) -> None:
        self.table = OffsetTable()

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        self.table.update(mq, offset, increase_only)

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        value = self.table.get(mq)
        return -1 if value is None else value


class StandIn:
    """The parts of a PushConsumer the consume service uses; send_message_back answers ``accept_back``."""

    def __init__(self, accept_back: bool, model: MessageModel = MessageModel.CLUSTERING) -> None:
        self.group = "G"
        self.consume_thread_max = 2
        self.consume_message_batch_max_size = 1
        self.message_model = model
        self.offset_store = Store()
        self.stopped = False
        self.accept_back = accept_back
        self.sent_back: list[tuple[int, int]] = []
        self.scheduler = Scheduler()
        self.scheduler.start()

    def send_message_back(self, m: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        self.sent_back.append((m.queue_offset, delay_level))
        return self.accept_back

    def instance_scheduler(self) -> Scheduler:
        return self.scheduler


@pytest.fixture
def make():
    made: list[tuple[StandIn, ConsumeMessageConcurrentlyService]] = []

    def build(accept_back: bool = True, model: MessageModel = MessageModel.CLUSTERING, listener=None):
        consumer = StandIn(accept_back, model)
        service = ConsumeMessageConcurrentlyService(consumer, listener or (lambda msgs, ctx: None))  # type: ignore[arg-type]
        made.append((consumer, service))
        return consumer, service

    yield build
    for consumer, service in made:
        service.shutdown()
        consumer.scheduler.shutdown()


def buffered(*offsets: int) -> tuple[ProcessQueue, list[MessageExt]]:
    pq = ProcessQueue()
    msgs = [msg(o) for o in offsets]
    pq.put_messages(msgs)
    return pq, msgs


def test_success_removes_the_batch_and_commits_the_smallest_unconsumed(make) -> None:
    consumer, service = make()
    pq, msgs = buffered(5, 6, 7)
    service.process_consume_result(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeConcurrentlyContext(MQ),
                                   [msgs[1]], pq, MQ)
    assert consumer.offset_store.table.get(MQ) == 5  # 5 is still unconsumed
    service.process_consume_result(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, ConsumeConcurrentlyContext(MQ),
                                   [msgs[0], msgs[2]], pq, MQ)
    assert consumer.offset_store.table.get(MQ) == 8
    assert consumer.sent_back == []


def test_reconsume_later_sends_back_with_the_chosen_delay_and_moves_on(make) -> None:
    consumer, service = make(accept_back=True)
    pq, msgs = buffered(5, 6)
    context = ConsumeConcurrentlyContext(MQ, delay_level_when_next_consume=2)
    service.process_consume_result(ConsumeConcurrentlyStatus.RECONSUME_LATER, context, msgs, pq, MQ)
    assert consumer.sent_back == [(5, 2), (6, 2)]
    assert consumer.offset_store.table.get(MQ) == 7  # the broker has them now: the queue moves on
    assert pq.msg_count == 0


def test_ack_index_splits_a_batch(make) -> None:
    consumer, service = make(accept_back=True)
    pq, msgs = buffered(1, 2, 3)
    context = ConsumeConcurrentlyContext(MQ, ack_index=0)  # only the first one was consumed
    service.process_consume_result(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, context, msgs, pq, MQ)
    assert consumer.sent_back == [(2, 0), (3, 0)]


def test_failed_send_back_keeps_the_offset_and_consumes_again_locally(make) -> None:
    seen = threading.Event()
    again: list[tuple[int, int]] = []

    def listener(msgs, ctx):
        again.extend((m.queue_offset, m.reconsume_times) for m in msgs)
        seen.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer, service = make(accept_back=False, listener=listener)
    service.consume_later_s = 0.05  # RocketMQ waits 5 s
    pq, msgs = buffered(5, 6)
    service.process_consume_result(ConsumeConcurrentlyStatus.RECONSUME_LATER, ConsumeConcurrentlyContext(MQ),
                                   [msgs[0]], pq, MQ)
    assert consumer.offset_store.table.get(MQ) == 5  # not past the message that still has to be consumed
    assert pq.offsets() == [5, 6]
    assert seen.wait(5)
    assert again == [(5, 1)]  # redelivered locally, reconsume count raised
    wait_for(lambda: consumer.offset_store.table.get(MQ) == 6, 5, "the offset after the local retry")


def test_broadcasting_drops_failed_messages(make) -> None:
    consumer, service = make(model=MessageModel.BROADCASTING)
    pq, msgs = buffered(5)
    service.process_consume_result(ConsumeConcurrentlyStatus.RECONSUME_LATER, ConsumeConcurrentlyContext(MQ),
                                   msgs, pq, MQ)
    assert consumer.sent_back == []
    assert consumer.offset_store.table.get(MQ) == 6


def test_retry_messages_show_their_original_topic() -> None:
    retried = msg(0, {"RETRY_TOPIC": "Orders"}, topic="%RETRY%G")
    other = msg(1, {"RETRY_TOPIC": "Orders"}, topic="%RETRY%Other")
    reset_retry_topic([retried, other], "G")
    assert (retried.topic, other.topic) == ("Orders", "%RETRY%Other")
