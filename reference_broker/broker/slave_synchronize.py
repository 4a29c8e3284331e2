"""SlaveSynchronize (broker/.../slave/SlaveSynchronize.java, 4.9.8): a slave copies its master's metadata.

Every 10 s (after 3 s; BrokerController.handleSlaveSynchronize) a slave whose master is known (the name
server's REGISTER_BROKER reply names it, ``masterAddr``) asks it for four tables and takes them over:

| request                            | taken over as                                                       |
|------------------------------------|---------------------------------------------------------------------|
| GET_ALL_TOPIC_CONFIG 21            | the topic table, replaced whole when the master's dataVersion differs |
| GET_ALL_CONSUMER_OFFSET 43         | consumer offsets, per ``topic@group`` (putAll) — but see below      |
| GET_ALL_DELAY_OFFSET 45            | the delay levels' offsets (delayOffset.json)                        |
| GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201 | the subscription groups, replaced whole when the dataVersion differs |

Each table is copied on its own: one that fails is logged and the others still copy (4.9.8 catches per table).

Deliberate difference (#1094). While the master is down, consumers commit offsets to the slave (the client's
RemoteBrokerOffsetStore falls back to any broker of the name, and 4.9.8's UPDATE_CONSUMER_OFFSET does not look
at the broker's role). 4.9.8's next syncAll after the master returns replaces them with the master's older
offsets (putAll), and the master never learns the newer ones: the group consumes the outage's messages again.
Here the slave remembers each offset a client committed to it (``ConsumerOffsetManager.slave_commits``); a
sync keeps such an offset when the master's is lower and sends it to the master (UPDATE_CONSUMER_OFFSET), and
forgets it once the master acknowledged it or holds as much. Every other offset is the master's, as in
4.9.8 — so a deliberate reset on the master still reaches the slave. The remembered offsets are persisted with
the others (consumerOffset.json's ``slaveCommitTable``): a slave restarted before the master returned still
sends them on.

``plan_offset_sync`` is the rule (no I/O); ``SlaveSynchronizer`` fetches, applies on the broker's loop and
sends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reference_broker.broker.consumer_offset_manager import (
    TOPIC_GROUP_SEPARATOR,
    ConsumerOffsetManager,
    parse_offset_table,
)
from reference_broker.broker.subscription_group import SubscriptionGroupManager, group_from_json
from reference_broker.broker.topic_config import DataVersion, TopicConfig, TopicConfigManager
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, fastjson_loads
from reference_broker.remoting.errors import RemotingError

log = logging.getLogger(__name__)

SYNC_INITIAL_DELAY_S = 3.0  # BrokerController.handleSlaveSynchronize: scheduleAtFixedRate(.., 3000, 10000, ..)
SYNC_PERIOD_S = 10.0
SYNC_TIMEOUT_S = 3.0  # BrokerOuterAPI.getAllTopicConfig and the others: invokeSync(.., 3000)

OffsetTable = dict[str, dict[int, int]]
QueueKey = tuple[str, int]  # (topic@group, queueId)


@dataclass(frozen=True)
class OffsetSyncPlan:
    """What one sync does to the slave's consumer offsets: the new table, and the offsets committed on the
    slave that the master has not seen and is sent."""

    table: OffsetTable
    push: dict[QueueKey, int] = field(default_factory=dict)
    settled: tuple[QueueKey, ...] = ()  # slave commits the master holds (or passed): no longer remembered


def plan_offset_sync(local: Mapping[str, Mapping[int, int]], master: Mapping[str, Mapping[int, int]],
                     slave_commits: Mapping[QueueKey, int]) -> OffsetSyncPlan:
    """The master's table laid over the slave's per ``topic@group`` (4.9.8's putAll), except that an offset a
    client committed to the slave and the master holds less of is kept, and sent to the master."""
    table: OffsetTable = {key: dict(queues) for key, queues in local.items()}
    for key, queues in master.items():
        table[key] = dict(queues)
    push: dict[QueueKey, int] = {}
    settled: list[QueueKey] = []
    for (key, queue_id), offset in slave_commits.items():
        on_master = master.get(key, {}).get(queue_id)
        if on_master is not None and on_master >= offset:
            settled.append((key, queue_id))
            continue
        table.setdefault(key, {})[queue_id] = offset
        push[(key, queue_id)] = offset
    return OffsetSyncPlan(table, push, tuple(settled))


class SlaveSynchronizer:
    """The I/O shell: requests to the master on an executor thread, tables changed on the broker's loop."""

    def __init__(self, broker_addr: str, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, replace_delay_offsets: Callable[[dict[int, int]], None]) -> None:
        self.broker_addr = broker_addr
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.replace_delay_offsets = replace_delay_offsets  # called on an executor thread (it writes a file)
        self.master_addr: str | None = None  # SlaveSynchronize.masterAddr, from the name server's reply
        self.last_sync_ok = False

    async def sync_all(self) -> None:
        """syncAll: topic config, consumer offsets, delay offsets, subscription groups, in that order."""
        addr = self.master_addr
        if not addr or addr == self.broker_addr:
            return
        loop = asyncio.get_running_loop()
        bodies = await loop.run_in_executor(None, self._fetch_all, addr)
        ok = all(b is not None for b in bodies.values())
        try:
            if (body := bodies.get(RequestCode.GET_ALL_TOPIC_CONFIG)) is not None:
                self._take_topics(fastjson_loads(body))
        except (ValueError, TypeError, AttributeError) as exc:
            ok = False
            log.error("SyncTopicConfig Exception, %s: %s", addr, exc)
        push: dict[QueueKey, int] = {}
        try:
            if (body := bodies.get(RequestCode.GET_ALL_CONSUMER_OFFSET)) is not None:
                push = self._take_offsets(parse_offset_table(body.decode("utf-8")) or {})
        except (ValueError, TypeError, AttributeError) as exc:
            ok = False
            log.error("SyncConsumerOffset Exception, %s: %s", addr, exc)
        try:
            if (body := bodies.get(RequestCode.GET_ALL_DELAY_OFFSET)) is not None:
                obj = fastjson_loads(body)
                table = {int(k): int(v) for k, v in obj.get("offsetTable", {}).items()}
                await loop.run_in_executor(None, self.replace_delay_offsets, table)
                log.info("Update slave delay offset from master, %s", addr)
        except (ValueError, TypeError, AttributeError, OSError) as exc:
            ok = False
            log.error("SyncDelayOffset Exception, %s: %s", addr, exc)
        try:
            if (body := bodies.get(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)) is not None:
                self._take_groups(fastjson_loads(body))
        except (ValueError, TypeError, AttributeError) as exc:
            ok = False
            log.error("SyncSubscriptionGroup Exception, %s: %s", addr, exc)
        if push:
            acked = await loop.run_in_executor(None, self._push_offsets, addr, push)
            for key, offset in acked.items():
                if self.offsets.slave_commits.get(key) == offset:  # not committed again meanwhile
                    del self.offsets.slave_commits[key]
            if acked:
                self.offsets.persist_soon()  # the file's slaveCommitTable forgets them too
        self.last_sync_ok = ok

    # ---- on the loop --------------------------------------------------------------------------------------
    def _take_topics(self, obj: dict[str, Any]) -> None:
        version = DataVersion.from_json(obj.get("dataVersion", {}))
        if version.to_json() == self.topics.data_version.to_json():
            return
        table = {name: TopicConfig.from_json(tc) for name, tc in obj.get("topicConfigTable", {}).items()}
        self.topics.replace_all(table, version)
        log.info("Update slave topic config from master, %s", self.master_addr)

    def _take_groups(self, obj: dict[str, Any]) -> None:
        version = DataVersion.from_json(obj.get("dataVersion", {}))
        if version.to_json() == self.groups.data_version.to_json():
            return
        table = {name: group_from_json(g) for name, g in obj.get("subscriptionGroupTable", {}).items()}
        self.groups.replace_all(table, version)
        log.info("Update slave Subscription Group from master, %s", self.master_addr)

    def _take_offsets(self, master: OffsetTable) -> dict[QueueKey, int]:
        plan = plan_offset_sync(self.offsets.offset_table, master, self.offsets.slave_commits)
        for key in plan.settled:
            self.offsets.slave_commits.pop(key, None)
        for key, offset in plan.push.items():
            log.warning("consumer offset %s queue %d committed on this slave (%d) is ahead of the master's "
                        "(%s): kept, and sent to the master", key[0], key[1], offset,
                        master.get(key[0], {}).get(key[1]))
        self.offsets.offset_table = plan.table
        self.offsets.persist_soon()
        log.info("Update slave consumer offset from master, %s", self.master_addr)
        return plan.push

    # ---- on an executor thread ---------------------------------------------------------------------------
    def _fetch_all(self, addr: str) -> dict[int, bytes | None]:
        codes = (RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
                 RequestCode.GET_ALL_DELAY_OFFSET, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        out: dict[int, bytes | None] = dict.fromkeys(codes)
        try:
            with RemotingClient.from_addr(addr, timeout_s=SYNC_TIMEOUT_S) as client:
                for code in codes:
                    try:
                        r = client.invoke(create_request(code, {}))
                    except RemotingError as exc:
                        log.error("slave synchronize: request %d to master %s failed: %s", code, addr, exc)
                        continue
                    if r.code == ResponseCode.SUCCESS:
                        out[code] = r.body
                    else:
                        log.error("slave synchronize: request %d to master %s: code %d %s", code, addr, r.code,
                                  r.remark)
        except (RemotingError, OSError, ValueError) as exc:
            log.error("slave synchronize: cannot reach master %s: %s", addr, exc)
        return out

    def _push_offsets(self, addr: str, push: dict[QueueKey, int]) -> dict[QueueKey, int]:
        """UPDATE_CONSUMER_OFFSET to the master for each offset it has not seen; those it acknowledged."""
        acked: dict[QueueKey, int] = {}
        try:
            with RemotingClient.from_addr(addr, timeout_s=SYNC_TIMEOUT_S) as client:
                for (key, queue_id), offset in push.items():
                    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
                    r = client.invoke(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
                        "commitOffset": str(offset)}))
                    if r.code == ResponseCode.SUCCESS:
                        acked[(key, queue_id)] = offset
        except (RemotingError, OSError, ValueError) as exc:
            log.error("slave synchronize: cannot send offsets to master %s: %s", addr, exc)
        return acked
