"""A slave refuses topic and subscription-group updates as 4.9.8's AdminBrokerProcessor.validateSlave does
(SYSTEM_ERROR, the same remark): its tables are the master's, copied by SlaveSynchronize. The same requests go
to both implementations' slaves; the master of each still takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.launcher import BrokerProcess, Topology
from reference_broker.broker.admin_processor import SLAVE_REFUSAL_REMARK
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request

pytestmark = pytest.mark.e2e

SMALL_FILES = {"mappedFileSizeCommitLog": 64 * 1024 * 1024, "mappedFileSizeConsumeQueue": 6000 * 20}
TOPIC_FIELDS = {"topic": "SlaveRefusesT", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2",
                "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
UPDATES = [
    (RequestCode.UPDATE_AND_CREATE_TOPIC, TOPIC_FIELDS, b""),
    (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SlaveRefusesT"}, b""),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps({"groupName": "SlaveRefusesG"}).encode()),
]


def _answers(b: BrokerProcess) -> list[tuple[int, str | None]]:
    with RemotingClient.from_addr(b.addr, timeout_s=10) as c:
        out = []
        for code, fields, body in UPDATES:
            r: RemotingCommand = c.invoke(create_request(code, dict(fields), body))
            out.append((r.code, r.remark))
        return out


def _check(topo: Topology) -> None:
    master, slave = topo.brokers
    assert slave.is_slave
    assert _answers(slave) == [(ResponseCode.SYSTEM_ERROR, SLAVE_REFUSAL_REMARK)] * len(UPDATES)
    assert [code for code, _ in _answers(master)] == [ResponseCode.SUCCESS] * len(UPDATES)
    # and the slave still serves: a read-only admin request after the refusals
    with RemotingClient.from_addr(slave.addr, timeout_s=10) as c:
        assert c.invoke(create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {})).code == ResponseCode.SUCCESS


def test_reference_slave_refuses_updates(tmp_path: Path) -> None:
    with Topology(tmp_path / "t", broker_conf=SMALL_FILES, slaves=1) as topo:
        _check(topo)


@pytest.mark.slow
def test_rocketmq_slave_refuses_updates(tmp_path: Path, rocketmq_home: Path) -> None:
    with Topology(tmp_path / "rmq", broker_conf=SMALL_FILES, impl="rocketmq", rocketmq_home=rocketmq_home,
                  slaves=1) as topo:
        _check(topo)
        topo.kill()
