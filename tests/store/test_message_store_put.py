"""MessageStore puts: refusals, flush policies, consume-queue and file-creation failures, throttling."""

from __future__ import annotations

import errno
import os
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store import mapped_file
from reference_broker.store import message_store as message_store_module
from reference_broker.store.config import BrokerRole, FlushDiskType
from reference_broker.store.flush import GroupCommitRequest, GroupCommitService
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus, PutMessageResult, PutMessageStatus
from tests.store.store_helpers import (
    TOPIC,
    Stores,
    make_config,
    make_msg,
    put_ok,
    stores_fixture,
    wait_dispatched,
    wait_until,
)


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


@pytest.fixture
def store(tmp_path: Path, stores: Stores) -> MessageStore:
    return stores.open(make_config(tmp_path))


@pytest.fixture
def sync_store(tmp_path: Path, stores: Stores) -> MessageStore:
    # These tests are about what a put returns after its flush, not about the timeout (the stuck-flusher test
    # below is): on a loaded machine (parallel test workers' fsyncs) one fsync can outlast the 5 s default.
    return stores.open(make_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=60_000))


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- refusals --------------------------------------------------------------------------------------

def test_put_after_shutdown_is_service_not_available(store: MessageStore) -> None:
    put_ok(store, make_msg("before"))
    store.shutdown()
    result = store.put_message(make_msg("after"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert not result.is_ok
    assert result.append is None


def test_put_on_a_slave_is_service_not_available(tmp_path: Path, stores: Stores) -> None:
    slave = stores.open(make_config(tmp_path, broker_role=BrokerRole.SLAVE))
    assert slave.put_message(make_msg("x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert slave.get_max_phy_offset() == 0


def test_put_when_disk_full_is_refused_with_the_disk_remark(store: MessageStore) -> None:
    store.running_flags.get_and_make_disk_full()
    result = store.put_message(make_msg("refused"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "the broker's disk is full" in result.remark
    assert "CL:" in result.remark
    assert store.get_max_phy_offset() == 0

    store.running_flags.get_and_make_disk_ok()
    put_ok(store, make_msg("accepted"))


def test_os_page_cache_busy(store: MessageStore) -> None:
    store.commit_log.begin_time_in_lock = now_ms() - 1500  # a put has held the lock for 1.5 s
    assert store.is_os_page_cache_busy()
    assert store.put_message(make_msg("busy")).status is PutMessageStatus.OS_PAGECACHE_BUSY
    assert store.get_max_phy_offset() == 0

    store.commit_log.begin_time_in_lock = now_ms() - 500  # under osPageCacheBusyTimeOutMills (1 s)
    assert not store.is_os_page_cache_busy()
    store.commit_log.begin_time_in_lock = 0
    put_ok(store, make_msg("not busy"))


# ---- flush policies ---------------------------------------------------------------------------------

def test_sync_flush_put_returns_after_its_bytes_are_flushed(sync_store: MessageStore) -> None:
    for i in range(20):  # across several 1 KiB files
        r = put_ok(sync_store, make_msg(f"sync-{i}"))
        assert r.append is not None
        assert sync_store.commit_log.flushed_where >= r.append.wrote_offset + r.append.wrote_bytes
    assert len(sync_store.commit_log.mapped_file_queue.mapped_files) > 1


def test_sync_flush_concurrent_puts(sync_store: MessageStore) -> None:
    threads, per_thread = 16, 15
    results: list[PutMessageResult] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                r = sync_store.put_message(make_msg(f"t{t}-{i}"))
                assert r.append is not None
                assert sync_store.commit_log.flushed_where >= r.append.wrote_offset + r.append.wrote_bytes
                with lock:
                    results.append(r)
        except BaseException as e:  # noqa: BLE001 - a thread's top: surfaced by the test
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not errors
    total = threads * per_thread
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * total
    assert sorted(r.append.logics_offset for r in results if r.append) == list(range(total))
    wait_dispatched(sync_store)
    bodies = []
    offset = 0
    while offset < total:
        res = sync_store.get_message("G", TOPIC, 0, offset, 32)
        assert res.status is GetMessageStatus.FOUND
        assert res.queue_offsets == list(range(offset, offset + res.message_count))
        bodies += [rec.decode_message(m).body for m in res.messages]
        offset = res.next_begin_offset
    assert sorted(bodies) == sorted(f"t{t}-{i}".encode() for t in range(threads) for i in range(per_thread))


def test_sync_flush_wait_false_does_not_wait(sync_store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = sync_store.flush_service
    assert isinstance(svc, GroupCommitService)
    requests: list[GroupCommitRequest] = []
    real_put_request = svc.put_request

    def recording(req: GroupCommitRequest) -> None:
        requests.append(req)
        real_put_request(req)

    monkeypatch.setattr(svc, "put_request", recording)
    put_ok(sync_store, make_msg("no wait", props={mc.PROPERTY_WAIT_STORE_MSG_OK: "false"}))
    assert requests == []
    waited = put_ok(sync_store, make_msg("waits"))
    assert waited.append is not None
    assert [r.next_offset for r in requests] == [waited.append.wrote_offset + waited.append.wrote_bytes]


def test_sync_flush_stuck_flusher_times_out_but_the_message_is_stored(
        tmp_path: Path, stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlushDiskWatcher: a flush stuck past syncFlushTimeout gives FLUSH_DISK_TIMEOUT; WAIT=false puts still return."""
    store = stores.open(make_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=200))
    svc = store.flush_service
    assert isinstance(svc, GroupCommitService)
    release = threading.Event()
    real_commit = svc._do_commit

    def stuck(requests: list[GroupCommitRequest]) -> None:
        release.wait(30)
        real_commit(requests)

    monkeypatch.setattr(svc, "_do_commit", stuck)
    try:
        timed_out = store.put_message(make_msg("stuck"))
        assert timed_out.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert timed_out.is_ok  # stored all the same
        put_ok(store, make_msg("no wait", props={mc.PROPERTY_WAIT_STORE_MSG_OK: "false"}))
    finally:
        release.set()
    wait_dispatched(store)
    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert [rec.decode_message(m).body for m in res.messages] == [b"stuck", b"no wait"]


def test_async_flush_catches_up(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    for i in range(40):  # > flushCommitLogLeastPages (4 pages) in one file
        put_ok(store, make_msg(bytes([i]) * 500))
    end = store.get_max_phy_offset()
    assert end > 4 * mapped_file.OS_PAGE_SIZE
    wait_until(lambda: store.commit_log.flushed_where >= end, timeout_s=5, what="the async flush")
    assert store.commit_log.flushed_where == end


# ---- consume-queue write failure (docs/claims.md, `cq-write-failure`) ----------------------------------

def test_consume_queue_write_failure_makes_the_store_read_only(store: MessageStore,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        put_ok(store, make_msg(f"ok-{i}"))
    wait_dispatched(store)

    real_ensure = mapped_file.MappedFile.ensure_allocated

    def broken(self: mapped_file.MappedFile, end: int) -> None:
        if "consumequeue" in str(self.path):
            raise OSError(errno.EIO, "injected consume queue write failure")
        real_ensure(self, end)

    # Both the run path and the per-unit path reserve space before writing a unit.
    monkeypatch.setattr(mapped_file.MappedFile, "ensure_allocated", broken)
    put_ok(store, make_msg("not indexed"))  # the append succeeds; its dispatch fails after the retries
    wait_until(lambda: not store.running_flags.is_writeable(), what="the store to turn read-only")
    assert store.running_flags.is_logics_queue_error()

    refused = store.put_message(make_msg("refused"))
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert res.status is GetMessageStatus.FOUND
    assert [rec.decode_message(m).body for m in res.messages] == [b"ok-0", b"ok-1", b"ok-2"]

    store.shutdown()
    assert store.shutdown_normally is False  # not writeable: keep the abort file
    assert (store.store_root / "abort").exists()


# ---- commit-log file creation failure ------------------------------------------------------------------

def test_create_mapped_file_failed(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    file_size = store.config.mapped_file_size_commit_log
    first = put_ok(store, make_msg("fill-0"))
    size = first.append.wrote_bytes if first.append else 0
    count = 1
    while file_size - store.get_max_phy_offset() % file_size >= size + 8:  # fill the first file
        put_ok(store, make_msg(f"fill-{count}"))
        count += 1
    wait_dispatched(store)
    commit_log_dir = store.config.store_path_commit_log
    files_before = sorted(p.name for p in commit_log_dir.iterdir())
    assert files_before == [f"{0:020d}"]

    real_fallocate = os.posix_fallocate

    def no_space_for_commit_log(fd: int, offset: int, length: int) -> None:
        if "commitlog" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fallocate(fd, offset, length)

    monkeypatch.setattr("reference_broker.store.mapped_file.os.posix_fallocate", no_space_for_commit_log)
    for _ in range(2):
        failed = store.put_message(make_msg("no space"))
        assert failed.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED
        assert not failed.is_ok
        assert sorted(p.name for p in commit_log_dir.iterdir()) == files_before  # nothing half-created

    monkeypatch.undo()
    again = put_ok(store, make_msg("space again"))
    assert again.append is not None
    assert again.append.wrote_offset == file_size  # the first file was closed with a blank record
    assert again.append.logics_offset == count
    assert sorted(p.name for p in commit_log_dir.iterdir()) == [f"{0:020d}", f"{file_size:020d}"]
    wait_dispatched(store)
    res = store.get_message("G", TOPIC, 0, count, 32)
    assert [rec.decode_message(m).body for m in res.messages] == [b"space again"]


# ---- dispatch throttling (docs/claims.md, `dispatch-throttle`) ------------------------------------------

def test_put_is_slowed_not_refused_when_dispatch_is_behind(tmp_path: Path, stores: Stores,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store = stores.new(make_config(tmp_path, put_msg_index_high_water=0))
    assert store.load()  # not started: nothing dispatches
    sleeps: list[float] = []
    fake_time = types.SimpleNamespace(time=time.time, monotonic=time.monotonic, time_ns=time.time_ns,
                                      sleep=sleeps.append)
    monkeypatch.setattr(message_store_module, "time", fake_time)

    results = [store.put_message(make_msg(f"p{i}")) for i in range(5)]
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 5
    assert [r.append.logics_offset for r in results if r.append] == list(range(5))
    assert store.reput.dispatched_count == 0
    assert store.dispatch_behind_bytes() == store.get_max_phy_offset() > 0
    assert sleeps == [0.001] * 4  # every put after the first found the backlog above the high water

    store.config.put_msg_index_high_water = 600_000
    put_ok(store, make_msg("below the high water"))
    assert len(sleeps) == 4
