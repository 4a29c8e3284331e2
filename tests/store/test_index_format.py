"""index_format: the layout's sizes, the key hash, timeDiff, file names and linking a run into the chains."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from reference_broker.store.index_format import (
    ENTRY,
    HEADER_SIZE,
    INDEX_SIZE,
    INT_MAX,
    INT_MIN,
    INVALID_INDEX,
    abs_hash,
    entry_time_diff,
    human_time_name,
    index_file_size,
    link_run,
    run_slots,
)

BEGIN = 1_700_000_000_000


def test_sizes() -> None:
    assert (HEADER_SIZE, INDEX_SIZE) == (40, 20)
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040  # RocketMQ's default layout


def test_abs_hash_and_run_slots_agree_on_min_value() -> None:
    assert abs_hash(INT_MIN) == 0 and abs_hash(-5) == 5
    where = run_slots([INT_MIN, -7, 12], 10)
    assert where.key_hash.tolist() == [0, 7, 12] and where.slots.tolist() == [0, 7, 2]


def test_entry_time_diff() -> None:
    assert entry_time_diff(BEGIN + 5_999, 0) == 0  # no begin yet
    assert entry_time_diff(BEGIN + 5_999, BEGIN) == 5
    assert entry_time_diff(BEGIN - 5_000, BEGIN) == 0  # never negative
    assert entry_time_diff(BEGIN + 10**15, BEGIN) == INT_MAX


def test_human_time_name() -> None:
    ms = int(time.mktime((2024, 3, 5, 7, 8, 9, 0, 0, -1))) * 1000 + 42
    assert human_time_name(ms) == "20240305070809042"


def _one_by_one(hashes: list[int], slots: int, table: list[int], first: int, phys: list[int],
                stamps: list[int], begin: int) -> tuple[list[tuple[int, int, int, int]], list[int], int]:
    """What single puts (IndexFile.put_key) leave: entries, the slot table, and newly used slots."""
    table = list(table)
    entries = []
    new = 0
    for k, h in enumerate(hashes):
        num = first + k
        key_hash = abs_hash(h)
        slot = key_hash % slots
        prev = table[slot]
        if prev <= INVALID_INDEX or prev > num:
            prev = INVALID_INDEX
            new += 1
        entries.append((key_hash, phys[k], entry_time_diff(stamps[k], begin), prev))
        table[slot] = num
    return entries, table, new


@given(st.data())
def test_link_run_equals_puts_one_by_one(data: st.DataObject) -> None:
    slots = data.draw(st.integers(1, 8))
    first = data.draw(st.integers(1, 50))
    m = data.draw(st.integers(1, 40))
    hashes = data.draw(st.lists(st.integers(INT_MIN, INT_MAX), min_size=m, max_size=m))
    # slot values before the run: empty, valid, or garbage from beyond the count (a reused file)
    table = data.draw(st.lists(st.integers(-3, first + m + 5), min_size=slots, max_size=slots))
    phys = sorted(data.draw(st.lists(st.integers(0, 2**40), min_size=m, max_size=m)))
    begin = data.draw(st.sampled_from([0, BEGIN]))
    stamps = [BEGIN + data.draw(st.integers(-2_000, 10**6)) for _ in range(m)]

    where = run_slots(hashes, slots)
    run = link_run(where, np.asarray(table, dtype=">i4")[where.slots], first, phys, stamps, begin)

    want_entries, want_table, want_new = _one_by_one(hashes, slots, table, first, phys, stamps, begin)
    assert [ENTRY.unpack_from(run.entries, k * INDEX_SIZE) for k in range(m)] == want_entries
    got_table = list(table)
    for s, head in zip(run.slots.tolist(), run.heads.tolist(), strict=True):
        got_table[s] = head
    assert got_table == want_table
    assert run.new_slots == want_new
