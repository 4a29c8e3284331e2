"""This module owns making a broker's store cold: evicting its mmap'd store files from the page cache.

``echo 1 > /proc/sys/vm/drop_caches`` drops clean page-cache pages only when no process maps them, and the
broker maps its commit log and consume queues (as RocketMQ does), so on its own it leaves the backlog
resident. Linux's ``process_madvise(2)`` (5.10+) with ``MADV_PAGEOUT`` (5.4+) asks the kernel to reclaim the
given ranges of another process's address space: clean file pages are unmapped and dropped, so the next
access is a major fault read from the device — a cold read, without restarting the broker. Needs
CAP_SYS_NICE and ptrace access to the target (root).

The parsing of ``/proc/<pid>/maps`` is pure; the syscalls sit in ``page_out``.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MADV_PAGEOUT: Final = 21  # include/uapi/asm-generic/mman-common.h
# x86_64 and aarch64 share these numbers (the generic syscall table since 5.1/5.10).
SYS_PIDFD_OPEN: Final = 434
SYS_PROCESS_MADVISE: Final = 440
IOV_MAX: Final = 1024  # process_madvise takes at most UIO_MAXIOV ranges per call
# ... and at most MAX_RW_COUNT bytes (INT_MAX rounded down to a page, include/linux/fs.h): import_iovec cuts
# the ranges there and the call returns the bytes it advised, so two 1 GiB commit-log files and their
# consume queues are more than one call covers.
MAX_RW_COUNT: Final = 0x7FFFF000


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    path: str

    @property
    def length(self) -> int:
        return self.end - self.start


def parse_maps(text: str, under: Iterable[str]) -> list[Mapping]:
    """The file mappings in ``/proc/<pid>/maps`` text whose path starts with one of the ``under`` prefixes."""
    prefixes = tuple(p.rstrip("/") + "/" for p in under)
    found = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6:
            continue  # anonymous mapping
        path = parts[5]
        if not path.startswith(prefixes):
            continue
        start, _, end = parts[0].partition("-")
        found.append(Mapping(int(start, 16), int(end, 16), path))
    return found


@dataclass(frozen=True)
class PageOutResult:
    done: bool
    mappings: int
    bytes_advised: int
    reason: str | None = None


def advise_all(ranges: Sequence[tuple[int, int]], advise: Callable[[Sequence[tuple[int, int]]], int]) -> int:
    """Advise every (start, length) range: ``advise`` takes up to IOV_MAX ranges and returns the bytes it
    advised from their front, which may be fewer than asked (process_madvise stops at MAX_RW_COUNT bytes, or
    early on an error after some progress); the rest is asked again until every byte is done. Returns the
    bytes advised; an OSError from ``advise`` propagates, and a call that advises nothing raises one."""
    pending = [(start, length) for start, length in ranges if length > 0]
    done = 0
    while pending:
        batch = pending[:IOV_MAX]
        n = advise(batch)
        if n <= 0:
            raise OSError(f"process_madvise advised nothing of {len(batch)} ranges at {batch[0][0]:#x}")
        done += n
        i = 0
        while n > 0:  # drop what was advised from the front; a range it stopped inside keeps its rest
            start, length = pending[i]
            if n < length:
                pending[i] = (start + n, length - n)
                break
            n -= length
            i += 1
        del pending[:i]
    return done


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def drain_lru_batches(paths: Iterable[str]) -> None:
    """Put every CPU's freshly cached pages on the LRU lists, and drop the clean pages no one maps.

    MADV_PAGEOUT reclaims only pages it can take off an LRU list, and a page just read in waits in the
    per-CPU batch of the CPU that read it until that batch fills; madvise drains only the calling CPU's
    batch, so a page the broker faulted in on the other core can stay resident (the likely reason a test
    once found 2 of 2 touched pages resident after a page-out on a busy 2-core machine).
    POSIX_FADV_DONTNEED cannot drop mapped pages, and when it fails to, the kernel drains every CPU's batch
    (lru_add_drain_all, mm/fadvise.c) before trying again: that drain is what this is for. A
    file that is gone or unreadable is skipped: its mapping is still advised below."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def unsupported_reason() -> str | None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return f"process_madvise needs Linux on x86_64 or aarch64, not {platform.system()} {platform.machine()}"
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()}): process_madvise on another process needs CAP_SYS_NICE"
    return None


def page_out(pid: int, roots: Iterable[Path]) -> PageOutResult:
    """Ask the kernel to reclaim every mapping of files under ``roots`` in process ``pid``."""
    why = unsupported_reason()
    if why is not None:
        return PageOutResult(False, 0, 0, why)
    try:
        maps_text = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return PageOutResult(False, 0, 0, f"cannot read /proc/{pid}/maps: {exc}")
    mappings = parse_maps(maps_text, [str(r.resolve()) for r in roots])
    if not mappings:
        return PageOutResult(True, 0, 0, "no store file is mapped")
    drain_lru_batches(sorted({m.path for m in mappings}))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long  # a byte count can pass 2**31
    pidfd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        return PageOutResult(False, 0, 0, f"pidfd_open({pid}): {os.strerror(ctypes.get_errno())}")

    def advise(batch: Sequence[tuple[int, int]]) -> int:
        vec = (_IoVec * len(batch))(*[_IoVec(start, length) for start, length in batch])
        n = int(libc.syscall(SYS_PROCESS_MADVISE, pidfd, vec, ctypes.c_size_t(len(batch)), MADV_PAGEOUT, 0))
        if n < 0:
            raise OSError(f"process_madvise(MADV_PAGEOUT): {os.strerror(ctypes.get_errno())}")
        return n

    try:
        advised = advise_all([(m.start, m.length) for m in mappings], advise)
    except OSError as exc:
        return PageOutResult(False, len(mappings), 0, str(exc))
    finally:
        os.close(pidfd)
    return PageOutResult(True, len(mappings), advised)
