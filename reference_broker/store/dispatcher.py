"""What a dispatched record builds: its consume-queue unit, its index entries, then the dispatch hooks.

RocketMQ 4.9.8's DefaultMessageStore.doDispatch runs CommitLogDispatcherBuildConsumeQueue, then
CommitLogDispatcherBuildIndex, for one record at a time; the ReputMessageService then tells the long-polling
service (``messageArrivingListener``) that the record arrived. Here a run of records in log order is
dispatched together, and everything else a record should trigger is a dispatch hook registered with
``add_hook``, which says whether the hook also runs for the records that abnormal recovery re-dispatches
(``during_recovery``) or only for records the live dispatch thread reads. A hook is called once per run,
with the run's records in log order: most runs interest a hook not at all (no pull is held, no delayed
message is due), and it can say so with one test instead of one call per record.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from reference_broker.common import message as mc
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.clean import RunningFlags
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.consume_queue import ConsumeQueue
from reference_broker.store.index_service import IndexService

log = logging.getLogger(__name__)

CQ_WRITE_RETRIES: Final = 3  # docs/claims.md `cq-write-failure` (4.9.8's ConsumeQueue retries 30 times, 1 s apart)
DispatchHook = Callable[[Sequence[DispatchRequest]], None]
# CommitLogDispatcherCalcBitMap (the broker's): a record's filter bit map from its topic and a reader of the
# raw record (called only when the topic has SQL92 filters), or None (no bit map: no filter on the topic).
BitMapCalc = Callable[[str, Callable[[], bytes | None]], bytes | None]


class CommitLogDispatcher:
    def __init__(self, config: MessageStoreConfig, queues: dict[str, dict[int, ConsumeQueue]],
                 find_consume_queue: Callable[[str, int], ConsumeQueue | None], index_service: IndexService,
                 checkpoint: StoreCheckpoint, running_flags: RunningFlags) -> None:
        self.config = config
        self.queues = queues  # the store's table, read without its lock on the hot path
        self.find_consume_queue = find_consume_queue
        self.index_service = index_service
        self.checkpoint = checkpoint
        self.running_flags = running_flags
        self.error_count = 0  # records a dispatcher could not take (skipped; see _failed)
        # Replaced, never mutated: the dispatch thread iterates them while another thread may register.
        self._live_hooks: tuple[DispatchHook, ...] = ()
        self._recovery_hooks: tuple[DispatchHook, ...] = ()
        # enableConsumeQueueExt: the broker's bit-map calculator (set with enableCalcFilterBitMap) and the
        # commit log's reader it reads records with
        self.bit_map_calc: BitMapCalc | None = None
        self.read_record: Callable[[int, int], bytes | None] | None = None

    # ---- hooks ------------------------------------------------------------------------------------
    def add_hook(self, hook: DispatchHook, *, during_recovery: bool) -> None:
        """Run ``hook`` for every run of records dispatched from now on, after their units and index entries
        are written; with ``during_recovery`` also for the runs abnormal recovery re-dispatches."""
        self._live_hooks = (*self._live_hooks, hook)
        if during_recovery:
            self._recovery_hooks = (*self._recovery_hooks, hook)

    def remove_hook(self, hook: DispatchHook) -> None:
        self._live_hooks = tuple(h for h in self._live_hooks if h != hook)
        self._recovery_hooks = tuple(h for h in self._recovery_hooks if h != hook)

    # ---- dispatch ---------------------------------------------------------------------------------
    def dispatch(self, reqs: list[DispatchRequest]) -> None:
        """The live dispatch thread's records (ReputMessageService)."""
        self._build(reqs)
        self._run_hooks(self._live_hooks, reqs)

    def dispatch_recovered(self, reqs: list[DispatchRequest]) -> None:
        """The records abnormal recovery re-dispatches (CommitLog.recoverAbnormally)."""
        self._build(reqs)
        self._run_hooks(self._recovery_hooks, reqs)

    def _run_hooks(self, hooks: tuple[DispatchHook, ...], reqs: list[DispatchRequest]) -> None:
        for hook in hooks:
            try:
                hook(reqs)
            except Exception as e:  # noqa: BLE001 - boundary: a hook's bug must not stop dispatch
                self._failed(f"hook {hook!r}", reqs, e)

    def _build(self, reqs: list[DispatchRequest]) -> None:
        """CommitLogDispatcherBuildConsumeQueue, then BuildIndex, for a run of records.

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
        table = self.queues
        flags = self.running_flags
        with_ext = self.config.enable_consume_queue_ext
        last_ts = -1
        for (topic, queue_id), run in by_queue.items():
            try:
                queues = table.get(topic)
                cq = queues.get(queue_id) if queues is not None else None
                if cq is None:
                    cq = self.find_consume_queue(topic, queue_id)
                    assert cq is not None
                if with_ext:
                    ts = self._put_with_ext(cq, run)
                elif len(run) == 1 and flags.is_cq_writeable() and cq.append_unit(run[0]):
                    ts = run[0].store_timestamp  # one unit of this queue in the run: the many-queues case
                else:
                    ts = self._put_cq_positions(cq, run)
            except Exception as e:  # noqa: BLE001 - boundary: one queue's records must not stop the others
                self._failed(f"consume queue {topic!r}:{queue_id}", run, e)
                continue
            if ts > last_ts:
                last_ts = ts
        if last_ts >= 0:
            self.checkpoint.dispatched_logics_timestamp = last_ts
        if self.config.message_index_enable:
            try:
                self.index_service.build_index_batch(reqs)
            except Exception as e:  # noqa: BLE001 - boundary: the index must not stop the consume queues
                self._failed("index", reqs, e)
            if self.index_service.index_file_error and not flags.flag & RunningFlags.WRITE_INDEX_FILE_ERROR:
                log.error("index files cannot be built: the store stops accepting writes")
                flags.make_index_file_error()

    def _failed(self, what: str, reqs: list[DispatchRequest], exc: BaseException) -> None:
        """A run of records one dispatcher could not take: skipped for that dispatcher, counted, logged.

        4.9.8's ReputMessageService retries the same record forever (doReput does not advance past a
        dispatcher's exception), so one record whose topic cannot be a directory stops dispatch for every
        topic. Here the others go on; ``dispatchErrorCount`` in the runtime info counts what was skipped.
        """
        self.error_count += len(reqs)
        log.error("dispatch to %s failed for %d record(s) from commit-log offset %d (%s: %s); skipped, "
                  "%d skipped so far", what, len(reqs), reqs[0].commit_log_offset, type(exc).__name__, exc,
                  self.error_count)

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

    def _put_with_ext(self, cq: ConsumeQueue, run: list[DispatchRequest]) -> int:
        """A queue's units with the consume-queue extension, one at a time (putMessagePositionInfoWrapper):
        each record's bit map first (CommitLogDispatcherCalcBitMap runs before BuildConsumeQueue in 4.9.8),
        then its ext unit and its unit. Returns the store time of the last unit written, or -1."""
        calc, read = self.bit_map_calc, self.read_record
        last_ts = -1
        for req in run:
            if not self.running_flags.is_cq_writeable():
                break
            bit_map = None
            if calc is not None and read is not None:
                try:
                    bit_map = calc(req.topic, functools.partial(read, req.commit_log_offset, req.msg_size))
                except Exception as e:  # noqa: BLE001 - 4.9.8 logs a bit map it cannot compute; the unit goes on
                    log.error("calc bit map of %s at %d failed: %s: %s", req.topic, req.commit_log_offset,
                              type(e).__name__, e)
            try:
                cq.put_with_ext(req, bit_map)
            except OSError as e:
                log.warning("put position info with ext to %s:%d:%d failed: %s; retried without the ext unit",
                            req.topic, req.queue_id, req.commit_log_offset, e)
                if not self._put_cq_position(req, cq):
                    continue
            last_ts = req.store_timestamp
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
