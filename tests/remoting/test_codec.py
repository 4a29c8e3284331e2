"""Remoting codec: encode/decode round trips, exact bytes, stream splitting, limits, malformed frames."""

from __future__ import annotations

import struct
import threading

import pytest

from reference_broker.remoting import codec, command
from reference_broker.remoting.codec import MAX_FRAME_LENGTH, FrameDecoder, ProtocolError
from reference_broker.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from reference_broker.remoting.command import RemotingCommand, create_request, create_response, encode
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # the decoder's pure path and its compiled twin

BOTH = pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ])


def decode_all(data: bytes, decoder: FrameDecoder | None = None) -> list[RemotingCommand]:
    dec = decoder or FrameDecoder()
    dec.feed(data)
    out = []
    while (cmd := dec.next_frame()) is not None:
        out.append(cmd)
    return out


def roundtrip(cmd: RemotingCommand, st: SerializeType) -> RemotingCommand:
    [got] = decode_all(encode(cmd, st))
    return got


def frame(header: bytes, body: bytes = b"", st: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st << 24) | len(header)) + header + body


# ---------------------------------------------------------------- codes


def test_code_numbers() -> None:
    assert RequestCode.SEND_MESSAGE_V2.value == 310
    assert RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT.value == 326
    assert RequestCode.GET_ALL_DELAY_OFFSET.value == 45
    assert ResponseCode.FLOW_CONTROL.value == 215
    assert ResponseCode.TRANSACTION_FAILED.value == 4
    assert ResponseCode.FILTER_DATA_NOT_LATEST.value == 28
    assert [lc.value for lc in LanguageCode] == list(range(13))
    assert (LanguageCode.JAVA.name, LanguageCode.PYTHON.value, LanguageCode.RUST.value) == ("JAVA", 3, 12)
    assert (FLAG_RESPONSE, FLAG_ONEWAY) == (1, 2)
    assert (SerializeType.JSON.value, SerializeType.ROCKETMQ.value) == (0, 1)
    assert len(RequestCode) == 54 and len(ResponseCode) == 34
    assert RequestCode.CHECK_CLIENT_CONFIG.value == 46
    assert RequestCode.RESET_CONSUMER_CLIENT_OFFSET.value == 220
    assert RequestCode.INVOKE_BROKER_TO_RESET_OFFSET.value == 222
    assert RequestCode.GET_KVLIST_BY_NAMESPACE.value == 219
    assert RequestCode.GET_BROKER_RUNTIME_INFO.value == 28


# ---------------------------------------------------------------- command helpers


def test_create_request_and_response() -> None:
    req = create_request(RequestCode.SEND_MESSAGE_V2, {"a": "g"}, b"x")
    assert type(req.code) is int and req.code == 310
    assert not req.is_response and not req.is_oneway and req.flag == 0
    nxt = create_request(RequestCode.HEART_BEAT)
    assert nxt.opaque == req.opaque + 1
    ow = create_request(RequestCode.HEART_BEAT, oneway=True)
    assert ow.is_oneway and not ow.is_response and ow.flag == 2
    resp = create_response(req, ResponseCode.SUCCESS, "ok", {"msgId": "1"}, b"y")
    assert resp.is_response and resp.flag == 1 and resp.opaque == req.opaque
    assert (resp.code, resp.remark, resp.ext_fields, resp.body) == (0, "ok", {"msgId": "1"}, b"y")


def test_opaque_is_unique_across_threads() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        got = [command.next_opaque() for _ in range(2000)]
        with lock:
            seen.extend(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == len(seen) == 8000


def test_language_enum_is_stored_as_name() -> None:
    assert RemotingCommand(code=1, language=LanguageCode.PYTHON).language == "PYTHON"  # type: ignore[arg-type]


# ---------------------------------------------------------------- round trips


@BOTH
@pytest.mark.parametrize(
    "cmd",
    [
        RemotingCommand(code=10, opaque=7),
        RemotingCommand(code=310, opaque=-5, ext_fields={"a": "grp", "b": "Topic"}, body=b"\x00\xffbody"),
        RemotingCommand(code=0, opaque=3, flag=FLAG_RESPONSE, remark="réponse ✓", body=b"r"),
        RemotingCommand(code=34, opaque=2**31 - 1, flag=FLAG_ONEWAY, language="PYTHON", version=395),
        RemotingCommand(code=1, flag=FLAG_RESPONSE, remark="err", ext_fields={"k": ""}),
    ],
)
def test_roundtrip(cmd: RemotingCommand, st: SerializeType) -> None:
    assert roundtrip(cmd, st) == cmd


def test_empty_remark_is_null_in_binary_header() -> None:
    # RocketMQSerializable writes remarkLen 0 for "" and reads 0 back as null.
    assert roundtrip(RemotingCommand(code=1, remark=""), SerializeType.ROCKETMQ).remark is None
    assert roundtrip(RemotingCommand(code=1, remark=""), SerializeType.JSON).remark == ""


def test_encode_rejects_values_the_wire_cannot_hold() -> None:
    with pytest.raises(ValueError):
        encode(RemotingCommand(code=40000), SerializeType.ROCKETMQ)
    with pytest.raises(ValueError):
        encode(RemotingCommand(code=1, opaque=2**31))
    with pytest.raises(ValueError):
        encode(RemotingCommand(code=1, language="KLINGON"), SerializeType.ROCKETMQ)


# ---------------------------------------------------------------- exact bytes


def test_exact_json_frame() -> None:
    cmd = RemotingCommand(code=10, opaque=1, body=b"hi")
    header = b'{"code":10,"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":0}'
    assert len(header) == 94  # counted by hand: 1+10+9+18+11+33+11+1
    expected = b"\x00\x00\x00\x64" + b"\x00\x00\x00\x5e" + header + b"hi"  # 100 = 4 + 94 + 2
    assert encode(cmd) == expected
    assert decode_all(expected) == [cmd]


def test_exact_json_frame_with_remark_and_ext() -> None:
    cmd = RemotingCommand(code=0, opaque=9, flag=1, remark="ok", ext_fields={"a": "1"})
    assert encode(cmd)[8:] == (
        b'{"code":0,"extFields":{"a":"1"},"flag":1,"language":"JAVA","opaque":9,'
        b'"remark":"ok","serializeTypeCurrentRPC":"JSON","version":0}'
    )


def test_exact_binary_frame() -> None:
    cmd = RemotingCommand(code=10, opaque=1, ext_fields={"a": "b"})
    header = (
        b"\x00\x0a"  # code
        b"\x00"  # JAVA
        b"\x00\x00"  # version
        b"\x00\x00\x00\x01"  # opaque
        b"\x00\x00\x00\x00"  # flag
        b"\x00\x00\x00\x00"  # remark length 0 = null
        b"\x00\x00\x00\x08"  # extFields length: 2 + 1 + 4 + 1
        b"\x00\x01a\x00\x00\x00\x01b"
    )
    assert len(header) == 29  # 13 fixed + 4 remark length + 4 ext length + 8 ext entry
    expected = b"\x00\x00\x00\x21" + b"\x01\x00\x00\x1d" + header  # 33 = 4 + 29; type 1, header 29
    assert encode(cmd, SerializeType.ROCKETMQ) == expected
    assert decode_all(expected) == [cmd]


def test_stdlib_json_fallback_matches_orjson() -> None:
    cmd = RemotingCommand(code=0, opaque=9, flag=1, remark="ünï ✓", ext_fields={"a": "1", "ключ": "значение"})
    obj = {"code": 0, "extFields": cmd.ext_fields, "remark": cmd.remark}
    assert command._std_dumps(obj) == command.json_dumps(obj)
    assert command._std_loads(command.json_dumps(obj)) == obj


# ---------------------------------------------------------------- stream splitting


def _stream() -> tuple[list[RemotingCommand], bytes]:
    cmds = [RemotingCommand(code=10 + i, opaque=i, ext_fields={"i": str(i)}, body=bytes(range(i))) for i in range(5)]
    return cmds, b"".join(encode(c, SerializeType(i % 2)) for i, c in enumerate(cmds))


def test_decode_many_in_one_feed() -> None:
    cmds, data = _stream()
    assert decode_all(data) == cmds


def test_decode_byte_at_a_time() -> None:
    cmds, data = _stream()
    dec = FrameDecoder()
    got = []
    for i in range(len(data)):
        dec.feed(data[i : i + 1])
        while (cmd := dec.next_frame()) is not None:
            got.append(cmd)
    assert got == cmds
    assert dec.buffered == 0


def test_trailing_partial_bytes_wait_for_more() -> None:
    cmds, data = _stream()
    extra = encode(RemotingCommand(code=99, body=b"tail"))
    dec = FrameDecoder()
    assert decode_all(data + extra[:-1], dec) == cmds
    assert dec.buffered == len(extra) - 1
    assert dec.next_frame() is None
    assert decode_all(extra[-1:], dec) == [RemotingCommand(code=99, body=b"tail")]


def test_many_small_frames_stay_linear() -> None:
    one = encode(RemotingCommand(code=11, opaque=1))
    dec = FrameDecoder()
    n = 0
    for _ in range(200):
        dec.feed(one * 50 + one[:5])  # every feed leaves a partial frame behind
        while dec.next_frame() is not None:
            n += 1
        dec.feed(one[5:])
    assert decode_all(b"", dec) == [RemotingCommand(code=11, opaque=1)]
    assert n + 1 == 200 * 51
    assert dec.buffered == 0


def test_empty_feed_and_empty_decoder() -> None:
    dec = FrameDecoder()
    dec.feed(b"")
    assert dec.next_frame() is None


# ---------------------------------------------------------------- limits


def test_limit_is_checked_on_the_length_field_alone() -> None:
    # Netty: length + 4 (the stripped prefix) must be <= frameMaxLength.
    dec = FrameDecoder()
    dec.feed(struct.pack(">i", MAX_FRAME_LENGTH - 4))
    assert dec.next_frame() is None
    dec = FrameDecoder()
    dec.feed(struct.pack(">i", MAX_FRAME_LENGTH - 3))
    with pytest.raises(ProtocolError, match="limit"):
        dec.next_frame()


def test_custom_limit() -> None:
    data = encode(RemotingCommand(code=1, body=b"x" * 100))
    assert len(decode_all(data, FrameDecoder(max_frame_length=len(data)))) == 1
    with pytest.raises(ProtocolError):
        decode_all(data, FrameDecoder(max_frame_length=len(data) - 1))


# ---------------------------------------------------------------- malformed


def _json(obj: str) -> bytes:
    return frame(obj.encode())


MALFORMED = {
    "length 0": struct.pack(">i", 0),
    "length 3": struct.pack(">i", 3) + b"abc",
    "negative length": struct.pack(">i", -1),
    "too long": struct.pack(">i", 2**31 - 1),
    "header longer than frame": struct.pack(">ii", 8, 5) + b"{}{}",
    "unknown serialize type": frame(b"{}", st=2),
    "serialize type 0xff": frame(b"{}", st=0xFF),
    "not json": _json("{code:1}"),
    "json array": _json("[1]"),
    "json number": _json("1"),
    "json string": _json('"x"'),
    "empty header": frame(b""),
    "not utf8": frame(b'{"code":1,"remark":"\xff"}'),
    "utf16": frame('{"code":1}'.encode("utf-16")),
    "missing code": _json('{"flag":0}'),
    "code string": _json('{"code":"10"}'),
    "code float": _json('{"code":10.0}'),
    "code bool": _json('{"code":true}'),
    "code too big": _json('{"code":2147483648}'),
    "opaque list": _json('{"code":1,"opaque":[1]}'),
    "language number": _json('{"code":1,"language":0}'),
    "remark object": _json('{"code":1,"remark":{}}'),
    "extFields list": _json('{"code":1,"extFields":["a"]}'),
    "extFields string": _json('{"code":1,"extFields":"a"}'),
    "extFields nested object": _json('{"code":1,"extFields":{"a":{"b":"c"}}}'),
    "extFields nested list": _json('{"code":1,"extFields":{"a":[]}}'),
    "deep nesting": _json("[" * 100_000 + "]" * 100_000),
    "binary truncated fixed": frame(b"\x00\x0a\x00\x00", st=1),
    "binary no ext length": frame(struct.pack(">hbhiii", 10, 0, 0, 1, 0, 0), st=1),
    "binary remark too long": frame(struct.pack(">hbhiii", 10, 0, 0, 1, 0, 50) + b"ab", st=1),
    "binary remark negative": frame(struct.pack(">hbhiii", 10, 0, 0, 1, 0, -1) + b"\0\0\0\0", st=1),
    "binary unknown language": frame(struct.pack(">hbhiiii", 10, 13, 0, 1, 0, 0, 0), st=1),
    "binary ext too long": frame(struct.pack(">hbhiiii", 10, 0, 0, 1, 0, 0, 9) + b"\0\1a\0\0\0\1b", st=1),
    "binary ext key cut": frame(struct.pack(">hbhiiii", 10, 0, 0, 1, 0, 0, 3) + b"\0\5a", st=1),
    "binary ext negative key": frame(struct.pack(">hbhiiii", 10, 0, 0, 1, 0, 0, 2) + b"\xff\xff", st=1),
    "binary ext value cut": frame(struct.pack(">hbhiiii", 10, 0, 0, 1, 0, 0, 7) + b"\0\1a\0\0\0\5", st=1),
    "binary ext bad utf8": frame(struct.pack(">hbhiiii", 10, 0, 0, 1, 0, 0, 8) + b"\0\1a\0\0\0\1\xff", st=1),
    "binary stray bytes": frame(struct.pack(">hbhiiii", 10, 0, 0, 1, 0, 0, 0) + b"zz", st=1),
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_raises_protocol_error_and_poisons(data: bytes) -> None:
    dec = FrameDecoder()
    good = encode(RemotingCommand(code=1))
    dec.feed(good + data + good)
    assert dec.next_frame() == RemotingCommand(code=1)
    with pytest.raises(ProtocolError):
        dec.next_frame()
    dec.feed(good)
    with pytest.raises(ProtocolError):  # poisoned: the stream has lost its framing
        dec.next_frame()


def test_json_lenient_like_fastjson() -> None:
    data = _json(
        '{"code":10,"extFields":{"n":5,"t":true,"f":1.5,"z":null,"s":"x"},"remark":null,'
        '"language":null,"unknown":[1,{"a":2}],"serializeTypeCurrentRPC":"WHATEVER"}'
    )
    [cmd] = decode_all(data)
    assert cmd == RemotingCommand(code=10, ext_fields={"n": "5", "t": "true", "f": "1.5", "s": "x"})


def test_unknown_language_name_survives_json() -> None:
    cmd = RemotingCommand(code=1, language="NODE_JS")
    assert roundtrip(cmd, SerializeType.JSON) == cmd


def test_codec_module_exports() -> None:
    assert codec.ProtocolError is ProtocolError
    assert issubclass(ProtocolError, Exception) and not issubclass(ProtocolError, ValueError)
