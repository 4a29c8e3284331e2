"""The reserved topic names and the names built from a group."""

from __future__ import annotations

from reference_broker.common import message as mc
from reference_broker.common import topic_names as tn


def test_system_topics_and_the_ones_clients_may_not_send_to() -> None:
    assert tn.NOT_ALLOWED_SEND_TOPICS < tn.SYSTEM_TOPICS
    assert tn.AUTO_CREATE_TOPIC_KEY_TOPIC == "TBW102" and not tn.is_not_allowed_send_topic("TBW102")
    assert tn.is_not_allowed_send_topic("SCHEDULE_TOPIC_XXXX")
    assert tn.is_system_topic("TBW102") and tn.is_system_topic("rmq_sys_x") and not tn.is_system_topic("T")


def test_retry_and_dlq_topics() -> None:
    assert tn.retry_topic("g") == "%RETRY%g"
    assert tn.dlq_topic("g") == "%DLQ%g"


def test_message_constants_are_the_same_names() -> None:
    assert mc.SCHEDULE_TOPIC == tn.RMQ_SYS_SCHEDULE_TOPIC == "SCHEDULE_TOPIC_XXXX"
    assert mc.RMQ_SYS_TRANS_HALF_TOPIC == tn.RMQ_SYS_TRANS_HALF_TOPIC
    assert mc.RETRY_GROUP_TOPIC_PREFIX == tn.RETRY_GROUP_TOPIC_PREFIX
    assert mc.DLQ_GROUP_TOPIC_PREFIX == tn.DLQ_GROUP_TOPIC_PREFIX
