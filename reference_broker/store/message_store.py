"""MessageStore: the facade over commit log, consume queues, index, flush, dispatch and cleaning.

Lifecycle (DefaultMessageStore, 4.9.8): ``load()`` maps the files and recovers — normally when the
last exit removed ``abort``, abnormally (re-dispatch from the checkpoint) when it did not — then
``start()`` lets dispatch catch up, starts the services and creates ``abort``; ``shutdown()``
flushes everything and removes ``abort`` only when the store is writeable and dispatch has caught up.

The facade composes the parts: ``put``/``put_batch`` append and return a PendingPut that completes when the
durability conditions in ``durability`` hold (durability.py); ``dispatcher`` builds consume queues and index
from what the ReputMessageService reads and runs the dispatch hooks (dispatcher.py); ``reads`` serves every
lookup (message_store_reads.py), its methods delegated here.

Deliberate difference: the ``lock`` file is taken in ``load()`` rather than ``start()``, so a second
store can never recover (and truncate) files that a running store is writing.
"""

from __future__ import annotations

import fcntl
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common import start_phases as phases
from reference_broker.common.quarantine_names import totals
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.clean import (
    CleanCommitLogService,
    CleanConsumeQueueService,
    RunningFlags,
    disk_partition_space_used_percent,
)
from reference_broker.store.commit_log import PROP_CRC_SINCE_FILE, CommitLog, EncodedBatch, MessageExtBatch
from reference_broker.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.consume_queue_table import create_consume_queue, iter_queues, load_consume_queues
from reference_broker.store.dispatch_link import ArrivalHook, DispatchLink
from reference_broker.store.dispatcher import CommitLogDispatcher, DispatchHook
from reference_broker.store.durability import DurabilityCondition, FlushCondition, PendingPut, submit_all
from reference_broker.store.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
)
from reference_broker.store.ha.replica import ReplicaState, ReplicationCondition
from reference_broker.store.index_service import IndexService
from reference_broker.store.message_store_reads import ExtFilter, RecordFilter, StoreReader, TagsFilter
from reference_broker.store.quarantine import list_quarantine
from reference_broker.store.reput import ReputMessageService
from reference_broker.store.service_thread import PeriodicTask
from reference_broker.store.status import AT_QUEUE_END, GetMessageResult, PutMessageResult, PutMessageStatus
from reference_broker.store.warm import WarmAheadService

log = logging.getLogger(__name__)

# A slave's dispatch looks for new records every 10 ms when it found none, where a master's (and 4.9.8's
# ReputMessageService) looks every 1 ms. Deliberate: under SYNC_MASTER the slave receives a small frame per
# few sends, and dispatching each as it lands cost the slave 3x the CPU per message of dispatching them a
# batch at a time (BENCHMARKS.md, Replication), on cores it shares with the master. Nothing waits on a slave's
# dispatch but its own readers, which are at most these 10 ms later.
SLAVE_REPUT_IDLE_SLEEP_S = float(os.environ.get("RMQ_LAB_SLAVE_REPUT_IDLE_S", "0.01"))


# How long a pull that is not held, a lookup by key or of a queue's offsets waits for dispatch to reach what was
# written when it came (wait_dispatched), and only when that is at most READ_WAIT_MAX_BEHIND_BYTES away: it runs on
# the event loop. 10 ms of single sends is ~200 KB, dispatched in well under the wait. Behind more (dispatch is the
# bound: a backlog), the read answers at once, as 4.9.8's would.
READ_DISPATCH_WAIT_S = 0.02
READ_WAIT_MAX_BEHIND_BYTES = 1 << 20


SERVICE_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: "
    "the broker's disk is full [{disk}], messages are put to the slave, message store has been shut down, etc."
)


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit: each mapped file keeps one descriptor (inside
    its mmap), and RocketMQ's deployment scripts likewise raise nofile for 10,000+ queues."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            log.warning("could not raise the open-files limit from %d to %d", soft, hard)
    return int(soft)


class StoreLockedError(RuntimeError):
    """Another store holds the lock file of this directory."""


class HAComponent(Protocol):
    """The replication threads a layer up (reference_broker/ha: the master's HAService, the slave's HAClient),
    started once dispatch caught up and stopped first at shutdown, as DefaultMessageStore starts its HAService."""

    def start(self) -> None: ...

    def shutdown(self) -> None: ...


class MessageStore:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        root = config.store_path_root_dir
        root.mkdir(parents=True, exist_ok=True)
        self.abort_file = root / "abort"
        self.lock_path = root / "lock"
        self.start_phases = phases.StartPhases()
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        self.commit_log = CommitLog(config, self.checkpoint)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self._cq_lock = threading.Lock()
        self.index_service = IndexService(config.store_path_index, config.max_hash_slot_num, config.max_index_num,
                                          self.checkpoint, message_index_safe=config.message_index_safe,
                                          safe_point_recovery=config.recover_from_checkpoint_offset)
        self.running_flags = RunningFlags()
        self.delay_table_ms = config.delay_level_table_ms()
        self.dispatcher = CommitLogDispatcher(config, self.consume_queue_table, self.find_consume_queue,
                                              self.index_service, self.checkpoint, self.running_flags)
        self.dispatcher.read_record = self.commit_log.read_bytes
        refused = config.separate_dispatch_refusal()
        if refused is not None:
            raise ValueError(f"dispatchInSeparateProcess cannot be used with {refused[0]}: {refused[1]}")
        self._arrival_hooks: tuple[ArrivalHook, ...] = ()
        # dispatchInSeparateProcess: the link stands where the reput thread stands (dispatch_link.py)
        self.link = DispatchLink(config, self.commit_log.get_max_offset, self.checkpoint, self.running_flags,
                                 self.find_consume_queue, self.index_service.shutdown, self._queues_grew) \
            if config.dispatch_in_separate_process else None
        self.reput: ReputMessageService | DispatchLink = self.link or ReputMessageService(
            self.commit_log, self.dispatcher.dispatch, self.delay_table_ms)
        self.reads = StoreReader(config, self.commit_log, self.find_consume_queue, self.link or self.index_service,
                                 self.running_flags, lambda: self._shutdown)
        self.flush_service: FlushRealTimeService | GroupCommitService
        self._is_slave = config.broker_role is BrokerRole.SLAVE
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.flush_service = GroupCommitService(self.commit_log, self.checkpoint)
        else:
            self.flush_service = FlushRealTimeService(self.commit_log, self.checkpoint, config)
        # The transient store pool's commit thread (ASYNC_FLUSH masters only, as in RocketMQ).
        self.commit_service = CommitRealTimeService(self.commit_log, config, self.flush_service) \
            if config.is_transient_store_pool_enable() else None
        self.commit_log.mapped_file_queue.staging = config.is_transient_store_pool_enable()
        self.warm_service = WarmAheadService(self.commit_log.mapped_file_queue, config.commit_log_warm_ahead_bytes) \
            if config.commit_log_warm_ahead_bytes > 0 else None
        self.flush_cq_service = FlushConsumeQueueService(self.iter_consume_queues, self.checkpoint, config,
                                                         lambda: self.reput.reput_from_offset,
                                                         self.index_service.take_safe_point
                                                         if config.message_index_enable else None)
        self.clean_commit_log = CleanCommitLogService(config, self.commit_log, self.running_flags)
        self.clean_consume_queue = CleanConsumeQueueService(self.commit_log, self.iter_consume_queues,
                                                            self.index_service.delete_expired_file)
        # What a put waits for before it answers, in order (CommitLog.asyncPutMessage: the flush, then the
        # slave's acknowledgement): see durability.py.
        self.durability: list[DurabilityCondition] = [
            FlushCondition(config, self.flush_service, self.commit_service)]
        # A master keeps the slaves' acknowledgements; under SYNC_MASTER a put that waits also waits for one.
        self.replica = None if self._is_slave else ReplicaState(config)
        if self.replica is not None and config.broker_role is BrokerRole.SYNC_MASTER:
            self.durability.append(ReplicationCondition(config, self.replica))
        self.ha: HAComponent | None = None
        # A slave's log can end inside a record the master has not sent whole yet: dispatch waits for the rest.
        self.reput.wait_for_whole_records = self._is_slave
        if config.dispatch_flushed_only and not self._is_slave:  # a slave dispatches what its master sent
            mfq = self.commit_log.mapped_file_queue
            self.reput.upper = lambda: mfq.flushed_where
        if self._is_slave:  # a slave keeps its own cadence, held pulls or not (a nudge still dispatches at once)
            self.reput.busy_idle_s = self.reput.idle_interval_s = SLAVE_REPUT_IDLE_SLEEP_S
        else:
            self.reput.idle_interval_s = max(1, config.dispatch_idle_interval_ms) / 1000
        self.last_exit_ok = True
        self.shutdown_normally: bool | None = None
        self._lock_fd: int | None = None
        self._started = False
        self._shutdown = False
        self._put_count = 0
        self._scheduled: list[PeriodicTask] = []
        # Not RocketMQ keys: how often the disk is checked and when cleaning first runs (60 s in RocketMQ).
        self.disk_check_interval_s = 1.0
        self.clean_initial_delay_s = 60.0

    # ---- lock, load, recover ------------------------------------------------------------------
    def _acquire_lock(self) -> None:
        if self._lock_fd is not None:
            return
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(
                f"Lock failed, MQ already started: {self.lock_path} is held by another store "
                "(a second broker on the same storePathRootDir?)") from None
        self._lock_fd = fd

    def load(self) -> bool:
        """Map files and recover (DefaultMessageStore.load). Raises StoreLockedError if locked."""
        self._acquire_lock()
        raise_open_files_limit()
        self.last_exit_ok = not self.abort_file.exists()
        log.info("last shutdown %s", "normally" if self.last_exit_ok else "abnormally")
        ph = self.start_phases
        with ph.phase(phases.LOAD_COMMIT_LOG):
            ok = self.commit_log.load()
        if ok:
            with ph.phase(phases.LOAD_CONSUME_QUEUES):
                ok = self._load_consume_queues()
        if not ok:
            return False
        if self.config.message_index_enable:
            with ph.phase(phases.LOAD_INDEX):
                self.index_service.load(self.last_exit_ok)
        self.recover(self.last_exit_ok)
        return True

    def _load_consume_queues(self) -> bool:
        return load_consume_queues(self.config, self.consume_queue_table)

    def recover(self, last_exit_ok: bool) -> None:
        ph = self.start_phases
        with ph.phase(phases.RECOVER_CONSUME_QUEUES):
            max_phy_of_cq = self._recover_consume_queues()
        if last_exit_ok:
            with ph.phase(phases.RECOVER_COMMIT_LOG):
                self.commit_log.recover_normally(max_phy_of_cq, self._truncate_logics)
        else:
            with ph.phase(phases.RECOVER_COMMIT_LOG):
                end = self.commit_log.recover_abnormally(max_phy_of_cq, self.dispatcher.dispatch_recovered,
                                                         self._truncate_logics)
            # Entries of records the log lost go; then a fresh safe point, so that a second crash before
            # the next flush round does not cut back to a header the truncation made stale. (Otherwise
            # the old safe point stays true: the index was only appended to since.)
            with ph.phase(phases.TRUNCATE_INDEX):
                if (self.config.message_index_enable and self.index_service.safe_point_recovery
                        and self.index_service.truncate_from(end)):
                    self.checkpoint.note_index_safe_point(self.index_service.take_safe_point(end))
                    self.checkpoint.flush()
        with ph.phase(phases.RECOVER_TOPIC_QUEUE_TABLE):
            self._recover_topic_queue_table()

    def _recover_consume_queues(self) -> int:
        max_phy = -1
        for cq in self.iter_consume_queues():
            cq.recover()
            max_phy = max(max_phy, cq.max_physic_offset)
        return max_phy

    def _truncate_logics(self, phy_offset: int) -> None:
        if phy_offset < 0:
            for cq in self.iter_consume_queues():
                cq.destroy()
            self.consume_queue_table.clear()
            return
        for cq in self.iter_consume_queues():
            cq.truncate_dirty_logic_files(phy_offset)

    def _recover_topic_queue_table(self) -> None:
        table: dict[str, int] = {}
        min_phy = self.commit_log.get_min_offset()
        for cq in self.iter_consume_queues():
            table[f"{cq.topic}-{cq.queue_id}"] = cq.get_max_offset_in_queue()
            cq.correct_min_offset(min_phy)
        self.commit_log.topic_queue_table = table

    # ---- start and stop -------------------------------------------------------------------------
    def start(self) -> None:
        self._acquire_lock()
        if self._started:
            raise StoreLockedError("store already started")
        max_phy = max((cq.max_physic_offset for cq in self.iter_consume_queues()), default=0)
        self.reput.reput_from_offset = max(max_phy, self.commit_log.get_min_offset(), 0)
        self.reput.start()
        # Dispatch catches up before the store serves anything (DefaultMessageStore.start).
        with self.start_phases.phase(phases.DISPATCH_TAIL):
            while self.reput.behind() > 0:
                self.reput.nudge()
                time.sleep(0.001)
        log.info("store start phases (ms): %s", self.start_phases.runtime_value())
        last = self.commit_log.mapped_file_queue.get_last_mapped_file()
        if self.commit_log.mapped_file_queue.staging and last is not None:
            last.enable_staging()  # the recovered tail file takes new records through the buffer too
        self.flush_service.start()
        if self.commit_service is not None:
            self.commit_service.start()
        if self.warm_service is not None:
            self.warm_service.start()
        if self.link is None:  # else the dispatch process flushes its queues and reports (dispatchd.py)
            self.flush_cq_service.start()
        if self.replica is not None and self.config.broker_role is BrokerRole.SYNC_MASTER:
            self.replica.group_transfer.start()
        if self.ha is not None:
            try:
                self.ha.start()  # a master binds haListenPort here
            except OSError:
                self._started = True  # the services above run: shutdown() must stop them
                raise
        self._create_abort_file()
        self._schedule(self.clean_initial_delay_s, self.config.clean_resource_interval_ms / 1000, self.clean_files)
        self._schedule(self.disk_check_interval_s, self.disk_check_interval_s, self.clean_commit_log.check_disk)
        self._started = True

    def _create_abort_file(self) -> None:
        fd = os.open(self.abort_file, os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)
        dfd = os.open(self.config.store_path_root_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)  # the abort file must survive a power loss to trigger abnormal recovery
        finally:
            os.close(dfd)

    def _schedule(self, delay_s: float, period_s: float, fn: Callable[[], object]) -> None:
        task = PeriodicTask(f"StoreScheduled-{getattr(fn, '__name__', 'task')}", delay_s, period_s, fn)
        task.start()
        self._scheduled.append(task)

    def clean_files(self) -> None:
        """One cleaning pass (cleanFilesPeriodically): commit log first, then what points into it."""
        self.clean_commit_log.run()
        if self.link is not None:
            self.link.clean(self.commit_log.get_min_offset())
        else:
            self.clean_consume_queue.run()

    def execute_delete_files_manually(self) -> None:
        self.clean_commit_log.execute_delete_files_manually()

    def dispatch_behind_bytes(self) -> int:
        """What dispatch has still to read (runtime info ``dispatchBehindBytes``): with nothing waiting for
        dispatch, up to ``dispatchIdleIntervalMillis`` of puts. Reported as it is, not nudged."""
        return self.reput.behind()

    def add_dispatch_waiter(self, waiting: Callable[[], bool]) -> None:
        """While ``waiting()`` is true dispatch looks for new records every 1 ms (4.9.8's cadence), else every
        ``dispatchIdleIntervalMillis``. Called on the dispatch thread: it must be cheap and thread-safe."""
        self.reput.waiters.append(waiting)

    def remove_dispatch_waiter(self, waiting: Callable[[], bool]) -> None:
        if waiting in self.reput.waiters:
            self.reput.waiters.remove(waiting)

    def nudge_dispatch(self) -> None:
        """End dispatch's idle wait now: a waiter just began waiting, or a reader needs what is written."""
        self.reput.nudge()

    def wait_dispatched(self, timeout_s: float = READ_DISPATCH_WAIT_S) -> bool:
        """Nudge dispatch and wait until what is written now is dispatched: for a reader that must see the puts
        before it (reput.py). False at the timeout, when the store is not running, or when dispatch is more than
        READ_WAIT_MAX_BEHIND_BYTES behind (a backlog the wait would not clear, and the caller may be the event
        loop)."""
        return (self._started and not self._shutdown and self.reput.behind() <= READ_WAIT_MAX_BEHIND_BYTES
                and self.reput.wait_caught_up(timeout_s))

    def shutdown(self) -> None:
        """Stop services, flush everything; remove ``abort`` only when the store is consistent."""
        if self._shutdown:
            return
        self._shutdown = True
        for task in self._scheduled:
            task.make_stop()
        for task in self._scheduled:
            task.join(5)
        if self._started and self.ha is not None:
            self.ha.shutdown()  # a slave stops appending before dispatch catches up for the last time
        if self._started and self.replica is not None:
            self.replica.group_transfer.shutdown()  # waiting puts end with FLUSH_SLAVE_TIMEOUT
        if self._started:
            if self.commit_service is not None:
                self.commit_service.shutdown()  # commits everything staged, so dispatch can catch up
            self.reput.shutdown()
            if self.warm_service is not None:
                self.warm_service.shutdown()
            if self.link is None:
                self.flush_cq_service.shutdown()
            self.flush_service.shutdown()
        self.index_service.shutdown()
        self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp,
                                                   self.commit_log.mapped_file_queue.store_timestamp)
        self.checkpoint.shutdown()
        behind = self.dispatch_behind_bytes()
        if self._started and self.running_flags.is_writeable() and behind == 0:
            try:
                self.abort_file.unlink()
            except FileNotFoundError:
                pass
            self.shutdown_normally = True
        else:
            log.warning("shutdown abnormally, and keep abort file (writeable %s, dispatch behind %d bytes)",
                        self.running_flags.is_writeable(), behind)
            self.shutdown_normally = False
        self.commit_log.shutdown()
        for cq in self.iter_consume_queues():
            cq.shutdown()
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def destroy(self) -> None:
        """Delete all data files (tests and tools)."""
        self.commit_log.destroy()
        for cq in self.iter_consume_queues():
            cq.destroy()
        self.consume_queue_table.clear()
        self.index_service.destroy()
        for name in ("abort", "checkpoint", PROP_CRC_SINCE_FILE):
            try:
                (self.config.store_path_root_dir / name).unlink()
            except FileNotFoundError:
                pass

    # ---- replication ----------------------------------------------------------------------------
    def attach_ha(self, ha: HAComponent) -> None:
        """Give the store its replication threads (before ``start``): it starts and stops them."""
        self.ha = ha

    def append_to_commit_log(self, start_offset: int,
                             data: bytes | memoryview | Sequence[bytes | memoryview]) -> bool:
        """A slave appends replicated bytes at ``start_offset`` (DefaultMessageStore.appendToCommitLog): one
        chunk, or several contiguous chunks within one file written together; the reput thread dispatches them
        as it dispatches any record."""
        if self._shutdown:
            log.warning("message store has shutdown, so appendToCommitLog is forbidden")
            return False
        ok = self.commit_log.append_data(start_offset, data)
        if not ok:
            size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else sum(len(v) for v in data)
            log.error("appendToCommitLog failed at %d (%d bytes)", start_offset, size)
        return ok

    # ---- consume queues -------------------------------------------------------------------------
    def iter_consume_queues(self) -> Iterator[ConsumeQueue]:
        return iter_queues(self.consume_queue_table)

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None or not create:
                return cq
        elif not create:
            return None
        return create_consume_queue(self.config, self.consume_queue_table, self._cq_lock, topic, queue_id)

    # ---- dispatch hooks ---------------------------------------------------------------------------
    def add_dispatch_hook(self, hook: DispatchHook, *, during_recovery: bool) -> None:
        """Run ``hook(request)`` for each record once dispatch wrote its consume-queue unit and index
        entries (on the dispatch thread); ``during_recovery``: also for what abnormal recovery re-dispatches."""
        self.dispatcher.add_hook(hook, during_recovery=during_recovery)

    def add_arrival_hook(self, hook: ArrivalHook) -> None:
        """With dispatchInSeparateProcess, run ``hook`` with ``(topic, queue id, max offset)`` of the queues that
        grew, on the link's thread, after the views moved. Dispatch hooks see records where dispatch runs, so
        with the process they run only for what recovery re-dispatches in the broker; these run instead."""
        self._arrival_hooks = (*self._arrival_hooks, hook)

    def _queues_grew(self, grown: Sequence[tuple[str, int, int]]) -> None:
        for hook in self._arrival_hooks:
            try:
                hook(grown)
            except Exception:  # boundary: one hook's bug must not stop the others
                log.exception("arrival hook %r failed", hook)

    def index_last_update(self) -> tuple[int, int]:
        """(timestamp, commit-log offset) of the index's last entry, for QUERY_MESSAGE's answer."""
        if self.link is not None:
            return self.link.index_last_update
        last = self.index_service.get_last_file()
        return (last.end_timestamp, last.end_phy_offset) if last is not None else (0, 0)

    def remove_dispatch_hook(self, hook: DispatchHook) -> None:
        self.dispatcher.remove_hook(hook)

    # ---- puts -----------------------------------------------------------------------------------
    def is_os_page_cache_busy(self) -> bool:
        """One put has held the commit-log lock for more than osPageCacheBusyTimeOutMills."""
        begin = self.commit_log.begin_time_in_lock
        diff = int(time.time() * 1000) - begin
        return begin != 0 and 0 < diff < 10_000_000 and diff > self.config.os_page_cache_busy_timeout_ms

    def service_not_available_remark(self) -> str:
        return SERVICE_NOT_AVAILABLE_REMARK.format(disk=self.disk_util())

    def disk_util(self) -> str:
        used = disk_partition_space_used_percent
        c = self.config
        return (f"CL: {used(c.store_path_commit_log):5.2f} CQ: {used(c.store_path_consume_queue):5.2f} "
                f"INDEX: {used(c.store_path_index):5.2f}")

    def _refusal(self) -> PutMessageResult | None:
        """checkStoreStatus (and checkMessage's page-cache check): why the store takes no put now, or None."""
        status: PutMessageStatus | None = None
        if self._shutdown:
            log.warning("message store has shutdown, so putMessage is forbidden")
            status = PutMessageStatus.SERVICE_NOT_AVAILABLE
        elif self.config.broker_role is BrokerRole.SLAVE or not self.running_flags.is_writeable():
            status = PutMessageStatus.SERVICE_NOT_AVAILABLE
        elif self.is_os_page_cache_busy():
            status = PutMessageStatus.OS_PAGECACHE_BUSY
        if status is None:
            return None
        remark = self.service_not_available_remark() if status is PutMessageStatus.SERVICE_NOT_AVAILABLE else ""
        return PutMessageResult(status, None, remark)

    def _throttle(self) -> None:
        """docs/claims.md `dispatch-throttle`: slow each put by 1 ms while dispatch is far behind
        (putMsgIndexHightWater), so the writer waits for the dispatch thread instead of outrunning it."""
        if self._put_count - self.reput.dispatched_count > self.config.put_msg_index_high_water:
            time.sleep(0.001)

    def put(self, msg: rec.MessageExtBrokerInner) -> PendingPut:
        """Append one message (CommitLog.asyncPutMessage); the result is ready at once, or once the
        durability conditions hold. A message with ``WAIT=false`` never waits for them."""
        cl = self.commit_log
        # Every refusal needs one of these: the common put skips the checks with one test.
        if self._shutdown or self._is_slave or self.running_flags.flag or cl.begin_time_in_lock:
            refused = self._refusal()
            if refused is not None:
                return refused
        self._throttle()
        result = cl.put_message(msg)
        if result.status is PutMessageStatus.PUT_OK:
            self._put_count += 1
            if self.link is not None:
                self.link.publish(cl.get_max_offset())
        return submit_all(self.durability, result, msg.properties.get(mc.PROPERTY_WAIT_STORE_MSG_OK) != "false")

    def put_batch(self, batch: MessageExtBatch | EncodedBatch) -> PendingPut:
        """Append a batch (a list of messages, or still encoded as sent: ``EncodedBatch``) as ``put`` does
        one message (CommitLog.asyncPutMessages); a batch always waits for the durability conditions."""
        refused = self._refusal()
        if refused is not None:
            return refused
        self._throttle()
        cl = self.commit_log
        result = cl.put_messages(batch) if isinstance(batch, MessageExtBatch) else cl.put_encoded_batch(batch)
        if result.status is PutMessageStatus.PUT_OK and result.append is not None:
            self._put_count += result.append.msg_num
            if self.link is not None:
                self.link.publish(cl.get_max_offset())
        return submit_all(self.durability, result, True)

    def put_message(self, msg: rec.MessageExtBrokerInner) -> PutMessageResult:
        """``put``, blocking until its result is ready (DefaultMessageStore.putMessage)."""
        return self.put(msg).wait()

    def put_messages(self, batch: MessageExtBatch | EncodedBatch) -> PutMessageResult:
        """``put_batch``, blocking until its result is ready (DefaultMessageStore.putMessages)."""
        return self.put_batch(batch).wait()

    # ---- reads (StoreReader) ----------------------------------------------------------------------
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tags_filter: TagsFilter | None = None,
                    record_filter: RecordFilter | None = None,
                    ext_filter: ExtFilter | None = None) -> GetMessageResult:
        result = self.reads.get_message(group, topic, queue_id, offset, max_msg_nums, tags_filter, record_filter,
                                        ext_filter)
        if result.status in AT_QUEUE_END:
            # Records written but not dispatched may be what it wants, with dispatch in a long idle wait: dispatch
            # them now. Not waited for here (the event loop): a pull that is held is woken by their arrival, and
            # one that is not waits in the pull processor (wait_dispatched).
            self.reput.nudge_if_behind()
        return result

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.get_min_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.reads.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        return self.reads.get_offset_in_queue_by_time(topic, queue_id, timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.reads.get_message_store_timestamp(topic, queue_id, cq_offset)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return self.reads.get_earliest_message_time(topic, queue_id)

    @property
    def put_message_count(self) -> int:
        """Messages stored by puts since boot (StoreStatsService.getPutMessageTimesTotal)."""
        return self._put_count

    def get_max_phy_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_min_phy_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def check_in_disk_by_commit_offset(self, offset_py: int, max_offset_py: int) -> bool:
        return self.reads.check_in_disk_by_commit_offset(offset_py, max_offset_py)

    def look_message_by_offset(self, commit_log_offset: int, size: int = -1) -> rec.MessageExt | None:
        return self.reads.look_message_by_offset(commit_log_offset, size)

    def select_one_message_by_offset(self, commit_log_offset: int, size: int = -1) -> bytes | None:
        return self.reads.select_one_message_by_offset(commit_log_offset, size)

    def look_message_by_msg_id(self, offset_msg_id: str) -> rec.MessageExt | None:
        return self.reads.look_message_by_msg_id(offset_msg_id)

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[rec.MessageExt]:
        # A key looked up right after its send: with a long idle wait its index entry may not be built yet.
        self.wait_dispatched()
        return self.reads.query_message(topic, key, max_num, begin, end)

    # ---- housekeeping ---------------------------------------------------------------------------
    def get_runtime_info(self) -> dict[str, str]:
        cl = self.commit_log
        q = totals(list_quarantine(self.config.store_path_root_dir))
        return {
            "commitLogMinOffset": str(cl.get_min_offset()),
            "commitLogMaxOffset": str(cl.get_max_offset()),
            "commitLogFlushedOffset": str(cl.flushed_where),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes()),
            "putMessageCount": str(self._put_count),
            "dispatchedCount": str(self.reput.dispatched_count),
            "dispatchErrorCount": str(self.dispatcher.error_count + (self.link.error_count if self.link else 0)),
            "diskFull": str(self.running_flags.is_disk_full()).lower(),
            "writeable": str(self.running_flags.is_writeable()).lower(),
            "pageCacheLockTimeMills": str(int(time.time() * 1000) - cl.begin_time_in_lock
                                          if cl.begin_time_in_lock else 0),
            # Not RocketMQ keys: what recovery cut and kept aside (quarantine.py), and records not served
            # because their CRC failed (record_check.py).
            "quarantinedFiles": str(q.files),
            "quarantinedBytes": str(q.bytes),
            "quarantinedIntactRecords": str(q.intact_records),
            "badRecordsSkipped": str(self.reads.bad_records_skipped),
            # Not a RocketMQ key: runs of records dispatched since boot (dispatchedCount / this = records a run;
            # docs/dispatch.md, "Waking less often").
            "dispatchRuns": str(self.reput.dispatch_runs),
            # Not RocketMQ keys: the dispatch process (dispatchInSeparateProcess; 0 without it)
            "dispatchProcessPid": str(self.link.pid if self.link else 0),
            "dispatchProcessRestarts": str(self.link.restarts if self.link else 0),
            phases.RUNTIME_KEY: self.start_phases.runtime_value(),
        }

    @property
    def store_root(self) -> Path:
        return self.config.store_path_root_dir
