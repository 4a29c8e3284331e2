"""The client's SQL92 round, run against either implementation (test_e2e_sql92.py: the reference broker;
test_client_vs_rocketmq.py: RocketMQ 4.9.8): a producer sends messages with user properties, a push consumer
subscribed with ``MessageSelector.by_sql`` receives exactly those the selector matches, a pull consumer pulls
the same, and a push consumer with a malformed selector, or on a broker without enablePropertyFilter, is
refused at start by the broker's CHECK_CLIENT_CONFIG answer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageSelector,
    MQBrokerError,
    Producer,
    PullConsumer,
    PushConsumer,
)
from reference_broker.remoting.codes import ResponseCode
from tests.client.helpers import wait_for

SELECTOR = "(a > 5 AND TAGS = 'T1') OR color IN ('red')"


def _props(i: int) -> dict[str, str]:
    props = {"a": str(i)}
    if i % 4 == 0:
        props["color"] = "red"
    return props


def _expected(n: int) -> set[str]:
    return {f"k{i}" for i in range(n) if (i > 5 and i % 2 == 1) or i % 4 == 0}


def send(cfg: ClientConfig, topic: str, n: int) -> None:
    with Producer("SqlFlowProducer", cfg.namesrv_addr, client_config=cfg) as producer:
        for i in range(n):
            tags = "T1" if i % 2 == 1 else "T0"
            producer.send(Message(topic, f"m{i}".encode(), tags=tags, keys=f"k{i}", properties=_props(i)))


def start_selecting(cfg: ClientConfig, topic: str, group: str) -> tuple[PushConsumer, set[str], threading.Lock]:
    """A started push consumer with SELECTOR from the first offset, the keys it received and their lock."""
    got: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[Any], _ctx: object) -> ConsumeConcurrentlyStatus:
        with lock:
            got.update(m.keys for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, cfg.namesrv_addr, client_config=cfg,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(topic, MessageSelector.by_sql(SELECTOR))
    consumer.register_message_listener(listener)
    consumer.start()
    return consumer, got, lock


def push_receives_the_selected(cfg: ClientConfig, topic: str, group: str, n: int) -> None:
    consumer, got, lock = start_selecting(cfg, topic, group)
    try:
        expected = _expected(n)
        wait_for(lambda: got >= expected, 60, "the selected messages")
        # nothing else arrives: a pass of the pull loop after the last selected message brings no more
        threading.Event().wait(1.5)
        with lock:
            assert got == expected
    finally:
        consumer.shutdown()


def pull_pulls_the_selected(cfg: ClientConfig, topic: str, n: int) -> None:
    with PullConsumer("SqlFlowPuller", cfg.namesrv_addr, client_config=cfg) as consumer:
        keys: set[str] = set()
        for mq in consumer.fetch_message_queues(topic):
            offset = 0
            while True:
                result = consumer.pull(mq, MessageSelector.by_sql(SELECTOR), offset, 32)
                keys.update(m.keys for m in result.msg_found_list)
                if result.next_begin_offset == offset or result.next_begin_offset >= result.max_offset:
                    break
                offset = result.next_begin_offset
        assert keys == _expected(n)


def start_is_refused(cfg: ClientConfig, topic: str, group: str, selector: str, code: int,
                     remark: Callable[[str], bool]) -> None:
    consumer = PushConsumer(group, cfg.namesrv_addr, client_config=cfg)
    consumer.subscribe(topic, MessageSelector.by_sql(selector))
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    with pytest.raises(MQBrokerError) as err:
        consumer.start()
    assert err.value.code == code
    assert remark(err.value.remark), err.value.remark


MALFORMED = ("a >", ResponseCode.SUBSCRIPTION_PARSE_FAILED,
             lambda r: r.startswith('org.apache.rocketmq.filter.parser.ParseException: Encountered "<EOF>"'))
NOT_ENABLED = ("a > 1", ResponseCode.SYSTEM_ERROR,
               lambda r: r == "The broker does not support consumer to filter message by SQL92")
