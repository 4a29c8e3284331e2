"""Retry then DLQ through a real broker and the project's push consumer (short delay levels)."""

from __future__ import annotations

import time

import pytest

from harness.launcher import Topology
from reference_broker.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)

pytestmark = pytest.mark.e2e


def test_sixteen_failures_then_dlq(tmp_path):
    levels = " ".join(["50ms"] * 18)  # the 18 levels, each 50 ms, so 16 retries take about a second
    with Topology(tmp_path / "t", broker_conf={"messageDelayLevel": levels}) as topo:
        producer = Producer("pg", topo.namesrv_addr)
        producer.start()
        sent = producer.send(Message("RetryT", b"fail-me", keys="K1"))
        attempts: list[tuple[str, int]] = []
        consumer = PushConsumer("cg_retry", topo.namesrv_addr,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("RetryT", "*")

        def always_later(msgs, _ctx):
            attempts.extend((m.topic, m.reconsume_times) for m in msgs)
            return ConsumeConcurrentlyStatus.RECONSUME_LATER

        consumer.register_message_listener(always_later)
        consumer.start()
        deadline = time.monotonic() + 60
        while len(attempts) < 17 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # an 18th delivery would show up by now
        consumer.shutdown()
        # the first delivery and 16 retries (maxReconsumeTimes 16), each with its reconsume count
        assert [r for _t, r in attempts] == list(range(17))
        assert attempts[0][0] == "RetryT"
        dlq_reader = PullConsumer("dlq_reader", topo.namesrv_addr)
        dlq_reader.start()
        mqs = sorted(dlq_reader.fetch_message_queues("%DLQ%cg_retry"))
        assert len(mqs) == 1, "DLQ_NUMS_PER_GROUP = 1"
        res = dlq_reader.pull(mqs[0], "*", 0, 32)
        assert res.pull_status is PullStatus.FOUND, "the DLQ is readable (perm 6, RocketMQ >= 4.9.2)"
        [dead] = res.msg_found_list
        assert dead.body == b"fail-me" and dead.reconsume_times == 17
        assert dead.properties["ORIGIN_MESSAGE_ID"] == sent.msg_id
        assert dead.properties["RETRY_TOPIC"] == "RetryT"
        dlq_reader.shutdown()
        producer.shutdown()
