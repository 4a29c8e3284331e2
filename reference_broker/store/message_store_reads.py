"""The read side of the store: consume-queue lookups, getMessage with RocketMQ's batch limits,
messages by offset, offsetMsgId, key and time (DefaultMessageStore, 4.9.8).

The MessageStore owns one StoreReader and delegates its read methods to it; the reader is given exactly
what it reads: the commit log, the consume-queue lookup, the index, the running flags and whether the
store has shut down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store.clean import RunningFlags
from reference_broker.store.commit_log import CommitLog
from reference_broker.store.config import BrokerRole, MessageStoreConfig
from reference_broker.store.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue
from reference_broker.store.consume_queue import UNIT as _UNIT
from reference_broker.store.consume_queue_ext import MAX_ADDR, CqExtUnit
from reference_broker.store.index_service import QueryOffsetResult
from reference_broker.store.record_check import record_intact
from reference_broker.store.status import GetMessageResult, GetMessageStatus

log = logging.getLogger(__name__)

TagsFilter = Callable[[int], bool]
# isMatchedByConsumeQueue's bit-map half: a unit's ext unit (None: none) → False when its filter bit map says
# the subscription cannot match (the record is then skipped unread).
ExtFilter = Callable[[CqExtUnit | None], bool]
# isMatchedByCommitLog: a whole record (the SQL92 filter reads its properties); False skips it.
RecordFilter = Callable[[bytes], bool]
_NEVER = 1 << 63  # no commit-log offset reaches it
RECORD_FILTER_BUDGET_S = 0.01  # the most one pull spends filtering records (see get_message)


class OffsetIndex(Protocol):
    """Where lookups by key go: the store's IndexService, or the dispatch process that owns the index."""

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult: ...


class StoreReader:
    def __init__(self, config: MessageStoreConfig, commit_log: CommitLog,
                 find_consume_queue: Callable[[str, int, bool], ConsumeQueue | None],
                 index_service: OffsetIndex, running_flags: RunningFlags,
                 is_shut_down: Callable[[], bool]) -> None:
        self.config = config
        self.commit_log = commit_log
        self._find = find_consume_queue
        self.index_service = index_service
        self.running_flags = running_flags
        self.is_shut_down = is_shut_down
        # Records not served because their checksums failed (record_check.py); a metric in the runtime stats.
        self.bad_records_skipped = 0
        # StoreStatsService.getMessageTransferedMsgCount: messages getMessage handed out (BrokerStats' msgGet*).
        self.transferred_msg_count = 0

    def _served_intact(self, raw: bytes, offset: int) -> bool:
        """The record at ``offset`` may be served: its checksums hold. Otherwise it is counted and logged,
        and the caller skips it like a missing message (not in RocketMQ 4.9.8: record_check.py)."""
        cl = self.commit_log
        since = cl.prop_crc_since
        if record_intact(raw, cl.verify_prop_crc and since is not None and offset >= since):
            return True
        self._count_bad(raw, offset)
        return False

    def _count_bad(self, raw: bytes, offset: int) -> None:
        self.bad_records_skipped += 1
        log.error("commit-log record at offset %d (%d bytes) fails its CRC: not served (skipped; %d so far)",
                  offset, len(raw), self.bad_records_skipped)

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        return self._find(topic, queue_id, create)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        return cq.get_max_offset_in_queue() if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        return cq.get_min_offset_in_queue() if cq else -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        unit = cq.get_unit(cq_offset) if cq else None
        return unit[0] if unit else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp, self.commit_log.pickup_store_timestamp,
                                              self.commit_log.get_min_offset())

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        unit = cq.get_unit(cq_offset) if cq else None
        if unit is None:
            return -1
        return self.commit_log.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def look_message_by_offset(self, commit_log_offset: int, size: int = -1) -> rec.MessageExt | None:
        """Decode the record at ``commit_log_offset`` (its size is read when not given)."""
        raw = self.select_one_message_by_offset(commit_log_offset, size)
        if raw is None:
            return None
        try:
            return rec.decode_message(raw)
        except rec.RecordError:
            return None

    def select_one_message_by_offset(self, commit_log_offset: int, size: int = -1) -> bytes | None:
        """The raw record at ``commit_log_offset``; its TOTALSIZE field gives the size when not given. None
        when it cannot be read or fails its CRC (never served: record_check.py)."""
        if size < 0:
            head = self.commit_log.read_bytes(commit_log_offset, 4)
            if head is None:
                return None
            size = int.from_bytes(head, "big", signed=True)
            if size <= 0:
                return None
        raw = self.commit_log.read_bytes(commit_log_offset, size)
        if raw is None or not self._served_intact(raw, commit_log_offset):
            return None
        return raw

    def look_message_by_msg_id(self, offset_msg_id: str) -> rec.MessageExt | None:
        """VIEW_MESSAGE_BY_ID: decode the offsetMsgId, then read at its offset (MessageIdError if bad)."""
        _host, _port, offset = rec.decode_message_id(offset_msg_id)
        return self.look_message_by_offset(offset)

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[rec.MessageExt]:
        """Messages whose key or UNIQ_KEY is ``key`` within [begin, end] ms (index hash + re-check)."""
        res: QueryOffsetResult = self.index_service.query_offset(topic, key, max_num, begin, end)
        out: list[rec.MessageExt] = []
        seen: set[int] = set()
        # In log order: DefaultMessageStore.queryMessage sorts the index's offsets (which come newest first).
        for phy in sorted(res.phy_offsets):
            # Abnormal recovery re-dispatches the record at the index's end offset (RocketMQ skips only
            # offsets below it), so one message can have two entries: report it once.
            if phy in seen:
                continue
            seen.add(phy)
            m = self.look_message_by_offset(phy)
            if m is None or m.topic != topic:
                continue
            keys = m.keys.split(mc.KEY_SEPARATOR) if m.keys else []
            uniq = m.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if key in keys or key == uniq:  # the index compares hashes only (MQAdminImpl re-checks)
                out.append(m)
        return out

    def check_in_disk_by_commit_offset(self, offset_py: int, max_offset_py: int) -> bool:
        memory = self.config.total_physical_memory_bytes * self.config.access_message_in_memory_max_ratio // 100
        return max_offset_py - offset_py > memory

    def _is_batch_full(self, size_py: int, max_msg_nums: int, buffer_total: int, msg_total: int,
                       in_disk: bool) -> bool:
        c = self.config
        if buffer_total == 0 or msg_total == 0:
            return False
        if max_msg_nums <= msg_total:
            return True
        if in_disk:
            return (buffer_total + size_py > c.max_transfer_bytes_on_message_in_disk
                    or msg_total > c.max_transfer_count_on_message_in_disk - 1)
        return (buffer_total + size_py > c.max_transfer_bytes_on_message_in_memory
                or msg_total > c.max_transfer_count_on_message_in_memory - 1)

    def _correct(self, old: int, new: int) -> int:
        """nextOffsetCorrection: only a master moves a client's offset."""
        return old if self.config.broker_role is BrokerRole.SLAVE else new

    @staticmethod
    def _ext_matches(get_ext: Callable[[int], CqExtUnit | None], tags_code: int, tags_filter: TagsFilter | None,
                     ext_filter: ExtFilter | None) -> bool:
        """A unit of a queue with the extension: its tags code is in its ext unit when the slot holds an
        address; a unit whose ext unit cannot be read passes the tag filter (4.9.8: tagsCode null matches)."""
        unit = None
        if tags_code <= MAX_ADDR:
            unit = get_ext(tags_code)
            if unit is None:
                log.error("[BUG] can't find consume queue extend file content!addr=%d", tags_code)
            else:
                tags_code = unit.tags_code
        if tags_filter is not None and (unit is not None or tags_code > MAX_ADDR) and not tags_filter(tags_code):
            return False
        return ext_filter is None or ext_filter(unit)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tags_filter: TagsFilter | None = None,
                    record_filter: RecordFilter | None = None,
                    ext_filter: ExtFilter | None = None) -> GetMessageResult:
        """DefaultMessageStore.getMessage: a batch from ``offset`` within RocketMQ's transfer limits;
        ``tags_filter`` looks at each consume-queue unit's tags code, ``ext_filter`` at its ext unit's filter
        bit map (queues with the extension only), ``record_filter`` at each record read."""
        del group  # kept for the signature's sake: filters and stats are per group in RocketMQ
        if self.is_shut_down() or not self.running_flags.is_readable():
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, offset)
        max_offset_py = self.commit_log.get_max_offset()
        cq = self.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, self._correct(offset, 0))
        min_offset = cq.get_min_offset_in_queue()
        max_offset = cq.get_max_offset_in_queue()
        result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, offset, min_offset, max_offset)
        if max_offset == 0:
            result.next_begin_offset = self._correct(offset, 0)
            return result
        if offset < min_offset:
            result.status = GetMessageStatus.OFFSET_TOO_SMALL
            result.next_begin_offset = self._correct(offset, min_offset)
            return result
        if offset == max_offset:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
            result.next_begin_offset = self._correct(offset, offset)
            return result
        if offset > max_offset:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            # 4.9.8 corrects to the max offset whatever the min (older versions took the min when it was 0):
            # seen on RocketMQ 4.9.8 by harness/wire_diff.py, "pull past the end"
            result.next_begin_offset = self._correct(offset, max_offset)
            return result
        buf = cq.get_index_buffer(offset)
        if buf is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            units_per_file = cq.mapped_file_size // CQ_STORE_UNIT_SIZE
            result.next_begin_offset = self._correct(offset, offset + units_per_file - offset % units_per_file)
            log.warning("consumer request topic %s offset %d min %d max %d, but the consume queue is not exist",
                        topic, offset, min_offset, max_offset)
            return result
        try:
            result.status = GetMessageStatus.NO_MATCHED_MESSAGE
            next_phy_file_start = -1
            max_phy_pulling = 0
            max_filter = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE)
            data = buf.data
            i = 0
            limit = min(buf.size, max_filter)
            unpack = _UNIT.unpack_from
            intact = record_intact  # the read-side check (record_check.py), hoisted out of the loop
            since = self.commit_log.prop_crc_since
            require_from = since if since is not None and self.commit_log.verify_prop_crc else _NEVER
            filter_deadline = time.monotonic() + RECORD_FILTER_BUDGET_S if record_filter is not None else 0.0
            get_ext = cq.get_ext if cq.ext is not None else None  # enableConsumeQueueExt (one test per unit)
            while i < limit:
                offset_py, size_py, tags_code = unpack(data, i)
                max_phy_pulling = offset_py
                if next_phy_file_start >= 0 and offset_py < next_phy_file_start:
                    i += CQ_STORE_UNIT_SIZE
                    continue
                in_disk = self.check_in_disk_by_commit_offset(offset_py, max_offset_py)
                if self._is_batch_full(size_py, max_msg_nums, result.buffer_total_size, len(result.messages),
                                       in_disk):
                    break
                if get_ext is not None:
                    if not self._ext_matches(get_ext, tags_code, tags_filter, ext_filter):
                        if result.buffer_total_size == 0:
                            result.status = GetMessageStatus.NO_MATCHED_MESSAGE
                        i += CQ_STORE_UNIT_SIZE
                        continue
                elif tags_filter is not None and not tags_filter(tags_code):
                    if result.buffer_total_size == 0:
                        result.status = GetMessageStatus.NO_MATCHED_MESSAGE
                    i += CQ_STORE_UNIT_SIZE
                    continue
                raw = self.commit_log.read_bytes(offset_py, size_py) if size_py != 0x7FFFFFFF else None
                if raw is None:
                    if result.buffer_total_size == 0:
                        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = self.commit_log.roll_next_file(offset_py)
                    i += CQ_STORE_UNIT_SIZE
                    continue
                if not intact(raw, require_from <= offset_py):
                    self._count_bad(raw, offset_py)
                    # Skipped like a missing record, without jumping to the next file: the records after
                    # it are intact. The next begin offset moves past it.
                    if result.buffer_total_size == 0:
                        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    i += CQ_STORE_UNIT_SIZE
                    continue
                if record_filter is not None and not record_filter(raw):
                    if result.buffer_total_size == 0:
                        result.status = GetMessageStatus.NO_MATCHED_MESSAGE
                    i += CQ_STORE_UNIT_SIZE
                    # A bound on the filter's time per pull (this project's, not 4.9.8's): a costly SQL92
                    # selector evaluated on up to 800 records per pull held the broker's loop for seconds
                    # under a flood of pulls (found by the fuzzer). The pull answers with what it has; the
                    # next begin offset says where the next pull goes on.
                    if time.monotonic() > filter_deadline:
                        break
                    continue
                result.messages.append(raw)
                result.queue_offsets.append(offset + i // CQ_STORE_UNIT_SIZE)
                result.buffer_total_size += len(raw)
                result.status = GetMessageStatus.FOUND
                next_phy_file_start = -1
                i += CQ_STORE_UNIT_SIZE
            result.next_begin_offset = offset + i // CQ_STORE_UNIT_SIZE
            diff = max_offset_py - max_phy_pulling
            memory = self.config.total_physical_memory_bytes * self.config.access_message_in_memory_max_ratio // 100
            result.suggest_pulling_from_slave = diff > memory
        finally:
            buf.release()
        self.transferred_msg_count += len(result.messages)
        return result

