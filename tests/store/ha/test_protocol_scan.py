"""scan_frames: the slave's zero-copy walk over one read buffer (HAClient.dispatchReadRequest)."""

from __future__ import annotations

import pytest

from reference_broker.store.ha.protocol import HAProtocolError, encode_frame, heartbeat, scan_frames


def test_whole_frames_heartbeats_and_a_partial_tail():
    data = bytearray(encode_frame(100, b"abc") + heartbeat(103) + encode_frame(103, b"defgh")
                     + encode_frame(108, b"ij"))
    cut = len(data) - 1  # the last frame misses a byte
    frames, pos = scan_frames(data, 0, cut)
    assert [(off, bytes(data[s:s + n])) for off, s, n in frames] == [(100, b"abc"), (103, b""), (103, b"defgh")]
    assert pos == cut - (12 + 2 - 1)  # the partial frame starts here
    frames, pos = scan_frames(data, pos, len(data))
    assert [(off, bytes(data[s:s + n])) for off, s, n in frames] == [(108, b"ij")] and pos == len(data)


def test_a_partial_header_is_left_for_the_next_read():
    data = bytearray(encode_frame(0, b"x"))
    assert scan_frames(data, 0, 11) == ([], 0)


@pytest.mark.parametrize("frame", [encode_frame(-1, b"x"), bytes(8) + (-5).to_bytes(4, "big", signed=True)])
def test_a_bad_header_is_a_protocol_error(frame):
    with pytest.raises(HAProtocolError):
        scan_frames(bytearray(frame), 0, len(frame))


def test_a_body_over_the_limit_is_a_protocol_error():
    frame = encode_frame(0, b"y" * 10)
    with pytest.raises(HAProtocolError):
        scan_frames(bytearray(frame), 0, len(frame), max_body=9)
