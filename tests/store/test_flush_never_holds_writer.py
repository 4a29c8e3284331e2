"""Flushing never holds the writer (README "Deliberate differences": fdatasync, on the flush services' own threads).

``os.fdatasync`` — what MappedFile.force calls — is replaced by one that blocks on an Event, as a disk that
does not answer would. With the commit-log flush thread stuck inside it, puts from another thread still
return: PUT_OK under ASYNC_FLUSH, and under SYNC_FLUSH a put that does not wait for the flush (WAIT=false);
a SYNC_FLUSH put that waits gets FLUSH_DISK_TIMEOUT at syncFlushTimeout (its message is stored). Once the
event is set the flush completes and the store shuts down cleanly.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store import mapped_file as mapped_file_module
from reference_broker.store.config import FlushDiskType
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

WAIT_S = 10.0
NO_WAIT = {mc.PROPERTY_WAIT_STORE_MSG_OK: "false"}


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


class StuckDisk:
    """os.fdatasync that blocks every caller until ``release`` is set, then syncs for real."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.release = threading.Event()
        self.entered = threading.Event()  # the flush thread under test is inside fdatasync
        self.flush_thread = ""
        self.callers: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        if not self.release.is_set():
            name = threading.current_thread().name
            with self._lock:
                self.callers.add(name)
            if name == self.flush_thread:
                self.entered.set()
            self.release.wait(30)
        self.real(fd)


@pytest.fixture
def stuck_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[StuckDisk]:
    assert vars(mapped_file_module)["os"] is os  # MappedFile.force calls os.fdatasync
    disk = StuckDisk(os.fdatasync)
    monkeypatch.setattr(os, "fdatasync", disk)
    try:
        yield disk
    finally:
        disk.release.set()  # never leave a service thread blocked, whatever the test did


def bodies(store: MessageStore) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while offset < store.get_max_offset_in_queue(TOPIC, 0):
        res = store.get_message("G", TOPIC, 0, offset, 64)
        assert res.status is GetMessageStatus.FOUND
        out += [rec.decode_message(m).body for m in res.messages]
        offset = res.next_begin_offset
    return out


def put_in_thread(store: MessageStore, msgs: list[rec.MessageExtBrokerInner]) -> list[PutMessageResult]:
    """Put ``msgs`` from another thread; fail unless that thread finishes within WAIT_S."""
    results: list[PutMessageResult] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for m in msgs:
                results.append(store.put_message(m))
        except BaseException as e:  # noqa: BLE001 - a thread's top: surfaced by the test
            errors.append(e)

    t = threading.Thread(target=writer, name="writer", daemon=True)
    t.start()
    t.join(WAIT_S)
    assert not t.is_alive(), f"the writer is held: {len(results)} of {len(msgs)} puts returned"
    assert not errors
    return results


def test_async_flush_stuck_in_fdatasync_does_not_hold_puts(tmp_path: Path, stores: Stores,
                                                           stuck_disk: StuckDisk) -> None:
    # Every tick flushes whatever is dirty (thorough interval 0), so the first put sends the flusher into fdatasync.
    store = stores.open(make_config(tmp_path, flush_interval_commit_log_ms=5,
                                    flush_commit_log_thorough_interval_ms=0))
    assert store.config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    stuck_disk.flush_thread = store.flush_service.name
    try:
        (first,) = put_in_thread(store, [make_msg("first")])
        assert first.status is PutMessageStatus.PUT_OK
        assert stuck_disk.entered.wait(WAIT_S), "the flush thread never reached fdatasync"
        flushed = store.commit_log.flushed_where
        assert first.append is not None and flushed <= first.append.wrote_offset

        # 30 messages roll over several 1 KiB files while the flusher is stuck.
        results = put_in_thread(store, [make_msg(f"m{i}") for i in range(30)])
        assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 30
        assert len(store.commit_log.mapped_file_queue.mapped_files) > 3
        assert not stuck_disk.release.is_set() and store.commit_log.flushed_where == flushed  # still stuck

        # Dispatch and reads go on too.
        wait_dispatched(store)
        assert bodies(store) == [b"first"] + [f"m{i}".encode() for i in range(30)]
    finally:
        stuck_disk.release.set()

    end = store.get_max_phy_offset()
    wait_until(lambda: store.commit_log.flushed_where == end, what="the flush to complete once the disk answers")
    store.shutdown()
    assert store.shutdown_normally


def test_sync_flush_stuck_in_fdatasync_does_not_hold_puts_that_do_not_wait(tmp_path: Path, stores: Stores,
                                                                          stuck_disk: StuckDisk) -> None:
    store = stores.open(make_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=200))
    stuck_disk.flush_thread = store.flush_service.name
    try:
        # A put that does not wait only wakes the group-commit thread, which then flushes: into fdatasync.
        (first,) = put_in_thread(store, [make_msg("first", props=NO_WAIT)])
        assert first.status is PutMessageStatus.PUT_OK
        assert stuck_disk.entered.wait(WAIT_S), "the group-commit thread never reached fdatasync"
        assert first.append is not None and store.commit_log.flushed_where <= first.append.wrote_offset

        results = put_in_thread(store, [make_msg(f"nw{i}", props=NO_WAIT) for i in range(30)])
        assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 30

        # A put that waits for the flush is failed at syncFlushTimeout by the FlushDiskWatcher; it is stored.
        (waited,) = put_in_thread(store, [make_msg("waits")])
        assert waited.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert waited.is_ok and waited.append is not None
        assert not stuck_disk.release.is_set()
        assert store.commit_log.flushed_where <= first.append.wrote_offset  # nothing got past the stuck flush
    finally:
        stuck_disk.release.set()

    # The group-commit thread catches up a file per round. (A waiting put before that could get FLUSH_DISK_TIMEOUT
    # at once: like GroupCommitService.doCommit, a round flushes at most a few files for its requests.)
    end = store.get_max_phy_offset()
    wait_until(lambda: store.commit_log.flushed_where == end, what="the flush to complete once the disk answers")
    after = put_ok(store, make_msg("after release"))  # waits for a real flush now
    assert after.append is not None
    assert store.commit_log.flushed_where >= after.append.wrote_offset + after.append.wrote_bytes
    wait_dispatched(store)
    assert bodies(store) == [b"first"] + [f"nw{i}".encode() for i in range(30)] + [b"waits", b"after release"]
    store.shutdown()
    assert store.shutdown_normally
