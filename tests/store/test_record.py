"""record: the commit-log record codec, checkMessageAndReturnSize and offsetMsgId."""

from __future__ import annotations

import struct
import zlib

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.record import MessageExtBrokerInner, MessageIdError
from reference_broker.store.config import MessageStoreConfig
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # pure and compiled (tests/compiled_paths.py)

STORE_HOST = ("10.0.0.2", 10911)
STORE_TS = 1_700_000_000_123


def make_msg(**kw: object) -> MessageExtBrokerInner:
    base: dict[str, object] = dict(
        topic="TopicTest", body=b"Hello RocketMQ", queue_id=3, flag=7,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F00000100002A9F0000000000000001"},
        sys_flag=0, born_timestamp=1_700_000_000_000, born_host=("192.168.1.5", 54321), reconsume_times=2,
        prepared_transaction_offset=99,
    )
    base.update(kw)
    return MessageExtBrokerInner(**base)  # type: ignore[arg-type]


def encode(msg: MessageExtBrokerInner, *, queue_offset: int = 42, phys: int = 4096, store_ts: int = STORE_TS,
           store_host: tuple[str, int] = STORE_HOST, pad: int = 0) -> bytes:
    topic_b = msg.topic.encode()
    props_b = msg.encoded_properties()
    born_ip = rec.host_bytes(msg.born_host[0])
    store_ip = rec.host_bytes(store_host[0])
    total = rec.record_length(len(msg.body), len(topic_b), len(props_b), len(born_ip) == 16, len(store_ip) == 16)
    buf = bytearray(pad + total)
    r = rec.prepare_record(topic_b, msg.body, props_b, msg.queue_id, msg.flag, msg.sys_flag, msg.born_timestamp,
                           born_ip, msg.born_host[1], store_ip, store_host[1], msg.reconsume_times,
                           msg.prepared_transaction_offset)
    assert rec.write_record(buf, pad, r, queue_offset, phys, store_ts, False) == total
    return bytes(buf)


def test_every_field_round_trips() -> None:
    msg = make_msg()
    raw = encode(msg)
    m = rec.decode_message(raw, check_crc=True)
    assert (m.topic, m.body, m.queue_id, m.flag) == ("TopicTest", b"Hello RocketMQ", 3, 7)
    assert (m.queue_offset, m.commit_log_offset, m.sys_flag) == (42, 4096, 0)
    assert (m.born_timestamp, m.born_host) == (1_700_000_000_000, ("192.168.1.5", 54321))
    assert (m.store_timestamp, m.store_host) == (STORE_TS, STORE_HOST)
    assert (m.reconsume_times, m.prepared_transaction_offset) == (2, 99)
    assert m.properties == msg.properties
    assert m.store_size == len(raw) == struct.unpack_from(">i", raw, 0)[0]
    assert m.body_crc == rec.crc32(b"Hello RocketMQ")
    assert m.tags == "TagA" and m.keys == "k1 k2"
    assert m.msg_id == "7F00000100002A9F0000000000000001"
    assert m.offset_msg_id == rec.create_message_id(rec.host_bytes("10.0.0.2"), 10911, 4096)


def test_fixed_layout_offsets() -> None:
    raw = encode(make_msg(body=b"B" * 5))
    assert struct.unpack_from(">i", raw, 4)[0] == rec.MESSAGE_MAGIC_CODE
    assert struct.unpack_from(">I", raw, 4)[0] == 0xDAA320A7
    assert struct.unpack_from(">q", raw, 20)[0] == 42  # QUEUEOFFSET
    assert struct.unpack_from(">q", raw, 28)[0] == 4096  # PHYSICALOFFSET
    assert struct.unpack_from(">q", raw, 56)[0] == STORE_TS
    assert struct.unpack_from(">i", raw, 84)[0] == 5  # body length (DefaultMessageStoreTest.damageCommitlog)
    assert raw[88:93] == b"BBBBB" and raw[93] == len("TopicTest")


def test_empty_ipv4_record_is_91_bytes() -> None:
    assert rec.record_length(0, 0, 0) == 91
    raw = encode(make_msg(topic="", body=b"", properties={}))
    assert len(raw) == 91
    m = rec.decode_message(raw)
    assert (m.topic, m.body, m.properties, m.store_size) == ("", b"", {}, 91)


@pytest.mark.parametrize(
    ("born", "store", "extra", "flags"),
    [
        ("::1", "10.0.0.2", 12, mc.BORNHOST_V6_FLAG),
        ("10.0.0.1", "fe80::1", 12, mc.STOREHOSTADDRESS_V6_FLAG),
        ("2001:db8::5", "2001:db8::6", 24, mc.BORNHOST_V6_FLAG | mc.STOREHOSTADDRESS_V6_FLAG),
    ],
)
def test_ipv6_hosts_add_12_bytes_each_and_set_sysflag(born: str, store: str, extra: int, flags: int) -> None:
    msg = make_msg(topic="", body=b"", properties={}, born_host=(born, 1), sys_flag=mc.MULTI_TAGS_FLAG)
    raw = encode(msg, store_host=(store, 2))
    assert len(raw) == 91 + extra == rec.record_length(0, 0, 0, ":" in born, ":" in store)
    assert struct.unpack_from(">i", raw, rec.SYSFLAG_POS)[0] == flags | mc.MULTI_TAGS_FLAG
    m = rec.decode_message(raw)
    assert m.born_host == (born, 1) and m.store_host == (store, 2)
    assert m.store_timestamp == STORE_TS == rec.store_timestamp_at(raw, 0)


def test_body_crc_is_masked_to_31_bits() -> None:
    assert rec.crc32(b"hello") == zlib.crc32(b"hello") & 0x7FFFFFFF
    high = next(b for b in (str(i).encode() for i in range(100)) if zlib.crc32(b) >= 1 << 31)
    assert rec.crc32(high) == zlib.crc32(high) - (1 << 31)
    raw = encode(make_msg(body=high))
    assert struct.unpack_from(">i", raw, 8)[0] == rec.crc32(high)


# ---- checkMessageAndReturnSize ---------------------------------------------------------------

def check(raw: bytes | bytearray, check_crc: bool = True, limit: int | None = None, pos: int = 0,
          delay: dict[int, int] | None = None) -> DispatchRequest:
    return rec.check_message_and_return_size(bytes(raw), pos, len(raw) if limit is None else limit, check_crc, delay)


def test_check_returns_dispatch_request_fields() -> None:
    raw = encode(make_msg(sys_flag=mc.TRANSACTION_COMMIT_TYPE), pad=10)
    req = check(raw, pos=10)
    assert req.success and req.msg_size == len(raw) - 10
    assert (req.topic, req.queue_id, req.commit_log_offset, req.consume_queue_offset) == ("TopicTest", 3, 4096, 42)
    assert req.store_timestamp == STORE_TS and req.born_timestamp == 1_700_000_000_000
    assert req.tags_code == string_hash_code("TagA")
    assert req.keys == "k1 k2" and req.uniq_key == "7F00000100002A9F0000000000000001"
    assert req.sys_flag == mc.TRANSACTION_COMMIT_TYPE and req.prepared_transaction_offset == 99


def test_check_without_tags_has_tags_code_zero() -> None:
    req = check(encode(make_msg(properties={"KEYS": "only"})))
    assert req.success and req.tags_code == 0 and req.keys == "only" and req.uniq_key is None


def test_check_blank_record_returns_size_zero() -> None:
    buf = bytearray(64)
    rec.write_blank(memoryview(buf), 0, 64)
    assert struct.unpack_from(">I", buf, 4)[0] == 0xCBD43194
    req = check(buf)
    assert req.success and req.msg_size == 0
    with pytest.raises(rec.RecordError):
        rec.decode_message(bytes(buf))


def damaged(raw: bytes, pos: int, value: bytes) -> bytearray:
    buf = bytearray(raw)
    buf[pos : pos + len(value)] = value
    return buf


def test_check_bad_magic() -> None:
    raw = encode(make_msg())
    req = check(damaged(raw, 4, b"\x00\x00\x00\x01"))
    assert not req.success and req.msg_size == -1


@pytest.mark.parametrize("delta", [-1, +1])
def test_check_bad_total_size(delta: int) -> None:
    raw = encode(make_msg()) + bytes(8)
    total = len(raw) - 8
    req = check(damaged(raw, 0, struct.pack(">i", total + delta)))
    assert not req.success and req.msg_size == -1


def test_check_total_size_below_fixed_part_or_past_limit() -> None:
    raw = encode(make_msg())
    assert check(damaged(raw, 0, struct.pack(">i", 90))).msg_size == -1
    assert check(damaged(raw, 0, struct.pack(">i", 1 << 20))).msg_size == -1


def test_check_crc_mismatch_only_when_checking() -> None:
    raw = encode(make_msg())
    bad = damaged(raw, 88, b"J")  # first body byte: "Hello" -> "Jello"
    assert check(bad, check_crc=False).success
    req = check(bad, check_crc=True)
    assert not req.success and req.msg_size == -1
    with pytest.raises(rec.RecordError):
        rec.decode_message(bytes(bad), check_crc=True)


def test_check_truncated_record() -> None:
    raw = encode(make_msg())
    assert check(raw, limit=len(raw) - 1).msg_size == -1
    assert check(raw, limit=7).msg_size == -1  # not even a header
    assert check(raw[: len(raw) - 1]).msg_size == -1


def test_check_zeroed_topic_length_is_damage() -> None:
    """DefaultMessageStoreTest.testRecover writes 16 zero bytes at the last message's topic length."""
    msg = make_msg()
    raw = encode(msg)
    topic_pos = 88 + len(msg.body)
    assert check(damaged(raw, topic_pos, bytes(16))).msg_size == -1


def test_schedule_topic_tags_code_is_delivery_time() -> None:
    table = MessageStoreConfig().delay_level_table_ms()
    assert table[3] == 10_000 and len(table) == 18
    msg = make_msg(topic=mc.SCHEDULE_TOPIC, properties={"TAGS": "TagA", "DELAY": "3"})
    req = check(encode(msg), delay=table)
    assert req.tags_code == STORE_TS + 10_000
    over = make_msg(topic=mc.SCHEDULE_TOPIC, properties={"DELAY": "99"})
    assert check(encode(over), delay=table).tags_code == STORE_TS + 2 * 3_600_000  # clamped to level 18
    # Other topics, or no delay table, keep the tag hash.
    assert check(encode(make_msg(properties={"TAGS": "TagA", "DELAY": "3"})), delay=table).tags_code == 2598919
    assert check(encode(msg), delay=None).tags_code == 2598919


# ---- message ids ---------------------------------------------------------------------------------

def test_message_id_ipv4_round_trip() -> None:
    msg_id = rec.create_message_id(rec.host_bytes("127.0.0.1"), 10911, 0)
    assert msg_id == "7F00000100002A9F0000000000000000"
    msg_id = rec.create_message_id(rec.host_bytes("10.1.2.3"), 10911, 123_456_789_012)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert rec.decode_message_id(msg_id) == ("10.1.2.3", 10911, 123_456_789_012)
    assert rec.decode_message_id(msg_id.lower()) == ("10.1.2.3", 10911, 123_456_789_012)


def test_message_id_ipv6_round_trip() -> None:
    msg_id = rec.create_message_id(rec.host_bytes("2001:db8::7"), 10911, 1 << 40)
    assert len(msg_id) == 56
    assert rec.decode_message_id(msg_id) == ("2001:db8::7", 10911, 1 << 40)


@pytest.mark.parametrize("bad", ["", "7F000001", "7F00000100002A9F000000000000000", "Z" * 32, "7F00-001" * 4])
def test_malformed_message_id(bad: str) -> None:
    with pytest.raises(MessageIdError):
        rec.decode_message_id(bad)


# ---- runs of records -------------------------------------------------------------------------

def test_decode_messages_over_three_records() -> None:
    raws = [encode(make_msg(body=f"body-{i}".encode() * (i + 1), queue_id=i), queue_offset=i, phys=1000 + i)
            for i in range(3)]
    msgs = rec.decode_messages(b"".join(raws))
    assert [m.body for m in msgs] == [b"body-0", b"body-1" * 2, b"body-2" * 3]
    assert [m.queue_offset for m in msgs] == [0, 1, 2]
    assert [m.store_size for m in msgs] == [len(r) for r in raws]
    assert rec.decode_messages(b"") == []
    with pytest.raises(rec.RecordError):
        rec.decode_messages(b"".join(raws) + b"\x00" * 4)  # trailing garbage


def test_store_timestamp_at_ipv4_and_ipv6_born_host() -> None:
    v4 = encode(make_msg(), store_ts=111, pad=5)
    v6 = encode(make_msg(born_host=("::1", 9)), store_ts=222)
    assert rec.store_timestamp_at(v4, 5) == 111
    assert rec.store_timestamp_at(v6, 0) == 222
    assert struct.unpack_from(">q", v6, 56)[0] != 222  # the IPv6 born host shifts the field
