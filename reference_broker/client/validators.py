"""This module owns the client-side checks on topics, groups and messages (Validators, TopicValidator, 4.9.8).

Failures raise ``MQClientError`` with MESSAGE_ILLEGAL (13), or NO_PERMISSION (16) for a topic clients may
not send to; RocketMQ throws most of these with code -1, we give each a RocketMQ response code instead.
A topic that passed once is remembered, so the per-message cost is one set lookup.
"""

from __future__ import annotations

from reference_broker.client.errors import MQClientError
from reference_broker.client.message import Message
from reference_broker.common.names import TOPIC_MAX_LENGTH, VALID_PATTERN_STR, has_illegal_chars, validate_group
from reference_broker.common.topic_names import NOT_ALLOWED_SEND_TOPICS
from reference_broker.remoting.codes import ResponseCode

_checked_topics: set[str] = set()


def _illegal(text: str) -> MQClientError:
    return MQClientError(ResponseCode.MESSAGE_ILLEGAL, text, False)


def check_topic(topic: str) -> None:
    if topic in _checked_topics:
        return
    if not topic or not topic.strip():
        raise _illegal("The specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise _illegal("The specified topic is longer than topic max length.")
    if has_illegal_chars(topic):
        raise _illegal(f"The specified topic[{topic}] contains illegal characters, allowing only {VALID_PATTERN_STR}")
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise MQClientError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.", False)
    if len(_checked_topics) < 65536:
        _checked_topics.add(topic)


def check_group(group: str) -> None:
    problem = validate_group(group)
    if problem is not None:
        raise _illegal(problem)


def check_message(msg: Message, max_message_size: int) -> None:
    """Validators.checkMessage."""
    check_topic(msg.topic)
    body = msg.body
    if body is None:
        raise _illegal("the message body is null")
    if not body:
        raise _illegal("the message body length is zero")
    if len(body) > max_message_size:
        raise _illegal(f"the message body size over max value, MAX: {max_message_size}")
