"""PullAPIWrapper's broker choice: findBrokerAddressInSubscribe's fallbacks, the suggested node, and no
commit-offset flag on a pull to a slave."""

from __future__ import annotations

import pytest

from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import MQClientError
from reference_broker.client.instance import FindBrokerResult, MQClientInstance
from reference_broker.client.message import MessageQueue
from reference_broker.client.pull_api import PullFromWhichNode, sys_flag_for
from reference_broker.remoting.headers import PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUSPEND

MQ = MessageQueue("T", "b", 0)


@pytest.fixture
def instance():
    inst = MQClientInstance(ClientConfig("127.0.0.1:1", "pull-api-test"))
    inst.update_topic_route = lambda topic, *a, **k: False  # type: ignore[method-assign]  # no name server
    return inst


def test_find_broker_in_subscribe_fallbacks(instance):
    instance.broker_addrs["b"] = {0: "m:1", 1: "s:1"}
    assert instance.find_broker_in_subscribe("b", 1) == FindBrokerResult("s:1", True)
    assert instance.find_broker_in_subscribe("b", 0) == FindBrokerResult("m:1", False)
    assert instance.find_broker_in_subscribe("b", 2) == FindBrokerResult("m:1", False)  # 2, 3 absent: the first
    instance.broker_addrs["b"] = {0: "m:1", 2: "s:2"}
    assert instance.find_broker_in_subscribe("b", 1) == FindBrokerResult("s:2", True)  # brokerId + 1
    instance.broker_addrs["b"] = {1: "s:1"}  # the master is gone
    assert instance.find_broker_in_subscribe("b", 0) == FindBrokerResult("s:1", True)
    assert instance.find_broker_in_subscribe("b", 0, only_this_broker=True) is None
    assert instance.find_broker_in_subscribe("nope", 0) is None


def test_the_next_pull_follows_the_suggestion_else_the_master(instance):
    instance.broker_addrs["b"] = {0: "m:1", 1: "s:1"}
    node = PullFromWhichNode()
    assert node.find(instance, MQ).broker_addr == "m:1"
    node.update(MQ, 1)
    assert node.find(instance, MQ) == FindBrokerResult("s:1", True)
    instance.broker_addrs["b"] = {0: "m:1"}  # the suggested slave left the route: the master
    assert node.find(instance, MQ) == FindBrokerResult("m:1", False)
    del instance.broker_addrs["b"]
    with pytest.raises(MQClientError):
        node.find(instance, MQ)


def test_a_pull_to_a_slave_carries_no_commit_offset_flag():
    flag = PULL_FLAG_COMMIT_OFFSET | PULL_FLAG_SUSPEND
    assert sys_flag_for(flag, FindBrokerResult("s:1", True)) == PULL_FLAG_SUSPEND
    assert sys_flag_for(flag, FindBrokerResult("m:1", False)) == flag
