"""The compiled twins (common/compiled.py) against the pure-Python reference: byte-identical output and the
same exception type for the same input, random and hostile input included (hypothesis), the
``RMQ_PURE_PYTHON`` switch, and a real broker process on each path (its runtime info says which)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.launcher import Topology
from reference_broker.common import compiled
from reference_broker.common import java_hash as jh
from reference_broker.common import message as mc
from reference_broker.common import message_batch as mb
from reference_broker.common import record as rec
from reference_broker.remoting import codec
from reference_broker.remoting.client import RemotingClient
from reference_broker.remoting.codec import ProtocolError
from reference_broker.remoting.codes import RequestCode, ResponseCode, SerializeType
from reference_broker.remoting.command import RemotingCommand, create_request, encode
from reference_broker.remoting.headers import send_v1_to_v2
from reference_broker.store.index_format import HEADER_SIZE, INT_MIN, link_run, run_slots
from reference_broker.tools import admin
from tests.broker.broker_helpers import pull_request, send_request
from tests.compiled_paths import NOT_BUILT, broker_path, compiled_module  # noqa: F401 - broker_path: fixture

BUILT = all(compiled.compiled_available(m) for m in compiled.MODULES)


def outcome(fn, *args):
    """What a call gives: ("ok", value) or ("raised", exception type)."""
    try:
        return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception's type is what is compared
        return "raised", type(e)


# ---- record encoder -----------------------------------------------------------------------------------

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
ANY_INT = st.one_of(I32, I64, st.integers(-(2**70), 2**70), st.booleans())
IP = st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16), st.binary(max_size=20))


@st.composite
def record_args(draw, hostile: bool):
    ints = ANY_INT if hostile else I32
    longs = ANY_INT if hostile else I64
    props = draw(st.binary(max_size=300))
    if draw(st.booleans()):
        props = rec.reserve_prop_crc(props)
    return (draw(st.binary(min_size=0, max_size=300 if hostile else 127)), draw(st.binary(max_size=2000)), props,
            draw(ints), draw(ints), draw(ints), draw(longs),
            draw(IP if hostile else st.sampled_from([bytes(4), bytes(range(16))])), draw(ints),
            draw(IP if hostile else st.sampled_from([b"\x7f\x00\x00\x01", bytes(range(1, 17))])), draw(ints),
            draw(ints), draw(longs), draw(st.one_of(st.just(-1), st.integers(0, 2**31 - 1))))


def _write_both(args, at_delta, lock_fields, prop_crc):
    c = compiled_module("_record_c")
    prepared = outcome(rec.prepare_record, *args)
    if prepared[0] != "ok":
        return
    r = prepared[1]
    size = r.size + max(0, at_delta) + 8
    for make in (bytearray, lambda n: memoryview(bytearray(n))):
        out_p, out_c = make(size), make(size)
        at = at_delta if at_delta < 0 else 8
        got_p = outcome(rec.pure_write_record, out_p, at, r, *lock_fields, prop_crc)
        got_c = outcome(c.write_record, out_c, at, r, *lock_fields, prop_crc)
        assert got_p == got_c
        assert bytes(out_p) == bytes(out_c)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_args(hostile=False), I64, I64, I64, st.booleans())
def test_encoder_writes_the_same_bytes(args, qoff, phys, store_ts, prop_crc):
    _write_both(args, 0, (qoff, phys, store_ts), prop_crc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_args(hostile=True), st.integers(-4000, 100), ANY_INT, ANY_INT, ANY_INT, st.booleans())
def test_encoder_on_hostile_fields_raises_as_the_reference(args, at, qoff, phys, store_ts, prop_crc):
    _write_both(args, at, (qoff, phys, store_ts), prop_crc)


def test_encoder_written_record_decodes_and_its_crc_verifies():
    c = compiled_module("_record_c")
    props = rec.reserve_prop_crc(mc.properties_to_bytes({"TAGS": "t", "KEYS": "k"}))
    r = rec.prepare_record(b"T", b"body", props, 3, 0, 0, 5, bytes(4), 1, b"\x7f\x00\x00\x01", 2)
    out = bytearray(r.size)
    assert c.write_record(out, 0, r, 7, 0, 9, True) == r.size
    m = rec.decode_message(out, check_crc=True, verify_prop_crc=True)
    assert (m.body, m.queue_id, m.queue_offset, m.store_timestamp, m.tags) == (b"body", 3, 7, 9, "t")


def test_encoder_refuses_what_the_reference_refuses():
    c = compiled_module("_record_c")
    r = rec.prepare_record(b"T", b"b", b"", 0, 0, 0, 0, bytes(4), 0, bytes(4), 0)
    for args in [(bytearray(10), 0, r, 0, 0, 0, False),  # no room
                 (bytes(r.size), 0, r, 0, 0, 0, False),  # read-only
                 (bytearray(r.size), 0, r, 2**63, 0, 0, False),  # queue offset past a long
                 (bytearray(r.size), 0, r._replace(queue_id=2**31), 0, 0, 0, False),  # queue id past an int
                 (bytearray(r.size), 0, r._replace(body="b"), 0, 0, 0, False)]:  # not bytes
        want = outcome(rec.pure_write_record, *args)
        assert want[0] == "raised"
        assert outcome(c.write_record, *args) == want


# ---- properties -----------------------------------------------------------------------------------------

PROPS_TEXT = st.text(alphabet=st.sampled_from(["\x01", "\x02", "a", "K", "é", "\ud800", "\U0001f600", " "]),
                     max_size=60)


@settings(max_examples=500, deadline=None)
@given(PROPS_TEXT)
def test_string_to_properties_equals_the_reference(text):
    assert compiled_module("_message_c").string_to_properties(text) == mc.pure_string_to_properties(text)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=80),
                 st.lists(st.sampled_from([b"\x01", b"\x02", b"K", b"v", b"\xc3", b"\xa9", b"\xff", b"\xe2\x82"]),
                          max_size=40).map(b"".join)))
def test_bytes_to_properties_equals_the_reference(raw):
    c = compiled_module("_message_c")
    assert c.bytes_to_properties(raw) == mc.pure_bytes_to_properties(raw)
    assert c.bytes_to_properties(memoryview(raw)) == mc.pure_bytes_to_properties(memoryview(raw))
    assert c.bytes_to_properties(bytearray(raw)) == mc.pure_bytes_to_properties(bytearray(raw))


def test_properties_of_other_types_fail_as_the_reference():
    c = compiled_module("_message_c")
    for bad in (None, 5, b"KEYS\x01k"):
        assert outcome(c.string_to_properties, bad) == outcome(mc.pure_string_to_properties, bad)
    assert outcome(c.bytes_to_properties, 5) == outcome(mc.pure_bytes_to_properties, 5)


# ---- batch body ------------------------------------------------------------------------------------------

ENTRY = st.builds(mb.BatchEntry, st.integers(-(2**31), 2**31 - 1), st.binary(max_size=200),
                  st.dictionaries(st.text("ab\x01", min_size=1, max_size=4), st.text("xy", min_size=1, max_size=4),
                                  max_size=3))


def _decode_both(data):
    c = compiled_module("_message_batch_c")
    want = outcome(mb.pure_decode_batch_entries, data)
    assert outcome(c.decode_batch_entries, data) == want
    return want


@settings(max_examples=300, deadline=None)
@given(st.lists(ENTRY, min_size=1, max_size=6), st.booleans())
def test_batch_decoder_equals_the_reference(entries, zero_crc):
    data = bytearray(mb.encode_batch(entries))
    if zero_crc:  # an entry may carry no BODYCRC (0): decoded as -1
        struct.pack_into(">i", data, 8, 0)
    got = _decode_both(bytes(data))
    assert got[0] == "ok" and len(got[1]) == len(entries)
    _decode_both(memoryview(data))


@settings(max_examples=500, deadline=None)
@given(st.lists(ENTRY, min_size=0, max_size=4), st.data())
def test_batch_decoder_on_damaged_bytes_raises_as_the_reference(entries, data):
    raw = bytearray(mb.encode_batch(entries))
    for _ in range(data.draw(st.integers(0, 4))):
        if not raw:
            break
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    got = _decode_both(bytes(raw[:cut]))
    assume(got[0] == "raised")
    assert got[1] is mb.BatchDecodeError


def test_batch_decoder_errors_carry_the_reference_text():
    c = compiled_module("_message_batch_c")
    good = mb.encode_batch([mb.BatchEntry(0, b"body", {"k": "v"})])
    for data in (b"", good[:10], good[:-1], good[:8] + b"\x00\x00\x00\x01" + good[12:], b"\xff" * 30):
        with pytest.raises(mb.BatchDecodeError) as want:
            mb.pure_decode_batch_entries(data)
        with pytest.raises(mb.BatchDecodeError) as got:
            c.decode_batch_entries(data)
        assert str(got.value) == str(want.value)
    for bad in (None, "text", memoryview(good).cast("i", [len(good) // 4]) if len(good) % 4 == 0 else None):
        assert outcome(c.decode_batch_entries, bad) == outcome(mb.pure_decode_batch_entries, bad)


# ---- the switch ------------------------------------------------------------------------------------------

def _runtime_info(env: dict[str, str]) -> str:
    code = ("from reference_broker.common import compiled, record, message, message_batch; "
            "print(compiled.runtime_info()['path'], record.write_record is record.pure_write_record)")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout.split()


@pytest.mark.skipif(not BUILT, reason=NOT_BUILT)
def test_rmq_pure_python_forces_the_pure_path():
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV_PURE}
    assert _runtime_info(env) == ["compiled", "False"]
    assert _runtime_info({**env, compiled.ENV_PURE: "1"}) == ["pure", "True"]


# ---- record scan (dispatch, recovery) ---------------------------------------------------------------------

PROPS_MAP = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "xTAGS", "a"]),
                            st.text(st.sampled_from("ab1é\x02"), max_size=5), max_size=4)


@st.composite
def record_run(draw):
    """A run of records as the store writes them (random shapes: IPv6 hosts, the schedule topic, with or
    without the whole-record CRC), then damaged at random, and a random window to scan."""
    out = bytearray()
    delay_table = draw(st.sampled_from([None, {1: 1000, 2: 5000}]))
    for i in range(draw(st.integers(0, 6))):
        props = mc.properties_to_bytes(draw(PROPS_MAP))
        crc_on = draw(st.booleans())
        if crc_on:
            props = rec.reserve_prop_crc(props)
        topic = draw(st.sampled_from([b"T", mc.SCHEDULE_TOPIC.encode(), "é".encode(), b"\xff"]))
        born = draw(st.sampled_from([bytes(4), bytes(range(16))]))
        store = draw(st.sampled_from([b"\x7f\x00\x00\x01", bytes(range(1, 17))]))
        r = rec.prepare_record(topic, draw(st.binary(max_size=50)), props, draw(st.integers(0, 7)), 0,
                                    draw(st.integers(0, 3)), 5, born, 1, store, 2)
        at = len(out)
        out += bytes(r.size)
        rec.pure_write_record(out, at, r, i, at, 1000 + i, crc_on)
    if draw(st.booleans()):
        out += rec.BLANK.pack(64, rec.BLANK_MAGIC_CODE) + bytes(56)
    for _ in range(draw(st.sampled_from([0, 0, 1, 3]))):
        if out:
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    pos = draw(st.integers(0, len(out))) if draw(st.integers(0, 3)) == 0 else 0
    limit = draw(st.integers(0, len(out) + 40)) if draw(st.integers(0, 2)) == 0 else len(out)
    return (bytes(out), pos, limit, draw(st.booleans()), delay_table, draw(st.sampled_from([1 << 30, 1, 3])),
            draw(st.booleans()))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_run())
def test_scan_records_equals_the_reference(run):
    raw, pos, limit, check_crc, delay_table, max_records, verify = run
    c = compiled_module("_record_c")
    for buf in (raw, memoryview(raw), memoryview(bytearray(raw))):
        want = outcome(rec.pure_scan_records, buf, pos, limit, check_crc, delay_table, max_records, verify)
        assert outcome(c.scan_records, buf, pos, limit, check_crc, delay_table, max_records, verify) == want


def test_scan_records_on_other_arguments_fails_as_the_reference():
    c = compiled_module("_record_c")
    for args in [(None, 0, 10, False), (b"x" * 100, "0", 10, False), (b"x" * 100, -5, 10, False),
                 (b"\x00" * 100, 0, 2**70, True)]:
        assert outcome(c.scan_records, *args) == outcome(rec.pure_scan_records, *args)


# ---- the index: key hashes and entry linking (dispatch) -----------------------------------------------------

ANY_CHAR = st.characters(blacklist_categories=())  # lone surrogates included: the reference refuses them


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.lists(st.text(ANY_CHAR, max_size=40), max_size=40),
                 st.lists(st.text(st.sampled_from("0123456789ABCDEF#T"), min_size=34, max_size=34), max_size=40),
                 st.tuples(st.text(max_size=5)), st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=3)))
def test_index_hash_codes_equal_the_reference(strings):
    c = compiled_module("_index_c")
    assert outcome(c.hash_codes, strings) == outcome(jh.pure_hash_codes, strings)


def _index_buffer(slots: int, num: int, garbage: dict[int, int]) -> bytearray:
    buf = bytearray(HEADER_SIZE + slots * 4 + num * 20)
    for slot, value in garbage.items():
        struct.pack_into(">i", buf, HEADER_SIZE + slot * 4, value)
    return buf


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8), st.integers(1, 30), st.data())
def test_index_link_write_equals_the_numpy_reference(slots, first, data):
    """The twin leaves the bytes ``link_run`` (the reference) leaves, and the same count of new slots; on input
    outside its shape it declines (-1) before writing a byte."""
    c = compiled_module("_index_c")
    m = data.draw(st.integers(1, 40))
    num = first + m + data.draw(st.integers(0, 3))
    codes = data.draw(st.lists(st.one_of(I32, st.sampled_from([INT_MIN, -1, 0])), min_size=m, max_size=m))
    common = st.integers(0, 2**62)
    phys = data.draw(st.lists(st.one_of(common, I64) if data.draw(st.booleans()) else common, min_size=m,
                              max_size=m))
    stamps = data.draw(st.lists(st.one_of(common, st.integers(-5, 5)) if data.draw(st.booleans()) else common,
                                min_size=m, max_size=m))
    begin = data.draw(st.one_of(st.just(0), st.integers(-5, 2**62)))
    garbage = data.draw(st.dictionaries(st.integers(0, slots - 1), st.one_of(I32, st.integers(-2, 70)),
                                        max_size=slots))
    entries_at = HEADER_SIZE + slots * 4
    compiled_buf, reference_buf = _index_buffer(slots, num, garbage), _index_buffer(slots, num, garbage)
    new_slots = c.link_write(compiled_buf, HEADER_SIZE, slots, entries_at, first, codes, phys, stamps, 0, m, begin)
    if new_slots < 0:
        assert compiled_buf == reference_buf, "declined, yet wrote"
        assert any(not 0 <= v <= 2**62 for v in phys + stamps) or begin > 2**62
        return
    table = np.frombuffer(reference_buf, dtype=">i4", count=slots, offset=HEADER_SIZE)
    where = run_slots(codes, slots)
    run = link_run(where, table[where.slots], first, phys, stamps, begin)
    start = entries_at + first * 20
    reference_buf[start:start + m * 20] = run.entries
    table[run.slots] = run.heads
    del table
    assert compiled_buf == reference_buf
    assert new_slots == run.new_slots


def test_index_link_write_declines_what_is_not_its_shape():
    c = compiled_module("_index_c")
    buf = _index_buffer(4, 10, {})
    ok = ([1, 2], [10, 20], [1000, 2000])
    assert c.link_write(buf, HEADER_SIZE, 4, HEADER_SIZE + 16, 1, *ok, 0, 2, 0) >= 0
    for codes, phys, stamps in [((1, 2), [10, 20], [1000, 2000]), ([1, 2**31], [10, 20], [1000, 2000]),
                                ([1, 2], [10, -1], [1000, 2000]), ([1, 2], [10, 20], [1000, "x"]),
                                ([1, 2], [10, 20], [1000])]:
        before = bytes(buf)
        assert c.link_write(buf, HEADER_SIZE, 4, HEADER_SIZE + 16, 3, codes, phys, stamps, 0, 2, 0) == -1
        assert bytes(buf) == before
    assert c.link_write(bytes(len(buf)), HEADER_SIZE, 4, HEADER_SIZE + 16, 1, *ok, 0, 2, 0) == -1  # read-only
    assert c.link_write(buf, HEADER_SIZE, 4, HEADER_SIZE + 16, 9, *ok, 0, 2, 0) == -1  # past the buffer's end


# ---- a real broker on each path ----------------------------------------------------------------------------

@pytest.mark.e2e
def test_a_broker_on_each_path_stores_the_same_and_survives_bad_batches(tmp_path, broker_path):  # noqa: F811
    """A real broker process says which path it runs (GET_BROKER_RUNTIME_INFO's putPathImpl), refuses damaged
    batch bodies with MESSAGE_ILLEGAL and serves on, and stores singles and batches that read back as sent."""
    fields = {"producerGroup": "pg", "topic": "PATHS", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
              "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "properties": "",
              "reconsumeTimes": "0", "unitMode": "false", "batch": "true"}
    entries = [mb.BatchEntry(0, f"b{i}".encode(), {"TAGS": f"t{i}", "KEYS": "k é"}) for i in range(3)]
    good = mb.encode_batch(entries)
    with Topology(tmp_path / "topo") as topo, RemotingClient("127.0.0.1", topo.brokers[0].port, timeout_s=10) as c:
        assert admin.broker_status(topo.brokers[0].addr)["putPathImpl"].startswith(f"path={broker_path} ")
        for bad in (good[:-1], good[:8] + b"\x00\x00\x00\x07" + good[12:], b"\xff" * 64, b""):
            r = c.invoke(create_request(RequestCode.SEND_BATCH_MESSAGE, send_v1_to_v2(fields), bad))
            assert r.code == ResponseCode.MESSAGE_ILLEGAL, (bad, r.code, r.remark)
        r = c.invoke(create_request(RequestCode.SEND_BATCH_MESSAGE, send_v1_to_v2(fields), good))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert c.invoke(send_request("PATHS", b"single", props={"TAGS": "s"})).code == ResponseCode.SUCCESS
        msgs = []
        deadline = time.monotonic() + 10
        while len(msgs) < 4 and time.monotonic() < deadline:
            r = c.invoke(pull_request("PATHS", 0, 0, max_nums=32))
            msgs = rec.decode_messages(r.body) if r.code == ResponseCode.SUCCESS else []
            time.sleep(0.05)
    assert [(m.body, m.tags, m.queue_offset) for m in msgs] == [(b"b0", "t0", 0), (b"b1", "t1", 1),
                                                                  (b"b2", "t2", 2), (b"single", "s", 3)]
    assert all(m.keys == "k é" for m in msgs[:3])


# ---- frame decoder (remoting/codec.py's common case) ----------------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), I32, st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
                         st.text(ANY_CHAR.filter(lambda c: not 0xD800 <= ord(c) <= 0xDFFF), max_size=8))
HEADER_FIELDS = {
    "code": st.one_of(I32, JSON_SCALARS), "version": st.one_of(I32, JSON_SCALARS),
    "opaque": st.one_of(I32, JSON_SCALARS), "flag": st.one_of(I32, JSON_SCALARS),
    "language": st.one_of(st.sampled_from(["JAVA", "CPP", "PYTHON"]), JSON_SCALARS),
    "remark": st.one_of(st.text(max_size=10), JSON_SCALARS),
    "extFields": st.one_of(st.dictionaries(st.text(max_size=4), st.text(max_size=6), max_size=4),
                           st.dictionaries(st.text(max_size=4), JSON_SCALARS, max_size=3), JSON_SCALARS,
                           st.lists(JSON_SCALARS, max_size=2)),
}


@st.composite
def frame_streams(draw):
    """Frames whose JSON header has each field present or not, of the expected type or another; some
    whole-stream damage (a changed byte, a cut) and a binary or unknown serialize type now and then."""
    out = bytearray()
    for _ in range(draw(st.integers(1, 4))):
        fields = {k: draw(v) for k, v in HEADER_FIELDS.items() if draw(st.booleans()) or k == "code"}
        header = json.dumps(fields).encode() if draw(st.integers(0, 9)) else draw(st.binary(max_size=30))
        body = draw(st.binary(max_size=40))
        st_byte = draw(st.sampled_from([0, 0, 0, 1, 7]))
        out += struct.pack(">ii", 4 + len(header) + len(body), st_byte << 24 | len(header)) + header + body
    if draw(st.integers(0, 3)) == 0:
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    if draw(st.integers(0, 3)) == 0:
        del out[draw(st.integers(0, len(out))):]
    return bytes(out)


def _decoded(twin, data: bytes, cuts: list[int]) -> list[object]:
    """Each command's fields (every slot, the derived ones included), or the error's type and text, in the
    order the decoder gives them while ``data`` arrives in pieces, with ``twin`` bound (None: the pure path);
    then what it still buffers."""
    saved = codec._compiled, codec._FALLBACK
    codec._compiled = twin
    codec._FALLBACK = twin.FALLBACK if twin is not None else None
    try:
        dec = codec.FrameDecoder()
        got: list[object] = []
        prev = 0
        for cut in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
            dec.feed(data[prev:cut])
            prev = cut
            while True:
                try:
                    cmd = dec.next_frame()
                except ProtocolError as exc:
                    got.append(("raised", str(exc)))
                    break
                if cmd is None:
                    break
                got.append(tuple((name, getattr(cmd, name)) for name in RemotingCommand.__slots__))
        return [*got, dec.buffered]
    finally:
        codec._compiled, codec._FALLBACK = saved


@settings(max_examples=600, deadline=None)
@given(frame_streams(), st.lists(st.integers(0, 400), max_size=4))
def test_frame_decoder_twin_equals_the_pure_path(data, cuts):
    """The same commands (every field, its type included: an int stays an int, the JSON serialize type is the
    enum) and the same errors, word for word, from the twin as from the pure decoder, on frames with every
    header shape and some damage, fed in pieces."""
    assert _decoded(compiled_module("_frame_c"), data, cuts) == _decoded(None, data, cuts)


def test_frame_decoder_twin_takes_the_common_frame_and_declines_the_rest():
    """The twin itself (not through the decoder): a send request becomes its command with ints as ints and
    the decoder's position past it; a binary header, a too-long length and a non-string ext value are
    handed back untouched, and so is a frame not all there (the pure path's length checks come first); a
    short length prefix is "not yet"."""
    c = compiled_module("_frame_c")
    req = encode(create_request(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T"}, b"body"))
    dec = codec.FrameDecoder()
    dec.feed(req + req[:3])
    cmd = c.next_frame(dec, codec.MAX_FRAME_LENGTH)
    assert (cmd.code, cmd.ext_fields, cmd.body, cmd.serialize_type) == (
        RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "T"}, b"body", SerializeType.JSON)
    assert type(cmd.code) is int and dec.buffered == 3
    assert c.next_frame(dec, codec.MAX_FRAME_LENGTH) is None  # 3 of the next length's 4 bytes
    ext_int = b'{"code":1,"extFields":{"a":1}}'
    for bad in (encode(create_request(RequestCode.SEND_MESSAGE_V2, {"a": "g"}), SerializeType.ROCKETMQ),
                struct.pack(">ii", 1 << 30, 0), req[:-1],
                struct.pack(">ii", 4 + len(ext_int), len(ext_int)) + ext_int):
        dec = codec.FrameDecoder()
        dec.feed(bad)
        assert c.next_frame(dec, codec.MAX_FRAME_LENGTH) is c.FALLBACK and dec.buffered == len(bad)
