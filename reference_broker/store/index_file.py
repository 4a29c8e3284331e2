"""IndexFile and IndexService: the on-disk hash index from message keys to commit-log offsets.

This module owns the index file format and the rules for building, rolling, loading, querying and
deleting index files (store/.../index/IndexFile.java, IndexHeader.java, IndexService.java, 4.9.8).

Format, big-endian; file size ``40 + hashSlotNum*4 + indexNum*20`` (defaults: 420,000,040 bytes):

| part   | offset                    | field          | type | meaning                                 |
|--------|---------------------------|----------------|------|-----------------------------------------|
| header | 0                         | beginTimestamp | long | store time of the first entry (ms)      |
|        | 8                         | endTimestamp   | long | store time of the last entry (ms)       |
|        | 16                        | beginPhyOffset | long | commit-log offset of the first entry    |
|        | 24                        | endPhyOffset   | long | commit-log offset of the last entry     |
|        | 32                        | hashSlotCount  | int  | slots in use                            |
|        | 36                        | indexCount     | int  | next entry number (starts at 1)         |
| slot   | 40 + slot*4               | newest entry   | int  | entry number; 0 = empty                 |
| entry  | 40 + hashSlotNum*4 + n*20 | keyHash        | int  | abs(key.hashCode()), 0 for MIN_VALUE    |
|        | +4                        | phyOffset      | long | commit-log offset of the message        |
|        | +12                       | timeDiff       | int  | (storeTs - beginTimestamp) / 1000, >= 0 |
|        | +16                       | prevIndex      | int  | older entry in the same slot; 0 = none  |

Entry number 0 is never written: 0 is the "no entry" sentinel, so a file holds ``indexNum - 1``
entries (IndexFileTest). Files are named by creation time, yyyyMMddHHmmssSSS (17 digits).

Deliberate differences from RocketMQ:
- Only one 40-byte pack writes the header on each put (RocketMQ writes each changed field); the in-memory
  header and the mapped one stay equal either way.
- An existing file whose length differs from the configured size fails ``load`` (RocketMQ maps it at the
  configured size regardless, which silently mixes two layouts).
- A put that keeps failing on fresh files gives up after ``MAX_TRY_IDX_CREATE`` files instead of looping.
- Background flushes of full files run in roll order (each waits for the one before), so
  checkpoint.indexMsgTimestamp never moves back and never covers a file that is not yet flushed.
- After an abnormal exit with an index safe point in the checkpoint (recoverFromCheckpointOffset), the file
  being written is cut back to the safe point instead of destroyed, and the replay adds what follows it
  (index_recovery.py, index_safe_point.py). Without one, 4.9.8's rule applies.

Kept as in RocketMQ: the first entry of a rolled file stores its timeDiff against the previous file's end
timestamp (the header's begin at that moment), then begin is reset to the entry's own store time, so that
entry reads back up to (its time - previous end) later than it was stored.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np

from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.java_hash import concat_hash_code, hash_codes, string_hash_code
from reference_broker.common.message import KEY_SEPARATOR, TRANSACTION_ROLLBACK_TYPE, transaction_value
from reference_broker.store import index_recovery
from reference_broker.store.checkpoint import IndexSafePoint, StoreCheckpoint
from reference_broker.store.index_safe_point import IndexSafePoints
from reference_broker.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

_HEADER: Final = struct.Struct(">qqqqii")  # IndexHeader.INDEX_HEADER_SIZE = 40
_SLOT: Final = struct.Struct(">i")
_ENTRY: Final = struct.Struct(">iqii")
_ENTRY_DTYPE: Final = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_VECTOR_MIN_KEYS: Final = 16  # below this a run is put key by key (numpy's fixed cost per call is larger)
HEADER_SIZE: Final = _HEADER.size
HASH_SLOT_SIZE: Final = _SLOT.size
INDEX_SIZE: Final = _ENTRY.size
INVALID_INDEX: Final = 0
_INT_MAX: Final = 2**31 - 1
_INT_MIN: Final = -(2**31)

MAX_TRY_IDX_CREATE: Final = 3  # IndexService.MAX_TRY_IDX_CREATE
MAX_MSGS_NUM_BATCH: Final = 64  # MessageStoreConfig.maxMsgsNumBatch
_DESTROY_EXPIRED_INTERVAL_MS: Final = 3000  # IndexService.deleteExpiredFile: file.destroy(3000)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: Math.abs(hashCode), and 0 when that is still negative."""
    return _abs_hash(string_hash_code(key))


def _abs_hash(h: int) -> int:
    return 0 if h == _INT_MIN else abs(h)


class IndexFile:
    """One index file: a hash table of chained entries in a MappedFile."""

    def __init__(
        self,
        path: Path,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        create: bool = True,
    ) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_at = HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self._mf = MappedFile(path, self.file_size, create=create, random_access=True)
        if create:
            self._mf.populate(self._entries_at)  # header and hash slots: touched at random by every put
        # Guards the header: the dispatch thread's puts against a flush thread's header write.
        self._lock = threading.Lock()
        self._begin_timestamp = 0
        self._end_timestamp = 0
        self._begin_phy_offset = 0
        self._end_phy_offset = 0
        self._hash_slot_count = 0
        self._index_count = 1  # IndexHeader: entry 0 is the invalid sentinel
        # A new file continues where the full one ended (IndexFile constructor); the first put resets begin.
        if end_phy_offset > 0:
            self._begin_phy_offset = self._end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            self._begin_timestamp = self._end_timestamp = end_timestamp
        if end_phy_offset > 0 or end_timestamp > 0:
            self._write_header()
        self._mark_used()

    # ---- header --------------------------------------------------------------------------------
    def _write_header(self) -> None:
        _HEADER.pack_into(self._mf.buf, 0, self._begin_timestamp, self._end_timestamp,
                          self._begin_phy_offset, self._end_phy_offset, self._hash_slot_count,
                          self._index_count)

    def _mark_used(self) -> None:
        # MappedFile flushes only when its write position moved: keep it at the end of the used entries.
        self._mf.wrote_position = self._entries_at + self._index_count * INDEX_SIZE

    def load(self) -> None:
        """Read the header of an existing file (IndexHeader.load: a count <= 0 becomes 1)."""
        with self._lock:
            (self._begin_timestamp, self._end_timestamp, self._begin_phy_offset, self._end_phy_offset,
             self._hash_slot_count, self._index_count) = _HEADER.unpack_from(self._mf.buf, 0)
            if self._index_count <= 0:
                self._index_count = 1
            self._mf.set_positions(self._entries_at + min(self._index_count, self.index_num) * INDEX_SIZE)

    def safe_point(self, covered_offset: int) -> IndexSafePoint:
        """The header as it is now, for a safe point (take it before ``flush``)."""
        with self._lock:
            return IndexSafePoint(int(self.path.name), covered_offset, self._begin_timestamp, self._end_timestamp,
                                  self._begin_phy_offset, self._end_phy_offset, self._hash_slot_count,
                                  self._index_count)

    def cut_back(self, count: int, floor_phy: int) -> index_recovery.RepairReport:
        """Keep entries ``1 .. count - 1`` only: mend the slots that name later ones (index_recovery)."""
        count = max(1, min(count, self.index_num))
        report = index_recovery.cut_back(self._mf.buf, self.hash_slot_num, self.index_num, count, floor_phy)
        with self._lock:
            self._index_count = count
            self._write_header()
        self._mf.set_positions(self._entries_at + count * INDEX_SIZE)
        return report

    def restore(self, sp: IndexSafePoint) -> index_recovery.RepairReport:
        """Back to the header a safe point recorded: what was on disk then (after an abnormal exit)."""
        with self._lock:
            self._begin_timestamp, self._end_timestamp = sp.begin_timestamp, sp.end_timestamp
            self._begin_phy_offset, self._end_phy_offset = sp.begin_phy_offset, sp.end_phy_offset
            self._hash_slot_count = sp.hash_slot_count
        return self.cut_back(sp.index_count, sp.end_phy_offset)

    def truncate_from(self, phy_offset: int) -> bool:
        """Drop the entries of records at or past ``phy_offset`` (the recovered log end); True if any."""
        count = index_recovery.first_entry_at_or_past(self._mf.buf, self.hash_slot_num, self._index_count,
                                                      phy_offset)
        if count >= self._index_count:
            return False
        with self._lock:
            if count > 1:
                _h, phy, diff, _p = _ENTRY.unpack_from(self._mf.buf, self._entries_at + (count - 1) * INDEX_SIZE)
                self._end_phy_offset = phy
                # Entries keep whole seconds since begin: the end time reads back at most 1 s early.
                self._end_timestamp = self._begin_timestamp + diff * 1000
            else:  # no entry left: nothing is indexed, so build_index may skip nothing
                self._begin_phy_offset = self._end_phy_offset = 0
                self._begin_timestamp = self._end_timestamp = 0
        self.cut_back(count, phy_offset)
        return True

    @property
    def file_name(self) -> str:
        return self.path.name

    @property
    def begin_timestamp(self) -> int:
        return self._begin_timestamp

    @property
    def end_timestamp(self) -> int:
        return self._end_timestamp

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy_offset

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy_offset

    @property
    def hash_slot_count(self) -> int:
        return self._hash_slot_count

    @property
    def index_count(self) -> int:
        return self._index_count

    @property
    def is_available(self) -> bool:
        return self._mf.is_available

    def is_write_full(self) -> bool:
        return self._index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched: the query range covers, or starts or ends inside, the file's range."""
        b, e = self._begin_timestamp, self._end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    # ---- write (one dispatch thread) -----------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp: int, hash_code: int | None = None) -> bool:
        """IndexFile.putKey: prepend an entry to the key's slot chain; False when full or on error.

        ``hash_code``: ``key.hashCode()`` when the caller has it already (IndexService does).
        """
        count = self._index_count
        if count >= self.index_num:
            log.warning("Over index file capacity: index count = %d; index max num = %d",
                        count, self.index_num)
            return False
        key_hash = index_key_hash(key) if hash_code is None else _abs_hash(hash_code)
        abs_slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        abs_index_pos = self._entries_at + count * INDEX_SIZE
        try:
            buf = self._mf.buf
            self._mf.ensure_allocated(abs_index_pos + INDEX_SIZE)
            (slot_value,) = _SLOT.unpack_from(buf, abs_slot_pos)
            # A slot value from beyond the count is garbage (a file reused after a crash): start a new chain.
            if slot_value <= INVALID_INDEX or slot_value > count:
                slot_value = INVALID_INDEX
            begin_ts = self._begin_timestamp
            # Java's long division truncates toward zero; anything negative is clamped to 0 anyway.
            time_diff = 0 if begin_ts <= 0 else min(max((store_timestamp - begin_ts) // 1000, 0), _INT_MAX)
            # Entry before slot before count: a concurrent reader that sees the new slot finds the entry.
            _ENTRY.pack_into(buf, abs_index_pos, key_hash, phy_offset, time_diff, slot_value)
            _SLOT.pack_into(buf, abs_slot_pos, count)
            with self._lock:
                if count <= 1:
                    self._begin_phy_offset = phy_offset
                    self._begin_timestamp = store_timestamp
                if slot_value == INVALID_INDEX:  # 4.9.8 counts only newly used slots
                    self._hash_slot_count += 1
                self._index_count = count + 1
                self._end_phy_offset = phy_offset
                self._end_timestamp = store_timestamp
                self._write_header()
            self._mf.wrote_position = abs_index_pos + INDEX_SIZE
            return True
        except (ValueError, OSError, struct.error):
            # ValueError: the mapping was released by a concurrent destroy; OSError: no space to reserve.
            log.exception("putKey exception, Key: %s KeyHashCode: %d", key, string_hash_code(key))
            return False

    def put_keys(self, keys: Sequence[str], hash_codes: Sequence[int], phy_offsets: Sequence[int],
                 store_timestamps: Sequence[int]) -> int:
        """``put_key`` for a run of keys, in order: how many were put (fewer when the file fills up; 0 also
        on error). Leaves the same bytes as putting them one by one.

        The chains are built in one vectorised step: a key's previous entry is the last earlier key of the
        run in the same slot, else the slot's value; each used slot ends up naming its run's last key.
        """
        n = min(len(keys), self.index_num - self._index_count)
        if n <= 0:
            if keys:
                log.warning("Over index file capacity: index count = %d; index max num = %d",
                            self._index_count, self.index_num)
            return 0
        # Key by key: a short run (numpy's fixed cost is larger), and a file's first entry, which also sets
        # the file's begin (its timeDiff is taken against the old one).
        one_by_one = n if n < _VECTOR_MIN_KEYS else 1 if self._index_count <= 1 else 0
        for done in range(one_by_one):
            if not self.put_key(keys[done], phy_offsets[done], store_timestamps[done], hash_codes[done]):
                return done
        if one_by_one == n:
            return n
        done = one_by_one
        count = self._index_count
        m = n - done
        try:
            codes = np.asarray(hash_codes[done:n], dtype=np.int64)
            key_hash = np.where(codes == _INT_MIN, 0, np.abs(codes))
            slots = key_hash % self.hash_slot_num
            nums = np.arange(count, count + m, dtype=np.int64)
            ts = np.asarray(store_timestamps[done:n], dtype=np.int64)
            begin_ts = self._begin_timestamp
            diff = np.zeros(m, np.int64) if begin_ts <= 0 else np.clip((ts - begin_ts) // 1000, 0, _INT_MAX)
            start = self._entries_at + count * INDEX_SIZE
            end = start + m * INDEX_SIZE
            self._mf.ensure_allocated(end)
            buf = self._mf.buf
            table = np.frombuffer(buf, dtype=">i4", count=self.hash_slot_num, offset=HEADER_SIZE)
            try:
                old = table[slots].astype(np.int64)
                old[(old <= INVALID_INDEX) | (old > nums)] = INVALID_INDEX  # garbage from beyond the count
                order = np.argsort(slots, kind="stable")
                sorted_slots = slots[order]
                follows = np.zeros(m, dtype=bool)
                follows[1:] = sorted_slots[1:] == sorted_slots[:-1]
                prev_sorted = old[order]
                prev_sorted[1:][follows[1:]] = nums[order][:-1][follows[1:]]
                prev = np.empty(m, np.int64)
                prev[order] = prev_sorted
                entries = np.empty(m, dtype=_ENTRY_DTYPE)
                entries["hash"] = key_hash
                entries["phy"] = np.asarray(phy_offsets[done:n], dtype=np.int64)
                entries["diff"] = diff
                entries["prev"] = prev
                # Entries before slots before the count, as put_key does.
                buf[start:end] = entries.tobytes()
                last_in_slot = np.ones(m, dtype=bool)
                last_in_slot[:-1] = ~follows[1:]
                table[sorted_slots[last_in_slot]] = nums[order][last_in_slot]
                new_slots = int(np.count_nonzero(prev == INVALID_INDEX))
            finally:
                del table  # no export may outlive the call: the mapping must stay closable
        except (ValueError, OSError):
            log.exception("putKey exception, Key: %s", keys[done])
            return done
        with self._lock:
            self._hash_slot_count += new_slots
            self._index_count = count + m
            self._end_phy_offset = int(phy_offsets[n - 1])
            self._end_timestamp = int(store_timestamps[n - 1])
            self._write_header()
        self._mf.wrote_position = end
        return n

    # ---- read (any thread) ---------------------------------------------------------------------
    def select_phy_offset(self, keys: list[str], max_num: int, begin: int, end: int) -> list[int]:
        """IndexFile.selectPhyOffset: offsets of entries whose hash matches and time is in [begin, end].

        Newest first. Only the hash is compared: the caller re-checks keys on the messages themselves.
        A file destroyed concurrently yields what was found so far (usually ``[]``).
        """
        found: list[int] = []
        if max_num <= 0 or not self._mf.hold():
            return found
        try:
            buf = self._mf.buf
            for key in keys:
                key_hash = index_key_hash(key)
                abs_slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
                (slot_value,) = _SLOT.unpack_from(buf, abs_slot_pos)
                count = self._index_count
                if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
                    continue
                begin_ts = self._begin_timestamp
                next_index = slot_value
                while len(found) < max_num:
                    hash_read, phy_read, time_diff, prev_read = _ENTRY.unpack_from(
                        buf, self._entries_at + next_index * INDEX_SIZE)
                    if time_diff < 0:
                        break
                    time_read = begin_ts + time_diff * 1000
                    if hash_read == key_hash and begin <= time_read <= end:
                        found.append(phy_read)
                    # Stop at the chain's end, on a corrupt link, or once entries are older than the range.
                    if (prev_read <= INVALID_INDEX or prev_read > self._index_count
                            or prev_read == next_index or time_read < begin):
                        break
                    next_index = prev_read
        except (ValueError, struct.error):
            log.exception("selectPhyOffset exception")
        finally:
            self._mf.release()
        return found

    # ---- lifecycle -----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the header and force the file to disk (IndexFile.flush)."""
        start = time.monotonic()
        if not self._mf.hold():
            return
        try:
            with self._lock:
                self._write_header()
            self._mf.flush(0)
        finally:
            self._mf.release()
        log.info("flush index file %s elapsed time(ms) %d", self.path.name,
                 int((time.monotonic() - start) * 1000))

    def shutdown(self, interval_forcibly_ms: int = 0) -> None:
        """Unmap without deleting (the mapping closes when the last reader releases it)."""
        self._mf.shutdown(interval_forcibly_ms)

    def destroy(self, interval_ms: int) -> bool:
        return self._mf.destroy(interval_ms)

    def __repr__(self) -> str:
        return (f"IndexFile({self.path.name}, count={self._index_count}, "
                f"ts=[{self._begin_timestamp},{self._end_timestamp}], "
                f"phy=[{self._begin_phy_offset},{self._end_phy_offset}])")


@dataclass
class QueryOffsetResult:
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


def _human_time_name(now_ms: int) -> str:
    """UtilAll.timeMillisToHumanString: local time as yyyyMMddHHmmssSSS."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms // 1000)) + f"{now_ms % 1000:03d}"


class IndexService(IndexSafePoints):
    """The ordered index files of one store, built by the dispatch thread and queried by any thread."""

    def __init__(
        self,
        store_root_index_dir: Path,
        hash_slot_num: int,
        index_num: int,
        checkpoint: StoreCheckpoint,
        *,
        message_index_safe: bool = False,
        max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH,
        safe_point_recovery: bool = False,
    ) -> None:
        self.store_path = store_root_index_dir  # {root}/index
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.checkpoint = checkpoint
        # Read by recovery (checkpoint.get_min_timestamp_index), not here: kept with the service it qualifies.
        self.message_index_safe = message_index_safe
        self.max_msgs_num_batch = max_msgs_num_batch
        # Abnormal loads cut back to checkpoint.index_safe_point (index_recovery.py) rather than destroy
        # the file being written; set with recoverFromCheckpointOffset, whose replay needs it.
        self.safe_point_recovery = safe_point_recovery
        self._durable: set[str] = set()  # full files whose final flush completed
        self._dir_synced: set[str] = set()  # files whose directory entry a safe point made durable
        self.index_file_error = False  # RunningFlags.makeIndexFileError
        self.retry_interval_s = 1.0  # retryGetAndCreateIndexFile sleeps 1 s between attempts
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()  # guards the list; readers work on a snapshot
        self._flush_threads: list[threading.Thread] = []

    # ---- loading -------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool) -> bool:
        """Map existing files in name order; after an abnormal exit cut back to the index safe point when
        there is one (``_load_against``), else drop those newer than the checkpoint.

        A file whose end timestamp is past checkpoint.indexMsgTimestamp may not have been flushed
        whole; recovery re-dispatches its messages into a fresh file (IndexService.load).
        """
        if not self.store_path.is_dir():
            return True
        sp = self.checkpoint.index_safe_point if self.safe_point_recovery and not last_exit_ok else None
        expected = index_file_size(self.hash_slot_num, self.index_num)
        for p in sorted(self.store_path.iterdir(), key=lambda q: q.name):
            if not p.is_file() or not p.name.isdigit():
                log.error("load file %s error: not an index file name", p)  # NumberFormatException
                continue
            size = p.stat().st_size
            if size == 0:
                # A crash between creating a file and sizing it: no entries, nothing to lose. Failing
                # here would also leave every newer file unloaded.
                log.warning("load file %s: empty (crash while creating it): deleted", p)
                p.unlink()
                continue
            if size != expected:
                log.error("load file %s error: length %d does not match %d", p, size, expected)
                return False
            try:
                f = IndexFile(p, self.hash_slot_num, self.index_num, create=False)
            except (OSError, ValueError):
                log.exception("load file %s error", p)
                return False
            f.load()
            if sp is not None:
                self._load_against(f, sp)
                continue
            if not last_exit_ok and f.end_timestamp > self.checkpoint.index_msg_timestamp:
                f.destroy(0)
                log.info("destroyed index file %s: end %d is past the checkpoint %d",
                         p.name, f.end_timestamp, self.checkpoint.index_msg_timestamp)
                continue
            log.info("load index file OK, %s", p.name)
            self._files.append(f)
        return True

    # ---- files ---------------------------------------------------------------------------------
    def get_last_file(self) -> IndexFile | None:
        files = self._files
        return files[-1] if files else None

    def files(self) -> list[IndexFile]:
        with self._lock:
            return list(self._files)

    def get_total_size(self) -> int:
        files = self._files
        return files[0].file_size * len(files) if files else 0

    def _new_file_path(self, last: IndexFile | None) -> Path:
        name = _human_time_name(int(time.time() * 1000))
        # Names order the files on load: never reuse or go below the newest (same ms, clock stepping back).
        floor = int(last.file_name) if last is not None and last.file_name.isdigit() else -1
        n = max(int(name), floor + 1)
        while (self.store_path / f"{n:017d}").exists():
            n += 1
        return self.store_path / f"{n:017d}"

    def get_and_create_last_index_file(self) -> IndexFile | None:
        """The last file while it has room, else a new one that continues the full one's ends.

        The full file is flushed on its own thread, which then advances the checkpoint
        (IndexService.getAndCreateLastIndexFile). None when the file cannot be created.
        """
        prev: IndexFile | None = None
        with self._lock:
            if self._files:
                tmp = self._files[-1]
                if not tmp.is_write_full():
                    return tmp
                prev = tmp
        end_phy = prev.end_phy_offset if prev is not None else 0
        end_ts = prev.end_timestamp if prev is not None else 0
        path: Path | None = None
        try:
            self.store_path.mkdir(parents=True, exist_ok=True)
            path = self._new_file_path(prev)
            f = IndexFile(path, self.hash_slot_num, self.index_num, end_phy, end_ts)
        except (OSError, ValueError):
            log.exception("getLastIndexFile exception")
            if path is not None:
                path.unlink(missing_ok=True)  # a file that could not be reserved (disk full)
            return None
        with self._lock:
            self._files.append(f)
        if prev is not None:
            self._flush_threads = [x for x in self._flush_threads if x.is_alive()]
            before = self._flush_threads[-1] if self._flush_threads else None
            t = threading.Thread(target=self._flush_after, args=(before, prev), name="FlushIndexFileThread",
                                 daemon=True)
            self._flush_threads.append(t)
            t.start()
        return f

    def _flush_after(self, before: threading.Thread | None, f: IndexFile) -> None:
        if before is not None:
            before.join()
        self._flush(f)

    def retry_get_and_create_index_file(self) -> IndexFile | None:
        for times in range(MAX_TRY_IDX_CREATE):
            f = self.get_and_create_last_index_file()
            if f is not None:
                return f
            log.info("Tried to create index file %d times", times + 1)
            if times + 1 < MAX_TRY_IDX_CREATE:
                time.sleep(self.retry_interval_s)
        self.index_file_error = True
        log.error("Mark index file cannot build flag")
        return None

    # ---- building (the dispatch thread) --------------------------------------------------------
    def build_index(self, req: DispatchRequest) -> None:
        """IndexService.buildIndex: index ``topic#uniqKey`` and ``topic#key`` for each key token."""
        if req.uniq_key is None and not req.keys:
            return  # nothing to index (RocketMQ finds the file first; the outcome is the same)
        f = self.retry_get_and_create_index_file()
        if f is None:
            log.error("build index error, stop building index")
            return
        if req.commit_log_offset < f.end_phy_offset:
            return  # already indexed (recovery re-dispatches from before the index's end)
        if transaction_value(req.sys_flag) == TRANSACTION_ROLLBACK_TYPE:
            return
        if req.uniq_key is not None:
            f = self._put_key(f, req, req.uniq_key)
            if f is None:
                log.error("putKey error commitlog %d uniqkey %s", req.commit_log_offset, req.uniq_key)
                return
        if req.keys:
            for key in req.keys.split(KEY_SEPARATOR):
                if key:
                    f = self._put_key(f, req, key)
                    if f is None:
                        log.error("putKey error commitlog %d key %s", req.commit_log_offset, key)
                        return

    def build_index_batch(self, reqs: Sequence[DispatchRequest]) -> None:
        """``build_index`` for a run of records in log order: the same entries in the same order, put
        through ``IndexFile.put_keys``. A key the run's file cannot take goes the one-by-one way."""
        keys: list[str] = []
        phys: list[int] = []
        stamps: list[int] = []
        owner: list[int] = []
        f: IndexFile | None = None
        floor = 0
        last_keyed = -1  # the last record with keys, indexed or skipped
        rollback = TRANSACTION_ROLLBACK_TYPE
        if reqs and all(r.uniq_key is not None and not r.keys for r in reqs):
            # The usual run (a producer's sends: a UNIQ_KEY each, no KEYS): the same lists, built by comprehension.
            f = self.retry_get_and_create_index_file()
            if f is None:
                log.error("build index error, stop building index")
                return
            floor = f.end_phy_offset
            last_keyed = len(reqs) - 1
            chosen = [i for i, r in enumerate(reqs)
                      if r.commit_log_offset >= floor and r.sys_flag & rollback != rollback]
            keys = [f"{reqs[i].topic}#{reqs[i].uniq_key}" for i in chosen]
            phys = [reqs[i].commit_log_offset for i in chosen]
            stamps = [reqs[i].store_timestamp for i in chosen]
            owner = chosen
            reqs_loop: Sequence[DispatchRequest] = ()
        else:
            reqs_loop = reqs
        for i, req in enumerate(reqs_loop):
            uniq = req.uniq_key
            if uniq is None and not req.keys:
                continue
            last_keyed = i
            if f is None:
                f = self.retry_get_and_create_index_file()
                if f is None:
                    log.error("build index error, stop building index")
                    return
                floor = f.end_phy_offset
            if req.commit_log_offset < floor or req.sys_flag & rollback == rollback:
                continue  # already indexed (recovery re-dispatches from before the index's end); rolled back
            prefix = req.topic + "#"
            if uniq is not None:
                keys.append(prefix + uniq)
                phys.append(req.commit_log_offset)
                stamps.append(req.store_timestamp)
                owner.append(i)
            if req.keys:
                for key in req.keys.split(KEY_SEPARATOR):
                    if key:
                        keys.append(prefix + key)
                        phys.append(req.commit_log_offset)
                        stamps.append(req.store_timestamp)
                        owner.append(i)
        codes = hash_codes(keys)
        done = 0
        rolls = 0  # fresh files that took nothing, in a row (``_put_key`` gives a record up after 3)
        while f is not None and done < len(keys):
            put = f.put_keys(keys[done:], codes[done:], phys[done:], stamps[done:])
            done += put
            rolls = 0 if put else rolls + 1
            if done == len(keys):
                break
            if not f.is_write_full():
                # An error, not a full file: the rest goes the one-by-one way, with its retries and logs.
                rest = owner[done]
                self._build_index_from(reqs[rest], done - owner.index(rest))
                for req in reqs[rest + 1:]:
                    self.build_index(req)
                return
            if rolls > MAX_TRY_IDX_CREATE:
                # Files with no room for even one key: give this record up, as _put_key does.
                log.error("putKey error commitlog %d key %s", phys[done], keys[done])
                rest = owner[done]
                while done < len(keys) and owner[done] == rest:
                    done += 1
                rolls = 0
                if done == len(keys):
                    break
            log.warning("Index file [%s] is full, trying to create another one", f.file_name)
            f = self.retry_get_and_create_index_file()
        if f is None:
            if done < len(keys):
                log.error("putKey error commitlog %d key %s", phys[done], keys[done])
            return
        if f.is_write_full() and last_keyed > (owner[done - 1] if done else -1):
            # A record after the last key put (skipped, or given up) still asked for a file, as
            # build_index does before its checks: the full file is rolled and flushed.
            self.retry_get_and_create_index_file()

    def _build_index_from(self, req: DispatchRequest, first: int) -> None:
        """``build_index`` for one record, from its ``first``-th key on (the earlier ones are in)."""
        f = self.retry_get_and_create_index_file()
        if f is None:
            return
        tokens = ([req.uniq_key] if req.uniq_key is not None else []) + \
            [k for k in req.keys.split(KEY_SEPARATOR) if k]
        for key in tokens[first:]:
            nf = self._put_key(f, req, key)
            if nf is None:
                log.error("putKey error commitlog %d key %s", req.commit_log_offset, key)
                return
            f = nf

    def _put_key(self, f: IndexFile, req: DispatchRequest, key: str) -> IndexFile | None:
        prefix = req.topic + "#"
        full = prefix + key
        h = concat_hash_code(prefix, key)
        tries = 0
        while not f.put_key(full, req.commit_log_offset, req.store_timestamp, h):
            tries += 1
            if tries > MAX_TRY_IDX_CREATE:
                return None
            log.warning("Index file [%s] is full, trying to create another one", f.file_name)
            nf = self.retry_get_and_create_index_file()
            if nf is None:
                return None
            f = nf
        return f

    # ---- querying (any thread) -----------------------------------------------------------------
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """IndexService.queryOffset: newest file to oldest, at most ``maxMsgsNumBatch`` offsets."""
        max_num = min(max_num, self.max_msgs_num_batch)
        result = QueryOffsetResult()
        files = self.files()
        if not files:
            return result
        last = files[-1]
        result.index_last_update_timestamp = last.end_timestamp
        result.index_last_update_phyoffset = last.end_phy_offset
        idx_key = f"{topic}#{key}"
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                result.phy_offsets.extend(
                    f.select_phy_offset([idx_key], max_num - len(result.phy_offsets), begin, end))
            if f.begin_timestamp < begin or len(result.phy_offsets) >= max_num:
                break
        return result

    # ---- deletion, flushing, lifecycle ---------------------------------------------------------
    def delete_expired_file(self, offset: int) -> None:
        """Destroy the oldest files that end below ``offset`` (commit-log min offset), never the last."""
        files = self.files()
        if not files or files[0].end_phy_offset >= offset:
            return
        expired: list[IndexFile] = []
        for f in files[:-1]:
            if f.end_phy_offset >= offset:
                break
            expired.append(f)
        for f in expired:
            if not f.destroy(_DESTROY_EXPIRED_INTERVAL_MS):
                log.error("deleteExpiredFile remove failed: %s still in use", f.file_name)
                break
            with self._lock:
                self._files.remove(f)

    def _flush(self, f: IndexFile) -> None:
        """IndexService.flush(f): a full file's end timestamp becomes checkpoint.indexMsgTimestamp."""
        index_msg_timestamp = f.end_timestamp if f.is_write_full() else 0
        f.flush()
        if index_msg_timestamp > 0:
            self._durable.add(f.file_name)
            self.checkpoint.index_msg_timestamp = index_msg_timestamp
            self.checkpoint.flush()

    def flush(self) -> None:
        """Flush the current file (at shutdown)."""
        f = self.get_last_file()
        if f is not None:
            self._flush(f)

    def wait_flushes(self, timeout_s: float = 30.0) -> None:
        """Wait for the background flushes of full files (shutdown, tests)."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._flush_threads):
            t.join(max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Unmap every file (call ``flush`` first for a clean stop)."""
        self.wait_flushes()
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.shutdown(0)

    def destroy(self) -> None:
        """Delete every index file (DefaultMessageStore.destroy)."""
        self.wait_flushes()
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.destroy(3000)
