"""The client's TransactionProducer against both brokers — the reference broker and Apache RocketMQ 4.9.8 (the
distribution's) — with the same listener: commits, rollbacks, and UNKNOW answered twice on check-back before a
commit. What each broker asks (the checks' TRANSACTION_CHECK_TIMES, their real topic) and what a consumer then
receives (bodies, the properties a committed message keeps) must be the same. Skipped, with the reason, without
the distribution or java."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.launcher import Topology
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
from tests.client.helpers import create_topic, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "TxClientDiff"
CONF = {"transactionCheckInterval": 1000, "transactionTimeOut": 1000, "transactionCheckMax": 15}
VOLATILE = {"UNIQ_KEY", "__CRC32#", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME"}


class Listener:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checks: dict[str, list[tuple[str, str, int]]] = {}

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return {"c": LocalTransactionState.COMMIT_MESSAGE, "r": LocalTransactionState.ROLLBACK_MESSAGE}.get(
            (msg.keys or "?")[0], LocalTransactionState.UNKNOW)

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """The truth of the "database": c committed, r rolled back, u undecided until its third check. (A loaded
        broker may check a c or r too, when its END_TRANSACTION came later than transactionTimeOut.)"""
        with self.lock:
            seen = self.checks.setdefault(msg.keys, [])
            seen.append((msg.properties.get("TRANSACTION_CHECK_TIMES", ""), msg.topic, msg.queue_id))
            n = len(seen)
        if msg.keys.startswith("u"):
            return LocalTransactionState.COMMIT_MESSAGE if n >= 3 else LocalTransactionState.UNKNOW
        return self.execute_local_transaction(Message(msg.topic, keys=msg.keys), None)



def _run(impl: str, root: Path, rocketmq_home: Path | None) -> dict[str, Any]:
    kw: dict[str, Any] = {"impl": impl}
    if rocketmq_home is not None:
        kw["rocketmq_home"] = rocketmq_home
    with Topology(root, broker_conf=CONF, **kw) as topo:
        try:
            # and wait for its route: a producer that finds none sends by the default topic's route (4 queues),
            # which a 4.9.8 broker refuses for a topic it knows with 1 ("queueId[3] is illegal"; seen in CI)
            create_topic(topo, TOPIC, 1)
            cfg = {"poll_name_server_interval_s": 1.0, "rebalance_interval_s": 1.0, "heartbeat_broker_interval_s": 2.0}
            listener = Listener()
            got: list[MessageExt] = []
            lock = threading.Lock()

            def consume(msgs: list[MessageExt], _ctx: object) -> ConsumeConcurrentlyStatus:
                with lock:
                    got.extend(msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer = PushConsumer("TX_DIFF_CG", topo.namesrv_addr, client_config=ClientConfig(
                topo.namesrv_addr, f"c-{impl}", **cfg), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe(TOPIC, "*")
            consumer.register_message_listener(consume)
            consumer.start()
            producer = TransactionProducer("TX_DIFF_PG", topo.namesrv_addr, listener,
                                           client_config=ClientConfig(topo.namesrv_addr, f"p-{impl}", **cfg))
            producer.start()
            try:
                states = [producer.send_message_in_transaction(Message(TOPIC, k.encode(), tags="T", keys=k)
                                                               ).local_transaction_state.name
                          for k in ("c1", "r1", "u1", "c2", "u2")]
                wait_for(lambda: {m.keys for m in got} >= {"c1", "c2", "u1", "u2"}, 90, "the four committed")
                time.sleep(3.0)  # more check runs: nothing else may come
            finally:
                producer.shutdown()
                consumer.shutdown()
            first: dict[str, MessageExt] = {}
            for m in got:
                first.setdefault(m.keys, m)  # a late END_TRANSACTION can make a second copy (at-least-once)
            return {
                "states": states,
                "received": sorted(first),
                "checks": {k: v for k, v in sorted(listener.checks.items()) if k.startswith("u")},
                "committed_props": {k: sorted(set(m.properties) - VOLATILE) for k, m in sorted(first.items())},
                "check_times_kept": first["u1"].properties.get("TRANSACTION_CHECK_TIMES"),
                "bodies": sorted(m.body for m in first.values()),
            }
        finally:
            topo.kill()


def test_our_transaction_producer_behaves_the_same_against_both_brokers(tmp_path: Path, rocketmq_home: Path) -> None:
    theirs = _run("rocketmq", tmp_path / "rmq", rocketmq_home)
    ours = _run("reference", tmp_path / "ref", None)
    print(theirs)
    assert theirs["received"] == ["c1", "c2", "u1", "u2"], "4.9.8 served our client"
    assert theirs["checks"]["u1"] == [("1", TOPIC, 0), ("2", TOPIC, 0), ("3", TOPIC, 0)]
    assert ours == theirs
