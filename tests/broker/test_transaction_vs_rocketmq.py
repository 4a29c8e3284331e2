"""Differential: the same transactional requests to the reference broker and to Apache RocketMQ 4.9.8 (the
distribution's broker), and what each answers and stores: the half message, a commit and what the committed
message's properties keep, a second END_TRANSACTION for the same half message, a commit from another producer
group, a rollback, UNKNOW, bad headers. Skipped with the reason when there is no distribution or no java."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.launcher import Topology
from reference_broker.common import message as mc
from reference_broker.common import transaction as tx
from reference_broker.common.record import decode_message_id, decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.remoting.errors import RemotingTimeoutError
from reference_broker.tools import admin
from tests.broker.broker_helpers import pull_request, send_request

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC, PG = "TxDiffT", "TX_DIFF_PG"
# Properties every stored message has whose values differ run to run (or by implementation: the whole-record
# CRC is the reference broker's own).
VOLATILE = {"UNIQ_KEY", "__CRC32#"}


@pytest.fixture(scope="module", params=["reference", "rocketmq"])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    impl = request.param
    kw: dict[str, Any] = {}
    if impl == "rocketmq":
        kw["rocketmq_home"] = request.getfixturevalue("rocketmq_home")
    # No check-backs during this module: the check interval is far beyond its run.
    conf = {"transactionCheckInterval": 600_000}
    with Topology(tmp_path_factory.mktemp(impl), broker_conf=conf, impl=impl, **kw) as topo:
        admin.update_topic(topo.namesrv_addr, TOPIC, 2, 2, broker_addr=topo.brokers[0].addr)
        yield impl, topo.brokers[0].addr
        topo.kill()


def _client(addr: str) -> RemotingClient:
    return RemotingClient.from_addr(addr, timeout_s=5)


def _prepare(c: RemotingClient, body: bytes, **props: str) -> tuple[int, int, int]:
    """A half message to queue 1; (queue offset, commit-log offset, reply code)."""
    all_props = {"TRAN_MSG": "true", "PGROUP": PG, "TAGS": "tagT", "KEYS": "key1", "WAIT": "true",
                 "UNIQ_KEY": f"U{time.monotonic_ns()}", **props}
    r = c.invoke(send_request(TOPIC, body, 1, all_props, producerGroup=PG, sysFlag=str(mc.TRANSACTION_PREPARED_TYPE)))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(r.ext_fields["queueOffset"]), decode_message_id(r.ext_fields["msgId"])[2], r.code


def _end(c: RemotingClient, queue_offset: int, offset: int, kind: int,
         group: str = PG) -> tuple[int, str | None] | None:
    """A two-way END_TRANSACTION: (code, remark), or None when the broker does not answer."""
    cmd = create_request(RequestCode.END_TRANSACTION, tx.end_transaction_header(group, queue_offset, offset, kind, "m"))
    try:
        r = c.invoke(cmd, timeout_s=1.5)
    except RemotingTimeoutError:
        return None
    return r.code, r.remark


def _real(c: RemotingClient) -> list[Any]:
    """Every message on the real topic's queue 1, once dispatch has caught up."""
    time.sleep(0.5)  # 4.9.8 dispatches after the reply (ROCKETMQ_FACTS §10)
    r = c.invoke(pull_request(TOPIC, 1, 0, group="TX_DIFF_CG", sys_flag=4))
    return decode_messages(r.body) if r.code == ResponseCode.SUCCESS else []


def _op_max(c: RemotingClient) -> int:
    r = c.invoke(create_request(RequestCode.GET_MAX_OFFSET, {"topic": tx.OP_TOPIC, "queueId": "0"}))
    return int(r.ext_fields.get("offset", "0")) if r.code == ResponseCode.SUCCESS else -1


def _view(c: RemotingClient, offset: int) -> Any:
    r = c.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}))
    assert r.code == ResponseCode.SUCCESS, r.remark
    [m] = decode_messages(r.body)
    return m


def _observe(addr: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with _client(addr) as c:
        ops0 = _op_max(c)
        q, off, _ = _prepare(c, b"one", FLAGP="x")
        half = _view(c, off)
        seen["half"] = (half.topic, half.queue_id, mc.transaction_value(half.sys_flag),
                        sorted(set(half.properties) - VOLATILE), half.properties["REAL_TOPIC"],
                        half.properties["REAL_QID"])
        seen["invisible"] = _real(c)
        seen["commit"] = _end(c, q, off, tx.COMMIT)
        [m] = _real(c)
        seen["committed"] = (m.topic, m.queue_id, m.body, mc.transaction_value(m.sys_flag),
                             sorted(set(m.properties) - VOLATILE), m.prepared_transaction_offset == off,
                             m.properties["UNIQ_KEY"] == half.properties["UNIQ_KEY"])
        seen["ops_after_commit"] = _op_max(c) - ops0
        seen["commit_again"] = _end(c, q, off, tx.COMMIT)
        seen["rollback_after_commit"] = _end(c, q, off, tx.ROLLBACK)
        seen["real_after_repeats"] = [x.body for x in _real(c)]
        seen["ops_after_repeats"] = _op_max(c) - ops0

        q2, off2, _ = _prepare(c, b"two")
        seen["other_group"] = _end(c, q2, off2, tx.COMMIT, group="SOMEONE_ELSE")
        seen["wrong_table_offset"] = _end(c, q2 + 100, off2, tx.COMMIT)
        seen["unknow"] = _end(c, q2, off2, tx.UNKNOW)
        seen["rollback"] = _end(c, q2, off2, tx.ROLLBACK)
        seen["commit_after_rollback"] = _end(c, q2, off2, tx.COMMIT)
        seen["real_at_end"] = [x.body for x in _real(c)]
        seen["ops_at_end"] = _op_max(c) - ops0
        seen["bad_offset"] = _end(c, q2, 1 << 40, tx.COMMIT)
    return seen


_SEEN: dict[str, dict[str, Any]] = {}


def test_observe(broker: tuple[str, str]) -> None:
    impl, addr = broker
    _SEEN[impl] = _observe(addr)


def test_the_reference_broker_answers_and_stores_as_rocketmq_does() -> None:
    if set(_SEEN) != {"reference", "rocketmq"}:
        pytest.skip("needs both observations (test_observe for each implementation)")
    ours, theirs = _SEEN["reference"], _SEEN["rocketmq"]
    print(theirs)  # what 4.9.8 did, in the log of a failing run
    assert ours == theirs
