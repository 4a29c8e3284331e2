"""The disk differential, both directions: a store the reference broker wrote (stopped cleanly, or killed with
-9 under load) is opened by Apache RocketMQ 4.9.8, and a store RocketMQ wrote is opened by the reference broker.
The other broker must serve every acknowledged message at the queue offset its send was answered with, read
each record at its commit-log offset (VIEW_MESSAGE_BY_ID), find messages by key (QUERY_MESSAGE through the
index file), and keep writing where the log and the queues left off. This is the test that says the formats
are RocketMQ's, not merely RocketMQ-like. Skipped, with the reason, without the distribution or Java.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.sampler import messages_at
from harness.launcher import BrokerProcess, Topology
from harness.rocketmq import BrokerImpl
from reference_broker.client import ClientConfig, Message, Producer, PullConsumer, PullStatus
from reference_broker.common.record import decode_message_id
from reference_broker.tools import admin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOPIC = "ExchangeTopic"
QUEUES = 4
N = 300
CONF = {"mappedFileSizeCommitLog": 64 << 20, "maxHashSlotNum": 100_000, "maxIndexNum": 400_000}
Sent = dict[str, tuple[int, int, int]]  # key -> (queue id, queue offset, commit-log offset)


def _send(topo: Topology, broker: BrokerProcess, prefix: str, n: int) -> Sent:
    admin.update_topic(topo.namesrv_addr, TOPIC, QUEUES, QUEUES, broker_addr=broker.addr)
    cfg = ClientConfig(topo.namesrv_addr, f"exchange-{prefix}", poll_name_server_interval_s=1.0)
    out: Sent = {}
    with Producer(f"EXCHANGE_{prefix.upper()}_PG", topo.namesrv_addr, client_config=cfg) as p:
        for i in range(n):
            key = f"{prefix}{i}"
            r = p.send(Message(TOPIC, f"body-{key}".encode() * (1 + i % 7), tags=f"T{i % 3}", keys=key))
            assert r.offset_msg_id is not None
            out[key] = (r.message_queue.queue_id, r.queue_offset, decode_message_id(r.offset_msg_id)[2])
    return out


def _pull_all(topo: Topology, group: str, want: int, deadline_s: float = 30.0) -> dict[str, tuple[int, int, bytes]]:
    cfg = ClientConfig(topo.namesrv_addr, f"exchange-pull-{group}")
    got: dict[str, tuple[int, int, bytes]] = {}
    deadline = time.monotonic() + deadline_s
    with PullConsumer(group, topo.namesrv_addr, client_config=cfg) as c:
        queues = sorted(c.fetch_message_queues(TOPIC), key=lambda mq: mq.queue_id)
        while len(got) < want and time.monotonic() < deadline:
            for mq in queues:
                offset = 0
                while True:
                    r = c.pull(mq, "*", offset, 32)
                    if r.pull_status is not PullStatus.FOUND:
                        break
                    for m in r.msg_found_list:
                        got[m.keys] = (m.queue_id, m.queue_offset, m.body)
                    offset = r.next_begin_offset
            if len(got) < want:
                time.sleep(0.2)  # 4.9.8 builds the consume queue a moment after the ack
    return got


def _serves(topo: Topology, broker: BrokerProcess, sent: Sent, group: str) -> None:
    got = _pull_all(topo, group, len(sent))
    assert {k: v[:2] for k, v in got.items()} == {k: v[:2] for k, v in sent.items()}
    assert all(body.startswith(f"body-{k}".encode()) for k, (_, _, body) in got.items())
    sample = sorted(sent)[:: max(1, len(sent) // 25)]
    found = messages_at(broker.addr, [sent[k][2] for k in sample])
    assert [found[sent[k][2]].keys if found[sent[k][2]] else None for k in sample] == sample  # type: ignore[union-attr]
    for key in sample[:10]:
        rows = admin.query_msg_by_key(topo.namesrv_addr, TOPIC, key)
        assert [r["keys"] for r in rows if r["keys"] == key] == [key], (key, rows)


def _exchange(tmp_path: Path, writer: BrokerImpl, reader: BrokerImpl, kill: bool) -> None:
    store = tmp_path / "store"
    with Topology(tmp_path / "writer", broker_conf=CONF, brokers=0, impl=writer) as first:
        b = first.add_broker("broker-a", extra={"storePathRootDir": str(store)})
        sent = _send(first, b, "w", N)
        if kill:
            b.kill()
            assert (store / "abort").exists()
        else:
            assert b.stop() is not None
    with Topology(tmp_path / "reader", broker_conf=CONF, brokers=0, impl=reader) as second:
        b = second.add_broker("broker-a", extra={"storePathRootDir": str(store)})
        _serves(second, b, sent, "EXCHANGE_CG1")
        more = _send(second, b, "r", 40)
        for q in range(QUEUES):  # each queue goes on where the first broker left it
            before = max((o for qid, o, _ in sent.values() if qid == q), default=-1)
            after = sorted(o for qid, o, _ in more.values() if qid == q)
            assert after == list(range(before + 1, before + 1 + len(after))), (q, before, after)
        _serves(second, b, {**sent, **more}, "EXCHANGE_CG2")


@pytest.fixture(autouse=True)
def _needs_rocketmq(rocketmq_home: Path) -> None:
    """Skipped, with the reason, when there is no distribution (tests/conftest.py)."""


@pytest.mark.parametrize("kill", [False, True], ids=["clean-stop", "kill-9"])
def test_rocketmq_serves_a_store_the_reference_broker_wrote(tmp_path: Path, kill: bool) -> None:
    _exchange(tmp_path, "reference", "rocketmq", kill)


@pytest.mark.parametrize("kill", [False, True], ids=["clean-stop", "kill-9"])
def test_the_reference_broker_serves_a_store_rocketmq_wrote(tmp_path: Path, kill: bool) -> None:
    _exchange(tmp_path, "rocketmq", "reference", kill)
