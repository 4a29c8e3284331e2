"""Transactional messages end to end, through real processes (a name server and a reference broker): the
client's TransactionProducer, the broker's half messages, END_TRANSACTION and check-back, a push consumer on
the real topic. The check service runs every 500 ms with a 1 s transaction timeout."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.launcher import BrokerProcess, Topology
from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    LocalTransactionState,
    Message,
    MessageExt,
    PushConsumer,
    TransactionProducer,
)
from reference_broker.common import transaction as tx
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.tools import admin
from tests.client.helpers import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TX_CONF = {"transactionCheckInterval": 500, "transactionTimeOut": 1000, "transactionCheckMax": 4,
           "flushConsumerOffsetInterval": 60_000}  # progress reaches the disk only as the check service writes it


class Listener:
    """A local "database": the key's fate decided by its prefix. ``commit-``/``rollback-``: at once;
    ``unknown-commit-``/``unknown-rollback-``: UNKNOW first, the decision on check-back; ``open-``: UNKNOW for
    as long as ``open_answer`` says so."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked: Counter[str] = Counter()
        self.open_answer = LocalTransactionState.UNKNOW

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        key = msg.keys or ""
        if key.startswith("commit-"):
            return LocalTransactionState.COMMIT_MESSAGE
        if key.startswith("rollback-"):
            return LocalTransactionState.ROLLBACK_MESSAGE
        if key.startswith("raise-"):
            raise RuntimeError("the local transaction failed")
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        key = msg.keys
        with self.lock:
            self.checked[key] += 1
        if key.startswith("unknown-commit-"):
            return LocalTransactionState.COMMIT_MESSAGE
        if key.startswith(("unknown-rollback-", "raise-")):
            return LocalTransactionState.ROLLBACK_MESSAGE
        return self.open_answer


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.keys: Counter[str] = Counter()
        self.msgs: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
        with self.lock:
            for m in msgs:
                self.keys[m.keys] += 1
                self.msgs.append(m)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


@pytest.fixture
def topo(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Topology]:
    """A topology per test: TX_CONF with the test's overrides (indirect parametrization)."""
    with Topology(tmp_path, broker_conf={**TX_CONF, **getattr(request, "param", {})}) as t:
        yield t


LONG_CHECKS = pytest.mark.parametrize("topo", [{"transactionCheckMax": 100}], indirect=True, ids=["checkMax100"])


def _cfg(topo: Topology, name: str) -> ClientConfig:
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0,
                        heartbeat_broker_interval_s=1.0)



def _consumer(topo: Topology, topic: str, received: Received) -> PushConsumer:
    c = PushConsumer(f"CG_{topic}", topo.namesrv_addr, client_config=_cfg(topo, f"c-{topic}"),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic, "*")
    c.register_message_listener(received)
    c.start()
    return c


def _half_count(broker: BrokerProcess) -> int:
    with RemotingClient.from_addr(broker.addr, timeout_s=5) as c:
        r = c.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": tx.HALF_TOPIC, "queueId": "0"}))
    assert r.code == ResponseCode.SUCCESS
    return int(r.ext_fields["offset"])


def test_committed_delivered_rolled_back_never_unknown_resolved_by_check_back(topo: Topology) -> None:
    topic = "TxE2E"
    admin.update_topic(topo.namesrv_addr, topic, 4, 4, broker_addr=topo.brokers[0].addr)
    listener, received = Listener(), Received()
    consumer = _consumer(topo, topic, received)
    prefixes = ["commit-", "rollback-", "unknown-commit-", "unknown-rollback-", "open-", "raise-"]
    producer = TransactionProducer("TX_E2E_PG", topo.namesrv_addr, listener, client_config=_cfg(topo, "p"))
    producer.start()
    try:
        states = {}
        for p in prefixes:
            for i in range(5):
                r = producer.send_message_in_transaction(Message(topic, f"{p}{i}".encode(), keys=f"{p}{i}"))
                states[f"{p}{i}"] = r.local_transaction_state
        assert states["commit-0"] is LocalTransactionState.COMMIT_MESSAGE
        assert states["raise-0"] is LocalTransactionState.UNKNOW, "a failed local transaction is UNKNOW"
        want = {f"{p}{i}" for p in ("commit-", "unknown-commit-") for i in range(5)}
        wait_for(lambda: set(received.keys) >= want, 30, "every committed message delivered")
        # the open ones: checked transactionCheckMax (4) times, then discarded; never delivered
        wait_for(lambda: all(listener.checked[f"open-{i}"] >= 4 for i in range(5)), 30, "4 checks of each open one")
        time.sleep(1.5)  # a few more check runs: nothing else may arrive
    finally:
        producer.shutdown()
        consumer.shutdown()
    assert set(received.keys) == want, "rolled back, raised-then-rolled-back and never-resolved: never delivered"
    assert all(n == 1 for n in received.keys.values()), f"each committed message once: {received.keys}"
    assert all(listener.checked[f"open-{i}"] == 4 for i in range(5)), "at most transactionCheckMax checks"
    assert all(listener.checked[f"commit-{i}"] == 0 for i in range(5)), "resolved at once: never checked"
    assert all(listener.checked[f"unknown-commit-{i}"] == 1 for i in range(5))
    m = next(m for m in received.msgs if m.keys == "unknown-commit-0")
    assert (m.topic, m.body, m.properties["TRANSACTION_CHECK_TIMES"]) == (topic, b"unknown-commit-0", "1")


@LONG_CHECKS
def test_half_messages_are_never_visible_on_the_real_topic(topo: Topology) -> None:
    topic = "TxInvisible"
    admin.update_topic(topo.namesrv_addr, topic, 2, 2, broker_addr=topo.brokers[0].addr)
    listener, received = Listener(), Received()
    consumer = _consumer(topo, topic, received)
    producer = TransactionProducer("TX_INV_PG", topo.namesrv_addr, listener, client_config=_cfg(topo, "p2"))
    producer.start()
    try:
        for i in range(10):
            producer.send_message_in_transaction(Message(topic, b"x", keys=f"open-{i}"))
        wait_for(lambda: _half_count(topo.brokers[0]) >= 10, 30, "10 half messages stored")
        # checks come and go (each appends a copy to the half queue); the consumer is on both queues by then
        wait_for(lambda: all(listener.checked[f"open-{i}"] >= 3 for i in range(10)), 30, "3 checks of each")
        assert received.keys == Counter()
        listener.open_answer = LocalTransactionState.COMMIT_MESSAGE
        wait_for(lambda: len(received.keys) == 10, 30, "the 10 committed on check-back delivered")
    finally:
        producer.shutdown()
        consumer.shutdown()


@LONG_CHECKS
@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_a_broker_restart_neither_redelivers_committed_nor_forgets_open_transactions(topo: Topology,
                                                                                      how: str) -> None:
    topic = f"TxRestart{how}"
    broker = topo.brokers[0]
    admin.update_topic(topo.namesrv_addr, topic, 2, 2, broker_addr=broker.addr)
    listener, received = Listener(), Received()
    consumer = _consumer(topo, topic, received)
    producer = TransactionProducer(f"TX_RS_{how}", topo.namesrv_addr, listener, client_config=_cfg(topo, f"p{how}"))
    producer.start()
    try:
        for i in range(5):
            producer.send_message_in_transaction(Message(topic, b"c", keys=f"commit-{i}"))
            producer.send_message_in_transaction(Message(topic, b"u", keys=f"unknown-commit-{i}"))
            producer.send_message_in_transaction(Message(topic, b"o", keys=f"open-{i}"))
        want_before = {f"{p}{i}" for p in ("commit-", "unknown-commit-") for i in range(5)}
        wait_for(lambda: set(received.keys) >= want_before, 30, "the committed ones delivered")
        wait_for(lambda: all(listener.checked[f"open-{i}"] >= 1 for i in range(5)), 30, "a check of each open one")
        if how == "kill9":
            broker.kill()
            broker.start()
        else:
            broker.restart()
        checked_at_restart = Counter(listener.checked)
        # the open ones are asked about again after the restart; now they commit
        wait_for(lambda: all(listener.checked[f"open-{i}"] > checked_at_restart[f"open-{i}"] for i in range(5)),
                 40, "a check of each open transaction after the restart")
        listener.open_answer = LocalTransactionState.COMMIT_MESSAGE
        want = want_before | {f"open-{i}" for i in range(5)}
        wait_for(lambda: set(received.keys) >= want, 40, "every committed message delivered")
        time.sleep(2.0)  # more check runs: nothing resolved comes back
    finally:
        producer.shutdown()
        consumer.shutdown()
    assert set(received.keys) == want
    # A consumer may see a message again after the broker restart (its offsets are committed every few
    # seconds); what must not happen is a second copy of a committed message on the real topic.
    with RemotingClient.from_addr(broker.addr, timeout_s=5) as c:
        total = 0
        for q in range(2):
            r = c.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}))
            total += int(r.ext_fields["offset"])
    assert total == 15, "each transaction committed into the real topic exactly once"
    assert all(listener.checked[f"commit-{i}"] == 0 for i in range(5)), "a committed one was checked after restart"
    assert all(listener.checked[f"unknown-commit-{i}"] == 1 for i in range(5)), "a resolved one checked again"
