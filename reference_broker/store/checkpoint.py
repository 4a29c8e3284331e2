"""StoreCheckpoint: the three flush timestamps that bound abnormal recovery.

Format (StoreCheckpoint.java, 4.9.8), one OS page (4096 bytes), big-endian:

| offset | field               | set by                                            |
|--------|---------------------|---------------------------------------------------|
| 0      | physicMsgTimestamp  | commit-log flush (store time of the last flushed) |
| 8      | logicsMsgTimestamp  | each consume-queue write                          |
| 16     | indexMsgTimestamp   | flush of a full index file                        |
| 24, 32 | (5.x: masterFlushedOffset, confirmPhyOffset; unused here)         |
| 40     | physicMsgOffset     | ours: commit-log offset known durable             |
| 48     | logicsMsgOffset     | ours: offset below which consume-queue units are durable |
| 64     | index safe point    | ours: 56 bytes, ``IndexSafePoint`` (index_recovery.py) |

The page is mmap'd and written in place; ``flush`` forces it to disk.

Deliberate extension: the two offsets at 40 and 48 let abnormal recovery start at an exact record
instead of at the start of the 1 GiB file holding the checkpoint's time (CommitLog.recover_abnormally).
Offsets are exact, so they need no equivalent of getMinTimestamp's 3 s margin (which covers the
coarseness of times); the flush services note them only after the bytes are on disk. A RocketMQ
checkpoint has zeros there, which means "unknown" and selects RocketMQ's own time-based rule;
RocketMQ ignores the bytes. ``recover_from_checkpoint_offset = false`` selects 4.9.8's rule always.
The index safe point at 64 does for the index what the offsets do for the log and the queues: RocketMQ
persists only indexMsgTimestamp (the end of the last *full* index file) and destroys a newer file after a
crash, which an offset-based replay would never rebuild (index_recovery.py).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from dataclasses import astuple, dataclass, replace
from pathlib import Path
from typing import Final

PAGE: Final = 4096
_FIELDS: Final = struct.Struct(">qqq")
_OFFSETS: Final = struct.Struct(">qq")
_OFFSETS_AT: Final = 40
_INDEX_SAFE: Final = struct.Struct(">qqqqqqii")
_INDEX_SAFE_AT: Final = 64
NO_INDEX_FILE: Final = 1  # safe point taken while no index file existed (real names are 17-digit dates)


@dataclass(frozen=True)
class IndexSafePoint:
    """The index as it was durable at one moment: the header of the file being written then.

    Every record below ``covered_offset`` that has keys is in the index files up to ``file_name``, and
    every file before that one is on disk whole. ``file_name`` 0 (a RocketMQ checkpoint) means unknown.
    """

    file_name: int
    covered_offset: int
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size < PAGE:
            os.posix_fallocate(self._fd, 0, PAGE)
        self._mm = mmap.mmap(self._fd, PAGE)
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.physic_msg_offset = 0
        self.logics_msg_offset = 0
        self.index_safe_point: IndexSafePoint | None = None
        # Store time of the last consume-queue unit written (not yet flushed). RocketMQ keeps this in
        # logicsMsgTimestamp itself, so any checkpoint flush (e.g. the index flush thread's) persists
        # a time whose units may still be only in memory; after a power loss, recovery then starts too
        # late and a quiet queue's unflushed units are lost. Here only a full consume-queue flush
        # copies it into logicsMsgTimestamp (deliberate difference, see tests/store/test_recovery_properties.py).
        self.dispatched_logics_timestamp = 0
        self.loaded = existed and size >= _FIELDS.size
        if self.loaded:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _FIELDS.unpack_from(
                self._mm, 0
            )
            self.physic_msg_offset, self.logics_msg_offset = _OFFSETS.unpack_from(self._mm, _OFFSETS_AT)
            sp = IndexSafePoint(*_INDEX_SAFE.unpack_from(self._mm, _INDEX_SAFE_AT))
            if sp.file_name > 0 and sp.covered_offset >= 0 and sp.index_count >= 1:
                self.index_safe_point = sp
        self._lock = threading.Lock()
        self._closed = False

    def note_physic_offset(self, offset: int) -> None:
        """The commit log is durable below ``offset`` now (called after each commit-log flush)."""
        with self._lock:
            self.physic_msg_offset = offset

    def note_logics_offset(self, offset: int) -> None:
        """Consume-queue units of every record below ``offset`` are durable now (after a full CQ flush)."""
        with self._lock:
            self.logics_msg_offset = offset

    def note_index_safe_point(self, sp: IndexSafePoint) -> None:
        """The index is durable as ``sp`` describes (written to disk by the next ``flush``)."""
        with self._lock:
            self.index_safe_point = sp

    def clamp_offsets(self, max_offset: int) -> None:
        """After recovery truncated the log at ``max_offset``, no older promise may point past it."""
        with self._lock:
            self.physic_msg_offset = min(self.physic_msg_offset, max_offset)
            self.logics_msg_offset = min(self.logics_msg_offset, max_offset)
            sp = self.index_safe_point
            if sp is not None and sp.covered_offset > max_offset:
                # The index is truncated at the log end too (IndexService.truncate_from) and a new safe
                # point follows recovery; until then this one may not promise records past the end.
                self.index_safe_point = replace(sp, covered_offset=max_offset)

    def is_valid(self) -> bool:
        """A checkpoint that existed and holds plausible (non-negative) times."""
        return self.loaded and min(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                   self.index_msg_timestamp) >= 0 and self.physic_msg_timestamp > 0

    def get_min_timestamp(self) -> int:
        """min(physic, logics) - 3000 ms, never below 0 (StoreCheckpoint.getMinTimestamp)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def get_recover_offset(self) -> int:
        """Commit-log offset below which both the log and its consume-queue units are on disk; -1 if unknown."""
        if self.physic_msg_offset <= 0 or self.logics_msg_offset <= 0:
            return -1
        return min(self.physic_msg_offset, self.logics_msg_offset)

    def get_min_timestamp_index(self) -> int:
        return min(self.get_min_timestamp(), self.index_msg_timestamp)

    def flush(self) -> None:
        if self._closed:
            return
        with self._lock:
            _FIELDS.pack_into(self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                              self.index_msg_timestamp)
            _OFFSETS.pack_into(self._mm, _OFFSETS_AT, self.physic_msg_offset, self.logics_msg_offset)
            sp = self.index_safe_point
            _INDEX_SAFE.pack_into(self._mm, _INDEX_SAFE_AT, *(astuple(sp) if sp is not None else (0,) * 8))
        os.fdatasync(self._fd)

    def shutdown(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._mm.close()
        os.close(self._fd)
