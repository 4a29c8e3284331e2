"""This module owns the NATS client protocol as far as a JetStream publisher and a JetStream pull consumer need
it, sans-IO: the lines a client writes (pure functions returning bytes), a parser fed the bytes the server sends,
yielding events, the JetStream answers and ack subjects read, and the pull requests' bookkeeping
(``PullWindow``). The socket shells are ``harness.nats_lean`` (publisher) and ``harness.nats_lean_consumer``.

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

The pull consumer's JetStream subjects (docs.nats.io, "JetStream wire API"; ADR-13 for pulls, ADR-15 for ack
subjects) — every request is a PUB with the client's inbox as reply:

=========================================================  ==========================================================
subject                                                    payload -> answer
=========================================================  ==========================================================
``$JS.API.CONSUMER.INFO.<stream>.<durable>``               empty -> the consumer's info, or ``{"error": {"code":
                                                           404, "err_code": 10014}}`` (10059: no such stream)
``$JS.API.CONSUMER.DURABLE.CREATE.<stream>.<durable>``     ``{"stream_name":..,"config":{..}}`` (``consumer_config``:
                                                           nats-py's) -> the consumer's info or an error
``$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>``           ``{"batch":N,"expires":ns}`` -> up to N stored messages on
                                                           the inbox, each with its ack subject as reply; or a status
                                                           (HMSG, no reply): ``NATS/1.0 408 Request Timeout``
                                                           (expired), ``409 <why>`` (ended by the server), ``404``
                                                           (``no_wait`` found nothing)
``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.    what a delivery's reply says (``ack_reply``); ``+ACK``
<consumer seq>.<stored ns>.<pending>``                     published to it acknowledges that one message. Newer
                                                           servers put ``<domain>.<account hash>.`` after ``$JS.ACK.``
                                                           and a random token at the end (12 tokens)
=========================================================  ==========================================================
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
    text: str = ""  # -ERR's message; a message's status description (``409 Consumer Deleted``)


def parse_headers(block: bytes) -> tuple[int, dict[str, str]]:
    """A header block's status (0 when the version line has none) and fields (the last of a repeated name)."""
    status, _, fields = parse_header_block(block)
    return status, fields


def parse_header_block(block: bytes) -> tuple[int, str, dict[str, str]]:
    """A header block's status, the status's description (``409 Consumer Deleted``: "Consumer Deleted"; what
    tells one 409 from another) and fields."""
    lines = block.split(CRLF)
    first = lines[0]
    if not first.startswith(HEADER_VERSION):
        raise NatsProtocolError(f"header block without {HEADER_VERSION!r}: {first[:40]!r}")
    rest = first[len(HEADER_VERSION):].strip().split(None, 1)
    status = int(rest[0]) if rest and rest[0].isdigit() else 0
    text = rest[1].decode(errors="replace").strip() if status and len(rest) > 1 else ""
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise NatsProtocolError(f"header line without ':': {line[:40]!r}")
        fields[name.decode(errors="replace").strip()] = value.decode(errors="replace").strip()
    return status, text, fields


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
        status, text, headers = parse_header_block(bytes(buf[start:start + hdr_len])) if hdr_len else (0, "", {})
        ev = Event(Kind.MSG, parts[1].decode(errors="replace"), sid, reply.decode(errors="replace"),
                   bytes(buf[start + hdr_len:end]), status, headers, text=text)
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


# ---- the JetStream pull consumer ------------------------------------------------------------------------
#
# A pull consumer talks to the JetStream API by request-reply (a PUB with a reply subject; the answer is a
# MSG on it, JSON, or a 503 status when JetStream does not answer) and pulls with MSG.NEXT requests whose reply
# subject is the consumer's inbox. The stored messages arrive there (MSG/HMSG on the inbox subscription's sid,
# under their own subject, with the ack subject as reply); a status message on the inbox (no reply) ends a
# pull request early. Acknowledging a message is a PUB of ``+ACK`` to its ack subject.

API_PREFIX: Final = "$JS.API"
ACK_PREFIX: Final = "$JS.ACK."
NO_MESSAGES: Final = 404  # a no_wait pull found nothing
REQUEST_TIMEOUT: Final = 408  # a pull request's ``expires`` passed
CONFLICT: Final = 409  # ended by the server: "Consumer Deleted", "Exceeded MaxWaiting", "Leadership Change", ...
PULL_ENDS: Final = frozenset({NO_MESSAGES, REQUEST_TIMEOUT, CONFLICT})
IDLE_HEARTBEAT: Final = 100  # only when a pull asks for heartbeats (this one does not)
NOT_FOUND: Final = 404  # an API error's ``code`` for a missing consumer or stream
STREAM_NOT_FOUND: Final = 10059  # the ``err_code`` that tells a missing stream from a missing consumer (10014)
_ACK: Final = b"+ACK"


def consumer_info_subject(stream: str, durable: str) -> str:
    return f"{API_PREFIX}.CONSUMER.INFO.{stream}.{durable}"


def consumer_create_subject(stream: str, durable: str) -> str:
    """The durable-create form: a durable's name is in the subject (nats-py sends the same config to
    ``CONSUMER.CREATE.<stream>.<name>.<filter>`` on 2.9+; both make the same consumer)."""
    return f"{API_PREFIX}.CONSUMER.DURABLE.CREATE.{stream}.{durable}"


def next_subject(stream: str, durable: str) -> str:
    return f"{API_PREFIX}.CONSUMER.MSG.NEXT.{stream}.{durable}"


def start_time(ms: int) -> str:
    """``opt_start_time`` for a start at ``ms`` (epoch ms), RFC 3339 in UTC, written as nats-py writes it
    (``isoformat`` with ``Z``, microseconds unless they are zero) so that both paths send the same config."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
    return text.replace(".000000", "")


def consumer_config(durable: str, filter_subject: str, from_ms: int | None) -> dict[str, Any]:
    """A durable pull consumer's config as nats-py's ``pull_subscribe(filter, durable=..., config=
    ConsumerConfig(deliver_policy=...))`` sends it (``ConsumerConfig.as_dict``: its defaults and the zeros it
    writes for unset durations, which the server reads as "its default"), so both paths create equal consumers."""
    cfg: dict[str, Any] = {"name": durable, "durable_name": durable, "deliver_policy": "all"}
    if from_ms is not None:
        cfg["deliver_policy"] = "by_start_time"
        cfg["opt_start_time"] = start_time(from_ms)
    cfg.update({"ack_policy": "explicit", "filter_subject": filter_subject, "replay_policy": "instant",
                "ack_wait": 0, "idle_heartbeat": 0, "inactive_threshold": 0})
    return cfg


def create_consumer_body(stream: str, config: Mapping[str, Any]) -> bytes:
    return json.dumps({"stream_name": stream, "config": dict(config)}, separators=(",", ":")).encode()


def pull_request(batch: int, expires_ns: int) -> bytes:
    """A MSG.NEXT body: up to ``batch`` messages, the request ending (408) ``expires_ns`` after the server got it."""
    return json.dumps({"batch": batch, "expires": expires_ns}, separators=(",", ":")).encode()


def request(subject: str, reply: str, payload: bytes = b"") -> bytes:
    """A request to the JetStream API (or a pull): a PUB whose answer comes on ``reply``."""
    return pub(subject, reply, payload)


def ack(reply: str) -> bytes:
    """The explicit acknowledgement of one delivered message: ``+ACK`` to its ack subject, no reply wanted."""
    return f"PUB {reply} 4".encode() + CRLF + _ACK + CRLF


@dataclass(frozen=True, slots=True)
class AckReply:
    """What a delivered message's ack subject says about it."""

    stream: str
    consumer: str
    delivered: int  # how many times it has been delivered (> 1: a redelivery)
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int  # when the stream stored it (its wall clock, ns)
    pending: int  # messages left for the consumer after this one
    domain: str = ""  # the JetStream domain ("" when none: the server writes "_")


_V1_TOKENS: Final = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
_V2_TOKENS: Final = 11  # $JS.ACK.<domain>.<account hash>.<stream>...<pending>[.<random>]: 11 or 12 tokens


def ack_reply(subject: str) -> AckReply | None:
    """An ack subject's fields, in either layout (the 9-token one of nats-server 2.9; the newer one with domain
    and account hash, 12 tokens with a trailing random token, as nats-py and nats.net read it); None when
    ``subject`` is not an ack subject."""
    if not subject.startswith(ACK_PREFIX):
        return None
    tokens = subject.split(".")
    try:
        if len(tokens) == _V1_TOKENS:
            return AckReply(tokens[2], tokens[3], int(tokens[4]), int(tokens[5]), int(tokens[6]), int(tokens[7]),
                            int(tokens[8]))
        if len(tokens) in (_V2_TOKENS, _V2_TOKENS + 1):
            domain = "" if tokens[2] == "_" else tokens[2]
            return AckReply(tokens[4], tokens[5], int(tokens[6]), int(tokens[7]), int(tokens[8]), int(tokens[9]),
                            int(tokens[10]), domain)
    except ValueError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    """A JetStream API answer: ok with its JSON body, or its error (``code`` as HTTP: 404 = no such consumer or
    stream; 503 = JetStream did not answer: not enabled, or not ready after a restart)."""

    ok: bool
    code: int = 0
    err_code: int = 0  # JetStream's own error number (10014 = consumer not found)
    text: str = ""
    body: dict[str, Any] = field(default_factory=dict)


def api_answer(ev: Event) -> ApiAnswer:
    if ev.status == NO_RESPONDERS:
        return ApiAnswer(False, NO_RESPONDERS, text="no responders")
    try:
        body = json.loads(ev.payload)
    except ValueError:
        return ApiAnswer(False, text=f"not JSON: {ev.payload[:80]!r}")
    if not isinstance(body, dict):
        return ApiAnswer(False, text=f"not an object: {ev.payload[:80]!r}")
    err = body.get("error")
    if err is None:
        return ApiAnswer(True, body=body)
    err = err if isinstance(err, dict) else {"description": str(err)}
    return ApiAnswer(False, int(err.get("code", -1)), int(err.get("err_code", 0)),
                     str(err.get("description", ""))[:200], body)


class PullWindow:
    """The pull requests one consumer has outstanding, oldest first, and how many more to send. The server
    serves waiting requests in arrival order (it fills the oldest first, and with one ``expires`` for all they
    expire in that order too), so a delivery counts against the oldest request and a status message ends it.
    A request the server never ended (it was stopped; the status is lost with a connection) is given up
    ``grace_s`` after its expiry: the window cannot stall on one."""

    def __init__(self, depth: int, batch: int, expires_s: float, grace_s: float) -> None:
        self.depth, self.batch = depth, batch
        self.expires_s, self.grace_s = expires_s, grace_s
        self._reqs: deque[list[float]] = deque()  # [messages still to come, the server's expiry (monotonic)]

    def __len__(self) -> int:
        return len(self._reqs)

    def wanted(self, now: float) -> int:
        """Requests to send now to keep ``depth`` outstanding (those long past their expiry given up first)."""
        reqs = self._reqs
        while reqs and reqs[0][1] + self.grace_s < now:
            reqs.popleft()
        return self.depth - len(reqs)

    def sent(self, now: float) -> None:
        self._reqs.append([self.batch, now + self.expires_s])

    def delivered(self) -> None:
        reqs = self._reqs
        if reqs:
            reqs[0][0] -= 1
            if reqs[0][0] <= 0:
                reqs.popleft()  # filled: the server ends it without a status

    def ended(self) -> None:
        if self._reqs:
            self._reqs.popleft()

    def clear(self) -> None:
        self._reqs.clear()
