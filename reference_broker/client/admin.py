"""This module owns the queue-level queries every consumer can make (MQAdminImpl, 4.9.8): min/max offset,
search by timestamp, earliest store time, query by key and view by offset message id.

Each goes to the master of the queue's broker, refreshing the topic route once if the broker is unknown.
QUERY_MESSAGE goes to every broker of the topic; the broker matches keys by hash only, so the client keeps
the messages whose UNIQ_KEY equals the key or whose KEYS contain it (MQAdminImpl.queryMessage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference_broker.client import protocol
from reference_broker.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from reference_broker.client.message import MessageQueue
from reference_broker.common import message as mc
from reference_broker.common.record import MessageExt, MessageIdError, decode_message_id, decode_messages
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from reference_broker.client.instance import MQClientInstance


def _offset_query(instance: MQClientInstance, mq: MessageQueue, cmd: RemotingCommand,
                  key: str = "offset") -> int:
    addr = instance.broker_addr_for(mq)
    return protocol.offset_from_response(instance.invoke(addr, cmd), addr, key)


def max_offset(instance: MQClientInstance, mq: MessageQueue) -> int:
    """GET_MAX_OFFSET: the queue's next offset (one past the last message)."""
    return _offset_query(instance, mq, protocol.max_offset_request(mq))


def min_offset(instance: MQClientInstance, mq: MessageQueue) -> int:
    return _offset_query(instance, mq, protocol.min_offset_request(mq))


def search_offset(instance: MQClientInstance, mq: MessageQueue, timestamp_ms: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the first message stored at or after the time."""
    return _offset_query(instance, mq, protocol.search_offset_request(mq, timestamp_ms))


def earliest_msg_store_time(instance: MQClientInstance, mq: MessageQueue) -> int:
    return _offset_query(instance, mq, protocol.earliest_msg_store_time_request(mq), "timestamp")


def query_message(instance: MQClientInstance, topic: str, key: str, max_num: int, begin_ms: int,
                  end_ms: int) -> list[MessageExt]:
    """QUERY_MESSAGE on every broker of the topic; messages whose UNIQ_KEY or KEYS match ``key``."""
    route = instance.topic_routes.get(topic)
    if route is None:
        instance.update_topic_route(topic)
        route = instance.topic_routes.get(topic)
    if route is None:
        raise MQClientError(ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION, f"The topic[{topic}] not matched route info")
    found: list[MessageExt] = []
    for bd in route.broker_datas:
        addr = bd.select_broker_addr()
        if addr is None:
            continue
        response = instance.invoke(addr, protocol.query_message_request(topic, key, max_num, begin_ms, end_ms))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            continue
        if response.code != ResponseCode.SUCCESS:
            raise protocol.broker_error(response, addr)
        found.extend(decode_messages(response.body))
    return [m for m in found if m.topic == topic and _key_matches(m, key)]


def _key_matches(msg: MessageExt, key: str) -> bool:
    if msg.properties.get(mc.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key:
        return True
    return key in msg.keys.split(mc.KEY_SEPARATOR)


def view_message(instance: MQClientInstance, offset_msg_id: str) -> MessageExt:
    """VIEW_MESSAGE_BY_ID at the broker address encoded in the id."""
    try:
        host, port, offset = decode_message_id(offset_msg_id)
    except MessageIdError as exc:
        raise MQClientError(ResponseCode.NO_MESSAGE, f"query message by id finished, but no message: {exc}",
                            False) from None
    addr = f"{host}:{port}"
    response = instance.invoke(addr, protocol.view_message_request(offset))
    if response.code != ResponseCode.SUCCESS:
        raise protocol.broker_error(response, addr)
    msgs = decode_messages(response.body)
    if not msgs:
        raise MQBrokerError(ResponseCode.NO_MESSAGE, "query message by id finished, but no message", addr)
    return msgs[0]
