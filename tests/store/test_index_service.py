"""IndexService: roll, load, build, query and delete over the files of a store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.index_service import IndexService

HASH_SLOT_NUM = 100
INDEX_NUM = 400
HUGE = 2**63 - 1
BASE_TS = 1_700_000_000_000


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
