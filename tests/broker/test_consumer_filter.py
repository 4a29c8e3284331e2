"""The broker's consumer filters (reference_broker/broker/consumer_filter.py): which subscriptions get one,
4.9.8's version rules for re-registration, dead filters and their cleaning, and the commit-log check of a
real record's properties. The same rules on real processes: test_sql92_e2e.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from reference_broker.broker.client_manager import SubscriptionData
from reference_broker.broker.consumer_filter import (
    DEAD_FILTER_KEEP_MS,
    LOAD_DEAD_AGO_MS,
    UNKNOWN_TYPE_REMARK,
    ConsumerFilterManager,
    FilterCompileError,
    build,
    commit_log_filter,
    compile_expression,
    is_tag_type,
)
from reference_broker.common import message as mc
from reference_broker.common.record import prepare_record, write_record
from reference_broker.filter.bloom import BloomFilter


def _sub(expr: str, version: int, etype: str = "SQL92", topic: str = "T") -> SubscriptionData:
    return SubscriptionData.from_json({"topic": topic, "subString": expr, "subVersion": version,
                                       "expressionType": etype})


def test_tag_types_are_null_empty_and_tag_only() -> None:
    assert is_tag_type(None) and is_tag_type("") and is_tag_type("TAG")
    assert not is_tag_type("SQL92") and not is_tag_type("tag")


def test_build_gives_nothing_for_tags_and_for_what_does_not_compile() -> None:
    assert build("T", "G", "a || b", "TAG", 1) is None
    assert build("T", "G", "a >", "SQL92", 1) is None
    assert build("T", "G", "a > 1", "FOO", 1) is None
    data = build("T", "G", "a > 1", "SQL92", 7)
    assert data is not None and data.client_version == 7 and data.selector.matches({"a": "2"})


def test_compile_errors_carry_4_9_8s_remark() -> None:
    try:
        compile_expression("FOO", "a > 1")
    except FilterCompileError as exc:
        assert exc.remark == UNKNOWN_TYPE_REMARK
    else:
        raise AssertionError("an unknown type compiled")
    try:
        compile_expression("SQL92", "a > 'x'")
    except FilterCompileError as exc:
        assert exc.remark == "java.lang.RuntimeException: Value ''x'' cannot be compared."
    else:
        raise AssertionError("a malformed selector compiled")


def test_a_heartbeat_sql92_subscription_keeps_its_expression_and_has_no_tag_codes() -> None:
    sub = _sub("a > 1 || b", 3)
    assert (sub.sub_string, sub.expression_type, sub.code_set, sub.tags_set) == ("a > 1 || b", "SQL92", set(), [])
    assert SubscriptionData.build_typed("T", "x || y", "TAG").tags_set == ["x", "y"]


def test_registration_follows_the_client_version() -> None:
    m = ConsumerFilterManager()
    m.register_subscriptions("G", [_sub("a > 1", 5)], now_ms=1)
    first = m.get("T", "G")
    assert first is not None and first.expression == "a > 1"
    m.register_subscriptions("G", [_sub("a > 2", 5)], now_ms=2)  # same version: kept
    assert m.get("T", "G") is first
    m.register_subscriptions("G", [_sub("a > 2", 6)], now_ms=3)  # newer: replaced
    newer = m.get("T", "G")
    assert newer is not None and newer.expression == "a > 2"
    m.register_subscriptions("G", [_sub("a >", 7)], now_ms=4)  # newer but broken: removed
    assert m.get("T", "G") is None
    m.register_subscriptions("G", [_sub("*", 8, "TAG")], now_ms=5)  # tags: nothing registered
    assert m.get("T", "G") is None


def test_dead_filters_revive_and_are_cleaned_after_a_day() -> None:
    m = ConsumerFilterManager()
    m.register_subscriptions("G", [_sub("a > 1", 1), _sub("b = 'x'", 1, topic="U")], now_ms=10)
    m.register_subscriptions("G", [_sub("a > 1", 1)], now_ms=20)  # U no longer subscribed
    u, t = m.get("U", "G"), m.get("T", "G")
    assert u is not None and u.dead and t is not None and not t.dead
    m.unregister("G", now_ms=30)
    assert t.dead
    m.register_subscriptions("G", [_sub("a > 1", 1)], now_ms=40)  # the same version revives
    assert not t.dead
    m.clean(now_ms=19 + DEAD_FILTER_KEEP_MS)
    assert m.get("U", "G") is not None  # not yet a full day
    m.clean(now_ms=20 + DEAD_FILTER_KEEP_MS)  # 4.9.8: howLongAfterDeath() >= the span
    assert m.get("U", "G") is None and m.get("T", "G") is t


def _record(props: dict[str, str]) -> bytes:
    r = prepare_record(b"T", b"body", mc.properties_to_bytes(props), 0, 0, 0, 1, bytes(4), 1, bytes(4), 2)
    out = bytearray(r.size)
    write_record(out, 0, r, 0, 0, 3, False)
    return bytes(out)


def test_the_commit_log_filter_reads_a_records_properties_tags_and_keys_included() -> None:
    data = build("T", "G", "TAGS = 'A' AND KEYS = 'k1' AND a > 4", "SQL92", 1)
    check = commit_log_filter(data)
    assert check is not None
    assert check(_record({"TAGS": "A", "KEYS": "k1", "a": "5"}))
    assert not check(_record({"TAGS": "B", "KEYS": "k1", "a": "5"}))
    assert not check(_record({"TAGS": "A", "KEYS": "k1", "a": "5.5"}))  # Long.valueOf throws: no match
    assert not check(b"\x00" * 8)  # not a record: no match, no exception
    assert commit_log_filter(None) is None


# ---- consumerFilter.json -------------------------------------------------------------------------------------

# What RocketMQ 4.9.8 wrote for two SQL92 groups on TopicA (enablePropertyFilter=true, defaults otherwise),
# reformatted: the shape, field names and the bloom-filter positions are its.
WRITTEN_BY_498 = {"filterDataByTopic": {"TopicA": {"groupFilterData": {
    "GroupA": {"bloomFilterData": {"bitNum": 112, "bitPos": [29, 107, 11]}, "bornTime": 1795764161739,
               "clientVersion": 1795764161757, "consumerGroup": "GroupA", "dead": False, "deadTime": 0,
               "expression": "a > 5", "expressionType": "SQL92", "topic": "TopicA"},
    "GroupB": {"bloomFilterData": {"bitNum": 112, "bitPos": [103, 32, 24]}, "bornTime": 1795764161888,
               "clientVersion": 1795764161914, "consumerGroup": "GroupB", "dead": False, "deadTime": 0,
               "expression": "color = 'red'", "expressionType": "SQL92", "topic": "TopicA"}},
    "topic": "TopicA"}}}


def test_registered_filters_are_written_in_rocketmq_498s_shape(tmp_path: Path) -> None:
    m = ConsumerFilterManager(tmp_path)
    m.register("TopicA", "GroupA", "a > 5", "SQL92", 1795764161757, now_ms=1795764161739)
    m.register("TopicA", "GroupB", "color = 'red'", "SQL92", 1795764161914, now_ms=1795764161888)
    m.persist()
    written = json.loads((tmp_path / "config" / "consumerFilter.json").read_text(encoding="utf-8"))
    assert written == WRITTEN_BY_498


def test_a_file_written_by_rocketmq_498_loads_with_every_filter_dead(tmp_path: Path) -> None:
    m = ConsumerFilterManager(tmp_path)
    now = 1795764161739 + 3_600_000
    m.decode(json.dumps(WRITTEN_BY_498), now_ms=now)
    a, b = m.get("TopicA", "GroupA"), m.get("TopicA", "GroupB")
    assert a is not None and b is not None
    assert a.selector.matches({"a": "6"}) and not a.selector.matches({"a": "5"})
    assert a.bloom_filter_data == m.bloom.generate("GroupA#TopicA")
    # "we think all consumers are dead when load": dead since 30 s ago (4.9.8's decode)
    assert a.dead_since_ms == now - LOAD_DEAD_AGO_MS and b.dead
    # a consumer that comes back with the same version revives its filter
    m.register("TopicA", "GroupA", "a > 5", "SQL92", 1795764161757, now_ms=now)
    assert not a.dead
    m.clean(now + DEAD_FILTER_KEEP_MS - LOAD_DEAD_AGO_MS)  # GroupB: dead a full day
    assert m.get("TopicA", "GroupB") is None and m.get("TopicA", "GroupA") is a


def test_a_filter_born_after_the_reload_time_is_dead_since_its_birth(tmp_path: Path) -> None:
    m = ConsumerFilterManager(tmp_path)
    m.decode(json.dumps(WRITTEN_BY_498), now_ms=1795764161739 + 10)
    a = m.get("TopicA", "GroupA")
    assert a is not None and a.dead_since_ms == 1795764161739


def test_persist_and_load_round_trip_through_the_file(tmp_path: Path) -> None:
    m = ConsumerFilterManager(tmp_path)
    m.register_subscriptions("G", [_sub("a > 1", 5), _sub("b = 'x'", 6, topic="U")], now_ms=100)
    m.unregister("G", now_ms=200)
    m.persist()
    back = ConsumerFilterManager(tmp_path)
    assert back.load_or_empty()
    t = back.get("T", "G")
    assert t is not None and t.expression == "a > 1" and t.client_version == 5 and t.born_time_ms == 100
    assert t.dead_since_ms == 200  # dead when written: its time of death is kept
    u = back.get("U", "G")
    assert u is not None and u.bloom_filter_data == back.bloom.generate("G#U")


def test_a_file_of_another_bloom_filter_is_ignored_whole(tmp_path: Path) -> None:
    m = ConsumerFilterManager(tmp_path, BloomFilter(10, 64))
    m.decode(json.dumps(WRITTEN_BY_498), now_ms=1)
    assert m.by_topic == {}


HOSTILE = [
    "{",  # not JSON
    "[1, 2]",
    '{"filterDataByTopic": []}',
    '{"filterDataByTopic": {"T": 5}}',
    '{"filterDataByTopic": {"T": {"groupFilterData": {"G": "x"}}}}',
    '{"filterDataByTopic": {"T": {"groupFilterData": {"G": {"expression": 1}}}}}',
    '{"filterDataByTopic": {"T": {"groupFilterData": {"G": {"expression": "a > 1", "expressionType": "SQL92", '
    '"bornTime": "now", "clientVersion": 1}}}}}',
    '{"filterDataByTopic": {"T": {"groupFilterData": {"G": {"expression": "a > 1", "expressionType": "SQL92", '
    '"bornTime": 1, "clientVersion": 1, "bloomFilterData": {"bitNum": 112, "bitPos": "x"}}}}}}',
    "[" * 100_000 + "]" * 100_000,  # nesting deeper than the parser's recursion
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_a_corrupt_or_hostile_file_leaves_an_empty_table_and_says_why(tmp_path: Path, text: str,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config" / "consumerFilter.json"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    m = ConsumerFilterManager(tmp_path)
    m.register("T", "G", "a > 1", "SQL92", 1, now_ms=1)
    with caplog.at_level(logging.ERROR):
        assert not m.load_or_empty()
    assert m.by_topic == {}
    assert m.last_error and "consumerFilter.json" in m.last_error
    assert any("starting with no consumer filters" in r.getMessage() for r in caplog.records)


def test_an_entry_whose_expression_no_longer_compiles_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(WRITTEN_BY_498))
    doc["filterDataByTopic"]["TopicA"]["groupFilterData"]["GroupB"]["expression"] = "color ="
    m = ConsumerFilterManager(tmp_path)
    m.decode(json.dumps(doc), now_ms=1)
    assert m.get("TopicA", "GroupB") is None and m.get("TopicA", "GroupA") is not None
    # a position past the bit map (hand-edited): the bloom filter does not own it, the file is ignored
    doc["filterDataByTopic"]["TopicA"]["groupFilterData"]["GroupA"]["bloomFilterData"]["bitPos"] = [1, 2, 4000]
    m = ConsumerFilterManager(tmp_path)
    m.decode(json.dumps(doc), now_ms=1)
    assert m.by_topic == {}


def test_clean_uses_the_configured_time_span() -> None:
    m = ConsumerFilterManager(clean_time_span_ms=1000)
    m.register("T", "G", "a > 1", "SQL92", 1, now_ms=1)
    m.unregister("G", now_ms=10)
    m.clean(1009)
    assert m.get("T", "G") is not None
    m.clean(1010)  # howLongAfterDeath() >= filterDataCleanTimeSpan
    assert m.get("T", "G") is None
