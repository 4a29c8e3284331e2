"""This module owns the push consumer (DefaultMQPushConsumer / DefaultMQPushConsumerImpl, 4.9.8).

The application subscribes to topics and registers a listener; the consumer does the rest:

- ``rebalance`` decides which queues this client owns (``allocate_strategy``, AVG by default) and where
  each starts (``compute_pull_from_where``);
- one long-polling pull per owned queue is always outstanding: the instance's pull worker sends it
  asynchronously (suspend flag, the broker holds it up to 15 s; the client waits 30 s), and on the answer
  buffers the messages in the queue's ProcessQueue, hands them to the consume service and pulls again.
  Flow control waits 50 ms while a queue buffers more than ``pull_threshold_for_queue`` messages (1000)
  or ``pull_threshold_size_for_queue_mib`` (100 MiB), or, consuming concurrently, spans more than
  ``consume_concurrently_max_span`` (2000) offsets; any error waits 3 s;
- the consume service runs the listener on ``consume_thread_max`` threads (``consume_concurrently`` or
  ``consume_orderly``);
- offsets go to the broker every 5 s, at shutdown and with each pull (the commitOffset flag), or to a local
  file in BROADCASTING mode (``offset_store``).

In CLUSTERING mode the consumer also subscribes to ``%RETRY%<group>``, where the broker redelivers the
messages a listener asked to consume later. Threads only (no asyncio), so gevent's monkey-patching works.

``post_subscription_when_pull`` (false, as in RocketMQ) leaves the subscription out of each pull: the broker
uses the one from the heartbeat, which must therefore arrive first (it is sent before the first pull). A pull
answered SUBSCRIPTION_NOT_EXIST / NOT_LATEST (a restarted broker forgot the client) triggers a heartbeat at
once rather than at the next 30 s tick (our addition).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Final

from reference_broker.client import admin, protocol
from reference_broker.client.allocate import AllocateAveragely, AllocateStrategy
from reference_broker.client.config import ClientConfig
from reference_broker.client.consume_concurrently import ConcurrentListener, ConsumeMessageConcurrentlyService
from reference_broker.client.consume_orderly import ConsumeMessageOrderlyService, OrderlyListener
from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.instance import MQClientInstance, get_instance
from reference_broker.client.message import (
    ConsumeFromWhere,
    ConsumeType,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullStatus,
)
from reference_broker.client.offset_store import (
    LocalFileOffsetStore,
    NullOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from reference_broker.client.process_queue import ProcessQueue
from reference_broker.client.pull_api import PullFromWhichNode, filter_server_for, sys_flag_for
from reference_broker.client.rebalance import PullRequest, RebalanceImpl, pull_from_where
from reference_broker.client.scheduler import Scheduler
from reference_broker.client.subscription import (
    EXPRESSION_TAG,
    MessageSelector,
    SubscriptionData,
    build_class_filter_subscription,
    build_subscription,
    build_subscription_data,
)
from reference_broker.client.validators import check_group, check_topic
from reference_broker.common import message as mc
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand
from reference_broker.remoting.errors import RemotingError
from reference_broker.remoting.headers import build_pull_sys_flag

RESET_OFFSET_WAIT_S: Final = 10.0  # MQClientInstance.resetOffset: TimeUnit.SECONDS.sleep(10)

log = logging.getLogger(__name__)

# DefaultMQPushConsumerImpl constants (4.9.8).
PULL_TIME_DELAY_S_WHEN_EXCEPTION: Final = 3.0
PULL_TIME_DELAY_S_WHEN_FLOW_CONTROL: Final = 0.05
PULL_TIME_DELAY_S_WHEN_SUSPEND: Final = 1.0
BROKER_SUSPEND_MAX_TIME_MS: Final = 15_000
CONSUMER_TIMEOUT_S_WHEN_SUSPEND: Final = 30.0
OFFSET_MOVED_FIX_DELAY_S: Final = 10.0
SEND_BACK_TIMEOUT_S: Final = 5.0


class PushConsumer:
    """DefaultMQPushConsumer. ``client_config`` (intervals, instance name) replaces ``namesrv_addr`` and
    ``instance_name`` when given. The consume pool grows on demand up to ``consume_thread_max``;
    ``consume_thread_min`` is kept for RocketMQ's signature (its pool, with an unbounded queue, never grows
    past the minimum either). ``max_reconsume_times`` -1 means 16 when consuming concurrently and unlimited
    when consuming orderly."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        instance_name: str = "DEFAULT",
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        allocate_strategy: AllocateStrategy | None = None,
        consume_thread_min: int = 20,
        consume_thread_max: int = 20,
        pull_batch_size: int = 32,
        pull_interval_ms: int = 0,
        consume_message_batch_max_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        suspend_current_queue_time_millis: int = 1000,
        post_subscription_when_pull: bool = False,
        await_termination_s_when_shutdown: float = 0.0,
        offset_store_dir: Path | str | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        check_group(group)
        if not 1 <= consume_message_batch_max_size <= 1024:
            raise ValueError("consumeMessageBatchMaxSize Out of range [1, 1024]")
        if not 1 <= pull_batch_size <= 1024:
            raise ValueError("pullBatchSize Out of range [1, 1024]")
        self.group = group
        self.config = client_config or ClientConfig(namesrv_addr, instance_name)
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        # DefaultMQPushConsumer.consumeTimestamp: half an hour before start unless given.
        self.consume_timestamp_ms = consume_timestamp_ms
        self.allocate_strategy: AllocateStrategy = allocate_strategy or AllocateAveragely()
        self.consume_thread_min = consume_thread_min
        self.consume_thread_max = max(consume_thread_max, consume_thread_min)
        self.pull_batch_size = pull_batch_size
        self.pull_interval_s = pull_interval_ms / 1000
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue_mib = pull_threshold_size_for_queue_mib
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times_setting = max_reconsume_times
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.post_subscription_when_pull = post_subscription_when_pull
        # MQClientInstance.resetOffset waits 10 s after dropping the queues, for consumption in flight.
        self.reset_offset_wait_s = RESET_OFFSET_WAIT_S
        self.await_termination_s_when_shutdown = await_termination_s_when_shutdown
        self.offset_store_dir = offset_store_dir
        self._subscriptions: dict[str, SubscriptionData] = {}
        self._concurrent_listener: ConcurrentListener | None = None
        self._orderly_listener: OrderlyListener | None = None
        self._instance: MQClientInstance | None = None
        self._consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService | None = None
        self.offset_store: OffsetStore = NullOffsetStore()
        self._rebalance: RebalanceImpl | None = None
        self._pull_from_which_node = PullFromWhichNode()
        self.paused = False
        self.stopped = False

    # ---- configuration ----------------------------------------------------------------------

    def subscribe(self, topic: str, sub_expression: str | MessageSelector = "*", *,
                  filter_source: str | None = None, filter_class_name: str = "PythonMessageFilter") -> None:
        """Subscribe to ``topic`` with a tag expression ("*" or "TagA || TagB") or a MessageSelector
        (``MessageSelector.by_sql("a > 5")``); allowed after start too.

        With ``filter_source`` (Python source defining ``def match(message) -> bool``) the subscription is in
        class-filter mode (RocketMQ <= 4.2's FilterServer): the source is uploaded to the filter servers of the
        topic's brokers and this topic's pulls go to them; the expression is then ignored."""
        check_topic(topic)
        try:
            if filter_source is not None:
                self._subscriptions[topic] = build_class_filter_subscription(topic, filter_source,
                                                                             filter_class_name)
            else:
                self._subscriptions[topic] = build_subscription(topic, sub_expression)
        except ValueError as exc:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, f"subscription exception: {exc}",
                                False) from None
        instance = self._instance
        if instance is not None:
            instance.update_topic_route(topic)
            instance.send_heartbeat_to_all_brokers()
            instance.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)

    def register_message_listener(self, listener: ConcurrentListener) -> None:
        """A listener(msgs, context) -> ConsumeConcurrentlyStatus, run on any consume thread."""
        self._concurrent_listener = listener
        self._orderly_listener = None

    def register_orderly_listener(self, listener: OrderlyListener) -> None:
        """A listener(msgs, context) -> ConsumeOrderlyStatus, one thread per queue at a time, in offset order."""
        self._orderly_listener = listener
        self._concurrent_listener = None

    @property
    def consume_orderly(self) -> bool:
        return self._orderly_listener is not None

    @property
    def max_reconsume_times(self) -> int:
        """getMaxReconsumeTimes: -1 means 16 for concurrent consumers; orderly ones keep -1 (unbounded)."""
        if self.max_reconsume_times_setting == -1 and not self.consume_orderly:
            return 16
        return self.max_reconsume_times_setting

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._instance is not None:
            return
        if self._concurrent_listener is None and self._orderly_listener is None:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "messageListener is null", False)
        if self.consume_timestamp_ms is None:
            self.consume_timestamp_ms = int(time.time() * 1000) - 30 * 60 * 1000
        if self.message_model is MessageModel.CLUSTERING:
            retry = mc.RETRY_GROUP_TOPIC_PREFIX + self.group
            self._subscriptions.setdefault(retry, build_subscription_data(retry, "*"))  # copySubscription
        instance = get_instance(self.config)
        if self.message_model is MessageModel.BROADCASTING:
            self.offset_store = LocalFileOffsetStore(instance.client_id, self.group, self.offset_store_dir)
        else:
            self.offset_store = RemoteBrokerOffsetStore(instance, self.group)
        self.offset_store.load()
        self._rebalance = RebalanceImpl(self, instance)
        if self._orderly_listener is not None:
            self._consume_service = ConsumeMessageOrderlyService(self, self._orderly_listener)
        else:
            assert self._concurrent_listener is not None
            self._consume_service = ConsumeMessageConcurrentlyService(self, self._concurrent_listener)
        instance.register_consumer(self.group, self)
        self._instance = instance
        self.stopped = False
        instance.start()
        self._consume_service.start()
        for topic in self._subscriptions:  # updateTopicSubscribeInfoWhenSubscriptionChanged
            try:
                instance.update_topic_route(topic)
            except MQClientError as exc:
                log.warning("route of %s: %s", topic, exc)
        try:
            self.check_client_in_broker()
        except MQClientError:
            self.shutdown()  # 4.9.8 leaves the consumer half started; this one is stopped again
            raise
        instance.send_heartbeat_to_all_brokers()
        instance.rebalance_immediately()

    def check_client_in_broker(self) -> None:
        """MQClientInstance.checkClientInBroker: each non-TAG subscription is checked by a broker serving its
        topic (CHECK_CLIENT_CONFIG) before the first heartbeat; MQBrokerError when that broker refuses it (no
        enablePropertyFilter: SYSTEM_ERROR; a malformed selector: SUBSCRIPTION_PARSE_FAILED, the parser's
        message as the remark)."""
        instance = self._running()
        for sub in self._subscriptions.values():
            if sub.expression_type == EXPRESSION_TAG:
                continue
            addr = instance.find_broker_addr_by_topic(sub.topic)
            if addr is None:
                continue
            resp = instance.invoke(addr, protocol.check_client_config_request(instance.client_id, self.group, sub))
            if resp.code != ResponseCode.SUCCESS:
                raise MQBrokerError(resp.code, resp.remark, addr)

    def shutdown(self) -> None:
        """Stop consuming, persist offsets, unregister (DefaultMQPushConsumerImpl.shutdown)."""
        instance = self._instance
        if instance is None:
            return
        self.stopped = True
        if self._consume_service is not None:
            self._consume_service.shutdown(self.await_termination_s_when_shutdown)
        self.persist_consumer_offset()
        if self.consume_orderly and self.message_model is MessageModel.CLUSTERING and self._rebalance is not None:
            self._rebalance.unlock_all(False)
        instance.unregister_consumer(self.group)
        self._instance = None
        instance.shutdown()
        if self._rebalance is not None:
            self._rebalance.destroy()

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def suspend(self) -> None:
        """Pause pulling (pullMessage waits 1 s and looks again)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """MQClientInstance.resetOffset (RESET_CONSUMER_CLIENT_OFFSET from a broker, 4.9.8): pause, drop the
        topic's queues named in ``offsets``, wait ``reset_offset_wait_s`` for consumption in flight, set each
        queue's offset and hand the queue back (its offset persisted to the broker), resume. The next
        rebalance — asked for at once here; 4.9.8 waits for the next one, up to 20 s — takes the queues
        again and pulls from the new offsets. Blocks: run it off the connection's reader."""
        rebalance = self._rebalance
        if rebalance is None or self.stopped:
            return
        self.suspend()
        try:
            for mq, pq in rebalance.process_queues():
                if mq.topic == topic and mq in offsets:
                    pq.dropped = True
                    pq.clear()
            time.sleep(self.reset_offset_wait_s)
            for mq, pq in rebalance.process_queues():
                offset = offsets.get(mq)
                if mq.topic == topic and offset is not None:
                    self.offset_store.update_offset(mq, offset, False)
                    rebalance.remove_unnecessary_message_queue(mq, pq)
                    rebalance.forget(mq)
            log.info("[reset-offset] group %s, topic %s: %s", self.group, topic,
                     {str(mq): o for mq, o in sorted(offsets.items())})
        finally:
            self.resume()
        if self._instance is not None:
            self._instance.rebalance_immediately()

    def _running(self) -> MQClientInstance:
        if self._instance is None:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "The consumer service state not OK", False)
        return self._instance

    @property
    def rebalance(self) -> RebalanceImpl:
        if self._rebalance is None:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "The consumer is not started", False)
        return self._rebalance

    def instance_scheduler(self) -> Scheduler:
        return self._running().scheduler

    @property
    def client_id(self) -> str:
        return self._running().client_id

    # ---- ConsumerInner / RebalanceOwner -----------------------------------------------------

    def subscriptions(self) -> list[SubscriptionData]:
        return list(self._subscriptions.values())

    def subscription_table(self) -> dict[str, SubscriptionData]:
        return self._subscriptions

    def consumer_data(self) -> dict[str, object]:
        return protocol.consumer_data(self.group, ConsumeType.CONSUME_PASSIVELY.value, self.message_model.value,
                                      self.consume_from_where.value, self.subscriptions())

    def do_rebalance(self) -> None:
        if self._rebalance is not None and not self.stopped:
            self._rebalance.do_rebalance()

    def persist_consumer_offset(self) -> None:
        if self._rebalance is not None:
            self.offset_store.persist_all(mq for mq, _pq in self._rebalance.process_queues())

    def process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        """The queues this consumer owns now (for tests and monitoring)."""
        if self._rebalance is None:
            return {}
        return dict(self._rebalance.process_queues())

    def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """RebalancePushImpl.computePullFromWhere: the stored offset, else by consume_from_where; -1 = not now."""
        instance = self._running()
        timestamp = self.consume_timestamp_ms if self.consume_timestamp_ms is not None else 0
        try:
            return pull_from_where(
                self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE), self.consume_from_where,
                mq.topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX), lambda: admin.max_offset(instance, mq),
                lambda: admin.search_offset(instance, mq, timestamp))
        except MQClientError as exc:
            log.warning("computePullFromWhere %s failed: %s", mq, exc)
            return -1

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for request in requests:
            self.execute_pull_request_immediately(request)

    # ---- pulling ----------------------------------------------------------------------------

    def execute_pull_request_immediately(self, request: PullRequest) -> None:
        instance = self._instance
        if instance is not None and not self.stopped:
            instance.pull_service.execute(lambda: self.pull_message(request))

    def execute_pull_request_later(self, request: PullRequest, delay_s: float) -> None:
        instance = self._instance
        if instance is not None and not self.stopped:
            instance.scheduler.schedule(delay_s, lambda: self.execute_pull_request_immediately(request))

    def pull_message(self, request: PullRequest) -> None:
        """DefaultMQPushConsumerImpl.pullMessage: flow control, then one asynchronous long-polling pull."""
        pq = request.process_queue
        mq = request.message_queue
        if pq.dropped or self.stopped:
            return
        pq.last_pull_ts = time.monotonic()
        if self.paused:
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_SUSPEND)
            return
        if pq.msg_count > self.pull_threshold_for_queue or pq.msg_size_mib > self.pull_threshold_size_for_queue_mib:
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_FLOW_CONTROL)
            return
        if not self.consume_orderly:
            if pq.max_span() > self.consume_concurrently_max_span:
                self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_FLOW_CONTROL)
                return
        elif not pq.locked:
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)
            return
        elif not request.previously_locked:
            offset = self.compute_pull_from_where(mq)
            if offset < 0:
                self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)
                return
            request.previously_locked = True
            request.next_offset = offset
        sub = self._subscriptions.get(mq.topic)
        if sub is None:
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)
            return
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_offset = self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
        class_filter = sub.class_filter_mode
        sub_expression = sub.sub_string if self.post_subscription_when_pull and not class_filter else None
        sys_flag = build_pull_sys_flag(commit_offset > 0, True, sub_expression is not None, class_filter)
        try:
            instance = self._running()
            found = self._pull_from_which_node.find(instance, mq)
            addr = found.broker_addr
            if class_filter:
                addr = filter_server_for(instance, mq, addr)
            cmd = protocol.pull_request(self.group, mq, sub_expression, sub.expression_type, sub.sub_version,
                                        request.next_offset, self.pull_batch_size, sys_flag_for(sys_flag, found),
                                        max(commit_offset, 0),
                                        BROKER_SUSPEND_MAX_TIME_MS)

            def on_response(response: RemotingCommand | None, error: RemotingError | None) -> None:
                # On the reader thread: hand the work to the pull worker at once.
                instance.pull_service.execute(lambda: self._on_pull(request, sub, addr, response, error))

            instance.invoke_async(addr, cmd, on_response, CONSUMER_TIMEOUT_S_WHEN_SUSPEND)
        except MQClientError as exc:
            log.warning("pullKernelImpl exception, %s: %s", mq, exc)
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)

    def _on_pull(self, request: PullRequest, sub: SubscriptionData, addr: str, response: RemotingCommand | None,
                 error: RemotingError | None) -> None:
        """PullCallback.onSuccess / onException, on the pull worker."""
        mq = request.message_queue
        pq = request.process_queue
        if self.stopped:
            return
        if pq.dropped:
            # A late answer for a queue given up (rebalanced away, or rewound by resetOffset): its offset
            # correction must not move the offset the queue's next holder starts from. (4.9.8 still applies
            # correctTagsOffset here; it is harmless there only while the queue stays dropped.)
            return
        if response is None:
            if not mq.topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
                log.warning("execute the pull request exception, %s: %s", mq, error)
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)
            return
        try:
            result, body = protocol.process_pull_response(response, addr)
            result = protocol.finish_pull_result(result, body, mq, sub)
        except MQBrokerError as exc:
            log.warning("pull %s from %s failed: %s", mq, addr, exc)
            if exc.code in (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST,
                            ResponseCode.FILTER_DATA_NOT_EXIST, ResponseCode.FILTER_DATA_NOT_LATEST) or (
                    sub.class_filter_mode and "not registered" in (exc.remark or "")):
                # (a restarted filter server has not got the filter yet: the heartbeat uploads it)
                self._running().heartbeat_soon()
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)
            return
        except ValueError as exc:  # the records in the body do not decode
            log.warning("pull %s from %s failed: %s", mq, addr, exc)
            self.execute_pull_request_later(request, PULL_TIME_DELAY_S_WHEN_EXCEPTION)
            return
        self._pull_from_which_node.update(mq, result.suggest_which_broker_id)
        status = result.pull_status
        if status is PullStatus.FOUND:
            prev = request.next_offset
            request.next_offset = result.next_begin_offset
            msgs = result.msg_found_list
            if not msgs:
                self.execute_pull_request_immediately(request)
                return
            if result.next_begin_offset < prev or msgs[0].queue_offset < prev:
                log.warning("[BUG] pull message result maybe data wrong, nextBeginOffset: %d firstMsgOffset: %d "
                            "prevRequestOffset: %d", result.next_begin_offset, msgs[0].queue_offset, prev)
            dispatch = pq.put_messages(msgs)
            assert self._consume_service is not None
            self._consume_service.submit_consume_request(msgs, pq, mq, dispatch)
            if self.pull_interval_s > 0:
                self.execute_pull_request_later(request, self.pull_interval_s)
            else:
                self.execute_pull_request_immediately(request)
        elif status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            request.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset: nothing buffered, so everything before is consumed
                self.offset_store.update_offset(mq, request.next_offset, True)
            self.execute_pull_request_immediately(request)
        else:  # OFFSET_ILLEGAL
            log.warning("the pull request offset illegal, %s, next %d", mq, result.next_begin_offset)
            request.next_offset = result.next_begin_offset
            pq.dropped = True
            self._running().scheduler.schedule(OFFSET_MOVED_FIX_DELAY_S, lambda: self._fix_offset(request))

    def _fix_offset(self, request: PullRequest) -> None:
        mq = request.message_queue
        self.offset_store.update_offset(mq, request.next_offset, False)
        self.offset_store.persist(mq)
        if self._rebalance is not None:
            self._rebalance.remove_process_queue(mq)
        log.warning("fix the pull request offset, %s", request)

    # ---- retry ------------------------------------------------------------------------------

    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        """CONSUMER_SEND_MSG_BACK to the master of the message's broker (or its store host); True if accepted."""
        instance = self._instance
        if instance is None:
            return False
        addr = instance.find_broker_addr_in_publish(broker_name) if broker_name else None
        if addr is None:
            addr = f"{msg.store_host[0]}:{msg.store_host[1]}"
        try:
            response = instance.invoke(addr, protocol.send_back_request(msg, self.group, delay_level,
                                                                        self.max_reconsume_times),
                                       SEND_BACK_TIMEOUT_S)
        except MQClientError as exc:
            log.warning("sendMessageBack %s to %s failed: %s", msg.msg_id, addr, exc)
            return False
        if response.code != 0:
            log.warning("sendMessageBack %s refused: %s", msg.msg_id, protocol.broker_error(response, addr))
            return False
        return True

    # ---- queries ----------------------------------------------------------------------------

    def fetch_subscribe_message_queues(self, topic: str) -> set[MessageQueue]:
        instance = self._running()
        instance.update_topic_route(topic)
        return set(instance.subscribe_info(topic) or ())
