"""Rebalance on the broker's NOTIFY_CONSUMER_IDS_CHANGED alone: the periodic rebalance is an hour away, so the
queues move within seconds only if the notification reaches the client and wakes its rebalance service."""

from __future__ import annotations

import pytest

from reference_broker.client.message import ConsumeConcurrentlyStatus, ConsumeFromWhere, MessageQueue
from reference_broker.client.push_consumer import PushConsumer
from tests.client.helpers import create_topic, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

TOPIC = "E2ENotifyRebal"
GROUP = "CG_notify_rebal"
QUEUES = 8
NOTIFY_WITHIN_S = 5.0  # far below the rebalance interval below: only the notification can explain a move


def owned(c: PushConsumer) -> set[MessageQueue]:
    return {mq for mq, pq in c.process_queues().items() if mq.topic == TOPIC and not pq.dropped}


def start_consumer(cfg, name: str) -> PushConsumer:
    c = PushConsumer(GROUP, "", client_config=cfg(f"{GROUP}-{name}", rebalance_interval_s=3600.0),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(TOPIC, "*")
    c.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    c.start()  # a consumer rebalances once at start (its own join), then only when notified
    return c


def split_evenly(a: PushConsumer, b: PushConsumer) -> bool:
    mine, theirs = owned(a), owned(b)
    return len(mine) == len(theirs) == QUEUES // 2 and not mine & theirs and len(mine | theirs) == QUEUES


def test_joining_and_leaving_consumer_moves_queues_through_the_notification(cfg, topo) -> None:
    create_topic(topo, TOPIC, QUEUES)
    all_queues = {MessageQueue(TOPIC, topo.brokers[0].name, i) for i in range(QUEUES)}
    a = start_consumer(cfg, "a")
    try:
        wait_for(lambda: owned(a) == all_queues, NOTIFY_WITHIN_S, "a alone holds every queue")
        b = start_consumer(cfg, "b")
        try:
            # b takes its half at its own start; a gives that half up only when the broker tells it b joined.
            wait_for(lambda: split_evenly(a, b), NOTIFY_WITHIN_S, "a and b hold disjoint halves")
        finally:
            b.shutdown()
        # b's UNREGISTER_CLIENT makes the broker notify a, which takes b's half back.
        wait_for(lambda: owned(a) == all_queues, NOTIFY_WITHIN_S, "a holds every queue again after b left")
    finally:
        a.shutdown()
