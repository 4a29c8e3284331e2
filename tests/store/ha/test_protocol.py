"""The HA wire formats (HAConnection, HAService.HAClient, 4.9.8): encodings, decoders fed whole, byte at a time,
split and coalesced, and the master's start-offset rule."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_broker.store.ha.protocol import (
    FRAME_HEADER_SIZE,
    REPORT_SIZE,
    Frame,
    FrameCheck,
    FrameDecoder,
    HAProtocolError,
    ReportDecoder,
    check_frame,
    encode_frame,
    encode_report,
    heartbeat,
    transfer_start_offset,
)

GiB = 1 << 30


def test_report_is_an_8_byte_big_endian_long():
    assert REPORT_SIZE == 8
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))


def test_frame_is_offset_size_body():
    assert FRAME_HEADER_SIZE == 12
    assert encode_frame(1 << 32, b"abc") == struct.pack(">qi", 1 << 32, 3) + b"abc"
    assert heartbeat(77) == struct.pack(">qi", 77, 0)


def test_report_decoder_keeps_the_last_complete_report():
    d = ReportDecoder()
    assert d.feed(encode_report(5)[:3]) is None  # partial: kept
    assert d.feed(encode_report(5)[3:] + encode_report(9) + encode_report(12)[:4]) == 9  # coalesced: the last whole
    assert d.feed(encode_report(12)[4:]) == 12
    assert d.feed(b"") is None


def test_report_decoder_byte_at_a_time():
    d = ReportDecoder()
    data = encode_report(1000) + encode_report(2000)
    got = [d.feed(data[i:i + 1]) for i in range(len(data))]
    assert got == [None] * 7 + [1000] + [None] * 7 + [2000]


def test_negative_report_is_a_protocol_error():
    with pytest.raises(HAProtocolError):
        ReportDecoder().feed(encode_report(-1))


def frames(data: bytes, chunk: int) -> list[Frame]:
    d = FrameDecoder()
    out = []
    for i in range(0, len(data), chunk):
        d.feed(data[i:i + chunk])
        while (f := d.next_frame()) is not None:
            out.append(f)
    assert d.buffered == 0
    return out


def test_frame_decoder_whole_split_and_coalesced():
    data = encode_frame(100, b"x" * 10) + heartbeat(110) + encode_frame(110, b"y" * 300)
    want = [Frame(100, b"x" * 10), Frame(110, b""), Frame(110, b"y" * 300)]
    for chunk in (1, 5, 12, 13, 64, len(data)):
        assert frames(data, chunk) == want
    assert want[1].is_heartbeat and not want[0].is_heartbeat


def test_frame_decoder_keeps_trailing_partial_frame():
    d = FrameDecoder()
    d.feed(encode_frame(0, b"abc") + encode_frame(3, b"defg")[:14])
    assert d.next_frame() == Frame(0, b"abc")
    assert d.next_frame() is None
    assert d.buffered == 14


@pytest.mark.parametrize("size", [-1, 4 * 1024 * 1024])
def test_frame_decoder_refuses_a_bad_size(size):
    d = FrameDecoder()
    d.feed(struct.pack(">qi", 0, size))
    with pytest.raises(HAProtocolError):
        d.next_frame()


@given(st.lists(st.tuples(st.integers(0, 1 << 50), st.binary(max_size=64)), max_size=8), st.integers(1, 40))
def test_frame_decoder_any_split(items, chunk):
    data = b"".join(encode_frame(o, b) for o, b in items)
    assert frames(data, chunk) == [Frame(o, b) for o, b in items]


@pytest.mark.parametrize(("slave", "master_max", "want"), [
    (0, 0, 0),  # both empty
    (0, 5000, 0),  # an empty slave, a master still in its first file: from 0
    (0, 3 * GiB + 123, 3 * GiB),  # an empty slave starts at the master's last file
    (0, 2 * GiB, 2 * GiB),  # exactly at a file boundary
    (4567, 3 * GiB + 123, 4567),  # a slave with data continues from its own offset
])
def test_transfer_start_offset(slave, master_max, want):
    assert transfer_start_offset(slave, master_max, GiB) == want


def test_check_frame():
    assert check_frame(500, 500) is FrameCheck.APPEND
    assert check_frame(3 * GiB, 0) is FrameCheck.APPEND  # an empty slave takes any start
    assert check_frame(400, 500) is FrameCheck.OFFSET_MISMATCH
    assert check_frame(600, 500) is FrameCheck.OFFSET_MISMATCH
