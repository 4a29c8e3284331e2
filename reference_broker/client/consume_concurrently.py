"""This module owns concurrent consumption (ConsumeMessageConcurrentlyService, 4.9.8).

Pulled messages are cut into batches of ``consume_message_batch_max_size`` (1) and run on the consume
thread pool, any order, any thread. After the listener:

- CONSUME_SUCCESS: messages up to ``context.ack_index`` (all by default) are done;
- RECONSUME_LATER (or an exception, or None): the rest go back to the broker with CONSUMER_SEND_MSG_BACK
  (delay level ``context.delay_level_when_next_consume``, 0 = the broker's 3 + reconsume times), which
  redelivers them through %RETRY%<group> after the delay; in BROADCASTING mode they are dropped, as in
  RocketMQ. A message whose send-back fails is consumed again locally after 5 s and keeps its offset
  uncommitted until then. (4.9.8 first tries to re-send it to the retry topic with its inner producer; we
  go straight to the local retry.)

Then the consumed messages leave the ProcessQueue and the offset store records the smallest offset still
buffered (increase only), so a restart never skips an unconsumed message. Not implemented: the 15-minute
consumeTimeout sweep (cleanExpireMsg) and consume hooks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

from reference_broker.client.consume_pool import ConsumePool
from reference_broker.client.message import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    MessageExt,
    MessageModel,
    MessageQueue,
)
from reference_broker.client.process_queue import ProcessQueue
from reference_broker.common import message as mc

if TYPE_CHECKING:
    from reference_broker.client.push_consumer import PushConsumer

log = logging.getLogger(__name__)

ConcurrentListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], ConsumeConcurrentlyStatus | None]
CONSUME_LATER_S: Final = 5.0  # submitConsumeRequestLater: 5000 ms
CONSUME_START_TIME: Final = "CONSUME_START_TIME"  # MessageConst.PROPERTY_CONSUME_START_TIMESTAMP


def shutdown_executor(executor: ThreadPoolExecutor | ConsumePool, await_termination_s: float) -> None:
    """Refuse new work, drop queued work, and wait up to ``await_termination_s`` for running listeners
    (ThreadUtils.shutdownGracefully; RocketMQ's awaitTerminationMillisWhenShutdown defaults to 0)."""
    executor.shutdown(wait=False, cancel_futures=True)
    if await_termination_s > 0:
        waiter = threading.Thread(target=executor.shutdown, kwargs={"wait": True}, daemon=True)
        waiter.start()
        waiter.join(await_termination_s)


def reset_retry_topic(msgs: list[MessageExt], group: str) -> None:
    """resetRetryAndNamespace: a message redelivered through %RETRY%<group> shows its original topic."""
    retry_topic = mc.RETRY_GROUP_TOPIC_PREFIX + group
    for msg in msgs:
        original = msg.properties.get(mc.PROPERTY_RETRY_TOPIC)
        if original is not None and msg.topic == retry_topic:
            msg.topic = original


class ConsumeMessageConcurrentlyService:
    def __init__(self, consumer: PushConsumer, listener: ConcurrentListener) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = ConsumePool(consumer.consume_thread_max, f"consume-{consumer.group}")
        self.consume_later_s = CONSUME_LATER_S  # tests shorten it

    def start(self) -> None:
        """Nothing to schedule (RocketMQ's cleanExpireMsg sweep is not implemented)."""

    def shutdown(self, await_termination_s: float = 0.0) -> None:
        shutdown_executor(self.executor, await_termination_s)

    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue,
                               dispatch_to_consume: bool) -> None:
        batch = self.consumer.consume_message_batch_max_size
        for i in range(0, len(msgs), batch):
            chunk = msgs[i:i + batch]
            try:
                self.executor.submit(self._consume, chunk, pq, mq)
            except RuntimeError:  # shut down: the pool refuses new work (RejectedExecutionException)
                if not self.consumer.stopped:
                    self._submit_later(chunk, pq, mq)

    def _submit_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self.consumer.instance_scheduler().schedule(
            self.consume_later_s, lambda: self.submit_consume_request(msgs, pq, mq, True))

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeRequest.run."""
        if pq.dropped:
            log.info("the message queue not be able to consume, because it's dropped. group=%s %s",
                     self.consumer.group, mq)
            return
        reset_retry_topic(msgs, self.consumer.group)
        now = str(int(time.time() * 1000))
        for msg in msgs:
            msg.properties[CONSUME_START_TIME] = now
        context = ConsumeConcurrentlyContext(mq)
        status: ConsumeConcurrentlyStatus | None = None
        try:
            status = self.listener(msgs, context)
        except Exception:  # the user's listener: a failure means RECONSUME_LATER
            log.exception("consumeMessage exception, Group: %s %s", self.consumer.group, mq)
        if status is None:
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            log.warning("processQueue is dropped without process consume result. messageQueue=%s", mq)
            return
        self.process_consume_result(status, context, msgs, pq, mq)

    def process_consume_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                               msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if not msgs:
            return
        # ackIndex: the last message consumed; RECONSUME_LATER means none of the batch was.
        success = status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        ack_index = min(context.ack_index, len(msgs) - 1) if success else -1
        done = list(msgs)
        if self.consumer.message_model is MessageModel.BROADCASTING:
            for msg in msgs[ack_index + 1:]:
                log.warning("BROADCASTING, the message consume failed, drop it, %s", msg.msg_id)
        else:
            failed_back: list[MessageExt] = []
            for msg in msgs[ack_index + 1:]:
                if not self.consumer.send_message_back(msg, context.delay_level_when_next_consume, mq.broker_name):
                    msg.reconsume_times += 1
                    failed_back.append(msg)
            if failed_back:
                done = [m for m in msgs if all(m is not f for f in failed_back)]
                self._submit_later(failed_back, pq, mq)
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, True)
