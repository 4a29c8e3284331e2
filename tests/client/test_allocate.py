"""Queue allocation: the tables of RocketMQ's AllocateMessageQueueAveragely(ByCircle)Test (4.9.8), and
whole-group properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_broker.client.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
    md5_hash,
    sort_inputs,
)
from reference_broker.client.message import MessageQueue


def queues(n: int, topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, "broker-a", i) for i in range(n)]


def cids(c: int) -> list[str]:
    # Zero-padded so the lexicographic order is the numeric one and the tables read naturally.
    return [f"CID{i:02d}" for i in range(c)]


def assignment(strategy, n: int, c: int) -> list[list[int]]:
    mqs, ids = sort_inputs(queues(n), cids(c))
    return [[mq.queue_id for mq in strategy.allocate("G", cid, mqs, ids)] for cid in ids]


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (5, 2, [[0, 1, 2], [3, 4]]),
        (20, 6, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10], [11, 12, 13], [14, 15, 16], [17, 18, 19]]),
        (3, 5, [[0], [1], [2], [], []]),
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
    ],
)
def test_averagely_matches_rocketmq_tables(n: int, c: int, expected: list[list[int]]) -> None:
    assert assignment(AllocateAveragely(), n, c) == expected


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (5, 2, [[0, 2, 4], [1, 3]]),
        (20, 6, [[0, 6, 12, 18], [1, 7, 13, 19], [2, 8, 14], [3, 9, 15], [4, 10, 16], [5, 11, 17]]),
        (3, 5, [[0], [1], [2], [], []]),
        (10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
    ],
)
def test_by_circle_matches_rocketmq_tables(n: int, c: int, expected: list[list[int]]) -> None:
    assert assignment(AllocateAveragelyByCircle(), n, c) == expected


def test_sort_orders_queues_by_topic_broker_queue_and_ids_lexicographically() -> None:
    mqs = [MessageQueue("b", "x", 0), MessageQueue("a", "y", 1), MessageQueue("a", "y", 0), MessageQueue("a", "x", 9)]
    sorted_mqs, sorted_ids = sort_inputs(mqs, ["CID2", "CID10", "CID1"])
    assert sorted_mqs == [MessageQueue("a", "x", 9), MessageQueue("a", "y", 0), MessageQueue("a", "y", 1),
                          MessageQueue("b", "x", 0)]
    assert sorted_ids == ["CID1", "CID10", "CID2"]  # String.compareTo, not numeric


def test_message_queue_to_string_is_javas() -> None:
    assert str(MessageQueue("T", "broker-a", 3)) == "MessageQueue [topic=T, brokerName=broker-a, queueId=3]"


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash()])
def test_check_rejects_empty_inputs_and_ignores_strangers(strategy) -> None:
    with pytest.raises(ValueError, match="currentCID"):
        strategy.allocate("G", "", queues(2), ["a"])
    with pytest.raises(ValueError, match="mqAll"):
        strategy.allocate("G", "a", [], ["a"])
    with pytest.raises(ValueError, match="cidAll"):
        strategy.allocate("G", "a", queues(2), [])
    assert strategy.allocate("G", "stranger", queues(2), ["a", "b"]) == []


def test_md5_hash_is_first_four_digest_bytes_unsigned() -> None:
    # md5("") = d41d8cd98f00b204e9800998ecf8427e
    assert md5_hash("") == 0xD41D8CD9
    # md5("abc") = 900150983cd24fb0d6963f7d28e17f72: top bit set, still positive
    assert md5_hash("abc") == 0x90015098


def test_consistent_hash_routes_to_first_ring_point_at_or_after_the_queue_hash() -> None:
    ids = ["cid-a", "cid-b", "cid-c"]
    mqs = queues(16)
    ring = sorted((md5_hash(f"{cid}-{i}"), cid) for cid in ids for i in range(10))
    strategy = AllocateConsistentHash()
    got = {cid: strategy.allocate("G", cid, mqs, ids) for cid in ids}
    for mq in mqs:
        h = md5_hash(str(mq))
        owner = next((cid for point, cid in ring if point >= h), ring[0][1])
        assert mq in got[owner]


def test_consistent_hash_moves_few_queues_when_a_consumer_joins() -> None:
    mqs = queues(64)
    strategy = AllocateConsistentHash()
    before_ids = [f"c{i}" for i in range(4)]
    after_ids = [*before_ids, "c4"]
    before = {mq: cid for cid in before_ids for mq in strategy.allocate("G", cid, mqs, before_ids)}
    after = {mq: cid for cid in after_ids for mq in strategy.allocate("G", cid, mqs, after_ids)}
    moved = [mq for mq in mqs if before[mq] != after[mq]]
    # Only queues taken by the newcomer move; nobody else's change hands.
    assert all(after[mq] == "c4" for mq in moved)


def test_by_config_returns_the_configured_queues() -> None:
    wanted = [MessageQueue("T", "b", 7)]
    assert AllocateByConfig(wanted).allocate("G", "anyone", queues(3), ["x"]) == wanted


@given(n=st.integers(1, 64), c=st.integers(1, 24),
       strategy=st.sampled_from([AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash()]))
def test_every_queue_assigned_exactly_once(n: int, c: int, strategy) -> None:
    mqs, ids = sort_inputs(queues(n), [f"10.0.0.{i}@{i * 7}" for i in range(c)])
    taken = [mq for cid in ids for mq in strategy.allocate("G", cid, mqs, ids)]
    assert sorted(taken) == mqs


@given(n=st.integers(1, 64), c=st.integers(1, 24),
       strategy=st.sampled_from([AllocateAveragely(), AllocateAveragelyByCircle()]))
def test_averaging_strategies_balance_within_one(n: int, c: int, strategy) -> None:
    mqs, ids = sort_inputs(queues(n), cids(c))
    counts = [len(strategy.allocate("G", cid, mqs, ids)) for cid in ids]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == n
