"""MappedFileQueue: the ordered, fixed-size files of one log (the commit log, or one consume queue).

Files are named by their first absolute offset (mapped_file.offset_to_file_name); this module owns
loading them back (short or empty newest files after a crash), finding the file of an offset, rolling
to a new file, flushing and committing across files, recovery's cut (``truncate_dirty_files``) and
deleting expired files (MappedFileQueue, 4.9.8).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from reference_broker.store.mapped_file import MappedFile, fsync_dir, offset_to_file_name

log = logging.getLogger(__name__)


class MappedFileQueue:
    """The ordered files of one log (commit log, or one consume queue)."""

    def __init__(self, store_path: Path, mapped_file_size: int, *, alloc_chunk: int = 0,
                 random_access: bool = False) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.alloc_chunk = alloc_chunk
        self.random_access = random_access
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.staging = False  # new files write through a staging buffer (the commit log's transient pool)
        self.store_timestamp = 0
        self._lock = threading.Lock()  # guards the list; appends to a file are single-writer

    # ---- loading -------------------------------------------------------------------------------
    def load(self) -> bool:
        """Map every existing file; False when a file's length does not match (MappedFileQueue.load)."""
        if not self.store_path.is_dir():
            return True
        names = sorted(p for p in self.store_path.iterdir() if p.is_file() and p.name.isdigit())
        for p in names:
            if p is names[-1] and p.stat().st_size == 0:
                # A crash between creating the newest file and sizing it (MappedFile.__init__): it never
                # held data. RocketMQ refuses to start here; dropping it is the only possible repair.
                log.warning("%s: empty newest file (crash while creating it): deleted", p)
                p.unlink()
                continue
            size = p.stat().st_size
            if p is names[-1] and 0 < size < self.mapped_file_size:
                # The newest file cut short (a damaged disk, a copy interrupted): RocketMQ refuses to start.
                # Its missing tail reads as zeros once extended, so recovery ends the log where the data
                # ends and says so; a short *older* file, or a longer one, still stops the load (a changed
                # file size in the configuration would otherwise misplace every record).
                log.warning("%s: length %d is short of %d: extended with zeros; recovery truncates at the last "
                            "intact record", p, size, self.mapped_file_size)
                os.truncate(p, self.mapped_file_size)
                size = self.mapped_file_size
            if size != self.mapped_file_size:
                log.warning("%s: length %d does not match %d, please check it manually",
                            p, size, self.mapped_file_size)
                return False
            mf = MappedFile(p, self.mapped_file_size, create=False, alloc_chunk=self.alloc_chunk,
                            random_access=self.random_access)
            mf.set_positions(self.mapped_file_size)
            self.mapped_files.append(mf)
        return True

    # ---- following another process's writer (dispatchInSeparateProcess) ---------------------------
    def map_new_files(self) -> None:
        """Map the files another process created after the newest one mapped here (a reader's view: the dispatch
        process writes consume queues, the broker reads them). A new file is mapped empty; ``follow`` sets ends."""
        if not self.store_path.is_dir():
            return
        last = self.get_last_mapped_file()
        after = last.file_from_offset if last is not None else -1
        offsets = sorted(int(p.name) for p in self.store_path.iterdir() if p.name.isdigit() and int(p.name) > after)
        for off in offsets:
            mf = MappedFile(self.store_path / offset_to_file_name(off), self.mapped_file_size, create=False,
                            alloc_chunk=self.alloc_chunk, random_access=self.random_access)
            with self._lock:
                self.mapped_files.append(mf)

    def forget_below(self, offset: int) -> None:
        """Unmap (never delete) the files that end at or below ``offset``: the writer deleted them."""
        size = self.mapped_file_size
        gone = [mf for mf in self.mapped_files[:-1] if mf.file_from_offset + size <= offset]
        self._remove(gone)
        for mf in gone:
            mf.shutdown(1000)

    # ---- lookup --------------------------------------------------------------------------------
    def get_last_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[-1] if files else None

    def get_first_mapped_file(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def last_file_for_write(self, start_offset: int = 0) -> MappedFile:
        """The last file, creating the next (or the first, at ``start_offset``) when needed.

        Raises OSError when the file cannot be created (no space): CREATE_MAPEDFILE_FAILED.
        """
        last = self.get_last_mapped_file()
        if last is not None and last.write_position < last.file_size:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        self.store_path.mkdir(parents=True, exist_ok=True)
        path = self.store_path / offset_to_file_name(create_offset)
        try:
            mf = MappedFile(path, self.mapped_file_size, create=True, alloc_chunk=self.alloc_chunk,
                            random_access=self.random_access)
        except OSError:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            raise
        if self.staging:
            mf.enable_staging()
        with self._lock:
            if not self.mapped_files:
                mf.first_create_in_queue = True
            self.mapped_files.append(mf)
        return mf

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first = files[0]
        last = files[-1]
        if first.file_from_offset <= offset < last.file_from_offset + self.mapped_file_size:
            idx = offset // self.mapped_file_size - first.file_from_offset // self.mapped_file_size
            if 0 <= idx < len(files):
                mf = files[idx]
                if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                    return mf
            for mf in files:  # holes after deletions: fall back to a scan
                if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                    return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        files = self.mapped_files
        return files[0].file_from_offset if files else -1

    def get_max_offset(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.wrote_position if last else 0

    def get_max_wrote_position(self) -> int:
        return self.get_max_offset()

    def how_much_fall_behind(self) -> int:
        return max(0, self.get_max_offset() - self.flushed_where)

    def iter_files(self) -> Iterator[MappedFile]:
        return iter(list(self.mapped_files))

    # ---- committing (staging) and flushing -------------------------------------------------------
    def commit(self, least_pages: int) -> bool:
        """Commit staged bytes, oldest staging file first (MappedFileQueue.commit): True when nothing was
        committed. Only the newest files can hold staged bytes; a file is committed whole before the
        next one starts, so readers never see a gap."""
        files = self.mapped_files
        i = len(files)
        while i > 0 and files[i - 1].stage is not None:
            i -= 1
        nothing = True
        for mf in files[i:]:
            before = mf.wrote_position
            after = mf.commit(least_pages)
            if after != before:
                nothing = False
            if after < mf.file_size:
                break
        return nothing

    def staged_behind(self) -> int:
        """Bytes staged but not yet committed (0 without staging)."""
        files = self.mapped_files
        behind = 0
        for mf in reversed(files):
            if mf.stage is None:
                break
            behind += mf.staged_position - mf.wrote_position
        return behind

    # ---- flushing ------------------------------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        """Flush the file holding ``flushed_where``; True when nothing was flushed (RocketMQ's result)."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        ts = mf.store_timestamp
        offset = mf.flush(least_pages)
        where = mf.file_from_offset + offset
        result = where == self.flushed_where
        self.flushed_where = where
        if least_pages == 0 and ts:
            self.store_timestamp = ts
        return result

    # ---- truncation and deletion ---------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at and after ``offset`` (MappedFileQueue.truncateDirtyFiles), durably.

        Unlike RocketMQ, the cut reaches the disk before this returns (fdatasync of the zeroed file, fsync
        of the directory after unlinks): otherwise a second crash soon after recovery can bring back
        units or records that recovery dropped, next to new data written over the same positions (found
        by the chaos suite's repeated power losses)."""
        keep: list[MappedFile] = []
        unlinked = False
        for mf in list(self.mapped_files):
            tail = mf.file_from_offset + self.mapped_file_size
            if tail > offset:
                if offset >= mf.file_from_offset:
                    pos = offset % self.mapped_file_size
                    mf.set_positions(pos)
                    mf.zero_tail(pos)
                    mf.force()
                    keep.append(mf)
                else:
                    mf.destroy(1000)
                    unlinked = True
                    continue
            else:
                keep.append(mf)
        with self._lock:
            self.mapped_files = keep
        if unlinked:
            fsync_dir(self.store_path)

    def delete_last_mapped_file(self) -> None:
        with self._lock:
            if not self.mapped_files:
                return
            mf = self.mapped_files.pop()
        mf.destroy(1000)
        fsync_dir(self.store_path)  # recovery's cut must survive the next crash (see truncate_dirty_files)

    def reset_offset(self, offset: int) -> bool:
        """Used by replication to move the write position back within the last file."""
        last = self.get_last_mapped_file()
        if last is None:
            return False
        pos = offset - last.file_from_offset
        if pos < 0 or pos > last.wrote_position:
            return False
        last.set_positions(pos)
        return True

    def delete_expired_file_by_time(
        self,
        expired_ms: int,
        delete_files_interval_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
        *,
        now_ms: Callable[[], int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_batch: int = 10,
    ) -> int:
        """Delete files older than ``expired_ms`` (never the last), at most ``max_batch`` per call.

        MappedFileQueue.deleteExpiredFileByTime, with DELETE_FILES_BATCH_MAX = 10.
        """
        now = now_ms or (lambda: int(time.time() * 1000))
        files = list(self.mapped_files[:-1])
        deleted: list[MappedFile] = []
        for mf in files:
            live_max = mf.last_modified_ms + expired_ms
            if now() >= live_max or clean_immediately:
                if mf.destroy(interval_forcibly_ms):
                    deleted.append(mf)
                    if len(deleted) >= max_batch:
                        break
                    if delete_files_interval_ms > 0 and mf is not files[-1]:
                        sleep(delete_files_interval_ms / 1000)
                else:
                    break
            else:
                break  # files are in age order: stop at the first young one
        self._remove(deleted)
        return len(deleted)

    def delete_expired_file_by_offset(self, offset: int, unit_size: int) -> int:
        """Delete consume-queue files whose last unit points below ``offset`` (commit-log min offset)."""
        files = list(self.mapped_files[:-1])
        deleted: list[MappedFile] = []
        for mf in files:
            last_unit = self.mapped_file_size - unit_size
            res = mf.select(last_unit, unit_size) if mf.wrote_position >= self.mapped_file_size else None
            destroy = False
            if res is not None:
                max_offset_in_file = int.from_bytes(res.data[:8], "big", signed=True)
                res.release()
                destroy = max_offset_in_file < offset
            elif not mf.is_available:
                destroy = True
            if not destroy:
                break
            if mf.destroy(60000):
                deleted.append(mf)
            else:
                break
        self._remove(deleted)
        return len(deleted)

    def retry_delete_first_file(self, interval_forcibly_ms: int) -> bool:
        first = self.get_first_mapped_file()
        if first is None or first.is_available:
            return False
        if first.destroy(interval_forcibly_ms):
            self._remove([first])
            return True
        return False

    def _remove(self, files: list[MappedFile]) -> None:
        if not files:
            return
        gone = {id(f) for f in files}
        with self._lock:
            self.mapped_files = [f for f in self.mapped_files if id(f) not in gone]

    def shutdown(self, interval_forcibly_ms: int = 0) -> None:
        for mf in self.mapped_files:
            mf.shutdown(interval_forcibly_ms)

    def destroy(self) -> None:
        for mf in list(self.mapped_files):
            mf.destroy(1000)
        with self._lock:
            self.mapped_files = []
        self.flushed_where = 0
        try:
            self.store_path.rmdir()
        except OSError:
            pass
