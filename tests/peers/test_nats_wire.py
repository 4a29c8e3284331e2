"""The NATS protocol codec of the lean JetStream publisher and pull consumer (harness.nats_wire): the lines they
write, the server's lines parsed whole, byte at a time and with trailing bytes, the PubAck and API answers they
classify, ack subjects, the consumer config (equal to nats-py's) and the pull window's bookkeeping."""

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


# ---- the pull consumer's pieces (harness.nats_lean_consumer) ------------------------------------------------


def test_ack_reply_reads_both_layouts() -> None:
    v1 = wire.ack_reply("$JS.ACK.ORDERS.g.2.1041.17.1764270000123456789.5")
    assert v1 == wire.AckReply("ORDERS", "g", 2, 1041, 17, 1764270000123456789, 5)
    # The newer layout: domain ("_" = none) and account hash before the stream, a random token at the end;
    # nats-py (nats/aio/msg.py) and nats.net read 11 tokens (no random one) the same way.
    v2 = "$JS.ACK._.ACCHASH.ORDERS.g.1.1041.17.1764270000123456789.0.xyz"
    assert wire.ack_reply(v2) == wire.AckReply("ORDERS", "g", 1, 1041, 17, 1764270000123456789, 0, "")
    hub = wire.ack_reply("$JS.ACK.hub.ACCHASH.ORDERS.g.1.7.3.99.0")
    assert hub is not None and (hub.domain, hub.stream_seq, hub.timestamp_ns) == ("hub", 7, 99)


@pytest.mark.parametrize("subject", ["", "_INBOX.ab.1", "$JS.ACK.S.g.1.2.3.4", "$JS.ACK.S.g.1.x.3.4.5",
                                     "$JS.ACK.a.b.S.g.1.2.3.4.5.6.7", "$JS.API.CONSUMER.INFO.S.g"])
def test_ack_reply_refuses_what_is_not_an_ack_subject(subject: str) -> None:
    assert wire.ack_reply(subject) is None


def test_the_consumer_config_is_nats_pys() -> None:
    """The create request's config equals what nats-py's pull_subscribe sends for the library path's
    ConsumerConfig (ConsumerConfig.as_dict after pull_subscribe sets filter, name and durable)."""
    api = pytest.importorskip("nats.js.api", reason="nats-py not installed: nothing to compare with")
    from datetime import UTC, datetime

    for from_ms in (None, 1764270000123, 1764270000000):
        if from_ms is None:
            cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL)
        else:
            cfg = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_TIME,
                                     opt_start_time=datetime.fromtimestamp(from_ms / 1000, tz=UTC))
        cfg.filter_subject, cfg.name, cfg.durable_name = "T.*", "g", "g"
        assert wire.consumer_config("g", "T.*", from_ms) == json.loads(json.dumps(cfg.as_dict()))
    body = json.loads(wire.create_consumer_body("T", wire.consumer_config("g", "T.*", None)))
    assert body["stream_name"] == "T" and body["config"]["ack_policy"] == "explicit"
    assert wire.start_time(1764270000123) == "2025-11-27T19:00:00.123000Z"
    assert wire.start_time(1764270000000) == "2025-11-27T19:00:00Z"


def test_consumer_requests() -> None:
    assert wire.consumer_info_subject("S", "g") == "$JS.API.CONSUMER.INFO.S.g"
    assert wire.consumer_create_subject("S", "g") == "$JS.API.CONSUMER.DURABLE.CREATE.S.g"
    assert wire.next_subject("S", "g") == "$JS.API.CONSUMER.MSG.NEXT.S.g"
    assert json.loads(wire.pull_request(32, 500_000_000)) == {"batch": 32, "expires": 500_000_000}
    info = wire.request("$JS.API.CONSUMER.INFO.S.g", "_INBOX.x.api.1")
    assert info == b"PUB $JS.API.CONSUMER.INFO.S.g _INBOX.x.api.1 0\r\n\r\n"
    assert wire.ack("$JS.ACK.S.g.1.2.3.4.5") == b"PUB $JS.ACK.S.g.1.2.3.4.5 4\r\n+ACK\r\n"


def test_a_pull_status_and_its_description() -> None:
    stream = (_hmsg("_INBOX.x.pull.0", 2, "", b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 32\r\n\r\n", b"")
              + _hmsg("_INBOX.x.pull.0", 2, "", b"NATS/1.0 409 Consumer Deleted\r\n\r\n", b"")
              + _hmsg("T.1", 2, "$JS.ACK.T.g.1.5.5.99.0", wire.header_block({"lab-key": "k"}), b"body"))
    timeout, deleted, msg = wire.Parser().feed(stream)
    assert (timeout.status, timeout.text, timeout.headers) == (408, "Request Timeout", {"Nats-Pending-Messages": "32"})
    assert (deleted.status, deleted.text) == (409, "Consumer Deleted")
    assert (msg.status, msg.text, msg.subject, msg.sid, msg.payload) == (0, "", "T.1", 2, b"body")
    assert wire.parse_headers(b"NATS/1.0 409 Consumer Deleted\r\n\r\n") == (409, {})


@pytest.mark.parametrize(("payload", "status", "ok", "code", "err_code"), [
    (b'{"type":"io.nats.jetstream.api.v1.consumer_info_response","name":"g"}', 0, True, 0, 0),
    (b'{"error":{"code":404,"err_code":10014,"description":"consumer not found"}}', 0, False, 404, 10014),
    (b'{"error":{"code":404,"err_code":10059,"description":"stream not found"}}', 0, False, 404, 10059),
    (b"", wire.NO_RESPONDERS, False, 503, 0),
    (b"[1]", 0, False, 0, 0),
])
def test_api_answer(payload: bytes, status: int, ok: bool, code: int, err_code: int) -> None:
    answer = wire.api_answer(wire.Event(wire.Kind.MSG, "_INBOX.x.api.1", 1, "", payload, status))
    assert (answer.ok, answer.code, answer.err_code) == (ok, code, err_code)


def test_the_pull_window_counts_deliveries_against_the_oldest_request() -> None:
    w = wire.PullWindow(depth=2, batch=3, expires_s=0.5, grace_s=2.0)
    assert w.wanted(0.0) == 2
    w.sent(0.0)
    w.sent(0.0)
    assert w.wanted(0.1) == 0
    for _ in range(3):
        w.delivered()  # the first request filled: the server ends it without a status
    assert len(w) == 1 and w.wanted(0.2) == 1
    w.sent(0.2)
    w.delivered()
    w.ended()  # a 408 for the partly filled one
    assert len(w) == 1
    w.ended()
    w.ended()  # a status with nothing outstanding (a request given up earlier): nothing breaks
    w.delivered()
    assert len(w) == 0 and w.wanted(0.3) == 2


def test_the_pull_window_gives_up_a_request_the_server_never_ended() -> None:
    w = wire.PullWindow(depth=2, batch=3, expires_s=0.5, grace_s=2.0)
    w.sent(0.0)
    w.sent(1.0)
    assert w.wanted(2.4) == 0  # within expiry + grace: still the server's
    assert w.wanted(2.6) == 1  # the first given up
    w.clear()
    assert w.wanted(2.6) == 2
