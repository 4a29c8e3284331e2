"""Half messages and END_TRANSACTION on an in-process broker with a real store (no sockets): the prepare,
commit and rollback paths and their refusals (broker/transaction.py, broker/end_transaction.py)."""

from __future__ import annotations

import pytest

from reference_broker.common import message as mc
from reference_broker.common import transaction as tx
from reference_broker.common.record import decode_message_id
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from tests.broker.broker_helpers import send_request, wait_dispatched
from tests.broker.test_processors import broker, call  # noqa: F401 - the fixture

PG = "TX_PG"


def _prepare(broker, topic="TxT", body=b"payload", queue_id=2, **props):  # noqa: F811
    props = {"TRAN_MSG": "true", "PGROUP": PG, "TAGS": "tagA", "KEYS": "k1", "UNIQ_KEY": "U1", "WAIT": "true",
             **props}
    r = call(broker, broker.send_processor, send_request(topic, body, queue_id, props, producerGroup=PG))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


def _end(broker, r, kind, group=PG, table_offset=None, commit_log_offset=None, from_check=False):  # noqa: F811
    _ip, _port, offset = decode_message_id(r.ext_fields["msgId"])
    header = tx.end_transaction_header(group, int(r.ext_fields["queueOffset"]) if table_offset is None else table_offset,
                                       offset if commit_log_offset is None else commit_log_offset, kind, "U1",
                                       from_check=from_check)
    return call(broker, broker.end_transaction_processor, create_request(RequestCode.END_TRANSACTION, header))


def _pull(broker, topic, queue_id):  # noqa: F811
    """Every message of a queue, read from the store (the system topics are not in the topic table)."""
    broker.run(wait_dispatched, broker)
    store = broker.store
    out = []
    for i in range(max(0, store.get_min_offset_in_queue(topic, queue_id)), store.get_max_offset_in_queue(topic, queue_id)):
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
