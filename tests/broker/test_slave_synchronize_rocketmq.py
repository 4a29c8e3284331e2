"""Our slave's synchronizer against Apache RocketMQ 4.9.8's master (the distribution's broker): it reads 4.9.8's
four tables as fastjson writes them (bare numeric keys in the offsets) and 4.9.8 takes the offsets it sends
(#1094's difference works against a RocketMQ master too). Skipped with the reason when there is no distribution
or no java."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from harness.launcher import Topology
from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
from reference_broker.broker.slave_synchronize import SlaveSynchronizer
from reference_broker.broker.subscription_group import SubscriptionGroupManager
from reference_broker.broker.topic_config import TopicConfigManager
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, fastjson_loads
from reference_broker.tools import admin
from tests.broker.broker_helpers import send_request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TOPIC, GROUP = "SyncRmqT", "SyncRmqG"


def invoke(addr: str, code: int, fields: dict[str, str], body: bytes = b""):
    with RemotingClient.from_addr(addr, timeout_s=10) as c:
        return c.invoke(create_request(code, fields, body))


def test_our_synchronizer_reads_and_feeds_a_rocketmq_master(tmp_path: Path, rocketmq_home: Path) -> None:
    with Topology(tmp_path / "rmq", impl="rocketmq", rocketmq_home=rocketmq_home) as topo:
        master = topo.brokers[0]
        admin.update_topic(topo.namesrv_addr, TOPIC, 2, 2, broker_addr=master.addr)
        with RemotingClient.from_addr(master.addr, timeout_s=10) as c:
            for i in range(4):
                assert c.invoke(send_request(TOPIC, b"m%d" % i, queue_id=i % 2)).code == ResponseCode.SUCCESS
            assert c.invoke(send_request(TOPIC, b"later", props={"DELAY": "1"})).code == ResponseCode.SUCCESS
        r = invoke(master.addr, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "1"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = invoke(master.addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps({
            "groupName": GROUP, "retryMaxTimes": 5}).encode())
        assert r.code == ResponseCode.SUCCESS, r.remark
        # 4.9.8 answers GET_ALL_DELAY_OFFSET with its delayOffset.json, persisted every 10 s.
        deadline = time.monotonic() + 40
        while not fastjson_loads(invoke(master.addr, RequestCode.GET_ALL_DELAY_OFFSET, {}).body)["offsetTable"]:
            assert time.monotonic() < deadline, "4.9.8 never persisted its delay offsets"
            time.sleep(0.5)

        root = tmp_path / "slave"
        topics, groups, offsets = TopicConfigManager(root), SubscriptionGroupManager(root), ConsumerOffsetManager(root)
        offsets.track_slave_commits = True
        offsets.commit_offset("consumer", GROUP, TOPIC, 1, 2)  # committed on the slave while "the master was down"
        delay: dict[int, int] = {}
        sync = SlaveSynchronizer("127.0.0.1:1", topics, groups, offsets, delay.update)
        sync.master_addr = master.addr
        try:
            asyncio.run(sync.sync_all())
            assert sync.last_sync_ok
            assert TOPIC in topics.topic_config_table and topics.topic_config_table[TOPIC].read_queue_nums == 2
            assert groups.subscription_group_table[GROUP].retry_max_times == 5
            assert offsets.query_offset(GROUP, TOPIC, 0) == 1 and offsets.query_offset(GROUP, TOPIC, 1) == 2
            assert delay == {1: 1}  # 4.9.8 wrote {"offsetTable":{1:1}}: a bare numeric key
            assert offsets.slave_commits == {}  # 4.9.8 acknowledged it
            r = invoke(master.addr, RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": GROUP, "topic": TOPIC, "queueId": "1"})
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "2"
        finally:
            for manager in (topics, groups, offsets):
                manager.shutdown_persist()
