"""This module owns rewinding a consumer group by time at the broker: INVOKE_BROKER_TO_RESET_OFFSET (222) from an
admin tool, and the RESET_CONSUMER_CLIENT_OFFSET (220) requests it sends to the group's live consumers
(broker/.../processor/AdminBrokerProcessor.resetOffset and broker/.../client/net/Broker2Client.resetOffset,
4.9.8).

For each writable queue of the topic on this broker: the group's committed offset (the group must have one
for every queue, else SYSTEM_ERROR "THe consumer group <G> not exist"), and the offset of the message stored
nearest the timestamp (ConsumeQueue.getOffsetInQueueByTime; timestamp -1 means the queue's max offset;
negative answers become 0). The new offset is that one when ``isForce`` or when it is before the committed
offset, else the committed offset stays. The table goes to every live consumer of the group (oneway, client
version V3_0_7_SNAPSHOT or later) and back to the caller. With no live consumer the answer is
CONSUMER_NOT_ONLINE and nothing changes here — mqadmin then rewinds the stored offsets itself
(tools/admin.py ``reset_offset_by_time``, as ResetOffsetByTimeOldCommand does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from reference_broker.common import reset_offset_body
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_request, create_response
from reference_broker.remoting.headers import BadRequest, field, int_field

if TYPE_CHECKING:
    from reference_broker.broker.broker_config import BrokerConfig
    from reference_broker.broker.client_manager import ConsumerManager
    from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
    from reference_broker.broker.topic_config import TopicConfigManager
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# MQVersion.Version.V3_0_7_SNAPSHOT.ordinal(): older clients cannot take a reset (4.9.8 refuses the request).
RESET_MIN_CLIENT_VERSION: Final = 28
# MQVersion.Version's first 28 names, for the refusal's remark (getVersionDesc).
_OLD_VERSIONS: Final = (
    "V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1", "V3_0_0_BETA1", "V3_0_0_BETA2", "V3_0_0_BETA3", "V3_0_0_BETA4",
    "V3_0_0_BETA5", "V3_0_0_BETA6_SNAPSHOT", "V3_0_0_BETA6", "V3_0_0_BETA7_SNAPSHOT", "V3_0_0_BETA7",
    "V3_0_0_BETA8_SNAPSHOT", "V3_0_0_BETA8", "V3_0_0_BETA9_SNAPSHOT", "V3_0_0_BETA9", "V3_0_0_FINAL",
    "V3_0_1_SNAPSHOT", "V3_0_1", "V3_0_2_SNAPSHOT", "V3_0_2", "V3_0_3_SNAPSHOT", "V3_0_3", "V3_0_4_SNAPSHOT",
    "V3_0_4", "V3_0_5_SNAPSHOT", "V3_0_5", "V3_0_6_SNAPSHOT", "V3_0_6")


def reset_table(queue_ids: range, committed: Callable[[int], int], by_time: Callable[[int], int],
                force: bool) -> dict[int, int] | None:
    """queueId → new offset (Broker2Client.resetOffset's loop); None when a queue has no committed offset."""
    out = {}
    for queue_id in queue_ids:
        consumer_offset = committed(queue_id)
        if consumer_offset == -1:
            return None
        target = by_time(queue_id)
        if target < 0:
            log.warning("reset offset is invalid. queueId=%d, timeStampOffset=%d", queue_id, target)
            target = 0
        out[queue_id] = target if force or target < consumer_offset else consumer_offset
    return out


class ResetOffsetProcessor:
    """Given what it uses: the store (offsets by time), the topic and offset tables, the consumers' channels,
    the broker's name, and ``spawn`` (the broker's fire-and-forget runner, for the oneway requests)."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 consumers: ConsumerManager, broker_config: BrokerConfig,
                 spawn: Callable[[Coroutine[Any, Any, Any]], None]) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.config = broker_config
        self.spawn = spawn

    def handle(self, ctx: object, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return self.reset_offset(cmd)
        except BadRequest as exc:
            log.warning("bad reset-offset request from %s: %s", getattr(ctx, "peer", "?"), exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))

    def reset_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = field(cmd, "topic")
        group = field(cmd, "group")
        timestamp = int_field(cmd, "timestamp")
        force = cmd.ext_fields.get("isForce", "false").lower() == "true"
        for_c = cmd.language == "CPP"  # AdminBrokerProcessor: a C++ caller gets ResetOffsetBodyForC
        log.info("[reset-offset] reset offset started. topic=%s, group=%s, timestamp=%d, isForce=%s",
                 topic, group, timestamp, force)
        tc = self.topics.select_topic_config(topic)
        if tc is None:
            remark = f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
            log.error(remark)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, remark)
        store = self.store
        store.wait_dispatched()  # the queues' ends cover what was sent before (store/reput.py)

        def by_time(queue_id: int) -> int:
            if timestamp == -1:
                return store.get_max_offset_in_queue(topic, queue_id)
            return store.get_offset_in_queue_by_time(topic, queue_id, timestamp)

        table = reset_table(range(tc.write_queue_nums), lambda q: self.offsets.query_offset(group, topic, q),
                            by_time, force)
        if table is None:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
        broker_name = self.config.broker_name
        offsets = {(topic, broker_name, q): offset for q, offset in table.items()}
        body = reset_offset_body.encode_for_c(offsets) if for_c else reset_offset_body.encode(offsets)
        cgi = self.consumers.table.get(group)
        if cgi is None or not cgi.channels:
            remark = (f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                      f"Timestamp: {timestamp}")
            log.error(remark)
            return create_response(cmd, ResponseCode.CONSUMER_NOT_ONLINE, remark)
        for channel, info in list(cgi.channels.items()):
            if info.version < RESET_MIN_CLIENT_VERSION:
                desc = _OLD_VERSIONS[info.version] if info.version >= 0 else str(info.version)
                return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                       f"the client does not support this feature. version={desc}")
            request = create_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {
                "topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "false"}, body)
            request.flag |= 2  # oneway (RPC_ONEWAY)
            send = getattr(channel, "send", None)
            if send is not None and not getattr(channel, "closed", False):
                self.spawn(send(request))
                log.info("[reset-offset] reset offset success. topic=%s, group=%s, clientId=%s",
                         topic, group, info.client_id)
        return create_response(cmd, ResponseCode.SUCCESS, body=reset_offset_body.encode(offsets))
