"""The check service's sans-IO core (broker/transaction_check.py): which op messages resolve which half
messages, how far the op offset moves, and what one run does with one unresolved half message."""

from __future__ import annotations

from reference_broker.broker.transaction_check import Judgement, OpScan, Verdict, judge, next_op_offset

T0 = 1_700_000_000_000
TIMEOUT, MAX, RESERVED = 6000, 15, 72 * 3600 * 1000


def _judge(props=None, born=T0, store=T0, now=T0 + 10_000, start=T0 + 10_000, removed=None) -> Judgement:
    return judge(props or {}, born, store, now, start, TIMEOUT, MAX, RESERVED, removed or {})


def test_ops_below_the_half_offset_are_done_the_others_resolve_half_messages():
    scan = OpScan(mini=10)
    scan.feed(0, "d", b"3")
    scan.feed(1, "d", b"12")
    scan.feed(2, "d", b"10")
    scan.feed(3, "x", b"11")  # another tag: done, not stuck (4.9.8 never passes it)
    scan.feed(4, "d", b"not a number")
    assert scan.removed == {12: 1, 10: 2}
    assert scan.done == [0, 3, 4]


def test_the_op_offset_moves_past_done_ops_without_a_gap():
    assert next_op_offset([5, 6, 8], 5) == 7
    assert next_op_offset([7, 5, 6], 5) == 8
    assert next_op_offset([6, 7], 5) == 5
    assert next_op_offset([], 5) == 5


def test_an_old_enough_half_message_is_checked_and_counted():
    assert _judge() == Judgement(Verdict.CHECK, 1)
    assert _judge({"TRANSACTION_CHECK_TIMES": "4"}) == Judgement(Verdict.CHECK, 5)
    assert _judge(born=T0 + 10_000 - TIMEOUT).verdict is Verdict.CHECK, "exactly transactionTimeOut old"


def test_young_or_fresh_half_messages_stop_the_walk():
    assert _judge(born=T0 + 9_000).verdict is Verdict.STOP  # 1 s old
    assert _judge(store=T0 + 10_000).verdict is Verdict.STOP  # stored after the run began
    assert _judge(born=T0 + 20_000).verdict is Verdict.CHECK  # born "in the future" (clock skew): checked


def test_past_check_max_or_the_reserved_time_is_discarded():
    assert _judge({"TRANSACTION_CHECK_TIMES": str(MAX)}).verdict is Verdict.DISCARD
    assert _judge(born=T0 + 10_000 - RESERVED - 1).verdict is Verdict.DISCARD


def test_a_message_with_its_own_immunity_is_appended_again_until_it_passes():
    immune = {"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}
    assert _judge(immune).verdict is Verdict.REAPPEND_IMMUNE
    copy = {**immune, "TRAN_PREPARED_QUEUE_OFFSET": "3"}
    assert _judge(copy, removed={3: 9}) == Judgement(Verdict.DONE_IMMUNE, op_offset=9)
    assert _judge(immune, born=T0 + 10_000 - 61_000).verdict is Verdict.CHECK
