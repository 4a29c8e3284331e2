"""This module owns queue allocation among the consumers of a group (client/.../consumer/rebalance/, 4.9.8).

Pure functions of (group, current client id, all queues, all client ids). The caller sorts both lists first,
as RebalanceImpl.rebalanceByTopic does (``Collections.sort`` on MessageQueue and on the id strings);
``sort_inputs`` does exactly that. Every strategy applies AbstractAllocateMessageQueueStrategy.check: an
empty current id, queue list or id list is an error; a current id that is not in the id list gets nothing.

Java compares strings by UTF-16 code units, Python by code points; the two orders differ only for
characters outside the Basic Multilingual Plane, which client ids and topic names do not contain.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from reference_broker.client.message import MessageQueue

VIRTUAL_NODE_COUNT: Final = 10  # AllocateMessageQueueConsistentHash's default virtualNodeCnt


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def sort_inputs(mq_all: Iterable[MessageQueue], cid_all: Iterable[str]) -> tuple[list[MessageQueue], list[str]]:
    """RebalanceImpl: Collections.sort(mqAll) by (topic, brokerName, queueId); Collections.sort(cidAll)."""
    return sorted(mq_all), sorted(cid_all)


def check(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    """AbstractAllocateMessageQueueStrategy.check: ValueError for empty inputs; False if not a member."""
    if not current_cid:
        raise ValueError("currentCID is empty")
    if not mq_all:
        raise ValueError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError("cidAll is null or cidAll empty")
    return current_cid in cid_all


class AllocateAveragely:
    """AllocateMessageQueueAveragely: contiguous blocks; the first ``N % C`` consumers get one extra."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not check(current_cid, mq_all, cid_all):
            return []
        n, c = len(mq_all), len(cid_all)
        index = cid_all.index(current_cid)
        mod = n % c
        if n <= c:
            average = 1
        elif mod > 0 and index < mod:
            average = n // c + 1
        else:
            average = n // c
        start = index * average if mod > 0 and index < mod else index * average + mod
        count = min(average, n - start)
        return [mq_all[(start + i) % n] for i in range(max(count, 0))]


class AllocateAveragelyByCircle:
    """AllocateMessageQueueAveragelyByCircle: consumer i takes queues i, i + C, i + 2C, ..."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not check(current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        return list(mq_all[index::len(cid_all)])


def md5_hash(key: str) -> int:
    """ConsistentHashRouter.MD5Hash: the digest's first 4 bytes as an unsigned big-endian number."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class AllocateConsistentHash:
    """AllocateMessageQueueConsistentHash over ConsistentHashRouter (common/.../consistenthash, 4.9.8).

    Each client id gets ``virtual_node_count`` ring points at md5_hash(f"{cid}-{i}"), added in the sorted id
    order (a later point with an equal hash replaces the earlier one, as TreeMap.put does). A queue goes to
    the first point at or after md5_hash(str(mq)) (TreeMap.tailMap is inclusive), wrapping to the first.
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_count: int = VIRTUAL_NODE_COUNT) -> None:
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtualNodeCnt :{virtual_node_count}")
        self.virtual_node_count = virtual_node_count

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not check(current_cid, mq_all, cid_all):
            return []
        ring: dict[int, str] = {}
        for cid in cid_all:
            for i in range(self.virtual_node_count):
                ring[md5_hash(f"{cid}-{i}")] = cid
        if not ring:
            return []
        points = sorted(ring)
        result = []
        for mq in mq_all:
            at = bisect.bisect_left(points, md5_hash(str(mq)))
            owner = ring[points[at if at < len(points) else 0]]
            if owner == current_cid:
                result.append(mq)
        return result


class AllocateByConfig:
    """AllocateMessageQueueByConfig: always the configured queues, whoever asks (no check)."""

    name = "CONFIG"

    def __init__(self, message_queues: Sequence[MessageQueue]) -> None:
        self.message_queues = list(message_queues)

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        return list(self.message_queues)
