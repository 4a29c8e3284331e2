"""MappedFile and MappedFileQueue (RocketMQ's MappedFileTest and MappedFileQueueTest, 4.9.8)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_broker.store.mapped_file import (
    OS_PAGE_SIZE,
    MappedFile,
    SelectMappedBufferResult,
    offset_to_file_name,
)
from reference_broker.store.mapped_file_queue import MappedFileQueue

SIZE = 1024
QueueFactory = Callable[..., MappedFileQueue]


@pytest.fixture
def new_queue(tmp_path: Path) -> Iterator[QueueFactory]:
    made: list[MappedFileQueue] = []

    def make(name: str = "q", size: int = SIZE) -> MappedFileQueue:
        q = MappedFileQueue(tmp_path / name, size)
        made.append(q)
        return q

    yield make
    for q in made:
        q.shutdown(0)


def fill(q: MappedFileQueue, n_files: int, byte: bytes = b"\xab", start: int = 0) -> list[MappedFile]:
    """Append ``n_files`` full files of ``byte``."""
    out = []
    for _ in range(n_files):
        mf = q.last_file_for_write(start)
        assert mf.append_bytes(byte * q.mapped_file_size)
        out.append(mf)
    return out


def names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# ---- naming and roll-over ---------------------------------------------------------------------

def test_offset_to_file_name() -> None:
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    assert len(offset_to_file_name(2**62)) == 20


def test_roll_over_creates_next_file_at_plus_file_size(new_queue: QueueFactory, tmp_path: Path) -> None:
    q = new_queue()
    first = q.last_file_for_write()
    assert first.file_name == "00000000000000000000" and first.first_create_in_queue
    assert q.last_file_for_write() is first  # not full: same file
    assert first.append_bytes(b"x" * 1000)
    assert not first.append_bytes(b"x" * 25)  # does not fit
    assert first.append_bytes(b"x" * 24) and first.is_full
    second = q.last_file_for_write()
    assert second.file_from_offset == 1024 and not second.first_create_in_queue
    assert names(tmp_path / "q") == ["00000000000000000000", "00000000000000001024"]
    assert os.path.getsize(second.path) == SIZE
    assert q.get_max_offset() == 1024 and q.get_min_offset() == 0


def test_first_file_starts_at_the_file_containing_start_offset(new_queue: QueueFactory) -> None:
    q = new_queue()
    mf = q.last_file_for_write(2500)
    assert mf.file_from_offset == 2048
    assert mf.file_name == "00000000000000002048"


# ---- lookup ------------------------------------------------------------------------------------

def test_find_mapped_file_by_offset_edges(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 3)
    assert q.find_mapped_file_by_offset(0) is files[0]
    assert q.find_mapped_file_by_offset(1023) is files[0]
    assert q.find_mapped_file_by_offset(1024) is files[1]
    assert q.find_mapped_file_by_offset(3071) is files[2]
    assert q.find_mapped_file_by_offset(3072) is None
    assert q.find_mapped_file_by_offset(-1) is None
    assert q.find_mapped_file_by_offset(3072, return_first_on_not_found=True) is files[0]
    assert new_queue("empty").find_mapped_file_by_offset(0, True) is None


def test_find_mapped_file_by_offset_with_non_zero_first_file(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 3, start=10 * SIZE)
    assert [f.file_from_offset for f in files] == [10240, 11264, 12288]
    assert q.find_mapped_file_by_offset(10240) is files[0]
    assert q.find_mapped_file_by_offset(11263) is files[0]
    assert q.find_mapped_file_by_offset(12287) is files[1]
    assert q.find_mapped_file_by_offset(13311) is files[2]
    assert q.find_mapped_file_by_offset(10239) is None
    assert q.find_mapped_file_by_offset(13312) is None
    assert q.find_mapped_file_by_offset(0, return_first_on_not_found=True) is files[0]


def test_find_after_first_files_deleted(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 4)
    assert q.delete_expired_file_by_time(0, 0, 1000, True, max_batch=2) == 2
    assert q.get_min_offset() == 2048
    assert q.find_mapped_file_by_offset(1000) is None
    assert q.find_mapped_file_by_offset(2048) is files[2]
    assert q.find_mapped_file_by_offset(4095) is files[3]


# ---- reference counting ------------------------------------------------------------------------

def test_held_file_is_cleaned_up_only_after_release(new_queue: QueueFactory) -> None:
    mf = new_queue().last_file_for_write()
    mf.append_bytes(b"data")
    res = mf.select(0)
    assert res is not None
    mf.shutdown(60_000)
    assert not mf.is_available and not mf.is_cleanup_over
    assert not mf.hold()  # no new readers once shut down
    assert bytes(res.data) == b"data"  # the reader's view still works
    mf.shutdown(60_000)  # interval not reached: still waiting for the reader
    assert not mf.is_cleanup_over
    res.release()
    assert mf.is_cleanup_over


def test_held_file_is_force_released_after_interval(new_queue: QueueFactory) -> None:
    mf = new_queue().last_file_for_write()
    mf.append_bytes(b"data")
    res = mf.select(0, 4)
    assert res is not None
    mf.shutdown(100)
    assert not mf.is_cleanup_over
    time.sleep(0.12)
    mf.shutdown(100)
    assert mf.is_cleanup_over
    res.release()  # the late release must not fail


def test_destroy_waits_for_reader_then_deletes(new_queue: QueueFactory) -> None:
    mf = new_queue().last_file_for_write()
    mf.append_bytes(b"abc")
    res = mf.select(0)
    assert res is not None
    assert not mf.destroy(60_000)
    assert mf.path.exists()
    res.release()
    assert mf.destroy(60_000)
    assert not mf.path.exists()


# ---- select and flush -------------------------------------------------------------------------

def sel(mf: MappedFile, pos: int, size: int = -1) -> SelectMappedBufferResult:
    res = mf.select(pos, size)
    assert res is not None
    return res


def test_select_returns_written_bytes_only(new_queue: QueueFactory) -> None:
    q = new_queue()
    fill(q, 1)
    mf = q.last_file_for_write()
    mf.append_bytes(b"hello world")
    with sel(mf, 0) as res:
        assert bytes(res.data) == b"hello world"
        assert res.start_offset == 1024 and res.size == 11
    with sel(mf, 6) as res:
        assert bytes(res.data) == b"world" and res.start_offset == 1030
    with sel(mf, 0, 5) as res:
        assert bytes(res.data) == b"hello"
    assert mf.select(0, 12) is None  # past the write position
    assert mf.select(11) is None  # nothing written there
    assert mf.select(-1, 2) is None


def test_flush_respects_least_pages(new_queue: QueueFactory) -> None:
    mf = new_queue(size=4 * OS_PAGE_SIZE).last_file_for_write()
    mf.append_bytes(b"a" * 100)
    assert mf.flush(1) == 0  # less than one dirty page
    assert mf.flush(0) == 100  # 0: whatever is dirty
    mf.append_bytes(b"b" * OS_PAGE_SIZE)  # wrote 4196: one page boundary crossed
    assert mf.flush(2) == 100
    assert mf.flush(1) == 4196
    assert mf.flush(1) == 4196  # nothing dirty
    mf.append_bytes(b"c" * (mf.free_space()))
    assert mf.is_full
    assert mf.flush(100) == 4 * OS_PAGE_SIZE  # a full file is always flushed


def test_queue_flush_moves_flushed_where_and_store_timestamp(new_queue: QueueFactory) -> None:
    q = new_queue()
    mf = q.last_file_for_write()
    mf.append_bytes(b"x" * 100)
    mf.store_timestamp = 1234
    assert q.flush(1)  # True: nothing flushed
    assert q.flushed_where == 0 and q.store_timestamp == 0
    assert not q.flush(0)
    assert q.flushed_where == 100 and q.store_timestamp == 1234
    assert q.how_much_fall_behind() == 0
    mf.append_bytes(b"y" * mf.free_space())
    q.last_file_for_write().append_bytes(b"z" * 10)
    assert q.how_much_fall_behind() == 934
    q.flush(0)
    assert q.flushed_where == 1024
    q.flush(0)
    assert q.flushed_where == 1034


# ---- truncation and deletion ----------------------------------------------------------------

def test_truncate_dirty_files_zeroes_tail_and_deletes_later_files(new_queue: QueueFactory, tmp_path: Path) -> None:
    q = new_queue()
    files = fill(q, 3)
    q.truncate_dirty_files(1024 + 100)
    assert q.mapped_files == files[:2]
    assert names(tmp_path / "q") == ["00000000000000000000", "00000000000000001024"]
    mf = files[1]
    assert mf.wrote_position == mf.flushed_position == 100
    assert bytes(mf.buf[:100]) == b"\xab" * 100
    assert bytes(mf.buf[100:]) == bytes(924)
    assert bytes(files[0].buf) == b"\xab" * 1024 and files[0].wrote_position == 1024
    assert q.get_max_offset() == 1124


def test_truncate_at_file_boundary_keeps_an_empty_file(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 3)
    q.truncate_dirty_files(2048)
    assert q.mapped_files == files
    assert files[2].wrote_position == 0 and bytes(files[2].buf) == bytes(SIZE)
    assert q.get_max_offset() == 2048


def age(mf: MappedFile, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(mf.path, (t, t))


def test_delete_expired_file_by_time_keeps_young_and_last(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 4)
    for mf in files[:2]:
        age(mf, 7200)
    assert q.delete_expired_file_by_time(3_600_000, 0, 1000, False) == 2
    assert q.mapped_files == files[2:]
    assert not files[0].path.exists() and not files[1].path.exists()
    age(files[2], 7200)
    age(files[3], 7200)  # the last file is never deleted, however old
    assert q.delete_expired_file_by_time(3_600_000, 0, 1000, False) == 1
    assert q.mapped_files == [files[3]]


def test_delete_expired_stops_at_first_young_file(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 4)
    age(files[0], 7200)
    age(files[2], 7200)
    assert q.delete_expired_file_by_time(3_600_000, 0, 1000, False) == 1
    assert q.mapped_files == files[1:]


def test_delete_expired_clean_immediately_ignores_age(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 3)
    sleeps: list[float] = []
    assert q.delete_expired_file_by_time(3_600_000, 100, 1000, True, sleep=sleeps.append) == 2
    assert q.mapped_files == [files[2]]
    assert sleeps == [0.1]  # deleteFilesInterval between deletions, not after the last candidate


def test_delete_expired_at_most_ten_per_call(new_queue: QueueFactory) -> None:
    q = new_queue()
    fill(q, 13)
    assert q.delete_expired_file_by_time(0, 0, 1000, True) == 10
    assert q.get_min_offset() == 10 * SIZE
    assert q.delete_expired_file_by_time(0, 0, 1000, True) == 2
    assert len(q.mapped_files) == 1


def test_delete_expired_stops_at_a_held_file(new_queue: QueueFactory) -> None:
    q = new_queue()
    files = fill(q, 3)
    res = files[0].select(0, 8)
    assert res is not None
    assert q.delete_expired_file_by_time(0, 0, 60_000, True) == 0
    assert q.mapped_files == files and files[0].path.exists()
    res.release()
    assert q.retry_delete_first_file(60_000)
    assert q.mapped_files == files[1:]


def test_delete_expired_file_by_offset_consume_queue_style(new_queue: QueueFactory) -> None:
    q = new_queue(size=80)  # 4 units of 20 bytes
    phys = 0
    for _ in range(3):
        mf = q.last_file_for_write()
        for _ in range(4):
            mf.append_bytes(phys.to_bytes(8, "big") + (100).to_bytes(4, "big") + bytes(8))
            phys += 100
    files = list(q.mapped_files)
    # file 0 holds 0..300, file 1 400..700, file 2 800..1100
    assert q.delete_expired_file_by_offset(300, 20) == 0  # last unit of file 0 is not below 300
    assert q.delete_expired_file_by_offset(301, 20) == 1
    assert q.mapped_files == files[1:]
    assert q.delete_expired_file_by_offset(10_000, 20) == 1  # the last file is never deleted
    assert q.mapped_files == files[2:]


# ---- load --------------------------------------------------------------------------------------

def test_load_maps_existing_files_as_full(new_queue: QueueFactory) -> None:
    q = new_queue()
    fill(q, 2, byte=b"\x11")
    q.last_file_for_write().append_bytes(b"tail")
    q.shutdown(0)
    again = new_queue()
    assert again.load()
    assert [f.file_from_offset for f in again.mapped_files] == [0, 1024, 2048]
    assert all(f.wrote_position == SIZE for f in again.mapped_files)  # recovery sets the real positions
    assert bytes(again.mapped_files[2].buf[:4]) == b"tail"


def test_load_rejects_file_of_wrong_length(new_queue: QueueFactory, tmp_path: Path) -> None:
    d = tmp_path / "bad"
    d.mkdir()
    (d / offset_to_file_name(0)).write_bytes(bytes(SIZE - 24))  # an older file cut short
    (d / offset_to_file_name(SIZE)).write_bytes(bytes(SIZE))
    assert not new_queue("bad").load()
    d2 = tmp_path / "long"
    d2.mkdir()
    (d2 / offset_to_file_name(0)).write_bytes(bytes(SIZE + 24))  # longer: a changed file size
    assert not new_queue("long").load()


def test_load_extends_a_short_newest_file(new_queue: QueueFactory, tmp_path: Path) -> None:
    d = tmp_path / "short"
    d.mkdir()
    (d / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    (d / offset_to_file_name(SIZE)).write_bytes(b"\x01" * (SIZE - 24))  # the newest file, cut short
    q = new_queue("short")
    assert q.load()
    assert (d / offset_to_file_name(SIZE)).stat().st_size == SIZE
    assert bytes(q.mapped_files[1].buf[SIZE - 24:]) == bytes(24), "the missing tail reads as zeros"


def test_load_of_missing_directory_is_empty(new_queue: QueueFactory) -> None:
    q = new_queue("nothing-here")
    assert q.load()
    assert q.mapped_files == [] and q.get_max_offset() == 0 and q.get_min_offset() == -1
