"""Lookups by key and by message id survive a kill -9 of the broker (real name server and broker processes).

The broker takes a checkpoint round after most messages are stored (a short flushConsumeQueueThoroughInterval
stands in for RocketMQ's 60 s), so abnormal recovery replays only from there. Before the index safe point,
the index file being written was destroyed on that restart and nothing rebuilt it: 0 of 300 messages were
found by key or by UNIQ_KEY, though all were still pullable.
"""

from __future__ import annotations

import time

import pytest

from harness.launcher import Topology
from reference_broker.client.config import ClientConfig
from reference_broker.client.message import Message, SendStatus
from reference_broker.client.producer import Producer
from reference_broker.tools import admin

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "IdxKill9"
N = 300
BEFORE_CHECKPOINT = 250


@pytest.fixture
def topo(tmp_path):
    with Topology(tmp_path / "topo", broker_conf={"flushConsumeQueueThoroughInterval": "1000"}) as t:
        yield t


def _found_by_key(namesrv: str, key: str, want_uniq: str) -> bool:
    return any(m["msgId"] == want_uniq for m in admin.query_msg_by_key(namesrv, TOPIC, key))


def test_every_message_is_found_by_key_and_id_after_kill9(topo: Topology) -> None:
    sent: list[tuple[str, str, str]] = []  # (key, UNIQ_KEY, offsetMsgId)
    with Producer("PG_idx_k9", "", client_config=ClientConfig(topo.namesrv_addr, "idxk9")) as p:
        for i in range(N):
            if i == BEFORE_CHECKPOINT:
                time.sleep(3.0)  # at least one thorough flush round: the checkpoint moves past these
            key = f"order-{i:05d}"
            r = p.send(Message(TOPIC, f"body-{i}".encode(), keys=key))
            assert r.send_status is SendStatus.SEND_OK and r.offset_msg_id is not None
            sent.append((key, r.msg_id, r.offset_msg_id))
    b = topo.brokers[0]
    b.kill()
    assert (b.store_root / "abort").exists()
    b.start()
    ns = topo.namesrv_addr
    missing_key = [k for k, u, _ in sent if not _found_by_key(ns, k, u)]
    missing_uniq = [u for _, u, _ in sent if not _found_by_key(ns, u, u)]
    missing_id = [o for _, u, o in sent if admin.query_msg_by_id(o)["msgId"] != u]
    found = (N - len(missing_key), N - len(missing_uniq), N - len(missing_id))
    assert found == (N, N, N), f"found by key / UNIQ_KEY / offsetMsgId: {found}"
