"""StoreCheckpoint: the three flush timestamps that bound abnormal recovery.

Format (StoreCheckpoint.java, 4.9.8), one OS page (4096 bytes), big-endian:

| offset | field               | set by                                            |
|--------|---------------------|---------------------------------------------------|
| 0      | physicMsgTimestamp  | commit-log flush (store time of the last flushed) |
| 8      | logicsMsgTimestamp  | each consume-queue write                          |
| 16     | indexMsgTimestamp   | flush of a full index file                        |

The page is mmap'd and written in place; ``flush`` forces it to disk.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final

PAGE: Final = 4096
_FIELDS: Final = struct.Struct(">qqq")


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
        self.loaded = existed and size >= _FIELDS.size
        if self.loaded:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _FIELDS.unpack_from(
                self._mm, 0
            )
        self._closed = False

    def is_valid(self) -> bool:
        """A checkpoint that existed and holds plausible (non-negative) times."""
        return self.loaded and min(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                   self.index_msg_timestamp) >= 0 and self.physic_msg_timestamp > 0

    def get_min_timestamp(self) -> int:
        """min(physic, logics) - 3000 ms, never below 0 (StoreCheckpoint.getMinTimestamp)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def get_min_timestamp_index(self) -> int:
        return min(self.get_min_timestamp(), self.index_msg_timestamp)

    def flush(self) -> None:
        if self._closed:
            return
        _FIELDS.pack_into(self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                          self.index_msg_timestamp)
        os.fdatasync(self._fd)

    def shutdown(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._mm.close()
        os.close(self._fd)
