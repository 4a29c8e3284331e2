"""This module owns torn-write emulation for power loss: choosing 4 KiB pages of the commit log past the
last flushed position and zeroing or garbling them in the crash image before the broker restarts.

Why pages past the flushed position only: a page the broker flushed (msync/fdatasync returned) was on the
device before the crash, so a power loss cannot tear it; a page written after the last flush may have been
half-written, never written, or written with stale bytes, which is what zeroed and garbled pages stand for.
The first candidate page starts at the first page boundary at or after the flushed offset: the page that
holds the flushed offset itself was written whole by that flush. (Real devices tear at sector size, 512 B
or 4 KiB; a whole page is the coarser, harsher case for recovery.)

Choosing is pure (offsets and a ``random.Random``); applying writes into the commit-log files of a store
whose broker is not running.
"""

from __future__ import annotations

import enum
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

PAGE: Final = 4096


class TornMode(enum.StrEnum):
    ZERO = "zero"  # the page never reached the device
    GARBLE = "garble"  # the device holds random bytes for it (a torn or misdirected write)


@dataclass(frozen=True)
class TornPage:
    offset: int  # absolute commit-log offset of the page start (a multiple of PAGE)
    mode: TornMode

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def candidate_range(flushed_offset: int, written_end: int, page: int = PAGE) -> tuple[int, int]:
    """[first, end) page-aligned range of pages that may be torn: from the first page boundary at or after
    ``flushed_offset`` to the page holding the last written byte."""
    first = -(-flushed_offset // page) * page
    end = -(-written_end // page) * page
    return first, max(first, end)


def choose_torn_pages(flushed_offset: int, written_end: int, rng: random.Random, max_pages: int = 4,
                      page: int = PAGE) -> list[TornPage]:
    """Up to ``max_pages`` distinct pages in the candidate range, each zeroed or garbled at random."""
    first, end = candidate_range(flushed_offset, written_end, page)
    n_candidates = (end - first) // page
    if n_candidates <= 0 or max_pages <= 0:
        return []
    k = rng.randint(1, min(max_pages, n_candidates))
    picks = sorted(rng.sample(range(n_candidates), k))
    return [TornPage(first + i * page, rng.choice(list(TornMode))) for i in picks]


def commit_log_file_for(offset: int, file_size: int) -> tuple[str, int]:
    """(file name, position in it) of an absolute commit-log offset (UtilAll.offset2FileName naming)."""
    start = offset - offset % file_size
    return f"{start:020d}", offset - start


def apply_torn_pages(commit_log_dir: Path, file_size: int, pages: list[TornPage], rng: random.Random,
                     page: int = PAGE) -> list[dict[str, Any]]:
    """Write the chosen damage into the files (fsynced); returns what was done, skipping pages whose file
    does not exist in the image (it was never created on the device)."""
    done = []
    for p in pages:
        name, pos = commit_log_file_for(p.offset, file_size)
        path = commit_log_dir / name
        if not path.is_file() or pos + page > path.stat().st_size:
            done.append({**p.to_json(), "file": name, "applied": False})
            continue
        data = bytes(page) if p.mode is TornMode.ZERO else rng.randbytes(page)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, data, pos)
            os.fsync(fd)
        finally:
            os.close(fd)
        done.append({**p.to_json(), "file": name, "applied": True})
    return done
