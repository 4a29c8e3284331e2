"""Shared checks for the crash-recovery tests: walk the commit log, verify consume queues and keys.

Used by ``test_recovery_properties.py`` (forked writers, emulated loss) and ``test_kill9.py`` (real
SIGKILL). Every check reads the store only through what a consumer or an operator could see: records
in commit-log order, consume-queue units, ``get_message`` and the key index.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

from reference_broker.common import record as rec
from reference_broker.store.config import FlushDiskType, MessageStoreConfig
from reference_broker.store.message_store import MessageStore
from reference_broker.store.status import GetMessageStatus

BODY_POS = 88  # IPv4 hosts: the body starts after its 4-byte length at @84 (common/record.py's field table)


def make_config(root: Path, *, commit_log_file: int, cq_file: int, flush: FlushDiskType,
                hash_slots: int = 64, index_num: int = 256,
                flush_interval_ms: int = 500) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=commit_log_file,
        mapped_file_size_consume_queue=cq_file,
        max_hash_slot_num=hash_slots,
        max_index_num=index_num,
        flush_disk_type=flush,
        flush_interval_commit_log_ms=flush_interval_ms,
    )


def scan_commit_log(store: MessageStore) -> list[rec.MessageExt]:
    """Every record from the min to the max offset, in log order; each must decode with its CRC (the
    whole-record CRC when the store writes one)."""
    cl = store.commit_log
    if not cl.mapped_file_queue.mapped_files:
        return []
    out: list[rec.MessageExt] = []
    off = cl.get_min_offset()
    end = cl.get_max_offset()
    fs = cl.file_size
    while off < end:
        if fs - off % fs < rec.END_FILE_MIN_BLANK_LENGTH:
            off = cl.roll_next_file(off)
            continue
        head = cl.read_bytes(off, 8)
        assert head is not None, f"commit log unreadable at {off} (max {end})"
        size, magic = struct.unpack(">ii", head)
        if magic == rec.BLANK_MAGIC_CODE:
            off = cl.roll_next_file(off)
            continue
        raw = cl.read_bytes(off, size) if size > 0 else None
        assert raw is not None, f"record at {off} of size {size} runs past the write position {end}"
        m = rec.decode_message(raw, check_crc=True, verify_prop_crc=store.config.verify_prop_crc())
        assert m.commit_log_offset == off, f"record at {off} says PHYSICALOFFSET {m.commit_log_offset}"
        out.append(m)
        off += size
    assert off == end, f"the last record ends at {off}, past the commit log's max offset {end}"
    return out


def check_consume_queues(store: MessageStore, records: list[rec.MessageExt]) -> None:
    """Each queue holds exactly one valid unit per record of the queue, at the record's queue offset."""
    per_queue = Counter((m.topic, m.queue_id) for m in records)
    by_offset = {m.commit_log_offset: m for m in records}
    seen: set[tuple[str, int]] = set()
    for cq in store.iter_consume_queues():
        key = (cq.topic, cq.queue_id)
        seen.add(key)
        assert cq.get_min_offset_in_queue() == 0, f"{key}: min offset {cq.get_min_offset_in_queue()}"
        max_offset = cq.get_max_offset_in_queue()
        assert max_offset == per_queue[key], (
            f"{key}: the consume queue has {max_offset} units, the commit log {per_queue[key]} records")
        for idx in range(max_offset):
            unit = cq.get_unit(idx)
            assert unit is not None, f"{key}: unit {idx} unreadable"
            phy, size, _tags = unit
            raw = store.commit_log.read_bytes(phy, size)
            assert raw is not None, f"{key}: unit {idx} points at {phy}+{size}, beyond the commit log"
            m = rec.decode_message(raw, check_crc=True, verify_prop_crc=store.config.verify_prop_crc())
            assert (m.topic, m.queue_id, m.queue_offset) == (cq.topic, cq.queue_id, idx), (
                f"{key}: unit {idx} points at a record of {m.topic}:{m.queue_id} offset {m.queue_offset}")
            assert m.store_size == size and phy in by_offset, f"{key}: unit {idx} ({phy}, {size}) is not a record"
    missing = set(per_queue) - seen
    assert not missing, f"records without a consume queue: {sorted(missing)}"


def check_readable(store: MessageStore, m: rec.MessageExt) -> None:
    """A consumer finds ``m`` at its queue offset through get_message."""
    got = store.get_message("durability-check", m.topic, m.queue_id, m.queue_offset, 1)
    assert got.status is GetMessageStatus.FOUND, (
        f"{m.topic}:{m.queue_id}@{m.queue_offset} ({m.keys}): {got.status.name}")
    read = rec.decode_message(got.messages[0], check_crc=True)
    assert (read.commit_log_offset, read.body, read.keys) == (m.commit_log_offset, m.body, m.keys)
