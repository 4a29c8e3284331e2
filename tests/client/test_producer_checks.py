"""Producer checks that need no broker: batches, selectors, state."""

from __future__ import annotations

import math

import pytest

from reference_broker.client.errors import MQClientError
from reference_broker.client.message import Message, MessageQueue
from reference_broker.client.producer import Producer, select_by_hash
from reference_broker.common.java_hash import string_hash_code


@pytest.fixture
def producer() -> Producer:
    return Producer("PG_checks", "127.0.0.1:1")  # never started: every check here fails before any I/O


@pytest.mark.parametrize(("msgs", "text"), [
    ([], "empty"),
    ([Message("T", b"a"), Message("U", b"b")], "should be the same"),
    ([Message("T", b"a", delay_time_level=2)], "TimeDelayLevel"),
    ([Message("%RETRY%G", b"a")], "Retry Group"),
    ([Message("T", b"a"), Message("T", b"b", wait_store_msg_ok=False)], "waitStoreMsgOK"),
    ([Message("T", b"")], "length is zero"),
])
def test_bad_batches_are_refused_before_sending(producer: Producer, msgs: list[Message], text: str) -> None:
    with pytest.raises(MQClientError, match=text) as info:
        producer.send_batch(msgs)
    assert info.value.code == 13 and not info.value.retriable


def test_a_producer_not_started_says_so(producer: Producer) -> None:
    with pytest.raises(MQClientError, match="not OK"):
        producer.send(Message("T", b"x"))
    with pytest.raises(MQClientError, match="not OK"):
        producer.send_async(Message("T", b"x"), lambda r, e: None)


def test_uniq_key_is_stamped_once_and_kept(producer: Producer) -> None:
    msg = Message("T", b"x")
    with pytest.raises(MQClientError):
        producer.send(msg)
    first = msg.uniq_key
    assert first is not None and len(first) == 32
    with pytest.raises(MQClientError):
        producer.send(msg)
    assert msg.uniq_key == first  # a resend keeps its id, so a checker can see it is the same message


def test_select_by_hash_matches_javas_hash_code_modulo() -> None:
    mqs = [MessageQueue("T", "b", i) for i in range(8)]
    msg = Message("T", b"x")
    for key in ("order-1", "客户-42", ""):
        java_remainder = int(math.fmod(string_hash_code(key), 8))  # Java's %: the sign of the dividend
        assert select_by_hash(mqs, msg, key).queue_id == abs(java_remainder)
    assert select_by_hash(mqs, msg, 13).queue_id == 5
    assert select_by_hash(mqs, msg, -13).queue_id == 5  # Java: -13 % 8 == -5, abs → 5
