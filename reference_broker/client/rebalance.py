"""This module owns a push consumer's queue assignment (RebalanceImpl + RebalancePushImpl, 4.9.8).

Every ``rebalance_interval_s`` (20 s) and whenever a broker sends NOTIFY_CONSUMER_IDS_CHANGED, each topic of
the subscription is rebalanced: CLUSTERING asks a broker for the group's client ids
(GET_CONSUMER_LIST_BY_GROUP), sorts ids and queues and lets the allocation strategy pick this client's
share; BROADCASTING takes every queue. ``plan`` (pure) says which queues to drop and which to add.

Dropping a queue marks its ProcessQueue dropped (pulling and consuming stop), persists its offset and forgets
it; an orderly consumer also unlocks it on the broker, waiting up to 1 s for a running listener and
delaying the unlock 20 s while messages are still buffered (unlockDelay). Adding a queue locks it first
(orderly, CLUSTERING), computes where to start (``consumer.compute_pull_from_where``) and hands a new
PullRequest to the pull service. A queue whose start offset cannot be read now is skipped until the next
rebalance, as in RocketMQ.

Differences from 4.9.8, on purpose: a newly locked queue is marked locked at once (4.9.8 waits for the
next lockAll, up to 20 s in its first version); the heartbeat that follows a change is sent before the new
pulls start, so their subscription version is known to the broker; a subscribed topic without known
queues has its route fetched again at the next rebalance instead of waiting for the 30 s route poll; an
orderly BROADCASTING consumer takes no broker locks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from reference_broker.client import protocol
from reference_broker.client.allocate import AllocateStrategy, sort_inputs
from reference_broker.client.errors import MQClientError
from reference_broker.client.message import ConsumeFromWhere, MessageModel, MessageQueue
from reference_broker.client.process_queue import ProcessQueue
from reference_broker.client.subscription import SubscriptionData
from reference_broker.common import message as mc

if TYPE_CHECKING:
    from reference_broker.client.instance import MQClientInstance
    from reference_broker.client.offset_store import OffsetStore

log = logging.getLogger(__name__)

UNLOCK_DELAY_S: Final = 20.0  # RebalancePushImpl.UNLOCK_DELAY_TIME_MILLS
LOCK_CONSUME_WAIT_S: Final = 1.0  # removeUnnecessaryMessageQueue: lockConsume.tryLock(1000 ms)
LOCK_TIMEOUT_S: Final = 1.0  # lockBatchMQ timeout 1000 ms


@dataclass(slots=True)
class PullRequest:
    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False


@dataclass(slots=True)
class Plan:
    drop: list[MessageQueue] = field(default_factory=list)
    add: list[MessageQueue] = field(default_factory=list)


def plan(topic: str, assigned: Iterable[MessageQueue], held: Iterable[MessageQueue],
         expired: Iterable[MessageQueue] = ()) -> Plan:
    """Which of this topic's queues to drop (no longer assigned, or not pulled for 120 s) and to add (newly
    assigned, or dropped as idle and still assigned: it starts again with a fresh process queue)."""
    wanted = set(assigned)
    mine = {mq for mq in held if mq.topic == topic}
    stale = set(expired) & wanted & mine
    return Plan(drop=sorted((mine - wanted) | stale), add=sorted((wanted - mine) | stale))


def pull_from_where(stored: int, where: ConsumeFromWhere, retry_topic: bool, max_offset: Callable[[], int],
                    search_by_time: Callable[[], int]) -> int:
    """computePullFromWhere's decision. ``stored`` is the offset store's answer: an offset, -1 for none (a new
    group: QUERY_NOT_FOUND), -2 when the broker could not be asked (then -1: skip the queue for now).

    - an offset is stored: resume there, whatever ``where`` says;
    - CONSUME_FROM_LAST_OFFSET: the queue's max offset (a retry topic: 0, so no retry is skipped);
    - CONSUME_FROM_FIRST_OFFSET: 0;
    - CONSUME_FROM_TIMESTAMP: the first offset stored at or after consume_timestamp (a retry topic: max).
    """
    if stored >= 0:
        return stored
    if stored != -1:
        return -1
    if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    if where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
        return 0 if retry_topic else max_offset()
    return max_offset() if retry_topic else search_by_time()


class RebalanceOwner(Protocol):
    """What the rebalance needs of its push consumer."""

    group: str
    message_model: MessageModel
    allocate_strategy: AllocateStrategy
    offset_store: OffsetStore

    @property
    def consume_orderly(self) -> bool: ...

    def subscription_table(self) -> dict[str, SubscriptionData]: ...

    def compute_pull_from_where(self, mq: MessageQueue) -> int: ...

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None: ...


class RebalanceImpl:
    def __init__(self, owner: RebalanceOwner, instance: MQClientInstance) -> None:
        self.owner = owner
        self.instance = instance
        self.group = owner.group
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self.unlock_delay_s = UNLOCK_DELAY_S  # tests shorten it
        self._lock = threading.Lock()  # guards process_queue_table
        self._rebalance_lock = threading.Lock()  # one rebalance at a time

    # ---- the pass ---------------------------------------------------------------------------

    def do_rebalance(self) -> None:
        with self._rebalance_lock:
            subs = self.owner.subscription_table()
            for topic in list(subs):
                try:
                    self.rebalance_by_topic(topic)
                except MQClientError as exc:
                    if not topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
                        log.warning("rebalanceByTopic %s of %s failed: %s", topic, self.group, exc)
            self._truncate_not_my_topics(set(subs))

    def rebalance_by_topic(self, topic: str) -> None:
        mq_set = self.instance.subscribe_info(topic)
        if not mq_set:
            self.instance.update_topic_route(topic)
            mq_set = self.instance.subscribe_info(topic)
        if not mq_set:
            if not topic.startswith(mc.RETRY_GROUP_TOPIC_PREFIX):
                log.warning("doRebalance, %s, but the topic[%s] not exist.", self.group, topic)
            return
        if self.owner.message_model is MessageModel.BROADCASTING:
            assigned = list(mq_set)
        else:
            cids = self.instance.find_consumer_id_list(topic, self.group)
            if not cids:
                log.warning("doRebalance, %s %s, get consumer id list failed", self.group, topic)
                return
            mq_all, cid_all = sort_inputs(mq_set, cids)
            try:
                assigned = self.owner.allocate_strategy.allocate(self.group, self.instance.client_id, mq_all,
                                                                 cid_all)
            except ValueError as exc:
                log.error("AllocateMessageQueueStrategy.allocate Exception. allocateMessageQueueStrategyName=%s: %s",
                          self.owner.allocate_strategy.name, exc)
                return
        self.update_process_queue_table(topic, assigned)

    def update_process_queue_table(self, topic: str, assigned: list[MessageQueue]) -> bool:
        """updateProcessQueueTableInRebalance; True if the table changed."""
        orderly = self.owner.consume_orderly
        # Broker locks only matter among the consumers of a CLUSTERING group (4.9.8 also locks when
        # broadcasting, where the consumers then compete for locks they do not need).
        needs_lock = orderly and self.owner.message_model is MessageModel.CLUSTERING
        with self._lock:
            held = list(self.process_queue_table)
            expired = [mq for mq, pq in self.process_queue_table.items() if pq.is_pull_expired()]
        p = plan(topic, assigned, held, expired)
        changed = False
        for mq in p.drop:
            with self._lock:
                pq = self.process_queue_table.get(mq)
            if pq is None:
                continue
            pq.dropped = True
            if self.remove_unnecessary_message_queue(mq, pq):
                with self._lock:
                    self.process_queue_table.pop(mq, None)
                changed = True
                log.info("doRebalance, %s, remove unnecessary mq, %s", self.group, mq)
        requests: list[PullRequest] = []
        for mq in p.add:
            if mq in self.process_queue_table:  # an expired queue was dropped but could not be removed
                continue
            if needs_lock and not self.lock(mq):
                log.warning("doRebalance, %s, add a new mq failed, %s, because lock failed", self.group, mq)
                continue
            self.owner.offset_store.remove_offset(mq)  # removeDirtyOffset
            next_offset = self.owner.compute_pull_from_where(mq)
            if next_offset < 0:
                log.warning("doRebalance, %s, add new mq failed, %s", self.group, mq)
                continue
            pq = ProcessQueue()
            if orderly:
                pq.locked = True
                pq.last_lock_ts = time.monotonic()
            with self._lock:
                if mq in self.process_queue_table:
                    continue
                self.process_queue_table[mq] = pq
            requests.append(PullRequest(self.group, mq, pq, next_offset, previously_locked=orderly))
            changed = True
            log.info("doRebalance, %s, add a new mq, %s, next offset %d", self.group, mq, next_offset)
        if changed:
            self.message_queue_changed(topic)
        if requests:
            self.owner.dispatch_pull_requests(requests)
        return changed

    def message_queue_changed(self, topic: str) -> None:
        """RebalancePushImpl.messageQueueChanged: a new subscription version, and tell the brokers."""
        sub = self.owner.subscription_table().get(topic)
        if sub is not None:
            sub.sub_version = int(time.time() * 1000)
        self.instance.send_heartbeat_to_all_brokers()

    def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        store = self.owner.offset_store
        store.persist(mq)
        store.remove_offset(mq)
        if self.owner.consume_orderly and self.owner.message_model is MessageModel.CLUSTERING:
            if pq.consume_lock.acquire(timeout=LOCK_CONSUME_WAIT_S):
                try:
                    self._unlock_delay(mq, pq)
                    return True
                finally:
                    pq.consume_lock.release()
            log.warning("[WRONG]mq is consuming, so can not unlock it, %s. maybe hanged for a while, %d",
                        mq, pq.try_unlock_times)
            pq.try_unlock_times += 1
            return False
        return True

    def _unlock_delay(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if pq.has_temp_message():
            self.instance.scheduler.schedule(self.unlock_delay_s, lambda: self.unlock(mq, True))
        else:
            self.unlock(mq, True)

    def remove_process_queue(self, mq: MessageQueue) -> None:
        with self._lock:
            pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True
            self.remove_unnecessary_message_queue(mq, pq)
            log.info("Fix Offset, %s, remove unnecessary mq, %s", self.group, mq)

    def _truncate_not_my_topics(self, topics: set[str]) -> None:
        with self._lock:
            gone = [mq for mq in self.process_queue_table if mq.topic not in topics]
            for mq in gone:
                pq = self.process_queue_table.pop(mq)
                pq.dropped = True
                log.info("doRebalance, %s, truncateMessageQueueNotMyTopic remove unnecessary mq, %s", self.group, mq)

    def forget(self, mq: MessageQueue) -> None:
        """Take ``mq`` out of the table (its process queue already dropped): the next pass adds it anew."""
        with self._lock:
            self.process_queue_table.pop(mq, None)

    def process_queues(self) -> list[tuple[MessageQueue, ProcessQueue]]:
        with self._lock:
            return list(self.process_queue_table.items())

    def destroy(self) -> None:
        with self._lock:
            for pq in self.process_queue_table.values():
                pq.dropped = True
            self.process_queue_table.clear()

    # ---- broker locks (orderly, CLUSTERING) -----------------------------------------------------

    def _lock_batch(self, broker_name: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        addr = self.instance.find_broker_addr_in_subscribe(broker_name, 0, True)
        if addr is None:
            return set()
        cmd = protocol.lock_batch_request(self.group, self.instance.client_id, mqs)
        return protocol.locked_from_response(self.instance.invoke(addr, cmd, LOCK_TIMEOUT_S), addr)

    def lock(self, mq: MessageQueue) -> bool:
        """lock(mq): LOCK_BATCH_MQ for one queue; True if the broker granted it to this client."""
        try:
            locked = self._lock_batch(mq.broker_name, [mq])
        except MQClientError as exc:
            log.error("lockBatchMQ exception, %s: %s", mq, exc)
            return False
        with self._lock:
            for m in locked:
                pq = self.process_queue_table.get(m)
                if pq is not None:
                    pq.locked = True
                    pq.last_lock_ts = time.monotonic()
        return mq in locked

    def lock_all(self) -> None:
        """lockAll (every 20 s): renew the locks of every held queue, broker by broker."""
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq, _pq in self.process_queues():
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker_name, mqs in by_broker.items():
            try:
                locked = self._lock_batch(broker_name, mqs)
            except MQClientError as exc:
                log.error("lockBatchMQ exception, %s: %s", broker_name, exc)
                continue
            now = time.monotonic()
            with self._lock:
                for mq in mqs:
                    pq = self.process_queue_table.get(mq)
                    if pq is None:
                        continue
                    if mq in locked:
                        if not pq.locked:
                            log.info("the message queue locked OK, Group: %s %s", self.group, mq)
                        pq.locked = True
                        pq.last_lock_ts = now
                    else:
                        pq.locked = False
                        log.warning("the message queue locked Failed, Group: %s %s", self.group, mq)

    def unlock(self, mq: MessageQueue, oneway: bool) -> None:
        addr = self.instance.find_broker_addr_in_subscribe(mq.broker_name, 0, True)
        if addr is None:
            return
        cmd = protocol.unlock_batch_request(self.group, self.instance.client_id, [mq])
        try:
            if oneway:
                self.instance.invoke_oneway(addr, cmd)
            else:
                self.instance.invoke(addr, cmd, LOCK_TIMEOUT_S)
        except MQClientError as exc:
            log.error("unlockBatchMQ exception, %s: %s", mq, exc)

    def unlock_all(self, oneway: bool) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq, pq in self.process_queues():
            by_broker.setdefault(mq.broker_name, []).append(mq)
            pq.locked = False
        for broker_name, mqs in by_broker.items():
            addr = self.instance.find_broker_addr_in_subscribe(broker_name, 0, True)
            if addr is None:
                continue
            cmd = protocol.unlock_batch_request(self.group, self.instance.client_id, mqs)
            try:
                if oneway:
                    self.instance.invoke_oneway(addr, cmd)
                else:
                    self.instance.invoke(addr, cmd, LOCK_TIMEOUT_S)
            except MQClientError as exc:
                log.error("unlockBatchMQ exception, %s: %s", broker_name, exc)
