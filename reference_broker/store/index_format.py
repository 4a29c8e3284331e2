"""The index file's byte layout and the sans-IO rules over it: key hashing, positions, and linking a run of
entries into the slot chains (store/.../index/IndexFile.java, IndexHeader.java, 4.9.8).

This module owns the format; ``index_file.py`` (one mapped file), ``index_service.py`` (the files of a store),
``index_recovery.py`` (cutting a file back after a crash) and ``check.py`` (admin checkStore) all read it
from here. No files, threads or locks: functions of numbers and arrays.

Format, big-endian; file size ``40 + hashSlotNum*4 + indexNum*20`` (defaults: 420,000,040 bytes):

| part   | offset                    | field          | type | meaning                                 |
|--------|---------------------------|----------------|------|-----------------------------------------|
| header | 0                         | beginTimestamp | long | store time of the first entry (ms)      |
|        | 8                         | endTimestamp   | long | store time of the last entry (ms)       |
|        | 16                        | beginPhyOffset | long | commit-log offset of the first entry    |
|        | 24                        | endPhyOffset   | long | commit-log offset of the last entry     |
|        | 32                        | hashSlotCount  | int  | slots in use                            |
|        | 36                        | indexCount     | int  | next entry number (starts at 1)         |
| slot   | 40 + slot*4               | newest entry   | int  | entry number; 0 = empty                 |
| entry  | 40 + hashSlotNum*4 + n*20 | keyHash        | int  | abs(key.hashCode()), 0 for MIN_VALUE    |
|        | +4                        | phyOffset      | long | commit-log offset of the message        |
|        | +12                       | timeDiff       | int  | (storeTs - beginTimestamp) / 1000, >= 0 |
|        | +16                       | prevIndex      | int  | older entry in the same slot; 0 = none  |

Entry number 0 is never written: 0 is the "no entry" sentinel, so a file holds ``indexNum - 1``
entries (IndexFileTest). Files are named by creation time, yyyyMMddHHmmssSSS (17 digits).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from reference_broker.common.java_hash import string_hash_code

HEADER: Final = struct.Struct(">qqqqii")  # IndexHeader.INDEX_HEADER_SIZE = 40
SLOT: Final = struct.Struct(">i")
ENTRY: Final = struct.Struct(">iqii")
ENTRY_DTYPE: Final = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
HEADER_SIZE: Final = HEADER.size
HASH_SLOT_SIZE: Final = SLOT.size
INDEX_SIZE: Final = ENTRY.size
INVALID_INDEX: Final = 0
INT_MAX: Final = 2**31 - 1
INT_MIN: Final = -(2**31)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: Math.abs(hashCode), and 0 when that is still negative."""
    return abs_hash(string_hash_code(key))


def abs_hash(h: int) -> int:
    return 0 if h == INT_MIN else abs(h)


def entry_time_diff(store_timestamp: int, begin_timestamp: int) -> int:
    """An entry's timeDiff: whole seconds since the file's begin (Java's long division truncates toward zero;
    anything negative is clamped to 0 anyway), 0 while the file has no begin yet."""
    if begin_timestamp <= 0:
        return 0
    return min(max((store_timestamp - begin_timestamp) // 1000, 0), INT_MAX)


def human_time_name(now_ms: int) -> str:
    """UtilAll.timeMillisToHumanString: local time as yyyyMMddHHmmssSSS (an index file's name)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms // 1000)) + f"{now_ms % 1000:03d}"


@dataclass(frozen=True)
class RunSlots:
    """Where a run of keys goes: each key's stored hash and its slot."""

    key_hash: np.ndarray  # int64, abs(hashCode) as IndexFile.indexKeyHashMethod
    slots: np.ndarray  # int64, key_hash % hashSlotNum


@dataclass(frozen=True)
class LinkedRun:
    """A run of entries linked into the slot chains, ready to write: the entries first, then the slots (so a
    concurrent reader that sees a new slot value finds its entry), then the header."""

    entries: bytes  # the run's entries, to write at the first entry number
    slots: np.ndarray  # the slots the run uses, each once
    heads: np.ndarray  # the entry number each of those slots names after the run (its run's last key)
    new_slots: int  # slots that were empty before the run (IndexHeader.hashSlotCount counts only these)


def run_slots(hash_codes: Sequence[int], hash_slot_num: int) -> RunSlots:
    codes = np.asarray(hash_codes, dtype=np.int64)
    key_hash = np.where(codes == INT_MIN, 0, np.abs(codes))
    return RunSlots(key_hash, key_hash % hash_slot_num)


def link_run(where: RunSlots, slot_values: np.ndarray, first: int, phy_offsets: Sequence[int],
             store_timestamps: Sequence[int], begin_timestamp: int) -> LinkedRun:
    """Entries ``first .. first + m - 1`` for a run of ``m`` keys, as ``m`` single puts would leave them.

    ``slot_values``: the slots' values before the run (``table[where.slots]``). A key's previous entry is the
    last earlier key of the run in the same slot, else the slot's value; a slot value from beyond the entry's
    number is garbage (a file reused after a crash) and starts a new chain.
    """
    slots = where.slots
    m = len(slots)
    nums = np.arange(first, first + m, dtype=np.int64)
    ts = np.asarray(store_timestamps, dtype=np.int64)
    diff = np.zeros(m, np.int64) if begin_timestamp <= 0 else np.clip((ts - begin_timestamp) // 1000, 0, INT_MAX)
    old = slot_values.astype(np.int64)
    old[(old <= INVALID_INDEX) | (old > nums)] = INVALID_INDEX
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    follows = np.zeros(m, dtype=bool)
    follows[1:] = sorted_slots[1:] == sorted_slots[:-1]
    prev_sorted = old[order]
    prev_sorted[1:][follows[1:]] = nums[order][:-1][follows[1:]]
    prev = np.empty(m, np.int64)
    prev[order] = prev_sorted
    entries = np.empty(m, dtype=ENTRY_DTYPE)
    entries["hash"] = where.key_hash
    entries["phy"] = np.asarray(phy_offsets, dtype=np.int64)
    entries["diff"] = diff
    entries["prev"] = prev
    last_in_slot = np.ones(m, dtype=bool)
    last_in_slot[:-1] = ~follows[1:]
    return LinkedRun(entries.tobytes(), sorted_slots[last_in_slot], nums[order][last_in_slot],
                     int(np.count_nonzero(prev == INVALID_INDEX)))
