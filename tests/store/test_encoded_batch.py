"""CommitLog.put_encoded_batch: a batch written from its SEND_BATCH_MESSAGE encoding (EncodedBatch), as
4.9.8's MessageExtBatchEncoder writes records from the batch body, with no message object per entry."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.commit_log import CommitLog, EncodedBatch, MessageExtBatch
from reference_broker.store.status import PutMessageStatus
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark
from tests.store.test_prop_crc import assert_whole_record_crc, logs_fixture, open_log

pytestmark = pytest.mark.usefixtures("put_path")  # pure and compiled (tests/compiled_paths.py)


@pytest.fixture
def logs() -> Iterator[list[CommitLog]]:
    yield from logs_fixture()


def test_an_encoded_batch_stores_what_the_same_messages_store(logs: list[CommitLog], tmp_path: Path) -> None:
    """Each entry's record: its body, flag and properties plus the suffix, the header's sysflag, born time and
    host; BODYCRC from the entry (or computed when the entry carries 0); the whole-record CRC."""
    entries = [BatchEntry(i, f"body-{i}".encode(), {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}) for i in range(3)]
    body = encode_batch(entries)
    unset_crc = bytearray(body)
    unset_crc[8:12] = bytes(4)  # the first entry without its BODYCRC: the store computes it
    cl = open_log(logs, tmp_path / "encoded")
    r = cl.put_encoded_batch(EncodedBatch("B", 1, bytes(unset_crc), 0, 1_700_000_000_000, ("10.1.2.3", 4567),
                                          b"\x02CLUSTER\x01c1"))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert (r.append.logics_offset, r.append.msg_num) == (0, 3)
    raw = cl.read_bytes(r.append.wrote_offset, r.append.wrote_bytes)
    assert raw is not None
    msgs = rec.decode_messages(raw)
    pos = 0
    for i, m in enumerate(msgs):
        assert_whole_record_crc(raw[pos : pos + m.store_size])
        pos += m.store_size
        assert (m.topic, m.queue_id, m.queue_offset, m.flag, m.body) == ("B", 1, i, i, f"body-{i}".encode())
        assert (m.born_timestamp, m.born_host, m.body_crc) == (1_700_000_000_000, ("10.1.2.3", 4567),
                                                                zlib.crc32(m.body) & 0x7FFFFFFF)
        m.properties.pop(mc.PROPERTY_CRC32)
        assert m.properties == {"KEYS": f"k{i}", "UNIQ_KEY": f"U{i}", "CLUSTER": "c1"}
    assert r.append.msg_id.split(",") == [m.offset_msg_id for m in msgs]
    # The same messages through put_messages: the same records but for the store time.
    other = open_log(logs, tmp_path / "messages")
    listed = MessageExtBatch("B", 1, [MessageExtBrokerInner("B", e.body, flag=e.flag, born_timestamp=1_700_000_000_000,
                                                            born_host=("10.1.2.3", 4567),
                                                            properties={**e.properties, "CLUSTER": "c1"})
                                      for e in entries])
    r2 = other.put_messages(listed)
    assert r2.status is PutMessageStatus.PUT_OK and r2.append is not None
    raw2 = other.read_bytes(r2.append.wrote_offset, r2.append.wrote_bytes)
    assert raw2 is not None and len(raw2) == len(raw)
    assert [(m.body, m.properties.get("KEYS"), m.store_size) for m in rec.decode_messages(raw2)] == \
        [(m.body, m.keys, m.store_size) for m in msgs]


@pytest.mark.parametrize("body, remark", [
    (b"\x00\x00\x00\x05garbage", "bad batch body: "),
    (b"", "bad batch body: empty batch"),
])
def test_an_encoded_batch_that_does_not_parse_is_illegal(logs: list[CommitLog], tmp_path: Path, body: bytes,
                                                         remark: str) -> None:
    cl = open_log(logs, tmp_path)
    r = cl.put_encoded_batch(EncodedBatch("B", 0, body))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.remark.startswith(remark)
    assert cl.get_max_offset() == 0


def test_an_encoded_batch_refuses_a_delay_or_a_transaction(logs: list[CommitLog], tmp_path: Path) -> None:
    cl = open_log(logs, tmp_path)
    delayed = encode_batch([BatchEntry(0, b"a", {}), BatchEntry(0, b"b", {"DELAY": "2"})])
    assert cl.put_encoded_batch(EncodedBatch("B", 0, delayed)).status is PutMessageStatus.MESSAGE_ILLEGAL
    plain = encode_batch([BatchEntry(0, b"a", {"DELAY": "0"})])
    tx = EncodedBatch("B", 0, plain, sys_flag=mc.TRANSACTION_PREPARED_TYPE)
    assert cl.put_encoded_batch(tx).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.get_max_offset() == 0
    assert cl.put_encoded_batch(EncodedBatch("B", 0, plain)).status is PutMessageStatus.PUT_OK


_VALID = encode_batch([BatchEntry(1, b"abc", {"KEYS": "k", "TAGS": "t"}), BatchEntry(0, b"", {}),
                       BatchEntry(2, b"x" * 40, {"UNIQ_KEY": "U1"})])


@st.composite
def batch_bodies(draw: st.DrawFn) -> bytes:
    """Random bytes, or a valid body with a few bytes overwritten, cut or extended."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    body = bytearray(_VALID)
    for at, value in draw(st.lists(st.tuples(st.integers(0, len(body) - 1), st.binary(min_size=1, max_size=4)),
                                   max_size=3)):
        body[at:at + len(value)] = value
    cut = draw(st.integers(0, len(body)))
    return bytes(body[:cut]) + draw(st.binary(max_size=8))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=batch_bodies())
@example(body=_VALID)
def test_any_batch_body_is_stored_whole_or_refused_clearly(logs: list[CommitLog], tmp_path: Path,
                                                           body: bytes) -> None:
    """Bytes from the network: every entry becomes a record, or none does and the status says why."""
    if not logs:
        open_log(logs, tmp_path)
    cl = logs[0]
    before = cl.get_max_offset()
    r = cl.put_encoded_batch(EncodedBatch("B", 0, body, properties_suffix=b"\x02CLUSTER\x01c"))
    if r.status is PutMessageStatus.PUT_OK:
        assert r.append is not None
        raw = cl.read_bytes(r.append.wrote_offset, r.append.wrote_bytes)
        assert raw is not None
        msgs = rec.decode_messages(raw)
        assert len(msgs) == r.append.msg_num
        assert all(m.properties.get("CLUSTER") == "c" for m in msgs)
    else:
        assert r.status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED), r
        assert cl.get_max_offset() == before
