"""The commit log as the dispatch process sees it: the broker's files, mapped read-only, up to what the broker has
published as written (dispatchInSeparateProcess; dispatchd.py).

What ReputMessageService needs of a commit log (``get_min_offset``, ``get_data``, ``roll_next_file``, ``file_size``)
and nothing else: the broker stays the only writer. A file is mapped when dispatch first reads it; files the
broker's cleaning deleted are unmapped once the broker says where the log now begins (``drop_below``, any
thread), by the dispatch thread itself before its next read (``apply_drops``: it may be reading one of them), so
their space goes back to the file system.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path

from reference_broker.store.mapped_file import offset_to_file_name


class FollowedData:
    """``get_data``'s answer: ``size`` bytes of one file from ``start_offset`` (SelectMappedBufferResult's shape)."""

    __slots__ = ("data", "size", "start_offset")

    def __init__(self, data: memoryview, start_offset: int) -> None:
        self.data = data
        self.start_offset = start_offset
        self.size = len(data)

    def release(self) -> None:
        self.data.release()


class CommitLogFollower:
    def __init__(self, store_path: Path, file_size: int, written: Callable[[], int]) -> None:
        self.store_path = store_path
        self.file_size = file_size
        self.written = written  # the broker's published write position (dispatchd.py's shared page)
        self._maps: dict[int, mmap.mmap] = {}
        self.min_offset = self._first_file_offset()
        self._dropped = threading.Event()
        self._dropped.set()

    def _first_file_offset(self) -> int:
        if not self.store_path.is_dir():
            return 0
        names = [int(p.name) for p in self.store_path.iterdir() if p.name.isdigit()]
        return min(names) if names else 0

    def get_min_offset(self) -> int:
        return self.min_offset

    def get_max_offset(self) -> int:
        return self.written()

    def roll_next_file(self, offset: int) -> int:
        fs = self.file_size
        return offset + fs - offset % fs

    def _map(self, start: int) -> mmap.mmap | None:
        mm = self._maps.get(start)
        if mm is None:
            try:
                fd = os.open(self.store_path / offset_to_file_name(start), os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                mm = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)
            self._maps[start] = mm
        return mm

    def get_data(self, offset: int) -> FollowedData | None:
        """What is written from ``offset`` to the end of its file, or None (nothing yet, or no such file)."""
        fs = self.file_size
        start = offset - offset % fs
        end = min(fs, self.written() - start)
        if end <= offset - start:
            return None
        mm = self._map(start)
        if mm is None:
            return None
        return FollowedData(memoryview(mm)[offset - start:end], offset)

    def drop_below(self, min_offset: int) -> None:
        """The broker's log now begins at ``min_offset``: its files below are deleted (unmapped by ``apply_drops``)."""
        if min_offset > self.min_offset:
            self.min_offset = min_offset
            self._dropped.clear()

    def apply_drops(self) -> None:
        """Unmap the files below ``min_offset`` (the dispatch thread, between reads)."""
        if self._dropped.is_set():
            return
        floor = self.min_offset
        for start in [s for s in self._maps if s + self.file_size <= floor]:
            self._maps.pop(start).close()
        self._dropped.set()

    def wait_dropped(self, timeout_s: float) -> bool:
        return self._dropped.wait(timeout_s)

    def close(self) -> None:
        for mm in self._maps.values():
            mm.close()
        self._maps.clear()
