"""IndexFile and IndexService: RocketMQ's IndexFileTest plus roll, load, query and delete behaviour."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.index_file import (
    HEADER_SIZE,
    IndexFile,
    IndexService,
    index_file_size,
    index_key_hash,
)

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


# ---- IndexFile ---------------------------------------------------------------------------------

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


# ---- IndexService ------------------------------------------------------------------------------

def req(offset: int, ts: int, keys: str = "", uniq: str | None = None, topic: str = "T",
        sys_flag: int = 0) -> DispatchRequest:
    return DispatchRequest(topic, 0, offset, 100, 0, ts, 0, keys, uniq, sys_flag, 0)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[StoreCheckpoint]:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    yield cp
    cp.shutdown()


@pytest.fixture
def services() -> Iterator[list[IndexService]]:
    made: list[IndexService] = []
    yield made
    for s in made:
        s.shutdown()


def new_service(services: list[IndexService], tmp_path: Path, cp: StoreCheckpoint, index_num: int = 4,
                slots: int = 10) -> IndexService:
    s = IndexService(tmp_path / "index", slots, index_num, cp)
    services.append(s)
    return s


def build(s: IndexService, n: int, start: int = 0) -> None:
    """Message i: offset 100*i, store time BASE_TS + 1000*i, one key ``k{i}``."""
    for i in range(start, start + n):
        s.build_index(req(100 * i, BASE_TS + 1000 * i, keys=f"k{i}"))


def test_roll_over_and_query_both_files(tmp_path: Path, checkpoint: StoreCheckpoint,
                                        services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint)  # 3 entries a file
    build(s, 5)
    s.wait_flushes()
    fs = s.files()
    assert len(fs) == 2
    assert fs[0].file_name < fs[1].file_name and len(fs[1].file_name) == 17
    assert fs[0].is_write_full() and (fs[0].end_phy_offset, fs[0].end_timestamp) == (200, BASE_TS + 2000)
    assert (fs[1].begin_phy_offset, fs[1].end_phy_offset) == (300, 400)
    assert checkpoint.index_msg_timestamp == fs[0].end_timestamp  # set by the full file's flush
    for i in range(5):
        assert s.query_offset("T", f"k{i}", 32, 0, HUGE).phy_offsets == [100 * i]
    r = s.query_offset("T", "k4", 32, 0, HUGE)
    assert (r.index_last_update_timestamp, r.index_last_update_phyoffset) == (BASE_TS + 4000, 400)
    assert s.query_offset("OTHER", "k1", 32, 0, HUGE).phy_offsets == []


def test_query_newest_first_across_files_and_batch_cap(tmp_path: Path, checkpoint: StoreCheckpoint,
                                                       services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint, index_num=50)
    for i in range(100):
        s.build_index(req(10 * i, BASE_TS + i, uniq="same"))
    assert len(s.files()) == 3
    r = s.query_offset("T", "same", 1000, 0, HUGE)
    assert r.phy_offsets == [10 * i for i in range(99, 35, -1)]  # maxMsgsNumBatch = 64
    assert s.query_offset("T", "same", 5, 0, HUGE).phy_offsets == [990, 980, 970, 960, 950]


def test_query_time_range_skips_files(tmp_path: Path, checkpoint: StoreCheckpoint,
                                      services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint)
    for i in range(6):
        s.build_index(req(100 * i, BASE_TS + 1000 * i, uniq="u"))
    assert s.query_offset("T", "u", 32, BASE_TS + 4500, HUGE).phy_offsets == [500]
    # RocketMQ quirk kept: the first entry of a rolled file (offset 300, stored at +3000) wrote its
    # timeDiff (1 s) against the previous file's end (+2000), then begin became +3000: it reads as +4000.
    assert s.query_offset("T", "u", 32, BASE_TS + 3500, HUGE).phy_offsets == [500, 400, 300]
    assert s.query_offset("T", "u", 32, BASE_TS, BASE_TS + 1500).phy_offsets == [100, 0]


def test_load_after_abnormal_exit_destroys_files_past_checkpoint(
        tmp_path: Path, checkpoint: StoreCheckpoint, services: list[IndexService]) -> None:
    s = IndexService(tmp_path / "index", 10, 4, checkpoint)
    build(s, 7)  # three files: k0-k2, k3-k5, k6
    s.wait_flushes()
    names = [f.file_name for f in s.files()]
    assert len(names) == 3
    s.flush()
    s.shutdown()
    # The second file's flush reached the checkpoint; pretend only the first one's did.
    assert checkpoint.index_msg_timestamp == BASE_TS + 5000
    checkpoint.index_msg_timestamp = BASE_TS + 2000

    ok = new_service(services, tmp_path, checkpoint)
    assert ok.load(last_exit_ok=True)
    assert [f.file_name for f in ok.files()] == names
    ok.shutdown()

    crashed = new_service(services, tmp_path, checkpoint)
    assert crashed.load(last_exit_ok=False)
    assert [f.file_name for f in crashed.files()] == names[:1]
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == names[:1]
    assert crashed.query_offset("T", "k1", 32, 0, HUGE).phy_offsets == [100]
    assert crashed.query_offset("T", "k4", 32, 0, HUGE).phy_offsets == []
    # Recovery re-dispatches the lost messages into a new file that continues the first.
    build(crashed, 4, start=3)
    assert crashed.query_offset("T", "k4", 32, 0, HUGE).phy_offsets == [400]
    assert crashed.files()[1].begin_phy_offset == 300


def test_load_rejects_wrong_size_and_skips_other_names(tmp_path: Path, checkpoint: StoreCheckpoint,
                                                       services: list[IndexService]) -> None:
    d = tmp_path / "index"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    assert new_service(services, tmp_path, checkpoint).load(True)
    (d / "20240101000000000").write_bytes(b"\0" * 10)
    assert not new_service(services, tmp_path, checkpoint).load(True)


def test_rollback_not_indexed(tmp_path: Path, checkpoint: StoreCheckpoint,
                              services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint, index_num=20)
    s.build_index(req(0, BASE_TS, keys="rb", uniq="U1", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    s.build_index(req(100, BASE_TS, keys="cm", uniq="U2", sys_flag=TRANSACTION_COMMIT_TYPE))
    assert s.query_offset("T", "rb", 32, 0, HUGE).phy_offsets == []
    assert s.query_offset("T", "U1", 32, 0, HUGE).phy_offsets == []
    assert s.query_offset("T", "cm", 32, 0, HUGE).phy_offsets == [100]
    assert s.query_offset("T", "U2", 32, 0, HUGE).phy_offsets == [100]


def test_keys_split_on_space(tmp_path: Path, checkpoint: StoreCheckpoint,
                             services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint, index_num=20)
    s.build_index(req(0, BASE_TS, keys="a b  c", uniq="UNIQ"))
    last = s.get_last_file()
    assert last is not None and last.index_count == 1 + 4  # uniq key + a, b, c (no empty key)
    for k in ["a", "b", "c", "UNIQ"]:
        assert s.query_offset("T", k, 32, 0, HUGE).phy_offsets == [0]
    assert s.query_offset("T", "", 32, 0, HUGE).phy_offsets == []


def test_already_indexed_offsets_are_skipped(tmp_path: Path, checkpoint: StoreCheckpoint,
                                             services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint, index_num=20)
    s.build_index(req(500, BASE_TS, keys="a"))
    s.build_index(req(400, BASE_TS, keys="b"))  # below the file's end offset: a re-dispatch
    s.build_index(req(500, BASE_TS, keys="c"))  # equal is indexed, as in RocketMQ
    assert s.query_offset("T", "b", 32, 0, HUGE).phy_offsets == []
    assert s.query_offset("T", "c", 32, 0, HUGE).phy_offsets == [500]


def test_keys_spanning_a_roll(tmp_path: Path, checkpoint: StoreCheckpoint,
                              services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint)  # 3 entries a file
    s.build_index(req(0, BASE_TS, keys="a b c d e"))
    assert len(s.files()) == 2
    for k in "abcde":
        assert s.query_offset("T", k, 32, 0, HUGE).phy_offsets == [0]


def test_delete_expired_file(tmp_path: Path, checkpoint: StoreCheckpoint,
                             services: list[IndexService]) -> None:
    s = new_service(services, tmp_path, checkpoint)
    build(s, 7)  # files end at offsets 200, 500, 600
    s.wait_flushes()
    fs = s.files()
    assert [f.end_phy_offset for f in fs] == [200, 500, 600]
    s.delete_expired_file(200)  # nothing ends below 200
    assert len(s.files()) == 3
    s.delete_expired_file(300)
    assert s.files() == fs[1:]
    assert not (tmp_path / "index" / fs[0].file_name).exists()
    assert s.query_offset("T", "k0", 32, 0, HUGE).phy_offsets == []
    s.delete_expired_file(10**9)  # never the last file
    assert s.files() == fs[2:]
    assert s.query_offset("T", "k6", 32, 0, HUGE).phy_offsets == [600]


def test_destroy_removes_all_files(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    s = IndexService(tmp_path / "index", 10, 4, checkpoint)
    build(s, 5)
    s.destroy()
    assert s.files() == []
    assert list((tmp_path / "index").iterdir()) == []
    assert s.query_offset("T", "k1", 32, 0, HUGE).phy_offsets == []


def test_concurrent_queries_during_build_and_destroy(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    """Readers on other threads never crash: rolls, expiry and destroy under them yield short results."""
    s = IndexService(tmp_path / "index", 10, 8, checkpoint)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                for i in range(0, 200, 7):
                    r = s.query_offset("T", f"k{i}", 32, 0, HUGE)
                    assert r.phy_offsets in ([], [100 * i])
        except BaseException as e:  # noqa: BLE001 - a thread's top: surfaced below
            errors.append(e)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        build(s, 200)
        s.delete_expired_file(100 * 150)
        s.destroy()
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert errors == []
