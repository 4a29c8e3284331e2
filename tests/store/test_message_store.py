"""MessageStore facade, reads and lookups: RocketMQ's DefaultMessageStoreTest (4.9.8) and getMessage statuses."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import record as rec
from reference_broker.common.java_hash import string_hash_code
from reference_broker.store.message_store import MessageStore, StoreLockedError
from reference_broker.store.status import GetMessageStatus, PutMessageResult
from tests.store.store_helpers import (
    TOPIC,
    Stores,
    make_config,
    make_msg,
    put_ok,
    stores_fixture,
    wait_dispatched,
)

JAVA_HASH_TAG_A = 2598919  # "TagA".hashCode() in Java
JAVA_HASH_TAG_B = 2598920  # "TagB".hashCode() in Java


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


@pytest.fixture(params=["thread", "process"])
def store(request: pytest.FixtureRequest, tmp_path: Path, stores: Stores) -> MessageStore:
    """Each test once with dispatch on the store's thread (4.9.8) and once in the dispatch process
    (dispatchInSeparateProcess): the store's answers must be the same."""
    return stores.open(make_config(tmp_path, dispatch_in_separate_process=request.param == "process"))


def put_many(store: MessageStore, n: int, queue_id: int = 0, topic: str = TOPIC,
             spacing_s: float = 0.0) -> list[PutMessageResult]:
    out = []
    for i in range(n):
        if spacing_s and i:
            time.sleep(spacing_s)  # distinct store timestamps, not a timing assertion
        out.append(put_ok(store, make_msg(f"body-{queue_id}-{i}", topic=topic, queue_id=queue_id)))
    wait_dispatched(store)
    return out


# ---- lock file -----------------------------------------------------------------------------------

def test_repeat_restart(tmp_path: Path, stores: Stores) -> None:
    first = stores.open(make_config(tmp_path))
    put_ok(first, make_msg("before"))
    with pytest.raises(StoreLockedError, match="store already started"):
        first.start()

    second = stores.new(make_config(tmp_path))
    with pytest.raises(StoreLockedError, match=r"Lock failed, MQ already started: .*lock is held by another store"):
        second.load()
    second.shutdown()

    put_ok(first, make_msg("after"))
    wait_dispatched(first)
    first.shutdown()
    assert first.shutdown_normally

    third = stores.open(make_config(tmp_path))
    assert third.last_exit_ok
    result = third.get_message("G", TOPIC, 0, 0, 32)
    assert result.status is GetMessageStatus.FOUND
    assert [rec.decode_message(m).body for m in result.messages] == [b"before", b"after"]


# ---- write then read -----------------------------------------------------------------------------

def test_write_then_read_across_queues(store: MessageStore) -> None:
    results: dict[int, list[PutMessageResult]] = {q: [] for q in range(4)}
    for i in range(40):
        q = i % 4
        r = put_ok(store, make_msg(f"msg-{i}", queue_id=q))
        assert r.append is not None and r.append.logics_offset == i // 4
        results[q].append(r)
    wait_dispatched(store)
    assert store.get_max_phy_offset() > store.config.mapped_file_size_commit_log  # rolled over several files

    for q in range(4):
        res = store.get_message("G", TOPIC, q, 0, 100)
        assert res.status is GetMessageStatus.FOUND
        assert res.message_count == 10
        assert res.queue_offsets == list(range(10))
        assert res.next_begin_offset == 10
        assert (res.min_offset, res.max_offset) == (0, 10)
        decoded = [rec.decode_message(raw, check_crc=True) for raw in res.messages]
        assert [m.body for m in decoded] == [f"msg-{q + 4 * k}".encode() for k in range(10)]
        for k, m in enumerate(decoded):
            append = results[q][k].append
            assert append is not None
            assert (m.topic, m.queue_id, m.queue_offset) == (TOPIC, q, k)
            assert m.commit_log_offset == append.wrote_offset
            assert m.store_size == append.wrote_bytes
            assert m.store_timestamp == append.store_timestamp
            assert m.tags == "TagA"

    middle = store.get_message("G", TOPIC, 1, 3, 4)
    assert middle.status is GetMessageStatus.FOUND
    assert middle.queue_offsets == [3, 4, 5, 6]
    assert middle.next_begin_offset == 7


def test_batch_capped_at_32_messages_in_memory(store: MessageStore) -> None:
    put_many(store, 40)
    first = store.get_message("G", TOPIC, 0, 0, 100)
    assert first.status is GetMessageStatus.FOUND
    assert first.message_count == store.config.max_transfer_count_on_message_in_memory == 32
    assert first.next_begin_offset == 32
    rest = store.get_message("G", TOPIC, 0, first.next_begin_offset, 100)
    assert rest.queue_offsets == list(range(32, 40))
    assert rest.next_begin_offset == 40


def test_batch_capped_at_256_kib_in_memory(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=128 * 1024))
    results = [put_ok(store, make_msg(bytes([i]) * 40_000)) for i in range(10)]
    wait_dispatched(store)
    size = results[0].append.wrote_bytes if results[0].append else 0
    cap = store.config.max_transfer_bytes_on_message_in_memory
    expected = cap // size  # 6 records of ~40 KB fit in 256 KiB, the 7th would not
    assert 1 < expected < 10

    res = store.get_message("G", TOPIC, 0, 0, 100)
    assert res.status is GetMessageStatus.FOUND
    assert res.message_count == expected
    assert res.buffer_total_size == expected * size <= cap
    assert res.next_begin_offset == expected
    assert [rec.decode_message(m).body[:1] for m in res.messages] == [bytes([i]) for i in range(expected)]


def test_batch_capped_at_8_messages_in_disk(tmp_path: Path, stores: Stores) -> None:
    """With no memory budget every message but the newest counts as 'in disk': 8 per batch, pull from slave."""
    store = stores.open(make_config(tmp_path, total_physical_memory_bytes=0))
    put_many(store, 20)
    res = store.get_message("G", TOPIC, 0, 0, 100)
    assert res.status is GetMessageStatus.FOUND
    assert res.message_count == store.config.max_transfer_count_on_message_in_disk == 8
    assert res.next_begin_offset == 8
    assert res.suggest_pulling_from_slave


def test_max_msg_nums_limits_the_batch(store: MessageStore) -> None:
    put_many(store, 10)
    res = store.get_message("G", TOPIC, 0, 2, 3)
    assert res.queue_offsets == [2, 3, 4]
    assert res.next_begin_offset == 5


# ---- GetMessageStatus outcomes ---------------------------------------------------------------------

def test_unknown_queue_is_no_matched_logic_queue(store: MessageStore) -> None:
    put_many(store, 3)
    for offset in (0, 5):
        res = store.get_message("G", "NoSuchTopic", 0, offset, 32)
        assert res.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert res.next_begin_offset == 0
    assert store.get_message("G", TOPIC, 7, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


def test_empty_queue_is_no_message_in_queue(store: MessageStore) -> None:
    store.find_consume_queue("EmptyTopic", 0)
    res = store.get_message("G", "EmptyTopic", 0, 3, 32)
    assert res.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert res.next_begin_offset == 0
    assert res.messages == []


def test_offset_overflow_one_and_badly(store: MessageStore) -> None:
    put_many(store, 3)
    one = store.get_message("G", TOPIC, 0, 3, 32)
    assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert one.next_begin_offset == 3
    badly = store.get_message("G", TOPIC, 0, 10, 32)
    assert badly.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert badly.next_begin_offset == 3  # to the end, as 4.9.8 answers (harness/wire_diff.py)


def _age_commit_log(store: MessageStore, hours: float) -> None:
    t = time.time() - hours * 3600
    for p in store.config.store_path_commit_log.iterdir():
        os.utime(p, (t, t))


def test_offset_too_small_after_cleaning(store: MessageStore) -> None:
    results = put_many(store, 30)
    assert len(store.commit_log.mapped_file_queue.mapped_files) >= 3
    _age_commit_log(store, store.config.file_reserved_time_hours + 1)
    store.clean_commit_log.used_ratio = lambda _path: 0.1
    store.execute_delete_files_manually()
    store.clean_files()

    min_phy = store.get_min_phy_offset()
    assert min_phy > 0
    min_q = sum(1 for r in results if r.append and r.append.wrote_offset < min_phy)
    assert min_q > 0
    assert store.get_min_offset_in_queue(TOPIC, 0) == min_q
    assert store.get_max_offset_in_queue(TOPIC, 0) == 30

    small = store.get_message("G", TOPIC, 0, 0, 32)
    assert small.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert small.next_begin_offset == min_q
    found = store.get_message("G", TOPIC, 0, min_q, 32)
    assert found.status is GetMessageStatus.FOUND
    assert found.queue_offsets[0] == min_q
    assert rec.decode_message(found.messages[0]).body == f"body-0-{min_q}".encode()
    badly = store.get_message("G", TOPIC, 0, 40, 32)
    assert badly.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert badly.next_begin_offset == 30  # to the end

    # (offset 0 itself is special: like CommitLog.getMessage it falls back to the first file)
    gone = results[1].append
    assert gone is not None and gone.wrote_offset < min_phy
    assert store.look_message_by_offset(gone.wrote_offset) is None
    append_min = results[min_q].append
    assert append_min is not None
    assert store.get_earliest_message_time(TOPIC, 0) == append_min.store_timestamp


def test_message_was_removing_until_the_consume_queue_is_cleaned(store: MessageStore) -> None:
    fs = store.config.mapped_file_size_commit_log
    q0 = put_many(store, 20, queue_id=0)
    last_q0_file = (q0[-1].append.wrote_offset if q0[-1].append else 0) // fs
    while store.get_max_phy_offset() // fs <= last_q0_file:  # queue 1 moves on into a newer file
        put_ok(store, make_msg("q1", queue_id=1))
    wait_dispatched(store)
    _age_commit_log(store, store.config.file_reserved_time_hours + 1)
    store.clean_commit_log.used_ratio = lambda _path: 0.1
    store.execute_delete_files_manually()
    assert store.clean_commit_log.run() > 0
    assert store.get_min_phy_offset() > last_q0_file * fs  # every queue-0 message is gone

    res = store.get_message("G", TOPIC, 0, 1, 32)
    assert res.status is GetMessageStatus.MESSAGE_WAS_REMOVING
    assert res.messages == []
    assert res.next_begin_offset == 20
    assert store.get_message("G", TOPIC, 1, 0, 32).status is GetMessageStatus.FOUND

    store.clean_consume_queue.run()
    assert store.get_min_offset_in_queue(TOPIC, 0) == 20
    assert store.get_message("G", TOPIC, 0, 1, 32).status is GetMessageStatus.OFFSET_TOO_SMALL
    assert store.get_message("G", TOPIC, 0, 20, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE


def test_tags_filter_rejecting_everything_is_no_matched_message(store: MessageStore) -> None:
    put_many(store, 5)
    res = store.get_message("G", TOPIC, 0, 0, 32, tags_filter=lambda _code: False)
    assert res.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert res.messages == []
    assert res.next_begin_offset == 5  # the filtered units were scanned and are skipped


def test_tags_filter_selects_by_java_hash_of_the_tag(store: MessageStore) -> None:
    for i in range(6):
        put_ok(store, make_msg(f"m{i}", tags="TagA" if i % 2 == 0 else "TagB"))
    put_ok(store, make_msg("untagged", tags=None))
    wait_dispatched(store)
    assert string_hash_code("TagA") == JAVA_HASH_TAG_A
    cq = store.find_consume_queue(TOPIC, 0, create=False)
    assert cq is not None
    assert [cq.get_unit(i)[2] for i in range(7)] == [  # type: ignore[index]
        JAVA_HASH_TAG_A, JAVA_HASH_TAG_B, JAVA_HASH_TAG_A, JAVA_HASH_TAG_B, JAVA_HASH_TAG_A, JAVA_HASH_TAG_B, 0]

    res = store.get_message("G", TOPIC, 0, 0, 32, tags_filter=lambda code: code == JAVA_HASH_TAG_A)
    assert res.status is GetMessageStatus.FOUND
    assert res.queue_offsets == [0, 2, 4]
    assert [rec.decode_message(m).tags for m in res.messages] == ["TagA"] * 3
    assert res.next_begin_offset == 7


# ---- lookups -------------------------------------------------------------------------------------

def test_look_message_by_offset_first_last_and_out_of_bound(store: MessageStore) -> None:
    results = put_many(store, 10, queue_id=3)
    first, last = results[0].append, results[-1].append
    assert first is not None and last is not None
    m = store.look_message_by_offset(first.wrote_offset)
    assert m is not None and m.body == b"body-3-0"
    m = store.look_message_by_offset(first.wrote_offset, first.wrote_bytes)
    assert m is not None and m.body == b"body-3-0"
    m = store.look_message_by_offset(last.wrote_offset, last.wrote_bytes)
    assert m is not None and (m.body, m.queue_id, m.queue_offset) == (b"body-3-9", 3, 9)
    assert store.look_message_by_offset(store.get_max_phy_offset()) is None
    assert store.look_message_by_offset(store.get_max_phy_offset() + 10_000) is None


def test_look_message_by_msg_id(store: MessageStore) -> None:
    results = put_many(store, 5)
    append = results[2].append
    assert append is not None
    assert len(append.msg_id) == 32
    m = store.look_message_by_msg_id(append.msg_id)
    assert m is not None
    assert m.body == b"body-0-2"
    assert m.offset_msg_id == append.msg_id
    with pytest.raises(rec.MessageIdError):
        store.look_message_by_msg_id("not-an-id")


def test_query_message_by_key_and_uniq_key_within_time_range(store: MessageStore) -> None:
    results = []
    for i in range(10):
        results.append(put_ok(store, make_msg(f"q{i}", keys=f"key-{i} common", uniq_key=f"UNIQ{i:028d}")))
    put_ok(store, make_msg("other topic", topic="Other", keys="key-3"))
    wait_dispatched(store)
    first_ts = results[0].append.store_timestamp if results[0].append else 0
    last_ts = results[-1].append.store_timestamp if results[-1].append else 0
    begin, end = first_ts - 1000, last_ts + 1000

    by_key = store.query_message(TOPIC, "key-3", 32, begin, end)
    assert [m.body for m in by_key] == [b"q3"]
    assert sorted(m.body for m in store.query_message(TOPIC, "common", 32, begin, end)) == sorted(
        f"q{i}".encode() for i in range(10))
    by_uniq = store.query_message(TOPIC, f"UNIQ{5:028d}", 32, begin, end)
    assert [m.body for m in by_uniq] == [b"q5"]
    assert [m.body for m in store.query_message("Other", "key-3", 32, begin, end)] == [b"other topic"]

    assert store.query_message(TOPIC, "key-3", 32, 0, first_ts - 5000) == []
    assert store.query_message(TOPIC, "key-3", 32, last_ts + 5000, last_ts + 10_000) == []
    assert store.query_message(TOPIC, "no-such-key", 32, begin, end) == []


# ---- offsets and times -----------------------------------------------------------------------------

@pytest.fixture
def timed(store: MessageStore) -> list[int]:
    """10 messages in queue 0, stored at least 10 ms apart; their store timestamps."""
    results = put_many(store, 10, spacing_s=0.011)
    stamps = [r.append.store_timestamp for r in results if r.append]
    assert all(b - a >= 10 for a, b in itertools.pairwise(stamps))
    return stamps


def test_get_offset_in_queue_by_time(store: MessageStore, timed: list[int]) -> None:
    assert [store.get_offset_in_queue_by_time(TOPIC, 0, ts) for ts in timed] == list(range(10))


def test_get_offset_in_queue_by_time_skewed_picks_the_closer_message(store: MessageStore, timed: list[int]) -> None:
    """DefaultMessageStoreTest.testGetOffsetInQueueByTime_TimestampIsSkewing: +-2 ms still finds the message."""
    assert [store.get_offset_in_queue_by_time(TOPIC, 0, ts + 2) for ts in timed] == list(range(10))
    assert [store.get_offset_in_queue_by_time(TOPIC, 0, ts - 2) for ts in timed] == list(range(10))


def test_get_offset_in_queue_by_time_before_and_after_all(store: MessageStore, timed: list[int]) -> None:
    for ts in timed:
        assert store.get_offset_in_queue_by_time(TOPIC, 0, ts - 20_000) == 0
        assert store.get_offset_in_queue_by_time(TOPIC, 0, ts + 20_000) == 9


def test_get_offset_in_queue_by_time_missing_queue(store: MessageStore, timed: list[int]) -> None:
    assert store.get_offset_in_queue_by_time(TOPIC, 1, timed[0]) == 0
    assert store.get_offset_in_queue_by_time("NoSuchTopic", 0, timed[0]) == 0


def test_store_timestamps_and_offsets(store: MessageStore, timed: list[int]) -> None:
    assert [store.get_message_store_timestamp(TOPIC, 0, i) for i in range(10)] == timed
    assert store.get_message_store_timestamp(TOPIC, 1, 0) == -1
    assert store.get_message_store_timestamp(TOPIC, 0, -1) == -1
    assert store.get_message_store_timestamp(TOPIC, 0, 10) == -1
    assert store.get_earliest_message_time(TOPIC, 0) == timed[0]
    assert store.get_earliest_message_time(TOPIC, 1) == -1
    assert store.get_min_offset_in_queue(TOPIC, 0) == 0
    assert store.get_max_offset_in_queue(TOPIC, 0) == 10
    assert store.get_max_offset_in_queue(TOPIC, 1) == 0


def test_get_commit_log_offset_in_queue(store: MessageStore) -> None:
    results = []
    for i in range(6):
        results.append(put_ok(store, make_msg(f"x{i}", queue_id=i % 2)))
    wait_dispatched(store)
    for q in range(2):
        expected = [r.append.wrote_offset for r in results[q::2] if r.append]
        assert [store.get_commit_log_offset_in_queue(TOPIC, q, i) for i in range(3)] == expected
    assert store.get_commit_log_offset_in_queue(TOPIC, 0, 3) == 0
    assert store.get_commit_log_offset_in_queue(TOPIC, 9, 0) == 0
