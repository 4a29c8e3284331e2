"""The NATS protocol codec of the lean JetStream publisher (harness.nats_wire): the lines it writes, the server's
lines parsed whole, byte at a time and with trailing bytes, and the PubAck answers it classifies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import nats_wire as wire


def _hmsg(subject: str, sid: int, reply: str, headers: bytes, payload: bytes) -> bytes:
    """A server HMSG, shaped as the HPUB the publisher writes (what nats-server forwards to a subscriber)."""
    line = f"HMSG {subject} {sid} {reply} {len(headers)} {len(headers) + len(payload)}" if reply else \
        f"HMSG {subject} {sid} {len(headers)} {len(headers) + len(payload)}"
    return line.encode() + wire.CRLF + headers + payload + wire.CRLF


SERVER = (b'INFO {"server_id":"X","version":"2.9.15","headers":true,"max_payload":1048576}\r\n'
          b"PING\r\n"
          b"MSG _INBOX.ab.1 1 34\r\n" + b'{"stream":"T","seq":7,"domain":""}' + b"\r\n"
          + _hmsg("_INBOX.ab.2", 1, "", b"NATS/1.0 503\r\n\r\n", b"")
          + b"+OK\r\nPONG\r\n-ERR 'Authorization Violation'\r\n")


def _kinds(events: list[wire.Event]) -> list[wire.Kind]:
    return [e.kind for e in events]


def test_parses_a_stream_whole() -> None:
    events = list(wire.Parser().feed(SERVER))
    assert _kinds(events) == [wire.Kind.INFO, wire.Kind.PING, wire.Kind.MSG, wire.Kind.MSG, wire.Kind.OK,
                              wire.Kind.PONG, wire.Kind.ERR]
    assert events[0].info["version"] == "2.9.15"
    assert events[2].subject == "_INBOX.ab.1" and events[2].sid == 1 and json.loads(events[2].payload)["seq"] == 7
    assert events[3].status == wire.NO_RESPONDERS and events[3].payload == b""
    assert events[6].text == "Authorization Violation"


def test_parses_byte_at_a_time_and_keeps_a_partial_tail() -> None:
    parser = wire.Parser()
    events = [e for i in range(len(SERVER)) for e in parser.feed(SERVER[i:i + 1])]
    assert events == list(wire.Parser().feed(SERVER))
    parser = wire.Parser()
    head = list(parser.feed(SERVER + b"MSG _INBOX.ab.3 1 5\r\nhel"))  # trailing: a message cut in its payload
    assert len(head) == 7
    (rest,) = parser.feed(b"lo\r\n")
    assert rest.payload == b"hello" and rest.subject == "_INBOX.ab.3"


def test_hpub_carries_the_headers_and_payload() -> None:
    headers = wire.header_block({"lab-key": "k1", "lab-born-ns": "123"})
    data = wire.hpub("T.0", "_INBOX.x.9", headers, b"body")
    line, _, rest = data.partition(wire.CRLF)
    assert line == f"HPUB T.0 _INBOX.x.9 {len(headers)} {len(headers) + 4}".encode()
    assert rest == headers + b"body" + wire.CRLF
    assert wire.parse_headers(headers) == (0, {"lab-key": "k1", "lab-born-ns": "123"})
    assert wire.pub("T.0", "r", b"ab") == b"PUB T.0 r 2\r\nab\r\n"


def test_connect_asks_for_headers_and_no_responders_quietly() -> None:
    line = wire.connect_line("lab")
    assert line.startswith(b"CONNECT ") and line.endswith(wire.CRLF)
    opts = json.loads(line[len(b"CONNECT "):])
    assert opts["verbose"] is False and opts["pedantic"] is False
    assert opts["headers"] is True and opts["no_responders"] is True
    assert wire.sub_line("_INBOX.x.*", 1) == b"SUB _INBOX.x.* 1\r\n"


@pytest.mark.parametrize(("payload", "status", "kind", "seq", "code"), [
    (b'{"stream":"T","seq":42}', 0, wire.AckKind.OK, 42, -1),
    (b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"T"}', 0,
     wire.AckKind.ERROR, -1, 503),
    (b"", wire.NO_RESPONDERS, wire.AckKind.NO_RESPONDERS, -1, 503),
    (b"not json", 0, wire.AckKind.ERROR, -1, -1),
    (b'{"stream":"T"}', 0, wire.AckKind.ERROR, -1, -1),
])
def test_pub_ack(payload: bytes, status: int, kind: wire.AckKind, seq: int, code: int) -> None:
    ack = wire.pub_ack(wire.Event(wire.Kind.MSG, "_INBOX.x.1", 1, "", payload, status))
    assert (ack.kind, ack.seq, ack.code) == (kind, seq, code)


@pytest.mark.parametrize("bad", [b"WHAT\r\n", b"MSG a 1 x\r\n", b"HMSG a 1 9 3\r\nabc\r\n",
                                 b"MSG a 1 3\r\nabcXY", b"INFO [1]\r\n", b"HMSG a 1 3 3\r\nabc\r\n"])
def test_malformed_input_is_one_error_type(bad: bytes) -> None:
    with pytest.raises(wire.NatsProtocolError):
        list(wire.Parser().feed(bad))


def test_an_endless_line_is_refused() -> None:
    with pytest.raises(wire.NatsProtocolError):
        list(wire.Parser().feed(b"MSG " + b"x" * (wire.MAX_CONTROL_LINE + 1)))


_token = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-_"), min_size=1, max_size=12)


@given(st.lists(st.tuples(_token, st.dictionaries(_token, _token, max_size=3), st.binary(max_size=300)),
                min_size=1, max_size=6),
       st.lists(st.integers(1, 50), max_size=20))
def test_messages_round_trip_in_any_cuts(msgs: list[tuple[str, dict[str, str], bytes]], cuts: list[int]) -> None:
    stream = b"".join(_hmsg(f"s.{subj}", 7, f"r.{i}", wire.header_block(h), p) for i, (subj, h, p) in enumerate(msgs))
    parser = wire.Parser()
    out: list[wire.Event] = []
    pos = 0
    for c in cuts:
        out += parser.feed(stream[pos:pos + c])
        pos += c
    out += parser.feed(stream[pos:])
    assert [(e.subject, e.reply, e.headers, e.payload) for e in out] == [
        (f"s.{subj}", f"r.{i}", h, p) for i, (subj, h, p) in enumerate(msgs)]
