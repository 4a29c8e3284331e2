"""This module owns the client-facing bookkeeping requests: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), QUERY/UPDATE_CONSUMER_OFFSET (14/15), LOCK/UNLOCK_BATCH_MQ (41/42),
CHECK_CLIENT_CONFIG (46)
(broker/.../processor/ClientManageProcessor.java, ConsumerManageProcessor.java, AdminBrokerProcessor
lockBatchMQ/unlockBatchMQ, 4.9.8), and the NOTIFY_CONSUMER_IDS_CHANGED (40) requests the broker sends back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from reference_broker.broker.client_manager import ClientChannelInfo, MessageQueueKey
from reference_broker.broker.config_manager import ConfigManager
from reference_broker.broker.consumer_filter import FilterCompileError, compile_expression, is_tag_type
from reference_broker.broker.heartbeat import ConsumerData, HeartbeatData, HeartbeatLimits, parse_heartbeat
from reference_broker.broker.persisted_reply import config_marks, reply_when_persisted
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, create_response, json_dumps, json_loads
from reference_broker.remoting.headers import BadRequest, bad_names, field, int_field
from reference_broker.remoting.server import ConnectionContext

if TYPE_CHECKING:
    from reference_broker.broker.broker_config import BrokerConfig
    from reference_broker.broker.client_manager import ConsumerManager, ProducerManager, RebalanceLockManager
    from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
    from reference_broker.broker.subscription_group import SubscriptionGroupManager
    from reference_broker.broker.topic_config import TopicConfigManager
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# Consumer groups a heartbeat registers per pass of the event loop: a slice costs a few milliseconds, so other
# connections wait at most that long behind even the largest heartbeat. Our choice (RocketMQ uses a thread).
HEARTBEAT_SLICE: Final = 50


@runtime_checkable
class Channel(Protocol):
    """What the broker needs of a client connection (ConnectionContext in production)."""

    @property
    def closed(self) -> bool: ...

    async def send(self, cmd: RemotingCommand) -> None: ...

    def close(self) -> None: ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _json_body(cmd: RemotingCommand) -> dict[str, Any]:
    try:
        obj = json_loads(cmd.body)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("the request body must be a JSON object")
    return obj


class ClientManageProcessor:
    """Given what it uses: the store (offset queries), the topic, group and offset tables, the client
    registries, and ``spawn`` (the broker's fire-and-forget runner on its loop, for notifications)."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, consumers: ConsumerManager, producers: ProducerManager,
                 locks: RebalanceLockManager, spawn: Callable[[Coroutine[Any, Any, Any]], None],
                 broker_config: BrokerConfig | None = None) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.consumers = consumers
        self.producers = producers
        self.locks = locks
        self.spawn = spawn
        self.broker_config = broker_config  # enablePropertyFilter (None: off)
        self.heartbeat_limits = HeartbeatLimits()

    def handle(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        try:
            code = cmd.code
            if code == RequestCode.HEART_BEAT:
                return self.heart_beat(ctx, cmd)
            if code == RequestCode.UNREGISTER_CLIENT:
                return self.unregister_client(ctx, cmd)
            if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
                return self.consumer_list(cmd)
            if code == RequestCode.QUERY_CONSUMER_OFFSET:
                return self.query_consumer_offset(cmd)
            if code == RequestCode.UPDATE_CONSUMER_OFFSET:
                return self.update_consumer_offset(ctx, cmd)
            if code == RequestCode.LOCK_BATCH_MQ:
                return self.lock_batch(cmd)
            if code == RequestCode.UNLOCK_BATCH_MQ:
                return self.unlock_batch(cmd)
            if code == RequestCode.CHECK_CLIENT_CONFIG:
                return self.check_client_config(cmd)
            return create_response(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                   f" request type {cmd.code} not supported")
        except (BadRequest, KeyError, ValueError, TypeError) as exc:
            log.warning("bad request (code %d) from %s: %s", cmd.code, ctx.peer, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")

    # ---- heartbeat ---------------------------------------------------------------------------------
    def heart_beat(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        """ClientManageProcessor.heartBeat. A heartbeat with more than one slice of consumer groups is served
        slice by slice, yielding to the loop in between (RocketMQ serves heartbeats on their own executor so
        they never hold up sends; here they share the loop). One that created groups or retry topics answers
        once they are on disk (see persisted_reply.py)."""
        data = parse_heartbeat(_json_body(cmd), self.heartbeat_limits)
        managers = (self.groups, self.topics)
        marks = config_marks(managers)
        ctx.attributes["client_id"] = data.client_id
        now = _now_ms()
        if len(data.consumers) <= HEARTBEAT_SLICE:
            self._register_consumers(ctx, cmd, data.client_id, data.consumers, now)
            self._register_producers(ctx, cmd, data, now)
            return reply_when_persisted(create_response(cmd, ResponseCode.SUCCESS), managers, marks)
        return self._heart_beat_sliced(ctx, cmd, data, now, managers, marks)

    async def _heart_beat_sliced(self, ctx: ConnectionContext, cmd: RemotingCommand, data: HeartbeatData, now: int,
                                 managers: tuple[ConfigManager, ...], marks: tuple[int, ...]) -> RemotingCommand:
        consumers = data.consumers
        for start in range(0, len(consumers), HEARTBEAT_SLICE):
            if start:
                await asyncio.sleep(0)  # let other connections' requests in
                if ctx.closed:  # its registrations were dropped on close; do not register it again
                    return create_response(cmd, ResponseCode.SYSTEM_ERROR, "connection closed")
            self._register_consumers(ctx, cmd, data.client_id, consumers[start:start + HEARTBEAT_SLICE], now)
        self._register_producers(ctx, cmd, data, now)
        reply = reply_when_persisted(create_response(cmd, ResponseCode.SUCCESS), managers, marks)
        return await reply if inspect.isawaitable(reply) else reply

    def _register_consumers(self, ctx: ConnectionContext, cmd: RemotingCommand, client_id: str,
                            consumers: list[ConsumerData], now: int) -> None:
        for c in consumers:
            sgc = self.groups.find_subscription_group_config(c.group)
            if sgc is not None:
                # ClientManageProcessor: a clustering group gets its retry topic at its first heartbeat.
                self.topics.create_retry_topic(c.group, sgc.retry_queue_nums)
            changed = self.consumers.register(c.group, ClientChannelInfo(ctx, client_id, cmd.language,
                                                                             cmd.version, now),
                                                  c.consume_type, c.message_model, c.consume_from_where,
                                                  c.subscriptions, now)
            if changed and (sgc is None or sgc.notify_consumer_ids_changed_enable):
                self.notify_consumer_ids_changed(c.group)

    def _register_producers(self, ctx: ConnectionContext, cmd: RemotingCommand, data: HeartbeatData,
                            now: int) -> None:
        info = ClientChannelInfo(ctx, data.client_id, cmd.language, cmd.version, now)
        for group in data.producer_groups:
            self.producers.register(group, info)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Broker2Client.notifyConsumerIdsChanged: a oneway request to every member of the group."""
        for channel in self.consumers.channels(group):
            if isinstance(channel, Channel) and not channel.closed:
                req = create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})
                req.flag |= 2  # oneway (RPC_ONEWAY)
                self.spawn(channel.send(req))

    def unregister_client(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand:
        """unregisterClient: drop this connection from the producer group and the consumer group named in the
        header. ConsumerManager.unregisterConsumer then tells the group's remaining members (CHANGE) whenever
        the group is known, unless the group's notifyConsumerIdsChangedEnable is off."""
        producer_group = cmd.ext_fields.get("producerGroup")
        consumer_group = cmd.ext_fields.get("consumerGroup")
        if producer_group:
            self.producers.unregister(producer_group, ctx)
        if consumer_group:
            sgc = self.groups.find_subscription_group_config(consumer_group)
            known = consumer_group in self.consumers.table
            self.consumers.unregister(consumer_group, ctx)
            if known and (sgc is None or sgc.notify_consumer_ids_changed_enable):
                self.notify_consumer_ids_changed(consumer_group)
        return create_response(cmd, ResponseCode.SUCCESS)

    def on_channel_close(self, ctx: ConnectionContext) -> None:
        self.producers.channel_closed(ctx)
        for group in self.consumers.channel_closed(ctx):
            self.notify_consumer_ids_changed(group)

    def scan_not_active(self) -> None:
        now = _now_ms()
        self.producers.scan_not_active(now)
        for group, channel in self.consumers.scan_not_active(now):
            if isinstance(channel, Channel):
                channel.close()
            self.notify_consumer_ids_changed(group)

    # ---- consumers -----------------------------------------------------------------------------------
    def consumer_list(self, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "consumerGroup")
        ids = self.consumers.client_ids(group)
        if not ids:
            log.warning("getConsumerGroupInfo failed, %s", group)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps({"consumerIdList": ids}))

    def query_consumer_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        """ConsumerManageProcessor.queryConsumerOffset, including the "in memory → 0" rule (4.9.8; see #334)."""
        group = field(cmd, "consumerGroup")
        topic = field(cmd, "topic")
        queue_id = int_field(cmd, "queueId")
        offset = self.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return create_response(cmd, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        store = self.store
        min_offset = store.get_min_offset_in_queue(topic, queue_id)
        # A group with no offset reads from 0 while message 0 is still in memory — the well-known surprise
        # that makes a new CONSUME_FROM_LAST_OFFSET group consume a young topic from its start.
        if min_offset <= 0 and not self._in_disk(topic, queue_id, 0):
            return create_response(cmd, ResponseCode.SUCCESS, None, {"offset": "0"})
        return create_response(cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group "
                                                                  "consumer boot first")

    def _in_disk(self, topic: str, queue_id: int, cq_offset: int) -> bool:
        """checkInDiskByConsumeOffset: is the message at this queue offset beyond the in-memory window?"""
        store = self.store
        phy = store.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)
        if phy < 0:
            return False
        return store.check_in_disk_by_commit_offset(phy, store.get_max_phy_offset())

    def update_consumer_offset(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand:
        group = field(cmd, "consumerGroup")
        topic = field(cmd, "topic")
        # Not checked by 4.9.8: the names become a "topic@group" key of consumerOffset.json.
        bad = bad_names(cmd, topic, group)
        if bad is not None:
            return bad
        self.offsets.commit_offset(
            ctx.peer, group, topic, int_field(cmd, "queueId"), int_field(cmd, "commitOffset"))
        return create_response(cmd, ResponseCode.SUCCESS)

    # ---- filters -------------------------------------------------------------------------------------
    def check_client_config(self, cmd: RemotingCommand) -> RemotingCommand:
        """ClientManageProcessor.checkClientConfig (4.9.8): a TAG subscription (or none) passes; any other
        type needs enablePropertyFilter (SYSTEM_ERROR) and an expression that compiles (SUBSCRIPTION_PARSE_FAILED,
        the remark 4.9.8's exception text). A push consumer asks this before it starts."""
        body = _json_body(cmd)
        sub = body.get("subscriptionData")
        if isinstance(sub, dict):
            expression_type = sub.get("expressionType")
            if is_tag_type(expression_type):
                return create_response(cmd, ResponseCode.SUCCESS)
            if self.broker_config is None or not self.broker_config.enable_property_filter:
                return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                       f"The broker does not support consumer to filter message by {expression_type}")
            expression = sub.get("subString")
            if not isinstance(expression, str):  # 4.9.8: a NullPointerException, whose message is null
                return create_response(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
            try:
                compile_expression(str(expression_type), expression)
            except FilterCompileError as exc:
                log.warning("check client config failed, group %s: %s", body.get("group"), exc)
                return create_response(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.remark)
        return create_response(cmd, ResponseCode.SUCCESS)

    # ---- orderly locks -------------------------------------------------------------------------------
    def _lock_body(self, cmd: RemotingCommand) -> tuple[str, str, list[MessageQueueKey]]:
        body = _json_body(cmd)
        group = str(body["consumerGroup"])
        client_id = str(body["clientId"])
        mqs = [MessageQueueKey.from_json(o) for o in body.get("mqSet") or []]
        return group, client_id, mqs

    def lock_batch(self, cmd: RemotingCommand) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(cmd)
        locked = self.locks.try_lock_batch(group, mqs, client_id, _now_ms())
        return create_response(cmd, ResponseCode.SUCCESS,
                               body=json_dumps({"lockOKMQSet": [mq.to_json() for mq in sorted(locked)]}))

    def unlock_batch(self, cmd: RemotingCommand) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(cmd)
        self.locks.unlock_batch(group, mqs, client_id)
        return create_response(cmd, ResponseCode.SUCCESS)

