"""The project's client library against Apache RocketMQ 4.9.8's name server and broker: push consumption,
orderly sends and consumption, broadcasting, retry to the DLQ, and delay levels (the differential tests'
"clients" leg; RocketMQ's own Java client against the reference broker is test_java_client.py). Skipped, with
the reason, without the distribution or java.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.client import (
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    select_by_hash,
)
from reference_broker.tools import admin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LEVELS = " ".join(["1s"] * 18)  # short delay levels: a delayed message or a retry arrives within seconds


@pytest.fixture(scope="module")
def rmq(tmp_path_factory: pytest.TempPathFactory, rocketmq_home: Path) -> Iterator[Topology]:
    conf = {"mappedFileSizeCommitLog": 64 << 20, "messageDelayLevel": LEVELS}
    with Topology(tmp_path_factory.mktemp("rmq"), broker_conf=conf, impl="rocketmq",
                  rocketmq_home=rocketmq_home) as topo:
        yield topo
        topo.kill()


def _cfg(topo: Topology, name: str) -> ClientConfig:
    # a second (not 30 s and 20 s) to find a new topic's route and rebalance onto its queues
    return ClientConfig(topo.namesrv_addr, name, poll_name_server_interval_s=1.0, rebalance_interval_s=1.0)


def _topic(topo: Topology, topic: str, queues: int = 4) -> None:
    admin.update_topic(topo.namesrv_addr, topic, queues, queues, broker_addr=topo.brokers[0].addr)


def _wait(done: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def _push(topo: Topology, group: str, topic: str, listener: Callable[..., ConsumeConcurrentlyStatus],
          **kw: object) -> PushConsumer:
    c = PushConsumer(group, topo.namesrv_addr, client_config=_cfg(topo, f"c-{group}-{id(listener)}"),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw)  # type: ignore[arg-type]
    c.subscribe(topic, "*")
    c.register_message_listener(listener)
    c.start()
    return c


def test_push_consumption_and_delay_levels(rmq: Topology) -> None:
    _topic(rmq, "VsPush")
    got: dict[str, float] = {}
    lock = threading.Lock()

    def listener(msgs, _ctx):  # type: ignore[no-untyped-def]
        with lock:
            for m in msgs:
                got.setdefault(m.keys, time.monotonic())
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with Producer("VS_PUSH_PG", rmq.namesrv_addr, client_config=_cfg(rmq, "p-push")) as p:
        for i in range(20):
            p.send(Message("VsPush", f"m{i}".encode(), keys=f"k{i}"))
        sent_at = time.monotonic()
        p.send(Message("VsPush", b"later", keys="delayed", delay_time_level=1))
    c = _push(rmq, "VS_PUSH_CG", "VsPush", listener)
    try:
        _wait(lambda: len(got) == 21)
    finally:
        c.shutdown()
    assert set(got) == {f"k{i}" for i in range(20)} | {"delayed"}
    assert got["delayed"] - sent_at >= 0.9, "level 1 (1 s here) held the message back"


def test_orderly_sends_are_consumed_in_order_per_key(rmq: Topology) -> None:
    _topic(rmq, "VsOrderly")
    seen: dict[str, list[int]] = {"A": [], "B": [], "C": []}
    lock = threading.Lock()

    def listener(msgs, _ctx):  # type: ignore[no-untyped-def]
        with lock:
            for m in msgs:
                seen[m.keys].append(int(m.body))
        return ConsumeOrderlyStatus.SUCCESS

    with Producer("VS_ORDER_PG", rmq.namesrv_addr, client_config=_cfg(rmq, "p-order")) as p:
        for i in range(30):
            key = "ABC"[i % 3]
            p.send(Message("VsOrderly", str(i).encode(), keys=key), selector=select_by_hash, arg=key)
    c = PushConsumer("VS_ORDER_CG", rmq.namesrv_addr, client_config=_cfg(rmq, "c-order"),
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe("VsOrderly", "*")
    c.register_orderly_listener(listener)
    c.start()
    try:
        _wait(lambda: sum(map(len, seen.values())) == 30)
    finally:
        c.shutdown()
    assert seen == {k: [i for i in range(30) if "ABC"[i % 3] == k] for k in "ABC"}


def test_broadcasting_gives_every_consumer_every_message(rmq: Topology, tmp_path: Path) -> None:
    _topic(rmq, "VsBroadcast")
    got: list[set[str]] = [set(), set()]

    def make(i: int) -> Callable[..., ConsumeConcurrentlyStatus]:
        def listener(msgs, _ctx):  # type: ignore[no-untyped-def]
            got[i].update(m.keys for m in msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        return listener

    consumers = [_push(rmq, "VS_BCAST_CG", "VsBroadcast", make(i), message_model=MessageModel.BROADCASTING,
                       offset_store_dir=tmp_path / f"c{i}") for i in range(2)]
    try:
        time.sleep(2)  # both have their queues before anything is sent
        with Producer("VS_BCAST_PG", rmq.namesrv_addr, client_config=_cfg(rmq, "p-bcast")) as p:
            for i in range(10):
                p.send(Message("VsBroadcast", b"x", keys=f"b{i}"))
        _wait(lambda: all(len(g) == 10 for g in got))
    finally:
        for c in consumers:
            c.shutdown()
    assert got == [{f"b{i}" for i in range(10)}] * 2


def test_retries_end_in_the_dead_letter_queue(rmq: Topology) -> None:
    _topic(rmq, "VsRetry", 1)
    attempts: list[int] = []

    def always_later(msgs, _ctx):  # type: ignore[no-untyped-def]
        attempts.extend(m.reconsume_times for m in msgs)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    with Producer("VS_RETRY_PG", rmq.namesrv_addr, client_config=_cfg(rmq, "p-retry")) as p:
        p.send(Message("VsRetry", b"fail-me", keys="R1"))
    c = _push(rmq, "VS_RETRY_CG", "VsRetry", always_later, max_reconsume_times=2)
    try:
        _wait(lambda: len(attempts) >= 3)
        time.sleep(1.5)  # a fourth delivery would show up by now
    finally:
        c.shutdown()
    assert attempts == [0, 1, 2]
    with PullConsumer("VS_DLQ_READER", rmq.namesrv_addr, client_config=_cfg(rmq, "dlq")) as reader:
        deadline = time.monotonic() + 30
        while True:
            mqs = reader.fetch_message_queues("%DLQ%VS_RETRY_CG")
            r = reader.pull(sorted(mqs)[0], "*", 0, 32)
            if r.pull_status is PullStatus.FOUND or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert r.pull_status is PullStatus.FOUND
    (dead,) = r.msg_found_list
    assert dead.body == b"fail-me" and dead.keys == "R1"
