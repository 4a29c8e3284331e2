"""IndexFile: one index file, a hash table of chained entries in a MappedFile, from message keys to
commit-log offsets (store/.../index/IndexFile.java, IndexHeader.java, 4.9.8).

This module is the file's I/O shell: mapping, header, puts (one by one and a run at a time), reads, flush and
lifecycle. The byte layout and the rules over it (hashing, linking a run into the chains) are in
``index_format.py``; the files of a store (roll, load, build, query, delete) in ``index_service.py``.

Deliberate differences from RocketMQ:
- Only one 40-byte pack writes the header on each put (RocketMQ writes each changed field); the in-memory
  header and the mapped one stay equal either way.
- After an abnormal exit with an index safe point in the checkpoint (recoverFromCheckpointOffset), the file
  being written is cut back to the safe point instead of destroyed (``cut_back``, ``restore``; why:
  index_recovery.py).

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
from pathlib import Path
from typing import Final

import numpy as np

from reference_broker.common import compiled
from reference_broker.common.java_hash import string_hash_code
from reference_broker.store import index_recovery
from reference_broker.store.checkpoint import IndexSafePoint
from reference_broker.store.index_format import (
    ENTRY,
    HASH_SLOT_SIZE,
    HEADER,
    HEADER_SIZE,
    INDEX_SIZE,
    INVALID_INDEX,
    SLOT,
    abs_hash,
    entry_time_diff,
    index_file_size,
    index_key_hash,
    link_run,
    run_slots,
)
from reference_broker.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

_VECTOR_MIN_KEYS: Final = 16  # below this a run is put key by key (numpy's fixed cost per call is larger)
# The compiled twin of put_keys's linking and writing (common/_index_c.pyx), or None: the numpy path below is
# the reference, and runs whenever the twin declines a run.
_compiled = compiled.load("_index_c")
_link_write = None if _compiled is None else _compiled.link_write


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
        HEADER.pack_into(self._mf.buf, 0, self._begin_timestamp, self._end_timestamp,
                          self._begin_phy_offset, self._end_phy_offset, self._hash_slot_count,
                          self._index_count)

    def _mark_used(self) -> None:
        # MappedFile flushes only when its write position moved: keep it at the end of the used entries.
        self._mf.wrote_position = self._entries_at + self._index_count * INDEX_SIZE

    def load(self) -> None:
        """Read the header of an existing file (IndexHeader.load: a count <= 0 becomes 1)."""
        with self._lock:
            (self._begin_timestamp, self._end_timestamp, self._begin_phy_offset, self._end_phy_offset,
             self._hash_slot_count, self._index_count) = HEADER.unpack_from(self._mf.buf, 0)
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
                _h, phy, diff, _p = ENTRY.unpack_from(self._mf.buf, self._entries_at + (count - 1) * INDEX_SIZE)
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
        key_hash = index_key_hash(key) if hash_code is None else abs_hash(hash_code)
        abs_slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        abs_index_pos = self._entries_at + count * INDEX_SIZE
        try:
            buf = self._mf.buf
            self._mf.ensure_allocated(abs_index_pos + INDEX_SIZE)
            (slot_value,) = SLOT.unpack_from(buf, abs_slot_pos)
            # A slot value from beyond the count is garbage (a file reused after a crash): start a new chain.
            if slot_value <= INVALID_INDEX or slot_value > count:
                slot_value = INVALID_INDEX
            diff = entry_time_diff(store_timestamp, self._begin_timestamp)
            # Entry before slot before count: a concurrent reader that sees the new slot finds the entry.
            ENTRY.pack_into(buf, abs_index_pos, key_hash, phy_offset, diff, slot_value)
            SLOT.pack_into(buf, abs_slot_pos, count)
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
        one_by_one = (1 if self._index_count <= 1 else 0) if _link_write is not None or n >= _VECTOR_MIN_KEYS else n
        for done in range(one_by_one):
            if not self.put_key(keys[done], phy_offsets[done], store_timestamps[done], hash_codes[done]):
                return done
        if one_by_one == n:
            return n
        done = one_by_one
        count = self._index_count
        m = n - done
        try:
            start = self._entries_at + count * INDEX_SIZE
            end = start + m * INDEX_SIZE
            self._mf.ensure_allocated(end)
            buf = self._mf.buf
            new_slots = -1
            if _link_write is not None:  # -1: not its shape (nothing written); the reference path below has it
                new_slots = _link_write(buf, HEADER_SIZE, self.hash_slot_num, self._entries_at, count, hash_codes,
                                        phy_offsets, store_timestamps, done, n, self._begin_timestamp)
            if new_slots < 0:
                new_slots = self._link_run(buf, count, start, end, hash_codes[done:n], phy_offsets[done:n],
                                           store_timestamps[done:n])
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

    def _link_run(self, buf: memoryview, count: int, start: int, end: int, hash_codes: Sequence[int],
                  phy_offsets: Sequence[int], store_timestamps: Sequence[int]) -> int:
        """The reference path of put_keys: link the run with numpy and write it; the new slots' count."""
        where = run_slots(hash_codes, self.hash_slot_num)
        table = np.frombuffer(buf, dtype=">i4", count=self.hash_slot_num, offset=HEADER_SIZE)
        try:
            run = link_run(where, table[where.slots], count, phy_offsets, store_timestamps, self._begin_timestamp)
            # Entries before slots before the count, as put_key does.
            buf[start:end] = run.entries
            table[run.slots] = run.heads
            return run.new_slots
        finally:
            del table  # no export may outlive the call: the mapping must stay closable

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
                (slot_value,) = SLOT.unpack_from(buf, abs_slot_pos)
                count = self._index_count
                if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
                    continue
                begin_ts = self._begin_timestamp
                next_index = slot_value
                while len(found) < max_num:
                    hash_read, phy_read, time_diff, prev_read = ENTRY.unpack_from(
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

    def force(self) -> None:
        """Write the header and fdatasync the whole file, whatever the positions say: ``flush`` forces only what
        this mapping wrote since it loaded the file, and a file another process wrote before (the broker's
        recovery, before the dispatch process maps it) may still have dirty pages."""
        if not self._mf.hold():
            return
        try:
            with self._lock:
                self._write_header()
            self._mf.force()
        finally:
            self._mf.release()

    def shutdown(self, interval_forcibly_ms: int = 0) -> None:
        """Unmap without deleting (the mapping closes when the last reader releases it)."""
        self._mf.shutdown(interval_forcibly_ms)

    def destroy(self, interval_ms: int) -> bool:
        return self._mf.destroy(interval_ms)

    def __repr__(self) -> str:
        return (f"IndexFile({self.path.name}, count={self._index_count}, "
                f"ts=[{self._begin_timestamp},{self._end_timestamp}], "
                f"phy=[{self._begin_phy_offset},{self._end_phy_offset}])")
