"""ProcessQueue bookkeeping: the committed offset is always the smallest unconsumed one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference_broker.client.process_queue import ProcessQueue
from reference_broker.common.record import MessageExt


def msg(offset: int, body: bytes = b"xx", max_offset: int | None = None) -> MessageExt:
    props = {"MAX_OFFSET": str(max_offset)} if max_offset is not None else {}
    return MessageExt("T", body, 0, 0, offset, 0, 0, 0, ("127.0.0.1", 1), 0, ("127.0.0.1", 2), 0, 0, props, 0, 0)


def test_remove_returns_smallest_buffered_offset_then_one_past_the_last() -> None:
    pq = ProcessQueue()
    m = [msg(i) for i in range(10, 15)]
    pq.put_messages(m)
    assert (pq.msg_count, pq.msg_size) == (5, 10)
    assert pq.remove_messages([m[1], m[3]]) == 10  # 10 still unconsumed
    assert pq.remove_messages([m[0]]) == 12
    assert pq.remove_messages([m[2], m[4]]) == 15  # empty: one past the largest ever buffered
    assert (pq.msg_count, pq.msg_size) == (0, 0)
    assert pq.remove_messages([m[0]]) == -1  # nothing buffered at all


def test_duplicate_put_is_ignored() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(1), msg(2)])
    pq.put_messages([msg(2), msg(3)])
    assert pq.msg_count == 3 and pq.offsets() == [1, 2, 3]


def test_max_span_is_last_minus_first_buffered() -> None:
    pq = ProcessQueue()
    m = [msg(i) for i in (0, 5, 3000)]
    pq.put_messages(m)
    assert pq.max_span() == 3000
    pq.remove_messages([m[2]])
    assert pq.max_span() == 5
    pq.remove_messages([m[0], m[1]])
    assert pq.max_span() == 0


def test_put_signals_dispatch_only_when_idle_and_tracks_backlog() -> None:
    pq = ProcessQueue()
    assert pq.put_messages([msg(0, max_offset=10)]) is True
    assert pq.msg_acc_cnt == 10
    assert pq.put_messages([msg(1)]) is False  # a consume task is already on it (orderly)


def test_orderly_take_commit_and_consume_again() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(i) for i in range(5)])
    first = pq.take_messages(2)
    assert [m.queue_offset for m in first] == [0, 1]
    pq.make_messages_to_consume_again(first)  # suspended: the same two come back first
    again = pq.take_messages(3)
    assert [m.queue_offset for m in again] == [0, 1, 2]
    assert pq.commit() == 3
    assert pq.msg_count == 2
    assert [m.queue_offset for m in pq.take_messages(10)] == [3, 4]
    assert pq.commit() == 5
    assert pq.take_messages(1) == [] and not pq.consuming
    assert pq.commit() == -1


def test_rollback_returns_everything_taken() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(i) for i in range(3)])
    pq.take_messages(2)
    pq.rollback()
    assert [m.queue_offset for m in pq.take_messages(5)] == [0, 1, 2]


def test_lock_and_pull_expiry_use_the_given_clock() -> None:
    pq = ProcessQueue()
    pq.last_lock_ts = pq.last_pull_ts = 1000.0
    assert not pq.is_lock_expired(1029.0) and pq.is_lock_expired(1031.0)
    assert not pq.is_pull_expired(1119.0) and pq.is_pull_expired(1121.0)


@given(n=st.integers(1, 60), data=st.data())
def test_committed_offset_never_passes_an_unconsumed_message(n: int, data) -> None:
    pq = ProcessQueue()
    msgs = [msg(100 + i) for i in range(n)]
    pq.put_messages(msgs)
    order = data.draw(st.permutations(msgs))
    consumed: set[int] = set()
    committed = 100
    for m in order:
        offset = pq.remove_messages([m])
        consumed.add(m.queue_offset)
        unconsumed = [x.queue_offset for x in msgs if x.queue_offset not in consumed]
        assert offset == (min(unconsumed) if unconsumed else 100 + n)
        assert offset >= committed  # never goes back
        committed = offset
