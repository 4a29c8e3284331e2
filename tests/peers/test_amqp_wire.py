"""The AMQP 0-9-1 codec of the lean RabbitMQ publisher (harness.amqp_wire): field tables and basic properties
round trip, a publish is its three kinds of frames with the body split at frame_max, the server's frames are
parsed whole, byte at a time and with trailing bytes, and malformed bytes are one error type."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import amqp_wire as wire
from harness.amqp_lean import negotiate


def _frames(data: bytes, frame_max: int = 1 << 20) -> list[wire.Frame]:
    return list(wire.Parser(frame_max).feed(data))


_names = st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) <= 255)
_scalars = (st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text(max_size=30) | st.binary(max_size=30)
            | st.floats(allow_nan=False) | st.none())
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(_names, inner, max_size=4), max_leaves=12)


@given(st.dictionaries(_names, _values, max_size=6))
def test_field_tables_round_trip(fields: dict[str, Any]) -> None:
    r = wire.Reader(wire.table(fields))
    assert r.table() == fields and r.pos == len(r.data)


def test_field_table_types_rabbitmq_sends() -> None:
    """The types a server's properties hold that this client never writes: int8/16, unsigned, timestamps."""
    body = (wire.shortstr("b") + b"b\xff" + wire.shortstr("s") + b"s\xff\xfe" + wire.shortstr("u") + b"u\x01\x00"
            + wire.shortstr("i") + b"i\xff\xff\xff\xff" + wire.shortstr("T") + b"T" + struct.pack(">Q", 99)
            + wire.shortstr("D") + b"D\x02" + struct.pack(">i", 314) + wire.shortstr("V") + b"V")
    got = wire.Reader(struct.pack(">I", len(body)) + body).table()
    assert got == {"b": -1, "s": -2, "u": 256, "i": 2**32 - 1, "T": 99, "D": Decimal("3.14"), "V": None}
    with pytest.raises(wire.AmqpProtocolError):
        wire.Reader(struct.pack(">I", 3) + wire.shortstr("q") + b"?").table()


@given(st.fixed_dictionaries({}, optional={
    "content_type": st.text(max_size=20), "headers": st.dictionaries(_names, _scalars, max_size=4),
    "delivery_mode": st.integers(1, 2), "priority": st.integers(0, 9), "message_id": st.text(max_size=40),
    "timestamp": st.integers(0, 2**63), "app_id": st.text(max_size=10)}))
def test_properties_round_trip(props: dict[str, Any]) -> None:
    r = wire.Reader(wire.properties(props))
    assert wire.decode_properties(r) == props and r.pos == len(r.data)


@pytest.mark.parametrize(("size", "frame_max", "bodies"), [(0, 4096, 0), (10, 4096, 1), (4088, 4096, 1),
                                                          (4089, 4096, 2), (10_000, 4096, 3)])
def test_publish_is_method_header_and_bodies_split_at_frame_max(size: int, frame_max: int, bodies: int) -> None:
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    props = wire.properties({"delivery_mode": 2, "message_id": "k-1", "headers": {"lab-born-ns": 1 << 62}})
    frames = _frames(wire.publish(1, "", "T.0", body, props, frame_max), frame_max)
    assert [f.type for f in frames] == [wire.FrameType.METHOD, wire.FrameType.HEADER] + [wire.FrameType.BODY] * bodies
    assert all(f.channel == 1 for f in frames)
    publish = wire.Reader(frames[0].payload)
    assert (publish.short(), publish.short(), publish.short()) == (*wire.BASIC_PUBLISH, 0)
    assert (publish.shortstr(), publish.shortstr(), publish.octet()) == ("", "T.0", 1)  # mandatory
    assert frames[1].body_size == size
    assert frames[1].props == {"delivery_mode": 2, "message_id": "k-1", "headers": {"lab-born-ns": 1 << 62}}
    assert b"".join(f.payload for f in frames[2:]) == body
    assert all(len(f.payload) + wire.FRAME_OVERHEAD <= frame_max for f in frames)


def _start() -> bytes:
    args = (b"\x00\x09" + wire.table({"product": "RabbitMQ", "version": "3.10.8",
                                      "capabilities": {"publisher_confirms": True}})
            + wire.longstr("AMQPLAIN PLAIN") + wire.longstr("en_US"))
    return wire.method(0, wire.START, args)


SERVER = (_start()
          + wire.method(0, wire.TUNE, struct.pack(">HIH", 2047, 131072, 60))
          + wire.method(1, wire.BASIC_ACK, struct.pack(">QB", 5, 1))
          + wire.method(1, wire.BASIC_NACK, struct.pack(">QB", 6, 2))
          + wire.method(1, wire.BASIC_RETURN, struct.pack(">H", 312) + wire.shortstr("NO_ROUTE") + wire.shortstr("")
                        + wire.shortstr("Nope.0"))
          + wire.frame(wire.FrameType.HEADER, 1, struct.pack(">HHQ", 60, 0, 2) + wire.properties({"message_id": "k7"}))
          + wire.frame(wire.FrameType.BODY, 1, b"hi")
          + wire.HEARTBEAT
          + wire.method(0, wire.CLOSE, struct.pack(">H", 320) + wire.shortstr("CONNECTION_FORCED") + b"\0\0\0\0"))


def _check(frames: list[wire.Frame]) -> None:
    assert [f.ids for f in frames if f.type is wire.FrameType.METHOD] == [
        wire.START, wire.TUNE, wire.BASIC_ACK, wire.BASIC_NACK, wire.BASIC_RETURN, wire.CLOSE]
    start, tune, ack, nack, ret, header, body, beat, close = frames
    assert start.args["version"] == (0, 9) and start.args["mechanisms"] == ["AMQPLAIN", "PLAIN"]
    assert start.args["server_properties"]["version"] == "3.10.8"
    assert tune.args == {"channel_max": 2047, "frame_max": 131072, "heartbeat": 60}
    assert ack.args == {"delivery_tag": 5, "multiple": True}
    assert nack.args == {"delivery_tag": 6, "multiple": False, "requeue": True}
    assert ret.args["reply_code"] == wire.NO_ROUTE and ret.args["routing_key"] == "Nope.0"
    assert header.props == {"message_id": "k7"} and header.body_size == 2 and body.payload == b"hi"
    assert beat.type is wire.FrameType.HEARTBEAT
    assert close.args["reply_code"] == 320 and close.args["reply_text"] == "CONNECTION_FORCED"


def test_parses_server_frames_whole_byte_at_a_time_and_with_a_tail() -> None:
    _check(_frames(SERVER))
    parser = wire.Parser()
    _check([f for i in range(len(SERVER)) for f in parser.feed(SERVER[i:i + 1])])
    parser = wire.Parser()
    head = list(parser.feed(SERVER + wire.HEARTBEAT[:5]))
    _check(head)
    (beat,) = parser.feed(wire.HEARTBEAT[5:])
    assert beat.type is wire.FrameType.HEARTBEAT


@pytest.mark.parametrize("bad", [
    wire.HEARTBEAT[:-1] + b"\x00",  # frame-end is not 0xce
    b"AMQP\x00\x00\x09\x01",  # the server's protocol header: it wants another version
    wire.frame(wire.FrameType.METHOD, 0, b"\x00\x3c\x00\x50\x00"),  # Basic.Ack cut short
    wire.frame(wire.FrameType.HEADER, 1, struct.pack(">HHQH", 60, 0, 0, 1)),  # continued property flags
    struct.pack(">BHI", 7, 0, 0) + b"\xce",  # no frame type 7
    struct.pack(">BHI", 3, 1, 5000) + bytes(5000) + b"\xce",  # above frame_max
])
def test_malformed_input_is_one_error_type(bad: bytes) -> None:
    with pytest.raises(wire.AmqpProtocolError):
        _frames(bad, frame_max=4096)


def test_handshake_methods() -> None:
    (start_ok,) = _frames(wire.start_ok("guest", "guest", {"product": "lab"}))
    r = wire.Reader(start_ok.payload, 4)
    assert r.table() == {"product": "lab"} and r.shortstr() == "PLAIN"
    assert r.longstr() == b"\0guest\0guest" and r.shortstr() == "en_US"
    (tune_ok,) = _frames(wire.tune_ok(2047, 131072, 30))
    assert tune_ok.ids == wire.TUNE_OK and tune_ok.payload[4:] == struct.pack(">HIH", 2047, 131072, 30)
    assert negotiate({"channel_max": 0, "frame_max": 0, "heartbeat": 60}) == (131072, 30, 2047)
    assert negotiate({"channel_max": 16, "frame_max": 8192, "heartbeat": 0}) == (8192, 0, 16)
    assert [f.ids for f in _frames(wire.connection_open() + wire.channel_open(1) + wire.confirm_select(1))] == [
        wire.OPEN, wire.CHANNEL_OPEN, wire.CONFIRM_SELECT]
