"""The slave's synchronizer through real processes (name server, master, slave): the slave copies the master's
topic table and consumer offsets, and an offset a consumer committed to the slave while the master was down
is neither lost nor moved backwards when the master returns (#1094) — it reaches the master too, even when the
slave restarted in between."""

from __future__ import annotations

import json
import time

import pytest

from harness.launcher import Topology
from reference_broker.client.config import ClientConfig
from reference_broker.client.instance import get_instance
from reference_broker.client.message import MessageQueue
from reference_broker.client.offset_store import RemoteBrokerOffsetStore
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from tests.broker.broker_helpers import send_request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SLAVE = {"brokerName": "broker-a", "brokerId": "1", "brokerRole": "SLAVE"}
FAST_REGISTER = {"registerNameServerPeriod": "10000"}  # RocketMQ's shortest: the slave relearns its master sooner
TOPIC, GROUP = "SyncT", "SyncG"


def query_offset(addr: str, queue_id: int = 0) -> int | None:
    with RemotingClient.from_addr(addr, timeout_s=5) as client:
        r = client.invoke(create_request(RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id)}))
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else None


def all_of(addr: str, code: int) -> bytes:
    with RemotingClient.from_addr(addr, timeout_s=5) as client:
        r = client.invoke(create_request(code, {}))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r.body


def commit_offset(addr: str, offset: int, queue_id: int = 0) -> None:
    with RemotingClient.from_addr(addr, timeout_s=5) as client:
        r = client.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id), "commitOffset": str(offset)}))
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_offsets_committed_on_the_slave_survive_the_masters_return(tmp_path):
    with Topology(tmp_path / "t", broker_conf=FAST_REGISTER) as topo:
        master = topo.brokers[0]
        with RemotingClient.from_addr(master.addr, timeout_s=10) as mc:
            for i in range(20):
                assert mc.invoke(send_request(TOPIC, b"m%d" % i, queue_id=0)).code == ResponseCode.SUCCESS
            # A delayed message (level 1, 1 s) moves the master's delay offsets; a group with its own settings.
            r = mc.invoke(send_request("DelayT", b"later", props={"DELAY": "1"}))
            assert r.code == ResponseCode.SUCCESS
            r = mc.invoke(create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps({
                "groupName": "SyncGroupCfg", "retryMaxTimes": 3, "whichBrokerWhenConsumeSlowly": 1}).encode()))
            assert r.code == ResponseCode.SUCCESS, r.remark
            deadline = time.monotonic() + 20
            while not json.loads(all_of(master.addr, RequestCode.GET_ALL_DELAY_OFFSET))["offsetTable"]:
                assert time.monotonic() < deadline, "the delayed message was never delivered"
                time.sleep(0.2)
        commit_offset(master.addr, 5)
        slave = topo.add_broker("broker-a-slave", extra=SLAVE)
        # SlaveSynchronize: 3 s after start, then every 10 s — topics and offsets copied from the master.
        deadline = time.monotonic() + 40
        while query_offset(slave.addr) != 5:
            assert time.monotonic() < deadline, "the slave never copied the master's offset"
            time.sleep(0.3)
        assert TOPIC in json.loads(all_of(slave.addr, RequestCode.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
        groups = json.loads(all_of(slave.addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        assert groups["subscriptionGroupTable"]["SyncGroupCfg"]["retryMaxTimes"] == 3
        assert (json.loads(all_of(slave.addr, RequestCode.GET_ALL_DELAY_OFFSET))
                == json.loads(all_of(master.addr, RequestCode.GET_ALL_DELAY_OFFSET)))

        master.stop()  # unregisters: the route now names only the slave
        # The consumer's offset store commits where RemoteBrokerOffsetStore does: the master, else any broker of
        # the name (findBrokerAddressInSubscribe) — the slave.
        instance = get_instance(ClientConfig(topo.namesrv_addr, "sync-e2e", poll_name_server_interval_s=1.0))
        store = RemoteBrokerOffsetStore(instance, GROUP)
        mq = MessageQueue(TOPIC, "broker-a", 0)
        instance.update_topic_route(TOPIC)
        store.update_offset(mq, 12, False)
        store.update_to_broker(mq, 12, oneway=False)
        instance.shutdown()
        assert query_offset(slave.addr) == 12
        # A clean restart of the slave before the master returns: it still knows 12 as committed here, not
        # copied from the master (consumerOffset.json's slaveCommitTable), so the master's 5 does not win.
        slave.restart()
        assert query_offset(slave.addr) == 12

        master.restart()  # it comes back with the offset it persisted: 5
        seen_on_slave = []
        deadline = time.monotonic() + 60
        while query_offset(master.addr) != 12:
            seen_on_slave.append(query_offset(slave.addr))
            assert time.monotonic() < deadline, f"the master never learned 12; slave saw {seen_on_slave[-5:]}"
            time.sleep(0.3)
        # Two more synchronizations: the slave still holds 12 and never went back to 5 in between.
        end = time.monotonic() + 21
        while time.monotonic() < end:
            seen_on_slave.append(query_offset(slave.addr))
            time.sleep(0.5)
        assert set(seen_on_slave) == {12}, seen_on_slave
        assert query_offset(master.addr) == 12
