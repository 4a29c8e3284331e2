"""One record encoder: what CommitLog writes for single puts, batches and re-puts is, byte for byte, what
``record.prepare_record`` + ``record.write_record`` make of the same fields (the encoder the tests and the
bare-broker baseline use). A put path that packed records by hand would drift from it; this catches that."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.checkpoint import StoreCheckpoint
from reference_broker.store.commit_log import CommitLog, EncodedBatch, MessageExtBatch
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.status import PutMessageResult, PutMessageStatus
from tests.compiled_paths import put_path  # noqa: F401 - the fixture, used by pytestmark

pytestmark = pytest.mark.usefixtures("put_path")  # pure and compiled (tests/compiled_paths.py)


@pytest.fixture(params=[True, False], ids=["prop-crc", "no-prop-crc"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CommitLog]:
    config = MessageStoreConfig(store_path_root_dir=tmp_path, mapped_file_size_commit_log=64 * 1024,
                                enabled_append_prop_crc=request.param)
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cl = CommitLog(config, cp)
    assert cl.load()
    cl.max_delay_level = 18
    yield cl
    cl.shutdown()
    cp.shutdown()


def expected(cl: CommitLog, topic: str, body: bytes, props_b: bytes, queue_id: int, flag: int, sys_flag: int,
             born_ts: int, born_host: tuple[str, int], reconsume: int, prepared: int, queue_offset: int,
             phys: int, store_ts: int) -> bytes:
    stored = rec.reserve_prop_crc(props_b) if cl.append_prop_crc else props_b
    r = rec.prepare_record(topic.encode(), body, stored, queue_id, flag, sys_flag, born_ts,
                           rec.host_bytes(born_host[0]), born_host[1], cl.store_ip, cl.store_port, reconsume, prepared)
    out = bytearray(r.size)
    assert rec.write_record(out, 0, r, queue_offset, phys, store_ts, cl.append_prop_crc) == r.size
    return bytes(out)


def stored(cl: CommitLog, r: PutMessageResult) -> bytes:
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    got = cl.read_bytes(r.append.wrote_offset, r.append.wrote_bytes)
    assert got is not None
    return got


@pytest.mark.parametrize("born", [("10.1.2.3", 4567), ("fe80::1", 80)], ids=["ipv4", "ipv6"])
def test_a_single_put_is_the_encoders_record(log: CommitLog, born: tuple[str, int]) -> None:
    m = MessageExtBrokerInner("TopicTest", b"hello", 2, flag=7, properties={"TAGS": "a", "KEYS": "k"},
                              sys_flag=mc.BORNHOST_V6_FLAG, born_timestamp=123, born_host=born, reconsume_times=3,
                              prepared_transaction_offset=9)
    log.put_message(MessageExtBrokerInner("TopicTest", b"first", 2))  # queue offset 1, not at file start
    r = log.put_message(m)
    a = r.append
    assert a is not None and a.logics_offset == 1
    want = expected(log, "TopicTest", b"hello", mc.properties_to_bytes(m.properties), 2, 7, 0, 123, born, 3, 9,
                    1, a.wrote_offset, a.store_timestamp)
    assert stored(log, r) == want


def test_a_delay_re_put_is_the_encoders_record(log: CommitLog) -> None:
    """The schedule re-put path rewrites topic, queue and properties (CommitLog.asyncPutMessage's delay
    branch) and then writes through the same encoder."""
    m = MessageExtBrokerInner("TopicTest", b"later", 1, properties={"DELAY": "3", "KEYS": "d"},
                              born_host=("127.0.0.1", 1))
    r = log.put_message(m)
    a = r.append
    assert a is not None and m.topic == mc.SCHEDULE_TOPIC and m.queue_id == 2
    want = expected(log, mc.SCHEDULE_TOPIC, b"later", m.encoded_properties(), 2, 0, 0, 0, ("127.0.0.1", 1), 0, 0,
                    0, a.wrote_offset, a.store_timestamp)
    assert stored(log, r) == want
    assert rec.decode_message(want).properties[mc.PROPERTY_REAL_TOPIC] == "TopicTest"


def test_a_batch_is_the_encoders_records_back_to_back(log: CommitLog) -> None:
    msgs = [MessageExtBrokerInner("B", b"x" * i, 0, flag=i, properties={"KEYS": f"k{i}"}, born_timestamp=5,
                                  born_host=("127.0.0.1", 9)) for i in range(1, 5)]
    r = log.put_messages(MessageExtBatch("B", 3, msgs))
    a = r.append
    assert a is not None and a.msg_num == 4
    want = b""
    for i, m in enumerate(msgs):
        want += expected(log, "B", m.body, m.encoded_properties(), 3, m.flag, 0, 5, ("127.0.0.1", 9), 0, 0, i,
                         a.wrote_offset + len(want), a.store_timestamp)
    assert stored(log, r) == want


def test_an_encoded_batch_is_the_encoders_records_back_to_back(log: CommitLog) -> None:
    entries = [BatchEntry(i, b"y" * (i + 1), {"KEYS": f"e{i}"}) for i in range(3)]
    suffix = b"\x02CLUSTER\x01c"
    r = log.put_encoded_batch(EncodedBatch("E", 1, encode_batch(entries), 0, 77, ("127.0.0.1", 8), suffix))
    a = r.append
    assert a is not None and a.msg_num == 3
    want = b""
    for i, e in enumerate(entries):
        props = mc.properties_to_bytes(e.properties) + suffix
        want += expected(log, "E", e.body, props, 1, e.flag, 0, 77, ("127.0.0.1", 8), 0, 0, i,
                         a.wrote_offset + len(want), a.store_timestamp)
    assert stored(log, r) == want
