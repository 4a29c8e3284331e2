"""Property and fuzz tests for the remoting codec: round trips hold, and bad bytes only ever raise ProtocolError."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.remoting.codec import FrameDecoder, ProtocolError
from reference_broker.remoting.codes import LanguageCode, SerializeType
from reference_broker.remoting.command import RemotingCommand, encode
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # the decoder's pure path and its compiled twin

INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
LANGS = st.sampled_from([lc.name for lc in LanguageCode])
EXT = st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=5)


@st.composite
def commands(draw: st.DrawFn, st_type: SerializeType) -> RemotingCommand:
    binary = st_type == SerializeType.ROCKETMQ
    small = INT16 if binary else INT32
    # The binary header cannot tell "" from null (remarkLen 0), so only non-empty remarks round-trip there.
    remark = st.none() | st.text(min_size=1 if binary else 0, max_size=40)
    return RemotingCommand(
        code=draw(small),
        language=draw(LANGS),
        version=draw(small),
        opaque=draw(INT32),
        flag=draw(st.sampled_from([0, 1, 2, 3]) | INT32),
        remark=draw(remark),
        ext_fields=draw(EXT),
        body=draw(st.binary(max_size=200)),
    )


any_command = st.sampled_from(list(SerializeType)).flatmap(lambda t: st.tuples(st.just(t), commands(t)))


def drain(dec: FrameDecoder) -> list[RemotingCommand]:
    out = []
    while (cmd := dec.next_frame()) is not None:
        out.append(cmd)
    return out


def feed_in_chunks(data: bytes, cuts: list[int]) -> tuple[list[RemotingCommand], FrameDecoder]:
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    prev = 0
    for cut in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
        dec.feed(data[prev:cut])
        got += drain(dec)
        prev = cut
    return got, dec


@settings(max_examples=300, deadline=None)
@given(st.lists(any_command, min_size=1, max_size=6), st.lists(st.integers(0, 3000), max_size=8))
def test_roundtrip_stream(items: list[tuple[SerializeType, RemotingCommand]], cuts: list[int]) -> None:
    data = b"".join(encode(cmd, t) for t, cmd in items)
    got, dec = feed_in_chunks(data, cuts)
    assert got == [cmd for _, cmd in items]
    assert dec.buffered == 0


def _only_protocol_errors(data: bytes, cuts: list[int]) -> None:
    try:
        got, _ = feed_in_chunks(data, cuts)
    except ProtocolError:
        return
    for cmd in got:
        assert isinstance(cmd, RemotingCommand)
        assert isinstance(cmd.code, int) and isinstance(cmd.language, str) and isinstance(cmd.body, bytes)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in cmd.ext_fields.items())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=4))
def test_fuzz_random_bytes(data: bytes, cuts: list[int]) -> None:
    _only_protocol_errors(data, cuts)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 255), st.integers(0, 300))
def test_fuzz_random_header_with_valid_prefix(header: bytes, st_byte: int, body_len: int) -> None:
    _only_protocol_errors(struct.pack(">iI", 4 + len(header) + body_len, st_byte << 24 | len(header)) + header, [])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
KEYS = st.sampled_from(["code", "language", "version", "opaque", "flag", "remark", "extFields", "other"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, JSON_VALUES, max_size=8) | JSON_VALUES)
def test_fuzz_json_header_shapes(obj: object) -> None:
    header = json.dumps(obj).encode()
    _only_protocol_errors(struct.pack(">ii", 4 + len(header), len(header)) + header, [])


MUTATION = st.tuples(st.sampled_from(["set", "insert", "delete"]), st.integers(0, 10_000), st.integers(0, 255))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(any_command, min_size=1, max_size=3),
    st.lists(MUTATION, min_size=1, max_size=4),
    st.none() | st.integers(0, 10_000),
    st.lists(st.integers(0, 3000), max_size=4),
)
def test_fuzz_mutated_frames(
    items: list[tuple[SerializeType, RemotingCommand]],
    mutations: list[tuple[str, int, int]],
    truncate_at: int | None,
    cuts: list[int],
) -> None:
    data = bytearray(b"".join(encode(cmd, t) for t, cmd in items))
    for op, index, value in mutations:
        i = index % (len(data) + 1)
        if op == "insert":
            data.insert(i, value)
        elif i < len(data):
            if op == "set":
                data[i] = value
            else:
                del data[i]
    if truncate_at is not None:
        del data[truncate_at % (len(data) + 1) :]
    _only_protocol_errors(bytes(data), cuts)
