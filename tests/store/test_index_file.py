"""IndexFile: RocketMQ's IndexFileTest plus the header, chain, time and lifecycle rules of one file."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common.java_hash import string_hash_code
from reference_broker.store.index_file import IndexFile
from reference_broker.store.index_format import HEADER_SIZE, index_file_size, index_key_hash

HASH_SLOT_NUM = 100
INDEX_NUM = 400
HUGE = 2**63 - 1
BASE_TS = 1_700_000_000_000


@pytest.fixture
def files() -> Iterator[list[IndexFile]]:
    opened: list[IndexFile] = []
    yield opened
    for f in opened:
        f.shutdown(0)


def new_file(files: list[IndexFile], path: Path, slots: int = HASH_SLOT_NUM, num: int = INDEX_NUM,
             end_phy_offset: int = 0, end_timestamp: int = 0, create: bool = True) -> IndexFile:
    f = IndexFile(path, slots, num, end_phy_offset, end_timestamp, create=create)
    files.append(f)
    return f


def test_file_size_and_default_size() -> None:
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040
    assert index_file_size(HASH_SLOT_NUM, INDEX_NUM) == 40 + 400 + 8000


def test_put_key_holds_index_num_minus_one(tmp_path: Path, files: list[IndexFile]) -> None:
    """IndexFileTest.testPutKey: 100 slots / 400 entries -> 399 puts succeed, the 400th fails."""
    f = new_file(files, tmp_path / "100")
    for i in range(INDEX_NUM - 1):
        assert f.put_key(str(i), i, int(time.time() * 1000))
    assert f.is_write_full()
    assert f.index_count == INDEX_NUM
    assert not f.put_key("400", 400, int(time.time() * 1000))


def test_select_phy_offset(tmp_path: Path, files: list[IndexFile]) -> None:
    """IndexFileTest.testSelectPhyOffset: key "60" maps to exactly offset 60."""
    f = new_file(files, tmp_path / "200")
    for i in range(INDEX_NUM - 1):
        assert f.put_key(str(i), i, int(time.time() * 1000))
    assert not f.put_key("60", 60, int(time.time() * 1000))  # full: not added twice
    assert f.select_phy_offset(["60"], 10, 0, HUGE) == [60]


def test_min_value_hash_becomes_zero() -> None:
    assert string_hash_code("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash("60") == abs(string_hash_code("60"))


def test_chain_walk_across_collisions_newest_first(tmp_path: Path, files: list[IndexFile]) -> None:
    f = new_file(files, tmp_path / "300", slots=1, num=10)  # every key shares the one slot
    assert string_hash_code("Aa") == string_hash_code("BB")
    for key, off in [("k", 100), ("x", 200), ("k", 300), ("Aa", 400), ("BB", 500)]:
        assert f.put_key(key, off, BASE_TS)
    assert f.hash_slot_count == 1
    assert f.select_phy_offset(["k"], 10, 0, HUGE) == [300, 100]
    assert f.select_phy_offset(["x"], 10, 0, HUGE) == [200]
    # Only the hash is compared: the caller must re-check keys on the messages.
    assert f.select_phy_offset(["Aa"], 10, 0, HUGE) == [500, 400]
    assert f.select_phy_offset(["k"], 1, 0, HUGE) == [300]
    assert f.select_phy_offset(["k", "x"], 10, 0, HUGE) == [300, 100, 200]
    assert f.select_phy_offset(["nope"], 10, 0, HUGE) == []


def test_entry_layout(tmp_path: Path, files: list[IndexFile]) -> None:
    f = new_file(files, tmp_path / "310", slots=7, num=10)
    assert f.put_key("a", 11, BASE_TS)
    assert f.put_key("a", 22, BASE_TS + 5_999)
    data = (tmp_path / "310").read_bytes()
    assert struct.unpack_from(">qqqqii", data, 0) == (BASE_TS, BASE_TS + 5_999, 11, 22, 1, 3)
    slot = index_key_hash("a") % 7
    assert struct.unpack_from(">i", data, HEADER_SIZE + slot * 4) == (2,)
    entries = HEADER_SIZE + 7 * 4
    assert data[entries:entries + 20] == bytes(20)  # entry 0 is never written
    assert struct.unpack_from(">iqii", data, entries + 20) == (index_key_hash("a"), 11, 0, 0)
    assert struct.unpack_from(">iqii", data, entries + 40) == (index_key_hash("a"), 22, 5, 1)


def test_time_range_filter(tmp_path: Path, files: list[IndexFile]) -> None:
    f = new_file(files, tmp_path / "400", slots=10, num=10)
    for i, off in enumerate([1000, 2000, 3000]):
        assert f.put_key("k", off, BASE_TS + i * 10_000)
    assert f.select_phy_offset(["k"], 10, BASE_TS + 5_000, BASE_TS + 15_000) == [2000]
    assert f.select_phy_offset(["k"], 10, BASE_TS, BASE_TS + 20_000) == [3000, 2000, 1000]
    assert f.select_phy_offset(["k"], 10, BASE_TS + 21_000, HUGE) == []
    assert f.is_time_matched(BASE_TS + 5_000, BASE_TS + 6_000)
    assert f.is_time_matched(0, HUGE)
    assert not f.is_time_matched(BASE_TS + 21_000, HUGE)
    assert not f.is_time_matched(0, BASE_TS - 1)


def test_time_diff_clamped(tmp_path: Path, files: list[IndexFile]) -> None:
    f = new_file(files, tmp_path / "410", slots=10, num=10)
    assert f.put_key("k", 1, BASE_TS)
    assert f.put_key("k", 2, BASE_TS - 60_000)  # older than begin: diff clamps to 0
    assert f.put_key("k", 3, BASE_TS + (2**31 + 5) * 1000)  # beyond an int of seconds
    data = (tmp_path / "410").read_bytes()
    entries = HEADER_SIZE + 10 * 4
    assert struct.unpack_from(">i", data, entries + 2 * 20 + 12) == (0,)
    assert struct.unpack_from(">i", data, entries + 3 * 20 + 12) == (2**31 - 1,)


def test_header_persists_across_reopen(tmp_path: Path, files: list[IndexFile]) -> None:
    path = tmp_path / "20240101000000000"
    f = IndexFile(path, 10, 20)
    for i in range(5):
        assert f.put_key(f"key{i % 3}", 100 + i, BASE_TS + i * 1000)
    f.flush()
    header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset,
              f.hash_slot_count, f.index_count)
    assert header == (BASE_TS, BASE_TS + 4000, 100, 104, 3, 6)
    f.shutdown(0)

    g = new_file(files, path, slots=10, num=20, create=False)
    g.load()
    assert (g.begin_timestamp, g.end_timestamp, g.begin_phy_offset, g.end_phy_offset,
            g.hash_slot_count, g.index_count) == header
    assert g.select_phy_offset(["key0"], 10, 0, HUGE) == [103, 100]
    assert g.put_key("key0", 105, BASE_TS + 5000)  # writing continues after the loaded entries
    assert g.select_phy_offset(["key0"], 10, 0, HUGE) == [105, 103, 100]
    assert g.index_count == 7


def test_new_file_begins_at_previous_end(tmp_path: Path, files: list[IndexFile]) -> None:
    f = new_file(files, tmp_path / "500", slots=10, num=10, end_phy_offset=4096, end_timestamp=BASE_TS)
    assert (f.begin_phy_offset, f.end_phy_offset, f.begin_timestamp, f.end_timestamp) == (
        4096, 4096, BASE_TS, BASE_TS)
    assert f.put_key("k", 5000, BASE_TS + 3000)
    assert (f.begin_phy_offset, f.begin_timestamp) == (5000, BASE_TS + 3000)


def test_select_on_destroyed_file_returns_empty(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "600", 10, 10)
    assert f.put_key("k", 1, BASE_TS)
    assert f.destroy(0)
    assert not (tmp_path / "600").exists()
    assert f.select_phy_offset(["k"], 10, 0, HUGE) == []
    assert not f.put_key("k", 2, BASE_TS)
