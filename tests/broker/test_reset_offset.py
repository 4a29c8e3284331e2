"""The broker's rewind table (reference_broker/broker/reset_offset.py reset_table, Broker2Client.resetOffset's
loop, 4.9.8) and the admin tool's timestamp argument (ResetOffsetByTimeCommand -s). The whole path on real
processes: tests/tools/test_reset_offset_e2e.py."""

from __future__ import annotations

import time

import pytest

from reference_broker.broker.reset_offset import reset_table
from reference_broker.tools.admin import AdminError, parse_timestamp


def test_force_moves_every_queue_to_the_time_forwards_or_back() -> None:
    committed = {0: 10, 1: 3}
    by_time = {0: 4, 1: 8}
    assert reset_table(range(2), committed.__getitem__, by_time.__getitem__, True) == {0: 4, 1: 8}


def test_without_force_a_queue_only_moves_back() -> None:
    committed = {0: 10, 1: 3}
    by_time = {0: 4, 1: 8}
    assert reset_table(range(2), committed.__getitem__, by_time.__getitem__, False) == {0: 4, 1: 3}


def test_a_queue_without_a_committed_offset_refuses_the_whole_reset() -> None:
    committed = {0: 10, 1: -1}
    assert reset_table(range(2), committed.__getitem__, lambda q: 0, True) is None


def test_a_negative_offset_by_time_becomes_zero() -> None:
    assert reset_table(range(1), lambda q: 5, lambda q: -1, True) == {0: 0}


def test_timestamps_as_mqadmin_reads_them() -> None:
    assert parse_timestamp("now", now_ms=1234) == 1234
    assert parse_timestamp(" 1700000000123 ") == 1700000000123
    local = int(time.mktime(time.strptime("2026-11-27 04:16:13", "%Y-%m-%d %H:%M:%S"))) * 1000
    assert parse_timestamp("2026-11-27#04:16:13:045") == local + 45
    for bad in ("yesterday", "2026-11-27#04:16:13", "2026-11-27#04:16:13:4", "2026-13-27#04:16:13:000"):
        with pytest.raises(AdminError):
            parse_timestamp(bad)
