"""The defects the broker fuzzer found, end to end: a real name server and broker (harness/launcher.py), real
sockets, and a restart where the defect was about what the broker stored."""

from __future__ import annotations

import json

import pytest

from harness.launcher import Topology
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from tests.broker.broker_helpers import send_request
from tests.remoting.bursts import burst_then_garbage

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    with Topology(tmp_path_factory.mktemp("fuzz-findings")) as t:
        yield t


def _client(topo):
    return RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10)


def test_a_send_with_a_flag_past_an_int_is_refused_and_the_connection_serves_on(topo):
    with _client(topo) as c:
        bad = c.invoke(send_request("FuzzFindings", b"x", flag=str(2**31), bornTimestamp=str(2**63)))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "out of range" in bad.remark
        assert c.invoke(send_request("FuzzFindings", b"x")).code == ResponseCode.SUCCESS


def test_a_burst_ending_in_garbage_gets_its_answers_before_the_close(topo):
    requests = [create_request(RequestCode.GET_BROKER_RUNTIME_INFO) for _ in range(3)]
    answers = burst_then_garbage(topo.brokers[0].port, requests)
    assert [(a.opaque, a.code) for a in answers] == [(r.opaque, ResponseCode.SUCCESS) for r in requests]


def test_view_by_id_inside_a_record_is_an_error_a_client_can_read(topo):
    marker = b"\x00\x01\x00\x00"  # read as a TOTALSIZE: 64 KiB
    with _client(topo) as c:
        sent = c.invoke(send_request("FuzzFindings", marker * 16))
        for _ in range(40):
            c.invoke(send_request("FuzzFindings", b"filler" * 400))  # 64 KiB written after it
        phy = int(sent.ext_fields["msgId"][-16:], 16)
        whole = c.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}))
        assert whole.code == ResponseCode.SUCCESS
        inside = phy + whole.body.index(marker)
        resp = c.invoke(create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(inside)}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "can not find message" in resp.remark


def test_a_bad_topic_filter_type_is_refused_and_the_broker_starts_again(topo):
    fields = {"topic": "FuzzFilter", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
              "perm": "6", "topicFilterType": "a\x00b", "topicSysFlag": "0", "order": "false"}
    with _client(topo) as c:
        resp = c.invoke(create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))
        assert resp.code == ResponseCode.SYSTEM_ERROR
    broker = topo.brokers[0]
    assert broker.stop() == 0
    broker.start()  # LaunchError if topics.json cannot be loaded
    with _client(topo) as c:
        assert c.invoke(send_request("FuzzFindings", b"after restart")).code == ResponseCode.SUCCESS


def test_a_group_with_retry_queues_past_an_int_is_refused(topo):
    body = json.dumps({"groupName": "FuzzWideRetry", "retryQueueNums": 2**31, "retryMaxTimes": 16}).encode()
    with _client(topo) as c:
        resp = c.invoke(create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "out of range" in resp.remark
