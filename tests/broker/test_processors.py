"""Broker processors called directly (no sockets) on an in-process controller with a real store."""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

from reference_broker.common import message as mc
from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.message_batch import BatchEntry, encode_batch
from reference_broker.common.record import decode_messages
from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request, json_dumps, json_loads
from reference_broker.store.status import PutMessageResult, PutMessageStatus
from tests.broker.broker_helpers import (
    UNUSED_PORT,
    FakeConn,
    make_controller,
    pull_request,
    send_request,
    wait_dispatched,
)


class _NoSocket:
    def __init__(self, *args, **kwargs):
        raise AssertionError("a processor test opened a socket")


@pytest.fixture
def broker(tmp_path, monkeypatch):
    loop = asyncio.new_event_loop()  # its self-pipe is the one socket pair, made before the guard
    controller = make_controller(tmp_path)
    monkeypatch.setattr(socket, "socket", _NoSocket)  # until after shutdown (monkeypatch outlives this fixture)
    loop.run_until_complete(controller.start(listen=False))

    def run(coro_fn: Callable[..., Awaitable], *args):
        return loop.run_until_complete(asyncio.wait_for(coro_fn(*args), 20))

    controller.run = run
    yield controller
    loop.run_until_complete(controller.shutdown())
    loop.close()


async def answer(processor, conn, cmd):
    """A handler answers at once or with an awaitable, as the server allows."""
    result = processor.handle(conn, cmd)
    result = await result if inspect.isawaitable(result) else result
    if isinstance(result, bytes):  # a frame the processor encoded itself: read it back as a peer would
        decoder = FrameDecoder()
        decoder.feed(result)
        result = decoder.next_frame()
        assert result is not None and decoder.buffered == 0
    return result


def call(broker, processor, cmd, conn=None):
    return broker.run(answer, processor, conn or FakeConn(), cmd)


def test_send_v1_and_v2_store_and_answer_with_offsets(broker):
    r1 = call(broker, broker.send_processor, send_request("T", b"one", 1, {"TAGS": "a", "KEYS": "k1"}, v2=False))
    r2 = call(broker, broker.send_processor, send_request("T", b"two", 1, {"TAGS": "a"}))
    assert (r1.code, r2.code) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    assert (r1.ext_fields["queueOffset"], r2.ext_fields["queueOffset"]) == ("0", "1")
    assert r1.ext_fields["queueId"] == "1"
    msg = broker.store.look_message_by_msg_id(r1.ext_fields["msgId"])
    assert msg is not None and msg.body == b"one" and msg.keys == "k1"
    assert msg.properties["CLUSTER"] == broker.broker_config.broker_cluster_name
    tc = broker.topic_config_manager.select_topic_config("T")
    assert tc is not None and tc.write_queue_nums == 4, "auto-created from TBW102 with the producer's 4 queues"


def test_a_send_that_auto_creates_its_topic_answers_once_topics_json_holds_it(broker):
    # createTopicInSendMessageMethod persists before the send goes on; ours is written by the writer thread
    # and the send's answer waits for it, so an acknowledged message's topic survives a crash.
    tcm = broker.topic_config_manager
    tcm.persister._write = lambda: (time.sleep(0.3), tcm.persist())  # a slow disk
    r = call(broker, broker.send_processor, send_request("AutoCreated", b"x"))
    assert r.code == ResponseCode.SUCCESS
    topics = json.loads(broker.topic_config_manager.config_file_path().read_text())["topicConfigTable"]
    assert "AutoCreated" in topics
    writes = broker.topic_config_manager.persister.writes
    assert call(broker, broker.send_processor, send_request("AutoCreated", b"y")).code == ResponseCode.SUCCESS
    assert broker.topic_config_manager.persister.writes == writes  # a send that creates nothing writes nothing


def test_send_checks_map_to_rocketmq_codes(broker):
    sp = broker.send_processor
    assert call(broker, sp, send_request("bad topic!", b"x")).code == ResponseCode.SYSTEM_ERROR
    r = call(broker, sp, send_request("SCHEDULE_TOPIC_XXXX", b"x"))
    assert r.code == ResponseCode.NO_PERMISSION and "forbidden" in r.remark
    r = call(broker, sp, send_request("T", b"x", queue_id=99))
    assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in r.remark
    broker.broker_config.auto_create_topic_enable = False
    broker.topic_config_manager.topic_config_table.pop("TBW102", None)
    r = call(broker, sp, send_request("Unknown", b"x"))
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and "apply first please" in r.remark
    missing = create_request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x")
    r = call(broker, sp, missing)
    assert r.code == ResponseCode.SYSTEM_ERROR and "is null" in r.remark


def test_oversized_body_is_message_illegal(broker):
    big = b"x" * (broker.message_store_config.max_message_size + 1)
    r = call(broker, broker.send_processor, send_request("T", big))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL


def test_transactional_prepare_is_refused_when_reject_transaction_message_is_set(broker):
    broker.broker_config.reject_transaction_message = True
    r = call(broker, broker.send_processor, send_request("T", b"x", props={"TRAN_MSG": "true"}))
    assert r.code == ResponseCode.NO_PERMISSION and "sending transaction message is forbidden" in r.remark


def test_put_status_mapping_matches_handle_put_message_result():
    from reference_broker.broker.send_processor import put_result_response
    from reference_broker.store.status import AppendMessageResult, AppendMessageStatus

    req = create_request(RequestCode.SEND_MESSAGE, {})
    ok_append = AppendMessageResult(AppendMessageStatus.PUT_OK, 100, 50, "ID", 0, 7)
    expect = {
        PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, True),
        PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, True),
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, True),
        PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, True),
        PutMessageStatus.CREATE_MAPEDFILE_FAILED: (ResponseCode.SYSTEM_ERROR, False),
        PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, False),
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, False),
        PutMessageStatus.SERVICE_NOT_AVAILABLE: (ResponseCode.SERVICE_NOT_AVAILABLE, False),
        PutMessageStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_ERROR, False),
        PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, False),
    }
    for status, (code, stored) in expect.items():
        resp = put_result_response(req, PutMessageResult(status, ok_append if status.is_stored else None), 3)
        assert resp.code == code, status
        assert ("queueOffset" in resp.ext_fields) == stored, status
        if stored:
            assert resp.ext_fields["queueOffset"] == "7"
    busy = put_result_response(req, PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY), 0)
    assert busy.remark.startswith("[PC_SYNCHRONIZED]")


def test_batch_send_gives_consecutive_offsets(broker):
    entries = [BatchEntry(0, f"m{i}".encode(), {"UNIQ_KEY": f"U{i}", "KEYS": f"k{i}"}) for i in range(5)]
    req = send_request("B", encode_batch(entries), queue_id=2, v2=False)
    req.code = RequestCode.SEND_BATCH_MESSAGE
    r = call(broker, broker.send_processor, req)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert len(r.ext_fields["msgId"].split(",")) == 5
    broker.run(wait_dispatched, broker)
    p = call(broker, broker.pull_processor, pull_request("B", 2, 0))
    msgs = decode_messages(p.body)
    assert [m.body for m in msgs] == [f"m{i}".encode() for i in range(5)]
    assert [m.queue_offset for m in msgs] == list(range(5))
    assert [m.properties["CLUSTER"] for m in msgs] == [broker.broker_config.broker_cluster_name] * 5
    assert [(m.keys, m.properties["UNIQ_KEY"]) for m in msgs] == [(f"k{i}", f"U{i}") for i in range(5)]
    bad = send_request("B", b"\x00\x00\x00\x05garbage", v2=False)
    bad.code = RequestCode.SEND_BATCH_MESSAGE
    r = call(broker, broker.send_processor, bad)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and r.remark.startswith("bad batch body: "), r.remark


def test_pull_status_codes(broker):
    pp = broker.pull_processor
    assert call(broker, pp, pull_request("Nope", 0, 0)).code == ResponseCode.TOPIC_NOT_EXIST
    call(broker, broker.send_processor, send_request("P", b"a"))
    broker.run(wait_dispatched, broker)
    assert call(broker, pp, pull_request("P", 0, 0)).code == ResponseCode.SUCCESS
    r = call(broker, pp, pull_request("P", 0, 1))
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "1"
    r = call(broker, pp, pull_request("P", 0, 50))
    assert r.code == ResponseCode.PULL_OFFSET_MOVED
    assert call(broker, pp, pull_request("P", 9, 0)).code == ResponseCode.SYSTEM_ERROR
    # an empty queue of an existing topic at offset 0 is simply "not found"
    assert call(broker, pp, pull_request("P", 3, 0)).code == ResponseCode.PULL_NOT_FOUND


def test_pull_filters_by_tag_hash(broker):
    for tag in ("a", "b", "a", "c"):
        call(broker, broker.send_processor, send_request("F", tag.encode(), props={"TAGS": tag}))
    broker.run(wait_dispatched, broker)
    r = call(broker, broker.pull_processor, pull_request("F", 0, 0, sub="a || c"))
    assert [m.body for m in decode_messages(r.body)] == [b"a", b"a", b"c"]
    r = call(broker, broker.pull_processor, pull_request("F", 0, 1, sub="b", max_nums=1))
    assert [m.body for m in decode_messages(r.body)] == [b"b"]
    r = call(broker, broker.pull_processor, pull_request("F", 0, 2, sub="zzz"))
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext_fields["nextBeginOffset"] == "4"
    assert string_hash_code("a") != string_hash_code("c")


def test_long_polling_wakes_on_arrival(broker):
    call(broker, broker.send_processor, send_request("L", b"first"))
    broker.run(wait_dispatched, broker)

    async def scenario():
        held = asyncio.ensure_future(broker.pull_processor.handle(FakeConn(), pull_request("L", 0, 1,
                                                                                          suspend_ms=15_000)))
        await asyncio.sleep(0.1)
        assert not held.done(), "nothing to read: the pull is held"
        assert broker.hold_service.held_count() == 1
        await answer(broker.send_processor, FakeConn(), send_request("L", b"second"))
        resp = await asyncio.wait_for(held, 5)
        return resp

    resp = broker.run(scenario)
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.body)] == [b"second"]


def test_pull_commit_offset_flag_stores_the_offset(broker):
    call(broker, broker.send_processor, send_request("O", b"x"))
    broker.run(wait_dispatched, broker)
    call(broker, broker.pull_processor, pull_request("O", 0, 0, sys_flag=1 | 4, commit_offset=1))
    assert broker.consumer_offset_manager.query_offset("cg", "O", 0) == 1


def _heartbeat(group, client_id, topics, model="CLUSTERING"):
    body = {"clientID": client_id, "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": model,
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": t, "subString": "*", "subVersion": 1} for t in topics]}]}
    return create_request(RequestCode.HEART_BEAT, {}, json_dumps(body))


def test_heartbeat_registers_notifies_and_creates_retry_topic(broker):
    cp = broker.client_processor
    a, b = FakeConn("127.0.0.1:1"), FakeConn("127.0.0.1:2")
    assert call(broker, cp, _heartbeat("g1", "A", ["T"]), a).code == ResponseCode.SUCCESS
    assert broker.topic_config_manager.select_topic_config("%RETRY%g1") is not None
    call(broker, cp, _heartbeat("g1", "B", ["T"]), b)
    broker.run(asyncio.sleep, 0.01)
    notified = [c for c in a.sent if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]
    assert notified and notified[-1].ext_fields["consumerGroup"] == "g1" and notified[-1].is_oneway
    r = call(broker, cp, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}))
    assert sorted(json_loads(r.body)["consumerIdList"]) == ["A", "B"]
    before = len(a.sent)
    cp.on_channel_close(b)
    broker.run(asyncio.sleep, 0.01)
    assert len(a.sent) == before + 1, "the remaining member is told that B left"
    r = call(broker, cp, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}))
    assert json_loads(r.body)["consumerIdList"] == ["A"]
    assert call(broker, cp, create_request(RequestCode.HEART_BEAT, {}, b"{not json")).code == \
        ResponseCode.SYSTEM_ERROR


def test_query_consumer_offset_new_group_rule(broker):
    cp = broker.client_processor
    q = {"consumerGroup": "new", "topic": "Q", "queueId": "0"}
    # no message at all: min offset 0 and nothing in disk → 0 (RocketMQ's "in memory" rule)
    r = call(broker, cp, create_request(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert (r.code, r.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0")
    call(broker, cp, create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "5"}))
    r = call(broker, cp, create_request(RequestCode.QUERY_CONSUMER_OFFSET, q))
    assert r.ext_fields["offset"] == "5"


def test_lock_batch_is_exclusive(broker):
    cp = broker.client_processor
    mq = {"topic": "T", "brokerName": "broker-t", "queueId": 0}

    def lock(cid):
        body = json_dumps({"consumerGroup": "g", "clientId": cid, "mqSet": [mq]})
        return json_loads(call(broker, cp, create_request(RequestCode.LOCK_BATCH_MQ, {}, body)).body)["lockOKMQSet"]

    assert lock("A") == [mq]
    assert lock("B") == []
    call(broker, cp, create_request(RequestCode.UNLOCK_BATCH_MQ, {}, json_dumps(
        {"consumerGroup": "g", "clientId": "A", "mqSet": [mq]})))
    assert lock("B") == [mq]


def stored_then_sent_back(broker, topic, body, uniq, group, delay_level):
    """Store a message, then the CONSUMER_SEND_MSG_BACK request a consumer of ``group`` would send for it."""
    r = call(broker, broker.send_processor, send_request(topic, body, props={"UNIQ_KEY": uniq}))
    msg = broker.store.look_message_by_msg_id(r.ext_fields["msgId"])
    return create_request(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": str(msg.commit_log_offset), "group": group, "delayLevel": str(delay_level), "originMsgId": uniq,
        "originTopic": topic, "unitMode": "false", "maxReconsumeTimes": "16"})


def test_send_back_goes_to_retry_then_dlq(broker):
    back = stored_then_sent_back(broker, "S", b"payload", "U1", "g", 0)
    r = call(broker, broker.send_processor, back)
    assert r.code == ResponseCode.SUCCESS
    broker.run(wait_dispatched, broker)
    # delay level 3 + reconsumeTimes(0) = 3 → SCHEDULE_TOPIC_XXXX queue 2, real topic %RETRY%g
    res = broker.store.get_message("x", "SCHEDULE_TOPIC_XXXX", 2, 0, 10)
    scheduled = decode_messages(b"".join(res.messages))
    assert len(scheduled) == 1
    s = scheduled[0]
    assert s.properties[mc.PROPERTY_REAL_TOPIC] == "%RETRY%g"
    assert s.properties[mc.PROPERTY_RETRY_TOPIC] == "S"
    assert s.properties[mc.PROPERTY_ORIGIN_MESSAGE_ID] == "U1"
    assert s.reconsume_times == 1
    # past maxReconsumeTimes: straight to %DLQ%g (no DELAY left on it), readable (perm 6, 4.9.2+)
    back_dlq = {**back.ext_fields, "offset": str(s.commit_log_offset), "maxReconsumeTimes": "1"}
    r = call(broker, broker.send_processor, create_request(RequestCode.CONSUMER_SEND_MSG_BACK, back_dlq))
    assert r.code == ResponseCode.SUCCESS
    broker.run(wait_dispatched, broker)
    res = broker.store.get_message("x", "%DLQ%g", 0, 0, 10)
    dlq = decode_messages(b"".join(res.messages))
    assert len(dlq) == 1 and dlq[0].body == b"payload" and "DELAY" not in dlq[0].properties
    assert broker.topic_config_manager.select_topic_config("%DLQ%g").perm == 6


def test_admin_topic_offsets_and_queries(broker):
    ap = broker.admin_processor
    r = call(broker, ap, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "Adm", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}))
    assert r.code == ResponseCode.SUCCESS
    assert call(broker, ap, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "Adm", "readQueueNums": "0", "writeQueueNums": "2", "perm": "6"})).code == ResponseCode.SYSTEM_ERROR
    for i in range(3):
        call(broker, broker.send_processor, send_request("Adm", b"m%d" % i, 1, {"KEYS": f"key{i}"}))
    broker.run(wait_dispatched, broker)
    r = call(broker, ap, create_request(RequestCode.GET_MAX_OFFSET, {"topic": "Adm", "queueId": "1"}))
    assert r.ext_fields["offset"] == "3"
    r = call(broker, ap, create_request(RequestCode.QUERY_MESSAGE, {
        "topic": "Adm", "key": "key1", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)}))
    assert r.code == ResponseCode.SUCCESS and [m.body for m in decode_messages(r.body)] == [b"m1"]
    r = call(broker, ap, create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {}))
    assert "Adm" in json_loads(r.body)["topicConfigTable"]
    r = call(broker, ap, create_request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    assert int(json_loads(r.body)["table"]["commitLogMaxOffset"]) > 0
    r = call(broker, ap, create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "999999999"}))
    assert r.code == ResponseCode.SYSTEM_ERROR


def test_send_that_queued_too_long_gets_system_busy(broker):
    req = send_request("Busy", b"x")

    async def late():
        req.received_at = asyncio.get_running_loop().time() - 0.5  # decoded 500 ms ago
        return await answer(broker.send_processor, FakeConn(), req)

    r = broker.run(late)
    assert r.code == ResponseCode.SYSTEM_BUSY and r.remark.startswith("[TIMEOUT_CLEAN_QUEUE]")
    assert broker.store.get_max_offset_in_queue("Busy", 0) == 0, "refused, not stored"


def test_batch_with_v2_header_letters_as_rocketmq_clients_send_it(broker):
    entries = [BatchEntry(0, f"v{i}".encode(), {"UNIQ_KEY": f"V{i}"}) for i in range(3)]
    req = send_request("B2", encode_batch(entries), queue_id=0, v2=True)
    req.code = RequestCode.SEND_BATCH_MESSAGE
    r = call(broker, broker.send_processor, req)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert r.ext_fields["queueOffset"] == "0" and len(r.ext_fields["msgId"].split(",")) == 3


def test_get_broker_config_lists_rocketmq_keys(broker):
    r = call(broker, broker.admin_processor, create_request(RequestCode.GET_BROKER_CONFIG, {}))
    assert r.code == ResponseCode.SUCCESS
    conf = dict(line.split("=", 1) for line in r.body.decode().splitlines())
    assert conf["brokerName"] == "broker-t"
    assert conf["flushDiskType"] == "ASYNC_FLUSH"
    assert conf["autoCreateTopicEnable"] == "true"
    assert conf["listenPort"] == str(broker.broker_config.listen_port)


# ---- no sockets --------------------------------------------------------------------------------------
def test_processor_broker_neither_listens_nor_talks_to_name_servers(broker):
    assert not broker.listening and broker.server.port == 0 and broker.server.connections == []
    assert broker.broker_config.listen_port == UNUSED_PORT
    with pytest.raises(AssertionError, match="opened a socket"):
        socket.socket()  # the fixture's guard is in force, so every test here proves it opened none
    calls = []
    broker.register_all = lambda: calls.append("register")
    broker.unregister_all = lambda: calls.append("unregister")
    broker.broker_config.namesrv_addr = "127.0.0.1:9876"
    r = call(broker, broker.admin_processor, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "NoNs", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}))
    assert r.code == ResponseCode.SUCCESS
    broker.run(asyncio.sleep, 0.05)  # a listening broker re-registers 10 ms after a topic change
    broker.run(broker.shutdown)
    assert calls == []


def test_start_with_listen_opens_a_socket(tmp_path, monkeypatch):
    """The other side of the guard: the production start() listens, so the guard would catch it."""
    loop = asyncio.new_event_loop()
    controller = make_controller(tmp_path)
    monkeypatch.setattr(socket, "socket", _NoSocket)
    try:
        with pytest.raises(AssertionError, match="opened a socket"):
            loop.run_until_complete(controller.start())
    finally:
        loop.run_until_complete(controller.shutdown())
        loop.close()


# ---- subscription groups, unregistering, send-back to the DLQ ---------------------------------------
def test_update_and_create_subscription_group_is_persisted(broker):
    ap = broker.admin_processor
    path = broker.subscription_group_manager.config_file_path()
    assert path == broker.message_store_config.store_path_root_dir / "config" / "subscriptionGroup.json"

    def update(**fields):
        body = json_dumps({"groupName": "SG", **fields})
        return call(broker, ap, create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body))

    assert update(retryQueueNums=2, retryMaxTimes=5, consumeBroadcastEnable=False).code == ResponseCode.SUCCESS
    on_disk = json.loads(path.read_text())
    assert on_disk["subscriptionGroupTable"]["SG"]["retryQueueNums"] == 2
    assert on_disk["subscriptionGroupTable"]["SG"]["retryMaxTimes"] == 5
    assert on_disk["subscriptionGroupTable"]["SG"]["consumeBroadcastEnable"] is False
    created_version = on_disk["dataVersion"]["counter"]
    assert update(retryMaxTimes=3).code == ResponseCode.SUCCESS  # an update replaces the whole config
    on_disk = json.loads(path.read_text())
    assert on_disk["subscriptionGroupTable"]["SG"]["retryMaxTimes"] == 3
    assert on_disk["subscriptionGroupTable"]["SG"]["retryQueueNums"] == 1
    assert on_disk["dataVersion"]["counter"] == created_version + 1
    r = call(broker, ap, create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}))
    assert json_loads(r.body)["subscriptionGroupTable"]["SG"]["retryMaxTimes"] == 3
    assert broker.subscription_group_manager.find_subscription_group_config("SG").retry_max_times == 3
    bad = call(broker, ap, create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b"{not json"))
    assert bad.code == ResponseCode.SYSTEM_ERROR


def _unregister(group, client_id):
    return create_request(RequestCode.UNREGISTER_CLIENT, {"clientID": client_id, "producerGroup": "pg",
                                                         "consumerGroup": group})


def _notified(conn, since):
    return [c.ext_fields["consumerGroup"] for c in conn.sent[since:]
            if c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]


def test_unregister_client_drops_the_registrations_and_notifies_the_rest_of_the_group(broker):
    cp = broker.client_processor
    a, b = FakeConn("127.0.0.1:1"), FakeConn("127.0.0.1:2")
    call(broker, cp, _heartbeat("g1", "A", ["T"]), a)
    call(broker, cp, _heartbeat("g1", "B", ["T"]), b)
    broker.run(asyncio.sleep, 0.01)
    assert set(broker.producer_manager.table["pg"]) == {a, b}
    a_seen, b_seen = len(a.sent), len(b.sent)
    assert call(broker, cp, _unregister("g1", "B"), b).code == ResponseCode.SUCCESS
    broker.run(asyncio.sleep, 0.01)
    assert set(broker.producer_manager.table["pg"]) == {a}
    assert broker.consumer_manager.client_ids("g1") == ["A"]
    assert _notified(a, a_seen) == ["g1"], "the remaining member rebalances"
    assert len(b.sent) == b_seen, "the client that left is not told"
    # the last member leaving removes the group
    assert call(broker, cp, _unregister("g1", "A"), a).code == ResponseCode.SUCCESS
    assert "g1" not in broker.consumer_manager.table and "pg" not in broker.producer_manager.table
    r = call(broker, cp, create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}))
    assert r.code == ResponseCode.SYSTEM_ERROR


def test_unregister_client_does_not_notify_a_group_with_notification_off(broker):
    """ConsumerManager.unregisterConsumer's isNotifyConsumerIdsChangedEnable comes from the group's config."""
    cp = broker.client_processor
    body = json_dumps({"groupName": "quiet", "notifyConsumerIdsChangedEnable": False})
    call(broker, broker.admin_processor, create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body))
    a, b = FakeConn("127.0.0.1:1"), FakeConn("127.0.0.1:2")
    call(broker, cp, _heartbeat("quiet", "A", ["T"]), a)
    call(broker, cp, _heartbeat("quiet", "B", ["T"]), b)
    assert call(broker, cp, _unregister("quiet", "B"), b).code == ResponseCode.SUCCESS
    broker.run(asyncio.sleep, 0.01)
    assert broker.consumer_manager.client_ids("quiet") == ["A"]
    assert _notified(a, 0) == []


def test_a_send_back_without_origin_msg_id_names_the_offset_id(broker):
    """4.9.8 falls back to the looked-up message's getMsgId(), on the broker its offset id (not UNIQ_KEY):
    RocketMQ's C++ client sends no originMsgId (tests/interop)."""
    back = stored_then_sent_back(broker, "S3", b"p", "U3", "g3", -1)
    original = broker.store.look_message_by_offset(int(back.ext_fields["offset"]))
    del back.ext_fields["originMsgId"]
    assert call(broker, broker.send_processor, back).code == ResponseCode.SUCCESS
    broker.run(wait_dispatched, broker)
    (dead,) = decode_messages(b"".join(broker.store.get_message("x", "%DLQ%g3", 0, 0, 10).messages))
    assert dead.properties[mc.PROPERTY_ORIGIN_MESSAGE_ID] == original.offset_msg_id != "U3"


def test_send_back_with_delay_level_minus_one_goes_straight_to_the_dlq(broker):
    r = call(broker, broker.send_processor, stored_then_sent_back(broker, "S2", b"poison", "U2", "g2", -1))
    assert r.code == ResponseCode.SUCCESS
    broker.run(wait_dispatched, broker)
    res = broker.store.get_message("x", "%DLQ%g2", 0, 0, 10)
    dlq = decode_messages(b"".join(res.messages))
    assert [m.body for m in dlq] == [b"poison"], "reconsumeTimes 0 of 16, yet to the DLQ: delayLevel < 0"
    d = dlq[0]
    assert d.reconsume_times == 1 and "DELAY" not in d.properties
    assert d.properties[mc.PROPERTY_RETRY_TOPIC] == "S2" and d.properties[mc.PROPERTY_ORIGIN_MESSAGE_ID] == "U2"
    assert all(broker.store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", q) == 0 for q in range(18))
    assert broker.store.get_max_offset_in_queue("%RETRY%g2", 0) == 0


# ---- flow control -----------------------------------------------------------------------------------
def test_send_while_a_put_holds_the_writer_too_long_is_rejected_as_system_busy(broker):
    """SendMessageProcessor.rejectRequest: isOSPageCacheBusy (a put in the commit-log lock for more than
    osPageCacheBusyTimeOutMills, 1 s) → SYSTEM_BUSY with NettyRemotingAbstract's remark."""
    store = broker.store
    assert not store.is_os_page_cache_busy()
    back = stored_then_sent_back(broker, "PcBusy0", b"y", "U9", "gb", 0)
    store.commit_log.begin_time_in_lock = time.time_ns() // 1_000_000 - 1500  # a put entered the lock 1.5 s ago
    try:
        assert store.is_os_page_cache_busy()
        r = call(broker, broker.send_processor, send_request("PcBusy", b"x"))
        # rejectRequest covers every code of the processor: a consumer's send-back too.
        r_back = call(broker, broker.send_processor, back)
    finally:
        store.commit_log.begin_time_in_lock = 0
    assert r.code == ResponseCode.SYSTEM_BUSY
    assert r.remark == "[REJECTREQUEST]system busy, start flow control for a while"
    assert (r_back.code, r_back.remark) == (r.code, r.remark)
    assert store.get_max_offset_in_queue("PcBusy", 0) == 0, "refused, not stored"
    assert call(broker, broker.send_processor, send_request("PcBusy", b"x")).code == ResponseCode.SUCCESS
