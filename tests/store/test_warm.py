"""Warming the commit log ahead of the writer (MappedFile.warm_ahead, WarmAheadService): the pages ahead of the
write position are in the page cache before the writer reaches them, none is dirtied, and a real store keeps
them warm as it writes. Residency is read with mincore(2)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.store.mapped_file import OS_PAGE_SIZE, MappedFile
from reference_broker.store.mapped_file_queue import MappedFileQueue
from reference_broker.store.warm import WarmAheadService

from .store_helpers import Stores, make_config, make_msg, put_ok, stores_fixture, wait_until

MiB = 1024 * 1024

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="posix_fadvise is Linux-only")


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def resident(mf: MappedFile, start: int, end: int) -> list[bool]:
    """Whether each page of [start, end) of ``mf`` is in the page cache (mincore on its mapping)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    anchor = ctypes.c_char.from_buffer(mf.mm)
    base = ctypes.addressof(anchor)
    del anchor  # the mapping must not stay exported
    pages = (end - start) // OS_PAGE_SIZE
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(base + start), ctypes.c_size_t(end - start), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return [bool(b & 1) for b in vec]


def fresh_file(tmp_path: Path, size: int) -> MappedFile:
    q = MappedFileQueue(tmp_path / "cl", size)
    return q.last_file_for_write()


def test_warm_ahead_reads_the_range_into_the_page_cache_and_writes_nothing(tmp_path: Path) -> None:
    mf = fresh_file(tmp_path, 8 * MiB)
    try:
        assert not any(resident(mf, 0, 8 * MiB))  # a new, never-touched file
        assert mf.warm_ahead(2 * MiB, step=MiB) == 2 * MiB
        assert all(resident(mf, 0, 2 * MiB))
        assert not any(resident(mf, 4 * MiB, 8 * MiB))  # not far past what was asked (read-ahead aside)
        assert mf.wrote_position == 0 and bytes(mf.buf[: 2 * MiB]) == bytes(2 * MiB)  # nothing written
    finally:
        mf.destroy(0)


def _bytes_dirtied_by_this_process() -> int:
    """Bytes of page cache this process has dirtied so far (/proc/self/io write_bytes, counted when a page is
    dirtied): unlike /proc/meminfo's Dirty, not moved by other processes, e.g. parallel test workers."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no write_bytes: line in /proc/self/io")


def test_warmed_pages_are_clean_so_no_flush_writes_them(tmp_path: Path) -> None:
    mf = fresh_file(tmp_path, 64 * MiB)
    try:
        os.sync()
        before = _bytes_dirtied_by_this_process()
        mf.warm_ahead(64 * MiB)
        # Warmed; a busy machine's reclaim may take a few pages back before they are counted (seen once in CI
        # with two JVMs and Spark running): the point here is what warming dirtied, below.
        pages = resident(mf, 0, 64 * MiB)
        assert sum(pages) >= 0.9 * len(pages)
        # Writing the same 64 MiB through the mapping would dirty 64 MiB; this process's other threads (a
        # store of an earlier test still shutting down) add a little noise, far below that.
        assert _bytes_dirtied_by_this_process() - before < 16 * MiB
    finally:
        mf.destroy(0)


def test_warm_ahead_skips_less_than_a_step_and_stops_at_the_file_end(tmp_path: Path) -> None:
    mf = fresh_file(tmp_path, 8 * MiB)
    try:
        assert mf.append_bytes(b"\x01" * (3 * MiB + 100))
        assert mf.warm_ahead(3 * MiB + 100 + MiB // 2, step=MiB) == 0  # half a step ahead: not worth a call
        assert mf.warm_ahead(5 * MiB, step=MiB) == 5 * MiB
        assert mf.warm_ahead(100 * MiB, step=MiB) == 8 * MiB  # capped at the file's end, even short of a step
        assert all(resident(mf, 3 * MiB, 8 * MiB))
    finally:
        mf.destroy(0)


def test_service_warms_the_last_file_but_not_a_staging_one(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "cl", 64 * MiB)
    svc = WarmAheadService(q, 24 * MiB)
    svc.warm_once()  # no file yet: nothing to do
    mf = q.last_file_for_write()
    assert mf.append_bytes(b"\x02" * 1000)
    svc.warm_once()
    assert mf.warmed_to == 1000 + 24 * MiB  # the write position plus what the service keeps ahead
    # Past what the kernel's own read-around of the writer's first fault brings in (read_ahead_kb).
    assert all(resident(mf, 16 * MiB, 24 * MiB))
    staged = MappedFileQueue(tmp_path / "staged", 8 * MiB)
    staged.staging = True
    smf = staged.last_file_for_write()
    WarmAheadService(staged, 2 * MiB).warm_once()
    assert smf.warmed_to == 0  # the writer fills an anonymous buffer; commit writes the file with pwrite
    for f in (mf, smf):
        f.destroy(0)


def test_a_running_store_keeps_the_pages_ahead_of_its_writer_warm(tmp_path: Path, stores: Stores) -> None:
    cfg = make_config(tmp_path, mapped_file_size_commit_log=64 * MiB, commit_log_warm_ahead_bytes=32 * MiB)
    store = stores.open(cfg)
    for i in range(50):
        put_ok(store, make_msg(b"x" * 2000, queue_id=i % 4))
    mf = store.commit_log.mapped_file_queue.get_last_mapped_file()
    assert mf is not None
    wp = mf.write_position
    wait_until(lambda: mf.warmed_to >= wp + 31 * MiB, timeout_s=5, what="the warm-ahead service")
    start = wp - wp % OS_PAGE_SIZE
    assert all(resident(mf, start + 16 * MiB, start + 31 * MiB))  # beyond the writer's own read-around


def test_warming_can_be_turned_off(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, commit_log_warm_ahead_bytes=0))
    assert store.warm_service is None
    put_ok(store, make_msg())
