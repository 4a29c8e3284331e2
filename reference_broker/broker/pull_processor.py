"""This module owns PULL_MESSAGE (11): checks, the store read, the status → code mapping, long polling and
the piggy-backed offset commit (broker/.../processor/PullMessageProcessor.java, 4.9.8).

| GetMessageStatus                          | response code                                           |
|-------------------------------------------|---------------------------------------------------------|
| FOUND                                     | SUCCESS (body = the raw commit-log records, back to back)|
| MESSAGE_WAS_REMOVING, NO_MATCHED_MESSAGE  | PULL_RETRY_IMMEDIATELY                                  |
| NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE | PULL_OFFSET_MOVED if the request offset ≠ 0, else PULL_NOT_FOUND |
| OFFSET_FOUND_NULL, OFFSET_OVERFLOW_ONE    | PULL_NOT_FOUND                                          |
| OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL   | PULL_OFFSET_MOVED                                       |

A PULL_NOT_FOUND with the suspend flag is held (``pull_hold``) and re-executed once woken, without the
suspend flag and without committing the offset again — as executeRequestWhenWakeup does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from reference_broker.broker.client_manager import SubscriptionData
from reference_broker.broker.consumer_filter import (
    ConsumerFilterData,
    build,
    commit_log_filter,
    consume_queue_filter,
    is_tag_type,
)
from reference_broker.common.perm import is_readable
from reference_broker.common.route_data import MASTER_ID
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response
from reference_broker.remoting.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    BadRequest,
    field,
    int_field,
)
from reference_broker.store.config import BrokerRole
from reference_broker.store.status import AT_QUEUE_END, GetMessageStatus

if TYPE_CHECKING:
    from reference_broker.broker.broker_config import BrokerConfig
    from reference_broker.broker.client_manager import ConsumerManager
    from reference_broker.broker.consumer_offset_manager import ConsumerOffsetManager
    from reference_broker.broker.pull_hold import PullRequestHoldService
    from reference_broker.broker.subscription_group import SubscriptionGroupManager
    from reference_broker.broker.topic_config import TopicConfigManager
    from reference_broker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# FAQUrl.suggestTodo: a line of its own (4.9.8's remarks, as harness/wire_diff.py compares them).
FAQ: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def suggest_which_broker_id(slave_read_enable: bool, suggest_pulling_from_slave: bool,
                            which_broker_when_consume_slowly: int, group_broker_id: int) -> int:
    """PullMessageProcessor.processRequest (4.9.8): with slaveReadEnable, a reader far behind
    (suggestPullingFromSlave) is sent to whichBrokerWhenConsumeSlowly and any other to the group's brokerId;
    without it always the master (MixAll.MASTER_ID), on a master and on a slave alike. A slave with
    slaveReadEnable=false sets PULL_RETRY_IMMEDIATELY first, but the status's code overwrites it: it serves the
    pull (observed on 4.9.8)."""
    if not slave_read_enable:
        return MASTER_ID
    return which_broker_when_consume_slowly if suggest_pulling_from_slave else group_broker_id


class PullMessageProcessor:
    """Given what it uses: the store, the topic and group tables, the consumers' subscriptions, the offset
    table, the broker's configuration, and the long-polling service (``hold``: None until the broker started)."""

    def __init__(self, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 consumers: ConsumerManager, offsets: ConsumerOffsetManager, broker_config: BrokerConfig,
                 hold: Callable[[], PullRequestHoldService | None]) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.config = broker_config
        self.hold = hold

    def handle(self, ctx: object, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        """The answer at once, or — for a pull to hold — an awaitable answered when it is woken."""
        peer = getattr(ctx, "peer", "?")
        try:
            result = self.process(cmd, peer, allow_suspend=True)
        except BadRequest as exc:
            log.warning("bad pull request from %s: %s", peer, exc)
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        if isinstance(result, RemotingCommand):
            return result
        return self._held(cmd, peer, result)

    async def _held(self, cmd: RemotingCommand, peer: str, wait: Awaitable[str]) -> RemotingCommand:
        await wait
        try:
            answer = self.process(cmd, peer, allow_suspend=False)
        except BadRequest as exc:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        assert isinstance(answer, RemotingCommand)  # without the suspend flag nothing is held
        return answer

    def process(self, cmd: RemotingCommand, peer: str, allow_suspend: bool) -> RemotingCommand | Awaitable[str]:
        """The response, or the hold service's future when the request is held (then re-run it)."""
        bc = self.config
        group = field(cmd, "consumerGroup")
        topic = field(cmd, "topic")
        queue_id = int_field(cmd, "queueId")
        offset = int_field(cmd, "queueOffset")
        max_nums = int_field(cmd, "maxMsgNums")
        sys_flag = int_field(cmd, "sysFlag")
        commit_offset = int_field(cmd, "commitOffset", 0)
        suspend_ms = int_field(cmd, "suspendTimeoutMillis", 0)
        sub_version = int_field(cmd, "subVersion", 0)

        if not is_readable(bc.broker_permission):
            return create_response(cmd, ResponseCode.NO_PERMISSION,
                                   f"the broker[{bc.broker_ip1}] pulling message is forbidden")
        sgc = self.groups.find_subscription_group_config(group)
        if sgc is None:
            return create_response(cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group [{group}] does not exist, {FAQ}")
        if not sgc.consume_enable:
            return create_response(cmd, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        has_suspend = bool(sys_flag & PULL_FLAG_SUSPEND)
        has_commit = bool(sys_flag & PULL_FLAG_COMMIT_OFFSET)
        has_sub = bool(sys_flag & PULL_FLAG_SUBSCRIPTION)
        tc = self.topics.select_topic_config(topic)
        if tc is None:
            log.error("the topic %s not exist, consumer: %s", topic, peer)
            return create_response(cmd, ResponseCode.TOPIC_NOT_EXIST,
                                   f"topic[{topic}] not exist, apply first please! {FAQ}")
        if not is_readable(tc.perm):
            return create_response(cmd, ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                   f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                   f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{peer}]")
        sub: SubscriptionData | None
        filter_data: ConsumerFilterData | None = None
        if has_sub:
            expression_type = cmd.ext_fields.get("expressionType")
            try:
                sub = SubscriptionData.build_typed(topic, cmd.ext_fields.get("subscription"), expression_type,
                                                   sub_version)
            except ValueError:
                log.warning("Parse the consumer's subscription[%s] failed, group: %s",
                            cmd.ext_fields.get("subscription"), group)
                return create_response(cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                       "parse the consumer's subscription failed")
            if not is_tag_type(sub.expression_type):
                # None when it does not compile: 4.9.8 then serves the pull unfiltered (consumer_filter.py)
                filter_data = build(topic, group, sub.sub_string, sub.expression_type, sub_version)
        else:
            cgi = self.consumers.table.get(group)
            if cgi is None:
                return create_response(cmd, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                       "the consumer's group info not exist" + FAQ)
            if not sgc.consume_broadcast_enable and cgi.message_model == "BROADCASTING":
                return create_response(cmd, ResponseCode.NO_PERMISSION,
                                       f"the consumer group[{group}] can not consume by broadcast way")
            sub = cgi.subscriptions.get(topic)
            if sub is None:
                return create_response(cmd, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                       "the consumer's subscription not exist" + FAQ)
            if sub.sub_version < sub_version:
                return create_response(cmd, ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                       "the consumer's subscription not latest")
            if not is_tag_type(sub.expression_type):
                filter_data = self.consumers.filters.get(topic, group)
                if filter_data is None:
                    return create_response(cmd, ResponseCode.FILTER_DATA_NOT_EXIST,
                                           "The broker's consumer filter data is not exist!Your expression may be "
                                           "wrong!")
                if filter_data.client_version < sub_version:
                    return create_response(cmd, ResponseCode.FILTER_DATA_NOT_LATEST,
                                           "the consumer's consumer filter data not latest")
        if not is_tag_type(sub.expression_type) and not bc.enable_property_filter:
            return create_response(cmd, ResponseCode.SYSTEM_ERROR,
                                   f"The broker does not support consumer to filter message by {sub.expression_type}")
        matches = None if (sub.sub_string == "*" or not sub.code_set) else sub.matches_tags_code
        record_filter = commit_log_filter(filter_data)
        ext_filter = consume_queue_filter(filter_data, self.consumers.filters.bloom, bc.enable_calc_filter_bit_map)

        result = self.store.get_message(group, topic, queue_id, offset, max_nums, matches, record_filter, ext_filter)
        timeout_ms = suspend_ms if bc.long_polling_enable else bc.short_polling_time_mills
        hold = self.hold()
        may_hold = allow_suspend and has_suspend and timeout_ms > 0 and hold is not None
        if not may_hold and result.status in AT_QUEUE_END and self.store.wait_dispatched():
            # A pull that will not be held, at the end of its queue while records are written but not yet
            # dispatched (dispatch may idle up to dispatchIdleIntervalMillis): a client that sent, then pulls, gets
            # its message. A pull that may be held does not wait here, on the event loop: the records' arrival
            # wakes it (get_message has nudged dispatch).
            result = self.store.get_message(group, topic, queue_id, offset, max_nums, matches, record_filter,
                                            ext_filter)
        ext = {
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
            "suggestWhichBrokerId": str(suggest_which_broker_id(bc.slave_read_enable, result.suggest_pulling_from_slave,
                                                                sgc.which_broker_when_consume_slowly, sgc.broker_id)),
        }
        status = result.status
        if status is GetMessageStatus.FOUND:
            code = ResponseCode.SUCCESS
        elif status in (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE):
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
            if offset != 0:
                code = ResponseCode.PULL_OFFSET_MOVED
                log.info("the broker store no queue data, fix the request offset %d to %d, Topic: %s QueueId: %d "
                         "Consumer Group: %s", offset, result.next_begin_offset, topic, queue_id, group)
            else:
                code = ResponseCode.PULL_NOT_FOUND
        elif status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
            code = ResponseCode.PULL_NOT_FOUND
        else:  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL
            code = ResponseCode.PULL_OFFSET_MOVED
            log.info("the request offset: %d over flow badly or too small, broker max offset: %d, consumer: %s",
                     offset, result.max_offset, peer)

        # storeOffsetEnable: computed and applied on the first execution, even if the request is then held.
        if allow_suspend and has_commit and self.store.config.broker_role is not BrokerRole.SLAVE:
            self.offsets.commit_offset(peer, group, topic, queue_id, commit_offset)

        if code == ResponseCode.PULL_NOT_FOUND and may_hold and hold is not None:
            return hold.suspend(topic, queue_id, offset, timeout_ms / 1000, matches)
        body = b"".join(result.messages) if code == ResponseCode.SUCCESS else b""
        # response.setRemark(getMessageResult.getStatus().name()), FOUND included (4.9.8; harness/wire_diff.py)
        return create_response(cmd, code, status.name, ext, body)
