"""ConsumeQueue: units, idempotent rebuild, pre-blank, recovery, truncation and lookup by time.

Mirrors RocketMQ's ConsumeQueueTest and the getOffsetInQueueByTime cases of DefaultMessageStoreTest
(4.9.8), with 4-unit (80-byte) files so roll-over happens after four messages.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.store.consume_queue import BLANK_UNIT, CQ_STORE_UNIT_SIZE, UNIT, ConsumeQueue, first_invalid_unit

UNITS_PER_FILE = 4
FILE = UNITS_PER_FILE * CQ_STORE_UNIT_SIZE  # mapped_file_size_consume_queue = 20 * 4
SIZE = 100  # every message is 100 bytes in the commit log: unit i points at i * 100
CQFactory = Callable[..., ConsumeQueue]


@pytest.fixture
def new_cq(tmp_path: Path) -> Iterator[CQFactory]:
    made: list[ConsumeQueue] = []

    def make(topic: str = "T", queue_id: int = 0, file_size: int = FILE, load: bool = False) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, tmp_path / "consumequeue", file_size)
        if load:
            assert cq.load()
        made.append(cq)
        return cq

    yield make
    for cq in made:
        cq.shutdown()


def put_units(cq: ConsumeQueue, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        assert cq.put_message_position_info(i * SIZE, SIZE, 1000 + i, i)


def file_names(cq: ConsumeQueue) -> list[str]:
    return sorted(p.name for p in cq.queue_dir.iterdir())


def test_put_units_and_read_back(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 3)
    assert [cq.get_unit(i) for i in range(3)] == [(0, 100, 1000), (100, 100, 1001), (200, 100, 1002)]
    assert cq.get_unit(3) is None
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue(), cq.max_physic_offset) == (0, 3, 300)
    mf = cq.mapped_file_queue.mapped_files[0]
    assert UNIT.unpack_from(mf.buf, 20) == (100, 100, 1001)  # big-endian long | int | long


def test_roll_over_across_files(new_cq: CQFactory, tmp_path: Path) -> None:
    cq = new_cq("Topic", 3)
    put_units(cq, 10)
    assert cq.queue_dir == tmp_path / "consumequeue" / "Topic" / "3"
    assert file_names(cq) == ["00000000000000000000", "00000000000000000080", "00000000000000000160"]
    assert all(os.path.getsize(cq.queue_dir / n) == FILE for n in file_names(cq))
    assert [cq.get_unit(i)[0] for i in range(10)] == [i * SIZE for i in range(10)]  # type: ignore[index]
    assert cq.get_max_offset_in_queue() == 10
    with cq.get_index_buffer(5) as res:  # type: ignore[union-attr]
        assert res.size == 3 * CQ_STORE_UNIT_SIZE  # units 5..7: to the end of their file
    assert cq.get_index_buffer(10) is None


def test_re_put_is_idempotent(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 5)
    put_units(cq, 5)  # same offsets again (re-dispatch after recovery): skipped, reported as written
    assert cq.get_max_offset_in_queue() == 5
    assert cq.get_unit(2) == (200, 100, 1002)


def test_stale_unit_is_replaced_not_skipped(new_cq: CQFactory) -> None:
    """A cq offset already written with *another* record is stale (a truncation that never reached the disk):
    the queue is cut there and rebuilt, where RocketMQ skips the unit and loses the new record."""
    cq = new_cq()
    put_units(cq, 5)
    assert cq.put_message_position_info(9_000, SIZE, 0, 2)
    assert cq.get_unit(2) == (9_000, 100, 0)
    assert cq.get_max_offset_in_queue() == 3, "units after the stale one are dropped"
    assert cq.get_unit(1) == (100, 100, 1001)


def test_gap_logs_but_writes_at_the_end(new_cq: CQFactory, caplog: pytest.LogCaptureFixture) -> None:
    cq = new_cq()
    put_units(cq, 2)
    with caplog.at_level(logging.WARNING, logger="reference_broker.store.consume_queue"):
        assert cq.put_message_position_info(500, SIZE, 7, 5)
    assert "[BUG]logic queue order maybe wrong" in caplog.text
    assert cq.get_max_offset_in_queue() == 3
    assert cq.get_unit(2) == (500, 100, 7)


def test_pre_blank_fill_when_first_cq_offset_is_not_zero(new_cq: CQFactory) -> None:
    cq = new_cq()
    assert cq.put_message_position_info(5_000, SIZE, 42, 2)
    buf = cq.mapped_file_queue.mapped_files[0].buf
    assert [UNIT.unpack_from(buf, i * 20) for i in range(3)] == [(0, 0x7FFFFFFF, 0), (0, 0x7FFFFFFF, 0),
                                                               (5_000, 100, 42)]
    assert bytes(buf[:40]) == BLANK_UNIT * 2
    assert cq.get_unit(2) == (5_000, 100, 42)
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (2, 3)
    assert cq.mapped_file_queue.flushed_where == 40
    assert cq.get_unit(1) is None  # below the min offset: not readable through the queue


def test_pre_blank_in_a_later_first_file(new_cq: CQFactory) -> None:
    cq = new_cq()
    assert cq.put_message_position_info(5_000, SIZE, 42, 5)
    assert file_names(cq) == ["00000000000000000080"]
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (5, 6)
    assert UNIT.unpack_from(cq.mapped_file_queue.mapped_files[0].buf, 0) == (0, 0x7FFFFFFF, 0)
    assert cq.put_message_position_info(5_100, SIZE, 43, 6)
    assert cq.get_unit(6) == (5_100, 100, 43)


# ---- recovery ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [6, 8, 1])
def test_recover_after_reopen(new_cq: CQFactory, n: int) -> None:
    cq = new_cq()
    put_units(cq, n)
    cq.shutdown()
    again = new_cq(load=True)
    again.recover()
    assert again.max_physic_offset == n * SIZE
    assert again.get_max_offset_in_queue() == n
    last = again.mapped_file_queue.get_last_mapped_file()
    assert last is not None and last.wrote_position == (n % UNITS_PER_FILE or UNITS_PER_FILE) * CQ_STORE_UNIT_SIZE
    assert again.mapped_file_queue.flushed_where == n * CQ_STORE_UNIT_SIZE
    put_units(again, 1, start=n)
    assert again.get_unit(n) == (n * SIZE, SIZE, 1000 + n)


def test_recover_skips_pre_blank_units_for_max_physic_offset(new_cq: CQFactory) -> None:
    cq = new_cq()
    cq.put_message_position_info(5_000, SIZE, 0, 2)
    cq.shutdown()
    again = new_cq(load=True)
    again.recover()
    assert again.max_physic_offset == 5_100
    assert again.get_max_offset_in_queue() == 3


def test_recover_of_empty_queue(new_cq: CQFactory) -> None:
    cq = new_cq(load=True)
    cq.recover()
    assert cq.max_physic_offset == -1 and cq.get_max_offset_in_queue() == 0


# ---- truncation and min offset ------------------------------------------------------------------

def test_truncate_dirty_logic_files(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 6)  # file 0: units 0..3 (phys 0..300), file 1: units 4..5
    cq.truncate_dirty_logic_files(300)
    assert file_names(cq) == ["00000000000000000000"]
    assert cq.get_max_offset_in_queue() == 3 and cq.max_physic_offset == 300
    mf = cq.mapped_file_queue.mapped_files[0]
    assert mf.wrote_position == 60 and bytes(mf.buf[60:]) == bytes(20)
    put_units(cq, 1, start=3)  # the queue continues where it was cut
    assert cq.get_unit(3) == (300, 100, 1003)


def test_truncate_at_unit_boundary_of_a_file(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 6)
    cq.truncate_dirty_logic_files(400)  # first unit of file 1 points at 400: the file goes
    assert file_names(cq) == ["00000000000000000000"]
    assert cq.get_max_offset_in_queue() == 4 and cq.max_physic_offset == 400
    cq.truncate_dirty_logic_files(0)
    assert file_names(cq) == [] and cq.get_max_offset_in_queue() == 0


def test_truncate_beyond_end_changes_nothing(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 3)
    cq.truncate_dirty_logic_files(10_000)
    assert cq.get_max_offset_in_queue() == 3 and cq.max_physic_offset == 300


def test_correct_min_offset(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 6)
    cq.correct_min_offset(250)
    assert cq.get_min_offset_in_queue() == 3  # first unit with phys >= 250
    assert cq.get_index_buffer(2) is None
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 0


def test_correct_min_offset_skips_pre_blank(new_cq: CQFactory) -> None:
    cq = new_cq()
    cq.put_message_position_info(5_000, SIZE, 0, 2)
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 2


def test_delete_expired_file_moves_min_offset(new_cq: CQFactory) -> None:
    cq = new_cq()
    put_units(cq, 10)
    assert cq.delete_expired_file(450) == 1  # file 0's last unit (300) is below 450
    assert file_names(cq) == ["00000000000000000080", "00000000000000000160"]
    assert cq.get_min_offset_in_queue() == 5  # unit 4 (400) is below 450 as well


# ---- get_offset_in_queue_by_time ------------------------------------------------------------------

def queue_with_times(new_cq: CQFactory, times: list[int], file_size: int = 20 * 16) -> tuple[ConsumeQueue, Callable]:
    cq = new_cq(file_size=file_size)
    for i in range(len(times)):
        cq.put_message_position_info(i * SIZE, SIZE, 0, i)
    by_phys = {i * SIZE: t for i, t in enumerate(times)}

    def store_time_of(phys: int, size: int) -> int:
        assert size == SIZE
        return by_phys.get(phys, -1)

    return cq, store_time_of


TIMES = [1000, 1010, 1020, 1030, 1040, 1050]


def test_offset_by_time_exact(new_cq: CQFactory) -> None:
    cq, st = queue_with_times(new_cq, TIMES)
    assert [cq.get_offset_in_queue_by_time(t, st, 0) for t in TIMES] == list(range(6))


def test_offset_by_time_skewed_picks_closer_neighbour(new_cq: CQFactory) -> None:
    """DefaultMessageStoreTest.testGetOffsetInQueueByTime_TimestampIsSkewing: +/-2 ms finds the message."""
    cq, st = queue_with_times(new_cq, TIMES)
    for i, t in enumerate(TIMES):
        assert cq.get_offset_in_queue_by_time(t + 2, st, 0) == i
        assert cq.get_offset_in_queue_by_time(t - 2, st, 0) == i
    assert cq.get_offset_in_queue_by_time(1018, st, 0) == 2
    assert cq.get_offset_in_queue_by_time(1015, st, 0) == 1  # a tie goes to the earlier message


def test_offset_by_time_outside_the_queue(new_cq: CQFactory) -> None:
    cq, st = queue_with_times(new_cq, TIMES)
    assert cq.get_offset_in_queue_by_time(0, st, 0) == 0
    assert cq.get_offset_in_queue_by_time(999, st, 0) == 0
    assert cq.get_offset_in_queue_by_time(10**6, st, 0) == 5


def test_offset_by_time_skips_units_below_min_physic_offset(new_cq: CQFactory) -> None:
    cq, st = queue_with_times(new_cq, TIMES)
    # Units 0..2 point below the commit log's min offset (250): never returned for an earlier time.
    assert cq.get_offset_in_queue_by_time(0, st, 250) == 3
    assert cq.get_offset_in_queue_by_time(1030, st, 250) == 3
    assert cq.get_offset_in_queue_by_time(1052, st, 250) == 5


def test_offset_by_time_unreadable_store_time_gives_zero(new_cq: CQFactory) -> None:
    cq, _ = queue_with_times(new_cq, TIMES)
    assert cq.get_offset_in_queue_by_time(1020, lambda _p, _s: -1, 0) == 0
    assert new_cq("Empty").get_offset_in_queue_by_time(1020, lambda _p, _s: 1, 0) == 0


def test_offset_by_time_picks_file_by_modification_time(new_cq: CQFactory) -> None:
    base = 1_700_000_000_000
    times = [base + i * 1000 for i in range(6)]
    cq, st = queue_with_times(new_cq, times, file_size=FILE)
    first = cq.mapped_file_queue.mapped_files[0]
    os.utime(first.path, (times[3] / 1000, times[3] / 1000))  # file 0 last written with unit 3
    assert cq.get_offset_in_queue_by_time(times[5], st, 0) == 5  # file 0 is too old: file 1 is searched
    assert cq.get_offset_in_queue_by_time(times[4], st, 0) == 4
    assert cq.get_offset_in_queue_by_time(times[1], st, 0) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1)), max_size=40))
def test_first_invalid_unit_matches_a_unit_by_unit_scan(units: list[tuple[int, int]]) -> None:
    """The strided C-speed scan finds the same first unit with offset < 0 or size <= 0 as a plain loop."""
    n = len(units) + 3
    buf = bytearray(n * CQ_STORE_UNIT_SIZE)  # trailing zero units are invalid (size 0)
    for i, (offset, size) in enumerate(units):
        UNIT.pack_into(buf, i * CQ_STORE_UNIT_SIZE, offset, size, 7)
    expected = next((i for i, (o, s) in enumerate(units) if not (o >= 0 and s > 0)), len(units))
    assert first_invalid_unit(memoryview(buf), n) == expected
