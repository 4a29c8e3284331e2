"""getMessage's read-path limits (DefaultMessageStore.getMessage, isTheBatchFull, checkInDiskByCommitOffset, 4.9.8).

- isTheBatchFull, for a message "in disk": full when ``bufferTotal + sizePy > maxTransferBytesOnMessageInDisk``
  (64 KiB) — the bytes already taken plus the next message's size — or when ``messageTotal >
  maxTransferCountOnMessageInDisk - 1`` (8). The first message is always taken.
- checkInDiskByCommitOffset: a message is "in disk" when ``maxOffsetPy - offsetPy >
  TOTAL_PHYSICAL_MEMORY_SIZE * accessMessageInMemoryMaxRatio / 100`` (40 %), strictly greater.
- OFFSET_FOUND_NULL: the offset lies within [minOffset, maxOffset) but getIndexBuffer finds no consume-queue
  file for it; nextBeginOffset = nextOffsetCorrection(offset, consumeQueue.rollNextFile(offset)), the first
  offset of the next file (a SLAVE keeps the client's offset).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.store.config import BrokerRole
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus, PutMessageResult
from tests.store.store_helpers import TOPIC, Stores, make_config, make_msg, put_ok, stores_fixture, wait_dispatched

KiB = 1024


@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def sized_msg(store: MessageStore, record_size: int, i: int) -> rec.MessageExtBrokerInner:
    """A message whose record is exactly ``record_size`` bytes (IPv4 hosts, tag TagA)."""
    props = rec.stored_props_length(mc.properties_to_bytes({mc.PROPERTY_TAGS: "TagA"}),
                                    store.commit_log.append_prop_crc)
    body_len = record_size - rec.FIXED_PART_V4 - len(TOPIC) - props
    return make_msg(bytes([i]) * body_len)


def put_sized(store: MessageStore, record_size: int, n: int) -> list[PutMessageResult]:
    results = [put_ok(store, sized_msg(store, record_size, i)) for i in range(n)]
    assert all(r.append is not None and r.append.wrote_bytes == record_size for r in results)
    wait_dispatched(store)
    return results


# ---- the in-disk byte cap (maxTransferBytesOnMessageInDisk, 64 KiB) ------------------------------------

@pytest.mark.parametrize(
    ("record_size", "per_batch"),
    [
        (16 * KiB, 4),  # 3 taken (48 KiB) + 16 KiB = 64 KiB, not more than the cap: the 4th is taken; 5th not
        (16 * KiB + 1, 3),  # 3 taken + the 4th's size is 1 byte over the cap
        (10 * KiB, 6),  # ~10 KiB messages: 6 (60 KiB); 60 + 10 KiB > 64 KiB
    ],
)
def test_in_disk_batch_stops_at_the_byte_cap(tmp_path: Path, stores: Stores, record_size: int,
                                             per_batch: int) -> None:
    # No memory budget: every message but the newest counts as "in disk" (the count cap, 8, is not reached).
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=1024 * KiB, total_physical_memory_bytes=0))
    cap = store.config.max_transfer_bytes_on_message_in_disk
    assert cap == 64 * KiB and per_batch < store.config.max_transfer_count_on_message_in_disk
    put_sized(store, record_size, 12)

    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert res.status is GetMessageStatus.FOUND
    assert res.message_count == per_batch
    assert res.buffer_total_size == per_batch * record_size <= cap < (per_batch + 1) * record_size
    assert res.queue_offsets == list(range(per_batch))
    assert res.next_begin_offset == per_batch
    assert res.suggest_pulling_from_slave
    assert [rec.decode_message(m).body[:1] for m in res.messages] == [bytes([i]) for i in range(per_batch)]

    nxt = store.get_message("G", TOPIC, 0, res.next_begin_offset, 32)
    assert nxt.queue_offsets == list(range(per_batch, 2 * per_batch))


def test_the_first_message_is_taken_whatever_its_size(tmp_path: Path, stores: Stores) -> None:
    """isTheBatchFull is false while nothing is taken: a message larger than the cap still comes, alone."""
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=1024 * KiB, total_physical_memory_bytes=0))
    put_sized(store, 80 * KiB, 3)
    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert res.queue_offsets == [0]
    assert res.buffer_total_size == 80 * KiB > store.config.max_transfer_bytes_on_message_in_disk


# ---- the 40 %-of-memory boundary (accessMessageInMemoryMaxRatio) --------------------------------------

def total_memory_for(budget: int, ratio: int = 40) -> int:
    """The smallest total memory whose ``ratio`` % budget is ``budget`` bytes."""
    total = -(-budget * 100 // ratio)
    assert total * ratio // 100 == budget
    assert int(total * (ratio / 100.0)) == budget  # RocketMQ's (long) (TOTAL * (ratio / 100.0)) agrees
    return total


def test_in_memory_boundary_at_40_percent_of_memory(tmp_path: Path, stores: Stores) -> None:
    """Message 8 (the 9th) decides the batch: in memory the count cap is 32, in disk 8 (8 already taken)."""
    store = stores.open(make_config(tmp_path))
    assert store.config.access_message_in_memory_max_ratio == 40
    results = [put_ok(store, make_msg(f"m{i}")) for i in range(20)]
    wait_dispatched(store)
    ninth = results[8].append
    assert ninth is not None
    backlog = store.get_max_phy_offset() - ninth.wrote_offset  # maxOffsetPy - offsetPy of message 8

    # Backlog equal to 40 % of memory: not more than the budget, so in memory — all 20 come.
    store.config.total_physical_memory_bytes = total_memory_for(backlog)
    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert res.queue_offsets == list(range(20))
    assert not res.suggest_pulling_from_slave

    # One byte less memory budget: message 8 is in disk and the batch stops at the in-disk count, 8.
    store.config.total_physical_memory_bytes = total_memory_for(backlog - 1)
    res = store.get_message("G", TOPIC, 0, 0, 32)
    assert res.queue_offsets == list(range(8))
    assert res.next_begin_offset == 8
    assert res.suggest_pulling_from_slave  # diff to the last unit examined (message 8) exceeds the budget

    # The default machine memory: all of this is in memory.
    store.config.total_physical_memory_bytes = 8 << 30
    assert store.get_message("G", TOPIC, 0, 0, 32).message_count == 20


# ---- OFFSET_FOUND_NULL -----------------------------------------------------------------------------------

UNITS_PER_CQ_FILE = 4


def store_with_a_missing_consume_queue_file(tmp_path: Path, stores: Stores, **overrides: object) -> MessageStore:
    """20 messages in 5 consume-queue files of 4 units; file 1 (units 4-7) deleted while the store is down."""
    cfg = make_config(tmp_path, mapped_file_size_consume_queue=20 * UNITS_PER_CQ_FILE)
    store = stores.open(cfg)
    for i in range(20):
        put_ok(store, make_msg(f"m{i}"))
    wait_dispatched(store)
    store.shutdown()
    qdir = tmp_path / "consumequeue" / TOPIC / "0"
    assert sorted(p.name for p in qdir.iterdir()) == [f"{i * 80:020d}" for i in range(5)]
    (qdir / f"{80:020d}").unlink()
    again = stores.open(make_config(tmp_path, mapped_file_size_consume_queue=20 * UNITS_PER_CQ_FILE,
                                    **overrides))
    assert again.last_exit_ok
    return again


def test_offset_found_null_when_the_consume_queue_file_is_missing(tmp_path: Path, stores: Stores) -> None:
    store = store_with_a_missing_consume_queue_file(tmp_path, stores)
    assert (store.get_min_offset_in_queue(TOPIC, 0), store.get_max_offset_in_queue(TOPIC, 0)) == (0, 20)

    for offset in (4, 5, 7):
        res = store.get_message("G", TOPIC, 0, offset, 32)
        assert res.status is GetMessageStatus.OFFSET_FOUND_NULL
        assert res.next_begin_offset == 8  # rollNextFile(offset): offset + 4 - offset % 4
        assert (res.min_offset, res.max_offset) == (0, 20)
        assert res.messages == [] and res.buffer_total_size == 0

    # A consumer following nextBeginOffset skips the missing file and reads everything else.
    got: list[bytes] = []
    offset = 0
    statuses = []
    while offset < 20:
        res = store.get_message("G", TOPIC, 0, offset, 32)
        statuses.append(res.status)
        got += [rec.decode_message(m).body for m in res.messages]
        offset = res.next_begin_offset
    assert statuses.count(GetMessageStatus.OFFSET_FOUND_NULL) == 1
    assert got == [f"m{i}".encode() for i in (*range(4), *range(8, 20))]


def test_offset_found_null_on_a_slave_keeps_the_offset(tmp_path: Path, stores: Stores) -> None:
    """nextOffsetCorrection: only a master moves the client's offset."""
    store = store_with_a_missing_consume_queue_file(tmp_path, stores, broker_role=BrokerRole.SLAVE)
    res = store.get_message("G", TOPIC, 0, 5, 32)
    assert res.status is GetMessageStatus.OFFSET_FOUND_NULL
    assert res.next_begin_offset == 5
