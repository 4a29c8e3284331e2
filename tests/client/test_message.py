"""Message, MessageQueue, subscriptions and the client-side validators."""

from __future__ import annotations

import pytest

from reference_broker.client.errors import MQClientError
from reference_broker.client.message import Message, MessageQueue
from reference_broker.client.subscription import build_subscription_data
from reference_broker.client.validators import check_group, check_message, check_topic
from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.record import MessageExt
from reference_broker.remoting.codes import ResponseCode


def test_message_keeps_tags_keys_delay_and_wait_in_properties() -> None:
    msg = Message("T", b"x", tags="A", keys=["k1", "k2"], delay_time_level=3)
    assert msg.properties == {"TAGS": "A", "KEYS": "k1 k2", "DELAY": "3", "WAIT": "true"}
    assert (msg.tags, msg.keys, msg.delay_time_level, msg.wait_store_msg_ok) == ("A", "k1 k2", 3, True)
    msg.tags = None
    msg.delay_time_level = 0
    assert "TAGS" not in msg.properties and "DELAY" not in msg.properties
    assert not Message("T", b"x", wait_store_msg_ok=False).wait_store_msg_ok


def test_user_properties_refuse_reserved_names() -> None:
    msg = Message("T", b"x")
    msg.put_user_property("color", "red")
    assert msg.properties["color"] == "red"
    for reserved in ("UNIQ_KEY", "TAGS", "DELAY"):
        with pytest.raises(ValueError, match="used by system"):
            msg.put_user_property(reserved, "v")
    with pytest.raises(ValueError):
        msg.put_user_property("empty", "")


def test_message_queue_is_ordered_hashable_and_json_round_trips() -> None:
    mq = MessageQueue("T", "b", 2)
    assert MessageQueue.from_json(mq.to_json()) == mq
    assert {mq: 1}[MessageQueue("T", "b", 2)] == 1
    assert MessageQueue("T", "b", 10) > MessageQueue("T", "b", 9) > MessageQueue("T", "a", 99)


def test_subscription_parses_tags_and_java_hash_codes() -> None:
    sub = build_subscription_data("T", " TagA ||TagB|| ||TagA ")
    assert sub.tags_set == {"TagA", "TagB"}
    assert sub.code_set == {string_hash_code("TagA"), string_hash_code("TagB")}
    assert sub.sub_string == " TagA ||TagB|| ||TagA "
    for everything in ("*", "", None, " * "):
        assert build_subscription_data("T", everything).matches_all


def _ext(tags: str | None) -> MessageExt:
    props = {"TAGS": tags} if tags is not None else {}
    return MessageExt("T", b"", 0, 0, 0, 0, 0, 0, ("127.0.0.1", 1), 0, ("127.0.0.1", 2), 0, 0, props, 0, 0)


def test_client_recheck_keeps_exact_tags_only() -> None:
    sub = build_subscription_data("T", "A || B")
    msgs = [_ext("A"), _ext("B"), _ext("C"), _ext(None)]
    assert [m.tags for m in sub.filter(msgs)] == ["A", "B"]
    assert [sub.is_matched(m) for m in msgs] == [True, True, False, False]
    assert build_subscription_data("T", "*").filter(msgs) == msgs


@pytest.mark.parametrize(("topic", "code"), [
    ("", ResponseCode.MESSAGE_ILLEGAL),
    ("x" * 128, ResponseCode.MESSAGE_ILLEGAL),
    ("bad topic", ResponseCode.MESSAGE_ILLEGAL),
    ("SCHEDULE_TOPIC_XXXX", ResponseCode.NO_PERMISSION),
])
def test_bad_topics_are_refused(topic: str, code: int) -> None:
    with pytest.raises(MQClientError) as info:
        check_topic(topic)
    assert info.value.code == code and not info.value.retriable


def test_good_topic_and_group_pass() -> None:
    check_topic("%RETRY%group_1-a|b")
    check_group("CID_group-1")
    with pytest.raises(MQClientError):
        check_group("bad group")


def test_message_body_checks() -> None:
    with pytest.raises(MQClientError, match="length is zero"):
        check_message(Message("T", b""), 10)
    with pytest.raises(MQClientError, match="over max value"):
        check_message(Message("T", b"x" * 11), 10)
    check_message(Message("T", b"x" * 10), 10)
