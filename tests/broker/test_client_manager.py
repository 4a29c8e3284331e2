"""Consumer/producer registries and orderly-queue locks, without sockets."""

from reference_broker.broker.client_manager import (
    ClientChannelInfo,
    ConsumerManager,
    MessageQueueKey,
    ProducerManager,
    RebalanceLockManager,
    SubscriptionData,
)
from reference_broker.common.java_hash import string_hash_code


def test_subscription_build_splits_and_hashes_tags():
    sub = SubscriptionData.build("T", " a || b ||  ")
    assert sub.tags_set == ["a", "b"]
    assert sub.code_set == {string_hash_code("a"), string_hash_code("b")}
    assert sub.matches_tags_code(string_hash_code("a"))
    assert not sub.matches_tags_code(string_hash_code("c"))


def test_subscription_star_or_empty_matches_everything():
    for expr in ("*", "", None, "  "):
        sub = SubscriptionData.build("T", expr)
        assert sub.sub_string == "*"
        assert sub.matches_tags_code(12345)


def test_matches_negative_hash_stored_as_long():
    tag = "Polygenelubricants"  # a well-known negative Java hashCode
    code = string_hash_code(tag)
    assert code < 0
    sub = SubscriptionData.build("T", tag)
    # the consume queue holds the int hash sign-extended into a long; compared as (int) tagsCode
    assert sub.matches_tags_code(code)
    assert sub.matches_tags_code(code + (1 << 32) * 7), "only the low 32 bits count, as (int) does"


def _info(ch, cid, now=0):
    return ClientChannelInfo(ch, cid, last_update_ms=now)


def test_register_reports_join_and_subscription_change_only():
    cm = ConsumerManager()
    subs = [SubscriptionData.build("T", "*")]
    assert cm.register("g", _info("c1", "A"), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", subs, 0)
    # the same heartbeat again: nothing changed
    assert not cm.register("g", _info("c1", "A", 5), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                           subs, 5)
    assert cm.register("g", _info("c2", "B"), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", subs, 6)
    assert sorted(cm.client_ids("g")) == ["A", "B"]
    # a new topic in the subscription set is a change
    subs2 = [*subs, SubscriptionData.build("U", "*")]
    assert cm.register("g", _info("c1", "A", 7), "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                       subs2, 7)
    assert cm.find_subscription("g", "U") is not None


def test_newer_sub_version_replaces_the_expression():
    cm = ConsumerManager()
    cm.register("g", _info("c", "A"), "P", "CLUSTERING", "X", [SubscriptionData.build("T", "a", 1)], 0)
    cm.register("g", _info("c", "A"), "P", "CLUSTERING", "X", [SubscriptionData.build("T", "b", 2)], 0)
    sub = cm.find_subscription("g", "T")
    assert sub is not None and sub.tags_set == ["b"]
    cm.register("g", _info("c", "A"), "P", "CLUSTERING", "X", [SubscriptionData.build("T", "c", 1)], 0)
    sub = cm.find_subscription("g", "T")
    assert sub is not None and sub.tags_set == ["b"], "an older version must not win"


def test_channel_close_and_expiry_remove_members():
    cm = ConsumerManager(channel_expired_ms=100)
    cm.register("g", _info("c1", "A", 0), "P", "CLUSTERING", "X", [], 0)
    cm.register("g", _info("c2", "B", 50), "P", "CLUSTERING", "X", [], 50)
    cm.register("h", _info("c1", "A", 0), "P", "CLUSTERING", "X", [], 0)
    assert sorted(cm.channel_closed("c1")) == ["g", "h"]
    assert cm.client_ids("g") == ["B"]
    assert "h" not in cm.table
    assert cm.scan_not_active(149) == []
    assert cm.scan_not_active(151) == [("g", "c2")]
    assert "g" not in cm.table


def test_producer_manager_expiry():
    pm = ProducerManager(channel_expired_ms=10)
    pm.register("p", _info("c1", "A", 0))
    assert pm.any_channel("p") == "c1"
    pm.scan_not_active(11)
    assert pm.any_channel("p") is None


def test_lock_manager_exclusive_renew_expire_unlock():
    lm = RebalanceLockManager(max_live_ms=1000)
    q0, q1 = MessageQueueKey("T", "b", 0), MessageQueueKey("T", "b", 1)
    assert lm.try_lock_batch("g", [q0, q1], "A", 0) == {q0, q1}
    assert lm.try_lock_batch("g", [q0, q1], "B", 500) == set(), "held by A"
    assert lm.try_lock_batch("g", [q0], "A", 900) == {q0}, "A renews"
    assert lm.try_lock_batch("g", [q0, q1], "B", 1600) == {q1}, "q1 lapsed, q0 was renewed at 900"
    lm.unlock_batch("g", [q0], "B")  # not B's: no effect
    assert lm.try_lock_batch("g", [q0], "B", 1700) == set()
    lm.unlock_batch("g", [q0], "A")
    assert lm.try_lock_batch("g", [q0], "B", 1700) == {q0}
    assert lm.try_lock_batch("other", [q0], "C", 1700) == {q0}, "locks are per group"
