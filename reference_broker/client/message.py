"""This module owns the client's user-facing value types: Message, MessageQueue, results and outcome enums.

Names and defaults follow RocketMQ 4.9.8's client (common/.../message/Message.java, MessageQueue.java,
client/.../producer/SendResult.java, consumer/PullResult.java, consumer/listener/*Status.java). A received
message is the store's ``MessageExt`` (``reference_broker.common.record``), decoded from the pull body.

A ``Message`` keeps tags, keys, delay level and the wait flag in its properties map, as Java does, so the
properties string sent on the wire is built from one dict.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common.record import MessageExt

__all__ = [
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeType",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
]

# MessageConst.STRING_HASH_SET: property names a user may not set through put_user_property.
RESERVED_PROPERTIES: Final = frozenset({
    mc.PROPERTY_KEYS, mc.PROPERTY_TAGS, mc.PROPERTY_WAIT_STORE_MSG_OK, mc.PROPERTY_DELAY_TIME_LEVEL,
    mc.PROPERTY_RETRY_TOPIC, mc.PROPERTY_REAL_TOPIC, mc.PROPERTY_REAL_QUEUE_ID, mc.PROPERTY_TRANSACTION_PREPARED,
    mc.PROPERTY_PRODUCER_GROUP, mc.PROPERTY_MIN_OFFSET, mc.PROPERTY_MAX_OFFSET, mc.PROPERTY_ORIGIN_MESSAGE_ID,
    mc.PROPERTY_RECONSUME_TIME, mc.PROPERTY_MAX_RECONSUME_TIMES, mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    mc.PROPERTY_TRANSACTION_CHECK_TIMES, mc.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    mc.PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, "CONSUME_START_TIME", "TRACE_ON", "MSG_REGION",
    "BUYER_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "MSG_TYPE", "CLUSTER", "PUSH_REPLY_TIME",
})


class Message:
    """A message to send (common/.../message/Message.java).

    ``keys`` may be one string (several keys separated by spaces, KEY_SEPARATOR) or an iterable of keys.
    Like Java's ``Message(topic, tags, keys, flag, body, waitStoreMsgOK=true)``, every message carries
    ``WAIT=true`` unless ``wait_store_msg_ok=False``.
    """

    __slots__ = ("body", "flag", "properties", "topic", "transaction_id")

    def __init__(
        self,
        topic: str,
        body: bytes = b"",
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        flag: int = 0,
        properties: dict[str, str] | None = None,
        delay_time_level: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> None:
        self.topic = topic
        self.body = body
        self.flag = flag
        self.transaction_id: str | None = None
        props: dict[str, str] = dict(properties) if properties else {}
        if tags:
            props[mc.PROPERTY_TAGS] = tags
        if keys:
            props[mc.PROPERTY_KEYS] = keys if isinstance(keys, str) else mc.KEY_SEPARATOR.join(keys)
        if delay_time_level > 0:
            props[mc.PROPERTY_DELAY_TIME_LEVEL] = str(delay_time_level)
        props[mc.PROPERTY_WAIT_STORE_MSG_OK] = "true" if wait_store_msg_ok else "false"
        self.properties = props

    @property
    def tags(self) -> str | None:
        return self.properties.get(mc.PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(mc.PROPERTY_TAGS, value)

    @property
    def keys(self) -> str | None:
        return self.properties.get(mc.PROPERTY_KEYS)

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        self._set(mc.PROPERTY_KEYS, value if value is None or isinstance(value, str) else " ".join(value))

    @property
    def delay_time_level(self) -> int:
        raw = self.properties.get(mc.PROPERTY_DELAY_TIME_LEVEL)
        return int(raw) if raw else 0

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        self._set(mc.PROPERTY_DELAY_TIME_LEVEL, str(level) if level > 0 else None)

    @property
    def wait_store_msg_ok(self) -> bool:
        # Absent means true (Message.isWaitStoreMsgOK).
        return self.properties.get(mc.PROPERTY_WAIT_STORE_MSG_OK) != "false"

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def put_user_property(self, name: str, value: str) -> None:
        """Message.putUserProperty: refuses RocketMQ's reserved names and empty names/values."""
        if name in RESERVED_PROPERTIES:
            raise ValueError(f"The Property<{name}> is used by system, input another please")
        if not name or not value:
            raise ValueError("The name or value of property can not be null or blank string!")
        self.properties[name] = value

    def _set(self, key: str, value: str | None) -> None:
        if value is None:
            self.properties.pop(key, None)
        else:
            self.properties[key] = value

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, flag={self.flag}, properties={self.properties!r}, " \
               f"body=<{len(self.body)} bytes>)"


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker. Ordering is MessageQueue.compareTo: topic, broker name, queue id."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        # MessageQueue.toString; ConsistentHash allocation hashes exactly this text.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    def to_json(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: dict[str, object]) -> MessageQueue:
        return cls(str(obj["topic"]), str(obj["brokerName"]), int(str(obj["queueId"])))


class SendStatus(enum.Enum):
    """SendStatus: the message is stored in every case; the last three say a flush or replica wait failed."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class SendResult:
    """SendResult. ``msg_id`` is the client UNIQ_KEY (comma-joined for a batch); ``offset_msg_id`` the
    broker's offset id(s) from the response's msgId."""

    send_status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str | None = None
    transaction_id: str | None = None


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class ConsumeFromWhere(enum.Enum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeType(enum.Enum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull consumer
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push consumer


# ConsumeConcurrentlyContext.ackIndex starts at Integer.MAX_VALUE: "all consumed" unless the listener says less.
ACK_ALL: Final = 2**31 - 1


@dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """What a concurrent listener may set: the delay level of a retry (0 = broker decides, 3 + reconsume
    times) and ack_index, the index of the last message consumed successfully in this batch."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = ACK_ALL


@dataclass(slots=True)
class ConsumeOrderlyContext:
    """suspend_current_queue_time_millis -1 = the consumer's default (suspendCurrentQueueTimeMillis, 1000).
    Offsets are always committed automatically (RocketMQ's autoCommit = true; manual commit is not offered)."""

    message_queue: MessageQueue
    suspend_current_queue_time_millis: int = -1
