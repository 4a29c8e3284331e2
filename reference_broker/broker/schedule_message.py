"""ScheduleMessageService: delivers delayed messages from SCHEDULE_TOPIC_XXXX into their real topics
(RocketMQ 4.9.8 store/.../schedule/ScheduleMessageService.java); the pure parts are in delay_level.py.

One timer thread runs a heap of tasks: one per delay level plus the offset persister. A level's task
reads its schedule queue (``level - 1``) from the level's offset, puts every due message into its
real topic and moves the offset past it only once the put has stored it; it then waits
``not_due_retry_ms`` (or less, when the next message is due sooner), ``put_fail_retry_ms`` after a
refused put, ``error_retry_ms`` after an exception (RocketMQ: 100 ms, 100 ms, 10 s). A level that has
caught up, or whose queue does not exist yet, is idle: the store's dispatch listener wakes it when a
message arrives in its queue (RocketMQ polls every 100 ms instead), with a slow re-check as a backstop.

Lifecycle, on a loaded store: ``load()`` (after ``store.load()``), ``start()`` (after
``store.start()``), ``shutdown()`` (before ``store.shutdown()``).

Guarantees (deliberate improvements over RocketMQ, whose issues #3473, #1869, #6881, #7077 show the
failure modes):

- A clean shutdown stops the timer, lets an in-flight delivery finish, then persists the offsets: a
  restart delivers each message exactly once.
- After a crash each message is delivered at least once: offsets are persisted every
  ``persist_interval_ms`` and shortly after each delivering run, and what a restart re-delivers is at
  most what was delivered after the last persisted offset. A persisted offset never passes a
  delivered copy that the commit log has not flushed yet, so a power cut cannot lose a message
  whose schedule copy was on disk (RocketMQ persists regardless, and puts with WAIT = false).
- ``load()`` clamps each saved offset into [min, max] of its queue and persists the correction at
  once; an unusable offsets file fails ``load()`` instead of replaying everything; nothing is
  persisted before a successful ``load()``.
"""

from __future__ import annotations

import collections
import enum
import heapq
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from reference_broker.broker import delay_level as dl
from reference_broker.common import message as mc
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.consume_queue import CQ_STORE_UNIT_SIZE, UNIT
from reference_broker.store.consume_queue_ext import is_ext_addr
from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

PERSIST_TASK: Final = 0  # heap key of the persister; levels are >= 1
BATCH_PERSIST_DELAY_MS: Final = 100  # persist this long after a delivering run (coalesces runs and levels)
BLANK_UNIT_SIZE: Final = 0x7FFFFFFF  # fillPreBlank units (consume_queue.py)
SHUTDOWN_WAIT_S: Final = 30.0
# Not RocketMQ (a thread per level there): one run delivers at most this many messages, so that a
# backlog in one level does not hold up the other levels and the persister on the shared timer thread.
DELIVER_BATCH_MAX: Final = 1000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LevelRun(enum.Enum):
    """How one run of a level's task ended, which says when it runs next."""

    IDLE = enum.auto()  # caught up, or no queue yet: wait for a dispatch wake-up
    NOT_DUE = enum.auto()  # the next message is not due yet
    MORE = enum.auto()  # the end of a consume-queue file, or of a batch: go on at once
    PUT_FAILED = enum.auto()  # the store refused a put: retry the same message
    STOPPED = enum.auto()  # shutdown began
    ERROR = enum.auto()  # an exception: retry later


class ScheduleMessageService:
    def __init__(self, store: MessageStore, store_root: Path | str, *, first_delay_ms: int = 1000,
                 not_due_retry_ms: int = 100, put_fail_retry_ms: int = 100, error_retry_ms: int = 10_000,
                 persist_interval_ms: int = 10_000, idle_recheck_ms: int = 1000) -> None:
        self.store = store
        self.delay_level_table_ms = dl.parse_delay_levels(store.config.message_delay_level)
        if self.delay_level_table_ms != store.delay_table_ms:
            raise ValueError(f"messageDelayLevel: the store uses {store.delay_table_ms}, the schedule service "
                             f"parsed {self.delay_level_table_ms}")
        self.max_delay_level = max(self.delay_level_table_ms)
        self.first_delay_ms = first_delay_ms  # RocketMQ FIRST_DELAY_TIME
        self.not_due_retry_ms = not_due_retry_ms  # DELAY_FOR_A_WHILE
        self.put_fail_retry_ms = put_fail_retry_ms  # DELAY_FOR_A_WHILE
        self.error_retry_ms = error_retry_ms  # DELAY_FOR_A_PERIOD
        self.persist_interval_ms = persist_interval_ms  # flushDelayOffsetInterval
        self.idle_recheck_ms = idle_recheck_ms  # not RocketMQ: backstop for an idle level
        self.offsets = dl.DelayOffsetManager(store_root)
        self.offset_table: dict[int, int] = {}  # level → next consume-queue offset to deliver
        # Per level, (first offset delivered in a run, commit-log end of that run's last copy): the
        # offsets a persist must not pass until the commit log is flushed that far.
        self._unflushed: dict[int, collections.deque[tuple[int, int]]] = {}
        self._written: dict[int, int] | None = None
        self._persist_lock = threading.Lock()  # persist() may be called from any thread
        self.deliver_counts: collections.Counter[dl.DeliverOutcome] = collections.Counter()
        self.timer_runs: collections.Counter[int] = collections.Counter()  # level → runs (diagnostics)
        self._loaded = False
        self._started = False
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._due: dict[int, float] = {}  # task → due time (monotonic s); heap entries not matching are stale
        self._idle: set[int] = set()
        self._running: int | None = None
        self._kicked: set[int] = set()
        self._levels: list[int] = []
        self._thread: threading.Thread | None = None

    # ---- offsets ------------------------------------------------------------------------------------------
    def compute_deliver_timestamp(self, level: int, store_ts: int) -> int:
        return dl.compute_deliver_timestamp(self.delay_level_table_ms, level, store_ts)

    def _queue_bounds(self, level: int) -> tuple[int, int]:
        cq = self.store.find_consume_queue(mc.SCHEDULE_TOPIC, dl.delay_level_to_queue_id(level), create=False)
        if cq is None:
            return 0, 0
        return cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()

    def load(self) -> bool:
        """Read delayOffset.json (``.bak`` fallback), clamp each offset into its queue, persist the
        correction. False when no offsets file is usable: the broker must not start."""
        queues_dir = self.store.config.store_path_consume_queue / mc.SCHEDULE_TOPIC
        on_disk = queues_dir.is_dir() and any(p.name.isdigit() for p in queues_dir.iterdir())
        if on_disk and mc.SCHEDULE_TOPIC not in self.store.consume_queue_table:
            # Correcting against queues that are not loaded would reset every offset to 0 (replay all).
            raise RuntimeError("load the message store before the schedule message service")
        if not self.offsets.load():
            return False
        table = dict(self.offsets.offset_table)
        corrected = False
        for level, offset in sorted(table.items()):
            lo, hi = self._queue_bounds(level)
            fixed = dl.clamp_offset(offset, lo, hi)
            if fixed != offset:
                # correctDelayOffset; persisted below, not left to the next timer (#7077).
                log.error("schedule CQ offset invalid: correct delay offset of level %d from %d to %d "
                          "(queue min %d, max %d)", level, offset, fixed, lo, hi)
                table[level] = fixed
                corrected = True
        self.offset_table = table
        self._unflushed = {}
        self._loaded = True
        self._written = dict(self.offsets.offset_table)
        if corrected:
            try:
                self._write(dict(table))
            except OSError:
                # Not fatal: the correction is deterministic, so a restart before the next persist redoes it.
                log.exception("persist of the corrected delay offsets failed")
        return True

    def _persistable(self) -> dict[int, int]:
        flushed = self.store.commit_log.flushed_where
        table = dict(self.offset_table)
        for level, pending in self._unflushed.items():
            while pending and pending[0][1] <= flushed:
                pending.popleft()
            if pending:
                table[level] = min(table.get(level, 0), pending[0][0])
        return table

    def persist(self) -> None:
        """Write the offsets whose delivered copies the commit log has flushed (if they changed)."""
        if not self._loaded:
            raise RuntimeError("persist before a successful load() would overwrite delayOffset.json (#6881)")
        with self._persist_lock:
            table = self._persistable()
            if table != self._written:
                self._write(table)

    def replace_offsets(self, table: dict[int, int]) -> None:
        """A slave takes its master's delay offsets (SlaveSynchronize.syncDelayOffset writes delayOffset.json);
        held in memory too, so the slave's shutdown persists these, not its stale ones."""
        with self._persist_lock:
            self.offset_table = dict(table)
            self._unflushed = {}
            self._write(dict(table))

    def _write(self, table: dict[int, int]) -> None:
        self.offsets.offset_table = table
        self.offsets.persist()
        self._written = table

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self._loaded:
            raise RuntimeError("start the schedule message service only after a successful load()")
        if self._stopping.is_set():
            raise RuntimeError("a schedule message service that was shut down cannot start again")
        if self._started:
            return
        self._started = True
        existing = {dl.queue_id_to_delay_level(q) for q in self.store.consume_queue_table.get(mc.SCHEDULE_TOPIC, {})}
        extra = sorted(level for level in existing if level not in self.delay_level_table_ms)
        if extra:
            log.warning("schedule queues of levels %s are beyond messageDelayLevel (%d levels): their messages are "
                        "delivered at the times computed when they were stored", extra, self.max_delay_level)
        self._levels = sorted(self.delay_level_table_ms) + extra
        now = time.monotonic()
        with self._cond:
            for level in self._levels:
                self._schedule(level, now + self.first_delay_ms / 1000)
            self._schedule(PERSIST_TASK, now + self.persist_interval_ms / 1000)
        self.store.add_dispatch_hook(self._on_dispatch, during_recovery=False)
        self.store.add_arrival_hook(self._on_queues_grew)
        self._thread = threading.Thread(target=self._timer_loop, name="ScheduleMessageTimerThread", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the timer, wait for an in-flight delivery, then persist every offset.

        The shutdown persist writes the offsets as they are, flushed or not: the store's shutdown,
        which must follow, flushes the delivered copies."""
        if not self._started:
            return
        self._started = False
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        self.store.remove_dispatch_hook(self._on_dispatch)
        t = self._thread
        if t is not None:
            t.join(SHUTDOWN_WAIT_S)
            if t.is_alive():
                log.error("schedule timer still delivering after %.0f s; persisting the offsets anyway",
                          SHUTDOWN_WAIT_S)
        try:
            with self._persist_lock:
                self._unflushed.clear()
                self._write(dict(self.offset_table))
        except OSError:
            log.exception("persist delay offsets at shutdown failed")

    def running_stats(self) -> dict[str, str]:
        """buildRunningStats: ``scheduleMessageOffset_<level>`` → ``"offset,maxOffset"``."""
        table = dict(self.offset_table)  # a C-level copy: the timer thread may be adding a level
        return {f"scheduleMessageOffset_{level}": f"{offset},{self._queue_bounds(level)[1]}"
                for level, offset in sorted(table.items())}

    # ---- timer --------------------------------------------------------------------------------------------
    def _schedule(self, task: int, due: float) -> None:
        """Caller holds ``_cond``."""
        self._due[task] = due
        heapq.heappush(self._heap, (due, task))
        self._cond.notify()

    def _on_dispatch(self, reqs: Sequence[DispatchRequest]) -> None:
        """Dispatch hook (reput thread): wake an idle level when its queue grows."""
        self._on_queues_grew([(req.topic, req.queue_id, 0) for req in reqs if req.topic == mc.SCHEDULE_TOPIC])

    def _on_queues_grew(self, grown: Sequence[tuple[str, int, int]]) -> None:
        """Arrival hook (the dispatch process's link thread), and the dispatch hook's work: wake an idle level
        when its queue grows."""
        for topic, queue_id, _max_offset in grown:
            if topic != mc.SCHEDULE_TOPIC:
                continue
            level = dl.queue_id_to_delay_level(queue_id)
            with self._cond:
                if level == self._running:
                    self._kicked.add(level)
                elif level in self._idle:
                    self._idle.discard(level)
                    self._schedule(level, time.monotonic())

    def _next_task(self) -> int | None:
        with self._cond:
            while not self._stopping.is_set():
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # stale: rescheduled since
                if self._heap and self._heap[0][0] <= now:
                    _, task = heapq.heappop(self._heap)
                    del self._due[task]
                    self._idle.discard(task)
                    self._running = task
                    return task
                self._cond.wait(self._heap[0][0] - now if self._heap else None)
            return None

    def _timer_loop(self) -> None:
        while (task := self._next_task()) is not None:
            if task == PERSIST_TASK:
                try:
                    self.persist()
                except Exception:  # the timer thread's loop: retried next period
                    log.exception("persist delay offsets failed")
                with self._cond:
                    self._running = None
                    self._schedule(PERSIST_TASK, time.monotonic() + self.persist_interval_ms / 1000)
                continue
            self.timer_runs[task] += 1
            wait_ms = 0
            try:
                outcome, wait_ms, delivered = self._run_level(task)
            except Exception:  # the timer thread's loop: the level runs again
                log.exception("ScheduleMessageService, executeOnTimeup exception (level %d)", task)
                outcome, delivered = LevelRun.ERROR, False
            self._after_run(task, outcome, wait_ms, delivered)

    def _after_run(self, level: int, outcome: LevelRun, wait_ms: int, delivered: bool) -> None:
        delays = {LevelRun.MORE: 0, LevelRun.NOT_DUE: wait_ms, LevelRun.PUT_FAILED: self.put_fail_retry_ms,
                  LevelRun.ERROR: self.error_retry_ms, LevelRun.IDLE: self.idle_recheck_ms,
                  LevelRun.STOPPED: 0}
        now = time.monotonic()
        with self._cond:
            self._running = None
            kicked = level in self._kicked
            self._kicked.discard(level)
            if outcome is LevelRun.IDLE and not kicked:
                self._idle.add(level)
            delay_ms = 0 if outcome is LevelRun.IDLE and kicked else delays[outcome]
            self._schedule(level, now + delay_ms / 1000)
            if delivered:
                soon = now + BATCH_PERSIST_DELAY_MS / 1000
                if self._due.get(PERSIST_TASK, soon) > soon:
                    self._schedule(PERSIST_TASK, soon)

    # ---- delivery -----------------------------------------------------------------------------------------
    def _run_level(self, level: int) -> tuple[LevelRun, int, bool]:
        """executeOnTimeup: deliver the due messages of one level from its offset.

        Returns how the run ended, how long to wait when not due, and whether it delivered anything."""
        cq = self.store.find_consume_queue(mc.SCHEDULE_TOPIC, dl.delay_level_to_queue_id(level), create=False)
        if cq is None:
            return LevelRun.IDLE, 0, False
        offset = self.offset_table.get(level, 0)
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        fixed = dl.clamp_offset(offset, lo, hi)
        if fixed != offset:
            log.error("schedule CQ offset invalid: level %d offset %d, queue min %d max %d; continuing at %d",
                      level, offset, lo, hi, fixed)
            offset = self.offset_table[level] = fixed
        if offset >= hi:
            return LevelRun.IDLE, 0, False
        buf = cq.get_index_buffer(offset)
        if buf is None:
            units_per_file = cq.mapped_file_size // CQ_STORE_UNIT_SIZE
            nxt = min(hi, (offset // units_per_file + 1) * units_per_file)
            log.error("schedule CQ of level %d has no file for offset %d (min %d, max %d): skipping to %d",
                      level, offset, lo, hi, nxt)
            self.offset_table[level] = nxt
            return LevelRun.MORE, 0, False
        delay_ms = self.delay_level_table_ms.get(level)
        first_delivered: int | None = None
        last_end = 0
        try:
            data = buf.data
            end_pos = min(buf.size, DELIVER_BATCH_MAX * CQ_STORE_UNIT_SIZE)
            for pos in range(0, end_pos - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
                if self._stopping.is_set():
                    return LevelRun.STOPPED, 0, first_delivered is not None
                cur = offset + pos // CQ_STORE_UNIT_SIZE
                phy, size, tags_code = UNIT.unpack_from(data, pos)
                if size == BLANK_UNIT_SIZE or size <= 0:
                    self.offset_table[level] = cur + 1
                    continue
                now = _now_ms()
                if cq.ext is not None and is_ext_addr(tags_code):
                    # enableConsumeQueueExt: the delivery time is in the ext unit; an unreadable one is due now
                    # (4.9.8 DeliverDelayedMessageTimerTask)
                    ext_unit = cq.get_ext(tags_code)
                    tags_code = ext_unit.tags_code if ext_unit is not None else now
                deliver_ts = dl.correct_deliver_timestamp(now, tags_code, delay_ms)
                if deliver_ts > now:
                    return LevelRun.NOT_DUE, min(deliver_ts - now, self.not_due_retry_ms), first_delivered is not None
                outcome, end = self._deliver(level, phy, size)
                self.deliver_counts[outcome] += 1
                if outcome is dl.DeliverOutcome.PUT_FAILED:
                    return LevelRun.PUT_FAILED, 0, first_delivered is not None
                if outcome is dl.DeliverOutcome.DELIVERED:
                    if first_delivered is None:
                        first_delivered = cur
                    last_end = end
                self.offset_table[level] = cur + 1
        finally:
            buf.release()
            if first_delivered is not None:
                with self._persist_lock:
                    self._unflushed.setdefault(level, collections.deque()).append((first_delivered, last_end))
        return (LevelRun.MORE if self.offset_table.get(level, offset) < cq.get_max_offset_in_queue() else LevelRun.IDLE,
                0, first_delivered is not None)

    def _deliver(self, level: int, phy: int, size: int) -> tuple[dl.DeliverOutcome, int]:
        """Put one due message into its real topic: (outcome, commit-log end of the delivered copy)."""
        msg = self.store.look_message_by_offset(phy, size)
        if msg is None:
            log.error("schedule message of level %d at commit-log offset %d (%d bytes) cannot be read: skipped",
                      level, phy, size)
            return dl.DeliverOutcome.SKIPPED, 0
        try:
            inner = dl.message_timeup(msg)
        except dl.UndeliverableError as e:
            log.error("level %d: %s: skipped", level, e)
            return dl.DeliverOutcome.SKIPPED, 0
        if inner.topic == mc.RMQ_SYS_TRANS_HALF_TOPIC:
            log.error("[BUG] the real topic of a schedule message cannot be %s, discard it: msgId %s, level %d",
                      mc.RMQ_SYS_TRANS_HALF_TOPIC, msg.msg_id, level)
            return dl.DeliverOutcome.DISCARDED, 0
        result = self.store.put_message(inner)
        outcome = dl.classify_put(result.status)
        if outcome is dl.DeliverOutcome.DELIVERED:
            a = result.append
            return outcome, (a.wrote_offset + a.wrote_bytes) if a is not None else 0
        if outcome is dl.DeliverOutcome.SKIPPED:
            log.error("schedule message %s of level %d can never be stored (%s): skipped", msg.msg_id, level,
                      result.status.name)
        else:
            log.warning("ScheduleMessageService put message %s of level %d failed (%s): retry in %d ms", msg.msg_id,
                        level, result.status.name, self.put_fail_retry_ms)
        return outcome, 0

