"""This module owns the broker's compiled consumer filters: one per (topic, consumer group) with a non-TAG
subscription, registered at each heartbeat and read by pulls that carry no subscription of their own
(broker/.../filter/ConsumerFilterManager.java, ConsumerFilterData.java, ExpressionMessageFilter.java and
common/.../filter/ExpressionType.java, 4.9.8). Sans-IO: time is passed in.

What 4.9.8 does, and this module with it:

- ``build`` returns None for a TAG subscription, and also when the expression does not compile (unknown
  type, malformed SQL) — it logs instead of failing. A pull that carries such a subscription is then served
  *unfiltered* (PullMessageProcessor asserts the data is not null, and assertions are off in production);
  a pull that relies on the heartbeat's subscription finds no filter data (FILTER_DATA_NOT_EXIST).
- A registration with a version not above the one held keeps the old filter (only revives it if dead); a
  newer version replaces it, and a newer version that does not compile removes it.
- A group that unregisters leaves its filters behind, marked dead; they are dropped 24 h later
  (``clean``, 4.9.8's ConsumerFilterManager.clean runs from the persist timer).

Differences: the filters are kept in memory only (4.9.8 persists consumerFilter.json; heartbeats every 30 s
rebuild them here), and there is no bloom filter over the consume queue's extension (bits in ConsumeQueueExt,
``enableCalcFilterBitMap``): every message is checked against its properties.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from reference_broker.common.record import RecordError, record_properties
from reference_broker.filter.sql92 import Selector, SelectorParseError, compile_selector

if TYPE_CHECKING:
    from reference_broker.broker.client_manager import SubscriptionData

log = logging.getLogger(__name__)

EXPRESSION_TAG: Final = "TAG"  # ExpressionType.TAG
EXPRESSION_SQL92: Final = "SQL92"  # ExpressionType.SQL92; FilterFactory knows no other non-TAG type
DEAD_FILTER_KEEP_MS: Final = 24 * 3600 * 1000  # ConsumerFilterManager.MS_24_HOUR
# FilterFactory.INSTANCE.get(type) is null for any other type: the NullPointerException's text (JDK 17).
UNKNOWN_TYPE_REMARK: Final = ('Cannot invoke "org.apache.rocketmq.filter.FilterSpi.compile(String)" because the '
                              'return value of "org.apache.rocketmq.filter.FilterFactory.get(String)" is null')


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: null, empty or "TAG" (case-sensitive, as is "SQL92")."""
    return not expression_type or expression_type == EXPRESSION_TAG


class FilterCompileError(ValueError):
    """What FilterFactory...compile throws; ``remark`` is 4.9.8's CHECK_CLIENT_CONFIG remark for it."""

    def __init__(self, message: str, remark: str) -> None:
        super().__init__(message)
        self.remark = remark


def compile_expression(expression_type: str, expression: str) -> Selector:
    """FilterFactory.INSTANCE.get(type).compile(expression)."""
    if expression_type != EXPRESSION_SQL92:
        raise FilterCompileError(f"unknown expression type {expression_type!r}", UNKNOWN_TYPE_REMARK)
    try:
        return compile_selector(expression)
    except SelectorParseError as exc:
        raise FilterCompileError(str(exc), exc.java) from None


@dataclass
class ConsumerFilterData:
    group: str
    topic: str
    expression: str
    expression_type: str
    client_version: int
    selector: Selector
    born_time_ms: int = 0
    dead_since_ms: int | None = None  # set when the group stopped subscribing (4.9.8: deadTime)

    @property
    def dead(self) -> bool:
        return self.dead_since_ms is not None


def build(topic: str, group: str, expression: str | None, expression_type: str | None, client_version: int,
          now_ms: int = 0) -> ConsumerFilterData | None:
    """ConsumerFilterManager.build: None for a TAG subscription and for one that does not compile."""
    if is_tag_type(expression_type) or not expression:
        return None
    assert expression_type is not None
    try:
        selector = compile_expression(expression_type, expression)
    except FilterCompileError as exc:
        log.error("parse error: expr=%s, topic=%s, group=%s, error=%s", expression, topic, group, exc)
        return None
    return ConsumerFilterData(group, topic, expression, expression_type, client_version, selector, now_ms)


class ConsumerFilterManager:
    """topic → group → ConsumerFilterData."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[str, ConsumerFilterData]] = {}

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        return self.by_topic.get(topic, {}).get(group)

    def register_subscriptions(self, group: str, subs: Iterable[SubscriptionData], now_ms: int) -> None:
        """register(consumerGroup, subList): each non-TAG subscription, then the group's filters on topics
        it no longer subscribes to are marked dead."""
        topics = set()
        for sub in subs:
            topics.add(sub.topic)
            self.register(sub.topic, group, sub.sub_string, sub.expression_type, sub.sub_version, now_ms)
        for topic, groups in self.by_topic.items():
            data = groups.get(group)
            if data is not None and topic not in topics and not data.dead:
                data.dead_since_ms = now_ms

    def register(self, topic: str, group: str, expression: str, expression_type: str, client_version: int,
                 now_ms: int) -> bool:
        """FilterDataMapByTopic.register: True when the table changed."""
        if is_tag_type(expression_type) or not expression:
            return False
        groups = self.by_topic.setdefault(topic, {})
        old = groups.get(group)
        if old is not None and client_version <= old.client_version:
            if old.dead:  # reAlive
                old.dead_since_ms = None
                return True
            return False
        data = build(topic, group, expression, expression_type, client_version, now_ms)
        if data is None:
            # a newer expression that does not compile: drop the old one and let the client report the error
            groups.pop(group, None)
            return False
        groups[group] = data
        return True

    def unregister(self, group: str, now_ms: int) -> None:
        """unRegister: the group's filters are marked dead (the group has no member left)."""
        for groups in self.by_topic.values():
            data = groups.get(group)
            if data is not None and not data.dead:
                data.dead_since_ms = now_ms

    def clean(self, now_ms: int) -> None:
        """Drop filters dead for longer than 24 h (ConsumerFilterManager.clean)."""
        for topic in list(self.by_topic):
            groups = self.by_topic[topic]
            for group, data in list(groups.items()):
                if data.dead_since_ms is not None and now_ms - data.dead_since_ms > DEAD_FILTER_KEEP_MS:
                    del groups[group]
            if not groups:
                del self.by_topic[topic]


def commit_log_filter(data: ConsumerFilterData | None) -> Callable[[bytes], bool] | None:
    """ExpressionMessageFilter.isMatchedByCommitLog for a record: its properties (TAGS, KEYS and the user's)
    against the selector; an evaluation error or a non-true answer is no match. None: no filtering."""
    if data is None:
        return None
    matches = data.selector.matches

    def check(raw: bytes) -> bool:
        try:
            props = record_properties(raw)
        except RecordError:
            return False
        return matches(props)
    return check
