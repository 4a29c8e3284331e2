"""This module owns the broker's view of its clients: producer and consumer groups, their connections and
subscriptions (broker/.../client/ConsumerManager.java, ProducerManager.java, ConsumerGroupInfo.java, 4.9.8),
and the queue locks of orderly consumers (RebalanceLockManager.java).

Sans-IO: connections are opaque handles and time is passed in, so the rules (heartbeat registration, 120 s
channel expiry, notify-on-change, 60 s lock expiry) are tested without sockets. The caller sends the
NOTIFY_CONSUMER_IDS_CHANGED requests this module asks for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from reference_broker.broker.consumer_filter import ConsumerFilterManager
from reference_broker.common.java_hash import string_hash_code

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_TIMEOUT_MS: Final = 120_000  # ConsumerManager/ProducerManager.CHANNEL_EXPIRED_TIMEOUT
REBALANCE_LOCK_MAX_LIVE_TIME_MS: Final = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime
SUB_ALL: Final = "*"


@dataclass
class SubscriptionData:
    """SubscriptionData as carried in a heartbeat (common/.../protocol/heartbeat/SubscriptionData.java)."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: list[str] = field(default_factory=list)
    code_set: set[int] = field(default_factory=set)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @classmethod
    def build(cls, topic: str, sub_string: str | None, sub_version: int = 0) -> SubscriptionData:
        """FilterAPI.buildSubscriptionData: split on "||", trim, hash each tag; "*" or empty means all."""
        sub = cls(topic, sub_version=sub_version)
        if not sub_string or not sub_string.strip() or sub_string.strip() == SUB_ALL:
            sub.sub_string = SUB_ALL
            return sub
        sub.sub_string = sub_string
        for tag in sub_string.split("||"):
            tag = tag.strip()
            if tag:
                sub.tags_set.append(tag)
                sub.code_set.add(string_hash_code(tag))
        return sub

    @classmethod
    def build_typed(cls, topic: str, sub_string: str | None, expression_type: str | None,
                    sub_version: int = 0) -> SubscriptionData:
        """FilterAPI.build: a TAG expression as ``build``; any other type keeps its expression as it came (no
        tags, no codes) and must have one (ValueError, which a pull answers SUBSCRIPTION_PARSE_FAILED)."""
        if not expression_type or expression_type == "TAG":
            return cls.build(topic, sub_string, sub_version)
        if not sub_string:
            raise ValueError(f"Expression can't be null! {expression_type}")
        return cls(topic, sub_string, sub_version=sub_version, expression_type=expression_type)

    @classmethod
    def from_json(cls, obj: Any) -> SubscriptionData:
        if not isinstance(obj, dict) or not isinstance(obj.get("topic"), str):
            raise ValueError("subscription data needs a string 'topic'")
        expression_type = str(obj.get("expressionType") or "TAG")
        sub_string = obj.get("subString")
        version = int(obj.get("subVersion") or 0)
        if expression_type == "TAG":
            sub = cls.build(obj["topic"], sub_string, version)
        else:  # a heartbeat's SQL92 (or unknown type) subscription is kept as sent, even if empty
            sub = cls(obj["topic"], str(sub_string or ""), sub_version=version, expression_type=expression_type)
        sub.class_filter_mode = bool(obj.get("classFilterMode", False))
        return sub

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "subString": self.sub_string, "tagsSet": self.tags_set,
                "codeSet": sorted(self.code_set), "subVersion": self.sub_version,
                "expressionType": self.expression_type, "classFilterMode": self.class_filter_mode}

    def matches_tags_code(self, tags_code: int) -> bool:
        """ExpressionMessageFilter.isMatchedByConsumeQueue for TAG expressions (hash only)."""
        if self.class_filter_mode or self.sub_string == SUB_ALL or not self.code_set:
            return True
        # The CQ holds a long; the set holds Java ints (String.hashCode), compared as (int) tagsCode.
        code = tags_code & 0xFFFFFFFF
        if code >= 0x80000000:
            code -= 0x100000000
        return code in self.code_set


@dataclass
class ClientChannelInfo:
    channel: Hashable
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update_ms: int = 0


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Hashable, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_ms: int = 0

    def all_client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def update_channel(self, info: ClientChannelInfo, consume_type: str, message_model: str,
                       consume_from_where: str) -> bool:
        """ConsumerGroupInfo.updateChannel: True when a new client joined."""
        self.consume_type, self.message_model, self.consume_from_where = consume_type, message_model, \
            consume_from_where
        old = self.channels.get(info.channel)
        if old is None:
            self.channels[info.channel] = info
            log.info("new consumer connected, group: %s client: %s", self.group, info.client_id)
            return True
        old.last_update_ms = info.last_update_ms
        return False

    def update_subscriptions(self, subs: Iterable[SubscriptionData], now_ms: int) -> bool:
        """ConsumerGroupInfo.updateSubscription: True when the topic set changed. A newer subVersion replaces."""
        changed = False
        seen = set()
        for sub in subs:
            seen.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in seen]:
            del self.subscriptions[topic]
            changed = True
        self.last_update_ms = now_ms
        return changed


class ConsumerManager:
    def __init__(self, channel_expired_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS,
                 filters: ConsumerFilterManager | None = None) -> None:
        self.table: dict[str, ConsumerGroupInfo] = {}
        self.channel_expired_ms = channel_expired_ms
        # ConsumerFilterManager, kept up to date as DefaultConsumerIdsChangeListener does (REGISTER: every
        # heartbeat's subscriptions; UNREGISTER: the group's last member left).
        self.filters = filters if filters is not None else ConsumerFilterManager()

    def register(self, group: str, info: ClientChannelInfo, consume_type: str, message_model: str,
                 consume_from_where: str, subs: list[SubscriptionData], now_ms: int) -> bool:
        """registerConsumer: True when the group's membership changed (its clients are then notified)."""
        cgi = self.table.get(group)
        if cgi is None:
            cgi = self.table[group] = ConsumerGroupInfo(group)
        joined = cgi.update_channel(info, consume_type, message_model, consume_from_where)
        subs_changed = cgi.update_subscriptions(subs, now_ms)
        self.filters.register_subscriptions(group, subs, now_ms)
        return joined or subs_changed

    def unregister(self, group: str, channel: Hashable) -> bool:
        cgi = self.table.get(group)
        if cgi is None or cgi.channels.pop(channel, None) is None:
            return False
        if not cgi.channels:
            log.info("unregister consumer ok, no any connection, and remove consumer group, %s", group)
            del self.table[group]
            self.filters.unregister(group, cgi.last_update_ms)
        return True

    def channel_closed(self, channel: Hashable) -> list[str]:
        """doChannelCloseEvent: the groups that lost a member (to be notified)."""
        groups = []
        for group in list(self.table):
            if self.unregister(group, channel):
                groups.append(group)
        return groups

    def scan_not_active(self, now_ms: int) -> list[tuple[str, Hashable]]:
        """scanNotActiveChannel: channels silent for longer than the expiry are dropped (and returned)."""
        dropped = []
        for group, cgi in list(self.table.items()):
            for channel, info in list(cgi.channels.items()):
                if now_ms - info.last_update_ms > self.channel_expired_ms:
                    log.warning("SCAN: remove expired channel from ConsumerManager consumerTable. channel=%s, "
                                "consumerGroup=%s", info.client_id, group)
                    dropped.append((group, channel))
                    self.unregister(group, channel)
        self.filters.clean(now_ms)
        return dropped

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        cgi = self.table.get(group)
        return None if cgi is None else cgi.subscriptions.get(topic)

    def client_ids(self, group: str) -> list[str]:
        cgi = self.table.get(group)
        return [] if cgi is None else cgi.all_client_ids()

    def channels(self, group: str) -> list[Hashable]:
        cgi = self.table.get(group)
        return [] if cgi is None else list(cgi.channels)


class ProducerManager:
    def __init__(self, channel_expired_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS) -> None:
        self.table: dict[str, dict[Hashable, ClientChannelInfo]] = {}
        self._turn = 0  # positiveAtomicCounter
        self.channel_expired_ms = channel_expired_ms

    def register(self, group: str, info: ClientChannelInfo) -> None:
        channels = self.table.setdefault(group, {})
        old = channels.get(info.channel)
        if old is None:
            channels[info.channel] = info
        else:
            old.last_update_ms = info.last_update_ms

    def unregister(self, group: str, channel: Hashable) -> None:
        channels = self.table.get(group)
        if channels is not None:
            channels.pop(channel, None)
            if not channels:
                del self.table[group]

    def channel_closed(self, channel: Hashable) -> None:
        for group in list(self.table):
            self.unregister(group, channel)

    def scan_not_active(self, now_ms: int) -> None:
        for group, channels in list(self.table.items()):
            for channel, info in list(channels.items()):
                if now_ms - info.last_update_ms > self.channel_expired_ms:
                    self.unregister(group, channel)

    def any_channel(self, group: str) -> Hashable | None:
        channels = self.table.get(group)
        return next(iter(channels), None) if channels else None

    def available_channel(self, group: str, is_live: Callable[[Hashable], bool]) -> Hashable | None:
        """getAvailableChannel: the group's channels in turn (a counter shared by all groups), the first live
        one from there; None when the group has none live (4.9.8 would return the last active one)."""
        channels = list(self.table.get(group, {}))
        if not channels:
            return None
        self._turn += 1
        for k in range(len(channels)):
            channel = channels[(self._turn + k) % len(channels)]
            if is_live(channel):
                return channel
        return None


@dataclass(frozen=True, order=True)
class MessageQueueKey:
    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def from_json(cls, obj: Any) -> MessageQueueKey:
        if not isinstance(obj, dict):
            raise ValueError("a message queue must be a JSON object")
        return cls(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}


@dataclass
class _LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    """Per group and queue, which client may consume it in order; a lock lapses after 60 s unrenewed."""

    def __init__(self, max_live_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS) -> None:
        self.table: dict[str, dict[MessageQueueKey, _LockEntry]] = {}
        self.max_live_ms = max_live_ms

    def _locked_by(self, group: str, mq: MessageQueueKey, now_ms: int) -> str | None:
        entry = self.table.get(group, {}).get(mq)
        if entry is None or now_ms - entry.last_update_ms > self.max_live_ms:
            return None
        return entry.client_id

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str,
                       now_ms: int) -> set[MessageQueueKey]:
        """tryLockBatch: the queues now locked by ``client_id`` (renewed or newly taken)."""
        locked: set[MessageQueueKey] = set()
        groups = self.table.setdefault(group, {})
        for mq in mqs:
            holder = self._locked_by(group, mq, now_ms)
            if holder is None or holder == client_id:
                if holder is None:
                    log.info("tryLockBatch: lock %s for %s in group %s", mq, client_id, group)
                groups[mq] = _LockEntry(client_id, now_ms)
                locked.add(mq)
            else:
                log.warning("tryLockBatch: %s is locked by %s, not %s (group %s)", mq, holder, client_id, group)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str) -> None:
        groups = self.table.get(group)
        if not groups:
            return
        for mq in mqs:
            entry = groups.get(mq)
            if entry is not None and entry.client_id == client_id:
                del groups[mq]
