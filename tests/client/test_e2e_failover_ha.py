"""Two broker groups, one with a slave, through real processes: while broker-a's master is down (SIGKILL) every
send succeeds on broker-b — at first by the producer's retry on another broker, then because the route no
longer offers broker-a's queues for writing (its slave keeps broker-a in the route, for reading only) — and
broker-a's replicated messages are still consumed from its slave; once the master is back, sends reach it again."""

from __future__ import annotations

import time

import pytest

from harness.launcher import Topology
from reference_broker.client.config import ClientConfig
from reference_broker.client.message import ConsumeFromWhere, Message, SendStatus
from reference_broker.client.producer import Producer
from reference_broker.client.push_consumer import PushConsumer
from tests.client.helpers import create_topic, wait_for
from tests.client.test_e2e_failover import SendSpy
from tests.client.test_e2e_slave_read import SLAVE, Bodies, max_offsets, topic_on

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_sends_fail_over_to_the_other_group_and_reads_to_the_slave(tmp_path) -> None:
    topic = "HaFailT"
    with Topology(tmp_path / "t", brokers=2, broker_conf={"registerNameServerPeriod": "10000"}) as topo:
        master_a, broker_b = topo.brokers
        create_topic(topo, topic, 4)
        slave_a = topo.add_broker("broker-a-slave", extra=SLAVE)
        wait_for(lambda: topic_on(slave_a.addr, topic), 30, "the topic copied to the slave")
        config = ClientConfig(topo.namesrv_addr, "ha-failover", poll_name_server_interval_s=1.0)  # type: ignore[arg-type]
        with Producer("PG_ha_failover", "", client_config=config) as producer:
            before = [producer.send(Message(topic, b"before%d" % i)) for i in range(16)]
            on_a = [r for r in before if r.message_queue.broker_name == "broker-a"]
            assert on_a and len(on_a) < 16
            wait_for(lambda: max_offsets(slave_a.addr, topic) == max_offsets(master_a.addr, topic), 30,
                     "broker-a's messages replicated")
            spy = SendSpy(producer)
            master_a.kill()
            for i in range(40):
                result = producer.send(Message(topic, b"during%d" % i))
                assert result.send_status is SendStatus.SEND_OK
                assert result.message_queue.broker_name == "broker-b"
                time.sleep(0.05)
            # After a route poll only broker-b's queues are offered for writing: no attempt reaches broker-a.
            instance = producer._instance
            assert instance is not None
            wait_for(lambda: {mq.broker_name for mq in instance.publish_info(topic).message_queues} == {"broker-b"},
                     10, "broker-a's queues leave the publish route")
            spy.take()
            for i in range(20):
                assert producer.send(Message(topic, b"late%d" % i)).message_queue.broker_name == "broker-b"
            assert all(addr == broker_b.addr for addr, _ in spy.take())

            # broker-a's replicated messages are read from its slave.
            rec = Bodies()
            consumer = PushConsumer("CG_ha_failover", "", client_config=ClientConfig(
                topo.namesrv_addr, "ha-failover-c", poll_name_server_interval_s=1.0,  # type: ignore[arg-type]
                rebalance_interval_s=1.0), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe(topic, "*")
            consumer.register_message_listener(rec)
            consumer.start()
            try:
                wait_for(lambda: {b"before%d" % i for i in range(16)} <= rec.distinct(), 60,
                         "every message sent before the kill, broker-a's from its slave")
            finally:
                consumer.shutdown()

            master_a.start()
            wait_for(lambda: "broker-a" in {mq.broker_name for mq in instance.publish_info(topic).message_queues},
                     30, "broker-a writable again")
            names = {producer.send(Message(topic, b"after%d" % i)).message_queue.broker_name for i in range(16)}
            assert names == {"broker-a", "broker-b"}
