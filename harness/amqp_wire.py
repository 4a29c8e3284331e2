"""This module owns AMQP 0-9-1 as far as a publisher with confirms needs it, sans-IO: frames and the methods it
writes (pure functions returning bytes), field tables both ways, and a parser fed the server's bytes that yields
decoded frames. The socket shell is ``harness.amqp_lean``.

Frames (AMQP 0-9-1 specification §4.2.3; all integers big-endian):

===========  ========  ==================================================================================
field        size      meaning
===========  ========  ==================================================================================
type         1         1 method, 2 content header, 3 content body, 8 heartbeat
channel      2         0 for the connection, else the channel
size         4         the payload's length
payload      size      method: class id (2), method id (2), arguments; header: class id (2), weight (2),
                       body size (8), property flags (2), properties; body: bytes
frame-end    1         0xCE
===========  ========  ==================================================================================

Methods this publisher meets (class.method ids; arguments in order; bits packed into octets, low bit first):

==========================  ======  =================================================================
method                      ids     arguments
==========================  ======  =================================================================
Connection.Start            10.10   version major, minor (octets), server properties (table),
                                    mechanisms, locales (long strings)
Connection.StartOk          10.11   client properties (table), mechanism (short), response (long),
                                    locale (short)
Connection.Tune / TuneOk    10.30   channel max (short), frame max (long), heartbeat (short)
                            10.31
Connection.Open / OpenOk    10.40   virtual host (short), reserved (short), reserved (bit) / reserved
                            10.41
Connection.Close / CloseOk  10.50   reply code (short), reply text (short), class id, method id / -
                            10.51
Connection.Blocked          10.60   reason (short); Unblocked 10.61 -
Channel.Open / OpenOk       20.10   reserved (short) / reserved (long)
                            20.11
Channel.Close / CloseOk     20.40   as Connection.Close / -
                            20.41
Confirm.Select / SelectOk   85.10   nowait (bit) / -
                            85.11
Basic.Publish               60.40   reserved (short), exchange (short str), routing key (short str),
                                    mandatory, immediate (bits); then a content header and body frames
Basic.Return                60.50   reply code, reply text, exchange, routing key; then header + body
Basic.Ack                   60.80   delivery tag (longlong), multiple (bit)
Basic.Nack                  60.120  delivery tag (longlong), multiple, requeue (bits)
==========================  ======  =================================================================

Basic properties in a content header (flag bit, 15 = the highest, then its value's type): content-type 15
short str, content-encoding 14 short str, headers 13 table, delivery-mode 12 octet, priority 11 octet,
correlation-id 10, reply-to 9, expiration 8, message-id 7 (short strs), timestamp 6 longlong, type 5,
user-id 4, app-id 3, cluster-id 2 (short strs).

Field-table values are typed by one octet, as RabbitMQ reads them ("AMQP 0-9-1 errata"): t bool, b/B int8,
s/u int16, I/i int32, l int64, f float, d double, D decimal, S long string, x byte array, A array, T timestamp,
F table, V void.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from typing import Any, Final

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_END: Final = 0xCE
FRAME_OVERHEAD: Final = 8  # type, channel, size and frame-end around a payload
MIN_FRAME_MAX: Final = 4096  # the specification's floor


class FrameType(IntEnum):
    METHOD = 1
    HEADER = 2
    BODY = 3
    HEARTBEAT = 8


# (class id, method id) of each method above.
START: Final = (10, 10)
START_OK: Final = (10, 11)
TUNE: Final = (10, 30)
TUNE_OK: Final = (10, 31)
OPEN: Final = (10, 40)
OPEN_OK: Final = (10, 41)
CLOSE: Final = (10, 50)
CLOSE_OK: Final = (10, 51)
BLOCKED: Final = (10, 60)
UNBLOCKED: Final = (10, 61)
CHANNEL_OPEN: Final = (20, 10)
CHANNEL_OPEN_OK: Final = (20, 11)
CHANNEL_CLOSE: Final = (20, 40)
CHANNEL_CLOSE_OK: Final = (20, 41)
CONFIRM_SELECT: Final = (85, 10)
CONFIRM_SELECT_OK: Final = (85, 11)
BASIC_PUBLISH: Final = (60, 40)
BASIC_RETURN: Final = (60, 50)
BASIC_ACK: Final = (60, 80)
BASIC_NACK: Final = (60, 120)
BASIC_CLASS: Final = 60
NO_ROUTE: Final = 312  # Basic.Return's reply code for a mandatory message no queue took


class AmqpProtocolError(ValueError):
    """The server sent bytes this codec cannot read: the connection is unusable."""


# ---- primitive encoders ------------------------------------------------------------------------------------


def shortstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    if len(b) > 255:
        raise ValueError(f"short string of {len(b)} bytes")
    return bytes((len(b),)) + b


def longstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">I", len(b)) + b


def _value(v: Any) -> bytes:
    if isinstance(v, bool):
        return b"t" + (b"\x01" if v else b"\x00")
    if isinstance(v, int):
        if -(1 << 31) <= v < (1 << 31):
            return b"I" + struct.pack(">i", v)
        return b"l" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"d" + struct.pack(">d", v)
    if isinstance(v, Decimal):
        sign, digits, exp = v.as_tuple()
        if not isinstance(exp, int) or exp > 0:
            raise ValueError(f"decimal {v} not encodable")
        n = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return b"D" + struct.pack(">Bi", -exp, n)
    if isinstance(v, str):
        return b"S" + longstr(v)
    if isinstance(v, bytes):
        return b"x" + longstr(v)
    if isinstance(v, Mapping):
        return b"F" + table(v)
    if isinstance(v, list | tuple):
        items = b"".join(_value(x) for x in v)
        return b"A" + struct.pack(">I", len(items)) + items
    if v is None:
        return b"V"
    raise TypeError(f"no field-table type for {type(v).__name__}")


def table(fields: Mapping[str, Any]) -> bytes:
    """A field table: its byte length, then name (short string), type octet and value per field."""
    body = b"".join(shortstr(k) + _value(v) for k, v in fields.items())
    return struct.pack(">I", len(body)) + body


# ---- primitive decoders ---------------------------------------------------------------------------------


class Reader:
    """A cursor over one frame's payload; running off its end is a protocol error, not an IndexError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise AmqpProtocolError(f"field of {n} bytes runs past the frame ({len(self.data) - self.pos} left)")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def octet(self) -> int:
        return int(self.unpack(">B")[0])

    def short(self) -> int:
        return int(self.unpack(">H")[0])

    def long(self) -> int:
        return int(self.unpack(">I")[0])

    def longlong(self) -> int:
        return int(self.unpack(">Q")[0])

    def shortstr(self) -> str:
        return self.take(self.octet()).decode(errors="replace")

    def longstr(self) -> bytes:
        return self.take(self.long())

    def table(self) -> dict[str, Any]:
        inner = Reader(self.take(self.long()))
        out: dict[str, Any] = {}
        while inner.pos < len(inner.data):
            name = inner.shortstr()
            out[name] = inner.value()
        return out

    def value(self) -> Any:
        kind = self.take(1)
        simple = _SIMPLE.get(kind)
        if simple is not None:
            return self.unpack(simple)[0]
        if kind == b"t":
            return self.octet() != 0
        if kind == b"S":
            raw = self.longstr()
            try:
                return raw.decode()
            except UnicodeDecodeError:
                return raw
        if kind == b"x":
            return self.longstr()
        if kind == b"F":
            return self.table()
        if kind == b"A":
            inner = Reader(self.take(self.long()))
            items = []
            while inner.pos < len(inner.data):
                items.append(inner.value())
            return items
        if kind == b"D":
            scale, n = self.unpack(">Bi")
            return Decimal(n).scaleb(-scale)
        if kind == b"V":
            return None
        raise AmqpProtocolError(f"unknown field-table type {kind!r}")


_SIMPLE: Final = {b"b": ">b", b"B": ">B", b"s": ">h", b"u": ">H", b"I": ">i", b"i": ">I", b"l": ">q",
                  b"f": ">f", b"d": ">d", b"T": ">Q"}


# ---- frames the client writes (pure) ---------------------------------------------------------------------------


def frame(kind: FrameType, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def method(channel: int, ids: tuple[int, int], args: bytes = b"") -> bytes:
    return frame(FrameType.METHOD, channel, struct.pack(">HH", *ids) + args)


HEARTBEAT: Final = frame(FrameType.HEARTBEAT, 0, b"")


def start_ok(user: str, password: str, client_properties: Mapping[str, Any]) -> bytes:
    """PLAIN: the response is NUL, user, NUL, password."""
    return method(0, START_OK, table(client_properties) + shortstr("PLAIN")
                  + longstr(b"\0" + user.encode() + b"\0" + password.encode()) + shortstr("en_US"))


def tune_ok(channel_max: int, frame_max: int, heartbeat_s: int) -> bytes:
    return method(0, TUNE_OK, struct.pack(">HIH", channel_max, frame_max, heartbeat_s))


def connection_open(vhost: str = "/") -> bytes:
    return method(0, OPEN, shortstr(vhost) + shortstr("") + b"\x00")


def connection_close(code: int = 200, text: str = "bye") -> bytes:
    return method(0, CLOSE, struct.pack(">H", code) + shortstr(text) + struct.pack(">HH", 0, 0))


def connection_close_ok() -> bytes:
    return method(0, CLOSE_OK)


def channel_open(channel: int) -> bytes:
    return method(channel, CHANNEL_OPEN, shortstr(""))


def channel_close_ok(channel: int) -> bytes:
    return method(channel, CHANNEL_CLOSE_OK)


def confirm_select(channel: int) -> bytes:
    return method(channel, CONFIRM_SELECT, b"\x00")


# Property flag bits (the highest first), each with how its value is written.
PROPERTIES: Final = (("content_type", 15, "s"), ("content_encoding", 14, "s"), ("headers", 13, "F"),
                     ("delivery_mode", 12, "B"), ("priority", 11, "B"), ("correlation_id", 10, "s"),
                     ("reply_to", 9, "s"), ("expiration", 8, "s"), ("message_id", 7, "s"),
                     ("timestamp", 6, "T"), ("type", 5, "s"), ("user_id", 4, "s"), ("app_id", 3, "s"),
                     ("cluster_id", 2, "s"))


def properties(props: Mapping[str, Any]) -> bytes:
    """The property flags and list of a content header (only the names in ``PROPERTIES``)."""
    flags = 0
    out = []
    for name, bit, kind in PROPERTIES:
        v = props.get(name)
        if v is None:
            continue
        flags |= 1 << bit
        if kind == "s":
            out.append(shortstr(v))
        elif kind == "F":
            out.append(table(v))
        elif kind == "B":
            out.append(bytes((int(v),)))
        else:
            out.append(struct.pack(">Q", int(v)))
    unknown = set(props) - {p[0] for p in PROPERTIES}
    if unknown:
        raise ValueError(f"unknown properties {sorted(unknown)}")
    return struct.pack(">H", flags) + b"".join(out)


def publish(channel: int, exchange: str, routing_key: str, body: bytes, props: bytes, frame_max: int,
            mandatory: bool = True) -> bytes:
    """Basic.Publish, its content header (``props`` from ``properties``) and the body in frames of at most
    ``frame_max`` bytes each (overhead included): one message, ready to write."""
    parts = [method(channel, BASIC_PUBLISH, b"\x00\x00" + shortstr(exchange) + shortstr(routing_key)
                    + (b"\x01" if mandatory else b"\x00")),
             frame(FrameType.HEADER, channel, struct.pack(">HHQ", BASIC_CLASS, 0, len(body)) + props)]
    step = frame_max - FRAME_OVERHEAD
    for i in range(0, len(body), step):
        parts.append(frame(FrameType.BODY, channel, body[i:i + step]))
    return b"".join(parts)


# ---- what the server writes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame; a method frame is decoded (``ids``, ``args``), a content header too (``body_size``,
    ``props``); a body frame keeps its bytes in ``payload``."""

    type: FrameType
    channel: int
    payload: bytes = b""
    ids: tuple[int, int] = (0, 0)
    args: dict[str, Any] = field(default_factory=dict)
    body_size: int = 0
    props: dict[str, Any] = field(default_factory=dict)


def _close_args(r: Reader) -> dict[str, Any]:
    return {"reply_code": r.short(), "reply_text": r.shortstr(), "class_id": r.short(), "method_id": r.short()}


def decode_method(payload: bytes) -> tuple[tuple[int, int], dict[str, Any]]:
    """A method frame's ids and the arguments of the methods above (any other method: no arguments read)."""
    r = Reader(payload)
    ids = (r.short(), r.short())
    args: dict[str, Any] = {}
    if ids == BASIC_ACK:
        args = {"delivery_tag": r.longlong(), "multiple": bool(r.octet() & 1)}
    elif ids == BASIC_NACK:
        bits = (r.longlong(), r.octet())
        args = {"delivery_tag": bits[0], "multiple": bool(bits[1] & 1), "requeue": bool(bits[1] & 2)}
    elif ids == BASIC_RETURN:
        args = {"reply_code": r.short(), "reply_text": r.shortstr(), "exchange": r.shortstr(),
                "routing_key": r.shortstr()}
    elif ids == START:
        args = {"version": (r.octet(), r.octet()), "server_properties": r.table(),
                "mechanisms": r.longstr().decode(errors="replace").split(),
                "locales": r.longstr().decode(errors="replace").split()}
    elif ids == TUNE:
        args = {"channel_max": r.short(), "frame_max": r.long(), "heartbeat": r.short()}
    elif ids in (CLOSE, CHANNEL_CLOSE):
        args = _close_args(r)
    elif ids == BLOCKED:
        args = {"reason": r.shortstr()}
    return ids, args


def decode_properties(r: Reader) -> dict[str, Any]:
    flags = r.short()
    if flags & 1:
        raise AmqpProtocolError("continued property flags (bit 0) are not part of Basic")
    out: dict[str, Any] = {}
    for name, bit, kind in PROPERTIES:
        if not flags & (1 << bit):
            continue
        if kind == "s":
            out[name] = r.shortstr()
        elif kind == "F":
            out[name] = r.table()
        elif kind == "B":
            out[name] = r.octet()
        else:
            out[name] = r.longlong()
    return out


class Parser:
    """Fed the server's bytes in any cuts (``feed``), yields whole decoded frames; keeps what is incomplete.
    Before the first frame the server may answer the protocol header with its own (a version it prefers):
    that is an error, as is a frame larger than ``frame_max``."""

    def __init__(self, frame_max: int = 1 << 20) -> None:
        self.frame_max = frame_max
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[Frame]:
        buf = self._buf
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= 7:
                if buf[pos:pos + 4] == b"AMQP":
                    raise AmqpProtocolError(f"the server wants protocol {bytes(buf[pos:pos + 8])!r}")
                kind, channel, size = struct.unpack_from(">BHI", buf, pos)
                if size + FRAME_OVERHEAD > self.frame_max:
                    raise AmqpProtocolError(f"frame of {size} bytes above frame_max {self.frame_max}")
                end = pos + 7 + size
                if len(buf) < end + 1:
                    break
                if buf[end] != FRAME_END:
                    raise AmqpProtocolError(f"frame-end {buf[end]:#x}, not 0xce")
                payload = bytes(buf[pos + 7:end])
                pos = end + 1
                yield self._decode(kind, channel, payload)
        finally:
            del buf[:pos]

    @staticmethod
    def _decode(kind: int, channel: int, payload: bytes) -> Frame:
        if kind == FrameType.METHOD:
            ids, args = decode_method(payload)
            return Frame(FrameType.METHOD, channel, payload, ids, args)
        if kind == FrameType.HEADER:
            r = Reader(payload)
            _cls, _weight, size = r.unpack(">HHQ")
            return Frame(FrameType.HEADER, channel, payload, body_size=int(size), props=decode_properties(r))
        if kind == FrameType.BODY:
            return Frame(FrameType.BODY, channel, payload)
        if kind == FrameType.HEARTBEAT:
            return Frame(FrameType.HEARTBEAT, channel)
        raise AmqpProtocolError(f"unknown frame type {kind}")
