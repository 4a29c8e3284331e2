"""Flush services: group commit, FlushDiskWatcher (RocketMQ's FlushDiskWatcherTest), async flush, CQ flush."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common.record import MessageExtBrokerInner, stored_props_length
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.commit_log import CommitLog
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.flush import (
    FlushConsumeQueueService,
    FlushDiskWatcher,
    FlushRealTimeService,
    GroupCommitRequest,
    GroupCommitService,
)
from reference_broker.store.status import PutMessageStatus

WAIT_S = 5.0  # upper bound for a future to complete; tests finish in milliseconds


@pytest.fixture
def config(tmp_path: Path) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commit_log=1024)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[StoreCheckpoint]:
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    yield cp
    cp.shutdown()


@pytest.fixture
def commit_log(config: MessageStoreConfig, checkpoint: StoreCheckpoint) -> Iterator[CommitLog]:
    cl = CommitLog(config, checkpoint)
    yield cl
    cl.shutdown()


def put(cl: CommitLog, n: int = 1) -> int:
    """Append ``n`` 200-byte messages; return the store time of the last."""
    ts = 0
    body = b"x" * (200 - 91 - 1 - stored_props_length(b""))
    for _ in range(n):
        r = cl.put_message(MessageExtBrokerInner("T", body))
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        ts = r.append.store_timestamp
    return ts


def disk_checkpoint(path: Path) -> tuple[int, int, int]:
    return struct.unpack_from(">qqq", path.read_bytes(), 0)  # type: ignore[return-value]


# ---- GroupCommitService and FlushDiskWatcher ---------------------------------------------------

def test_group_commit_request_completes_put_ok_when_flushed(commit_log: CommitLog,
                                                           checkpoint: StoreCheckpoint) -> None:
    ts = put(commit_log, 3)
    svc = GroupCommitService(commit_log, checkpoint)
    svc.start()
    try:
        req = GroupCommitRequest(commit_log.get_max_offset(), 5000)
        svc.put_request(req)
        assert req.result(WAIT_S) is PutMessageStatus.PUT_OK
        assert req.wait() is PutMessageStatus.PUT_OK
        assert commit_log.flushed_where >= 600
        assert checkpoint.physic_msg_timestamp == ts
    finally:
        svc.shutdown()


def test_group_commit_spanning_a_file_boundary(commit_log: CommitLog, checkpoint: StoreCheckpoint) -> None:
    put(commit_log, 7)  # five in file 0, two in file 1
    assert commit_log.get_max_offset() == 1024 + 400
    svc = GroupCommitService(commit_log, checkpoint)
    reqs = [GroupCommitRequest(600, 5000), GroupCommitRequest(1424, 5000)]
    svc._do_commit(reqs)
    assert [r.result(0) for r in reqs] == [PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK]
    assert commit_log.flushed_where == 1424


def test_watcher_times_out_request_when_flush_thread_never_runs(commit_log: CommitLog,
                                                               checkpoint: StoreCheckpoint) -> None:
    put(commit_log)
    svc = GroupCommitService(commit_log, checkpoint)  # never started: nothing flushes
    svc.watcher.start()
    try:
        req = GroupCommitRequest(commit_log.get_max_offset(), 50)
        svc.put_request(req)
        assert req.result(WAIT_S) is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert commit_log.flushed_where == 0  # the message is stored, only the flush wait failed
    finally:
        svc.watcher.shutdown()


def test_watcher_times_out_many_requests(commit_log: CommitLog) -> None:
    watcher = FlushDiskWatcher()
    watcher.start()
    try:
        reqs = [GroupCommitRequest(100 + i, 20 + i % 5) for i in range(100)]
        for i, r in enumerate(reqs):
            watcher.add(r)
            if i % 2 == 0:
                r.complete(PutMessageStatus.PUT_OK)  # flushed in time
        statuses = [r.result(WAIT_S) for r in reqs]
        for r in reqs:
            r.complete(PutMessageStatus.PUT_OK)  # a late flush does not change a timed-out request
        assert [r.result(0) for r in reqs] == statuses
        assert statuses == [PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT] * 50
    finally:
        watcher.shutdown()


def test_request_completes_once(commit_log: CommitLog) -> None:
    req = GroupCommitRequest(10, 5000)
    req.complete(PutMessageStatus.PUT_OK)
    req.complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)  # the watcher lost the race: ignored
    assert req.wait() is PutMessageStatus.PUT_OK


def test_request_not_yet_flushed_is_not_completed_early(commit_log: CommitLog) -> None:
    watcher = FlushDiskWatcher()
    watcher.start()
    try:
        req = GroupCommitRequest(10, 60_000)
        watcher.add(req)
        assert not req.done()
        req.complete(PutMessageStatus.PUT_OK)
        assert req.result(WAIT_S) is PutMessageStatus.PUT_OK
    finally:
        watcher.shutdown()


def test_wait_without_watcher_times_out_itself() -> None:
    req = GroupCommitRequest(10, 30)
    assert req.wait() is PutMessageStatus.FLUSH_DISK_TIMEOUT


# ---- FlushRealTimeService ------------------------------------------------------------------------

def test_flush_once_updates_physic_timestamp(commit_log: CommitLog, checkpoint: StoreCheckpoint,
                                             config: MessageStoreConfig) -> None:
    ts = put(commit_log, 2)
    svc = FlushRealTimeService(commit_log, checkpoint, config)
    svc.flush_once(4)  # 400 bytes: fewer than 4 dirty pages, nothing flushed
    assert commit_log.flushed_where == 0 and checkpoint.physic_msg_timestamp == 0
    svc.flush_once(0)
    assert commit_log.flushed_where == 400
    assert checkpoint.physic_msg_timestamp == ts


def test_flush_real_time_service_flushes_everything_on_shutdown(commit_log: CommitLog,
                                                                 checkpoint: StoreCheckpoint,
                                                                 config: MessageStoreConfig) -> None:
    config.flush_interval_commit_log_ms = 10
    svc = FlushRealTimeService(commit_log, checkpoint, config)
    svc.start()
    ts = put(commit_log, 7)  # spans two files
    svc.shutdown()
    assert commit_log.flushed_where == commit_log.get_max_offset() == 1424
    assert checkpoint.physic_msg_timestamp == ts


# ---- FlushConsumeQueueService ------------------------------------------------------------------

def make_cq(tmp_path: Path) -> ConsumeQueue:
    cq = ConsumeQueue("T", 0, tmp_path / "consumequeue", 20 * 1000)
    assert cq.put_message_position_info(0, 200, 0, 0)
    return cq


def test_do_flush_zero_flushes_queues_and_writes_checkpoint(tmp_path: Path, checkpoint: StoreCheckpoint,
                                                            config: MessageStoreConfig) -> None:
    cq = make_cq(tmp_path)
    try:
        svc = FlushConsumeQueueService(lambda: [cq], checkpoint, config)
        svc._last_thorough_ms = int(time.time() * 1000)  # the first, thorough, round has just run
        checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp = 111, 222
        svc.do_flush(1)  # periodic: one dirty unit is below flushConsumeQueueLeastPages (2)
        assert cq.mapped_file_queue.flushed_where == 0
        assert disk_checkpoint(checkpoint.path) == (0, 0, 0)
        svc.do_flush(0)
        assert cq.mapped_file_queue.flushed_where == 20
        assert disk_checkpoint(checkpoint.path) == (111, 222, 0)
    finally:
        cq.shutdown()


def test_do_flush_at_shutdown_flushes_everything(tmp_path: Path, checkpoint: StoreCheckpoint,
                                                 config: MessageStoreConfig) -> None:
    """doFlush(RETRY_TIMES_OVER = 3), called when the service stops, forces flushConsumeQueueLeastPages 0."""
    cq = make_cq(tmp_path)
    try:
        svc = FlushConsumeQueueService(lambda: [cq], checkpoint, config)
        checkpoint.logics_msg_timestamp = 333
        svc.start()
        svc.shutdown()
        assert cq.mapped_file_queue.flushed_where == 20
        assert disk_checkpoint(checkpoint.path)[1] == 333
    finally:
        cq.shutdown()


def test_do_flush_after_thorough_interval_flushes_everything(tmp_path: Path, checkpoint: StoreCheckpoint,
                                                             config: MessageStoreConfig) -> None:
    config.flush_consume_queue_thorough_interval_ms = 0
    cq = make_cq(tmp_path)
    try:
        FlushConsumeQueueService(lambda: [cq], checkpoint, config).do_flush(1)
        assert cq.mapped_file_queue.flushed_where == 20
    finally:
        cq.shutdown()


def test_watcher_fails_a_stuck_batch_then_the_queued_requests_oldest_first() -> None:
    """The group commit hands the watcher the batch it is flushing (add_batch) and lets it read the requests
    still queued: a flush stuck past the deadline fails the batch, then the queue, each in order, and a
    request completed in time keeps its status."""
    queued: list[GroupCommitRequest] = []
    watcher = FlushDiskWatcher(lambda: queued)
    batch = [GroupCommitRequest(100 + i, 1000) for i in range(3)]
    batch[1].complete(PutMessageStatus.PUT_OK)
    watcher.add_batch(batch)
    queued.extend(GroupCommitRequest(200 + i, 1000) for i in range(2))
    t0 = min(r.deadline for r in batch + queued)
    watcher.expire(t0 - 0.5)  # nothing due yet
    assert [r.status for r in batch + queued] == [None, PutMessageStatus.PUT_OK, None, None, None]
    watcher.expire(queued[-1].deadline)
    assert [r.status for r in batch] == [PutMessageStatus.FLUSH_DISK_TIMEOUT, PutMessageStatus.PUT_OK,
                                         PutMessageStatus.FLUSH_DISK_TIMEOUT]
    assert [r.status for r in queued] == [PutMessageStatus.FLUSH_DISK_TIMEOUT] * 2
    late = GroupCommitRequest(300, 60_000)
    queued.append(late)
    watcher.expire(time.monotonic())
    assert late.status is None  # not due: left for the flush
