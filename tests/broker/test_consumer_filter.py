"""The broker's consumer filters (reference_broker/broker/consumer_filter.py): which subscriptions get one,
4.9.8's version rules for re-registration, dead filters and their cleaning, and the commit-log check of a
real record's properties. The same rules on real processes: test_sql92_e2e.py."""

from __future__ import annotations

from reference_broker.broker.client_manager import SubscriptionData
from reference_broker.broker.consumer_filter import (
    DEAD_FILTER_KEEP_MS,
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
    m.clean(now_ms=20 + DEAD_FILTER_KEEP_MS)
    assert m.get("U", "G") is not None  # not yet a full day
    m.clean(now_ms=21 + DEAD_FILTER_KEEP_MS)
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
