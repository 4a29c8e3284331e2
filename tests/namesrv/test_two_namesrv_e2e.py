"""Two independent name servers (real processes): a broker with ``namesrvAddr=a;b`` registers with each, and
clients given ``a;b`` keep resolving routes, sending and consuming after the first one is killed."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.launcher import (
    BOOT_LINE_BROKER,
    BOOT_LINE_NAMESRV,
    BrokerProcess,
    Process,
    env_broker_conf,
    write_broker_conf,
)
from harness.ports import free_port
from reference_broker.client.config import ClientConfig
from reference_broker.client.instance import MQClientInstance, get_instance
from reference_broker.client.message import ConsumeConcurrentlyStatus, ConsumeFromWhere, Message, SendStatus
from reference_broker.client.producer import Producer
from reference_broker.client.push_consumer import PushConsumer
from reference_broker.client.route import TopicRouteData
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.remoting.errors import RemotingError
from tests.client.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

TOPIC = "E2ETwoNamesrv"
QUEUES = 4


@dataclass
class TwoNamesrvs:
    first: Process
    second: Process
    first_addr: str
    second_addr: str
    broker: BrokerProcess

    @property
    def addr_list(self) -> str:
        return f"{self.first_addr};{self.second_addr}"


def start_namesrv(root: Path, name: str) -> tuple[Process, str]:
    port = free_port()
    proc = Process(name, [sys.executable, "-m", "reference_broker", "namesrv", "--host", "127.0.0.1", "-p", str(port)],
                   root / f"{name}.log", BOOT_LINE_NAMESRV)
    proc.start()
    return proc, f"127.0.0.1:{port}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TwoNamesrvs]:
    procs: list[Process] = []
    try:
        first, first_addr = start_namesrv(tmp_path, "namesrv-1")
        procs.append(first)
        second, second_addr = start_namesrv(tmp_path, "namesrv-2")
        procs.append(second)
        port = free_port()
        store_root = tmp_path / "broker-a" / "store"
        store_root.mkdir(parents=True)
        conf = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
                "listenPort": str(port), "storePathRootDir": str(store_root), "brokerIP1": "127.0.0.1",
                **env_broker_conf(), "namesrvAddr": f"{first_addr};{second_addr}"}  # from the file, no -n
        conf_path = tmp_path / "broker-a" / "broker.conf"
        write_broker_conf(conf_path, conf)
        broker = BrokerProcess("broker-a", [sys.executable, "-m", "reference_broker", "broker", "--host", "127.0.0.1",
                                            "-c", str(conf_path)],
                               tmp_path / "broker-a.log", BOOT_LINE_BROKER, port=port, store_root=store_root, conf=conf)
        procs.insert(0, broker)  # stopped first, while the name servers can still take its unregistration
        broker.start()
        yield TwoNamesrvs(first, second, first_addr, second_addr, broker)
    finally:
        for proc in procs:
            proc.stop()


def route_from(namesrv_addr: str, topic: str) -> TopicRouteData | None:
    try:
        with RemotingClient.from_addr(namesrv_addr) as client:
            answer = client.invoke(create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    except RemotingError:
        return None
    return TopicRouteData.from_json(answer.body) if answer.code == ResponseCode.SUCCESS else None


def create_topic(broker: BrokerProcess, topic: str) -> None:
    with RemotingClient.from_addr(broker.addr) as client:
        answer = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def first_namesrv_first(name: str, namesrvs: str) -> MQClientInstance:
    """The client instance a producer or consumer with this config will share, asking the first name server of
    the list first (RocketMQ starts at a random one, which would exercise the failover only half the time)."""
    instance = get_instance(ClientConfig(namesrvs, name))
    instance._namesrv_index = 0
    return instance


def test_clients_fail_over_to_the_second_name_server(cluster: TwoNamesrvs) -> None:
    create_topic(cluster.broker, TOPIC)

    def both_route() -> bool:
        routes = [route_from(addr, TOPIC) for addr in (cluster.first_addr, cluster.second_addr)]
        return all(r is not None and sum(q.write_queue_nums for q in r.queue_datas) == QUEUES for r in routes)

    wait_for(both_route, 10, "the route of the topic from both name servers")
    first, second = route_from(cluster.first_addr, TOPIC), route_from(cluster.second_addr, TOPIC)
    assert first is not None and second is not None
    assert first.normalized() == second.normalized()
    assert first.broker_datas[0].broker_addrs == {0: cluster.broker.addr}

    old_instance = first_namesrv_first("two-ns-old", cluster.addr_list)
    with Producer("PG_two_ns_old", "", client_config=old_instance.config) as old:
        for i in range(5):
            assert old.send(Message(TOPIC, f"before{i}".encode())).send_status is SendStatus.SEND_OK

        cluster.first.kill()  # SIGKILL
        assert route_from(cluster.first_addr, TOPIC) is None
        # A client that knew the route keeps refreshing it (through the second name server now).
        assert old_instance.update_topic_route(TOPIC)
        assert old_instance._namesrv_index == 1

        new_instance = first_namesrv_first("two-ns-new", cluster.addr_list)
        with Producer("PG_two_ns_new", "", client_config=new_instance.config) as new:
            for i in range(5):
                result = new.send(Message(TOPIC, f"after{i}".encode()))
                assert result.send_status is SendStatus.SEND_OK
        assert new_instance._namesrv_index == 1  # the route came from the second name server

    sent = {f"{when}{i}".encode() for when in ("before", "after") for i in range(5)}
    got: set[bytes] = set()
    lock = threading.Lock()

    def listen(msgs, context):
        with lock:
            got.update(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer_instance = first_namesrv_first("two-ns-consumer", cluster.addr_list)
    consumer = PushConsumer("CG_two_ns", "", client_config=consumer_instance.config,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listen)
    consumer.start()
    try:
        wait_for(lambda: sent <= got, 15, "every message sent before and after the kill consumed")
        assert consumer_instance._namesrv_index == 1
    finally:
        consumer.shutdown()
