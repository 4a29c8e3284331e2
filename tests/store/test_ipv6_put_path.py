"""IPv6 hosts through the real put path: AppendCallbackTest and BatchPutMessageTest's IPv6 cases (4.9.8).

A store whose host is ``2001:db8::6`` and producers born at ``::1``: CommitLog.put_message, put_messages and
put_encoded_batch write records 12 bytes longer per IPv6 host (calIPv6HostMsgLength), set the sysflag's
BORNHOST_V6 (0x10) and STOREHOSTADDRESS_V6 (0x20) bits, and return 56-hex-character offsetMsgIds (16-byte
address, int port, long offset) that decode back to the store host and the record's offset. The records read
back whole, through recovery's scan, and through the store's lookups and getMessage.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.commit_log import CommitLog, EncodedBatch, MessageExtBatch
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.status import AppendMessageResult, AppendMessageStatus, GetMessageStatus, PutMessageStatus
from tests.store.store_helpers import Stores, make_config, stores_fixture, wait_dispatched

STORE_HOST = ("2001:db8::6", 10911)
BORN_HOST = ("::1", 126)
V6_FLAGS = mc.BORNHOST_V6_FLAG | mc.STOREHOSTADDRESS_V6_FLAG
TOPIC = "batch-write-topic"
BORN_TS = 1_700_000_000_123
FILE = 4096


@pytest.fixture
def logs() -> Iterator[list[CommitLog]]:
    made: list[CommitLog] = []
    yield made
    for cl in made:
        cl.shutdown()
        cl.checkpoint.shutdown()


def open_log(logs: list[CommitLog], root: Path, store_host: tuple[str, int] = STORE_HOST, load: bool = False,
             file_size: int = FILE) -> CommitLog:
    config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=file_size,
                                store_host=store_host)
    cl = CommitLog(config, StoreCheckpoint(root / "checkpoint"))
    if load:
        assert cl.load()
    logs.append(cl)
    return cl


def cal_msg_length(body: bytes, topic: str, props: dict[str, str], born_v6: bool, store_v6: bool) -> int:
    """BatchPutMessageTest.calIPv6HostMsgLength (and calMsgLength for IPv4 hosts), field by field; the
    properties as stored here, with the whole-record CRC's 20 bytes (README)."""
    props_len = rec.stored_props_length(mc.properties_to_bytes(props), True)
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + (16 if born_v6 else 4) + 4 + 8 + (16 if store_v6 else 4) + 4
            + 4 + 8 + 4 + len(body) + 1 + len(topic.encode()) + 2 + props_len)


def entry_props(i: int) -> dict[str, str]:
    return {mc.PROPERTY_TAGS: "TAG1", mc.PROPERTY_KEYS: f"key-{i}"}


def batch_messages(n: int = 10) -> list[rec.MessageExtBrokerInner]:
    return [rec.MessageExtBrokerInner(TOPIC, f"body{i}".encode(), properties=entry_props(i), born_timestamp=BORN_TS,
                                      born_host=BORN_HOST) for i in range(n)]


def assert_v6_layout(raw: bytes, body: bytes, store_ts: int) -> None:
    """Field positions once both hosts are 16 bytes: every field after BORNHOST moves by 12, after STOREHOST by 24."""
    assert struct.unpack_from(">i", raw, 36)[0] & V6_FLAGS == V6_FLAGS  # SYSFLAG
    assert struct.unpack_from(">q", raw, 40)[0] == BORN_TS  # BORNTIMESTAMP
    assert raw[48:64] == ipaddress.ip_address(BORN_HOST[0]).packed  # BORNHOST, 16 + 4
    assert struct.unpack_from(">i", raw, 64)[0] == BORN_HOST[1]
    assert struct.unpack_from(">q", raw, 68)[0] == store_ts  # STORETIMESTAMP at 56 + 12
    assert raw[76:92] == ipaddress.ip_address(STORE_HOST[0]).packed  # STOREHOSTADDRESS at 64 + 12, 16 + 4
    assert struct.unpack_from(">i", raw, 92)[0] == STORE_HOST[1]
    assert struct.unpack_from(">i", raw, 108)[0] == len(body)  # BODY at 84 + 24
    assert raw[112 : 112 + len(body)] == body
    assert rec.store_timestamp_at(raw, 0) == store_ts


def assert_batch_records(cl: CommitLog, append: AppendMessageResult, n: int, first_offset: int,
                         first_queue_offset: int) -> None:
    """AppendCallbackTest.testAppendIPv6HostMessageBatchSucc's checks, on the records in the file."""
    sizes = [cal_msg_length(f"body{i}".encode(), TOPIC, entry_props(i), True, True) for i in range(n)]
    assert append.status is AppendMessageStatus.PUT_OK
    assert (append.wrote_offset, append.logics_offset, append.msg_num) == (first_offset, first_queue_offset, n)
    assert append.wrote_bytes == sum(sizes)
    ids = append.msg_id.split(",")
    assert len(ids) == n and len(set(ids)) == n
    offsets = [first_offset + sum(sizes[:i]) for i in range(n)]
    for msg_id, offset in zip(ids, offsets, strict=True):
        assert len(msg_id) == 56 and msg_id == msg_id.upper()
        assert rec.decode_message_id(msg_id) == (*STORE_HOST, offset)
    raw = cl.read_bytes(append.wrote_offset, append.wrote_bytes)
    assert raw is not None
    decoded = rec.decode_messages(raw)
    assert [m.store_size for m in decoded] == sizes
    pos = 0
    for i, m in enumerate(decoded):
        assert (m.topic, m.body, m.tags, m.keys) == (TOPIC, f"body{i}".encode(), "TAG1", f"key-{i}")
        assert (m.born_host, m.store_host, m.born_timestamp) == (BORN_HOST, STORE_HOST, BORN_TS)
        assert m.sys_flag & V6_FLAGS == V6_FLAGS
        assert m.store_timestamp == append.store_timestamp  # one store time for the batch
        assert (m.queue_offset, m.commit_log_offset) == (first_queue_offset + i, offsets[i])
        assert m.offset_msg_id == ids[i]
        record = raw[pos : pos + m.store_size]
        assert rec.decode_message(record, check_crc=True, verify_prop_crc=True).body == m.body
        assert_v6_layout(record, m.body, append.store_timestamp)
        pos += m.store_size


# ---- put_message: each host's family sets its own bit and adds its own 12 bytes ---------------------------

@pytest.mark.parametrize(("born", "store"), [("10.0.0.1", "10.0.0.2"), (BORN_HOST[0], "10.0.0.2"),
                                            ("10.0.0.1", STORE_HOST[0]), (BORN_HOST[0], STORE_HOST[0])])
def test_put_message_with_ipv6_hosts(logs: list[CommitLog], tmp_path: Path, born: str, store: str) -> None:
    born_v6, store_v6 = ":" in born, ":" in store
    cl = open_log(logs, tmp_path, store_host=(store, STORE_HOST[1]))
    body = b"hello ipv6"
    props = {mc.PROPERTY_TAGS: "TagA", mc.PROPERTY_KEYS: "k1"}
    results = []
    for i in range(3):
        # A sysflag carried over with the wrong host bits (a re-put message) is corrected.
        msg = rec.MessageExtBrokerInner(TOPIC, body, queue_id=1, properties=dict(props), born_timestamp=BORN_TS,
                                        born_host=(born, BORN_HOST[1]), sys_flag=V6_FLAGS if i == 1 else 0)
        r = cl.put_message(msg)
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        results.append(r.append)

    size = cal_msg_length(body, TOPIC, props, born_v6, store_v6)
    assert size == cal_msg_length(body, TOPIC, props, False, False) + 12 * (born_v6 + store_v6)
    assert [a.wrote_bytes for a in results] == [size] * 3
    assert [a.wrote_offset for a in results] == [0, size, 2 * size]
    assert [a.logics_offset for a in results] == [0, 1, 2]
    flags = (mc.BORNHOST_V6_FLAG if born_v6 else 0) | (mc.STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    for a in results:
        assert len(a.msg_id) == (56 if store_v6 else 32)
        assert rec.decode_message_id(a.msg_id) == (store, STORE_HOST[1], a.wrote_offset)
        raw = cl.read_bytes(a.wrote_offset, a.wrote_bytes)
        assert raw is not None
        assert struct.unpack_from(">i", raw, rec.SYSFLAG_POS)[0] == flags
        m = rec.decode_message(raw, check_crc=True, verify_prop_crc=True)
        assert (m.topic, m.body, m.queue_id, m.tags, m.keys) == (TOPIC, body, 1, "TagA", "k1")
        assert (m.born_host, m.store_host) == ((born, BORN_HOST[1]), (store, STORE_HOST[1]))
        assert (m.store_size, m.commit_log_offset, m.born_timestamp) == (size, a.wrote_offset, BORN_TS)
        assert m.store_timestamp == a.store_timestamp == rec.store_timestamp_at(raw, 0)
        assert m.offset_msg_id == a.msg_id
        if born_v6 and store_v6:
            assert_v6_layout(raw, body, a.store_timestamp)


# ---- batches (AppendCallbackTest, BatchPutMessageTest) ------------------------------------------------------

def test_put_messages_ipv6_batch(logs: list[CommitLog], tmp_path: Path) -> None:
    cl = open_log(logs, tmp_path)
    r = cl.put_messages(MessageExtBatch(TOPIC, 0, batch_messages()))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert_batch_records(cl, r.append, 10, 0, 0)


def test_put_encoded_batch_ipv6(logs: list[CommitLog], tmp_path: Path) -> None:
    cl = open_log(logs, tmp_path)
    body = encode_batch(BatchEntry(0, f"body{i}".encode(), entry_props(i)) for i in range(10))
    r = cl.put_encoded_batch(EncodedBatch(TOPIC, 0, body, 0, BORN_TS, BORN_HOST))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert_batch_records(cl, r.append, 10, 0, 0)


@pytest.mark.parametrize("encoded", [False, True], ids=["put_messages", "put_encoded_batch"])
def test_ipv6_batch_that_does_not_fit_goes_whole_into_the_next_file(logs: list[CommitLog], tmp_path: Path,
                                                                    encoded: bool) -> None:
    """testAppendIPv6HostMessageBatchEndOfFile: the file ends with a blank (size + BLANK magic) and the whole
    batch is written at the start of the next file."""
    cl = open_log(logs, tmp_path, file_size=2048)
    filler = [cl.put_message(m) for m in batch_messages(5)]
    assert all(f.status is PutMessageStatus.PUT_OK for f in filler)
    end_of_data = cl.get_max_offset()
    batch_size = sum(cal_msg_length(f"body{i}".encode(), TOPIC, entry_props(i), True, True) for i in range(10))
    assert end_of_data + batch_size + 8 > 2048 > batch_size

    if encoded:
        body = encode_batch(BatchEntry(0, f"body{i}".encode(), entry_props(i)) for i in range(10))
        r = cl.put_encoded_batch(EncodedBatch(TOPIC, 0, body, 0, BORN_TS, BORN_HOST))
    else:
        r = cl.put_messages(MessageExtBatch(TOPIC, 0, batch_messages()))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    first_file = cl.mapped_file_queue.mapped_files[0]
    assert struct.unpack_from(">ii", first_file.buf, end_of_data) == (2048 - end_of_data, rec.BLANK_MAGIC_CODE)
    assert first_file.wrote_position == 2048
    assert_batch_records(cl, r.append, 10, 2048, 5)


# ---- reading back through recovery --------------------------------------------------------------------------

def test_recovery_scans_ipv6_records(logs: list[CommitLog], tmp_path: Path) -> None:
    cl = open_log(logs, tmp_path, file_size=2048)
    appends = []
    for _ in range(3):  # a batch is 1,780 bytes: each ends its file with a blank and the next rolls over
        r = cl.put_messages(MessageExtBatch(TOPIC, 0, batch_messages()))
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        appends.append(r.append)
    assert [a.wrote_offset for a in appends] == [0, 2048, 4096]
    end = cl.get_max_offset()
    expected = [rec.decode_message_id(i)[2] for a in appends for i in a.msg_id.split(",")]
    cl.mapped_file_queue.flush(0)
    cl.shutdown()

    again = open_log(logs, tmp_path, load=True, file_size=2048)
    assert again.recover_normally(-1, lambda _o: pytest.fail("nothing to truncate")) == end
    dispatched: list[DispatchRequest] = []
    assert again.recover_abnormally(-1, dispatched.extend, lambda _o: None) == end  # no checkpoint: from file 0
    assert [d.commit_log_offset for d in dispatched] == expected
    assert [d.consume_queue_offset for d in dispatched] == list(range(30))
    assert all(d.success and d.sys_flag & V6_FLAGS == V6_FLAGS and d.keys.startswith("key-") for d in dispatched)


# ---- the store (BatchPutMessageTest.testPutIPv6HostMessages) ------------------------------------------------

@pytest.fixture
def stores() -> Iterator[Stores]:
    yield from stores_fixture()


def test_store_put_messages_ipv6_then_look_up_and_get(tmp_path: Path, stores: Stores) -> None:
    store = stores.open(make_config(tmp_path, mapped_file_size_commit_log=FILE, store_host=STORE_HOST))
    r = store.put_messages(MessageExtBatch(TOPIC, 0, batch_messages()))
    assert r.is_ok and r.append is not None
    lengths = [cal_msg_length(f"body{i}".encode(), TOPIC, entry_props(i), True, True) for i in range(10)]
    wait_dispatched(store)

    ids = r.append.msg_id.split(",")
    for i in range(10):
        offset = sum(lengths[:i])
        m = store.look_message_by_offset(offset)
        assert m is not None and m.body == f"body{i}".encode()
        assert (m.born_host, m.store_host, m.store_size) == (BORN_HOST, STORE_HOST, lengths[i])
        by_id = store.look_message_by_msg_id(ids[i])
        assert by_id is not None and by_id.commit_log_offset == offset
        res = store.get_message("batch_write_group", TOPIC, 0, i, 1024 * 1024)
        assert res.status is GetMessageStatus.FOUND
        assert rec.decode_message(res.messages[0], check_crc=True).queue_offset == i
        found = store.query_message(TOPIC, f"key-{i}", 32, 0, int(time.time() * 1000) + 60_000)
        assert [x.commit_log_offset for x in found] == [offset]
