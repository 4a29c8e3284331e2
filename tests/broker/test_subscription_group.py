import json

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager


def test_defaults():
    c = SubscriptionGroupConfig("G")
    assert c.consume_enable and c.consume_from_min_enable and c.consume_broadcast_enable
    assert (c.retry_queue_nums, c.retry_max_times, c.broker_id, c.which_broker_when_consume_slowly) == (1, 16, 0, 1)


def test_auto_create_and_persist(tmp_path):
    m = SubscriptionGroupManager(tmp_path)
    assert "TOOLS_CONSUMER" in m.subscription_group_table
    v0 = m.data_version.counter
    c = m.find_subscription_group_config("G")
    assert c == SubscriptionGroupConfig("G") and m.data_version.counter == v0 + 1
    assert m.find_subscription_group_config("G") is c and m.data_version.counter == v0 + 1
    assert m.wait_persisted()  # changes are written by the manager's writer thread
    obj = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())
    assert obj["subscriptionGroupTable"]["G"] == {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": "G",
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }
    assert obj["dataVersion"]["counter"] == v0 + 1


def test_no_auto_create_when_disabled(tmp_path):
    m = SubscriptionGroupManager(tmp_path, BrokerConfig(auto_create_subscription_group=False))
    assert m.find_subscription_group_config("G") is None
    assert m.find_subscription_group_config("CID_RMQ_SYS_X") is not None  # system groups always
    assert not (tmp_path / "config" / "subscriptionGroup.json.bak").exists()


def test_round_trip_update_delete(tmp_path):
    m = SubscriptionGroupManager(tmp_path)
    m.update_subscription_group_config(SubscriptionGroupConfig("G", retry_queue_nums=0, retry_max_times=3))
    assert m.wait_persisted()  # changes are written by the manager's writer thread
    m2 = SubscriptionGroupManager(tmp_path, BrokerConfig(auto_create_subscription_group=False))
    assert m2.load()
    g = m2.find_subscription_group_config("G")
    assert g is not None and (g.retry_queue_nums, g.retry_max_times) == (0, 3)
    assert m2.delete_subscription_group_config("G") is not None
    assert m2.wait_persisted()
    m3 = SubscriptionGroupManager(tmp_path, BrokerConfig(auto_create_subscription_group=False))
    assert m3.load() and m3.find_subscription_group_config("G") is None


def test_bad_group_field_falls_back(tmp_path):
    m = SubscriptionGroupManager(tmp_path)
    m.find_subscription_group_config("A")
    assert m.wait_persisted()
    m.find_subscription_group_config("B")
    assert m.wait_persisted()
    path = tmp_path / "config" / "subscriptionGroup.json"
    path.write_text('{"subscriptionGroupTable": {"X": {"groupName": "X", "consumeEnable": 1}}}')
    m2 = SubscriptionGroupManager(tmp_path)
    assert m2.load() and "A" in m2.subscription_group_table and "X" not in m2.subscription_group_table
