"""This module owns the write side of the broker: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310),
SEND_BATCH_MESSAGE (320) and CONSUMER_SEND_MSG_BACK (36)
(broker/.../processor/SendMessageProcessor.java and AbstractSendMessageProcessor.java, 4.9.8).

The order of checks and the remark texts follow msgCheck; put results map to response codes as
handlePutMessageResult does (FLUSH_DISK_TIMEOUT and the slave codes mean *stored*). The store call runs on
the event loop and returns a pending put: ready at once (ASYNC_FLUSH, or a message that does not wait), else
completed by the store's group-commit thread (or the HA reader) once its durability conditions hold, the
answers crossing back to the loop a batch at a time (loop_handoff.py), so no thread waits per message.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, NamedTuple

from reference_broker.broker import topic_config as tcm
from reference_broker.broker.loop_handoff import LoopHandoff
from reference_broker.broker.persisted_reply import reply_when_persisted
from reference_broker.broker.transaction import half_message
from reference_broker.common import message as mc
from reference_broker.common import names
from reference_broker.common import record as rec
from reference_broker.common.perm import PERM_READ, PERM_WRITE, is_writeable
from reference_broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from reference_broker.remoting.command import FRAME_PREFIX, RemotingCommand, create_response, json_dumps
from reference_broker.remoting.headers import SEND_V1_KEYS, BadRequest, bad_names, field, int_field, int_of
from reference_broker.remoting.later_reply import LaterReply
from reference_broker.store.commit_log import EncodedBatch
from reference_broker.store.durability import PendingPut
from reference_broker.store.status import PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from reference_broker.broker.broker_config import BrokerConfig
    from reference_broker.broker.subscription_group import SubscriptionGroupManager
    from reference_broker.broker.topic_config import TopicConfigManager
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# bytes: a response frame the processor encoded itself (see send_ok_frame).
Reply = RemotingCommand | bytes | Awaitable[RemotingCommand | bytes | None] | None

# handlePutMessageResult: status → (code, remark or None)
_PUT_CODES: Final = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}
_PUT_REMARKS: Final = {
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: "create mapped file failed, server is busy or broken.",
    PutMessageStatus.OS_PAGECACHE_BUSY: "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    PutMessageStatus.UNKNOWN_ERROR: "UNKNOWN_ERROR",
}
PROPERTY_CLUSTER: Final = "CLUSTER"  # MessageConst.PROPERTY_CLUSTER, set on every stored message
REJECT_REMARK: Final = "[REJECTREQUEST]system busy, start flow control for a while"  # NettyRemotingAbstract
MAX_RECONSUME_TIMES_DEFAULT: Final = 16  # SubscriptionGroupConfig.retryMaxTimes


def put_result_response(cmd: RemotingCommand, result: PutMessageResult, queue_id: int,
                        msg_id: str | None = None, max_message_size: int = 4 << 20) -> RemotingCommand:
    status = result.status
    code = _PUT_CODES[status]
    remark: str | None
    if status is PutMessageStatus.MESSAGE_ILLEGAL or status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED:
        # the limit is the store's maxMessageSize (4.9.8's text; older versions said "128k" and "32k")
        remark = result.remark or "the message is illegal, maybe msg body or properties length not matched. " \
                 f"msg body length limit {max_message_size}B, msg properties length limit 32KB."
    elif status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        remark = result.remark or "service not available now. "
    else:
        remark = _PUT_REMARKS.get(status)
    if not status.is_stored or result.append is None:
        return create_response(cmd, code, remark)
    append = result.append
    return create_response(cmd, code, remark, {
        "msgId": msg_id if msg_id is not None else append.msg_id,
        "queueId": str(queue_id),
        "queueOffset": str(append.logics_offset),
    })


# Every send answer, refusals included, carries the broker's region and trace switch (SendMessageProcessor
# .sendMessage and sendBatchMessage add them before msgCheck, 4.9.8): the Java client's SendResult reads them.
PROPERTY_MSG_REGION: Final = "MSG_REGION"  # MessageConst.PROPERTY_MSG_REGION
PROPERTY_TRACE_SWITCH: Final = "TRACE_ON"  # MessageConst.PROPERTY_TRACE_SWITCH


def send_fields(config: BrokerConfig) -> dict[str, str]:
    return {PROPERTY_MSG_REGION: config.region_id, PROPERTY_TRACE_SWITCH: "true" if config.trace_on else "false"}


class OkFrame:
    """The answer to a stored send (PUT_OK) with a JSON header, encoded from fixed parts: the bytes that
    encode(create_response(cmd, SUCCESS, None, {"msgId", "queueId", "queueOffset", **send_fields})) writes,
    cut around its four values, for a fifth of the cost (tests/broker/test_send_response.py holds them equal).
    The msgId is hex (comma-joined for a batch) and the rest are numbers: nothing to escape."""

    def __init__(self, fields: dict[str, str]) -> None:
        extra = b"".join(b"," + json_dumps(k) + b":" + json_dumps(v) for k, v in fields.items())
        self.parts = (b'{"code":0,"extFields":{"msgId":"', b'","queueId":"', b'","queueOffset":"',
                      b'"' + extra + b'},"flag":1,"language":"JAVA","opaque":',
                      b',"serializeTypeCurrentRPC":"JSON","version":0}')

    def frame(self, opaque: int, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
        h = self.parts
        header = b"".join((h[0], msg_id.encode(), h[1], b"%d" % queue_id, h[2], b"%d" % queue_offset, h[3],
                           b"%d" % opaque, h[4]))
        return FRAME_PREFIX.pack(4 + len(header), len(header)) + header


def put_result_reply(cmd: RemotingCommand, result: PutMessageResult, queue_id: int, ok: OkFrame,
                     fields: dict[str, str], max_message_size: int = 4 << 20) -> RemotingCommand | bytes:
    """``put_result_response`` with ``fields`` added, or for a plain success its frame, already encoded."""
    append = result.append
    if result.status is PutMessageStatus.PUT_OK and append is not None and cmd.serialize_type is SerializeType.JSON:
        return ok.frame(cmd.opaque, append.msg_id, queue_id, append.logics_offset)
    resp = put_result_response(cmd, result, queue_id, max_message_size=max_message_size)
    resp.ext_fields.update(fields)
    return resp


class _Keys(NamedTuple):
    """Where each send-header field lives: V1 names, or SEND_MESSAGE_V2's letters (read in place, not renamed)."""

    topic: str
    queue_id: str
    sys_flag: str
    default_topic: str
    default_queue_nums: str
    properties: str
    reconsume_times: str
    max_reconsume_times: str
    flag: str
    born_timestamp: str
    batch: str


_V1: Final = _Keys("topic", "queueId", "sysFlag", "defaultTopic", "defaultTopicQueueNums", "properties",
                   "reconsumeTimes", "maxReconsumeTimes", "flag", "bornTimestamp", "batch")
_V2: Final = _Keys(*(SEND_V1_KEYS[name] for name in _V1))


class SendMessageProcessor:
    """Given what it uses: the store it puts into, the topic and group tables, the broker's configuration,
    and how many requests the server holds (``pending_requests``, for the fast-failure remark)."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 broker_config: BrokerConfig, pending_requests: Callable[[], int]) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.config = broker_config
        self.pending_requests = pending_requests
        self.cluster_name = broker_config.broker_cluster_name
        self._cluster_suffix = f"\x02{PROPERTY_CLUSTER}\x01{self.cluster_name}".encode()
        # Topics that passed msgCheck, valid while the topic table's data version stays the same.
        self._checked: dict[str, tcm.TopicConfig] = {}
        self._checked_version = -1
        self._peers: dict[str, tuple[str, int]] = {}
        self._fields = send_fields(broker_config)
        self._ok = OkFrame(self._fields)
        self._max_body = store.config.max_message_size

    # ---- entry ------------------------------------------------------------------------------------
    def handle(self, ctx: object, cmd: RemotingCommand) -> Reply:
        """A response at once when the put completes inline (ASYNC_FLUSH), else an awaitable one. A send that
        auto-created a topic or group answers once topics.json / subscriptionGroup.json hold it, as
        createTopicInSendMessageMethod persists before the send goes on (the write is off the loop)."""
        topics_mark, groups_mark = self.topics.persist_generation, self.groups.persist_generation
        reply = self._handle(ctx, cmd)
        if self.topics.persist_generation == topics_mark and self.groups.persist_generation == groups_mark:
            return reply
        return reply_when_persisted(reply, (self.topics, self.groups), (topics_mark, groups_mark))

    def _handle(self, ctx: object, cmd: RemotingCommand) -> Reply:
        peer = getattr(ctx, "peer", "?")
        try:
            # Flow control (SendMessageProcessor.rejectRequest, BrokerFastFailure), for every code this
            # processor serves, consumer send-backs included. Both checks rarely fire here: sends are handled
            # inline on the broker's one event loop, so there is no send thread-pool queue (the 200 ms age
            # counts from when the loop read the frame; overload shows as TCP back-pressure instead), and the
            # loop never sees its own put holding the writer; only a put from another thread (delay delivery)
            # can be seen holding it for > osPageCacheBusyTimeOutMills.
            if self.store.is_os_page_cache_busy():
                return create_response(cmd, ResponseCode.SYSTEM_BUSY, REJECT_REMARK)
            busy = self._waited_too_long(ctx, cmd)
            if busy is not None:
                return busy
            if cmd.code == RequestCode.CONSUMER_SEND_MSG_BACK:
                return self._send_back(cmd, peer)
            fields = cmd.ext_fields
            # parseRequestHeader: SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE carry the V2 letters; a batch with V1
            # names (which Java would reject) is accepted too.
            code = cmd.code
            k = _V2 if code == RequestCode.SEND_MESSAGE_V2 or (
                code == RequestCode.SEND_BATCH_MESSAGE and _V2.topic in fields) else _V1
            if cmd.code == RequestCode.SEND_BATCH_MESSAGE or fields.get(k.batch) == "true":
                reply = self._send_batch(cmd, fields, k, peer)
            else:
                reply = self._send_one(cmd, fields, k, peer)
            if isinstance(reply, RemotingCommand):  # a refusal; the puts' answers carry them already
                reply.ext_fields.update(self._fields)
            return reply
        except BadRequest as exc:
            log.warning("bad send request from %s: %s", peer, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))

    def _waited_too_long(self, ctx: object, cmd: RemotingCommand) -> RemotingCommand | None:
        """BrokerFastFailure.cleanExpiredRequestInQueue: a send that queued longer than
        waitTimeMillsInSendQueue (200 ms) is refused with SYSTEM_BUSY rather than served late."""
        if not cmd.received_at or not self.config.broker_fast_failure_enable:
            return None
        clock = getattr(ctx, "loop_time", None)  # the server's connection context has it (received_at's clock)
        now = clock() if clock is not None else asyncio.get_running_loop().time()
        waited_ms = (now - cmd.received_at) * 1000
        if waited_ms <= self.config.wait_time_mills_in_send_queue:
            return None
        return create_response(cmd, ResponseCode.SYSTEM_BUSY,
                               f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                               f"{waited_ms:.0f}ms, size of queue: {self.pending_requests()}")

    # ---- checks (AbstractSendMessageProcessor.msgCheck) -----------------------------------------
    def _check(self, cmd: RemotingCommand, topic: str, f: dict[str, str], k: _Keys, queue_id: int,
               peer: str) -> tuple[tcm.TopicConfig | None, RemotingCommand | None]:
        version = self.topics.data_version.counter
        if version != self._checked_version:
            self._checked.clear()
            self._checked_version = version
        tc = self._checked.get(topic)
        if tc is None:
            tc, bad = self._full_check(cmd, topic, f.get(k.default_topic, tcm.AUTO_CREATE_TOPIC_KEY_TOPIC),
                                       int_of(f, k.default_queue_nums, 4), peer)
            if bad is not None:
                return None, bad
            assert tc is not None
            if self.topics.data_version.counter == version:  # not just created: safe to remember
                self._checked[topic] = tc
        queue_max = max(tc.write_queue_nums, tc.read_queue_nums)
        if queue_id >= queue_max:
            return None, create_response(
                cmd, ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {tc} Producer: {peer}")
        return tc, None

    def _full_check(self, cmd: RemotingCommand, topic: str, default_topic: str, default_queue_nums: int,
                    peer: str) -> tuple[tcm.TopicConfig | None, RemotingCommand | None]:
        bc = self.config
        if not is_writeable(bc.broker_permission) and self.topics.is_order_topic(topic):
            return None, create_response(cmd, ResponseCode.NO_PERMISSION,
                                         f"the broker[{bc.broker_ip1}] sending message is forbidden")
        problem = tcm.validate_topic(topic)
        if problem is not None:
            return None, create_response(cmd, ResponseCode.SYSTEM_ERROR, problem)
        if tcm.is_not_allowed_send_topic(topic):
            return None, create_response(cmd, ResponseCode.NO_PERMISSION,
                                         f"Sending message to topic[{topic}] is forbidden.")
        tc = self.topics.select_topic_config(topic)
        if tc is None:
            topic_sys_flag = 0
            if topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_topic_in_send_message_back_method(topic, 1, PERM_READ | PERM_WRITE,
                                                                          topic_sys_flag)
            else:
                tc = self.topics.create_topic_in_send_message_method(topic, default_topic, peer, default_queue_nums,
                                                                     topic_sys_flag)
            if tc is None:
                return None, create_response(cmd, ResponseCode.TOPIC_NOT_EXIST,
                                             f"topic[{topic}] not exist, apply first please! "
                                             "See http://rocketmq.apache.org/docs/faq/ for further details.")
        if not is_writeable(tc.perm):
            # Deliberate difference: 4.9.8's msgCheck never reads the topic's perm and stores the message
            # (docs/findings.md F9); a topic made read-only (e.g. wipeWritePerm before a migration) stays so here.
            return None, create_response(cmd, ResponseCode.NO_PERMISSION,
                                         f"the topic[{topic}] sending message is forbidden")
        return tc, None

    # ---- one message ------------------------------------------------------------------------------
    def _target(self, cmd: RemotingCommand, f: dict[str, str], k: _Keys,
                peer: str) -> tuple[str, int, int, tcm.TopicConfig] | RemotingCommand:
        """The header's topic, queue id and sysflag once msgCheck passed, or the refusal.

        4.9.8 decodes a header without its topic (seen on the wire: python -m harness wire-diff), and msgCheck
        then answers that the topic is blank; a missing number is refused (4.9.8: a NullPointerException's
        text; here the field's name)."""
        topic = f.get(k.topic, "")
        if not topic:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, names.validate_topic(topic))
        queue_id = int_of(f, k.queue_id)
        sys_flag = int_of(f, k.sys_flag)
        tc, bad = self._check(cmd, topic, f, k, queue_id, peer)
        if bad is not None:
            return bad
        assert tc is not None
        return topic, queue_id, sys_flag, tc

    def _born_host(self, peer: str) -> tuple[str, int]:
        """(host, port) of a connection's peer, split once per peer."""
        host = self._peers.get(peer)
        if host is None:
            host = self._peers[peer] = _split_peer(peer)
        return host

    def _send_one(self, cmd: RemotingCommand, f: dict[str, str], k: _Keys, peer: str) -> Reply:
        target = self._target(cmd, f, k, peer)
        if isinstance(target, RemotingCommand):
            return target
        topic, queue_id, sys_flag, tc = target
        if queue_id < 0:
            queue_id = random.randrange(max(1, tc.write_queue_nums))  # randomQueueId
        props_text = f.get(k.properties) or ""
        props = mc.string_to_properties(props_text) if props_text else {}
        reconsume_times = int_of(f, k.reconsume_times, 0)
        if topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):  # handleRetryAndDLQ
            redirected = self._retry_to_dlq(topic, reconsume_times, int_of(f, k.max_reconsume_times, -1))
            if isinstance(redirected, RemotingCommand):
                return create_response(cmd, redirected.code, redirected.remark)
            if redirected is not None:
                topic, queue_id = redirected, 0
        half = props.get(mc.PROPERTY_TRANSACTION_PREPARED) == "true"  # Boolean.parseBoolean
        if half and self.config.reject_transaction_message:
            return create_response(cmd, ResponseCode.NO_PERMISSION,
                                   f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden")
        # 4.9.8 parses the header's properties and re-encodes the map with CLUSTER added. A text that is
        # already what that encoding writes (every client's) is stored as it came, CLUSTER appended; anything
        # else (empty names or values, a name twice, CLUSTER itself, stray separators) is re-encoded from the
        # map, so the stored pairs are 4.9.8's. Deliberate difference: the pairs keep the client's order where
        # 4.9.8 writes HashMap order.
        keep_text = not props_text or (PROPERTY_CLUSTER not in props and mc.is_canonical(props_text, props))
        props[PROPERTY_CLUSTER] = self.cluster_name
        # 4.9.8 stores no WAIT ("There is no need to store WAIT=true", SendMessageProcessor.sendMessage): it
        # stays in the map, which decides whether the put waits, and leaves the stored text.
        wait = props.get(mc.PROPERTY_WAIT_STORE_MSG_OK)
        if not keep_text:
            props_b = mc.properties_to_bytes(props if wait is None else
                                             {k: v for k, v in props.items() if k != mc.PROPERTY_WAIT_STORE_MSG_OK})
        else:
            if wait is not None:
                props_text = mc.without_pair(props_text, mc.PROPERTY_WAIT_STORE_MSG_OK, wait)
            if props_text:
                props_b = props_text.encode("utf-8", "replace") + self._cluster_suffix
            else:
                props_b = self._cluster_suffix[1:]
        born_host = self._born_host(peer)
        msg = rec.MessageExtBrokerInner(
            topic=topic, body=cmd.body, queue_id=queue_id, flag=int_of(f, k.flag), properties=props,
            sys_flag=sys_flag, born_timestamp=int_of(f, k.born_timestamp), born_host=born_host,
            reconsume_times=reconsume_times, properties_bytes=props_b)
        if half:  # TransactionalMessageServiceImpl.prepareMessage: stored as a half message (transaction.py)
            half_message(msg)
        # The answer names the queue the request did (after randomQueueId and a DLQ redirect), not where the
        # store put it: a delayed message goes to SCHEDULE_TOPIC_XXXX's queue delayLevel - 1 (4.9.8's
        # responseHeader.setQueueId(queueIdInt)).
        return self._reply(cmd, self.store.put(msg), queue_id)

    def _reply(self, cmd: RemotingCommand, put: PendingPut, queue_id: int) -> Reply:
        """The answer at once when the put's result is ready (ASYNC_FLUSH, WAIT=false, a refusal), else an
        awaitable one: the store completes the put on its own thread and the answer crosses to the loop."""
        if type(put) is PutMessageResult:  # a put that waits for nothing is its own result (no property calls)
            return put_result_reply(cmd, put, queue_id, self._ok, self._fields, self._max_body)
        if put.done:
            return put_result_reply(cmd, put.result, queue_id, self._ok, self._fields, self._max_body)
        # The answer is built on the thread that completes the put (put_result_reply is pure) and handed to
        # the loop in a LaterReply, which the server answers from: no future, task or coroutine per waiting
        # send (remoting/later_reply.py).
        handoff = _handoff()
        later = LaterReply()
        ok, fields, max_body = self._ok, self._fields, self._max_body

        def done(result: PutMessageResult) -> None:
            try:
                reply = put_result_reply(cmd, result, queue_id, ok, fields, max_body)
            except Exception as exc:  # noqa: BLE001 - handed to the loop: the server answers SYSTEM_ERROR
                handoff.answer(later, False, exc)
                return
            handoff.answer(later, True, reply)

        put.add_done_callback(done)
        return later

    # ---- batches ------------------------------------------------------------------------------------
    def _send_batch(self, cmd: RemotingCommand, f: dict[str, str], k: _Keys, peer: str) -> Reply:
        target = self._target(cmd, f, k, peer)
        if isinstance(target, RemotingCommand):
            return target
        topic, queue_id, sys_flag, tc = target
        if topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
            return create_response(cmd, ResponseCode.MESSAGE_ILLEGAL,
                                   f"batch request does not support retry group {topic}")
        if queue_id < 0:
            queue_id = random.randrange(max(1, tc.write_queue_nums))
        born_host = self._born_host(peer)
        # The body goes to the store as it came; each entry's properties get CLUSTER there
        # (4.9.8: MessageExtBatch keeps the encoded body and MessageExtBatchEncoder writes from it).
        batch = EncodedBatch(topic, queue_id, cmd.body, sys_flag, int_of(f, k.born_timestamp), born_host,
                             self._cluster_suffix)
        return self._reply(cmd, self.store.put_batch(batch), queue_id)

    # ---- retry and DLQ ------------------------------------------------------------------------------
    def _retry_to_dlq(self, topic: str, reconsume_times: int, max_reconsume: int) -> str | RemotingCommand | None:
        """handleRetryAndDLQ for a producer sending to %RETRY%group: past the limit, to %DLQ%group."""
        group = topic[len(mc.RETRY_GROUP_TOPIC_PREFIX):]
        sgc = self.groups.find_subscription_group_config(group)
        if sgc is None:
            return create_response(RemotingCommand(0), ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group not exist, {group} "
                                   "See http://rocketmq.apache.org/docs/faq/ for further details.")
        limit = max_reconsume if max_reconsume >= 0 else sgc.retry_max_times
        if reconsume_times >= limit:
            dlq = self.topics.create_dlq_topic(group)
            return dlq.topic_name
        return None

    def _send_back(self, cmd: RemotingCommand, peer: str) -> Reply:
        """SendMessageProcessor.asyncConsumerSendMsgBack (4.9.8)."""
        group = field(cmd, "group")
        offset = int_field(cmd, "offset")
        delay_level = int_field(cmd, "delayLevel", 0)
        origin_topic = cmd.ext_fields.get("originTopic")
        origin_msg_id = cmd.ext_fields.get("originMsgId")
        bad = bad_names(cmd, group=group)  # not checked by 4.9.8, whose dispatch then stops (common/names.py)
        if bad is not None:
            return bad
        sgc = self.groups.find_subscription_group_config(group)
        if sgc is None:
            return create_response(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group not exist, {group} "
                                   "See http://rocketmq.apache.org/docs/faq/ for further details.")
        bc = self.config
        if not is_writeable(bc.broker_permission):
            return create_response(cmd, ResponseCode.NO_PERMISSION,
                                   f"the broker[{bc.broker_ip1}] sending message is forbidden")
        if sgc.retry_queue_nums <= 0:  # the message is dropped, successfully (RocketMQ's rule)
            return create_response(cmd, ResponseCode.SUCCESS)
        new_topic = tcm.retry_topic(group)
        queue_id = random.randrange(sgc.retry_queue_nums)
        tc = self.topics.create_retry_topic(group, sgc.retry_queue_nums)
        if not is_writeable(tc.perm):
            return create_response(cmd, ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is "
                                                                    "forbidden")
        msg_ext = self.store.look_message_by_offset(offset)
        if msg_ext is None:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        props = dict(msg_ext.properties)
        if mc.PROPERTY_RETRY_TOPIC not in props:
            props[mc.PROPERTY_RETRY_TOPIC] = msg_ext.topic
        props[mc.PROPERTY_WAIT_STORE_MSG_OK] = "false"
        max_reconsume = sgc.retry_max_times
        if cmd.version >= 0 and "maxReconsumeTimes" in cmd.ext_fields:  # V3_4_9 and later send it
            max_reconsume = int_field(cmd, "maxReconsumeTimes")
        reconsume = msg_ext.reconsume_times
        if reconsume >= max_reconsume or delay_level < 0:
            new_topic = tcm.dlq_topic(group)
            queue_id = 0
            dlq = self.topics.create_dlq_topic(group)
            if not is_writeable(dlq.perm):
                return create_response(cmd, ResponseCode.NO_PERMISSION,
                                       f"the topic[{new_topic}] sending message is forbidden")
            # Known RocketMQ failure (apache/rocketmq #2724): a DELAY left on the message sends it through
            # SCHEDULE_TOPIC_XXXX once more before the DLQ. Clearing it goes straight to the DLQ.
            props.pop(mc.PROPERTY_DELAY_TIME_LEVEL, None)
        else:
            if delay_level == 0:
                delay_level = 3 + reconsume
            props[mc.PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        if mc.PROPERTY_ORIGIN_MESSAGE_ID not in props:
            # 4.9.8: a blank originMsgId falls back to the looked-up message's getMsgId(), which on the broker
            # is the offset id (MessageDecoder.decode builds no client id); the C++ client sends none
            props[mc.PROPERTY_ORIGIN_MESSAGE_ID] = origin_msg_id or msg_ext.offset_msg_id
        del origin_topic  # RocketMQ logs it; the retry topic property already names the origin
        msg = rec.MessageExtBrokerInner(
            topic=new_topic, body=msg_ext.body, queue_id=queue_id, flag=msg_ext.flag, properties=props,
            sys_flag=msg_ext.sys_flag, born_timestamp=msg_ext.born_timestamp, born_host=msg_ext.born_host,
            reconsume_times=reconsume + 1)
        put = self.store.put(msg)

        def answer(result: PutMessageResult) -> RemotingCommand:
            if result.status.is_stored:
                return create_response(cmd, ResponseCode.SUCCESS)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, result.status.name)

        if put.done:
            return answer(put.result)

        async def wait() -> RemotingCommand:
            return answer(await _on_loop(put))

        return wait()


def _on_loop(put: PendingPut) -> asyncio.Future[PutMessageResult]:
    """A future of the running loop completed with the put's result, from whichever thread completes it."""
    handoff = _handoff()
    fut: asyncio.Future[PutMessageResult] = handoff.loop.create_future()
    put.add_done_callback(lambda result: handoff.resolve(fut, result))
    return fut


_HANDOFFS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopHandoff] = weakref.WeakKeyDictionary()


def _handoff() -> LoopHandoff:
    """The running loop's hand-off: the answers of puts completed together reach the loop in one wake-up."""
    loop = asyncio.get_running_loop()
    h = _HANDOFFS.get(loop)
    if h is None:
        h = _HANDOFFS[loop] = LoopHandoff(loop)
    return h


def _split_peer(peer: str) -> tuple[str, int]:
    host, _, port = peer.rpartition(":")
    try:
        return (host.strip("[]") or "127.0.0.1"), int(port)
    except ValueError:
        return "127.0.0.1", 0
