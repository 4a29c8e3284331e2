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
- A group that unregisters leaves its filters behind, marked dead; they are dropped ``filterDataCleanTimeSpan``
  (24 h) later (``clean``; 4.9.8's ConsumerFilterManager.clean runs from the persist timer).
- Each filter carries its group's BloomFilterData: the bit positions of ``"group#topic"`` in the broker's one
  bloom filter (filter/bloom.py), which the consume queue's filter bits are made of.
- The table is persisted in ``{storePathRootDir}/config/consumerFilter.json`` on the consumer-offset timer
  (flushConsumerOffsetInterval) and at shutdown, in 4.9.8's shape (fastjson of ConsumerFilterManager)::

      {"filterDataByTopic": {"TopicA": {"topic": "TopicA", "groupFilterData": {"GroupA": {
          "bloomFilterData": {"bitNum": 112, "bitPos": [29, 107, 11]}, "bornTime": 1795764161739,
          "clientVersion": 1795764161757, "consumerGroup": "GroupA", "dead": false, "deadTime": 0,
          "expression": "a > 5", "expressionType": "SQL92", "topic": "TopicA"}}}}}

  At load every filter is taken as dead (its consumers reconnect and revive it: a living one's deadTime 0
  becomes now − 30 s, or its bornTime if later), and a file made by another bloom filter (other
  maxErrorRateOfBloomFilter / expectConsumerNumUseFilter) is ignored whole (ConsumerFilterManager.decode).

Differences: 4.9.8 keeps a persisted filter whose expression no longer compiles (and refuses to start on a
consumerFilter.json it cannot parse); here such an entry is dropped with an error logged, and a file that is
not the expected shape (nor its ``.bak``) is logged and the broker starts with an empty table — a client's
next heartbeat rebuilds it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from reference_broker.broker.config_manager import ConfigManager, dump_json
from reference_broker.common.record import RecordError, record_properties
from reference_broker.filter.bloom import BloomFilter, BloomFilterData
from reference_broker.filter.sql92 import Selector, SelectorParseError, compile_selector
from reference_broker.store.consume_queue_ext import CqExtUnit

if TYPE_CHECKING:
    from reference_broker.broker.client_manager import SubscriptionData

log = logging.getLogger(__name__)

EXPRESSION_TAG: Final = "TAG"  # ExpressionType.TAG
EXPRESSION_SQL92: Final = "SQL92"  # ExpressionType.SQL92; FilterFactory knows no other non-TAG type
DEAD_FILTER_KEEP_MS: Final = 24 * 3600 * 1000  # ConsumerFilterManager.MS_24_HOUR (filterDataCleanTimeSpan)
LOAD_DEAD_AGO_MS: Final = 30 * 1000  # decode: a filter alive when persisted is taken as dead since 30 s ago
# BrokerConfig defaults: maxErrorRateOfBloomFilter 20 %, expectConsumerNumUseFilter 32 (k = 3, m = 112 bits)
DEFAULT_BLOOM_F: Final = 20
DEFAULT_BLOOM_N: Final = 32
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
    bloom_filter_data: BloomFilterData | None = None  # "group#topic"'s bits (None: built by a pull, unregistered)

    @property
    def dead(self) -> bool:
        return self.dead_since_ms is not None

    def is_msg_in_live(self, msg_store_time_ms: int) -> bool:
        """isMsgInLive: the message was stored after this filter was born, so its bit map was computed with
        this filter registered (an older message's bits say nothing about it)."""
        return msg_store_time_ms > self.born_time_ms

    def to_json(self) -> dict[str, Any]:
        """ConsumerFilterData as fastjson writes it (fields in alphabetical order; ``dead`` from isDead)."""
        return {
            "bloomFilterData": None if self.bloom_filter_data is None else self.bloom_filter_data.to_json(),
            "bornTime": self.born_time_ms,
            "clientVersion": self.client_version,
            "consumerGroup": self.group,
            "dead": self.dead,
            "deadTime": 0 if self.dead_since_ms is None else self.dead_since_ms,
            "expression": self.expression,
            "expressionType": self.expression_type,
            "topic": self.topic,
        }


def _field(obj: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = obj.get(key)
    if type(value) is not kind:
        raise ValueError(f"{where}: {key} must be {kind.__name__}, got {type(value).__name__}")
    return value


def filter_data_from_json(obj: Any, topic: str, group: str) -> ConsumerFilterData | None:
    """One persisted ConsumerFilterData: ValueError when it is not one, None (logged) when its expression
    does not compile any more."""
    where = f"consumerFilter.json {topic}/{group}"
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be an object, got {type(obj).__name__}")
    expression = _field(obj, "expression", str, where)
    expression_type = _field(obj, "expressionType", str, where)
    born = _field(obj, "bornTime", int, where)
    dead_time = _field(obj, "deadTime", int, where) if "deadTime" in obj else 0
    version = _field(obj, "clientVersion", int, where)
    bloom = BloomFilterData.from_json(obj.get("bloomFilterData"))
    try:
        selector = compile_expression(expression_type, expression)
    except FilterCompileError as exc:
        log.error("load filter data error, %s: expression %r does not compile (%s); dropped", where, expression, exc)
        return None
    # 4.9.8's isDead: deadTime >= bornTime (a living filter's deadTime is 0)
    dead_since = dead_time if dead_time >= born and dead_time != 0 else None
    return ConsumerFilterData(group, topic, expression, expression_type, version, selector, born, dead_since, bloom)


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


class ConsumerFilterManager(ConfigManager):
    """topic → group → ConsumerFilterData; ``config/consumerFilter.json`` under ``store_root`` (None: kept in
    memory only, as in unit tests)."""

    def __init__(self, store_root: Path | str | None = None, bloom: BloomFilter | None = None,
                 clean_time_span_ms: int = DEAD_FILTER_KEEP_MS) -> None:
        super().__init__()
        self.store_root = None if store_root is None else Path(store_root)
        self.bloom = bloom if bloom is not None else BloomFilter(DEFAULT_BLOOM_F, DEFAULT_BLOOM_N)
        self.clean_time_span_ms = clean_time_span_ms
        self.by_topic: dict[str, dict[str, ConsumerFilterData]] = {}

    # ---- consumerFilter.json ----------------------------------------------------------------------------
    def config_file_path(self) -> Path:
        """BrokerPathConfigHelper.getConsumerFilterPath."""
        if self.store_root is None:
            raise RuntimeError("this ConsumerFilterManager has no store root: it is not persisted")
        return self.store_root / "config" / "consumerFilter.json"

    def encode(self, pretty: bool = False) -> str:
        # Copies first: the writer thread encodes while the loop registers filters (see config_manager.py).
        table = {topic: dict(groups) for topic, groups in list(self.by_topic.items())}
        return dump_json({"filterDataByTopic": {
            topic: {"groupFilterData": {g: d.to_json() for g, d in groups.items()}, "topic": topic}
            for topic, groups in table.items()}}, pretty)

    def decode(self, text: str, now_ms: int | None = None) -> None:
        """ConsumerFilterManager.decode: replaces the table, or raises ValueError (nothing changed)."""
        obj = json.loads(text)
        if obj is None:
            return
        if not isinstance(obj, dict) or not isinstance(obj.get("filterDataByTopic", {}), dict):
            raise ValueError('consumerFilter.json must hold {"filterDataByTopic": {topic: {...}}}')
        now = now_ms if now_ms is not None else _now_ms()
        loaded: dict[str, dict[str, ConsumerFilterData]] = {}
        for topic, by_topic in obj.get("filterDataByTopic", {}).items():
            if by_topic is None:
                continue
            if not isinstance(by_topic, dict) or not isinstance(by_topic.get("groupFilterData", {}), dict):
                raise ValueError(f"consumerFilter.json {topic}: must hold {{\"groupFilterData\": {{...}}}}")
            groups: dict[str, ConsumerFilterData] = {}
            for group, raw in by_topic.get("groupFilterData", {}).items():
                if raw is None:
                    continue
                data = filter_data_from_json(raw, topic, group)
                if data is None:
                    continue
                if not self.bloom.is_valid(data.bloom_filter_data):
                    # the bits were computed by another filter: none of them can be trusted
                    log.info("Bloom filter is changed!So ignore all filter data persisted! %s, %s", self.bloom,
                             data.bloom_filter_data)
                    return
                if data.dead_since_ms is None:  # "we think all consumers are dead when load"
                    data.dead_since_ms = max(now - LOAD_DEAD_AGO_MS, data.born_time_ms)
                groups[group] = data
            if groups:
                loaded[topic] = groups
        self.by_topic = loaded

    def load_or_empty(self) -> bool:
        """load(), but a file that cannot be read (nor its .bak) leaves an empty table and the broker starts:
        the filters are rebuilt by the next heartbeats (4.9.8 would refuse to start). False, with the error
        logged and in ``last_error``, when the main file was not loaded."""
        self.by_topic = {}
        ok = self.load()
        if not ok:
            self.by_topic = {}
        if self.last_error is not None:
            log.error("consumerFilter.json not loaded (%s): starting with %s", self.last_error,
                      "its .bak's filters" if ok and self.by_topic else "no consumer filters")
        return ok and self.last_error is None

    # ---- the table ----------------------------------------------------------------------------------------
    def get_topic(self, topic: str) -> list[ConsumerFilterData]:
        """get(topic): every group's filter on the topic, dead ones included (the bit-map dispatcher's list)."""
        groups = self.by_topic.get(topic)
        return list(groups.values()) if groups else []

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
        data.bloom_filter_data = self.bloom.generate(f"{group}#{topic}")
        groups[group] = data
        return True

    def unregister(self, group: str, now_ms: int) -> None:
        """unRegister: the group's filters are marked dead (the group has no member left)."""
        for groups in self.by_topic.values():
            data = groups.get(group)
            if data is not None and not data.dead:
                data.dead_since_ms = now_ms

    def clean(self, now_ms: int) -> None:
        """Drop filters dead for filterDataCleanTimeSpan or longer (ConsumerFilterManager.clean)."""
        for topic in list(self.by_topic):
            groups = self.by_topic[topic]
            for group, data in list(groups.items()):
                if data.dead_since_ms is not None and now_ms - data.dead_since_ms >= self.clean_time_span_ms:
                    log.info("Remove filter consumer %s/%s, died too long!", topic, group)
                    del groups[group]
            if not groups:
                del self.by_topic[topic]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


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


def consume_queue_filter(data: ConsumerFilterData | None, bloom: BloomFilter,
                         calc_enabled: bool) -> Callable[[CqExtUnit | None], bool] | None:
    """ExpressionMessageFilter.isMatchedByConsumeQueue for an SQL92 filter: False (skip the record unread)
    only when the message's bit map lacks one of the group's bits. None — nothing to check — without
    enableCalcFilterBitMap or without valid bloom-filter data (a pull carrying its own subscription builds a
    filter without any, as 4.9.8's does). A unit without an ext unit or bit map, a message stored before the
    filter was born (its bits were computed without it) or a bit map of another length always passes."""
    if data is None or not calc_enabled or not bloom.is_valid(data.bloom_filter_data):
        return None
    assert data.bloom_filter_data is not None
    born = data.born_time_ms
    n_bytes = data.bloom_filter_data.bit_num // 8
    positions = [(p >> 3, 1 << (p & 7)) for p in data.bloom_filter_data.bit_pos]

    def check(unit: CqExtUnit | None) -> bool:
        if unit is None or unit.msg_store_time <= born:  # isMsgInLive: stored after the filter's birth
            return True
        bits = unit.filter_bit_map
        if bits is None or len(bits) != n_bytes:
            return True
        return all(bits[i] & mask for i, mask in positions)
    return check


def bit_map_calculator(manager: ConsumerFilterManager) -> Callable[[str, Callable[[], bytes | None]], bytes | None]:
    """CommitLogDispatcherCalcBitMap (4.9.8), for the store's dispatch thread: a record's bit map holds the
    bits of every group (dead ones too) whose selector matches its properties; None when its topic has no
    filter. A record that cannot be read gets no bit map (so no pull skips it), not an empty one."""
    bloom = manager.bloom

    def calc(topic: str, read: Callable[[], bytes | None]) -> bytes | None:
        filters = manager.get_topic(topic)
        if not filters:
            return None
        raw = read()
        if raw is None:
            return None
        try:
            props = record_properties(raw)
        except RecordError:
            return None
        bits = bytearray(bloom.byte_length)
        for data in filters:
            if not bloom.is_valid(data.bloom_filter_data):
                log.error("[BUG] %s/%s has no bloom filter data: not in the bit map", topic, data.group)
                continue
            assert data.bloom_filter_data is not None
            if data.selector.matches(props):
                bloom.hash_to(data.bloom_filter_data, bits)
        return bytes(bits)
    return calc
