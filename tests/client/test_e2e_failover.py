"""The producer's synchronous retry and failover (sendDefaultImpl) against two real brokers serving one topic:
a retriable failure is tried 1 + retry_times_when_send_failed times, each attempt on another broker than the
one before, and a broker that is gone (SIGKILL) is skipped within one send."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from harness.launcher import Topology
from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import MQClientError
from reference_broker.client.message import Message, SendStatus
from reference_broker.client.producer import Producer
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request
from tests.client.helpers import create_topic

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

QUEUES = 4
PERM_READ_ONLY = 4  # PermName.PERM_READ
PERM_READ_WRITE = 6


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    """Overrides conftest's one-broker topology (``cfg`` then points at this name server)."""
    with Topology(tmp_path_factory.mktemp("failover"), brokers=2) as t:
        yield t


class SendSpy:
    """Wraps a producer's MQClientInstance.invoke and records (broker address, queue id) of every send request
    before it goes out, whatever the broker (or the connect) answers."""

    def __init__(self, producer: Producer) -> None:
        self.attempts: list[tuple[str, int]] = []
        instance = producer._running()
        real = instance.invoke

        def invoke(addr: str, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
            if cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
                self.attempts.append((addr, int(cmd.ext_fields["e"])))  # "e": queueId (header V2)
            return real(addr, cmd, timeout_s)

        instance.invoke = invoke  # type: ignore[method-assign]

    def take(self) -> list[tuple[str, int]]:
        out, self.attempts = self.attempts, []
        return out


def set_topic_perm(addr: str, topic: str, perm: int) -> None:
    with RemotingClient.from_addr(addr) as client:
        answer = client.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
            "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def cached_route_producer(cfg, topic: str, **kw) -> Producer:
    """A started producer that has the topic's route (both brokers writable) and never polls it again, so a
    later permission change on a broker shows up as a broker refusal, not as a smaller route."""
    producer = Producer(f"PG_{topic}", "", client_config=cfg(poll_name_server_interval_s=3600.0), **kw)
    producer.start()
    assert len({mq.broker_name for mq in producer.fetch_publish_message_queues(topic)}) == 2
    # The instance's first route refresh runs 10 ms after start (startScheduledTask); had it run after a test's
    # permission change reached the name server, the route would already lack the refusing broker. A marker
    # task scheduled later on the same one-thread scheduler has run only once that refresh is done.
    refreshed = threading.Event()
    instance = producer._instance
    assert instance is not None
    instance.scheduler.schedule(0.02, refreshed.set)
    assert refreshed.wait(30)
    return producer


@pytest.mark.parametrize("retries", [0, 2, 4])
def test_retriable_refusal_is_tried_one_plus_retry_times_alternating_brokers(cfg, topo, retries: int) -> None:
    topic = f"E2EFailRetry{retries}"
    create_topic(topo, topic, QUEUES)
    producer = cached_route_producer(cfg, topic, retry_times_when_send_failed=retries)
    try:
        for broker in topo.brokers:
            set_topic_perm(broker.addr, topic, PERM_READ_ONLY)  # the broker answers NO_PERMISSION (retriable)
        spy = SendSpy(producer)
        for _ in range(3):  # the round-robin start differs per send; the count must not
            with pytest.raises(MQClientError) as info:
                producer.send(Message(topic, b"refused"))
            attempts = spy.take()
            assert info.value.code == ResponseCode.NO_PERMISSION
            assert f"Send [{1 + retries}] times" in info.value.remark
            assert len(attempts) == 1 + retries
            addrs = [addr for addr, _ in attempts]
            assert all(a != b for a, b in itertools.pairwise(addrs)), attempts  # never one broker twice running
    finally:
        producer.shutdown()


def test_refusing_broker_is_skipped_within_the_same_send(cfg, topo) -> None:
    topic = "E2EFailOneRefuses"
    create_topic(topo, topic, QUEUES)
    refusing, good = topo.brokers
    producer = cached_route_producer(cfg, topic)
    try:
        set_topic_perm(refusing.addr, topic, PERM_READ_ONLY)
        spy = SendSpy(producer)
        failovers = 0
        for i in range(20):
            result = producer.send(Message(topic, f"m{i}".encode()))
            attempts = spy.take()
            assert result.send_status is SendStatus.SEND_OK
            assert result.message_queue.broker_name == good.name
            assert [addr for addr, _ in attempts] in ([good.addr], [refusing.addr, good.addr]), attempts
            failovers += len(attempts) == 2
        # round robin over both brokers' queues: about half the sends start on the refusing broker
        assert failovers >= 3
    finally:
        producer.shutdown()


def test_sync_sends_succeed_through_the_other_broker_after_sigkill(tmp_path) -> None:
    topic = "E2EFailKill"
    with Topology(tmp_path, brokers=2) as topo:
        create_topic(topo, topic, QUEUES)
        victim, survivor = topo.brokers
        # Default send timeout and retries; the producer never asks the name server again (which drops the dead
        # broker as soon as its connection closes), so its cached route keeps the dead broker: sends keep
        # starting on it and must fail over.
        config = ClientConfig(topo.namesrv_addr, "failover-kill", poll_name_server_interval_s=3600.0)
        with Producer("PG_failover_kill", "", client_config=config) as producer:
            before = {producer.send(Message(topic, f"before{i}".encode())).message_queue.broker_name
                      for i in range(8)}
            assert before == {victim.name, survivor.name}
            spy = SendSpy(producer)
            victim.kill()  # SIGKILL: no unregistration, connections reset
            slowest = 0.0
            for i in range(40):
                start = time.monotonic()
                result = producer.send(Message(topic, f"after{i}".encode()))
                slowest = max(slowest, time.monotonic() - start)
                assert result.send_status is SendStatus.SEND_OK
                assert result.message_queue.broker_name == survivor.name
            attempts = spy.take()
            to_victim = sum(addr == victim.addr for addr, _ in attempts)
            assert to_victim >= 3  # sends did start on the dead broker and were retried on the survivor
            assert len(attempts) == 40 + to_victim  # each failed attempt was followed by exactly one good one
            assert slowest < 2.0  # a refused connect fails over at once, inside the 3 s send timeout
