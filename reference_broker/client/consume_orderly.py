"""This module owns orderly consumption (ConsumeMessageOrderlyService, 4.9.8).

Each queue is consumed by one thread at a time, in offset order: a consume task holds the queue's local
lock (MessageQueueLock) and takes the lowest buffered offsets, ``consume_message_batch_max_size`` at a
time. In CLUSTERING mode it runs only while this client holds the queue's broker lock (LOCK_BATCH_MQ,
renewed every 20 s by ``lock_all``; treated as lost 30 s after the last renewal), so after a rebalance the
new owner starts only once the old one has unlocked or its lock has expired on the broker (60 s).

- SUCCESS: the batch is committed; the offset store records one past its last offset.
- SUSPEND_CURRENT_QUEUE_A_MOMENT (or an exception, or None): the same messages are consumed again after
  ``context.suspend_current_queue_time_millis`` (the consumer's ``suspend_current_queue_time_millis``,
  1000 ms, clamped to [10, 30000]). With a finite ``max_reconsume_times`` a message past it is sent to the
  dead-letter queue (CONSUMER_SEND_MSG_BACK with delay level -1; 4.9.8 sends it through its inner producer
  to the retry topic, which the broker then routes to the DLQ) and the batch is committed; the default
  (-1) retries forever.

A task runs at most 60 s (MAX_TIME_CONSUME_CONTINUOUSLY) before yielding the thread, and takes no new
batch once the consumer is shutting down. Only automatic
commit is implemented (ConsumeOrderlyContext.autoCommit = true, RocketMQ's default).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

from reference_broker.client.consume_concurrently import reset_retry_topic, shutdown_executor
from reference_broker.client.message import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageExt,
    MessageModel,
    MessageQueue,
)
from reference_broker.client.process_queue import REBALANCE_LOCK_INTERVAL_S, ProcessQueue
from reference_broker.common import message as mc

if TYPE_CHECKING:
    from reference_broker.client.push_consumer import PushConsumer

log = logging.getLogger(__name__)

OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext], ConsumeOrderlyStatus | None]
MAX_TIME_CONSUME_CONTINUOUSLY_S: Final = 60.0  # rocketmq.client.maxTimeConsumeContinuously 60000
INT_MAX: Final = 2**31 - 1


class ConsumeMessageOrderlyService:
    def __init__(self, consumer: PushConsumer, listener: OrderlyListener) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = ThreadPoolExecutor(consumer.consume_thread_max, f"consume-orderly-{consumer.group}")
        self._mq_locks: dict[MessageQueue, threading.Lock] = {}
        self._mq_locks_guard = threading.Lock()
        self.stopped = False

    @property
    def clustering(self) -> bool:
        return self.consumer.message_model is MessageModel.CLUSTERING

    def start(self) -> None:
        if self.clustering:
            self.consumer.instance_scheduler().schedule_at_fixed_rate(1.0, REBALANCE_LOCK_INTERVAL_S,
                                                                      self._lock_all)

    def _lock_all(self) -> None:
        if not self.stopped:
            self.consumer.rebalance.lock_all()

    def shutdown(self, await_termination_s: float = 0.0) -> None:
        """Stop consuming. The consumer unlocks the queues afterwards, once their offsets are persisted (4.9.8
        unlocks first, so a new owner could read an offset that is about to move)."""
        self.stopped = True
        shutdown_executor(self.executor, await_termination_s)

    def _mq_lock(self, mq: MessageQueue) -> threading.Lock:
        lock = self._mq_locks.get(mq)
        if lock is None:
            with self._mq_locks_guard:
                lock = self._mq_locks.setdefault(mq, threading.Lock())
        return lock

    def submit_consume_request(self, msgs: list[MessageExt] | None, pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        if not dispatch_to_consume or self.stopped:
            return
        try:
            self.executor.submit(self._consume, pq, mq)
        except RuntimeError:
            pass  # shut down

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, suspend_ms: int) -> None:
        ms = self.consumer.suspend_current_queue_time_millis if suspend_ms == -1 else suspend_ms
        delay_s = min(max(ms, 10), 30_000) / 1000
        self.consumer.instance_scheduler().schedule(delay_s, lambda: self.submit_consume_request(None, pq, mq, True))

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: int) -> None:
        def task() -> None:
            locked = self.consumer.rebalance.lock(mq)
            self.submit_consume_request_later(pq, mq, 10 if locked else 3000)

        self.consumer.instance_scheduler().schedule(delay_ms / 1000, task)

    def _consume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeRequest.run."""
        if pq.dropped:
            log.warning("run, the message queue not be able to consume, because it's dropped. %s", mq)
            return
        with self._mq_lock(mq):
            if not (not self.clustering or (pq.locked and not pq.is_lock_expired())):
                if not pq.dropped:
                    self.try_lock_later_and_reconsume(mq, pq, 100)
                return
            begin = time.monotonic()
            while True:
                # Also stop at shutdown: a batch taken now could not have its offset persisted (4.9.8 keeps
                # going until the queue is empty or 60 s have passed).
                if pq.dropped or self.stopped:
                    return
                if self.clustering and (not pq.locked or pq.is_lock_expired()):
                    log.warning("the message queue not locked (or lock expired), so consume later, %s", mq)
                    self.try_lock_later_and_reconsume(mq, pq, 10)
                    return
                if time.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_S:
                    self.submit_consume_request_later(pq, mq, 10)
                    return
                msgs = pq.take_messages(self.consumer.consume_message_batch_max_size)
                if not msgs:
                    return
                reset_retry_topic(msgs, self.consumer.group)
                context = ConsumeOrderlyContext(mq)
                status: ConsumeOrderlyStatus | None = None
                with pq.consume_lock:
                    if pq.dropped:
                        log.warning("consumeMessage, the message queue not be able to consume, because it's "
                                    "dropped. %s", mq)
                        return
                    try:
                        status = self.listener(msgs, context)
                    except Exception:  # the user's listener: a failure suspends the queue
                        log.exception("consumeMessage exception, Group: %s %s", self.consumer.group, mq)
                if status is None:
                    status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if not self.process_consume_result(msgs, status, context, pq, mq):
                    return

    def process_consume_result(self, msgs: list[MessageExt], status: ConsumeOrderlyStatus,
                               context: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue) -> bool:
        """True to go on consuming this queue in the same task."""
        commit_offset = -1
        go_on = True
        if status is ConsumeOrderlyStatus.SUCCESS:
            commit_offset = pq.commit()
        elif self._check_reconsume_times(msgs):
            pq.make_messages_to_consume_again(msgs)
            self.submit_consume_request_later(pq, mq, context.suspend_current_queue_time_millis)
            go_on = False
        else:
            commit_offset = pq.commit()
        if commit_offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, commit_offset, False)
        return go_on

    def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """checkReconsumeTimes: True to suspend (retry locally); messages past the limit go to the DLQ."""
        max_times = self.consumer.max_reconsume_times
        limit = INT_MAX if max_times == -1 else max_times
        suspend = False
        for msg in msgs:
            if msg.reconsume_times >= limit:
                msg.properties[mc.PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times)
                if not self.consumer.send_message_back(msg, -1, None):
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend
