"""Names from the network that cannot be names (a NUL, a slash, too long) on a real broker process:
each request is refused with a RocketMQ code, dispatch of every topic goes on, and the store restarts.

Apache RocketMQ 4.9.8 answers the first request below with code 0 and then never dispatches another
record on any topic; this broker must not (see common/names.py).
"""

from __future__ import annotations

import time

import pytest

from harness.launcher import Topology
from reference_broker.common.record import decode_messages
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, json_dumps
from tests.broker.broker_helpers import pull_request, send_request

pytestmark = pytest.mark.e2e

BAD_GROUPS = ["a\0b", "a/../b", "x" * 10_000, "", "a@b", " "]


def _send_back(group: str, offset: int) -> object:
    return create_request(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(offset), "group": group, "delayLevel": "-1", "originMsgId": "", "originTopic": "T",
        "unitMode": "false", "maxReconsumeTimes": "16"})


def _pullable(c: RemotingClient, topic: str, body: bytes, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        offset = 0
        while True:
            r = c.invoke(pull_request(topic, 0, offset))
            if r.code != ResponseCode.SUCCESS:
                break
            if any(m.body == body for m in decode_messages(r.body)):
                return True
            offset = int(r.ext_fields["nextBeginOffset"])
        time.sleep(0.05)
    return False


def _phys_offset(c: RemotingClient, topic: str) -> int:
    assert _pullable(c, topic, b"first")
    r = c.invoke(pull_request(topic, 0, 0))
    return decode_messages(r.body)[0].commit_log_offset


def test_bad_consumer_group_in_send_back_is_refused_and_dispatch_goes_on(tmp_path):
    with Topology(tmp_path / "topo") as topo:
        broker = topo.brokers[0]
        with RemotingClient("127.0.0.1", broker.port, timeout_s=10) as c:
            assert c.invoke(send_request("HOSTILE_A", b"first")).code == ResponseCode.SUCCESS
            phys = _phys_offset(c, "HOSTILE_A")
            for group in BAD_GROUPS:
                r = c.invoke(_send_back(group, phys))
                assert r.code == ResponseCode.SYSTEM_ERROR, (group[:20], r.code, r.remark)
                assert "group" in (r.remark or ""), r.remark
            # dispatch of every topic goes on
            assert c.invoke(send_request("HOSTILE_B", b"after")).code == ResponseCode.SUCCESS
            assert _pullable(c, "HOSTILE_B", b"after")
            # the other name-bearing requests refuse the same names
            r = c.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "a\0b", "topic": "HOSTILE_A", "queueId": "0", "commitOffset": "1"}))
            assert r.code == ResponseCode.SYSTEM_ERROR
            r = c.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "cg", "topic": "a/b", "queueId": "0", "commitOffset": "1"}))
            assert r.code == ResponseCode.SYSTEM_ERROR
            r = c.invoke(create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                        json_dumps({"groupName": "a\0b"})))
            assert r.code == ResponseCode.SYSTEM_ERROR
            r = c.invoke(pull_request("HOSTILE_A", 0, 0, group="a\0b"))
            assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            assert c.invoke(send_request("a\0b", b"x")).code == ResponseCode.SYSTEM_ERROR
            for consumers, producers in (([{"groupName": "a\0b"}], []), ([], [{"groupName": "p/../q"}]),
                                         ([{"groupName": "ok_group", "subscriptionDataSet": [
                                             {"topic": "t\0", "subString": "*"}]}], [])):
                r = c.invoke(create_request(RequestCode.HEART_BEAT, {}, json_dumps({
                    "clientID": "hostile@1", "consumerDataSet": consumers, "producerDataSet": producers})))
                assert r.code == ResponseCode.SYSTEM_ERROR, (consumers, producers, r.remark)
            r = c.invoke(create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}))
            assert b"ok_group" not in r.body  # a refused heartbeat registers nothing
        assert broker.stop() == 0
        assert not (broker.store_root / "abort").exists()
        broker.start()  # the store restarts
        with RemotingClient("127.0.0.1", broker.port, timeout_s=10) as c:
            assert _pullable(c, "HOSTILE_B", b"after")
            assert c.invoke(send_request("HOSTILE_C", b"later")).code == ResponseCode.SUCCESS
            assert _pullable(c, "HOSTILE_C", b"later")
        groups = (broker.store_root / "config" / "subscriptionGroup.json")
        assert not groups.exists() or "a\\u0000b" not in groups.read_text()


@pytest.mark.parametrize("field_name,value", [("flag", str(2**31)), ("bornTimestamp", str(2**63)),
                                              ("reconsumeTimes", str(2**31)), ("queueId", str(2**31)),
                                              ("sysFlag", "-" + str(2**31 + 1))])
def test_header_numbers_out_of_range_are_refused_and_nothing_is_written(tmp_path, field_name, value):
    with Topology(tmp_path / "topo") as topo, RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10) as c:
        assert c.invoke(send_request("RANGE", b"ok")).code == ResponseCode.SUCCESS
        for v2 in (True, False):
            r = c.invoke(send_request("RANGE", b"bad", v2=v2, **{field_name: value}))
            assert r.code == ResponseCode.SYSTEM_ERROR, (v2, r.code, r.remark)
            assert field_name in (r.remark or "") or "range" in (r.remark or ""), r.remark
        r = c.invoke(send_request("RANGE", b"ok2"))
        assert r.code == ResponseCode.SUCCESS
        assert int(r.ext_fields["queueOffset"]) == 1  # the refused sends took no offset
