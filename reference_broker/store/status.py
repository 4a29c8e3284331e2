"""Expected outcomes of store operations, as RocketMQ names them (store/.../*Status.java, 4.9.8)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field


class PutMessageStatus(enum.Enum):
    PUT_OK = enum.auto()
    FLUSH_DISK_TIMEOUT = enum.auto()  # the message IS stored; only the flush wait timed out
    FLUSH_SLAVE_TIMEOUT = enum.auto()
    SLAVE_NOT_AVAILABLE = enum.auto()
    SERVICE_NOT_AVAILABLE = enum.auto()
    CREATE_MAPEDFILE_FAILED = enum.auto()
    MESSAGE_ILLEGAL = enum.auto()
    PROPERTIES_SIZE_EXCEEDED = enum.auto()
    OS_PAGECACHE_BUSY = enum.auto()
    UNKNOWN_ERROR = enum.auto()

    @property
    def is_stored(self) -> bool:
        """PutMessageResult.isOk: the message reached the commit log."""
        return self in _STORED


_STORED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                     PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE})


class AppendMessageStatus(enum.Enum):
    PUT_OK = enum.auto()
    END_OF_FILE = enum.auto()
    MESSAGE_SIZE_EXCEEDED = enum.auto()
    PROPERTIES_SIZE_EXCEEDED = enum.auto()
    UNKNOWN_ERROR = enum.auto()


class GetMessageStatus(enum.Enum):
    FOUND = enum.auto()
    NO_MATCHED_MESSAGE = enum.auto()
    MESSAGE_WAS_REMOVING = enum.auto()
    OFFSET_FOUND_NULL = enum.auto()
    OFFSET_OVERFLOW_BADLY = enum.auto()
    OFFSET_OVERFLOW_ONE = enum.auto()
    OFFSET_TOO_SMALL = enum.auto()
    NO_MATCHED_LOGIC_QUEUE = enum.auto()
    NO_MESSAGE_IN_QUEUE = enum.auto()


# A read found nothing at the end of its queue (or no queue yet): a record written but not dispatched yet may be
# what it wants (MessageStore.get_message nudges dispatch; a pull that is not held waits for it).
AT_QUEUE_END: frozenset[GetMessageStatus] = frozenset({GetMessageStatus.OFFSET_OVERFLOW_ONE,
                                                       GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                                                       GetMessageStatus.NO_MATCHED_LOGIC_QUEUE})


class AppendMessageResult:
    """What an append wrote. The offsetMsgId is built on first use, as RocketMQ's msgIdSupplier does."""

    __slots__ = ("_msg_id", "logics_offset", "msg_id_prefix", "msg_num", "status", "store_timestamp",
                 "wrote_bytes", "wrote_offset")

    def __init__(self, status: AppendMessageStatus, wrote_offset: int = 0, wrote_bytes: int = 0, msg_id: str = "",
                 store_timestamp: int = 0, logics_offset: int = 0, msg_num: int = 1,
                 msg_id_prefix: bytes = b"") -> None:
        self.status = status
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self._msg_id = msg_id
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num
        self.msg_id_prefix = msg_id_prefix  # store ip + port: offsetMsgId = prefix + offset, in hex

    @property
    def msg_id(self) -> str:
        if not self._msg_id and self.msg_id_prefix:
            self._msg_id = (self.msg_id_prefix + self.wrote_offset.to_bytes(8, "big", signed=True)).hex().upper()
        return self._msg_id

    def __repr__(self) -> str:
        return (f"AppendMessageResult({self.status.name}, wrote_offset={self.wrote_offset}, "
                f"wrote_bytes={self.wrote_bytes}, logics_offset={self.logics_offset}, msg_num={self.msg_num})")


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append: AppendMessageResult | None = None
    remark: str = ""

    @property
    def is_ok(self) -> bool:
        return self.status.is_stored

    # A result is also a put that has completed (durability.PendingPut): the store hands it back as it is
    # when no durability condition waits, so the common put allocates no wrapper.
    @property
    def done(self) -> bool:
        return True

    @property
    def result(self) -> PutMessageResult:
        return self

    def add_done_callback(self, cb: Callable[[PutMessageResult], None]) -> None:
        cb(self)

    def wait(self) -> PutMessageResult:
        return self


@dataclass
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    messages: list[bytes] = field(default_factory=list)  # raw commit-log records
    queue_offsets: list[int] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    buffer_total_size: int = 0

    @property
    def message_count(self) -> int:
        return len(self.messages)
