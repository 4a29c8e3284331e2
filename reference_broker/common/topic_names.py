"""This module owns the topic names RocketMQ reserves (TopicValidator and MixAll, 4.9.8) and the names built
from a group (``%RETRY%group``, ``%DLQ%group``). Sans-IO; shared by the broker (which seeds and protects the
system topics), the store (which rewrites delayed messages into the schedule topic) and the clients (which
refuse to send to the protected ones). The rules for names that arrive from outside are in ``names.py``.
"""

from __future__ import annotations

from typing import Final

# TopicValidator (common/.../topic/TopicValidator.java).
AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
RMQ_SYS_SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_BENCHMARK_TOPIC: Final = "BenchmarkTest"
RMQ_SYS_TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
RMQ_SYS_SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
RMQ_SYS_OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"

# MixAll.
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"

# TopicValidator.SYSTEM_TOPIC_SET.
SYSTEM_TOPICS: Final = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_BENCHMARK_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRACE_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
        RMQ_SYS_SELF_TEST_TOPIC,
        RMQ_SYS_OFFSET_MOVED_EVENT,
    }
)
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET.
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        RMQ_SYS_SCHEDULE_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
        RMQ_SYS_SELF_TEST_TOPIC,
        RMQ_SYS_OFFSET_MOVED_EVENT,
    }
)


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_not_allowed_send_topic(topic: str) -> bool:
    """TopicValidator.isNotAllowedSendTopic."""
    return topic in NOT_ALLOWED_SEND_TOPICS


def retry_topic(group: str) -> str:
    """MixAll.getRetryTopic."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """MixAll.getDLQTopic."""
    return DLQ_GROUP_TOPIC_PREFIX + group
