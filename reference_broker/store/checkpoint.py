"""StoreCheckpoint: the three flush timestamps that bound abnormal recovery, and our offsets and index safe
point beside them (StoreCheckpoint.java, 4.9.8).

This module owns the checkpoint file: one OS page, mmap'd and written in place; ``flush`` forces it to disk.
What each byte means (the format table) and packing it are in reference_broker/common/checkpoint_layout.py,
which the chaos harness reads crash images with too.

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
import threading
from dataclasses import replace
from pathlib import Path

from reference_broker.common import checkpoint_layout as layout

# The store's modules take these from here (their home is the layout).
from reference_broker.common.checkpoint_layout import NO_INDEX_FILE as NO_INDEX_FILE
from reference_broker.common.checkpoint_layout import PAGE as PAGE
from reference_broker.common.checkpoint_layout import IndexSafePoint as IndexSafePoint


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
        self.loaded = existed and size >= layout.TIMES.size
        if self.loaded:
            with memoryview(self._mm) as page:
                f = layout.unpack(page)
            self.physic_msg_timestamp, self.logics_msg_timestamp = f.physic_msg_timestamp, f.logics_msg_timestamp
            self.index_msg_timestamp = f.index_msg_timestamp
            self.physic_msg_offset, self.logics_msg_offset = f.physic_msg_offset, f.logics_msg_offset
            self.index_safe_point = f.index_safe_point
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

    def fields(self) -> layout.CheckpointFields:
        """The values as ``flush`` would write them now."""
        return layout.CheckpointFields(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                                       self.physic_msg_offset, self.logics_msg_offset, self.index_safe_point)

    def flush(self) -> None:
        if self._closed:
            return
        # The view is released at once: the mapping cannot be closed while a view of it exists.
        with self._lock, memoryview(self._mm) as page:
            layout.pack_into(page, self.fields())
        os.fdatasync(self._fd)

    def shutdown(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._mm.close()
        os.close(self._fd)
