"""This module owns what the client puts on the wire and how it reads the answers (MQClientAPIImpl, 4.9.8).

Sans-IO: functions from arguments to a ``RemotingCommand`` and from a response to a result or an
``MQBrokerError``. The I/O shell (``api``) only sends them. Header field names are in
``reference_broker.remoting.headers``; every value travels as a string, as makeCustomHeaderToNet writes it.

Every request carries ``version`` 409 = MQVersion.Version.V4_9_8.ordinal(): MQClientAPIImpl sets the
rocketmq.remoting.version property to CURRENT_VERSION, and the broker reads e.g. CONSUMER_SEND_MSG_BACK's
maxReconsumeTimes only from clients at V3_4_9 or later. The language is PYTHON (LanguageCode 3).
"""

from __future__ import annotations

from typing import Any, Final

from reference_broker.client.errors import MQBrokerError
from reference_broker.client.message import MessageQueue, PullResult, PullStatus, SendResult, SendStatus
from reference_broker.client.subscription import SubscriptionData
from reference_broker.common import message as mc
from reference_broker.common.crc import crc32
from reference_broker.common.record import MessageExt, decode_messages
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, json_dumps, json_loads, next_opaque

CLIENT_VERSION: Final = 409  # MQVersion.Version.V4_9_8.ordinal()
LANGUAGE: Final = "PYTHON"
DEFAULT_TOPIC: Final = "TBW102"  # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
DEFAULT_TOPIC_QUEUE_NUMS: Final = 4  # DefaultMQProducer.defaultTopicQueueNums

_SEND_STATUS: Final[dict[int, SendStatus]] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
_PULL_STATUS: Final[dict[int, PullStatus]] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def request(code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand(code=code, language=LANGUAGE, version=CLIENT_VERSION, opaque=next_opaque(),
                           ext_fields=ext_fields if ext_fields is not None else {}, body=body)


def broker_error(response: RemotingCommand, addr: str = "") -> MQBrokerError:
    return MQBrokerError(response.code, response.remark, addr)


def encode_properties(props: dict[str, str]) -> str:
    """MessageDecoder.messageProperties2String (4.9.8: no trailing separator)."""
    return "\x02".join([f"{k}\x01{v}" for k, v in props.items()])


# ---- send -------------------------------------------------------------------------------------


def send_request(
    group: str,
    topic: str,
    queue_id: int,
    body: bytes,
    properties: str,
    flag: int = 0,
    *,
    batch: bool = False,
    sys_flag: int = 0,
    born_timestamp: int,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) with SendMessageRequestHeaderV2's one-letter keys.

    maxReconsumeTimes is set only for messages to a retry topic, as sendKernelImpl does; null fields are
    left out, as makeCustomHeaderToNet does.
    """
    ext = {
        "a": group,
        "b": topic,
        "c": DEFAULT_TOPIC,
        "d": "4",
        "e": str(queue_id),
        "f": str(sys_flag),
        "g": str(born_timestamp),
        "h": str(flag),
        "i": properties,
        "j": str(reconsume_times),
        "k": "false",
        "m": "true" if batch else "false",
    }
    if max_reconsume_times is not None:
        ext["l"] = str(max_reconsume_times)
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code=code, language=LANGUAGE, version=CLIENT_VERSION, opaque=next_opaque(),
                           ext_fields=ext, body=body)


def process_send_response(response: RemotingCommand, topic: str, broker_name: str, uniq_id: str,
                          addr: str = "", mq: MessageQueue | None = None) -> SendResult:
    """MQClientAPIImpl.processSendResponse: SUCCESS and the three stored-but-degraded codes give a result;
    anything else is an MQBrokerError. ``mq``, the queue sent to, is reused when the broker kept the queue id."""
    status = _SEND_STATUS.get(response.code)
    if status is None:
        raise broker_error(response, addr)
    ext = response.ext_fields
    try:
        queue_id = int(ext["queueId"])
        queue_offset = int(ext["queueOffset"])
    except (KeyError, ValueError):
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"send response lacks queueId/queueOffset: {ext}",
                            addr) from None
    if mq is None or mq.queue_id != queue_id or mq.topic != topic:
        mq = MessageQueue(topic, broker_name, queue_id)
    return SendResult(status, uniq_id, mq, queue_offset, ext.get("msgId"), ext.get("transactionId"))


# ---- pull -------------------------------------------------------------------------------------


def pull_request(
    group: str,
    mq: MessageQueue,
    sub_expression: str | None,
    expression_type: str,
    sub_version: int,
    offset: int,
    max_nums: int,
    sys_flag: int,
    commit_offset: int,
    suspend_timeout_ms: int,
) -> RemotingCommand:
    """PULL_MESSAGE with PullMessageRequestHeader (pullKernelImpl)."""
    ext = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": str(mq.queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": str(commit_offset),
        "suspendTimeoutMillis": str(suspend_timeout_ms),
        "subVersion": str(sub_version),
        "expressionType": expression_type,
    }
    if sub_expression is not None:
        ext["subscription"] = sub_expression
    return request(RequestCode.PULL_MESSAGE, ext)


def process_pull_response(response: RemotingCommand, addr: str = "") -> tuple[PullResult, bytes]:
    """MQClientAPIImpl.processPullResponse: (result without messages, the raw record bytes)."""
    status = _PULL_STATUS.get(response.code)
    if status is None:
        raise broker_error(response, addr)
    ext = response.ext_fields
    try:
        result = PullResult(status, int(ext["nextBeginOffset"]), int(ext["minOffset"]), int(ext["maxOffset"]),
                            [], int(ext.get("suggestWhichBrokerId", "0")))
    except (KeyError, ValueError):
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"pull response lacks offsets: {ext}", addr) from None
    return result, response.body


def finish_pull_result(result: PullResult, body: bytes, mq: MessageQueue,
                       subscription: SubscriptionData | None) -> PullResult:
    """PullAPIWrapper.processPullResult: decode the records, re-check tags, stamp MIN/MAX_OFFSET."""
    if result.pull_status is not PullStatus.FOUND:
        return result
    msgs: list[MessageExt] = decode_messages(body)
    if subscription is not None:
        msgs = subscription.filter(msgs)
    min_s, max_s = str(result.min_offset), str(result.max_offset)
    for msg in msgs:
        props = msg.properties
        props[mc.PROPERTY_MIN_OFFSET] = min_s
        props[mc.PROPERTY_MAX_OFFSET] = max_s
    result.msg_found_list = msgs
    return result


# ---- offsets ----------------------------------------------------------------------------------


def queue_header(group: str | None, mq: MessageQueue) -> dict[str, str]:
    ext = {"topic": mq.topic, "queueId": str(mq.queue_id)}
    if group is not None:
        ext["consumerGroup"] = group
    return ext


def query_consumer_offset_request(group: str, mq: MessageQueue) -> RemotingCommand:
    return request(RequestCode.QUERY_CONSUMER_OFFSET, queue_header(group, mq))


def update_consumer_offset_request(group: str, mq: MessageQueue, offset: int) -> RemotingCommand:
    ext = queue_header(group, mq)
    ext["commitOffset"] = str(offset)
    return request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)


def offset_from_response(response: RemotingCommand, addr: str = "", key: str = "offset") -> int:
    """The ``offset`` (or ``timestamp``) field of a SUCCESS response; MQBrokerError otherwise (including
    QUERY_NOT_FOUND, which RemoteBrokerOffsetStore turns into -1)."""
    if response.code != ResponseCode.SUCCESS:
        raise broker_error(response, addr)
    try:
        return int(response.ext_fields[key])
    except (KeyError, ValueError):
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"response lacks {key}: {response.ext_fields}",
                            addr) from None


def max_offset_request(mq: MessageQueue) -> RemotingCommand:
    return request(RequestCode.GET_MAX_OFFSET, queue_header(None, mq))


def min_offset_request(mq: MessageQueue) -> RemotingCommand:
    return request(RequestCode.GET_MIN_OFFSET, queue_header(None, mq))


def earliest_msg_store_time_request(mq: MessageQueue) -> RemotingCommand:
    return request(RequestCode.GET_EARLIEST_MSG_STORETIME, queue_header(None, mq))


def search_offset_request(mq: MessageQueue, timestamp_ms: int) -> RemotingCommand:
    ext = queue_header(None, mq)
    ext["timestamp"] = str(timestamp_ms)
    return request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext)


# ---- client management ------------------------------------------------------------------------


def heartbeat_body(client_id: str, producer_groups: list[str], consumers: list[dict[str, Any]]) -> bytes:
    """HeartbeatData as fastjson writes it (keys alphabetical)."""
    return json_dumps({
        "clientID": client_id,
        "consumerDataSet": consumers,
        "producerDataSet": [{"groupName": g} for g in producer_groups],
    })


def consumer_data(group: str, consume_type: str, message_model: str, consume_from_where: str,
                  subscriptions: list[SubscriptionData]) -> dict[str, Any]:
    return {
        "consumeFromWhere": consume_from_where,
        "consumeType": consume_type,
        "groupName": group,
        "messageModel": message_model,
        "subscriptionDataSet": [s.to_json() for s in subscriptions],
        "unitMode": False,
    }


def check_client_config_request(client_id: str, group: str, sub: SubscriptionData) -> RemotingCommand:
    """CHECK_CLIENT_CONFIG (46) with CheckClientRequestBody (MQClientAPIImpl.checkClientInBroker)."""
    body = json_dumps({"clientId": client_id, "group": group, "subscriptionData": sub.to_json()})
    return request(RequestCode.CHECK_CLIENT_CONFIG, {}, body)


def register_message_filter_class_request(group: str, topic: str, class_name: str,
                                          source: bytes) -> RemotingCommand:
    """REGISTER_MESSAGE_FILTER_CLASS (302, MQClientAPIImpl.registerMessageFilterClass, 4.2.0): header
    RegisterMessageFilterClassRequestHeader, classCRC = UtilAll.crc32 of the body."""
    return request(RequestCode.REGISTER_MESSAGE_FILTER_CLASS, {
        "consumerGroup": group, "topic": topic, "className": class_name, "classCRC": str(crc32(source))}, source)


def heartbeat_request(body: bytes) -> RemotingCommand:
    return request(RequestCode.HEART_BEAT, {}, body)


def unregister_client_request(client_id: str, producer_group: str | None,
                              consumer_group: str | None) -> RemotingCommand:
    ext = {"clientID": client_id}
    if producer_group is not None:
        ext["producerGroup"] = producer_group
    if consumer_group is not None:
        ext["consumerGroup"] = consumer_group
    return request(RequestCode.UNREGISTER_CLIENT, ext)


def consumer_list_request(group: str) -> RemotingCommand:
    return request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


def consumer_list_from_response(response: RemotingCommand, addr: str = "") -> list[str]:
    if response.code != ResponseCode.SUCCESS:
        raise broker_error(response, addr)
    try:
        ids = json_loads(response.body)["consumerIdList"] if response.body else []
    except (ValueError, KeyError, TypeError):
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, "bad GetConsumerListByGroupResponseBody", addr) from None
    return [str(i) for i in ids or []]


def route_request(topic: str) -> RemotingCommand:
    return request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


# ---- retry and ordered consumption ------------------------------------------------------------


def send_back_request(msg: MessageExt, group: str, delay_level: int, max_reconsume_times: int) -> RemotingCommand:
    """CONSUMER_SEND_MSG_BACK (ConsumerSendMsgBackRequestHeader)."""
    return request(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(msg.commit_log_offset),
        "group": group,
        "delayLevel": str(delay_level),
        "originMsgId": msg.msg_id,
        "originTopic": msg.topic,
        "unitMode": "false",
        "maxReconsumeTimes": str(max_reconsume_times),
    })


def lock_batch_body(group: str, client_id: str, mqs: list[MessageQueue]) -> bytes:
    """LockBatchRequestBody / UnlockBatchRequestBody."""
    return json_dumps({"clientId": client_id, "consumerGroup": group, "mqSet": [mq.to_json() for mq in mqs]})


def lock_batch_request(group: str, client_id: str, mqs: list[MessageQueue]) -> RemotingCommand:
    return request(RequestCode.LOCK_BATCH_MQ, {}, lock_batch_body(group, client_id, mqs))


def unlock_batch_request(group: str, client_id: str, mqs: list[MessageQueue]) -> RemotingCommand:
    return request(RequestCode.UNLOCK_BATCH_MQ, {}, lock_batch_body(group, client_id, mqs))


def locked_from_response(response: RemotingCommand, addr: str = "") -> set[MessageQueue]:
    """LockBatchResponseBody.lockOKMQSet."""
    if response.code != ResponseCode.SUCCESS:
        raise broker_error(response, addr)
    try:
        items = (json_loads(response.body).get("lockOKMQSet") if response.body else None) or []
        return {MessageQueue.from_json(item) for item in items}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, "bad LockBatchResponseBody", addr) from None


# ---- queries ----------------------------------------------------------------------------------


def query_message_request(topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> RemotingCommand:
    return request(RequestCode.QUERY_MESSAGE, {
        "topic": topic,
        "key": key,
        "maxNum": str(max_num),
        "beginTimestamp": str(begin_ms),
        "endTimestamp": str(end_ms),
    })


def view_message_request(commit_log_offset: int) -> RemotingCommand:
    return request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(commit_log_offset)})
