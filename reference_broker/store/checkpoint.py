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

The page is mmap'd and written in place; ``flush`` forces it to disk.

Deliberate extension: the two offsets at 40 and 48 let abnormal recovery start at an exact record
instead of at the start of the 1 GiB file holding the checkpoint's time (CommitLog.recover_abnormally).
Offsets are exact, so they need no equivalent of getMinTimestamp's 3 s margin (which covers the
coarseness of times); the flush services note them only after the bytes are on disk. A RocketMQ
checkpoint has zeros there, which means "unknown" and selects RocketMQ's own time-based rule;
RocketMQ ignores the bytes. ``recover_from_checkpoint_offset = false`` selects 4.9.8's rule always.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import Final

PAGE: Final = 4096
_FIELDS: Final = struct.Struct(">qqq")
_OFFSETS: Final = struct.Struct(">qq")
_OFFSETS_AT: Final = 40


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

    def clamp_offsets(self, max_offset: int) -> None:
        """After recovery truncated the log at ``max_offset``, no older promise may point past it."""
        with self._lock:
            self.physic_msg_offset = min(self.physic_msg_offset, max_offset)
            self.logics_msg_offset = min(self.logics_msg_offset, max_offset)

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
        os.fdatasync(self._fd)

    def shutdown(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._mm.close()
        os.close(self._fd)
