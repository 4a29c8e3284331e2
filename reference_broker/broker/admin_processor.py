"""This module owns the administrative and lookup requests (broker/.../processor/AdminBrokerProcessor.java and
QueryMessageProcessor.java, 4.9.8): topic and subscription-group admin, queue offsets and times, message
lookups by key and by offset, runtime info, all consumer and delay offsets.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from reference_broker.broker.persisted_reply import config_marks, reply_when_persisted
from reference_broker.broker.subscription_group import group_from_json, group_to_json
from reference_broker.broker.topic_config import TOPIC_FILTER_TYPES, TopicConfig, validate_topic
from reference_broker.common import record as rec
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response, json_dumps, json_loads
from reference_broker.remoting.headers import BadRequest, bad_names, field, int_field
from reference_broker.remoting.server import ConnectionContext
from reference_broker.store.config import BrokerRole

if TYPE_CHECKING:
    from reference_broker.broker.broker_config import BrokerConfig
    from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
    from reference_broker.broker.subscription_group import SubscriptionGroupManager
    from reference_broker.broker.topic_config import TopicConfigManager
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)
NOT_SET_REMARK: Final = "not set any response code"
# AdminBrokerProcessor.validateSlave (4.9.8): a slave's topics and groups are the master's, copied by
# SlaveSynchronize; an update sent to the slave is refused with SYSTEM_ERROR and this remark (seen on 4.9.8).
SLAVE_REFUSES: Final = frozenset({RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
                                  RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP})
SLAVE_REFUSAL_REMARK: Final = ("Can't modify topic or subscription group from slave broker, "
                               "please execute it from master broker.")

CODES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET, RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID,
    RequestCode.GET_BROKER_CONFIG,
)


class AdminProcessor:
    """Given what it uses: the store, the topic, group and offset tables, the broker's configuration, and
    the controller's views of itself (its settings as properties text, its runtime info, the delay offsets)."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, broker_config: BrokerConfig, *,
                 config_properties: Callable[[], str], runtime_info: Callable[[], dict[str, str]],
                 delay_offsets: Callable[[], dict[int, int]]) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.config = broker_config
        self.config_properties = config_properties
        self.runtime_info = runtime_info
        self.delay_offsets = delay_offsets
        # request code -> (the table's data version, its encoded body): see _table_body
        self._tables: dict[int, tuple[dict[str, int], bytes]] = {}

    def _table_body(self, code: int, version: dict[str, int], encode: Callable[[], bytes]) -> bytes:
        """A whole table's body, encoded once per data version. Encoding thousands of topics or groups takes
        milliseconds on the event loop, and a pipelined flood of GET_ALL_TOPIC_CONFIG stalled every other
        client for seconds (found by the fuzzer); 4.9.8 encodes each time, on its admin executor."""
        cached = self._tables.get(code)
        if cached is not None and cached[0] == version:
            return cached[1]
        body = encode()
        self._tables[code] = (version, body)
        return body

    def handle(self, ctx: ConnectionContext, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        managers = (self.topics, self.groups)
        marks = config_marks(managers)
        try:
            # An update answers once the file is written, as AdminBrokerProcessor does, but the write happens
            # on the manager's writer thread: a large table never stalls the loop.
            return reply_when_persisted(self.process(cmd), managers, marks)
        except (BadRequest, KeyError, ValueError, TypeError) as exc:
            log.warning("bad request (code %d) from %s: %s", cmd.code, ctx.peer, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")

    def process(self, cmd: RemotingCommand) -> RemotingCommand:
        store = self.store
        code = cmd.code
        if code in SLAVE_REFUSES and store.config.broker_role is BrokerRole.SLAVE:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, SLAVE_REFUSAL_REMARK)
        if code == RequestCode.UPDATE_AND_CREATE_TOPIC:
            return self._update_topic(cmd)
        if code == RequestCode.DELETE_TOPIC_IN_BROKER:
            topic = field(cmd, "topic")
            self.topics.delete_topic_config(topic)
            self.offsets.clean_offset_by_topic(topic)
            return create_response(cmd, ResponseCode.SUCCESS)
        if code == RequestCode.GET_ALL_TOPIC_CONFIG:
            tcm = self.topics
            return create_response(cmd, ResponseCode.SUCCESS, body=self._table_body(
                code, tcm.data_version.to_json(), lambda: tcm.encode().encode()))
        if code == RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
            cfg = group_from_json(_json(cmd.body), check_ranges=True)
            bad = bad_names(cmd, group=cfg.group_name)
            if bad is not None:
                return bad
            self.groups.update_subscription_group_config(cfg)
            return create_response(cmd, ResponseCode.SUCCESS)
        if code == RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG:
            sgm = self.groups
            return create_response(cmd, ResponseCode.SUCCESS, body=self._table_body(code, sgm.data_version.to_json(), (
                lambda: json_dumps({
                    "subscriptionGroupTable": {k: group_to_json(v) for k, v in sgm.subscription_group_table.items()},
                    "dataVersion": sgm.data_version.to_json()}))))
        if code in (RequestCode.GET_MAX_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP):
            # A client that sent, then asks where the queue ends (a consumer starting from the last offset): the
            # answer covers its sends, though dispatch may be idling (store/reput.py).
            store.wait_dispatched()
        if code == RequestCode.GET_MAX_OFFSET:
            offset = store.get_max_offset_in_queue(field(cmd, "topic"), int_field(cmd, "queueId"))
            return create_response(cmd, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if code == RequestCode.GET_MIN_OFFSET:
            offset = store.get_min_offset_in_queue(field(cmd, "topic"), int_field(cmd, "queueId"))
            return create_response(cmd, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if code == RequestCode.GET_EARLIEST_MSG_STORETIME:
            ts = store.get_earliest_message_time(field(cmd, "topic"), int_field(cmd, "queueId"))
            return create_response(cmd, ResponseCode.SUCCESS, None, {"timestamp": str(ts)})
        if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
            offset = store.get_offset_in_queue_by_time(field(cmd, "topic"), int_field(cmd, "queueId"),
                                                       int_field(cmd, "timestamp"))
            return create_response(cmd, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        if code == RequestCode.GET_BROKER_CONFIG:
            # AdminBrokerProcessor.getBrokerConfig: every setting as a properties text, RocketMQ's key names.
            return create_response(cmd, ResponseCode.SUCCESS, None, {"version": "0"},
                                   self.config_properties().encode())
        if code == RequestCode.GET_BROKER_RUNTIME_INFO:
            return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps({"table": self.runtime_info()}))
        if code == RequestCode.GET_ALL_CONSUMER_OFFSET:
            return create_response(cmd, ResponseCode.SUCCESS,
                                   body=self.offsets.encode().encode())
        if code == RequestCode.GET_ALL_DELAY_OFFSET:
            table = {str(k): v for k, v in sorted(self.delay_offsets().items())}
            return create_response(cmd, ResponseCode.SUCCESS, body=json_dumps({"offsetTable": table}))
        if code == RequestCode.QUERY_MESSAGE:
            return self._query_message(cmd)
        if code == RequestCode.VIEW_MESSAGE_BY_ID:
            offset = int_field(cmd, "offset")
            raw = store.select_one_message_by_offset(offset)
            if raw is None or not _is_record_at(raw, offset):
                return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
            return create_response(cmd, ResponseCode.SUCCESS, body=raw)
        return create_response(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported")

    def _update_topic(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = field(cmd, "topic")
        problem = validate_topic(topic, for_creation=True)
        if problem is not None:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, problem)
        if topic == self.config.broker_cluster_name:  # AdminBrokerProcessor.updateAndCreateTopic
            return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                   f"the topic[{topic}] is conflict with system reserved words.")
        read_q = int_field(cmd, "readQueueNums")
        write_q = int_field(cmd, "writeQueueNums")
        perm = int_field(cmd, "perm")
        if read_q <= 0 or write_q <= 0 or read_q > 1024 or write_q > 1024:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                   f"queue nums must be in [1, 1024], got read {read_q} write {write_q}")
        if perm < 0 or perm > 15:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, f"perm must be in [0, 15], got {perm}")
        filter_type = cmd.ext_fields.get("topicFilterType", "SINGLE_TAG")
        if filter_type not in TOPIC_FILTER_TYPES:
            # CreateTopicRequestHeader.getTopicFilterTypeEnum: TopicFilterType.valueOf throws, so the request
            # fails before anything is stored. Stored, the value made topics.json unloadable at the next start.
            return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                   f"No enum constant org.apache.rocketmq.common.TopicFilterType.{filter_type}")
        tc = TopicConfig(topic, read_q, write_q, perm, filter_type,
                         int_field(cmd, "topicSysFlag", 0), cmd.ext_fields.get("order", "false") == "true")
        self.topics.update_topic_config(tc)
        # RemotingCommand.createResponseCommand's placeholder remark, which updateAndCreateTopic never replaces
        # (4.9.8; seen by harness/wire_diff.py)
        return create_response(cmd, ResponseCode.SUCCESS, NOT_SET_REMARK)

    def _query_message(self, cmd: RemotingCommand) -> RemotingCommand:
        store = self.store
        topic = field(cmd, "topic")
        key = field(cmd, "key")
        max_num = int_field(cmd, "maxNum")
        begin = int_field(cmd, "beginTimestamp")
        end = int_field(cmd, "endTimestamp")
        # QueryMessageProcessor: a unique-key query asks for defaultQueryMaxNum; the store caps at
        # maxMsgsNumBatch.
        if cmd.ext_fields.get("_UNIQUE_KEY_QUERY") == "true":
            max_num = store.config.default_query_max_num
        max_num = min(max_num, store.config.max_msgs_num_batch)
        msgs = store.query_message(topic, key, max_num, begin, end)
        ts, phy = store.index_last_update()
        ext = {"indexLastUpdateTimestamp": str(ts), "indexLastUpdatePhyoffset": str(phy)}
        if not msgs:
            return create_response(cmd, ResponseCode.QUERY_NOT_FOUND,
                                   "can not find message, maybe time range not correct", ext)
        parts = []
        for m in msgs:
            raw = store.select_one_message_by_offset(m.commit_log_offset, m.store_size)
            if raw is not None:
                parts.append(raw)
        return create_response(cmd, ResponseCode.SUCCESS, None, ext, b"".join(parts))


def _is_record_at(raw: bytes, offset: int) -> bool:
    """Whether ``raw`` is the message record that starts at commit-log ``offset``: its magic code and its own
    PHYSICALOFFSET field say so. Deliberately stricter than RocketMQ, whose selectOneMessageByOffset returns
    whatever the four bytes at an arbitrary offset claim as a size (up to a frame no client can read)."""
    if len(raw) < rec.FIXED_PART_V4:
        return False
    magic, = _INT.unpack_from(raw, 4)
    phys, = _LONG.unpack_from(raw, _PHYS_POS)
    return magic in (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2) and phys == offset


_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_PHYS_POS = 28  # TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG (4 bytes each), QUEUEOFFSET (8), PHYSICALOFFSET


def _json(body: bytes) -> Any:
    try:
        return json_loads(body)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
