"""MappedFile: one fixed-size mmap'd file named by its start offset (the queue of them: mapped_file_queue.py).

This module owns the file naming rule (UtilAll.offset2FileName: 20 zero-padded digits of the
file's first absolute offset), reference counting (ReferenceResource: a file is never unmapped
while a reader holds it; docs/claims.md, `mmap-refcount`), the writer's end and its staging rule, flush
and commit (MappedFile, 4.9.8).

Deliberate differences from RocketMQ:
- Space is reserved with ``posix_fallocate`` before it is written through the mapping (whole file at
  creation by default, or in ``alloc_chunk`` steps). RocketMQ maps a sparse file; in Python a write
  through the mapping into a hole on a full disk raises SIGBUS and kills the process, whereas a failed
  fallocate is a clean ``OSError`` that becomes CREATE_MAPEDFILE_FAILED (commit log) or a failed
  consume-queue write (retried, then read-only; docs/claims.md, `cq-write-failure`).
- Flushing uses ``fdatasync`` on the file descriptor, which writes back pages dirtied through the
  mapping and, unlike ``mmap.flush``, releases the GIL so the writer is never held by a flush.
- The commit log's page cache is warmed ahead of the writer (``warm_ahead``, from ``WarmAheadService``) where
  RocketMQ has the optional warmMappedFile (a zero written to every page, and mlock). Without it the writer's
  first touch of a page not in the cache is a fault that reads around itself (``read_ahead_kb``, 8 MiB on
  this machine's disk): every 8 MiB of log one put spent ~20 ms zero-filling 2,048 pages with the
  interpreter lock held, and every request of the broker waited (found by its p99 at half rate).
  ``posix_fadvise(WILLNEED)`` does the same read-ahead from another thread, outside the lock, and dirties
  nothing: no extra writes reach the disk.
- The transient store pool (a commit log's staging, ``enable_staging``/``commit``) is one anonymous
  mapping per file instead of a pool of ``transientStorePoolSize`` direct buffers: pages are faulted in
  as the writer reaches them and the mapping is dropped once the file is full and committed.
- A forced release after the timeout cannot unmap memory that a reader still views (Python's mmap
  refuses to close with exported buffers); the file is unlinked and the mapping is closed when the last
  view goes away. RocketMQ unmaps regardless and relies on the timeout being long enough.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096  # MappedFile.OS_PAGE_SIZE
# warm_ahead's calls: small enough that no kernel caps one at its read-ahead size (read_ahead_kb).
WARM_STEP_BYTES = 1024 * 1024


_FALLOC_FL_ZERO_RANGE = 0x10
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
_libc: ctypes.CDLL | None = None


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (creations, renames, unlinks) durable; best effort."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _zero_range(fd: int, offset: int, length: int) -> bool:
    """fallocate(FALLOC_FL_ZERO_RANGE); False when the filesystem or platform does not support it."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        return int(_libc.fallocate(fd, _FALLOC_FL_ZERO_RANGE, offset, length)) == 0
    except (OSError, AttributeError):
        return False


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName."""
    return f"{offset:020d}"


class MappedFile:
    """One fixed-size file, mmap'd read-write, with write/flush positions and a reference count."""

    def __init__(self, path: Path, file_size: int, *, create: bool = True, alloc_chunk: int = 0,
                 random_access: bool = False) -> None:
        self.path = path
        self.file_name = path.name
        self.file_size = file_size
        self.file_from_offset = int(path.name)
        self.alloc_chunk = alloc_chunk  # 0: reserve the whole file at creation
        self._allocated = 0
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        # The descriptor is closed once the file is mapped (mmap keeps a duplicate of its own), and
        # reopened for the rare calls that need one: 10,000 consume queues would otherwise hold
        # 20,000 descriptors, past this machine's hard limit.
        fd = os.open(path, flags, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size != file_size:
                if not create and size != 0:
                    raise ValueError(f"{path}: length {size} does not match the configured file size {file_size}")
                os.ftruncate(fd, file_size)
            if alloc_chunk:
                # Reserved lazily in steps; for an existing file, re-reserving a reserved range is a no-op.
                self._reserve(min(alloc_chunk, file_size), fd)
            elif size == file_size and not create:
                self._allocated = file_size  # an existing file was reserved whole when it was created
            else:
                self._reserve(file_size, fd)
            self.mm = mmap.mmap(fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        if random_access:
            # Consume-queue and index files are touched a unit at a time: without this, the first touch
            # of a new file reads ahead megabytes (the device's read-ahead), 2-10 ms per new queue.
            self.mm.madvise(mmap.MADV_RANDOM)
        self.buf = memoryview(self.mm)
        # The writer's side. Without staging, records are written through the mapping (``wbuf`` is
        # ``buf``); the commit log's writers keep ``staged_position`` equal to ``wrote_position`` (its hot
        # path reads the field directly), other files leave it alone: ``write_position`` is right for
        # both. With staging (the commit log's transient store pool) records go to an anonymous buffer
        # first and ``commit`` writes them into the file: ``wrote_position`` is then the committed
        # position, the end of what readers may see.
        self.wbuf = self.buf
        self.staged_position = 0
        self.stage: mmap.mmap | None = None
        self._append_fd: int | None = None  # append_views' descriptor, open while a slave writes the file
        self.warmed_to = 0  # [0, warmed_to) was read into the page cache by warm_ahead
        self.wrote_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message appended (commit log only)
        self.first_create_in_queue = False
        self._refs = 1
        self._available = True
        self._cleanup_over = False
        self._first_shutdown_ms = 0
        self._lock = threading.Lock()

    def populate(self, end: int) -> bool:
        """Fault in (for writing) the pages of [0, end) now rather than one by one on first touch.

        MADV_POPULATE_WRITE (Linux 5.14+); False where unsupported. Used for the index's hash-slot
        table, which puts touch at random: otherwise nearly every put of a fresh index file takes a
        page fault, several microseconds each.
        """
        end = min(self.file_size, -(-end // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        try:
            self.mm.madvise(_MADV_POPULATE_WRITE, 0, end)
        except (OSError, ValueError):
            return False
        return True

    def warm_ahead(self, end: int, step: int = WARM_STEP_BYTES) -> int:
        """Read [warmed_to, end) into the page cache (posix_fadvise WILLNEED: the kernel's read-ahead,
        zero-filled for space never written) in ``step``-sized calls, each outside the interpreter lock.
        Returns the new ``warmed_to``; the pages stay clean, so no flush writes them."""
        end = min(end, self.file_size)
        start = max(self.warmed_to, self.write_position - self.write_position % OS_PAGE_SIZE)
        if (end - start < step and end < self.file_size) or end <= start:
            return self.warmed_to
        if not self.hold():
            return self.warmed_to
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                while start < end:
                    n = min(step, end - start)
                    os.posix_fadvise(fd, start, n, os.POSIX_FADV_WILLNEED)
                    start += n
            finally:
                os.close(fd)
        except (OSError, AttributeError):  # not Linux, or the file just went away: the writer faults as before
            return self.warmed_to
        finally:
            self.release()
        self.warmed_to = end
        return end

    # ---- staging (TransientStorePool) ------------------------------------------------------------
    def enable_staging(self) -> None:
        """Write through an anonymous buffer from now on (TransientStorePool.borrowBuffer, 4.9.8).

        An anonymous mapping rather than a pooled direct buffer: its pages are faulted in as the writer
        reaches them and returned when the file is full and committed, so no pool size is needed.
        """
        if self.stage is None and self.staged_position < self.file_size:
            self.stage = mmap.mmap(-1, self.file_size)
            self.wbuf = memoryview(self.stage)
            self.staged_position = self.wrote_position

    @property
    def write_position(self) -> int:
        """Where the writer appends next (the staged end when staging)."""
        return self.staged_position if self.stage is not None else self.wrote_position

    def commit(self, least_pages: int) -> int:
        """Write staged bytes into the file when at least ``least_pages`` pages are pending (0: whatever
        is pending): MappedFile.commit. Returns the committed position, which readers and flushes use.

        One pwrite, outside the interpreter lock; once a full file is committed its buffer is returned.
        """
        if self.stage is None:
            return self.wrote_position
        staged = self.staged_position
        committed = self.wrote_position
        if staged > committed:
            if least_pages > 0 and staged < self.file_size and \
                    (staged // OS_PAGE_SIZE - committed // OS_PAGE_SIZE) < least_pages:
                return committed
            if not self.hold():
                return committed
            try:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    done = committed
                    while done < staged:
                        done += os.pwrite(fd, self.wbuf[done:staged], done)
                finally:
                    os.close(fd)
            finally:
                self.release()
            self.wrote_position = staged
        if staged >= self.file_size:
            # Full and committed: readers use the mapping, the writer has moved on to the next file.
            self.wbuf = self.buf
            self.stage = None
        return self.wrote_position

    # ---- the writer's end (the commit log writes at staged_position, then calls advance) -----------
    def advance(self, n: int) -> None:
        """The staging rule: without staging readers see the appended bytes at once; with it, once
        ``commit`` has written them into the file."""
        end = self.staged_position + n
        self.staged_position = end
        if self.stage is None:
            self.wrote_position = end

    # ---- space reservation -------------------------------------------------------------------
    def _reserve(self, end: int, fd: int | None = None) -> None:
        if end > self._allocated:
            if fd is None:
                fd = os.open(self.path, os.O_RDWR)
                try:
                    os.posix_fallocate(fd, self._allocated, end - self._allocated)
                finally:
                    os.close(fd)
            else:
                os.posix_fallocate(fd, self._allocated, end - self._allocated)
            self._allocated = end

    def ensure_allocated(self, end: int) -> None:
        """Reserve disk space up to ``end`` before writing it through the mapping (raises OSError)."""
        if end > self._allocated:
            step = self.alloc_chunk or self.file_size
            self._reserve(min(self.file_size, max(end, self._allocated + step)))

    # ---- state -------------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def is_available(self) -> bool:
        return self._available

    @property
    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def free_space(self) -> int:
        """Room left for the writer (past the staged end when staging)."""
        return self.file_size - self.write_position

    # ---- reference counting (ReferenceResource) ------------------------------------------------
    def hold(self) -> bool:
        with self._lock:
            if self._available and self._refs > 0:
                self._refs += 1
                return True
            return False

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            if self._refs > 0:
                return
        self._cleanup()

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Make the file unavailable; release now, or forcibly once the interval has passed."""
        with self._lock:
            if self._available:
                self._available = False
                self._first_shutdown_ms = int(time.time() * 1000)
                self._refs -= 1
                refs = self._refs
            elif self._refs > 0 and int(time.time() * 1000) - self._first_shutdown_ms >= interval_forcibly_ms:
                log.warning("%s: forcing release with %d reader(s) still holding it", self.path, self._refs)
                self._refs = -1000 - self._refs
                refs = self._refs
            else:
                refs = self._refs
        if refs <= 0:
            self._cleanup()

    @property
    def is_cleanup_over(self) -> bool:
        return self._cleanup_over

    def _cleanup(self) -> None:
        with self._lock:
            if self._cleanup_over:
                return
            self._cleanup_over = True
        self._close_append_fd()
        self.buf.release()
        try:
            self.mm.close()
        except BufferError:
            # A reader still has a view; the mapping is closed when its last view is dropped.
            log.warning("%s: mapping still viewed by a reader; left to close with it", self.path)

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Shut down and delete the file once nobody holds it (MappedFile.destroy)."""
        self.shutdown(interval_forcibly_ms)
        if not self._cleanup_over:
            return False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        return True

    # ---- I/O -----------------------------------------------------------------------------------
    def append_bytes(self, data: bytes | memoryview) -> bool:
        """Append raw bytes at the write position (replication and tests; never on a staging file)."""
        if self.stage is not None:
            raise RuntimeError(f"{self.path}: raw appends bypass the staging buffer")
        n = len(data)
        pos = self.wrote_position
        if pos + n > self.file_size:
            return False
        self.ensure_allocated(pos + n)
        self.buf[pos : pos + n] = data
        self.wrote_position = self.staged_position = pos + n
        return True

    def append_views(self, views: Sequence[bytes | memoryview]) -> bool:
        """Append several chunks at the write position in one ``pwritev`` (a slave's replicated frames).

        Through the file, not the mapping: the copy into the page cache happens in the kernel with the GIL
        released (a slice assignment into the mapping copies, and takes the first-touch faults, holding it),
        and the mapping sees the same pages. False when they do not fit."""
        if self.stage is not None:
            raise RuntimeError(f"{self.path}: raw appends bypass the staging buffer")
        n = sum(len(v) for v in views)
        pos = self.wrote_position
        if pos + n > self.file_size:
            return False
        self.ensure_allocated(pos + n)
        fd = self._append_fd
        if fd is None:  # kept open while the file is written: one syscall per append, not three
            fd = self._append_fd = os.open(self.path, os.O_WRONLY)
        done = os.pwritev(fd, views, pos)
        if done < n:  # a regular file writes everything short of an error; finish it all the same
            rest = b"".join(bytes(v) for v in views)[done:]
            while rest:
                k = os.pwrite(fd, rest, pos + done)
                done += k
                rest = rest[k:]
        if pos + n == self.file_size:
            self._close_append_fd()
        self.wrote_position = self.staged_position = pos + n
        return True

    def _close_append_fd(self) -> None:
        fd, self._append_fd = self._append_fd, None
        if fd is not None:
            os.close(fd)

    def flush(self, least_pages: int) -> int:
        """Write back dirty pages when at least ``least_pages`` are dirty (0: whatever is dirty).

        Returns the new flushed position. Called only by the flush thread of the owning queue.
        """
        write = self.wrote_position
        flushed = self.flushed_position
        if write <= flushed:
            return flushed
        if least_pages > 0 and not self.is_full and (write // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE) < least_pages:
            return flushed
        if self.force():
            self.flushed_position = write
        return self.flushed_position

    def force(self) -> bool:
        """fdatasync whatever this file has in the page cache; False if the file is already released."""
        if not self.hold():
            return False
        try:
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        finally:
            self.release()
        return True

    def select(self, pos: int, size: int = -1) -> SelectMappedBufferResult | None:
        """A held view of ``size`` bytes at ``pos`` (to the write position when ``size`` < 0)."""
        read_pos = self.wrote_position
        if size < 0:
            size = read_pos - pos
        if pos < 0 or size <= 0 or pos + size > read_pos:
            return None
        if not self.hold():
            return None
        return SelectMappedBufferResult(self.file_from_offset + pos, self.buf[pos : pos + size], self)

    def zero_tail(self, pos: int) -> None:
        """Zero everything from ``pos`` to the end of the file, keeping the space reserved.

        Recovery truncates here. RocketMQ only moves its positions, leaving stale bytes behind; with
        equal-sized messages new records can end exactly where a stale (valid, CRC-correct) record
        begins, and a later scan would resurrect it. Zeroing is one FALLOC_FL_ZERO_RANGE call on
        filesystems that support it, plain writes otherwise.
        """
        end = self.file_size
        if pos >= end:
            return
        page_end = min(end, -(-pos // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        if page_end > pos:
            self.buf[pos:page_end] = bytes(page_end - pos)
        zeroed = False
        if page_end < end:
            fd = os.open(self.path, os.O_RDWR)
            try:
                zeroed = _zero_range(fd, page_end, end - page_end)
            finally:
                os.close(fd)
        if page_end < end and not zeroed:
            step = 1 << 20
            zeros = bytes(step)
            for p in range(page_end, end, step):
                n = min(step, end - p)
                if self.buf[p : p + n] != zeros[:n]:
                    self.buf[p : p + n] = zeros[:n]

    def set_positions(self, pos: int) -> None:
        self.wrote_position = pos
        self.staged_position = pos
        self.flushed_position = pos

    def __repr__(self) -> str:
        return f"MappedFile({self.path}, wrote={self.wrote_position}, flushed={self.flushed_position})"


@dataclass
class SelectMappedBufferResult:
    """A read-only view of mapped bytes; ``release()`` it (or use ``with``) when done."""

    start_offset: int
    data: memoryview
    mapped_file: MappedFile | None = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.data)

    def release(self) -> None:
        mf, self.mapped_file = self.mapped_file, None
        if mf is not None:
            self.data.release()
            mf.release()

    def __enter__(self) -> SelectMappedBufferResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
