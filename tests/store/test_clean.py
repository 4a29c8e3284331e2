"""Disk cleaning and self-protection: RocketMQ's DefaultMessageStoreCleanFilesTest (4.9.8) and RunningFlags.

55 commit-log files of 128 bytes hold one message each (like the Java test); consume-queue files hold 7
units and index files 7 entries, so deleting commit-log files by 10 per pass (DELETE_FILES_BATCH_MAX) frees
whole consume-queue and index files behind them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store.clean import (
    MAX_MANUAL_DELETE_FILE_TIMES,
    CleanCommitLogService,
    DiskCheck,
    RunningFlags,
)
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus, PutMessageStatus
from tests.store.store_helpers import Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched

TOPIC = "test"
KEYS = "hello"
FILE_SIZE = 128
FILE_COUNT = 55
RESERVED_HOURS = 1
CQ_UNITS = math.ceil(FILE_SIZE / 20)  # the consume-queue file size is rounded up to whole units: 7
INDEX_NUM = 8  # 7 entries per index file (entry 0 is the sentinel)
EXPIRED = 15


class Disk:
    """An injected disk: the used ratio of the commit-log partition."""

    def __init__(self, ratio: float = 0.1) -> None:
        self.ratio = ratio
        self.asked: list[Path] = []

    def __call__(self, path: Path) -> float:
        self.asked.append(path)
        return self.ratio


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


@pytest.fixture
def now() -> int:
    return int(time.time() * 1000)


def not_now(now_ms: int) -> str:
    """A deleteWhen hour that is surely not the hour of ``now_ms``."""
    return f"{(time.localtime(now_ms / 1000).tm_hour + 12) % 24:02d}"


def body_for_one_message_per_file() -> bytes:
    props = rec.stored_props_length(mc.properties_to_bytes({mc.PROPERTY_KEYS: KEYS}), prop_crc=False)
    fixed = rec.record_length(0, len(TOPIC), props)
    return bytes(FILE_SIZE - fixed - rec.END_FILE_MIN_BLANK_LENGTH)


def open_store(stores: Stores, root: Path, disk: Disk, now_ms: int, delete_when: str,
               **overrides: object) -> tuple[MessageStore, CleanCommitLogService]:
    # 128-byte files hold one 4.9.8-layout record; the whole-record CRC's 20 bytes would not fit.
    cfg = make_config(root, mapped_file_size_commit_log=FILE_SIZE, mapped_file_size_consume_queue=FILE_SIZE,
                      max_index_num=INDEX_NUM, file_reserved_time_hours=RESERVED_HOURS, delete_when=delete_when,
                      enabled_append_prop_crc=False, **overrides)
    store = stores.open(cfg)
    svc = CleanCommitLogService(cfg, store.commit_log, store.running_flags, used_ratio=disk, now_ms=lambda: now_ms)
    store.clean_commit_log = svc
    body = body_for_one_message_per_file()
    for _ in range(FILE_COUNT):
        r = put_ok(store, make_msg(body, topic=TOPIC, tags=None, keys=KEYS))
        assert r.append is not None and r.append.wrote_bytes == FILE_SIZE - rec.END_FILE_MIN_BLANK_LENGTH
    wait_dispatched(store)
    store.index_service.wait_flushes()
    assert len(cl_files(store)) == FILE_COUNT
    assert len(cq_files(store)) == math.ceil(FILE_COUNT / CQ_UNITS) == 8
    assert len(store.index_service.files()) == math.ceil(FILE_COUNT / (INDEX_NUM - 1)) == 8
    return store, svc


def cl_files(store: MessageStore) -> list[str]:
    return [mf.file_name for mf in store.commit_log.mapped_file_queue.mapped_files]


def cq_files(store: MessageStore) -> list[str]:
    cq = store.find_consume_queue(TOPIC, 0, create=False)
    assert cq is not None
    return [mf.file_name for mf in cq.mapped_file_queue.mapped_files]


def expire(store: MessageStore, count: int) -> None:
    """Age the first ``count`` commit-log files to twice the reserved time (expireFiles)."""
    t = time.time() - RESERVED_HOURS * 3600 * 2
    for mf in store.commit_log.mapped_file_queue.mapped_files[:count]:
        os.utime(mf.path, (t, t))


def run_clean(store: MessageStore) -> int:
    deleted = store.clean_commit_log.run()
    store.clean_consume_queue.run()
    return deleted


def assert_counts(store: MessageStore, deleted: int) -> None:
    assert len(cl_files(store)) == FILE_COUNT - deleted
    assert len(cq_files(store)) == 8 - deleted // CQ_UNITS
    assert len(store.index_service.files()) == 8 - deleted // (INDEX_NUM - 1)
    assert len(list((store.config.store_path_consume_queue / TOPIC / "0").iterdir())) == 8 - deleted // CQ_UNITS
    assert len(list(store.config.store_path_index.iterdir())) == 8 - deleted // (INDEX_NUM - 1)
    assert len(list(store.config.store_path_commit_log.iterdir())) == FILE_COUNT - deleted


def delete_expired_in_two_passes(store: MessageStore) -> None:
    expire(store, EXPIRED)
    assert run_clean(store) == 10  # MappedFileQueue.DELETE_FILES_BATCH_MAX
    assert_counts(store, 10)
    assert run_clean(store) == EXPIRED - 10
    assert_counts(store, EXPIRED)
    assert run_clean(store) == 0  # files younger than fileReservedTime stay
    assert_counts(store, EXPIRED)


# ---- is_space_full and the disk-full flag --------------------------------------------------------------

def test_is_space_full_empty_to_full_and_back(tmp_path: Path, stores: Stores, now: int) -> None:
    disk = Disk(0.1)
    store, svc = open_store(stores, tmp_path, disk, now, not_now(now))
    assert not svc.is_space_full()
    assert disk.asked[-1] == store.config.store_path_commit_log
    disk.ratio = 0.95
    assert svc.is_space_full()
    disk.ratio = 0.89
    assert not svc.is_space_full()


def test_disk_full_flag_set_above_warning_level_and_cleared_below(tmp_path: Path, stores: Stores, now: int) -> None:
    disk = Disk(0.1)
    store, svc = open_store(stores, tmp_path, disk, now, not_now(now))
    assert svc.check_disk() is DiskCheck.OK
    assert not store.running_flags.is_disk_full()

    disk.ratio = 0.91
    assert svc.check_disk() is DiskCheck.FULL
    assert store.running_flags.is_disk_full()
    assert svc.clean_immediately
    result = store.put_message(make_msg(b"x", topic=TOPIC))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "the broker's disk is full" in result.remark
    assert store.get_message("G", TOPIC, 0, 0, 1).status is GetMessageStatus.FOUND  # reads go on

    disk.ratio = 0.89
    assert svc.check_disk() is DiskCheck.CLEAN_FORCIBLY
    assert not store.running_flags.is_disk_full()
    put_ok(store, make_msg(b"y", topic=TOPIC))

    disk.ratio = 0.80
    assert svc.check_disk() is DiskCheck.OVER_MAX_RATIO  # > diskMaxUsedSpaceRatio (75 %)
    disk.ratio = -1.0
    assert svc.check_disk() is DiskCheck.OVER_MAX_RATIO  # unknown usage also asks for a clean-up


# ---- deletion triggers ----------------------------------------------------------------------------------

def test_delete_expired_files_by_time_up(tmp_path: Path, stores: Stores, now: int) -> None:
    hour = f"{time.localtime(now / 1000).tm_hour:02d}"
    store, _ = open_store(stores, tmp_path, Disk(0.1), now, f"{not_now(now)};{hour}",
                          disk_max_used_space_ratio=95)
    delete_expired_in_two_passes(store)


def test_nothing_is_deleted_without_a_trigger(tmp_path: Path, stores: Stores, now: int) -> None:
    store, _ = open_store(stores, tmp_path, Disk(0.1), now, not_now(now))
    expire(store, EXPIRED)
    assert run_clean(store) == 0
    assert_counts(store, 0)


def test_delete_expired_files_by_space(tmp_path: Path, stores: Stores, now: int) -> None:
    disk = Disk(0.80)  # over diskMaxUsedSpaceRatio (75 %), under the clean-at-once level
    store, svc = open_store(stores, tmp_path, disk, now, not_now(now))
    delete_expired_in_two_passes(store)
    assert not svc.clean_immediately
    assert not store.running_flags.is_disk_full()


def test_a_past_reading_above_clean_forcibly_ratio_does_not_delete_unexpired_files_later(
        tmp_path: Path, stores: Stores, now: int) -> None:
    # isSpaceToDelete clears cleanImmediately on every check: once the disk is back under 85 %, a deletion
    # triggered by space (75-85 %) removes expired files only.
    disk = Disk(0.86)
    store, svc = open_store(stores, tmp_path, disk, now, not_now(now))
    assert svc.check_disk() is DiskCheck.CLEAN_FORCIBLY
    assert svc.clean_immediately
    disk.ratio = 0.80
    expire(store, 3)
    assert run_clean(store) == 3
    assert_counts(store, 3)
    assert not svc.clean_immediately


def test_delete_files_immediately_above_clean_forcibly_ratio(tmp_path: Path, stores: Stores, now: int) -> None:
    disk = Disk(0.86)  # > diskSpaceCleanForciblyRatio: files go whatever their age
    store, _ = open_store(stores, tmp_path, disk, now, not_now(now))
    for a in range(1, FILE_COUNT // 10 + 1):
        assert run_clean(store) == 10
        assert_counts(store, 10 * a)
    assert run_clean(store) == FILE_COUNT % 10 - 1  # never the last file
    assert len(cl_files(store)) == 1


def test_clean_forcibly_disabled_keeps_young_files(tmp_path: Path, stores: Stores, now: int) -> None:
    store, _ = open_store(stores, tmp_path, Disk(0.86), now, not_now(now), clean_file_forcibly_enable=False)
    assert run_clean(store) == 0
    expire(store, 3)
    assert run_clean(store) == 3


def test_delete_expired_files_manually_for_20_runs(tmp_path: Path, stores: Stores, now: int) -> None:
    store, svc = open_store(stores, tmp_path, Disk(0.1), now, not_now(now))
    store.execute_delete_files_manually()
    assert svc.manual_delete_file_several_times == MAX_MANUAL_DELETE_FILE_TIMES == 20
    delete_expired_in_two_passes(store)  # three runs
    for _ in range(MAX_MANUAL_DELETE_FILE_TIMES - 3):
        assert run_clean(store) == 0
    assert svc.manual_delete_file_several_times == 0

    expire(store, 5)
    assert run_clean(store) == 0  # the manual request is used up
    store.execute_delete_files_manually()
    assert run_clean(store) == 5
    assert_counts(store, EXPIRED + 5)
    assert svc.manual_delete_file_several_times == MAX_MANUAL_DELETE_FILE_TIMES - 1


# ---- what follows the commit log ------------------------------------------------------------------------

def test_consume_queue_and_index_follow_the_commit_log_min_offset(tmp_path: Path, stores: Stores, now: int) -> None:
    store, _ = open_store(stores, tmp_path, Disk(0.1), now, not_now(now))
    store.execute_delete_files_manually()
    expire(store, EXPIRED)
    store.clean_commit_log.run()
    store.clean_commit_log.run()
    assert len(cl_files(store)) == FILE_COUNT - EXPIRED
    assert len(cq_files(store)) == 8  # consume queue and index are cleaned by their own service
    assert len(store.index_service.files()) == 8

    min_phy = store.get_min_phy_offset()
    assert min_phy == EXPIRED * FILE_SIZE
    assert store.clean_consume_queue.run() == EXPIRED // CQ_UNITS
    assert_counts(store, EXPIRED)
    assert cq_files(store)[0] == f"{EXPIRED // CQ_UNITS * CQ_UNITS * 20:020d}"
    assert all(f.end_phy_offset >= min_phy for f in store.index_service.files())
    assert store.get_min_offset_in_queue(TOPIC, 0) == EXPIRED
    assert store.get_message("G", TOPIC, 0, 0, 32).status is GetMessageStatus.OFFSET_TOO_SMALL
    res = store.get_message("G", TOPIC, 0, EXPIRED, 32)
    assert res.status is GetMessageStatus.FOUND
    assert res.queue_offsets[0] == EXPIRED
    assert store.query_message(TOPIC, KEYS, 64, 0, 2**62)  # the newer index files still answer

    assert store.clean_consume_queue.run() == 0  # the min offset has not moved since


def test_clean_files_runs_both_services(tmp_path: Path, stores: Stores, now: int) -> None:
    store, _ = open_store(stores, tmp_path, Disk(0.86), now, not_now(now))
    store.clean_files()
    assert_counts(store, 10)


# ---- RunningFlags --------------------------------------------------------------------------------------

Flag = Callable[[RunningFlags], object]


def test_running_flags_start_clear() -> None:
    flags = RunningFlags()
    assert flags.is_writeable() and flags.is_readable() and flags.is_cq_writeable()
    assert not flags.is_disk_full() and not flags.is_logics_queue_error()


@pytest.mark.parametrize(("make", "cq_writeable"), [
    (RunningFlags.make_not_writeable, False),
    (RunningFlags.make_logics_queue_error, False),
    (RunningFlags.make_index_file_error, False),
    (RunningFlags.get_and_make_disk_full, True),  # a full disk still lets dispatch build the queues
])
def test_running_flags_each_error_stops_writes(make: Flag, cq_writeable: bool) -> None:
    flags = RunningFlags()
    make(flags)
    assert not flags.is_writeable()
    assert flags.is_cq_writeable() is cq_writeable
    assert flags.is_readable()


def test_running_flags_disk_full_round_trip() -> None:
    flags = RunningFlags()
    assert flags.get_and_make_disk_full() is False  # returns whether the disk was already marked full
    assert flags.get_and_make_disk_full() is True
    assert flags.is_disk_full() and not flags.is_writeable()
    assert flags.flag == RunningFlags.DISK_FULL == 1 << 4
    assert flags.get_and_make_disk_ok() is True
    assert flags.get_and_make_disk_ok() is False
    assert flags.is_writeable() and flags.flag == 0


def test_running_flags_disk_ok_keeps_other_errors() -> None:
    flags = RunningFlags()
    flags.make_logics_queue_error()
    flags.get_and_make_disk_full()
    flags.get_and_make_disk_ok()
    assert not flags.is_writeable()
    assert flags.is_logics_queue_error()
    assert flags.flag == RunningFlags.WRITE_LOGICS_QUEUE_ERROR
