import json

import pytest

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.topic_config import TopicConfig, TopicConfigManager, validate_topic
from reference_broker.common.perm import PERM_INHERIT, PERM_READ, PERM_WRITE
from reference_broker.common.topic_names import is_system_topic


@pytest.mark.parametrize(
    ("topic", "err"),
    [
        ("Orders_1-a", None),
        ("%RETRY%g|x", None),
        ("a" * 127, None),
        ("", "The specified topic is blank."),
        ("   ", "The specified topic is blank."),
        ("a.b", "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
        ("a b", "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
        ("tópico", "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
        ("a" * 128, "The specified topic is longer than topic max length."),
    ],
)
def test_validate_topic(topic, err):
    assert validate_topic(topic) == err


def test_tbw102_rejected_for_creation_only():
    assert validate_topic("TBW102") is None
    assert (
        validate_topic("TBW102", for_creation=True) == "The topic[TBW102] is conflict with AUTO_CREATE_TOPIC_KEY_TOPIC."
    )
    assert is_system_topic("TBW102") and is_system_topic("rmq_sys_x") and not is_system_topic("T")


def _mgr(tmp_path, **kw):
    bc = BrokerConfig(broker_name="broker-a", **kw)
    return TopicConfigManager(tmp_path, bc)


def test_system_topics_at_start(tmp_path):
    m = _mgr(tmp_path)
    t = m.topic_config_table
    assert (t["TBW102"].read_queue_nums, t["TBW102"].write_queue_nums, t["TBW102"].perm) == (8, 8, 7)
    assert (t["SELF_TEST_TOPIC"].write_queue_nums, t["SELF_TEST_TOPIC"].perm) == (1, 6)
    assert t["BenchmarkTest"].write_queue_nums == 1024
    assert (t["DefaultCluster"].perm, t["DefaultCluster"].write_queue_nums) == (7, 16)
    assert (t["broker-a"].perm, t["broker-a"].write_queue_nums) == (7, 1)
    assert t["OFFSET_MOVED_EVENT"].write_queue_nums == 1
    assert t["SCHEDULE_TOPIC_XXXX"].read_queue_nums == 18
    assert "DefaultCluster_REPLY_TOPIC" in t and "RMQ_SYS_TRACE_TOPIC" not in t
    assert m.is_system_topic("broker-a")


def test_no_tbw102_when_auto_create_disabled(tmp_path):
    m = _mgr(tmp_path, auto_create_topic_enable=False, cluster_topic_enable=False)
    assert "TBW102" not in m.topic_config_table
    assert m.topic_config_table["DefaultCluster"].perm == PERM_INHERIT
    assert m.create_topic_in_send_message_method("New", "TBW102", "1.2.3.4:5", 4, 0) is None
    assert "New" not in m.topic_config_table


def test_auto_create_from_tbw102(tmp_path):
    m = _mgr(tmp_path)
    v0 = m.data_version.counter
    tc = m.create_topic_in_send_message_method("New", "TBW102", "1.2.3.4:5", 4, 0)
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums) == (4, 4)
    assert tc.perm == PERM_READ | PERM_WRITE  # INHERIT stripped
    assert m.data_version.counter == v0 + 1
    # min(client value, default topic's write queue nums)
    tc2 = m.create_topic_in_send_message_method("Big", "TBW102", "h", 64, 0)
    assert tc2 is not None and tc2.write_queue_nums == 8
    # existing topic returned unchanged, no version bump
    assert m.create_topic_in_send_message_method("New", "TBW102", "h", 2, 0) is tc
    assert m.data_version.counter == v0 + 2
    assert m.wait_persisted()  # changes are written by the manager's writer thread
    persisted = json.loads((tmp_path / "config" / "topics.json").read_text())
    assert persisted["topicConfigTable"]["New"] == {
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "New",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert persisted["dataVersion"]["counter"] == v0 + 2


def test_auto_create_needs_inherit_and_existing_default(tmp_path):
    m = _mgr(tmp_path)
    assert m.create_topic_in_send_message_method("X", "NoSuchDefault", "h", 4, 0) is None
    m.update_topic_config(TopicConfig("MyDefault", 4, 4, PERM_READ | PERM_WRITE))
    assert m.create_topic_in_send_message_method("X", "MyDefault", "h", 4, 0) is None
    m.update_topic_config(TopicConfig("MyDefault", 2, 2, PERM_READ | PERM_WRITE | PERM_INHERIT))
    tc = m.create_topic_in_send_message_method("X", "MyDefault", "h", 4, 0)
    assert tc is not None and tc.write_queue_nums == 2 and tc.perm == 6


def test_persisted_tbw102_loses_inherit_when_disabled(tmp_path):
    _mgr(tmp_path).persist()  # topics.json holds TBW102 with perm 7
    m = _mgr(tmp_path, auto_create_topic_enable=False)
    assert m.load()
    assert m.topic_config_table["TBW102"].perm == 7
    assert m.create_topic_in_send_message_method("New", "TBW102", "h", 4, 0) is None
    assert m.topic_config_table["TBW102"].perm == 6


def test_retry_and_dlq_topics(tmp_path):
    m = _mgr(tmp_path)
    r = m.create_retry_topic("G", 1)
    assert (r.topic_name, r.write_queue_nums, r.read_queue_nums, r.perm) == ("%RETRY%G", 1, 1, 6)
    d = m.create_dlq_topic("G")
    assert (d.topic_name, d.write_queue_nums, d.perm) == ("%DLQ%G", 1, 6)
    assert m.create_topic_in_send_message_back_method("%DLQ%G", 5, 2, 0) is d


def test_round_trip_and_delete(tmp_path):
    m = _mgr(tmp_path)
    m.update_topic_config(TopicConfig("T", 3, 5, 6, "MULTI_TAG", 1, True))
    counter = m.data_version.counter
    assert m.wait_persisted()  # changes are written by the manager's writer thread
    m2 = _mgr(tmp_path)
    assert m2.load()
    assert m2.topic_config_table["T"] == TopicConfig("T", 3, 5, 6, "MULTI_TAG", 1, True)
    assert m2.data_version.counter == counter and m2.is_order_topic("T")
    m2.delete_topic_config("T")
    assert m2.wait_persisted()
    m3 = _mgr(tmp_path)
    assert m3.load() and "T" not in m3.topic_config_table
    m3.update_order_topic_config(set())
    assert not m3.is_order_topic("T")


def test_corrupt_topics_json_falls_back_to_bak(tmp_path):
    m = _mgr(tmp_path)
    m.update_topic_config(TopicConfig("A"))
    assert m.wait_persisted()
    m.update_topic_config(TopicConfig("B"))
    assert m.wait_persisted()
    path = tmp_path / "config" / "topics.json"
    path.write_text('{"topicConfigTable": {"C": {"topicName": "C", "perm": "rw"}}}')
    m2 = _mgr(tmp_path)
    assert m2.load()
    assert "A" in m2.topic_config_table and "B" not in m2.topic_config_table and "C" not in m2.topic_config_table
