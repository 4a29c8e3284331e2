"""Flush services: async real-time flush, synchronous group commit, consume-queue flush.

RocketMQ 4.9.8 (CommitLog.FlushRealTimeService, GroupCommitService, FlushDiskWatcher;
DefaultMessageStore.FlushConsumeQueueService):

- FlushRealTimeService (ASYNC_FLUSH): every 500 ms flush when at least 4 pages are dirty, and
  everything every 10 s; on shutdown retry a full flush up to 10 times.
- GroupCommitService (SYNC_FLUSH): puts that wait hand a request with their end offset to one
  thread, which flushes once for everything queued and completes each request: PUT_OK, or
  FLUSH_DISK_TIMEOUT once syncFlushTimeout (5 s) has passed (FlushDiskWatcher) — the message is
  stored either way.
- FlushConsumeQueueService: every 1 s flush consume queues with at least 2 dirty pages, and all of
  them every 60 s, then write the checkpoint.
- CommitRealTimeService (transientStorePoolEnable, ASYNC_FLUSH masters only): every 200 ms, or once 4
  pages are pending after a put woke it, write the staged records into the commit-log file, then wake
  the flusher. Until then the records live only in process memory: a kill -9 loses them.

Every service runs on its own thread; fdatasync releases the GIL, so the writer never waits for one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import ClassVar

from reference_broker.store.checkpoint import IndexSafePoint, StoreCheckpoint
from reference_broker.store.commit_log import CommitLog
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.service_thread import ServiceThread
from reference_broker.store.status import PutMessageStatus

log = logging.getLogger(__name__)


class FlushRealTimeService(ServiceThread):
    def __init__(self, commit_log: CommitLog, checkpoint: StoreCheckpoint, config: MessageStoreConfig) -> None:
        super().__init__("FlushRealTimeService")
        self.commit_log = commit_log
        self.checkpoint = checkpoint
        self.config = config
        self._last_thorough_ms = 0

    def flush_once(self, least_pages: int) -> None:
        mfq = self.commit_log.mapped_file_queue
        mfq.flush(least_pages)
        if mfq.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = mfq.store_timestamp
        self.checkpoint.note_physic_offset(mfq.flushed_where)

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped:
            interval = cfg.flush_interval_commit_log_ms / 1000
            if cfg.flush_commit_log_timed:
                self.sleep(interval)
            else:
                self.wait_for_running(interval)
            least = cfg.flush_commit_log_least_pages
            now = int(time.time() * 1000)
            if now >= self._last_thorough_ms + cfg.flush_commit_log_thorough_interval_ms:
                self._last_thorough_ms = now
                least = 0
            try:
                self.flush_once(least)
                # flush(0) of a just-filled file leaves the next file's data: loop until caught up.
                while least == 0 and self.commit_log.mapped_file_queue.how_much_fall_behind() > 0:
                    if self.commit_log.mapped_file_queue.flush(0):
                        break
            except OSError:
                log.exception("commit log flush failed")
        for _ in range(10):  # normal shutdown: make sure everything is on disk
            if self.commit_log.mapped_file_queue.flush(0):
                break
        self.flush_once(0)


class CommitRealTimeService(ServiceThread):
    """CommitLog.CommitRealTimeService (transient store pool): write staged records into the file every
    200 ms, or as soon as 4 pages are pending once woken by a put; wake the flush service after a commit."""

    def __init__(self, commit_log: CommitLog, config: MessageStoreConfig, flush: ServiceThread) -> None:
        super().__init__("CommitRealTimeService")
        self.commit_log = commit_log
        self.config = config
        self.flush = flush
        self._last_commit_ms = 0

    def run(self) -> None:
        cfg = self.config
        mfq = self.commit_log.mapped_file_queue
        while not self.is_stopped:
            least = cfg.commit_commit_log_least_pages
            now = int(time.time() * 1000)
            if now >= self._last_commit_ms + cfg.commit_commit_log_thorough_interval_ms:
                self._last_commit_ms = now
                least = 0
            try:
                if not mfq.commit(least):
                    self._last_commit_ms = int(time.time() * 1000)
                    self.flush.wakeup()
            except OSError:
                log.exception("commit log commit failed")
            self.wait_for_running(cfg.commit_interval_commit_log_ms / 1000)
        for _ in range(10):  # normal shutdown: commit everything staged
            if mfq.commit(0):
                break


class GroupCommitRequest:
    """A put waiting for its bytes to be flushed (GroupCommitRequest); completes exactly once.

    Lighter than a concurrent.futures.Future (which cost a third of a SYNC_FLUSH put): a status, an
    optional callback run by whoever completes it, and an Event created only for blocking waiters.
    """

    __slots__ = ("_callbacks", "_event", "deadline", "next_offset", "status")
    # What a request that passed its deadline completes with; replication's requests (store/ha/replica.py) are
    # the same kind of request with FLUSH_SLAVE_TIMEOUT (GroupCommitRequest serves both in 4.9.8).
    timeout_status: ClassVar[PutMessageStatus] = PutMessageStatus.FLUSH_DISK_TIMEOUT

    def __init__(self, next_offset: int, timeout_ms: int,
                 callback: Callable[[PutMessageStatus], None] | None = None) -> None:
        self.next_offset = next_offset
        self.deadline = time.monotonic() + timeout_ms / 1000
        self.status: PutMessageStatus | None = None
        self._callbacks: list[Callable[[PutMessageStatus], None]] | None = [callback] if callback else None
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self.status is not None

    def complete(self, status: PutMessageStatus) -> None:
        with _REQ_LOCK:
            if self.status is not None:
                return  # the watcher timed it out first, or the reverse
            self.status = status
        self._notify(status)

    def _notify(self, status: PutMessageStatus) -> None:
        """Wake the waiter and run the callbacks, once ``status`` is set (under _REQ_LOCK, after which no
        callback is added here: ``add_done_callback`` then calls it at once)."""
        if self._event is not None:
            self._event.set()
        # Dropped as they run: a callback usually holds the put that holds this request (_OneWaiter), and a
        # list kept here would make every completed SYNC_FLUSH put a reference cycle, left to the cyclic
        # garbage collector (12 % of the event loop's CPU under SYNC_FLUSH sends before this: BENCHMARKS.md).
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for cb in callbacks:
                try:
                    cb(status)
                except Exception:
                    log.exception("group commit callback failed")

    def add_done_callback(self, cb: Callable[[PutMessageStatus], None]) -> None:
        with _REQ_LOCK:
            status = self.status
            if status is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(cb)
                return
        cb(status)

    def result(self, timeout_s: float | None = None) -> PutMessageStatus:
        """Block until completed; TimeoutError after ``timeout_s``."""
        with _REQ_LOCK:
            status = self.status
            if status is None:
                if self._event is None:
                    self._event = threading.Event()
                event = self._event
        if status is not None:
            return status
        if not event.wait(timeout_s):
            raise TimeoutError
        assert self.status is not None
        return self.status

    def wait(self) -> PutMessageStatus:
        """Block until flushed or the deadline passed (then ``timeout_status``: the message is stored)."""
        try:
            return self.result(max(0.0, self.deadline - time.monotonic()) + 0.05)
        except TimeoutError:
            self.complete(self.timeout_status)
            return self.result()


_REQ_LOCK = threading.Lock()


def complete_all(requests: list[GroupCommitRequest], flushed: int) -> None:
    """Complete a group commit's requests: PUT_OK up to ``flushed``, FLUSH_DISK_TIMEOUT past it. One lock for
    the whole batch (``complete`` takes it per request), then the callbacks — each put's answer, handed to
    the event loop in one wake-up per batch (broker/loop_handoff.py)."""
    ok, late = PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT
    todo: list[tuple[GroupCommitRequest, PutMessageStatus]] = []
    with _REQ_LOCK:
        for r in requests:
            if r.status is None:  # else the watcher timed it out first
                r.status = status = ok if flushed >= r.next_offset else late
                todo.append((r, status))
    for r, status in todo:
        r._notify(status)


class GroupCommitService(ServiceThread):
    def __init__(self, commit_log: CommitLog, checkpoint: StoreCheckpoint) -> None:
        super().__init__("GroupCommitService")
        self.commit_log = commit_log
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        self._requests_write: list[GroupCommitRequest] = []
        # The watcher reads the requests still queued here itself: no hand-over per request.
        self.watcher = FlushDiskWatcher(lambda: self._requests_write)

    def put_request(self, req: GroupCommitRequest) -> None:
        if self.is_stopped:  # after the final drain: flush for this request here, never leave it hanging
            self._do_commit([req])
            return
        with self._lock:
            self._requests_write.append(req)
        self.wakeup()

    def _do_commit(self, requests: list[GroupCommitRequest]) -> None:
        mfq = self.commit_log.mapped_file_queue
        if requests:
            target = max(r.next_offset for r in requests)
            # One flush covers one file, and a request may span a file boundary. GroupCommitService.doCommit
            # tries twice per request; here one pass serves them all, so the budget grows with the batch:
            # concurrent puts in small files can leave the batch's end several files past the flushed end.
            for _ in range(max(3, 2 * len(requests))):
                if mfq.flushed_where >= target:
                    break
                mfq.flush(0)
            complete_all(requests, mfq.flushed_where)
        else:
            mfq.flush(0)  # puts that do not wait still wake the service
        if mfq.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = mfq.store_timestamp
        self.checkpoint.note_physic_offset(mfq.flushed_where)

    def run(self) -> None:
        self.watcher.start()
        while not self.is_stopped:
            self.wait_for_running(0.010)
            with self._lock:
                reqs, self._requests_write = self._requests_write, []
            self.watcher.add_batch(reqs)  # being flushed: the watcher fails them at their deadline if stuck
            try:
                self._do_commit(reqs)
            except OSError:
                log.exception("group commit flush failed")
                for r in reqs:
                    r.complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        time.sleep(0.01)
        with self._lock:
            reqs, self._requests_write = self._requests_write, []
        self._do_commit(reqs)
        self.watcher.shutdown()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        super().shutdown(timeout_s)
        self.watcher.shutdown()


class FlushDiskWatcher(ServiceThread):
    """Fails flush requests at their deadline even when the flush thread is stuck in the kernel.

    RocketMQ 4.9.8's FlushDiskWatcher takes each request (``add``, from putRequest) and polls the oldest every
    1 ms until it is done or due. Deliberate difference: the group commit hands its requests over a batch at a
    time (``add_batch``, the list it swapped out to flush), and the watcher reads the requests still queued
    for the next flush from the service itself (``queued``), so a put costs the watcher nothing of its own.
    Every 10 ms the watcher fails what is due, oldest first: the requests of one list share the same timeout
    and were queued in order, so the scan stops at the first one neither done nor due.
    """

    def __init__(self, queued: Callable[[], list[GroupCommitRequest]] | None = None) -> None:
        super().__init__("FlushDiskWatcher")
        self._pending: collections.deque[list[GroupCommitRequest]] = collections.deque()
        self._queued = queued

    def add(self, req: GroupCommitRequest) -> None:
        self._pending.append([req])

    def add_batch(self, reqs: list[GroupCommitRequest]) -> None:
        if reqs:
            self._pending.append(reqs)

    def expire(self, now: float) -> None:
        """Fail every request due at ``now``, oldest first; forget the lists whose requests all completed."""
        pending = self._pending
        while pending:
            if not _expire(pending[0], now):
                return  # the oldest list still waits, and everything after it is younger
            pending.popleft()
        if self._queued is not None:
            _expire(self._queued(), now)

    def run(self) -> None:
        while not self.is_stopped:
            self.expire(time.monotonic())
            self.sleep(0.01)


def _expire(reqs: list[GroupCommitRequest], now: float) -> bool:
    """Fail the due requests of ``reqs`` in order; False at the first one neither done nor due."""
    for r in reqs:
        if r.status is None:
            if r.deadline > now:
                return False
            r.complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)
    return True


class FlushConsumeQueueService(ServiceThread):
    def __init__(self, queues: Callable[[], Iterable[ConsumeQueue]], checkpoint: StoreCheckpoint,
                 config: MessageStoreConfig, dispatched_offset: Callable[[], int] | None = None,
                 index_safe_point: Callable[[int], IndexSafePoint] | None = None) -> None:
        super().__init__("FlushConsumeQueueService")
        self.queues = queues
        self.checkpoint = checkpoint
        self.config = config
        self.dispatched_offset = dispatched_offset  # the reput position: units below it are written
        # IndexService.take_safe_point: forces the index with the queues (index_recovery.py explains why).
        self.index_safe_point = index_safe_point
        self._last_thorough_ms = 0  # lastFlushTimestamp starts at 0: the first round is thorough

    def do_flush(self, retry_times: int) -> None:
        cfg = self.config
        least = cfg.flush_consume_queue_least_pages
        if retry_times in (0, 3):  # 3 = RETRY_TIMES_OVER, the shutdown call in run(): flush everything
            least = 0
        now = int(time.time() * 1000)
        if now >= self._last_thorough_ms + cfg.flush_consume_queue_thorough_interval_ms:
            self._last_thorough_ms = now
            least = 0
        logics_ts = self.checkpoint.dispatched_logics_timestamp
        logics_offset = self.dispatched_offset() if self.dispatched_offset is not None else 0
        for cq in list(self.queues()):
            tries = retry_times or 1
            if least == 0:
                # The checkpoint written below promises every unit up to logics_ts is on disk, and a
                # flush covers one file: flush until the queue is clean. (RocketMQ tries once, so a
                # queue more than a file behind is over-promised and, after a power loss, abnormal
                # recovery starts past units that never reached the disk.)
                tries = max(tries, len(cq.mapped_file_queue.mapped_files) + 1)
            for _ in range(tries):
                try:
                    if cq.flush(least):
                        break
                except OSError:
                    log.exception("consume queue flush failed: %s-%d", cq.topic, cq.queue_id)
                    break
        if least == 0:
            if logics_ts > 0:
                self.checkpoint.logics_msg_timestamp = logics_ts
            if logics_offset > 0:
                self.checkpoint.note_logics_offset(logics_offset)
                if self.index_safe_point is not None:
                    try:
                        self.checkpoint.note_index_safe_point(self.index_safe_point(logics_offset))
                    except (OSError, ValueError):
                        # The old safe point stays: recovery replays from it (min with the other offsets).
                        log.exception("index flush failed: the index safe point stays where it was")
            self.checkpoint.flush()

    def run(self) -> None:
        while not self.is_stopped:
            self.sleep(self.config.flush_interval_consume_queue_ms / 1000)
            try:
                self.do_flush(1)
            except Exception:
                log.exception("consume queue flush failed")
        self.do_flush(3)
