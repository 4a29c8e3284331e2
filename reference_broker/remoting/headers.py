"""This module owns the custom header fields shared by broker and clients
(common/.../protocol/header/*.java, 4.9.8).

RocketMQ carries a request's custom header as string values in ``extFields`` (makeCustomHeaderToNet). For a
missing ``@CFNotNull`` field or a non-number where a number is declared, 4.9.8's decodeCommandCustomHeader
builds the exception "the custom field <name> is null" (or the parse error) but catches it per field, logs
"Failed field [name] decoding" and leaves the field null, so the request goes on and fails later, if at all
(tests/remoting/test_rocketmq_header_decode.py). The reference broker deliberately refuses such a request
(README, "Missing header fields are refused by name"): ``field``/``int_field`` raise ``BadRequest``, which a
handler answers with SYSTEM_ERROR and the text 4.9.8 logs.

| request                          | header fields (ext_fields keys)                                          |
|----------------------------------|--------------------------------------------------------------------------|
| SEND_MESSAGE (10) / BATCH (320)  | producerGroup topic defaultTopic defaultTopicQueueNums queueId sysFlag  |
|                                  | bornTimestamp flag properties reconsumeTimes unitMode batch             |
|                                  | maxReconsumeTimes                                                        |
| SEND_MESSAGE_V2 (310)            | the same, renamed a..n (``SEND_V2_KEYS``)                                |
| send response                    | msgId queueId queueOffset transactionId                                  |
| PULL_MESSAGE (11)                | consumerGroup topic queueId queueOffset maxMsgNums sysFlag commitOffset |
|                                  | suspendTimeoutMillis subscription subVersion expressionType              |
| pull response                    | suggestWhichBrokerId nextBeginOffset minOffset maxOffset                 |
| QUERY/UPDATE_CONSUMER_OFFSET     | consumerGroup topic queueId [commitOffset]; response offset              |
| GET_MAX/MIN_OFFSET, EARLIEST     | topic queueId; response offset / timestamp                               |
| SEARCH_OFFSET_BY_TIMESTAMP       | topic queueId timestamp; response offset                                 |
| QUERY_MESSAGE (12)               | topic key maxNum beginTimestamp endTimestamp; response                   |
|                                  | indexLastUpdateTimestamp indexLastUpdatePhyoffset                        |
| VIEW_MESSAGE_BY_ID (33)          | offset                                                                   |
| CONSUMER_SEND_MSG_BACK (36)      | offset group delayLevel originMsgId originTopic unitMode                 |
|                                  | maxReconsumeTimes                                                        |
| UNREGISTER_CLIENT (35)           | clientID producerGroup consumerGroup                                     |
| GET_CONSUMER_LIST_BY_GROUP (38)  | consumerGroup; body {"consumerIdList": [...]}                            |
| NOTIFY_CONSUMER_IDS_CHANGED (40) | consumerGroup (broker → client, oneway)                                  |
| UPDATE_AND_CREATE_TOPIC (17)     | topic defaultTopic readQueueNums writeQueueNums perm topicFilterType     |
|                                  | topicSysFlag order                                                       |
"""

from __future__ import annotations

from typing import Final

from reference_broker.common.names import validate_group, validate_topic
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import INT32_MAX, INT32_MIN, RemotingCommand, create_response

# SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1: single-letter keys keep the hot header small.
SEND_V2_KEYS: Final = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
SEND_V1_KEYS: Final = {v: k for k, v in SEND_V2_KEYS.items()}

# PullSysFlag (common/.../sysflag/PullSysFlag.java).
PULL_FLAG_COMMIT_OFFSET: Final = 0x1
PULL_FLAG_SUSPEND: Final = 0x2
PULL_FLAG_SUBSCRIPTION: Final = 0x4
PULL_FLAG_CLASS_FILTER: Final = 0x8
PULL_FLAG_LITE_PULL: Final = 0x10

# ExpressionType; only TAG is evaluated by this broker (SQL92 needs enablePropertyFilter, off by default).
EXPRESSION_TAG: Final = "TAG"
SUB_ALL: Final = "*"


def build_pull_sys_flag(commit_offset: bool, suspend: bool, subscription: bool, class_filter: bool = False) -> int:
    """PullSysFlag.buildSysFlag."""
    flag = PULL_FLAG_COMMIT_OFFSET if commit_offset else 0
    if suspend:
        flag |= PULL_FLAG_SUSPEND
    if subscription:
        flag |= PULL_FLAG_SUBSCRIPTION
    if class_filter:
        flag |= PULL_FLAG_CLASS_FILTER
    return flag


class BadRequest(Exception):
    """A request's header or body cannot be decoded; the message becomes the SYSTEM_ERROR remark."""


def send_v2_to_v1(fields: dict[str, str]) -> dict[str, str]:
    """Rename SEND_MESSAGE_V2's single-letter keys to the V1 names (unknown keys are kept as they are)."""
    return {SEND_V2_KEYS.get(k, k): v for k, v in fields.items()}


def send_v1_to_v2(fields: dict[str, str]) -> dict[str, str]:
    return {SEND_V1_KEYS.get(k, k): v for k, v in fields.items()}


def str_of(fields: dict[str, str], name: str) -> str:
    """A required header value from an extFields map (also a renamed or partial one)."""
    value = fields.get(name)
    if value is None:
        # The message 4.9.8's decodeCommandCustomHeader builds (and only logs) for a missing @CFNotNull field.
        raise BadRequest(f"the custom field <{name}> is null")
    return value


# The numeric header fields RocketMQ declares ``Integer`` (SendMessageRequestHeader, PullMessageRequestHeader,
# ConsumerSendMsgBackRequestHeader, CreateTopicRequestHeader, QueryMessageRequestHeader, ... in 4.9.8), with the
# V2 letters of the send header; every other number is a ``Long``. decodeCommandCustomHeader parses them with
# Integer.parseInt / Long.parseLong, so a value out of its type's range is refused like a non-number, before it
# reaches a record's fixed-width field.
INT_FIELDS: Final = frozenset({
    "queueId", "sysFlag", "flag", "reconsumeTimes", "defaultTopicQueueNums", "maxReconsumeTimes", "maxMsgNums",
    "delayLevel", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "maxNum",
    *(SEND_V1_KEYS[k] for k in ("defaultTopicQueueNums", "queueId", "sysFlag", "flag", "reconsumeTimes",
                                "maxReconsumeTimes")),
})
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def int_of(fields: dict[str, str], name: str, default: int | None = None) -> int:
    value = fields.get(name)
    # The send path's common case, five times per send: a few ASCII digits, in range of every type.
    if value is not None and len(value) < 10 and value.isdigit() and value.isascii():
        return int(value)
    if value is None:
        if default is not None:
            return default
        raise BadRequest(f"the custom field <{name}> is null")
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"the custom field <{name}> is not a number: {value[:64]!r}") from None
    # Long.parseLong's syntax is an optional sign and digits; int() also takes surrounding blanks and '_'
    # separators (cheaper to refuse those than to match every value against a pattern on the send path).
    if "_" in value or value[0].isspace() or value[-1].isspace():
        raise BadRequest(f"the custom field <{name}> is not a number: {value[:64]!r}")
    lo, hi = (INT32_MIN, INT32_MAX) if name in INT_FIELDS else (INT64_MIN, INT64_MAX)
    if not lo <= number <= hi:
        raise BadRequest(f"the custom field <{name}> is out of range [{lo}, {hi}]: {value[:64]!r}")
    return number


def field(cmd: RemotingCommand, name: str) -> str:
    return str_of(cmd.ext_fields, name)


def int_field(cmd: RemotingCommand, name: str, default: int | None = None) -> int:
    return int_of(cmd.ext_fields, name, default)


def bool_field(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    value = cmd.ext_fields.get(name)
    if value is None:
        return default
    return value.lower() == "true"  # Boolean.parseBoolean: anything else is false


def bad_names(cmd: RemotingCommand, topic: str | None = None, group: str | None = None) -> RemotingCommand | None:
    """SYSTEM_ERROR with the validator's remark when a topic or group from a header cannot be a name
    (common/names.py; msgCheck answers a bad topic so), else None. Checked wherever a name would be stored."""
    problem = validate_topic(topic) if topic is not None else None
    if problem is None and group is not None:
        problem = validate_group(group)
    return None if problem is None else create_response(cmd, ResponseCode.SYSTEM_ERROR, problem)
