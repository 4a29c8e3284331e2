"""Delay levels, sans-IO: the messageDelayLevel table, delivery times, the re-delivered message and
``config/delayOffset.json`` (RocketMQ 4.9.8 store/.../schedule/ScheduleMessageService.java).

A message put with property ``DELAY = level`` is stored in SCHEDULE_TOPIC_XXXX queue ``level - 1``
(commit_log.py); its consume-queue tagsCode is the delivery time ``storeTs + delay[level]``. The
schedule service (schedule_message.py) reads each level's queue from its saved offset and, once a
message is due, puts the message built by ``message_timeup`` into its real topic.

``delayOffset.json`` holds, per level, the next consume-queue offset to deliver::

    {"offsetTable": {"1": 12, "3": 0}}

RocketMQ's fastjson writes the integer keys unquoted (``{1:12}``, not JSON); both forms are read,
quoted keys are written. Deliberate differences from RocketMQ's ConfigManager.load (see ``load``):
a main file that exists but cannot be used, with no usable ``.bak``, is an error rather than a fresh
start, because a fresh start would re-deliver every delayed message still in the store.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from pathlib import Path
from typing import Any, Final

from reference_broker.broker.config_manager import ConfigManager, dump_json, file_to_string
from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store.status import PutMessageStatus

log = logging.getLogger(__name__)

# ScheduleMessageService.parseDelayLevel units; "ms" is ours (RocketMQ has s, m, h, d only), for tests
# and experiments that cannot wait a second per level.
TIME_UNITS_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL_ITEM: Final = re.compile(r"(\d+)(ms|s|m|h|d)")
UNKNOWN_LEVEL_DELAY_MS: Final = 1000  # computeDeliverTimestamp: storeTs + 1000 for a level not in the table
_HOST_FAMILY_FLAGS: Final = mc.BORNHOST_V6_FLAG | mc.STOREHOSTADDRESS_V6_FLAG


def parse_delay_levels(text: str) -> dict[int, int]:
    """messageDelayLevel → {level (1-based): delay ms}; ValueError naming the bad item."""
    items = text.split()
    if not items:
        raise ValueError(f"messageDelayLevel {text!r} is empty: at least one level is needed (e.g. \"1s 5s 10s\")")
    table: dict[int, int] = {}
    for level, item in enumerate(items, start=1):
        m = _LEVEL_ITEM.fullmatch(item)
        if m is None:
            raise ValueError(f"messageDelayLevel: level {level} is {item!r}; expected a whole number and a unit "
                             f"({', '.join(TIME_UNITS_MS)}), e.g. 500ms, 5s, 2m, 1h, 1d")
        table[level] = int(m.group(1)) * TIME_UNITS_MS[m.group(2)]
    return table


def delay_level_to_queue_id(level: int) -> int:
    """ScheduleMessageService.delayLevel2QueueId."""
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    """ScheduleMessageService.queueId2DelayLevel."""
    return queue_id + 1


def compute_deliver_timestamp(table: dict[int, int], level: int, store_ts: int) -> int:
    """ScheduleMessageService.computeDeliverTimestamp (the schedule queue's tagsCode)."""
    return store_ts + table.get(level, UNKNOWN_LEVEL_DELAY_MS)


def correct_deliver_timestamp(now_ms: int, deliver_ts: int, delay_ms: int | None) -> int:
    """DeliverDelayedMessageTimerTask.correctDeliverTimestamp: a delivery time further away than the
    level's whole delay (the clock went back, or the table shrank) means "now". ``delay_ms`` None: a
    level no longer in the table, whose messages keep the time computed when they were stored."""
    if delay_ms is not None and deliver_ts > now_ms + delay_ms:
        return now_ms
    return deliver_ts


class UndeliverableError(ValueError):
    """A schedule-queue record that names no real topic or queue: it can never be delivered."""


def message_timeup(msg: rec.MessageExt) -> rec.MessageExtBrokerInner:
    """ScheduleMessageService.messageTimeup: the message to put into the real topic.

    Kept: body, flag, sysflag, born timestamp and host, reconsume times and every property (UNIQ_KEY,
    KEYS, TAGS, RETRY_TOPIC, RECONSUME_TIME, REAL_TOPIC, REAL_QID, ...) except DELAY; WAIT = false.
    Deliberate difference: the IPv6 host bits of sysflag are cleared, as the store sets them from the
    hosts it writes (the store host may differ from the one that stored the schedule copy).
    """
    props = dict(msg.properties)
    topic = props.get(mc.PROPERTY_REAL_TOPIC)
    qid_s = props.get(mc.PROPERTY_REAL_QUEUE_ID, "")
    if not topic or not qid_s.isdigit():
        raise UndeliverableError(f"schedule record at {msg.commit_log_offset} has no usable REAL_TOPIC/REAL_QID "
                                 f"({topic!r}/{qid_s!r})")
    props.pop(mc.PROPERTY_DELAY_TIME_LEVEL, None)
    props[mc.PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return rec.MessageExtBrokerInner(
        topic=topic,
        body=msg.body,
        queue_id=int(qid_s),
        flag=msg.flag,
        properties=props,
        sys_flag=msg.sys_flag & ~_HOST_FAMILY_FLAGS,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )


class DeliverOutcome(enum.Enum):
    """What became of one due schedule-queue message."""

    DELIVERED = enum.auto()  # stored in its real topic: the level's offset moves past it
    DISCARDED = enum.auto()  # real topic RMQ_SYS_TRANS_HALF_TOPIC: dropped (RocketMQ 4.9.8 does the same)
    SKIPPED = enum.auto()  # unreadable, or can never be stored: logged and passed over, never retried
    PUT_FAILED = enum.auto()  # the store refused it for now (disk full, busy, ...): retried later


# Put statuses that no retry can change (the message itself is at fault). RocketMQ retries every
# failed put forever, which blocks all later messages of the level; we log and skip these instead.
_PERMANENT_PUT_FAILURES: Final = frozenset({PutMessageStatus.MESSAGE_ILLEGAL,
                                            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})


def classify_put(status: PutMessageStatus) -> DeliverOutcome:
    """Deliberate difference: a status that means "stored" (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE) counts as delivered. RocketMQ accepts only PUT_OK and would put it again."""
    if status.is_stored:
        return DeliverOutcome.DELIVERED
    if status in _PERMANENT_PUT_FAILURES:
        return DeliverOutcome.SKIPPED
    return DeliverOutcome.PUT_FAILED


def clamp_offset(offset: int, min_offset: int, max_offset: int) -> int:
    """correctDelayOffset: into [min, max] of the level's queue."""
    return max(min_offset, min(offset, max_offset))


def _loads_fastjson(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(re.sub(r"([{,]\s*)(-?\d+)(\s*:)", r'\1"\2"\3', text))


class DelayOffsetManager(ConfigManager):
    """``{store_root}/config/delayOffset.json`` (StorePathConfigHelper.getDelayOffsetStorePath)."""

    def __init__(self, store_root: Path | str) -> None:
        super().__init__()
        self.store_root = Path(store_root)
        self.offset_table: dict[int, int] = {}

    def config_file_path(self) -> Path:
        return self.store_root / "config" / "delayOffset.json"

    def encode(self, pretty: bool = False) -> str:
        return dump_json({"offsetTable": {str(k): v for k, v in sorted(self.offset_table.items())}}, pretty)

    def decode(self, text: str) -> None:
        obj = _loads_fastjson(text)
        if not isinstance(obj, dict) or not isinstance(obj.get("offsetTable"), dict):
            raise ValueError('delayOffset.json must hold {"offsetTable": {level: offset, ...}}')
        table: dict[int, int] = {}
        for k, v in obj["offsetTable"].items():
            if not str(k).isdigit() or int(k) < 1:
                raise ValueError(f"delayOffset.json: level {k!r} is not a positive integer")
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"delayOffset.json: offset of level {k} must be an integer, got {v!r}")
            table[int(k)] = v
        self.offset_table = table  # other keys (5.x adds dataVersion) are ignored

    def load(self) -> bool:
        """Main file, else ``.bak``. Neither file: a fresh start (True). A main file that exists but
        is empty or does not decode, with no ``.bak`` that decodes: False, ``last_error`` says why.
        RocketMQ treats a missing or empty ``.bak`` as a fresh start and replays every queue from 0."""
        path = self.config_file_path()
        bak = path.with_name(path.name + ".bak")
        self.last_error = None
        errors: list[str] = []
        for candidate in (path, bak):
            try:
                text = file_to_string(candidate)
                if text is None:
                    continue
                if not text.strip():
                    raise ValueError("the file is empty")  # noqa: TRY301 - one more load failure, handled below
                self.decode(text)
            except Exception as e:  # noqa: BLE001 - a config file's boundary: any decode failure tries the next file
                errors.append(f"{candidate}: {type(e).__name__}: {e}")
                log.error("load %s failed (%s: %s)%s", candidate, type(e).__name__, e,
                          ", trying the backup file" if candidate == path else "")
                continue
            if errors:
                log.warning("delay offsets loaded from %s after: %s", candidate, errors[0])
            else:
                log.info("load %s OK", candidate)
            return True
        if errors:
            self.last_error = "; ".join(errors)
            log.error("no usable delay offsets (%s): refusing to start rather than re-deliver every delayed "
                      "message; repair or remove the files to start over", self.last_error)
            return False
        self.offset_table = {}
        return True
