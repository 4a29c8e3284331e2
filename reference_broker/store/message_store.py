"""MessageStore: the facade over commit log, consume queues, index, flush, dispatch and cleaning.

Lifecycle (DefaultMessageStore, 4.9.8): ``load()`` maps the files and recovers — normally when the
last exit removed ``abort``, abnormally (re-dispatch from the checkpoint) when it did not — then
``start()`` lets dispatch catch up, starts the services and creates ``abort``; ``shutdown()``
flushes everything and removes ``abort`` only when the store is writeable and dispatch has caught up.

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
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
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
from reference_broker.store.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitRequest,
    GroupCommitService,
)
from reference_broker.store.index_file import IndexService
from reference_broker.store.message_store_reads import StoreReads
from reference_broker.store.quarantine import list_quarantine
from reference_broker.store.reput import ReputMessageService
from reference_broker.store.status import PutMessageResult, PutMessageStatus
from reference_broker.store.warm import WarmAheadService

log = logging.getLogger(__name__)


SERVICE_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: "
    "the broker's disk is full [{disk}], messages are put to the slave, message store has been shut down, etc."
)
CQ_WRITE_RETRIES = 3  # docs/claims.md `cq-write-failure` (4.9.8's ConsumeQueue retries 30 times, 1 s apart)


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


class MessageStore(StoreReads):
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        root = config.store_path_root_dir
        root.mkdir(parents=True, exist_ok=True)
        self.abort_file = root / "abort"
        self.lock_path = root / "lock"
        self.checkpoint = StoreCheckpoint(root / "checkpoint")
        self.commit_log = CommitLog(config, self.checkpoint)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self._cq_lock = threading.Lock()
        self.index_service = IndexService(config.store_path_index, config.max_hash_slot_num, config.max_index_num,
                                          self.checkpoint, message_index_safe=config.message_index_safe,
                                          safe_point_recovery=config.recover_from_checkpoint_offset)
        self.running_flags = RunningFlags()
        self.delay_table_ms = config.delay_level_table_ms()
        self.reput = ReputMessageService(self.commit_log, self.do_dispatch, self.delay_table_ms)
        self.flush_service: FlushRealTimeService | GroupCommitService
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._is_slave = config.broker_role is BrokerRole.SLAVE
        if self._sync_flush:
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
        self.dispatch_listeners: list[Callable[[DispatchRequest], None]] = []
        self.dispatch_error_count = 0  # records a dispatcher could not take (skipped; see _dispatch_failed)
        self.last_exit_ok = True
        self.shutdown_normally: bool | None = None
        self._lock_fd: int | None = None
        self._started = False
        self._shutdown = False
        self._put_count = 0
        self._sched_stop = threading.Event()
        self._sched_threads: list[threading.Thread] = []
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
        ok = self.commit_log.load() and self._load_consume_queues()
        if not ok:
            return False
        if self.config.message_index_enable:
            self.index_service.load(self.last_exit_ok)
        self.recover(self.last_exit_ok)
        return True

    def _load_consume_queues(self) -> bool:
        base = self.config.store_path_consume_queue
        if not base.is_dir():
            return True
        for topic_dir in sorted(base.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if not (qdir.is_dir() and qdir.name.isdigit()):
                    continue
                cq = self._new_cq(topic_dir.name, int(qdir.name))
                if not cq.load():
                    return False
                self.consume_queue_table.setdefault(topic_dir.name, {})[int(qdir.name)] = cq
        return True

    def _new_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.config.store_path_consume_queue,
                            self.config.get_mapped_file_size_consume_queue(),
                            self.config.consume_queue_alloc_chunk_bytes)

    def recover(self, last_exit_ok: bool) -> None:
        max_phy_of_cq = self._recover_consume_queues()
        if last_exit_ok:
            self.commit_log.recover_normally(max_phy_of_cq, self._truncate_logics)
        else:
            end = self.commit_log.recover_abnormally(max_phy_of_cq, self.do_dispatch, self._truncate_logics)
            # Entries of records the log lost go; then a fresh safe point, so that a second crash before
            # the next flush round does not cut back to a header the truncation made stale. (Otherwise
            # the old safe point stays true: the index was only appended to since.)
            if (self.config.message_index_enable and self.index_service.safe_point_recovery
                    and self.index_service.truncate_from(end)):
                self.checkpoint.note_index_safe_point(self.index_service.take_safe_point(end))
                self.checkpoint.flush()
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
        while self.reput.behind() > 0:
            time.sleep(0.001)
        last = self.commit_log.mapped_file_queue.get_last_mapped_file()
        if self.commit_log.mapped_file_queue.staging and last is not None:
            last.enable_staging()  # the recovered tail file takes new records through the buffer too
        self.flush_service.start()
        if self.commit_service is not None:
            self.commit_service.start()
        if self.warm_service is not None:
            self.warm_service.start()
        self.flush_cq_service.start()
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
        def loop() -> None:
            if self._sched_stop.wait(delay_s):
                return
            while not self._sched_stop.is_set():
                try:
                    fn()
                except Exception:
                    log.exception("scheduled task %s failed", getattr(fn, "__name__", fn))
                if self._sched_stop.wait(period_s):
                    return

        t = threading.Thread(target=loop, name=f"StoreScheduled-{getattr(fn, '__name__', 'task')}", daemon=True)
        t.start()
        self._sched_threads.append(t)

    def clean_files(self) -> None:
        """One cleaning pass (cleanFilesPeriodically): commit log first, then what points into it."""
        self.clean_commit_log.run()
        self.clean_consume_queue.run()

    def execute_delete_files_manually(self) -> None:
        self.clean_commit_log.execute_delete_files_manually()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind()

    def shutdown(self) -> None:
        """Stop services, flush everything; remove ``abort`` only when the store is consistent."""
        if self._shutdown:
            return
        self._shutdown = True
        self._sched_stop.set()
        for t in self._sched_threads:
            t.join(5)
        if self._started:
            if self.commit_service is not None:
                self.commit_service.shutdown()  # commits everything staged, so dispatch can catch up
            self.reput.shutdown()
            if self.warm_service is not None:
                self.warm_service.shutdown()
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

    # ---- consume queues -------------------------------------------------------------------------
    def iter_consume_queues(self) -> Iterator[ConsumeQueue]:
        for queues in list(self.consume_queue_table.values()):
            yield from list(queues.values())

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None or not create:
                return cq
        elif not create:
            return None
        with self._cq_lock:
            queues = self.consume_queue_table.setdefault(topic, {})
            cq = queues.get(queue_id)
            if cq is None:
                cq = self._new_cq(topic, queue_id)
                queues[queue_id] = cq
            return cq

    # ---- dispatch -------------------------------------------------------------------------------
    def do_dispatch(self, reqs: list[DispatchRequest]) -> None:
        """CommitLogDispatcherBuildConsumeQueue, then BuildIndex, then any listeners, for a run of records.

        RocketMQ dispatches one record at a time; a run in log order gives every queue and the index the
        same contents in the same order, with the per-record Python work cut to a minimum: each queue's
        units are written together, and the index entries of the run in one vectorised step.
        """
        by_queue: dict[tuple[str, int], list[DispatchRequest]] = {}
        not_type = mc.TRANSACTION_NOT_TYPE
        commit_type = mc.TRANSACTION_COMMIT_TYPE
        tran_mask = mc.TRANSACTION_ROLLBACK_TYPE
        for req in reqs:
            tran = req.sys_flag & tran_mask
            if tran in (not_type, commit_type):
                key = (req.topic, req.queue_id)
                run = by_queue.get(key)
                if run is None:
                    by_queue[key] = [req]
                else:
                    run.append(req)
        table = self.consume_queue_table
        flags = self.running_flags
        last_ts = -1
        for (topic, queue_id), run in by_queue.items():
            try:
                queues = table.get(topic)
                cq = queues.get(queue_id) if queues is not None else None
                if cq is None:
                    cq = self.find_consume_queue(topic, queue_id)
                    assert cq is not None
                if len(run) == 1 and flags.is_cq_writeable() and cq.append_unit(run[0]):
                    ts = run[0].store_timestamp  # one unit of this queue in the run: the many-queues case
                else:
                    ts = self._put_cq_positions(cq, run)
            except Exception as e:  # noqa: BLE001 - boundary: one queue's records must not stop the others
                self._dispatch_failed(f"consume queue {topic!r}:{queue_id}", run, e)
                continue
            if ts > last_ts:
                last_ts = ts
        if last_ts >= 0:
            self.checkpoint.dispatched_logics_timestamp = last_ts
        if self.config.message_index_enable:
            try:
                self.index_service.build_index_batch(reqs)
            except Exception as e:  # noqa: BLE001 - boundary: the index must not stop the consume queues
                self._dispatch_failed("index", reqs, e)
            if self.index_service.index_file_error and not flags.flag & RunningFlags.WRITE_INDEX_FILE_ERROR:
                log.error("index files cannot be built: the store stops accepting writes")
                flags.make_index_file_error()
        for listener in self.dispatch_listeners:
            for req in reqs:
                try:
                    listener(req)
                except Exception as e:  # noqa: BLE001 - boundary: a listener's bug must not stop dispatch
                    self._dispatch_failed(f"listener {listener!r}", [req], e)

    def _dispatch_failed(self, what: str, reqs: list[DispatchRequest], exc: BaseException) -> None:
        """A run of records one dispatcher could not take: skipped for that dispatcher, counted, logged.

        4.9.8's ReputMessageService retries the same record forever (doReput does not advance past a
        dispatcher's exception), so one record whose topic cannot be a directory stops dispatch for every
        topic. Here the others go on; ``dispatchErrorCount`` in the runtime info counts what was skipped.
        """
        self.dispatch_error_count += len(reqs)
        log.error("dispatch to %s failed for %d record(s) from commit-log offset %d (%s: %s); skipped, "
                  "%d skipped so far", what, len(reqs), reqs[0].commit_log_offset, type(exc).__name__, exc,
                  self.dispatch_error_count)

    def _put_cq_positions(self, cq: ConsumeQueue, run: list[DispatchRequest]) -> int:
        """One queue's units of a run: contiguous units are appended in one write; anything else (a new
        file, pre-blank fill, re-dispatch over existing units, a write error) takes the per-unit path
        with its retries. Returns the store time of the last unit written, or -1."""
        n = len(run)
        i = 0
        last_ts = -1
        while i < n:
            done = cq.put_message_positions(run, i) if self.running_flags.is_cq_writeable() else 0
            if done:
                i += done
                last_ts = run[i - 1].store_timestamp
            else:
                if self._put_cq_position(run[i], cq):
                    last_ts = run[i].store_timestamp
                i += 1
        return last_ts

    def _put_cq_position(self, req: DispatchRequest, cq: ConsumeQueue) -> bool:
        for attempt in range(CQ_WRITE_RETRIES):
            if not self.running_flags.is_cq_writeable():
                break
            try:
                cq.put_message_position_info(req.commit_log_offset, req.msg_size, req.tags_code,
                                             req.consume_queue_offset)
                return True
            except OSError as e:
                log.warning("[BUG] put commit log position info to %s:%d:%d failed, retry %d: %s",
                            req.topic, req.queue_id, req.commit_log_offset, attempt + 1, e)
                time.sleep(0.1)
        log.error("[BUG] consume queue can not write, %s %d", req.topic, req.queue_id)
        self.running_flags.make_logics_queue_error()
        return False

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

    def _check_store_status(self) -> PutMessageStatus | None:
        if self._shutdown:
            log.warning("message store has shutdown, so putMessage is forbidden")
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if not self.running_flags.is_writeable():
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.is_os_page_cache_busy():
            return PutMessageStatus.OS_PAGECACHE_BUSY
        return None

    def _throttle(self) -> None:
        """docs/claims.md `dispatch-throttle`: slow each put by 1 ms while dispatch is far behind."""
        if self._put_count - self.reput.dispatched_count > self.config.put_msg_index_high_water:
            time.sleep(0.001)

    def _rejected(self, status: PutMessageStatus) -> PutMessageResult:
        remark = self.service_not_available_remark() if status is PutMessageStatus.SERVICE_NOT_AVAILABLE else ""
        return PutMessageResult(status, None, remark)

    def put_message_async(self, msg: rec.MessageExtBrokerInner) -> Future[PutMessageResult]:
        """Append and return a future completed once the flush policy is satisfied."""
        fut: Future[PutMessageResult] = Future()
        self.put_message_callback(msg, fut.set_result)
        return fut

    def put_message_callback(self, msg: rec.MessageExtBrokerInner,
                             callback: Callable[[PutMessageResult], None]) -> None:
        """Append; ``callback(result)`` runs once the flush policy is satisfied — at once under
        ASYNC_FLUSH, on the group-commit (or watcher) thread under SYNC_FLUSH. The lean primitive
        for an event-loop broker: no thread waits per put."""
        self._after_append(self._append(msg), msg.properties.get(mc.PROPERTY_WAIT_STORE_MSG_OK) != "false",
                           callback)

    def put_messages_async(self, batch: MessageExtBatch | EncodedBatch) -> Future[PutMessageResult]:
        fut: Future[PutMessageResult] = Future()
        self.put_messages_callback(batch, fut.set_result)
        return fut

    def put_messages_callback(self, batch: MessageExtBatch | EncodedBatch,
                              callback: Callable[[PutMessageResult], None]) -> None:
        """Append a batch (a list of messages, or still encoded as sent: ``EncodedBatch``); ``callback`` as for
        ``put_message_callback``."""
        bad = self._check_store_status()
        if bad is not None:
            callback(self._rejected(bad))
            return
        self._throttle()
        cl = self.commit_log
        result = cl.put_messages(batch) if isinstance(batch, MessageExtBatch) else cl.put_encoded_batch(batch)
        if result.status is PutMessageStatus.PUT_OK and result.append is not None:
            self._put_count += result.append.msg_num
        self._after_append(result, True, callback)

    def put_message(self, msg: rec.MessageExtBrokerInner) -> PutMessageResult:
        """Append; under SYNC_FLUSH wait for the group commit (the blocking twin of put_message_async)."""
        result = self._append(msg)
        if result.status is not PutMessageStatus.PUT_OK or result.append is None:
            return result
        svc = self.flush_service
        if self._sync_flush:
            if msg.properties.get(mc.PROPERTY_WAIT_STORE_MSG_OK) == "false":
                svc.wakeup()
                return result
            req = GroupCommitRequest(result.append.wrote_offset + result.append.wrote_bytes,
                                     self.config.sync_flush_timeout_ms)
            assert isinstance(svc, GroupCommitService)
            svc.put_request(req)
            status = req.wait()
            if status is not PutMessageStatus.PUT_OK:
                log.error("do groupcommit, wait for flush failed, topic offset %d", result.append.wrote_offset)
                return PutMessageResult(status, result.append)
            return result
        if self.commit_service is not None:
            self.commit_service.wakeup()  # handleDiskFlush: with the pool, puts wake the commit thread
        elif not self.config.flush_commit_log_timed:
            svc.wakeup()
        return result

    def put_messages(self, batch: MessageExtBatch | EncodedBatch) -> PutMessageResult:
        # Bounded like DefaultMessageStore.putMessages: flush timeout + 5 s, then UNKNOWN_ERROR.
        try:
            return self.put_messages_async(batch).result(self.config.sync_flush_timeout_ms / 1000 + 5)
        except TimeoutError:
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)

    def _append(self, msg: rec.MessageExtBrokerInner) -> PutMessageResult:
        cl = self.commit_log
        begin = cl.begin_time_in_lock
        if self._shutdown or self._is_slave or self.running_flags.flag or begin:
            bad = self._check_store_status()
            if bad is not None:
                return self._rejected(bad)
        if self._put_count - self.reput.dispatched_count > self.config.put_msg_index_high_water:
            time.sleep(0.001)  # docs/claims.md `dispatch-throttle`: dispatch is far behind, slow the writer down
        result = cl.put_message(msg)
        if result.status is PutMessageStatus.PUT_OK:
            self._put_count += 1
        return result

    def _after_append(self, result: PutMessageResult, wait_store_ok: bool,
                      callback: Callable[[PutMessageResult], None]) -> None:
        """handleDiskFlush: SYNC_FLUSH waits for group commit, ASYNC_FLUSH wakes the flusher."""
        append = result.append
        if result.status is not PutMessageStatus.PUT_OK or append is None:
            callback(result)
            return
        svc = self.flush_service
        if isinstance(svc, GroupCommitService):
            if not wait_store_ok:
                svc.wakeup()
                callback(result)
                return

            def flushed(status: PutMessageStatus) -> None:
                if status is PutMessageStatus.PUT_OK:
                    callback(result)
                else:
                    log.error("do groupcommit, wait for flush failed, topic offset %d", append.wrote_offset)
                    callback(PutMessageResult(status, append))

            svc.put_request(GroupCommitRequest(append.wrote_offset + append.wrote_bytes,
                                               self.config.sync_flush_timeout_ms, flushed))
            return
        if self.commit_service is not None:
            self.commit_service.wakeup()
        elif not self.config.flush_commit_log_timed:
            svc.wakeup()
        callback(result)

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
            "dispatchErrorCount": str(self.dispatch_error_count),
            "diskFull": str(self.running_flags.is_disk_full()).lower(),
            "writeable": str(self.running_flags.is_writeable()).lower(),
            "pageCacheLockTimeMills": str(int(time.time() * 1000) - cl.begin_time_in_lock
                                          if cl.begin_time_in_lock else 0),
            # Not RocketMQ keys: what recovery cut and kept aside (quarantine.py), and records not served
            # because their CRC failed (record_check.py).
            "quarantinedFiles": str(q.files),
            "quarantinedBytes": str(q.bytes),
            "quarantinedIntactRecords": str(q.intact_records),
            "badRecordsSkipped": str(self.bad_records_skipped),
        }

    @property
    def store_root(self) -> Path:
        return self.config.store_path_root_dir
