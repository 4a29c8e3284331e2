"""Index recovery logic: cutting an index file back to a safe point, mending its slots, and truncating it at
the recovered log end (reference_broker/store/index_recovery.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.store.checkpoint import IndexSafePoint, StoreCheckpoint
from reference_broker.store.index_file import IndexFile
from reference_broker.store.index_format import HEADER_SIZE, INDEX_SIZE

SLOTS = 10  # few slots: long chains that cross the cut
NUM = 400
HUGE = 2**63 - 1
TS = 1_700_000_000_000


@pytest.fixture
def index(tmp_path: Path) -> Iterator[IndexFile]:
    f = IndexFile(tmp_path / "20240101000000000", SLOTS, NUM)
    yield f
    f.shutdown(0)


def put(f: IndexFile, first: int, n: int) -> None:
    for i in range(first, first + n):
        assert f.put_key(f"k{i}", 100 + i * 10, TS + i)


def found(f: IndexFile, i: int) -> list[int]:
    return f.select_phy_offset([f"k{i}"], 64, 0, HUGE)


def test_cut_back_after_a_kill_mends_slots_by_chain(index: IndexFile) -> None:
    put(index, 0, 100)
    sp = index.safe_point(covered_offset=100 + 100 * 10)
    put(index, 100, 50)  # written after the safe point; all still in the file (a kill -9 keeps the page cache)
    report = index.restore(sp)
    assert index.index_count == sp.index_count == 101
    assert index.end_phy_offset == sp.end_phy_offset
    assert report.slots_checked == SLOTS and report.by_chain == SLOTS and report.by_scan == 0
    for i in range(100):
        assert found(index, i) == [100 + i * 10], i
    for i in range(100, 150):
        assert found(index, i) == [], i
    # New puts after the cut build on the mended chains.
    put(index, 100, 50)
    for i in range(150):
        assert found(index, i) == [100 + i * 10], i


def test_cut_back_after_a_power_loss_scans_when_entries_past_the_cut_are_gone(index: IndexFile) -> None:
    put(index, 0, 100)
    sp = index.safe_point(covered_offset=2000)
    put(index, 100, 50)
    # The power loss kept the slot table's page but not the entries written after the safe point.
    entries_at = HEADER_SIZE + SLOTS * 4
    buf = index._mf.buf
    buf[entries_at + 101 * INDEX_SIZE : entries_at + 151 * INDEX_SIZE] = bytes(50 * INDEX_SIZE)
    report = index.restore(sp)
    assert report.by_scan == SLOTS
    for i in range(100):
        assert found(index, i) == [100 + i * 10], i


def test_cut_back_of_a_slot_whose_entry_was_put_but_not_counted(index: IndexFile) -> None:
    """A kill between a put's slot write and its header write leaves a slot naming the uncounted entry."""
    put(index, 0, 5)
    sp = index.safe_point(covered_offset=200)
    entries_at = HEADER_SIZE + SLOTS * 4
    buf = index._mf.buf
    # Entry 6 (key k5) fully written and its slot pointing at it, header count still 6.
    put(index, 5, 1)
    assert int.from_bytes(buf[entries_at + 6 * INDEX_SIZE : entries_at + 6 * INDEX_SIZE + 4], "big") != 0
    index.restore(sp)
    assert index.index_count == 6
    for i in range(5):
        assert found(index, i) == [100 + i * 10]
    assert found(index, 5) == []


def test_truncate_from_drops_entries_of_records_the_log_lost(index: IndexFile) -> None:
    put(index, 0, 100)
    assert index.truncate_from(100 + 60 * 10)
    assert index.index_count == 61
    assert index.end_phy_offset == 100 + 59 * 10
    for i in range(60):
        assert found(index, i) == [100 + i * 10], i
    for i in range(60, 100):
        assert found(index, i) == [], i
    assert not index.truncate_from(100 + 60 * 10)  # nothing left past it


def test_truncate_from_everything_leaves_nothing_to_skip(index: IndexFile) -> None:
    put(index, 0, 10)
    assert index.truncate_from(0)
    assert index.index_count == 1 and index.end_phy_offset == 0


def test_checkpoint_round_trips_the_index_safe_point(tmp_path: Path) -> None:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    assert cp.index_safe_point is None  # a RocketMQ checkpoint has zeros there: unknown
    sp = IndexSafePoint(20240101000000000, 4096, TS, TS + 5, 100, 990, 7, 101)
    cp.note_index_safe_point(sp)
    cp.shutdown()
    cp2 = StoreCheckpoint(tmp_path / "checkpoint")
    assert cp2.index_safe_point == sp
    cp2.clamp_offsets(1000)
    assert cp2.index_safe_point is not None and cp2.index_safe_point.covered_offset == 1000
    cp2.shutdown()


def test_a_link_lost_with_its_sector_is_not_taken_for_a_chain_end(index: IndexFile) -> None:
    """A power loss kept the sector holding an entry's hash but not the one holding its link (read as 0):
    the chain must not end there, or every older entry of the slot would become unreachable."""
    entries_at = HEADER_SIZE + SLOTS * 4
    # An entry past the cut whose link (its last 4 bytes) alone lies in the next 512-byte sector.
    e = next(n for n in range(101, NUM) if 0 < (entries_at + n * INDEX_SIZE + 16) % 512 < 4
             or (entries_at + n * INDEX_SIZE + 16) % 512 == 0)
    put(index, 0, 100)
    sp = index.safe_point(covered_offset=2000)
    put(index, 100, e - 100)  # entries 101 .. e: e is the newest, so its slot names it
    link_sector = (entries_at + e * INDEX_SIZE + 16) // 512 * 512
    buf = index._mf.buf
    buf[link_sector : entries_at + NUM * INDEX_SIZE] = bytes(entries_at + NUM * INDEX_SIZE - link_sector)
    report = index.restore(sp)
    assert report.by_scan >= 1
    for i in range(100):
        assert found(index, i) == [100 + i * 10], i
