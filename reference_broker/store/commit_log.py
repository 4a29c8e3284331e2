"""CommitLog: single-writer append of records into the mapped file queue, roll-over and recovery.

This module owns the append path (CommitLog.asyncPutMessage/asyncPutMessages and
DefaultAppendMessageCallback, 4.9.8), the per topic-queue logical offsets (topicQueueTable), the
delay-level rewrite to SCHEDULE_TOPIC_XXXX, and raw byte access by offset for replication. Recovery is in
``commit_log_recovery.py``; the record format and its one encoder in ``common/record.py``: a record is prepared
before the put lock and written into the mapping in it, with the offsets, store time and whole-record CRC.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.message_batch import BatchDecodeError, decode_batch_entries
from reference_broker.common.names import is_path_safe
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.commit_log_recovery import CommitLogRecovery
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.mapped_file import MappedFile, SelectMappedBufferResult, fsync_dir
from reference_broker.store.mapped_file_queue import MappedFileQueue
from reference_broker.store.status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)


@dataclass(slots=True)
class MessageExtBatch:
    """A batch for one topic and queue: every message becomes its own record with consecutive offsets."""

    topic: str
    queue_id: int
    messages: list[rec.MessageExtBrokerInner] = field(default_factory=list)


@dataclass(slots=True)
class EncodedBatch:
    """A batch still in its SEND_BATCH_MESSAGE encoding (common/message_batch.py), as 4.9.8's
    MessageExtBatch keeps its body: the store writes every record straight from its entry
    (MessageExtBatchEncoder), so no message object is built per entry."""

    topic: str
    queue_id: int
    body: bytes
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    properties_suffix: bytes = b""  # "\x02NAME\x01value…", appended to every entry's properties (CLUSTER)




def _illegal_batch() -> PutMessageResult:
    return _refused(PutMessageStatus.MESSAGE_ILLEGAL)


_I32: Final = 1 << 31
_I64: Final = 1 << 63


def header_problem(queue_id: int, flag: int, sys_flag: int, born_ts: int, reconsume: int, prepared_offset: int
                   ) -> str | None:
    """Why a record's fixed fields cannot hold these values, or None. Checked before the put lock, so nothing
    is written for a refused message (4.9.8 never sees such values: its header decoder rejects them)."""
    if (0 <= queue_id < _I32 and -_I32 <= flag < _I32 and -_I32 <= sys_flag < _I32 and -_I64 <= born_ts < _I64
            and -_I32 <= reconsume < _I32 and -_I64 <= prepared_offset < _I64):
        return None
    for name, value, low, high in (("queueId", queue_id, 0, _I32), ("flag", flag, -_I32, _I32),
                                   ("sysFlag", sys_flag, -_I32, _I32), ("bornTimestamp", born_ts, -_I64, _I64),
                                   ("reconsumeTimes", reconsume, -_I32, _I32),
                                   ("preparedTransactionOffset", prepared_offset, -_I64, _I64)):
        if not low <= value < high:
            return f"{name} {value} out of range [{low}, {high - 1}]"
    return None  # pragma: no cover (the first test covers every field)


def _batch_header_refusal(flag: int, sys_flag: int, born_ts: int, reconsume: int, prepared_offset: int
                          ) -> PutMessageResult | None:
    """Why a batch's record with these header fields is refused, or None: batches carry no transactions
    (CommitLog.asyncPutMessages), and the fields must fit the record."""
    if mc.transaction_value(sys_flag) != mc.TRANSACTION_NOT_TYPE:
        return _illegal_batch()
    bad = header_problem(0, flag, sys_flag, born_ts, reconsume, prepared_offset)
    return None if bad is None else _refused(PutMessageStatus.MESSAGE_ILLEGAL, bad)


def _refused(status: PutMessageStatus, remark: str = "") -> PutMessageResult:
    result = PutMessageResult(status, AppendMessageResult(AppendMessageStatus.UNKNOWN_ERROR))
    result.remark = remark
    return result


# Not a RocketMQ file: the commit-log offset from which every record carries the whole-record CRC (written at
# the first put with enabledAppendPropCRC on; removed by a start with it off). Recovery requires the CRC from
# there on and takes BODYCRC before it, so a log written without the CRC (an older store, or the append
# switched off for a while) is never truncated for lacking it.
PROP_CRC_SINCE_FILE = "propCrcSince"



def _has_delay(props_b: bytes) -> bool:
    """A DELAY level above 0 in encoded properties (MessageExtBrokerInner.delay_time_level, from the bytes:
    the broker's batch path leaves the map empty)."""
    if b"DELAY\x01" not in props_b:
        return False
    v = mc.property_from_bytes(props_b, b"DELAY")
    return v is not None and v.isdigit() and int(v) > 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLog:
    def __init__(self, config: MessageStoreConfig, checkpoint: StoreCheckpoint) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.mapped_file_queue = MappedFileQueue(config.store_path_commit_log, config.mapped_file_size_commit_log)
        self.topic_queue_table: dict[str, int] = {}  # "topic-queueId" → next queue offset
        self._safe_topics: set[str] = set()  # topics _topic_problem passed
        self.put_lock = threading.Lock()
        self.begin_time_in_lock = 0  # ms; non-zero while a put holds the lock (isOSPageCacheBusy)
        self.last_store_ts = 0
        self.store_ip = rec.host_bytes(config.store_host[0])
        self.store_port = config.store_host[1]
        self.delay_table_ms = config.delay_level_table_ms()
        self.max_delay_level = max(self.delay_table_ms) if self.delay_table_ms else 0
        self.confirm_offset = -1
        self.msg_id_prefix = self.store_ip + self.store_port.to_bytes(4, "big")
        self.msg_id_prefix_hex = self.msg_id_prefix.hex().upper()
        self.append_prop_crc = config.enabled_append_prop_crc
        self.verify_prop_crc = config.verify_prop_crc()
        self.prop_crc_since: int | None = None  # PROP_CRC_SINCE_FILE; None: not known (yet)
        self._since_path = config.store_path_root_dir / PROP_CRC_SINCE_FILE

    # ---- lifecycle -------------------------------------------------------------------------------
    def load(self) -> bool:
        ok = self.mapped_file_queue.load()
        log.info("load commit log %s", "OK" if ok else "Failed")
        self._load_prop_crc_since()
        return ok

    # ---- where the whole-record CRC starts (PROP_CRC_SINCE_FILE) ----------------------------------------
    def _load_prop_crc_since(self) -> None:
        path = self._since_path
        self.prop_crc_since = None
        if not self.append_prop_crc:
            path.unlink(missing_ok=True)  # what is written now has no CRC: the next start with it marks anew
            return
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as e:
            log.warning("ignoring %s: %s", path, e)
            return
        if text.isdigit():
            self.prop_crc_since = int(text)
        else:
            log.warning("ignoring %s: %r is not an offset", path, text[:40])

    def set_prop_crc_since(self, offset: int) -> None:
        """Persist the offset (write, fsync, rename, fsync the directory) before a record relies on it."""
        self.prop_crc_since = offset
        path = self._since_path
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="ascii") as f:
                f.write(f"{offset}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError as e:  # no space: recovery then takes BODYCRC for these records, as for an older log
            log.error("cannot record %s (%d): %s", path, offset, e)

    @property
    def file_size(self) -> int:
        return self.config.mapped_file_size_commit_log

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def get_min_offset(self) -> int:
        """Offset of the first available file (CommitLog.getMinOffset)."""
        mf = self.mapped_file_queue.get_first_mapped_file()
        if mf is None:
            return -1
        if mf.is_available:
            return mf.file_from_offset
        return self.roll_next_file(mf.file_from_offset)

    def roll_next_file(self, offset: int) -> int:
        fs = self.file_size
        return offset + fs - offset % fs

    @property
    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    # ---- append -------------------------------------------------------------------------------
    def _apply_delay(self, msg: rec.MessageExtBrokerInner) -> None:
        """Delay levels: store in SCHEDULE_TOPIC_XXXX queue level-1 (CommitLog.asyncPutMessage)."""
        tran = mc.transaction_value(msg.sys_flag)
        if tran not in (mc.TRANSACTION_NOT_TYPE, mc.TRANSACTION_COMMIT_TYPE):
            return
        level = msg.delay_time_level
        if level <= 0 or not self.max_delay_level:
            return
        if level > self.max_delay_level:
            level = self.max_delay_level
            msg.set_property(mc.PROPERTY_DELAY_TIME_LEVEL, str(level))
        msg.set_property(mc.PROPERTY_REAL_TOPIC, msg.topic)
        msg.set_property(mc.PROPERTY_REAL_QUEUE_ID, str(msg.queue_id))
        msg.topic = mc.SCHEDULE_TOPIC
        msg.queue_id = level - 1

    def _topic_problem(self, topic: str) -> str | None:
        """A topic the consume queues cannot use as a directory name is refused here, whatever the caller
        checked (a topic that passed once is remembered: one set lookup per put)."""
        if topic in self._safe_topics:
            return None
        if not is_path_safe(topic):
            return f"topic {topic!r} cannot name a consume-queue directory"
        if len(self._safe_topics) < 100_000:
            self._safe_topics.add(topic)
        return None

    def _check_sizes(self, topic_b: bytes, props_b: bytes, body: bytes) -> AppendMessageStatus | None:
        if len(props_b) > rec.MAX_PROPERTIES_LENGTH:
            return AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
        if len(topic_b) > rec.MAX_TOPIC_LENGTH or len(body) > self.config.max_message_size:
            return AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
        return None

    def put_message(self, msg: rec.MessageExtBrokerInner) -> PutMessageResult:
        """Append one message; flushing and replication waits are the caller's (MessageStore's).

        The hot path of the store: everything that does not need the lock is computed before it.
        """
        props = msg.properties
        if mc.PROPERTY_DELAY_TIME_LEVEL in props:
            self._apply_delay(msg)
        topic = msg.topic
        topic_b = topic.encode("utf-8")
        props_b = msg.properties_bytes
        if props_b is None:
            props_b = msg.encoded_properties()
        props_b = self._stored_properties(props_b)
        append_crc = self.append_prop_crc
        body = msg.body
        if len(props_b) > rec.MAX_PROPERTIES_LENGTH:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                    AppendMessageResult(AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED))
        if len(topic_b) > rec.MAX_TOPIC_LENGTH or len(body) > self.config.max_message_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED))
        queue_id = msg.queue_id
        flag, sys_flag, born_ts = msg.flag, msg.sys_flag, msg.born_timestamp
        reconsume, prepared_offset = msg.reconsume_times, msg.prepared_transaction_offset
        bad = self._topic_problem(topic) or header_problem(queue_id, flag, sys_flag, born_ts, reconsume,
                                                           prepared_offset)
        if bad is not None:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, bad)
        born_host = msg.born_host
        born_ip = rec.host_bytes(born_host[0])
        store_ip = self.store_ip
        # Prepared before the lock (MessageExtEncoder); written into the mapping in it, with the offsets, the
        # store time and the CRC the lock decides (DefaultAppendMessageCallback.doAppend).
        r = rec.prepare_record(topic_b, body, props_b, queue_id, flag, sys_flag, born_ts, born_ip, born_host[1],
                               store_ip, self.store_port, reconsume, prepared_offset)
        total = r.layout.size
        if total + rec.END_FILE_MIN_BLANK_LENGTH > self.file_size:  # would not fit even an empty file
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED))
        tran = sys_flag & mc.TRANSACTION_ROLLBACK_TYPE
        no_cq = tran == mc.TRANSACTION_PREPARED_TYPE or tran == mc.TRANSACTION_ROLLBACK_TYPE
        key = f"{topic}-{queue_id}"
        table = self.topic_queue_table
        mfq = self.mapped_file_queue
        with self.put_lock:
            now = time.time_ns() // 1_000_000
            self.begin_time_in_lock = now
            try:
                store_ts = now if now > self.last_store_ts else self.last_store_ts
                self.last_store_ts = store_ts
                mf = mfq.mapped_files[-1] if mfq.mapped_files else None
                if mf is None or mf.staged_position + total + rec.END_FILE_MIN_BLANK_LENGTH > mf.file_size:
                    nxt = self._file_for(total, mf)
                    if nxt is None:
                        return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
                    mf = nxt
                pos = mf.staged_position
                phys = mf.file_from_offset + pos
                if append_crc and self.prop_crc_since is None:
                    self.set_prop_crc_since(phys)  # once: the first record with the CRC
                qoff = 0 if no_cq else table.get(key, 0)
                rec.write_record(mf.wbuf, pos, r, qoff, phys, store_ts, append_crc)
                mf.advance(total)
                mf.store_timestamp = store_ts
                if not no_cq:
                    table[key] = qoff + 1
            finally:
                self.begin_time_in_lock = 0
        return PutMessageResult(PutMessageStatus.PUT_OK, AppendMessageResult(
            AppendMessageStatus.PUT_OK, phys, total, "", store_ts, qoff, 1, self.msg_id_prefix))

    def _stored_properties(self, props_b: bytes) -> bytes:
        """The properties as stored: any old ``__CRC32#`` dropped, the CRC's tail reserved when on
        (CommitLog.asyncPutMessage deletes PROPERTY_CRC32 when off; MessageExtEncoder reserves it)."""
        if rec.PROP_CRC_HEAD in props_b:
            props_b = rec.strip_prop_crc(props_b)
        return rec.reserve_prop_crc(props_b) if self.append_prop_crc else props_b

    def _file_for(self, total: int, mf: MappedFile | None) -> MappedFile | None:
        """A file with room for ``total`` bytes: end the current one with a blank if needed."""
        if mf is None or mf.free_space() <= 0:
            try:
                return self.mapped_file_queue.last_file_for_write()
            except OSError as e:
                log.error("create mapped file failed: %s", e)
                return None
        if total + rec.END_FILE_MIN_BLANK_LENGTH > mf.free_space():
            return self._end_file(mf)
        return mf

    def _end_file(self, mf: MappedFile) -> MappedFile | None:
        """Fill the rest of ``mf`` with a blank record and open the next file (END_OF_FILE)."""
        free = mf.free_space()
        if free >= rec.END_FILE_MIN_BLANK_LENGTH:
            rec.write_blank(mf.wbuf, mf.staged_position, free)
        mf.advance(free)
        try:
            return self.mapped_file_queue.last_file_for_write()
        except OSError as e:
            log.error("create mapped file failed: %s", e)
            return None

    def put_messages(self, batch: MessageExtBatch) -> PutMessageResult:
        """Append a batch whole into one file (CommitLog.asyncPutMessages); msgIds comma-joined."""
        if not batch.messages:
            return _illegal_batch()
        bad = self._topic_problem(batch.topic) or header_problem(batch.queue_id, 0, 0, 0, 0, 0)
        if bad is not None:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, bad)
        topic_b = batch.topic.encode("utf-8")
        entries: list[rec.PreparedRecord] = []
        for m in batch.messages:
            m.topic = batch.topic
            m.queue_id = batch.queue_id
            refused = _batch_header_refusal(m.flag, m.sys_flag, m.born_timestamp, m.reconsume_times,
                                            m.prepared_transaction_offset)
            if refused is not None:
                return refused
            r = self._entry(topic_b, batch.queue_id, m.body, m.encoded_properties(), m.flag, m.sys_flag,
                            m.born_timestamp, rec.host_bytes(m.born_host[0]), m.born_host[1], m.reconsume_times,
                            m.prepared_transaction_offset, -1)
            if isinstance(r, PutMessageResult):
                return r
            entries.append(r)
        return self._append_batch(batch.topic, batch.queue_id, entries)

    def put_encoded_batch(self, batch: EncodedBatch) -> PutMessageResult:
        """``put_messages`` for a batch still in its wire encoding: each record is written from its entry
        (MessageExtBatchEncoder), with no message object per entry; a body that does not parse is illegal."""
        try:
            raw_entries = decode_batch_entries(batch.body)
        except BatchDecodeError as exc:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, f"bad batch body: {exc}")
        bad = self._topic_problem(batch.topic) or header_problem(batch.queue_id, 0, 0, 0, 0, 0)
        if bad is not None:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, bad)
        # Every entry shares the batch's header fields but its flag, a signed 32-bit field of the entry
        # (decode_batch_entries): in range by construction, so the header is checked once per batch.
        refused = _batch_header_refusal(0, batch.sys_flag, batch.born_timestamp, 0, 0)
        if refused is not None:
            return refused
        topic_b = batch.topic.encode("utf-8")
        born_ip = rec.host_bytes(batch.born_host[0])
        suffix = batch.properties_suffix
        entry = self._entry
        entries: list[rec.PreparedRecord] = []
        for flag, body, props, crc in raw_entries:
            if suffix:
                # MessageExtBatchEncoder: a separator only when the entry's properties do not end with one
                props = props + suffix if props and props[-1] != 2 else props + suffix[1:]
            r = entry(topic_b, batch.queue_id, body, props, flag, batch.sys_flag, batch.born_timestamp, born_ip,
                      batch.born_host[1], 0, 0, crc)
            if isinstance(r, PutMessageResult):
                return r
            entries.append(r)
        return self._append_batch(batch.topic, batch.queue_id, entries)

    def _entry(self, topic_b: bytes, queue_id: int, body: bytes, encoded: bytes, flag: int, sys_flag: int, born_ts: int,
               born_ip: bytes, born_port: int, reconsume: int, prepared_offset: int, body_crc: int
               ) -> rec.PreparedRecord | PutMessageResult:
        """One record of a batch (``queue_id`` is the batch's; its header fields checked by
        ``_batch_header_refusal``), prepared; or why the batch is refused."""
        if _has_delay(encoded):
            return _illegal_batch()  # batches carry no delays (CommitLog.asyncPutMessages)
        props_b = self._stored_properties(encoded)
        bad = self._check_sizes(topic_b, props_b, body)
        if bad is not None:
            status = (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                      if bad is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED else PutMessageStatus.MESSAGE_ILLEGAL)
            return PutMessageResult(status, AppendMessageResult(bad))
        return rec.prepare_record(topic_b, body, props_b, queue_id, flag, sys_flag, born_ts, born_ip, born_port,
                                  self.store_ip, self.store_port, reconsume, prepared_offset, body_crc)

    def _append_batch(self, topic: str, queue_id: int, prepared: list[rec.PreparedRecord]) -> PutMessageResult:
        """Write records prepared outside the lock into one file with consecutive queue offsets
        (CommitLog.asyncPutMessages, MessageExtBatchEncoder)."""
        grand = sum(r.size for r in prepared)
        # The encoder buffer is maxMessageSize + 64 KiB: a longer batch is illegal (MessageExtBatchEncoder).
        if grand > self.config.max_message_size + 64 * 1024 or grand + 8 > self.file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED))
        key = f"{topic}-{queue_id}"
        append_crc = self.append_prop_crc
        write = rec.write_record
        with self.put_lock:
            now = _now_ms()
            self.begin_time_in_lock = now
            try:
                store_ts = now if now > self.last_store_ts else self.last_store_ts
                self.last_store_ts = store_ts
                try:
                    mf = self.mapped_file_queue.last_file_for_write()
                except OSError as e:
                    log.error("create mapped file failed: %s", e)
                    return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
                if grand + rec.END_FILE_MIN_BLANK_LENGTH > mf.free_space():
                    nxt = self._end_file(mf)
                    if nxt is None:
                        return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
                    mf = nxt
                start = mf.file_from_offset + mf.staged_position
                if append_crc and self.prop_crc_since is None:
                    self.set_prop_crc_since(start)  # once: the first record with the CRC
                first_q = qoff = self.topic_queue_table.get(key, 0)
                ids: list[str] = []
                id_prefix = self.msg_id_prefix_hex
                wbuf = mf.wbuf
                pos = mf.staged_position
                for r in prepared:
                    phys = mf.file_from_offset + pos
                    pos += write(wbuf, pos, r, qoff, phys, store_ts, append_crc)
                    ids.append(f"{id_prefix}{phys:016X}")  # rec.create_message_id, prefix formatted once
                    qoff += 1
                mf.advance(grand)
                mf.store_timestamp = store_ts
                self.topic_queue_table[key] = qoff
            finally:
                self.begin_time_in_lock = 0
        return PutMessageResult(PutMessageStatus.PUT_OK, AppendMessageResult(
            AppendMessageStatus.PUT_OK, start, grand, ",".join(ids), store_ts, first_q, len(prepared)))

    # ---- reads --------------------------------------------------------------------------------
    def get_data(self, offset: int, return_first_on_not_found: bool = False) -> SelectMappedBufferResult | None:
        """Bytes from ``offset`` to the write position of its file (reput, replication)."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, return_first_on_not_found)
        if mf is None:
            return None
        return mf.select(offset % self.file_size)

    def get_message(self, offset: int, size: int) -> SelectMappedBufferResult | None:
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        return mf.select(offset % self.file_size, size)

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        res = self.get_message(offset, size)
        if res is None:
            return None
        try:
            return bytes(res.data)
        finally:
            res.release()

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (-1 when it cannot be read)."""
        if offset < self.get_min_offset():
            return -1
        res = self.get_message(offset, size)
        if res is None:
            return -1
        try:
            return rec.store_timestamp_at(res.data, 0)
        except (struct.error, ValueError):  # damaged or short bytes (a released view: ValueError): no timestamp
            return -1
        finally:
            res.release()

    def get_bulk_data(self, offset: int, max_bytes: int) -> bytes:
        """Raw commit-log bytes from ``offset``, within one file (replication's read side)."""
        res = self.get_data(offset)
        if res is None:
            return b""
        try:
            return bytes(res.data[:max_bytes])
        finally:
            res.release()

    def append_data(self, start_offset: int, data: bytes | memoryview | Sequence[bytes | memoryview]) -> bool:
        """Raw append of replicated bytes at ``start_offset`` (CommitLog.appendData on a slave): one chunk, or
        several contiguous ones written together (several frames of one read).

        The bytes must continue the log exactly and stay within one file (the master never sends a frame
        across files; the slave joins only frames of one file).
        """
        views = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        with self.put_lock:
            if start_offset != self.get_max_offset() and self.get_max_offset() != 0:
                log.error("append_data at %d but the log ends at %d", start_offset, self.get_max_offset())
                return False
            try:
                mf = self.mapped_file_queue.last_file_for_write(start_offset)
            except OSError as e:
                log.error("create mapped file failed: %s", e)
                return False
            if mf.file_from_offset + mf.wrote_position != start_offset:
                log.error("append_data at %d does not continue file %s", start_offset, mf.file_name)
                return False
            try:
                return mf.append_views(views)
            except OSError as e:
                log.error("append_data failed: %s", e)
                return False

    # ---- recovery (commit_log_recovery.py) ------------------------------------------------------
    def recover_normally(self, max_phy_offset_of_cq: int, truncate_logics: Callable[[int], None]) -> int:
        """CommitLog.recoverNormally: scan the last three files with CRC, truncate at the first bad record."""
        return CommitLogRecovery(self).recover_normally(max_phy_offset_of_cq, truncate_logics)

    def recover_abnormally(self, max_phy_offset_of_cq: int, dispatch: Callable[[list[DispatchRequest]], None],
                           truncate_logics: Callable[[int], None]) -> int:
        """CommitLog.recoverAbnormally: from the newest file older than the checkpoint, re-dispatch all."""
        return CommitLogRecovery(self).recover_abnormally(max_phy_offset_of_cq, dispatch, truncate_logics)

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown(0)
