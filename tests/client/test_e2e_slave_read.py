"""Consumers and a slave, through real processes (name server, master, slave): a master with slaveReadEnable
sends a reader far behind to the slave (suggestWhichBrokerId) and the push consumer follows; with the master
killed (SIGKILL) the push consumer keeps consuming what was replicated, from the slave, and commits its offsets
there."""

from __future__ import annotations

import threading

import pytest

from harness.launcher import Topology
from reference_broker.client.config import ClientConfig
from reference_broker.client.message import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message
from reference_broker.client.producer import Producer
from reference_broker.client.push_consumer import PushConsumer
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request
from tests.client.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SLAVE = {"brokerName": "broker-a", "brokerId": "1", "brokerRole": "SLAVE"}
QUEUES = 4


def cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0,  # type: ignore[arg-type]
                        rebalance_interval_s=1.0, persist_consumer_offset_interval_s=1.0,
                        heartbeat_broker_interval_s=2.0)


class Bodies:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, msgs, context):
        with self.lock:
            self.got.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def distinct(self) -> set[bytes]:
        with self.lock:
            return set(self.got)


class PullSpy:
    """Records the broker address of every PULL_MESSAGE the consumer's instance sends."""

    def __init__(self, consumer: PushConsumer) -> None:
        self.addrs: list[str] = []
        instance = consumer._running()
        real = instance.invoke_async

        def invoke_async(addr: str, cmd: RemotingCommand, *args, **kw):
            if cmd.code == RequestCode.PULL_MESSAGE:
                self.addrs.append(addr)
            return real(addr, cmd, *args, **kw)

        instance.invoke_async = invoke_async  # type: ignore[method-assign]


def topic_on(addr: str, topic: str) -> bool:
    with RemotingClient.from_addr(addr) as c:
        return topic in c.invoke(create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {})).body.decode()


def max_offsets(addr: str, topic: str) -> list[int]:
    with RemotingClient.from_addr(addr) as c:
        return [int(c.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}))
                    .ext_fields["offset"]) for q in range(QUEUES)]


def committed(addr: str, group: str, topic: str) -> int:
    total = 0
    with RemotingClient.from_addr(addr) as c:
        for q in range(QUEUES):
            r = c.invoke(create_request(RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": str(q)}))
            total += int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else 0
    return total


def start_pair(tmp_path, topic: str, conf: dict[str, str] | None = None) -> Topology:
    topo = Topology(tmp_path / "t", broker_conf={"registerNameServerPeriod": "10000", **(conf or {})}).start()
    master = topo.brokers[0]
    with RemotingClient.from_addr(master.addr) as c:
        r = c.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
        assert r.code == ResponseCode.SUCCESS, r.remark
    slave = topo.add_broker("broker-a-slave", extra=SLAVE)
    wait_for(lambda: topic_on(slave.addr, topic), 30, "the topic copied to the slave (SlaveSynchronize)")
    return topo


def send_all(topo: Topology, topic: str, bodies: list[bytes]) -> None:
    with Producer(f"PG_{topic}", "", client_config=cfg(topo, f"p-{topic}")) as producer:
        for body in bodies:
            producer.send(Message(topic, body))


def test_the_consumer_keeps_consuming_from_the_slave_once_the_master_is_killed(tmp_path):
    topic, group = "SlaveReadT", "CG_slave_read"
    topo = start_pair(tmp_path, topic)
    try:
        master, slave = topo.brokers
        first = [b"a%d" % i for i in range(20)]
        send_all(topo, topic, first)
        rec = Bodies()
        c = PushConsumer(group, "", client_config=cfg(topo, "c-slave-read"),
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(topic, "*")
        c.register_message_listener(rec)
        c.start()
        try:
            wait_for(lambda: rec.distinct() == set(first), 40, "the first 20 messages, from the master")
            c.suspend()
            second = [b"b%d" % i for i in range(40)]
            send_all(topo, topic, second)
            on_master = max_offsets(master.addr, topic)
            wait_for(lambda: max_offsets(slave.addr, topic) == on_master, 30, "the slave replicated them")
            master.kill()
            # The name server drops the master when its connection closes; the client's next route poll (1 s)
            # leaves only the slave under broker-a.
            instance = c._running()
            wait_for(lambda: instance.find_broker_addr_in_subscribe("broker-a", 0, True) is None, 20,
                     "the client's route without the master")
            spy = PullSpy(c)
            c.resume()
            wait_for(lambda: rec.distinct() == set(first) | set(second), 60,
                     "every replicated message, from the slave")
            assert set(spy.addrs) == {slave.addr}, set(spy.addrs)
            # Its offsets went to the slave too (RemoteBrokerOffsetStore: any broker of the name).
            wait_for(lambda: committed(slave.addr, group, topic) == 60, 20, "offsets committed to the slave")
        finally:
            c.shutdown()
    finally:
        topo.cleanup()


def test_a_master_with_slave_read_enable_sends_a_reader_far_behind_to_the_slave(tmp_path):
    """accessMessageInMemoryMaxRatio=0: every reader behind the commit log's end is "far behind"."""
    topic, group = "SlowReadT", "CG_slow_read"
    topo = start_pair(tmp_path, topic, {"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": "0"})
    try:
        master, slave = topo.brokers
        bodies = [b"s%d" % i for i in range(200)]
        send_all(topo, topic, bodies)
        on_master = max_offsets(master.addr, topic)
        wait_for(lambda: max_offsets(slave.addr, topic) == on_master, 30, "the slave replicated them")
        rec = Bodies()
        c = PushConsumer(group, "", client_config=cfg(topo, "c-slow-read"), pull_batch_size=4,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe(topic, "*")
        c.register_message_listener(rec)
        c.start()
        spy = PullSpy(c)
        try:
            wait_for(lambda: rec.distinct() == set(bodies), 60, "all 200 messages")
            assert slave.addr in spy.addrs, set(spy.addrs)
            # Caught up, the slave suggests the group's brokerId (0): the reader returns to the master.
            n = len(spy.addrs)
            wait_for(lambda: master.addr in spy.addrs[n:], 20, "a pull to the master once caught up")
        finally:
            c.shutdown()
    finally:
        topo.cleanup()
