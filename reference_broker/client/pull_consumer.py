"""This module owns the pull consumer (DefaultMQPullConsumer / DefaultMQPullConsumerImpl, 4.9.8).

The application picks queues and offsets itself: ``fetch_message_queues`` lists a topic's readable queues,
``pull`` reads from an offset and returns at once, ``pull_block_if_not_found`` lets the broker hold the
request up to ``broker_suspend_max_time_ms`` (20 s) until a message arrives (long polling; the client waits
``consumer_timeout_ms_when_suspend``, 30 s). Tags are re-checked on the client (the broker filters by hash).

Offsets: ``update_consume_offset`` records one in memory; the instance persists it every 5 s and at
shutdown (to the broker in CLUSTERING mode, to a local file in BROADCASTING mode). ``fetch_consume_offset``
reads it back; ``query_broker_offset`` / ``update_broker_offset`` talk to the broker directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from reference_broker.client import admin, protocol
from reference_broker.client.config import ClientConfig
from reference_broker.client.errors import ClientErrorCode, MQClientError
from reference_broker.client.instance import MQClientInstance, get_instance
from reference_broker.client.message import ConsumeType, MessageExt, MessageModel, MessageQueue, PullResult
from reference_broker.client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from reference_broker.client.pull_api import PullFromWhichNode, sys_flag_for
from reference_broker.client.subscription import (
    MessageSelector,
    SubscriptionData,
    build_subscription,
    build_subscription_data,
)
from reference_broker.client.validators import check_group
from reference_broker.remoting.headers import build_pull_sys_flag

log = logging.getLogger(__name__)

BROKER_SUSPEND_MAX_TIME_MS = 20_000  # DefaultMQPullConsumer.brokerSuspendMaxTimeMillis
CONSUMER_TIMEOUT_MS_WHEN_SUSPEND = 30_000  # consumerTimeoutMillisWhenSuspend
CONSUMER_PULL_TIMEOUT_MS = 10_000  # consumerPullTimeoutMillis
PULL_BATCH_MAX = 32


class PullConsumer:
    """DefaultMQPullConsumer. ``client_config`` replaces ``namesrv_addr`` and ``instance_name`` when given;
    ``registered_topics`` are announced in heartbeats (registerTopics); pulled topics are added."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        instance_name: str = "DEFAULT",
        message_model: MessageModel = MessageModel.CLUSTERING,
        registered_topics: Iterable[str] = (),
        broker_suspend_max_time_ms: int = BROKER_SUSPEND_MAX_TIME_MS,
        consumer_timeout_ms_when_suspend: int = CONSUMER_TIMEOUT_MS_WHEN_SUSPEND,
        consumer_pull_timeout_ms: int = CONSUMER_PULL_TIMEOUT_MS,
        offset_store_dir: Path | str | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        check_group(group)
        self.group = group
        self.config = client_config or ClientConfig(namesrv_addr, instance_name)
        self.message_model = message_model
        self.registered_topics = set(registered_topics)
        self.broker_suspend_max_time_ms = broker_suspend_max_time_ms
        self.consumer_timeout_ms_when_suspend = consumer_timeout_ms_when_suspend
        self.consumer_pull_timeout_ms = consumer_pull_timeout_ms
        self.offset_store_dir = offset_store_dir
        self._instance: MQClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        self._pull_from_which_node = PullFromWhichNode()

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._instance is not None:
            return
        instance = get_instance(self.config)
        if self.message_model is MessageModel.BROADCASTING:
            store: OffsetStore = LocalFileOffsetStore(instance.client_id, self.group, self.offset_store_dir)
        else:
            store = RemoteBrokerOffsetStore(instance, self.group)
        store.load()
        self.offset_store = store
        instance.register_consumer(self.group, self)
        instance.start()
        self._instance = instance
        for topic in self.registered_topics:
            try:
                instance.update_topic_route(topic)
            except MQClientError as exc:
                log.warning("route of %s: %s", topic, exc)
        instance.send_heartbeat_to_all_brokers()

    def shutdown(self) -> None:
        instance, self._instance = self._instance, None
        if instance is None:
            return
        self.persist_consumer_offset()
        instance.unregister_consumer(self.group)
        instance.shutdown()

    def __enter__(self) -> PullConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _running(self) -> MQClientInstance:
        if self._instance is None:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "The consumer service state not OK", False)
        return self._instance

    # ---- ConsumerInner ----------------------------------------------------------------------

    def subscriptions(self) -> list[SubscriptionData]:
        return [build_subscription_data(t, "*") for t in sorted(self.registered_topics)]

    def consumer_data(self) -> dict[str, object]:
        return protocol.consumer_data(self.group, ConsumeType.CONSUME_ACTIVELY.value, self.message_model.value,
                                      "CONSUME_FROM_LAST_OFFSET", self.subscriptions())

    def do_rebalance(self) -> None:
        """A pull consumer allocates nothing itself (RebalancePullImpl does no queue handling)."""

    def persist_consumer_offset(self) -> None:
        store = self.offset_store
        if store is not None:
            store.persist_all(mq for mq, _ in store.table.items())

    # ---- queues and pulling -----------------------------------------------------------------

    def fetch_message_queues(self, topic: str) -> set[MessageQueue]:
        """fetchSubscribeMessageQueues: every readable queue of the topic, from the name server."""
        instance = self._running()
        if not instance.update_topic_route(topic):
            raise MQClientError(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION,
                                f"Can not find Message Queue for this topic, {topic}")
        self.registered_topics.add(topic)
        return set(instance.subscribe_info(topic) or ())

    def _pull(self, mq: MessageQueue, sub_expression: str | MessageSelector | None, offset: int, max_nums: int,
              block: bool, timeout_s: float | None) -> PullResult:
        if offset < 0:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "offset < 0", False)
        if max_nums <= 0:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, "maxNums <= 0", False)
        instance = self._running()
        try:
            sub = build_subscription(mq.topic, sub_expression)
        except ValueError as exc:
            raise MQClientError(ClientErrorCode.CLIENT_STATE_EXCEPTION, f"parse subscription error: {exc}",
                                False) from None
        self.registered_topics.add(mq.topic)
        sys_flag = build_pull_sys_flag(commit_offset=False, suspend=block, subscription=True)
        if timeout_s is None:
            timeout_s = (self.consumer_timeout_ms_when_suspend if block else self.consumer_pull_timeout_ms) / 1000
        found = self._pull_from_which_node.find(instance, mq)
        addr = found.broker_addr
        cmd = protocol.pull_request(self.group, mq, sub.sub_string, sub.expression_type, sub.sub_version, offset,
                                    max_nums, sys_flag_for(sys_flag, found), 0, self.broker_suspend_max_time_ms)
        result, body = protocol.process_pull_response(instance.invoke(addr, cmd, timeout_s), addr)
        self._pull_from_which_node.update(mq, result.suggest_which_broker_id)
        return protocol.finish_pull_result(result, body, mq, sub)

    def pull(self, mq: MessageQueue, sub_expression: str | MessageSelector | None, offset: int,
             max_nums: int = PULL_BATCH_MAX, timeout_s: float | None = None) -> PullResult:
        """Read from ``offset`` without waiting (NO_NEW_MSG when nothing is there); ``sub_expression`` is a
        tag expression or a MessageSelector (DefaultMQPullConsumer.pull(mq, MessageSelector, ...))."""
        return self._pull(mq, sub_expression, offset, max_nums, False, timeout_s)

    def pull_block_if_not_found(self, mq: MessageQueue, sub_expression: str | MessageSelector | None, offset: int,
                                max_nums: int = PULL_BATCH_MAX, timeout_s: float | None = None) -> PullResult:
        """Long polling: the broker answers when a message arrives or after broker_suspend_max_time_ms."""
        return self._pull(mq, sub_expression, offset, max_nums, True, timeout_s)

    # ---- offsets ----------------------------------------------------------------------------

    def _store(self) -> OffsetStore:
        self._running()
        assert self.offset_store is not None
        return self.offset_store

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Record the next offset to consume; persisted every 5 s and at shutdown."""
        self._store().update_offset(mq, offset, False)

    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = False) -> int:
        """The recorded offset (-1 if none; -2 if the broker could not be asked)."""
        read = ReadOffsetType.READ_FROM_STORE if from_store else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        return self._store().read_offset(mq, read)

    def query_broker_offset(self, mq: MessageQueue) -> int:
        """QUERY_CONSUMER_OFFSET: MQBrokerError (code QUERY_NOT_FOUND, 22) when the group has none."""
        store = self._store()
        if isinstance(store, RemoteBrokerOffsetStore):
            return store.fetch_from_broker(mq)
        return RemoteBrokerOffsetStore(self._running(), self.group).fetch_from_broker(mq)

    def update_broker_offset(self, mq: MessageQueue, offset: int, oneway: bool = False) -> None:
        """UPDATE_CONSUMER_OFFSET now (RocketMQ sends it oneway; ``oneway=False`` waits for the answer)."""
        RemoteBrokerOffsetStore(self._running(), self.group).update_to_broker(mq, offset, oneway)

    def max_offset(self, mq: MessageQueue) -> int:
        return admin.max_offset(self._running(), mq)

    def min_offset(self, mq: MessageQueue) -> int:
        return admin.min_offset(self._running(), mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return admin.search_offset(self._running(), mq, timestamp_ms)

    def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return admin.earliest_msg_store_time(self._running(), mq)

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[MessageExt]:
        return admin.query_message(self._running(), topic, key, max_num, begin_ms, end_ms)

    def view_message(self, offset_msg_id: str) -> MessageExt:
        return admin.view_message(self._running(), offset_msg_id)
