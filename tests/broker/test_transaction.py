"""Half messages and END_TRANSACTION on an in-process broker with a real store (no sockets): the prepare,
commit and rollback paths and their refusals (broker/transaction.py, broker/end_transaction.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from reference_broker.broker.client_manager import ClientChannelInfo
from reference_broker.common import message as mc
from reference_broker.common import transaction as tx
from reference_broker.common.record import decode_message_id, decode_messages
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.store.config import BrokerRole, FlushDiskType
from tests.broker.broker_helpers import FakeConn, make_controller, send_request, wait_dispatched
from tests.broker.test_processors import broker, call  # noqa: F401 - the fixture

PG = "TX_PG"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _prepare(broker, topic="TxT", body=b"payload", queue_id=2, **props):  # noqa: F811
    props = {"TRAN_MSG": "true", "PGROUP": PG, "TAGS": "tagA", "KEYS": "k1", "UNIQ_KEY": "U1", "WAIT": "true",
             **props}
    r = call(broker, broker.send_processor, send_request(topic, body, queue_id, props, producerGroup=PG))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


def _end(broker, r, kind, group=PG, table_offset=None, commit_log_offset=None, from_check=False):  # noqa: F811
    _ip, _port, offset = decode_message_id(r.ext_fields["msgId"])
    queue_offset = int(r.ext_fields["queueOffset"]) if table_offset is None else table_offset
    header = tx.end_transaction_header(group, queue_offset, offset if commit_log_offset is None else commit_log_offset,
                                       kind, "U1", from_check=from_check)
    return call(broker, broker.end_transaction_processor, create_request(RequestCode.END_TRANSACTION, header))


def _pull(broker, topic, queue_id):  # noqa: F811
    """Every message of a queue, read from the store (the system topics are not in the topic table)."""
    broker.run(wait_dispatched, broker)
    store = broker.store
    out = []
    low, high = max(0, store.get_min_offset_in_queue(topic, queue_id)), store.get_max_offset_in_queue(topic, queue_id)
    for i in range(low, high):
        out.append(store.look_message_by_offset(store.get_commit_log_offset_in_queue(topic, queue_id, i)))
    return out


def test_a_half_message_is_stored_in_the_half_topic_and_invisible_on_its_real_topic(broker):  # noqa: F811
    r = _prepare(broker)
    assert r.ext_fields["queueId"] == "2", "the answer names the queue the producer asked for"
    assert _pull(broker, "TxT", 2) == []
    [half] = _pull(broker, tx.HALF_TOPIC, 0)
    assert (half.body, half.queue_offset) == (b"payload", int(r.ext_fields["queueOffset"]))
    assert half.properties["REAL_TOPIC"] == "TxT" and half.properties["REAL_QID"] == "2"
    assert half.properties["TRAN_MSG"] == "true" and half.properties["PGROUP"] == PG
    # parseHalfMessageInner resets the transaction type: the half topic's consume queue indexes it
    assert mc.transaction_value(half.sys_flag) == mc.TRANSACTION_NOT_TYPE


def test_commit_rebuilds_the_message_into_its_real_topic_and_writes_an_op(broker):  # noqa: F811
    r = _prepare(broker, FLAG_PROP="x")
    half_offset = decode_message_id(r.ext_fields["msgId"])[2]
    assert _end(broker, r, tx.COMMIT).code == ResponseCode.SUCCESS
    [msg] = _pull(broker, "TxT", 2)
    assert (msg.body, msg.tags, msg.keys) == (b"payload", "tagA", "k1")
    assert msg.properties["UNIQ_KEY"] == "U1" and msg.properties["FLAG_PROP"] == "x"
    # as 4.9.8 stores it: the half's properties unchanged, REAL_TOPIC, REAL_QID and TRAN_MSG included
    assert msg.properties["REAL_TOPIC"] == "TxT" and msg.properties["TRAN_MSG"] == "true"
    assert mc.transaction_value(msg.sys_flag) == mc.TRANSACTION_COMMIT_TYPE
    assert msg.prepared_transaction_offset == half_offset
    [op] = _pull(broker, tx.OP_TOPIC, 0)
    assert op.tags == tx.REMOVE_TAG and op.body == r.ext_fields["queueOffset"].encode()


def test_rollback_only_marks(broker):  # noqa: F811
    r = _prepare(broker)
    assert _end(broker, r, tx.ROLLBACK).code == ResponseCode.SUCCESS
    assert _pull(broker, "TxT", 2) == []
    [op] = _pull(broker, tx.OP_TOPIC, 0)
    assert op.body == r.ext_fields["queueOffset"].encode()


def test_unknow_is_not_answered_and_changes_nothing(broker):  # noqa: F811
    r = _prepare(broker)
    assert _end(broker, r, tx.UNKNOW) is None
    assert _end(broker, r, tx.UNKNOW, from_check=True) is None
    assert _pull(broker, "TxT", 2) == [] and _pull(broker, tx.OP_TOPIC, 0) == []


@pytest.mark.parametrize(("change", "remark"), [
    ({"group": "OTHER_PG"}, "The producer group wrong"),
    ({"table_offset": 7}, "The transaction state table offset wrong"),
    ({"commit_log_offset": 10**9}, "Find prepared transaction message failed"),
])
def test_a_commit_that_does_not_name_the_half_message_is_refused(broker, change, remark):  # noqa: F811
    r = _prepare(broker)
    answer = _end(broker, r, tx.COMMIT, **change)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    assert _pull(broker, "TxT", 2) == [] and _pull(broker, tx.OP_TOPIC, 0) == []


def test_a_commit_of_an_ordinary_message_is_refused(broker):  # noqa: F811
    r = call(broker, broker.send_processor, send_request("TxT", b"plain", 0, {"PGROUP": PG}))
    answer = _end(broker, r, tx.COMMIT)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")


def test_bad_headers_are_refused(broker):  # noqa: F811
    r = _prepare(broker)
    answer = _end(broker, r, 5)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "commitOrRollback field wrong")
    bare = call(broker, broker.end_transaction_processor, create_request(RequestCode.END_TRANSACTION, {}))
    assert bare.code == ResponseCode.SYSTEM_ERROR and "is null" in bare.remark


def test_a_second_commit_stores_the_message_again_as_rocketmq_does(broker):  # noqa: F811
    r = _prepare(broker)
    assert _end(broker, r, tx.COMMIT).code == ResponseCode.SUCCESS
    assert _end(broker, r, tx.COMMIT).code == ResponseCode.SUCCESS
    assert [m.body for m in _pull(broker, "TxT", 2)] == [b"payload", b"payload"]
    assert len(_pull(broker, tx.OP_TOPIC, 0)) == 2


def test_a_delay_level_on_a_half_message_is_dropped(broker):  # noqa: F811
    r = _prepare(broker, DELAY="3")
    [half] = _pull(broker, tx.HALF_TOPIC, 0)
    assert "DELAY" not in half.properties
    assert _end(broker, r, tx.COMMIT).code == ResponseCode.SUCCESS
    assert [m.body for m in _pull(broker, "TxT", 2)] == [b"payload"], "delivered at once, not lost in the schedule"


# ---- the check service ------------------------------------------------------------------------------------------
def _producer(broker):  # noqa: F811
    """A producer connection of the group, as a heartbeat registers it."""
    conn = FakeConn("127.0.0.1:40001")
    broker.producer_manager.register(PG, ClientChannelInfo(conn, "client-1", last_update_ms=now_ms()))
    return conn


def _check(broker, conn):  # noqa: F811
    """One run of the check service, then the loop delivers what it handed over; the checks it sent."""
    before = len(conn.sent)
    broker.run(wait_dispatched, broker)
    broker.run(asyncio.to_thread, broker.transaction_check.check)  # its thread, while the loop runs
    broker.run(asyncio.sleep, 0.05)
    return conn.sent[before:]


def _offset(broker, topic):  # noqa: F811
    return broker.consumer_offset_manager.query_offset(tx.CID_RMQ_SYS_TRANS, topic, 0)


def test_an_unresolved_half_message_is_appended_again_and_its_producer_asked(broker):  # noqa: F811
    conn = _producer(broker)
    broker.transaction_check.timeout_ms = 0
    r = _prepare(broker)
    [check] = _check(broker, conn)
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
    body = decode_messages(check.body)[0]
    assert (body.topic, body.queue_id, body.body) == ("TxT", 2, b"payload"), "the real topic and queue"
    assert body.properties["TRANSACTION_CHECK_TIMES"] == "1" and body.properties["UNIQ_KEY"] == "U1"
    halves = _pull(broker, tx.HALF_TOPIC, 0)
    assert len(halves) == 2 and halves[1].properties["TRANSACTION_CHECK_TIMES"] == "1"
    h = check.ext_fields
    assert (h["tranStateTableOffset"], h["commitLogOffset"]) == ("1", str(halves[1].commit_log_offset))
    assert h["msgId"] == h["transactionId"] == "U1"
    assert _offset(broker, tx.HALF_TOPIC) == 1, "the walk passed the original"
    on_disk = json.loads(broker.consumer_offset_manager.config_file_path().read_text())["offsetTable"]
    assert on_disk[f"{tx.HALF_TOPIC}@{tx.CID_RMQ_SYS_TRANS}"] == {"0": 1}, "persisted before the check went out"
    # the producer answers from the check: the copy named in the header is committed
    end = create_request(RequestCode.END_TRANSACTION, tx.end_transaction_header(
        PG, int(h["tranStateTableOffset"]), int(h["commitLogOffset"]), tx.COMMIT, "U1", from_check=True))
    assert call(broker, broker.end_transaction_processor, end).code == ResponseCode.SUCCESS
    assert [m.body for m in _pull(broker, "TxT", 2)] == [b"payload"]
    assert _check(broker, conn) == [] and _check(broker, conn) == []
    assert _offset(broker, tx.HALF_TOPIC) == 2 and _offset(broker, tx.OP_TOPIC) == 1
    assert r.code == ResponseCode.SUCCESS


def test_a_resolved_or_young_half_message_is_not_checked(broker):  # noqa: F811
    conn = _producer(broker)
    r1 = _prepare(broker)
    assert _end(broker, r1, tx.ROLLBACK).code == ResponseCode.SUCCESS
    _prepare(broker)  # younger than transactionTimeOut (6 s): the walk stops at it
    assert _check(broker, conn) == []
    assert _offset(broker, tx.HALF_TOPIC) == 1, "past the rolled-back one, not past the young one"
    broker.transaction_check.timeout_ms = 0
    assert len(_check(broker, conn)) == 1


def test_a_half_message_checked_check_max_times_goes_to_trans_check_max_time_topic(broker):  # noqa: F811
    conn = _producer(broker)
    svc = broker.transaction_check
    svc.timeout_ms, svc.check_max = 0, 3
    _prepare(broker)
    sent = []
    for _ in range(5):
        sent += _check(broker, conn)
        time.sleep(0.002)  # each run starts after the copies the last one appended were stored
    assert [decode_messages(c.body)[0].properties["TRANSACTION_CHECK_TIMES"] for c in sent] == ["1", "2", "3"]
    [discarded] = _pull(broker, tx.CHECK_MAX_TIME_TOPIC, 0)
    assert discarded.body == b"payload" and discarded.properties["TRANSACTION_CHECK_TIMES"] == "3"
    assert svc.stats.discarded == 1


def test_no_live_producer_means_no_check_but_the_copy_is_made(broker):  # noqa: F811
    broker.transaction_check.timeout_ms = 0
    _prepare(broker)
    broker.run(wait_dispatched, broker)
    broker.run(asyncio.to_thread, broker.transaction_check.check)
    assert broker.transaction_check.stats.checked == 1 and len(_pull(broker, tx.HALF_TOPIC, 0)) == 2


def test_under_sync_flush_the_copies_are_on_disk_when_the_progress_is(tmp_path):
    loop = asyncio.new_event_loop()
    controller = make_controller(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    controller.run = lambda fn, *args: loop.run_until_complete(asyncio.wait_for(fn(*args), 20))
    loop.run_until_complete(controller.start(listen=False))
    try:
        controller.transaction_check.timeout_ms = 0
        store = controller.store
        put_message = store.put_message
        copies = []  # (end of the copy, flushed offset when its put returned)

        def recording_put(msg):
            result = put_message(msg)
            a = result.append
            copies.append((a.wrote_offset + a.wrote_bytes, store.commit_log.flushed_where))
            return result

        store.put_message = recording_put  # what the check service puts its copies with
        _prepare(controller)
        controller.run(wait_dispatched, controller)
        controller.run(asyncio.to_thread, controller.transaction_check.check)
        assert len(copies) == 1 and copies[0][1] >= copies[0][0], "the copy's put returned once it was flushed"
        assert _offset(controller, tx.HALF_TOPIC) == 1
    finally:
        loop.run_until_complete(controller.shutdown())
        loop.close()


def test_a_slave_refuses_end_transaction_and_runs_no_check(tmp_path):
    loop = asyncio.new_event_loop()
    controller = make_controller(tmp_path, broker_role=BrokerRole.SLAVE)
    loop.run_until_complete(controller.start(listen=False))
    try:
        end = create_request(RequestCode.END_TRANSACTION, tx.end_transaction_header(PG, 0, 0, tx.COMMIT, "m"))
        answer = controller.end_transaction_processor.handle(FakeConn(), end)
        assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert controller.transaction_check is None, "only a master checks (startProcessorByHa)"
    finally:
        loop.run_until_complete(controller.shutdown())
        loop.close()
