"""ReputMessageService: one thread dispatches commit-log records, in log order, to the dispatchers.

docs/claims.md `dispatch-async`: once a record is in the commit log the put returns; a single separate thread builds
the consume queues and the index from the log (ReputMessageService, 4.9.8). It reads the log itself
(not an in-memory hand-off), so the same path serves recovery and, later, a slave's replicated bytes.
The put path is slowed when this thread falls too far behind (docs/claims.md `dispatch-throttle`; see MessageStore).

When it finds nothing new it waits (``idle_wait_s``): 1 ms while anything waits for dispatch (``waiters``: a held
pull), ``idle_interval_s`` otherwise (``dispatchIdleIntervalMillis``, 10 ms by default). A reader that must see a
record now calls ``nudge()``, which ends the wait at once. Deliberate difference: 4.9.8's ReputMessageService.run
sleeps 1 ms whenever it found nothing; woken that often under single sends it dispatched ~14 records a wake, each
wake taking the interpreter lock from the busy event loop (docs/dispatch.md, "Waking less often").
``dispatchIdleIntervalMillis=1`` is exactly 4.9.8's cadence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

DISPATCH_RUN_RECORDS = 4096  # records parsed and dispatched together (bounds memory per run)
STUCK_RETRIES = 100  # ~1 s of 10 ms retries at one offset before it is skipped (see _skip_stuck)
BUSY_IDLE_S = 0.001  # ReputMessageService.run (4.9.8): Thread.sleep(1) when nothing was dispatched
CATCH_UP_POLL_S = 0.0002  # wait_caught_up's poll: a nudged run of 10 ms of single sends takes well under 1 ms


def _incomplete(data: memoryview, pos: int, size: int, file_pos: int, file_size: int) -> bool:
    """The bytes at ``pos`` are the start of a record whose rest has not been appended yet: its TOTALSIZE (or the
    TOTALSIZE field itself) reaches past what is written, yet fits in the file."""
    avail = size - pos
    need = int.from_bytes(data[pos:pos + 4], "big", signed=True) if avail >= 4 else 4
    return avail < need and file_pos + pos + need <= file_size


class _Data(Protocol):
    @property
    def data(self) -> memoryview: ...

    @property
    def start_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    def release(self) -> None: ...


class DispatchSource(Protocol):
    """What dispatch reads: the store's CommitLog, or the dispatch process's CommitLogFollower."""

    @property
    def file_size(self) -> int: ...

    def get_min_offset(self) -> int: ...

    def get_max_offset(self) -> int: ...

    def get_data(self, offset: int) -> _Data | None: ...

    def roll_next_file(self, offset: int) -> int: ...


class ReputMessageService(ServiceThread):
    """``dispatch`` takes a run of records in log order: the store's CommitLogDispatcher, which also runs
    the dispatch hooks (the long-polling service's messageArrivingListener among them)."""

    def __init__(self, commit_log: DispatchSource, dispatch: Callable[[list[DispatchRequest]], None],
                 delay_table_ms: dict[int, int]) -> None:
        super().__init__("ReputMessageService")
        self.commit_log = commit_log
        self.dispatch = dispatch
        self.delay_table_ms = delay_table_ms
        self.reput_from_offset = 0
        self.dispatched_count = 0
        self.stuck_skips = 0
        # The wait when nothing is new: BUSY_IDLE_S while a waiter says yes, else idle_interval_s (the store sets
        # it from dispatchIdleIntervalMillis; a slave sets both to its own cadence). 4.9.8 always waits 1 ms.
        self.busy_idle_s = BUSY_IDLE_S
        self.idle_interval_s = BUSY_IDLE_S
        # Predicates "something waits for dispatch now" (the long-polling service: a pull is held); read once
        # per idle wait on this thread, so each must be cheap and safe to call from it. A long wait chosen before
        # a waiter turned true runs on: whatever turns one true nudges (PullRequestHoldService.on_first_held).
        self.waiters: list[Callable[[], bool]] = []
        self.dispatch_runs = 0  # do_reput calls that dispatched something: records per run = dispatched_count / this
        # On a slave the log grows by replicated chunks that may end inside a record: a record that is not all
        # there yet is waited for, not skipped (4.9.8's reput stops without moving on when brokerId != 0).
        self.wait_for_whole_records = False
        # How far dispatch may read: the written position (4.9.8), or the flushed one (dispatchFlushedOnly).
        # Either is a record boundary: the writer publishes its position after a whole record, and a flush
        # takes the position it found.
        self.upper: Callable[[], int] = commit_log.get_max_offset

    def nudge(self) -> None:
        """Dispatch now: end the idle wait (a reader found nothing where undispatched records may be). A nudge
        while a run is in progress is kept, so the next wait returns at once (ServiceThread.wakeup)."""
        self.wakeup()

    def nudge_if_behind(self) -> None:
        """``nudge`` only when there is something to dispatch (a cheap test first: readers call it often)."""
        if self.reput_from_offset < self.upper():
            self.wakeup()

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Nudge and wait until what is written now is dispatched; False at the timeout, once stopping, or when
        the thread does not run (harness/no_dispatch_broker.py never starts it)."""
        target = self.upper()
        deadline = time.monotonic() + timeout_s
        t = self._thread
        while self.reput_from_offset < target:
            if self.is_stopped or t is None or not t.is_alive() or time.monotonic() >= deadline:
                return False
            self.wakeup()
            time.sleep(CATCH_UP_POLL_S)
        return True

    def idle_wait_s(self) -> float:
        """How long to wait for a nudge when nothing was dispatched: short while anything waits for dispatch."""
        for waiting in self.waiters:
            if waiting():
                return self.busy_idle_s
        return self.idle_interval_s

    def behind(self) -> int:
        return max(0, self.upper() - self.reput_from_offset)

    def is_commit_log_available(self) -> bool:
        return self.reput_from_offset < self.upper()

    def do_reput(self) -> bool:
        """Dispatch what is available now; True if anything was dispatched.

        Records are parsed and dispatched a run at a time (``scan_records`` then the batch dispatcher):
        the per-record work left in Python is the parse, and the consume-queue units and index entries
        of a run are written together. The order of records, and so of every queue, is the log's.
        """
        cl = self.commit_log
        progressed = False
        if self.reput_from_offset < cl.get_min_offset():
            log.warning("reput offset %d is below the commit log's min offset %d: correcting",
                        self.reput_from_offset, cl.get_min_offset())
            self.reput_from_offset = cl.get_min_offset()
        scan = rec.scan_records
        waiting = False
        high = self.upper()
        while not waiting and not self.is_stopped and self.reput_from_offset < high:
            res = cl.get_data(self.reput_from_offset)
            if res is None:
                break
            try:
                data = res.data
                base = res.start_offset
                size = min(res.size, high - base)
                pos = 0
                dispatch = self.dispatch
                delay = self.delay_table_ms
                while pos < size and not self.is_stopped:
                    reqs, pos, end = scan(data, pos, size, False, delay, DISPATCH_RUN_RECORDS)
                    if reqs:
                        dispatch(reqs)
                        self.dispatched_count += len(reqs)
                        self.reput_from_offset = base + pos
                    if end is rec.ScanEnd.LIMIT:
                        continue
                    if end is rec.ScanEnd.BAD and (self.wait_for_whole_records or size < res.size) and _incomplete(
                            data, pos, size, base % cl.file_size, cl.file_size):
                        waiting = True
                        break
                    if end is rec.ScanEnd.BAD:
                        # The writer publishes its position only after the whole record is written,
                        # so a record that does not parse here is damage, not a race.
                        log.error("reput: bad record at %d; skipping to the next file", base + pos)
                    self.reput_from_offset = cl.roll_next_file(base + pos)  # blank: roll to the next file
                    break
                progressed = True
            finally:
                res.release()
        if progressed:
            self.dispatch_runs += 1
        return progressed

    def run(self) -> None:
        failed_at, failures = -1, 0
        while not self.is_stopped:
            try:
                if not self.do_reput():
                    # Deliberate difference: 4.9.8 sleeps 1 ms here whatever waits; see the module's docstring.
                    self.wait_for_running(self.idle_wait_s())
                failures = 0
            except Exception:  # boundary: the dispatch thread must outlive any one failure
                log.exception("reput failed at commit-log offset %d", self.reput_from_offset)
                failures = failures + 1 if failed_at == self.reput_from_offset else 1
                failed_at = self.reput_from_offset
                if failures >= STUCK_RETRIES:
                    self._skip_stuck()
                    failures = 0
                time.sleep(0.01)

    def _skip_stuck(self) -> None:
        """Leave an offset that failed STUCK_RETRIES times in a row for the next file, so that dispatch of
        every later record goes on. 4.9.8 retries forever; the dispatchers themselves already skip what they
        cannot take (CommitLogDispatcher in dispatcher.py), so this is the last line against a bug in the reading."""
        at = self.reput_from_offset
        self.reput_from_offset = self.commit_log.roll_next_file(at)
        self.stuck_skips += 1
        log.error("reput: offset %d failed %d times in a row; skipped %d bytes to the next file",
                  at, STUCK_RETRIES, self.reput_from_offset - at)

    def shutdown(self, wait_caught_up_s: float = 5.0) -> None:
        """Let dispatch catch up (up to ``wait_caught_up_s``), then stop (ReputMessageService.shutdown)."""
        deadline = time.monotonic() + wait_caught_up_s
        t = self._thread
        while self.is_commit_log_available() and time.monotonic() < deadline and t is not None and t.is_alive():
            self.nudge()  # the put path is closed: nothing else will end a long idle wait early
            time.sleep(0.001)
        if self.is_commit_log_available():
            log.warning("shutdown with dispatch behind by %d bytes", self.behind())
        super().shutdown(10)
