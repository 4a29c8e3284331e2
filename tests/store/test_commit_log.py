"""CommitLog: append, roll-over, batches, limits, reads, replication seam and recovery.

Mirrors RocketMQ's AppendCallbackTest, BatchPutMessageTest and DefaultMessageStoreTest.testRecover
(4.9.8) with 1 KiB commit-log files.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference_broker.common import message as mc
from reference_broker.common import record as rec
from reference_broker.common.dispatch import DispatchRequest
from reference_broker.common.record import MessageExtBrokerInner
from reference_broker.store.checkpoint import NO_INDEX_FILE, IndexSafePoint, StoreCheckpoint
from reference_broker.store.commit_log import CommitLog, MessageExtBatch
from reference_broker.store.config import MessageStoreConfig
from reference_broker.store.status import AppendMessageResult, PutMessageStatus

FILE = 1024
LogFactory = Callable[..., CommitLog]


@pytest.fixture
def new_log(tmp_path: Path) -> Iterator[LogFactory]:
    made: list[tuple[CommitLog, StoreCheckpoint]] = []

    def make(name: str = "store", load: bool = False, **cfg: object) -> CommitLog:
        # These tests pin 4.9.8's record layout byte for byte; the whole-record CRC (on by default) is
        # tested in test_prop_crc.py and by the recovery tests below, which run both ways.
        cfg.setdefault("enabled_append_prop_crc", False)
        root = tmp_path / name
        config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=FILE, **cfg)  # type: ignore[arg-type]
        cp = StoreCheckpoint(root / "checkpoint")
        cl = CommitLog(config, cp)
        if load:
            assert cl.load()
        made.append((cl, cp))
        return cl

    yield make
    for cl, cp in made:
        cl.shutdown()
        cp.shutdown()


def msg(total: int = 200, topic: str = "T", queue_id: int = 0, prop_crc: bool = False,
        **kw: object) -> MessageExtBrokerInner:
    """A message whose IPv4 record is ``total`` bytes (no properties unless given) in a log whose
    whole-record CRC is on (``prop_crc``) or off."""
    props = kw.pop("properties", {})
    props_len = rec.stored_props_length(mc.properties_to_bytes(props), prop_crc)  # type: ignore[arg-type]
    body = b"b" * (total - 91 - len(topic.encode()) - props_len)
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, properties=props, **kw)  # type: ignore[arg-type]


def put_ok(cl: CommitLog, m: MessageExtBrokerInner) -> AppendMessageResult:
    r = cl.put_message(m)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    return r.append


# ---- append and roll-over (AppendCallbackTest) ----------------------------------------------

def test_append_until_roll_over_writes_blank_and_starts_next_file(new_log: LogFactory) -> None:
    cl = new_log()
    results = [put_ok(cl, msg(200)) for _ in range(5)]
    assert [r.wrote_offset for r in results] == [0, 200, 400, 600, 800]
    assert all(r.wrote_bytes == 200 for r in results)
    sixth = put_ok(cl, msg(200))  # 200 + 8 > 24 free bytes
    assert sixth.wrote_offset == 1024
    first = cl.mapped_file_queue.mapped_files[0]
    size, magic = struct.unpack_from(">ii", first.buf, 1000)
    assert (size, magic) == (24, rec.BLANK_MAGIC_CODE)
    assert first.wrote_position == FILE
    assert rec.check_message_and_return_size(first.buf, 1000, FILE, True).msg_size == 0
    assert cl.get_max_offset() == 1224
    assert [f.file_name for f in cl.mapped_file_queue.mapped_files] == ["00000000000000000000",
                                                                          "00000000000000001024"]


def test_message_leaving_exactly_8_free_bytes_fits(new_log: LogFactory) -> None:
    cl = new_log()
    assert put_ok(cl, msg(FILE - 8)).wrote_offset == 0
    assert cl.mapped_file_queue.mapped_files[0].free_space() == 8
    assert put_ok(cl, msg(100)).wrote_offset == 1024
    assert struct.unpack_from(">ii", cl.mapped_file_queue.mapped_files[0].buf, FILE - 8) == (8, rec.BLANK_MAGIC_CODE)


def test_message_leaving_fewer_than_8_free_bytes_rolls(new_log: LogFactory) -> None:
    cl = new_log()
    put_ok(cl, msg(100))
    assert put_ok(cl, msg(FILE - 100 - 7)).wrote_offset == 1024
    first = cl.mapped_file_queue.mapped_files[0]
    assert struct.unpack_from(">ii", first.buf, 100) == (FILE - 100, rec.BLANK_MAGIC_CODE)
    assert bytes(first.buf[108:]) == bytes(FILE - 108)  # only the blank header is written


def test_queue_offsets_per_topic_queue_and_monotonic_store_time(new_log: LogFactory) -> None:
    cl = new_log()
    keys = [("T", 0), ("T", 1), ("T", 0), ("U", 0), ("T", 0), ("U", 0), ("T", 1)] * 3
    results = [put_ok(cl, msg(150, topic=t, queue_id=q)) for t, q in keys]
    seen: dict[tuple[str, int], int] = {}
    for key, r in zip(keys, results, strict=True):
        assert r.logics_offset == seen.get(key, 0)
        seen[key] = r.logics_offset + 1
    assert cl.topic_queue_table == {"T-0": 9, "T-1": 6, "U-0": 6}
    ts = [r.store_timestamp for r in results]
    assert ts == sorted(ts) and ts[0] > 0
    # Records carry their queue offset, physical offset and store time.
    m = rec.decode_message(cl.read_bytes(results[4].wrote_offset, 150))  # type: ignore[arg-type]
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (2, results[4].wrote_offset, ts[4])
    assert results[4].msg_id == m.offset_msg_id


def test_store_time_never_goes_backwards(new_log: LogFactory) -> None:
    cl = new_log()
    first = put_ok(cl, msg(100)).store_timestamp
    ahead = first + 60_000
    cl.last_store_ts = ahead  # as after recovering a log written while the clock was ahead
    assert put_ok(cl, msg(100)).store_timestamp == ahead
    batch = cl.put_messages(MessageExtBatch("B", 0, [msg(100, topic="B")]))
    assert batch.append is not None and batch.append.store_timestamp == ahead


# ---- batches (BatchPutMessageTest) ------------------------------------------------------------

def test_batch_put_consecutive_offsets_and_joined_ids(new_log: LogFactory) -> None:
    cl = new_log()
    put_ok(cl, msg(100, topic="B", queue_id=2))
    batch = MessageExtBatch("B", 2, [msg(120, topic="B") for _ in range(3)])
    r = cl.put_messages(batch)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert (r.append.wrote_offset, r.append.wrote_bytes, r.append.logics_offset, r.append.msg_num) == (100, 360, 1, 3)
    ids = r.append.msg_id.split(",")
    assert [rec.decode_message_id(i)[2] for i in ids] == [100, 220, 340]
    msgs = rec.decode_messages(cl.read_bytes(100, 360))  # type: ignore[arg-type]
    assert [(m.topic, m.queue_id, m.queue_offset) for m in msgs] == [("B", 2, 1), ("B", 2, 2), ("B", 2, 3)]
    assert cl.topic_queue_table["B-2"] == 4


def test_batch_that_does_not_fit_moves_whole_to_next_file(new_log: LogFactory) -> None:
    cl = new_log()
    put_ok(cl, msg(800))
    r = cl.put_messages(MessageExtBatch("B", 0, [msg(100, topic="B") for _ in range(3)]))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert [rec.decode_message_id(i)[2] for i in r.append.msg_id.split(",")] == [1024, 1124, 1224]
    assert struct.unpack_from(">ii", cl.mapped_file_queue.mapped_files[0].buf, 800) == (224, rec.BLANK_MAGIC_CODE)


def test_batch_rejections(new_log: LogFactory) -> None:
    cl = new_log(max_message_size=300)
    delayed = MessageExtBatch("B", 0, [msg(100, topic="B"), msg(100, topic="B", properties={"DELAY": "2"})])
    assert cl.put_messages(delayed).status is PutMessageStatus.MESSAGE_ILLEGAL
    tx = MessageExtBatch("B", 0, [msg(100, topic="B", sys_flag=mc.TRANSACTION_PREPARED_TYPE)])
    assert cl.put_messages(tx).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.put_messages(MessageExtBatch("B", 0, [])).status is PutMessageStatus.MESSAGE_ILLEGAL
    too_long = MessageExtBatch("B", 0, [msg(250, topic="B") for _ in range(5)])  # 1250 B > one file
    assert cl.put_messages(too_long).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.get_max_offset() == 0 and cl.topic_queue_table == {}


# ---- limits ---------------------------------------------------------------------------------------

def test_message_limits(new_log: LogFactory) -> None:
    cl = new_log(max_message_size=100)
    assert put_ok(cl, MessageExtBrokerInner("T", b"x" * 100)).wrote_bytes == 192
    big = cl.put_message(MessageExtBrokerInner("T", b"x" * 101))
    assert big.status is PutMessageStatus.MESSAGE_ILLEGAL and not big.is_ok
    assert put_ok(cl, MessageExtBrokerInner("t" * 127, b"")).wrote_offset == 192
    assert cl.put_message(MessageExtBrokerInner("t" * 128, b"")).status is PutMessageStatus.MESSAGE_ILLEGAL
    props = cl.put_message(MessageExtBrokerInner("T", b"", properties={"K": "v" * 32766}))  # 32768 bytes
    assert props.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert cl.get_max_offset() == 192 + 91 + 127


# ---- transactions and delay levels -------------------------------------------------------------

@pytest.mark.parametrize("tran", [mc.TRANSACTION_PREPARED_TYPE, mc.TRANSACTION_ROLLBACK_TYPE])
def test_prepared_and_rollback_get_queue_offset_zero(new_log: LogFactory, tran: int) -> None:
    cl = new_log()
    assert [put_ok(cl, msg(100)).logics_offset for _ in range(2)] == [0, 1]
    r = put_ok(cl, msg(100, sys_flag=tran))
    assert r.logics_offset == 0
    assert rec.decode_message(cl.read_bytes(r.wrote_offset, 100)).queue_offset == 0  # type: ignore[arg-type]
    assert cl.topic_queue_table["T-0"] == 2
    assert put_ok(cl, msg(100, sys_flag=mc.TRANSACTION_COMMIT_TYPE)).logics_offset == 2


def test_delay_level_rewrites_to_schedule_topic(new_log: LogFactory) -> None:
    cl = new_log()
    m = MessageExtBrokerInner("Real", b"hi", queue_id=5, properties={"DELAY": "3", "TAGS": "a"})
    r = put_ok(cl, m)
    stored = rec.decode_message(cl.read_bytes(r.wrote_offset, r.wrote_bytes))  # type: ignore[arg-type]
    assert (stored.topic, stored.queue_id) == (mc.SCHEDULE_TOPIC, 2)
    assert stored.properties == {"DELAY": "3", "TAGS": "a", "REAL_TOPIC": "Real", "REAL_QID": "5"}
    assert cl.topic_queue_table == {f"{mc.SCHEDULE_TOPIC}-2": 1}


def test_delay_level_above_max_is_clamped(new_log: LogFactory) -> None:
    cl = new_log()
    r = put_ok(cl, MessageExtBrokerInner("Real", b"hi", queue_id=1, properties={"DELAY": "99"}))
    stored = rec.decode_message(cl.read_bytes(r.wrote_offset, r.wrote_bytes))  # type: ignore[arg-type]
    assert (stored.topic, stored.queue_id, stored.properties["DELAY"]) == (mc.SCHEDULE_TOPIC, 17, "18")


def test_prepared_message_with_delay_is_not_rewritten(new_log: LogFactory) -> None:
    cl = new_log()
    m = MessageExtBrokerInner("Real", b"hi", properties={"DELAY": "3"}, sys_flag=mc.TRANSACTION_PREPARED_TYPE)
    r = put_ok(cl, m)
    assert rec.decode_message(cl.read_bytes(r.wrote_offset, r.wrote_bytes)).topic == "Real"  # type: ignore[arg-type]


# ---- reads ------------------------------------------------------------------------------------------

def test_reads_by_offset(new_log: LogFactory) -> None:
    cl = new_log()
    a, b = put_ok(cl, msg(200)), put_ok(cl, msg(300))
    with cl.get_data(0) as res:  # type: ignore[union-attr]
        assert res.size == 500
    with cl.get_data(200) as res:  # type: ignore[union-attr]
        assert rec.decode_message(res.data).commit_log_offset == 200
    assert cl.get_data(500) is None
    with cl.get_message(200, 300) as res:  # type: ignore[union-attr]
        assert bytes(res.data) == cl.read_bytes(200, 300)
    assert cl.get_message(200, 301) is None and cl.read_bytes(5000, 10) is None
    assert cl.pickup_store_timestamp(0, 200) == a.store_timestamp
    assert cl.pickup_store_timestamp(200, 300) == b.store_timestamp
    assert cl.pickup_store_timestamp(5000, 100) == -1


def test_pickup_store_timestamp_below_min_offset(new_log: LogFactory) -> None:
    cl = new_log()
    for _ in range(6):
        put_ok(cl, msg(200))
    assert cl.mapped_file_queue.delete_expired_file_by_time(0, 0, 1000, True) == 1
    assert cl.get_min_offset() == 1024
    assert cl.pickup_store_timestamp(0, 200) == -1
    assert cl.pickup_store_timestamp(1024, 200) > 0


# ---- replication seam ---------------------------------------------------------------------------

def test_bulk_data_appended_to_a_second_log_is_identical(new_log: LogFactory) -> None:
    master, slave = new_log("master"), new_log("slave")
    for i in range(12):
        put_ok(master, msg(150 + i, topic=f"T{i % 3}"))
    offset = 0
    while offset < master.get_max_offset():
        chunk = master.get_bulk_data(offset, 300)
        assert chunk and slave.append_data(offset, chunk)
        offset += len(chunk)
    assert slave.get_max_offset() == master.get_max_offset()
    mfs, sfs = master.mapped_file_queue.mapped_files, slave.mapped_file_queue.mapped_files
    assert [f.file_name for f in sfs] == [f.file_name for f in mfs]
    for mf, sf in zip(mfs, sfs, strict=True):
        assert bytes(sf.buf[: mf.wrote_position]) == bytes(mf.buf[: mf.wrote_position])
    assert not slave.append_data(offset + 10, b"x" * 20)  # does not continue the log
    assert not slave.append_data(0, b"x" * 20)
    assert slave.get_max_offset() == master.get_max_offset()


# ---- recovery (DefaultMessageStoreTest.testRecover) ----------------------------------------------

def write_then_reopen(new_log: LogFactory, damage: Callable[[CommitLog, list[AppendMessageResult]], None],
                      prop_crc: bool = False, **cfg: object) -> tuple[CommitLog, list]:
    cfg["enabled_append_prop_crc"] = prop_crc
    cl = new_log("r", **cfg)
    results = [put_ok(cl, msg(150 + i * 10, topic="Topic", prop_crc=prop_crc, properties={"TAGS": "t"}))
               for i in range(8)]
    damage(cl, results)
    cl.shutdown()
    return new_log("r", load=True, **cfg), results


def zero_last_topic_length(cl: CommitLog, results: list) -> None:
    last = results[-1]
    mf = cl.mapped_file_queue.find_mapped_file_by_offset(last.wrote_offset)
    pos = last.wrote_offset % FILE
    body_len = struct.unpack_from(">i", mf.buf, pos + 84)[0]  # type: ignore[union-attr]
    mf.buf[pos + 88 + body_len : pos + 88 + body_len + 16] = bytes(16)  # type: ignore[union-attr]


def flip_last_body_byte(cl: CommitLog, results: list) -> None:
    last = results[-1]
    mf = cl.mapped_file_queue.find_mapped_file_by_offset(last.wrote_offset)
    pos = last.wrote_offset % FILE + 88
    mf.buf[pos] ^= 0xFF  # type: ignore[union-attr]


def zero_last_properties_tail(cl: CommitLog, results: list) -> None:
    """A torn page: the record's last 3 bytes (inside its properties) read back as zeros."""
    last = results[-1]
    mf = cl.mapped_file_queue.find_mapped_file_by_offset(last.wrote_offset)
    end = last.wrote_offset % FILE + last.wrote_bytes
    mf.buf[end - 3 : end] = bytes(3)  # type: ignore[union-attr]


def garble_last_topic_byte(cl: CommitLog, results: list) -> None:
    last = results[-1]
    mf = cl.mapped_file_queue.find_mapped_file_by_offset(last.wrote_offset)
    pos = last.wrote_offset % FILE
    body_len = struct.unpack_from(">i", mf.buf, pos + 84)[0]  # type: ignore[union-attr]
    mf.buf[pos + 88 + body_len + 1] ^= 0x20  # type: ignore[union-attr]  # "Topic" → "topic"


@pytest.mark.parametrize("prop_crc", [False, True], ids=["bodycrc", "prop_crc"])
@pytest.mark.parametrize("damage", [zero_last_topic_length, flip_last_body_byte])
def test_recover_normally_truncates_damaged_last_record(new_log: LogFactory, damage: Callable,
                                                        prop_crc: bool) -> None:
    cl, results = write_then_reopen(new_log, damage, prop_crc)
    last = results[-1]
    truncated: list[int] = []
    end = cl.recover_normally(last.wrote_offset + last.wrote_bytes, truncated.append)
    assert end == last.wrote_offset == cl.get_max_offset()
    assert truncated == [end]  # the consume queues reached past the end: truncated there too
    mf = cl.mapped_file_queue.get_last_mapped_file()
    assert bytes(mf.buf[end % FILE :]) == bytes(FILE - end % FILE)  # type: ignore[union-attr]
    assert put_ok(cl, msg(100)).wrote_offset == end  # writes continue at the recovered end
    assert cl.last_store_ts >= results[-2].store_timestamp


@pytest.mark.parametrize("damage", [zero_last_properties_tail, garble_last_topic_byte])
def test_whole_record_crc_truncates_damage_that_bodycrc_misses(new_log: LogFactory, damage: Callable) -> None:
    """A tear or flipped bit outside the body passes BODYCRC (4.9.8 then serves the damaged record);
    the whole-record CRC (enabledAppendPropCRC + forceVerifyPropCRC) truncates it."""
    cl, results = write_then_reopen(new_log, damage, prop_crc=False)
    assert cl.recover_normally(0, lambda _o: None) == results[-1].wrote_offset + results[-1].wrote_bytes
    cl, results = write_then_reopen(new_log, damage, prop_crc=True)
    assert cl.recover_normally(0, lambda _o: None) == results[-1].wrote_offset == cl.get_max_offset()


def test_recover_normally_without_crc_check_keeps_flipped_body(new_log: LogFactory) -> None:
    cl, results = write_then_reopen(new_log, flip_last_body_byte, check_crc_on_recover=False)
    truncated: list[int] = []
    end = cl.recover_normally(0, truncated.append)
    assert end == results[-1].wrote_offset + results[-1].wrote_bytes == cl.get_max_offset()
    assert truncated == []  # consume queues were behind the end: nothing to truncate


def test_recover_normally_clean_log_keeps_everything(new_log: LogFactory) -> None:
    cl, results = write_then_reopen(new_log, lambda _cl, _r: None)
    assert len(cl.mapped_file_queue.mapped_files) == 2
    end = cl.recover_normally(-1, lambda _o: pytest.fail("no truncation expected"))
    assert end == results[-1].wrote_offset + results[-1].wrote_bytes == cl.get_max_offset()
    assert cl.flushed_where == end


def test_recover_with_no_files_destroys_logics(new_log: LogFactory) -> None:
    cl = new_log(load=True)
    truncated: list[int] = []
    assert cl.recover_normally(100, truncated.append) == 0
    assert cl.recover_abnormally(100, lambda _r: None, truncated.append) == 0
    assert truncated == [-1, -1]


def abnormal_log(new_log: LogFactory) -> tuple[CommitLog, list]:
    """Three files of four records; each file's records are stored 100 s after the previous file's."""
    cl = new_log("a")
    results = []
    for _ in range(3):
        cl.last_store_ts = max(cl.last_store_ts, int(time.time() * 1000)) + 100_000
        for _ in range(4):
            results.append(put_ok(cl, msg(250)))
    assert [r.wrote_offset // FILE for r in results] == [0] * 4 + [1] * 4 + [2] * 4
    cl.shutdown()
    return new_log("a", load=True), results


def test_recover_abnormally_redispatches_after_checkpoint_file(new_log: LogFactory) -> None:
    cl, results = abnormal_log(new_log)
    file1_ts = results[4].store_timestamp
    assert results[3].store_timestamp < file1_ts < results[8].store_timestamp - 50_000
    cl.checkpoint.physic_msg_timestamp = file1_ts + 3000
    cl.checkpoint.logics_msg_timestamp = file1_ts + 5000
    # An index safe point exists (no offsets, though): the index needs nothing older than the time rule gives.
    cl.checkpoint.note_index_safe_point(IndexSafePoint(NO_INDEX_FILE, 0))
    dispatched: list[DispatchRequest] = []
    end = cl.recover_abnormally(-1, dispatched.extend, lambda _o: None)
    assert end == results[-1].wrote_offset + 250 == cl.get_max_offset()
    # The newest file whose first store time <= min timestamp (file1_ts) is file 1.
    assert [d.commit_log_offset for d in dispatched] == [r.wrote_offset for r in results[4:]]
    assert [d.consume_queue_offset for d in dispatched] == list(range(4, 12))
    assert all(d.success and d.msg_size == 250 and d.topic == "T" for d in dispatched)


def test_recover_abnormally_without_an_index_safe_point_replays_the_whole_log(new_log: LogFactory) -> None:
    """The index file being written is destroyed on such a load (IndexService.load, 4.9.8): rebuild it all."""
    cl, results = abnormal_log(new_log)
    cl.checkpoint.physic_msg_timestamp = results[4].store_timestamp + 3000
    cl.checkpoint.logics_msg_timestamp = results[4].store_timestamp + 5000
    dispatched: list[DispatchRequest] = []
    cl.recover_abnormally(-1, dispatched.extend, lambda _o: None)
    assert [d.commit_log_offset for d in dispatched] == [r.wrote_offset for r in results]


def test_recover_abnormally_with_zero_checkpoint_scans_from_file_0(new_log: LogFactory) -> None:
    cl, results = abnormal_log(new_log)
    assert cl.checkpoint.get_min_timestamp() == 0
    dispatched: list[DispatchRequest] = []
    cl.recover_abnormally(-1, dispatched.extend, lambda _o: None)
    assert [d.commit_log_offset for d in dispatched] == [r.wrote_offset for r in results]
    assert [d.store_timestamp for d in dispatched] == [r.store_timestamp for r in results]


def test_recover_abnormally_truncates_damage_like_normal(new_log: LogFactory) -> None:
    cl, results = write_then_reopen(new_log, zero_last_topic_length)
    dispatched: list[DispatchRequest] = []
    truncated: list[int] = []
    end = cl.recover_abnormally(10**9, dispatched.extend, truncated.append)
    assert end == results[-1].wrote_offset == cl.get_max_offset()
    assert [d.commit_log_offset for d in dispatched] == [r.wrote_offset for r in results[:-1]]
    assert truncated == [end]
