"""This module owns the NATS client protocol as far as a JetStream publisher needs it, sans-IO: the lines a
publisher writes (pure functions returning bytes) and a parser fed the bytes the server sends, yielding events.
The socket shell is ``harness.nats_lean``.

The protocol is text lines ending in CRLF; a message line is followed by its payload and a CRLF
(docs.nats.io, "Client Protocol"):

==========  =========  =====================================================================================
line        direction  fields
==========  =========  =====================================================================================
INFO        server     ``INFO {json}``: server_id, version, max_payload, headers, ...
CONNECT     client     ``CONNECT {json}``: verbose, pedantic, headers, no_responders, protocol, lang, ...
PUB         client     ``PUB <subject> [reply-to] <#bytes>`` + payload
HPUB        client     ``HPUB <subject> [reply-to] <#header bytes> <#total bytes>`` + headers + payload
SUB         client     ``SUB <subject> [queue group] <sid>``
MSG         server     ``MSG <subject> <sid> [reply-to] <#bytes>`` + payload
HMSG        server     ``HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>`` + headers + payload
PING/PONG   both       keep-alive: a PING is answered with a PONG
+OK / -ERR  server     ``+OK`` (verbose mode only), ``-ERR '<message>'``
==========  =========  =====================================================================================

A header block is ``NATS/1.0[ <status>[ <description>]]`` CRLF, then ``Name: value`` CRLF lines, then CRLF. A
JetStream publish is a PUB/HPUB with a reply subject; the stream's answer (the PubAck) arrives on that subject:
``{"stream": .., "seq": N}`` or ``{"error": {"code": .., "description": ..}}``; when no stream listens on the
subject, the server answers the reply subject itself with an empty message whose header status is 503 ("no
responders", only when CONNECT asked for ``no_responders``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

CRLF: Final = b"\r\n"
HEADER_VERSION: Final = b"NATS/1.0"
NO_RESPONDERS: Final = 503
MAX_CONTROL_LINE: Final = 4096  # the server's own limit on a protocol line (max_control_line's default)


class NatsProtocolError(ValueError):
    """The server sent something this parser cannot read: the connection is unusable."""


# ---- what the client writes (pure) ----------------------------------------------------------------------


def connect_line(name: str) -> bytes:
    """CONNECT: no +OK per line (verbose false), no subject checks (pedantic false), headers on (HPUB and the
    503 status), and "no responders" answered instead of a publish waiting out its timeout."""
    opts = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True, "protocol": 1,
            "lang": "python-lab-lean", "version": "1", "name": name}
    return b"CONNECT " + json.dumps(opts, separators=(",", ":")).encode() + CRLF


def sub_line(subject: str, sid: int) -> bytes:
    return f"SUB {subject} {sid}".encode() + CRLF


def header_block(headers: Mapping[str, str]) -> bytes:
    return HEADER_VERSION + CRLF + b"".join(f"{k}: {v}".encode() + CRLF for k, v in headers.items()) + CRLF


def hpub(subject: str, reply: str, headers: bytes, payload: bytes) -> bytes:
    """One HPUB with its header block (``header_block``) and payload, ready to write."""
    return (f"HPUB {subject} {reply} {len(headers)} {len(headers) + len(payload)}".encode() + CRLF + headers
            + payload + CRLF)


def pub(subject: str, reply: str, payload: bytes) -> bytes:
    return f"PUB {subject} {reply} {len(payload)}".encode() + CRLF + payload + CRLF


PING: Final = b"PING" + CRLF
PONG: Final = b"PONG" + CRLF


# ---- what the server writes -------------------------------------------------------------------------------


class Kind(Enum):
    INFO = "info"
    MSG = "msg"
    PING = "ping"
    PONG = "pong"
    OK = "ok"
    ERR = "err"


@dataclass(frozen=True, slots=True)
class Event:
    kind: Kind
    subject: str = ""
    sid: int = 0
    reply: str = ""
    payload: bytes = b""
    status: int = 0  # a header block's status (503 = no responders), 0 without one
    headers: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # INFO's JSON
    text: str = ""  # -ERR's message


def parse_headers(block: bytes) -> tuple[int, dict[str, str]]:
    """A header block's status (0 when the version line has none) and fields (the last of a repeated name)."""
    lines = block.split(CRLF)
    first = lines[0]
    if not first.startswith(HEADER_VERSION):
        raise NatsProtocolError(f"header block without {HEADER_VERSION!r}: {first[:40]!r}")
    rest = first[len(HEADER_VERSION):].strip().split(None, 1)
    status = int(rest[0]) if rest and rest[0].isdigit() else 0
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise NatsProtocolError(f"header line without ':': {line[:40]!r}")
        fields[name.decode(errors="replace").strip()] = value.decode(errors="replace").strip()
    return status, fields


class Parser:
    """Fed the server's bytes in any cuts (``feed``), yields whole events in order; keeps what is incomplete."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[Event]:
        buf = self._buf
        buf += data
        pos = 0
        n = len(buf)
        try:
            while pos < n:
                eol = buf.find(CRLF, pos)
                if eol < 0:
                    if n - pos > MAX_CONTROL_LINE:
                        raise NatsProtocolError("protocol line too long")
                    break
                line = bytes(buf[pos:eol])
                op = line[:4].upper()
                if op in (b"MSG ", b"HMSG"):
                    ev, end = self._message(buf, line, eol + 2)
                    if ev is None:
                        break  # its payload is not all here yet
                    pos = end
                    yield ev
                    continue
                pos = eol + 2
                yield self._control(line)
        finally:
            del buf[:pos]

    @staticmethod
    def _control(line: bytes) -> Event:
        op, _, rest = line.partition(b" ")
        op = op.upper()
        if op == b"PING":
            return Event(Kind.PING)
        if op == b"PONG":
            return Event(Kind.PONG)
        if op == b"+OK":
            return Event(Kind.OK)
        if op == b"-ERR":
            return Event(Kind.ERR, text=rest.decode(errors="replace").strip().strip("'"))
        if op == b"INFO":
            try:
                info = json.loads(rest)
            except ValueError as exc:
                raise NatsProtocolError(f"INFO is not JSON: {exc}") from exc
            if not isinstance(info, dict):
                raise NatsProtocolError("INFO is not an object")
            return Event(Kind.INFO, info=info)
        raise NatsProtocolError(f"unknown protocol line {line[:40]!r}")

    @staticmethod
    def _message(buf: bytearray, line: bytes, start: int) -> tuple[Event | None, int]:
        """A MSG/HMSG whose control line ends before ``start``: the event and where the next line starts, or
        (None, _) when its payload has not all arrived."""
        parts = line.split()
        try:
            if parts[0].upper() == b"HMSG":
                if len(parts) not in (5, 6):
                    raise NatsProtocolError(f"bad HMSG line {line[:80]!r}")
                hdr_len, total = int(parts[-2]), int(parts[-1])
                reply = parts[3] if len(parts) == 6 else b""
            else:
                if len(parts) not in (4, 5):
                    raise NatsProtocolError(f"bad MSG line {line[:80]!r}")
                hdr_len, total = 0, int(parts[-1])
                reply = parts[3] if len(parts) == 5 else b""
            sid = int(parts[2])
        except ValueError as exc:
            raise NatsProtocolError(f"bad message line {line[:80]!r}") from exc
        if not 0 <= hdr_len <= total:
            raise NatsProtocolError(f"header size {hdr_len} outside the message's {total}")
        end = start + total
        if len(buf) < end + 2:
            return None, start
        if buf[end:end + 2] != CRLF:
            raise NatsProtocolError("message payload not followed by CRLF")
        status, headers = parse_headers(bytes(buf[start:start + hdr_len])) if hdr_len else (0, {})
        ev = Event(Kind.MSG, parts[1].decode(errors="replace"), sid, reply.decode(errors="replace"),
                   bytes(buf[start + hdr_len:end]), status, headers)
        return ev, end + 2


# ---- the JetStream answer -------------------------------------------------------------------------------


class AckKind(Enum):
    OK = "ok"  # stored: ``seq`` is its stream sequence
    ERROR = "error"  # the stream refused it (an API error; ``code``)
    NO_RESPONDERS = "no_responders"  # no stream on the subject: nothing stored


@dataclass(frozen=True, slots=True)
class PubAck:
    kind: AckKind
    seq: int = -1
    code: int = -1
    text: str = ""


def pub_ack(ev: Event) -> PubAck:
    """The answer to a JetStream publish, from the message that arrived on its reply subject."""
    if ev.status == NO_RESPONDERS:
        return PubAck(AckKind.NO_RESPONDERS, code=NO_RESPONDERS, text="no responders")
    try:
        body = json.loads(ev.payload)
    except ValueError:
        return PubAck(AckKind.ERROR, text=f"not a PubAck: {ev.payload[:80]!r}")
    if not isinstance(body, dict):
        return PubAck(AckKind.ERROR, text=f"not a PubAck: {ev.payload[:80]!r}")
    err = body.get("error")
    if err is not None:
        err = err if isinstance(err, dict) else {"description": str(err)}
        return PubAck(AckKind.ERROR, code=int(err.get("code", -1)), text=str(err.get("description", ""))[:200])
    seq = body.get("seq")
    if not isinstance(seq, int):
        return PubAck(AckKind.ERROR, text=f"PubAck without seq: {ev.payload[:80]!r}")
    return PubAck(AckKind.OK, seq=seq)
