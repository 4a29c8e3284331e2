"""Index recovery after an abnormal exit: cut an index file back to a durable count and mend its slots.

Why this exists. RocketMQ 4.9.8 persists one index fact, checkpoint.indexMsgTimestamp: the end of the
last *full* index file (IndexService.flush). After a crash IndexService.load(false) destroys every file
that ends later — usually the one being written — and CommitLog.recoverAbnormally re-dispatches from the
start of the commit-log file chosen by time, which rebuilds it only as far back as that file. This lab
replays from the checkpoint's exact offset (README, "Deliberate differences"), so the destroyed file's
entries before that offset were never rebuilt: lookups by key and by id lost everything since the last
full index file (issue: 0 of 300 found after a kill -9).

Design chosen: the index gets a real safe point, taken with the consume queues' thorough flush
(FlushConsumeQueueService): the reput offset read before the flush (every record below it is indexed),
then the header of the file being written, then that file (and any full file not yet known durable) is
forced, then the checkpoint records both. Abnormal recovery keeps the files up to the safe one, cuts the
safe one back to the recorded header, and replays from min(log/queue offset, covered offset) — so the
replay stays bounded by what was unflushed, and build_index (which skips offsets below the file's
endPhyOffset, as 4.9.8) adds exactly the missing entries. The alternative — trusting the file's own header
and end offset — is right after a kill -9 (the page cache holds every write) but not after a power loss,
where any page written after the last flush may or may not be on disk; one rule for both is simpler to trust.

Cutting back leaves the hash slots to mend: a slot may name an entry at or past the cut (written after the
safe point and reached the disk, or a put cut short by a kill). Its right value is the newest entry below
the cut in the same slot: follow the chain through the entries past the cut (each must hash to the slot
and point further back); when that chain is unreadable (a page of it lost), scan the durable entries.
Pure functions over a buffer: the caller owns the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from reference_broker.store.index_format import ENTRY, ENTRY_DTYPE, HEADER_SIZE, INDEX_SIZE, SLOT

# A power loss keeps or loses whole sectors: an entry inside one sector is all there or all zero.
_SECTOR: Final = 512


@dataclass
class RepairReport:
    slots_checked: int = 0
    by_chain: int = 0
    by_scan: int = 0


def _entry_at(entries_at: int, n: int) -> int:
    return entries_at + n * INDEX_SIZE


def _walk(buf: memoryview, entries_at: int, hash_slot_num: int, index_num: int, count: int, slot: int,
          head: int, floor_phy: int) -> int | None:
    """The newest entry below ``count`` in ``slot``, found through the chain from ``head``; None if unsure.

    Entries past the cut were written after the safe point, so each genuine one has a commit-log offset at
    or past ``floor_phy`` (the safe point's end) and hashes to ``slot``; a lost one reads as zeros.
    """
    e = head
    steps = 0
    while e >= count:
        if e >= index_num or steps > index_num:
            return None
        key_hash, phy, _diff, prev = ENTRY.unpack_from(buf, _entry_at(entries_at, e))
        if key_hash < 0 or key_hash % hash_slot_num != slot or phy < floor_phy or prev < 0 or prev >= e:
            return None
        if prev == 0:
            start = _entry_at(entries_at, e)
            end = start + INDEX_SIZE
            second = (end - 1) // _SECTOR * _SECTOR
            # An entry across two sectors may have kept its hash and lost its link (a 0, as in a fresh file).
            # The link's sector is known to be newer than the entry only if it holds bytes written after it
            # (a later entry): then the 0 is real. Otherwise the caller scans.
            if start < second and not any(buf[end : second + _SECTOR]):
                return None
        e = prev
        steps += 1
    return e


def _scan(buf: memoryview, entries_at: int, hash_slot_num: int, count: int,
          slots: np.ndarray) -> dict[int, int]:
    """For each slot in ``slots``, the newest entry below ``count`` hashing to it (0 when none)."""
    result = {int(s): 0 for s in slots}
    if count <= 1:
        return result
    entries = np.frombuffer(buf, dtype=ENTRY_DTYPE, count=count - 1, offset=_entry_at(entries_at, 1))
    try:
        hashes = entries["hash"].astype(np.int64)
    finally:
        del entries
    entry_slots = hashes % hash_slot_num
    wanted = np.isin(entry_slots, slots)
    nums = np.nonzero(wanted)[0] + 1
    for s, n in zip(entry_slots[wanted].tolist(), nums.tolist(), strict=True):
        result[int(s)] = int(n)  # ascending entry numbers: the last one seen is the newest
    return result


def cut_back(buf: memoryview, hash_slot_num: int, index_num: int, count: int, floor_phy: int) -> RepairReport:
    """Make the slot table agree with an index file holding entries ``1 .. count - 1`` only.

    Only slots naming an entry at or past ``count`` change; entries past ``count`` are left as they are
    (the next puts overwrite them, and no chain reaches them any more).
    """
    report = RepairReport()
    entries_at = HEADER_SIZE + hash_slot_num * SLOT.size
    table = np.frombuffer(buf, dtype=">i4", count=hash_slot_num, offset=HEADER_SIZE)
    try:
        bad = np.nonzero((table >= count) | (table < 0))[0]
        report.slots_checked = int(bad.size)
        unsure: list[int] = []
        for s in bad.tolist():
            head = int(table[s])
            found = None if head < 0 else _walk(buf, entries_at, hash_slot_num, index_num, count, s, head,
                                                floor_phy)
            if found is None:
                unsure.append(s)
                continue
            if found > 0:
                # The entry below the cut is durable: it must hash to this slot, else scan.
                (key_hash,) = SLOT.unpack_from(buf, _entry_at(entries_at, found))
                if key_hash < 0 or key_hash % hash_slot_num != s:
                    unsure.append(s)
                    continue
            table[s] = found
            report.by_chain += 1
        if unsure:
            for s, n in _scan(buf, entries_at, hash_slot_num, count, np.asarray(unsure, dtype=np.int64)).items():
                table[s] = n
            report.by_scan = len(unsure)
    finally:
        del table  # no export may outlive the call: the mapping must stay closable
    return report


def first_entry_at_or_past(buf: memoryview, hash_slot_num: int, count: int, phy_offset: int) -> int:
    """The first entry number whose commit-log offset is >= ``phy_offset`` (``count`` when none is).

    Entries are put in log order, so their offsets never decrease: a binary search.
    """
    entries_at = HEADER_SIZE + hash_slot_num * SLOT.size
    lo, hi = 1, count
    while lo < hi:
        mid = (lo + hi) // 2
        (_h, phy, _d, _p) = ENTRY.unpack_from(buf, _entry_at(entries_at, mid))
        if phy < phy_offset:
            lo = mid + 1
        else:
            hi = mid
    return lo
