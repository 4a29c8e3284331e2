"""This module owns the byte layout of the store checkpoint file (``{storePathRootDir}/checkpoint``): what
each byte of the page means, and packing and unpacking it. Sans-IO: the store's StoreCheckpoint
(store/checkpoint.py) maps the file and writes it; the chaos harness reads a crash image's copy with the
same ``unpack``.

One OS page (4096 bytes), big-endian. Bytes 0-23 are RocketMQ's (StoreCheckpoint, 4.9.8); the rest is this
project's extension, zeros in a RocketMQ checkpoint (meaning "unknown"), and RocketMQ ignores those bytes:

| offset | size | field               | meaning                                                        |
|--------|------|---------------------|----------------------------------------------------------------|
| 0      | 8    | physicMsgTimestamp  | store time of the last commit-log record flushed               |
| 8      | 8    | logicsMsgTimestamp  | store time of the last record whose consume-queue unit is flushed |
| 16     | 8    | indexMsgTimestamp   | end time of the last full index file flushed                   |
| 24, 32 | 16   | (unused)            | 5.x's masterFlushedOffset and confirmPhyOffset                 |
| 40     | 8    | physicMsgOffset     | ours: commit-log offset known durable                          |
| 48     | 8    | logicsMsgOffset     | ours: offset below which consume-queue units are durable       |
| 56     | 8    | (unused)            |                                                                |
| 64     | 56   | index safe point    | ours: ``IndexSafePoint`` (six longs, two ints), below          |
| 120    |      | (zeros to the end of the page)                                                        |
"""

from __future__ import annotations

import struct
from dataclasses import astuple, dataclass
from typing import Final

PAGE: Final = 4096
TIMES: Final = struct.Struct(">qqq")  # RocketMQ's three timestamps
TIMES_AT: Final = 0
OFFSETS: Final = struct.Struct(">qq")
OFFSETS_AT: Final = 40
INDEX_SAFE: Final = struct.Struct(">qqqqqqii")
INDEX_SAFE_AT: Final = 64
LAYOUT_END: Final = INDEX_SAFE_AT + INDEX_SAFE.size  # 120: every byte past this is zero
NO_INDEX_FILE: Final = 1  # safe point taken while no index file existed (real names are 17-digit dates)


@dataclass(frozen=True)
class IndexSafePoint:
    """The index as it was durable at one moment: the header of the file being written then.

    Every record below ``covered_offset`` that has keys is in the index files up to ``file_name``, and
    every file before that one is on disk whole. ``file_name`` 0 (a RocketMQ checkpoint) means unknown.
    """

    file_name: int
    covered_offset: int
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1


@dataclass(frozen=True)
class CheckpointFields:
    """Everything the page holds."""

    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    physic_msg_offset: int = 0
    logics_msg_offset: int = 0
    index_safe_point: IndexSafePoint | None = None

    def rocketmq_names(self) -> dict[str, int]:
        """The timestamps and offsets under their RocketMQ field names (as a run record keeps them)."""
        return {"physicMsgTimestamp": self.physic_msg_timestamp, "logicsMsgTimestamp": self.logics_msg_timestamp,
                "indexMsgTimestamp": self.index_msg_timestamp, "physicMsgOffset": self.physic_msg_offset,
                "logicsMsgOffset": self.logics_msg_offset}


def pack_into(buf: bytearray | memoryview, fields: CheckpointFields) -> None:
    """Write ``fields`` into the first ``LAYOUT_END`` bytes of ``buf`` (the mapped page); other bytes stay."""
    TIMES.pack_into(buf, TIMES_AT, fields.physic_msg_timestamp, fields.logics_msg_timestamp,
                    fields.index_msg_timestamp)
    OFFSETS.pack_into(buf, OFFSETS_AT, fields.physic_msg_offset, fields.logics_msg_offset)
    sp = fields.index_safe_point
    INDEX_SAFE.pack_into(buf, INDEX_SAFE_AT, *(astuple(sp) if sp is not None else (0,) * 8))


def pack(fields: CheckpointFields) -> bytes:
    """The whole page."""
    page = bytearray(PAGE)
    pack_into(page, fields)
    return bytes(page)


def unpack(buf: bytes | bytearray | memoryview) -> CheckpointFields:
    """The fields of a page (at least ``LAYOUT_END`` bytes; ValueError when shorter). An index safe point that
    names no file, a negative offset or no entries reads as None: unknown, as in a RocketMQ checkpoint."""
    if len(buf) < LAYOUT_END:
        raise ValueError(f"a checkpoint needs {LAYOUT_END} bytes, got {len(buf)}")
    physic_ts, logics_ts, index_ts = TIMES.unpack_from(buf, TIMES_AT)
    physic_off, logics_off = OFFSETS.unpack_from(buf, OFFSETS_AT)
    sp = IndexSafePoint(*INDEX_SAFE.unpack_from(buf, INDEX_SAFE_AT))
    known = sp.file_name > 0 and sp.covered_offset >= 0 and sp.index_count >= 1
    return CheckpointFields(physic_ts, logics_ts, index_ts, physic_off, logics_off, sp if known else None)
