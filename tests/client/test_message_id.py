"""UNIQ_KEY generation (MessageClientIDSetter layout)."""

from __future__ import annotations

import datetime as dt

import pytest

from reference_broker.client.message_id import (
    UniqIdGenerator,
    _month_bounds_ms,
    parse_uniq_id,
    uniq_id_time_ms,
)


def month_start_ms(now_ms: int) -> int:
    now = dt.datetime.fromtimestamp(now_ms / 1000)
    return int(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


def test_layout_ip_pid_salt_time_counter() -> None:
    gen = UniqIdGenerator("10.1.2.3", pid=0x12345, salt=b"\xde\xad\xbe\xef")
    now = month_start_ms(1_700_000_000_000) + 0x01020304
    uid = gen.create(now)
    assert len(uid) == 32 and uid == uid.upper()
    assert uid[:8] == "0A010203"  # ip
    assert uid[8:12] == "2345"  # pid, low 16 bits
    assert uid[12:20] == "DEADBEEF"  # salt
    assert uid[20:28] == "01020304"  # ms since the month started
    assert uid[28:] == "0000"  # counter
    assert parse_uniq_id(uid) == ("10.1.2.3", 0x2345, 0x01020304, 0)


def test_prefix_is_fixed_and_counter_increments_and_wraps() -> None:
    gen = UniqIdGenerator("127.0.0.1", pid=7, salt=b"abcd")
    ids = [gen.create(1_700_000_000_000) for _ in range(0x10002)]
    assert {i[:20] for i in ids} == {gen.prefix}
    assert [parse_uniq_id(i)[3] for i in ids[:3]] == [0, 1, 2]
    assert parse_uniq_id(ids[0x10000])[3] == 0  # short counter wraps
    assert len(set(ids[:0x10000])) == 0x10000


def test_ipv6_ids_are_56_hex_digits() -> None:
    uid = UniqIdGenerator("::1", pid=1, salt=b"\x00\x00\x00\x01").create()
    assert len(uid) == 56
    assert parse_uniq_id(uid)[0] == "::1"


def test_small_clock_step_back_gives_zero_time() -> None:
    gen = UniqIdGenerator(salt=b"abcd")
    start, _ = _month_bounds_ms(1_700_000_000_000)
    gen._start_ms = start  # as if created earlier this month
    assert parse_uniq_id(gen.create(start - 5_000))[2] == 0  # NTP guard: 5 s before the month start


def test_time_is_recovered_from_the_id() -> None:
    gen = UniqIdGenerator(salt=b"abcd")
    now = 1_700_000_123_456
    assert uniq_id_time_ms(gen.create(now), now) == now
    # an id from late last month, read early this month
    start, _ = _month_bounds_ms(now)
    late_last_month = start - 3_600_000
    uid = UniqIdGenerator(salt=b"abcd").create(late_last_month)
    assert uniq_id_time_ms(uid, start + 1000) == late_last_month


def test_month_bounds_cover_now_and_december_rolls_over() -> None:
    dec = int(dt.datetime(2024, 12, 15, 12).timestamp() * 1000)
    start, nxt = _month_bounds_ms(dec)
    assert dt.datetime.fromtimestamp(start / 1000) == dt.datetime(2024, 12, 1)
    assert dt.datetime.fromtimestamp(nxt / 1000) == dt.datetime(2025, 1, 1)
    assert start <= dec < nxt


@pytest.mark.parametrize("bad", ["", "XYZ", "00" * 17])
def test_parse_rejects_non_ids(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_uniq_id(bad)
