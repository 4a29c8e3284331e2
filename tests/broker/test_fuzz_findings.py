"""Defects the broker fuzzer (harness/fuzz.py) found, each pinned by a processor-level test on an in-process
controller (no socket): bad input is refused with an error code and never raises, wedges or persists."""

from __future__ import annotations

import asyncio
import json

import pytest

from reference_broker.broker.topic_config import TopicConfigManager
from reference_broker.common.record import decode_messages
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import create_request
from reference_broker.remoting.headers import BadRequest, int_of
from tests.broker.broker_helpers import FakeConn, make_controller, pull_request, send_request
from tests.broker.test_processors import answer


@pytest.fixture
def broker(tmp_path):
    loop = asyncio.new_event_loop()
    controller = make_controller(tmp_path)
    loop.run_until_complete(controller.start(listen=False))
    controller.answer = lambda processor, cmd: loop.run_until_complete(
        asyncio.wait_for(answer(processor, FakeConn(), cmd), 20))
    yield controller
    loop.run_until_complete(controller.shutdown())
    loop.close()


# ---- numbers past their Java type (fuzz seed 1, cases 53, 64, 232, 398) -----------------------------------
@pytest.mark.parametrize("key,value", [
    ("flag", "2147483648"), ("sysFlag", "9223372036854775807"), ("reconsumeTimes", "-2147483649"),
    ("bornTimestamp", "9223372036854775808"), ("bornTimestamp", "-9223372036854775809"),
    ("queueId", "4294967296"),
])
def test_a_send_with_a_number_past_its_type_is_refused_not_raised(broker, key, value):
    resp = broker.answer(broker.send_processor, send_request("T", b"x", **{key: value}))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "out of range" in resp.remark  # the header check, not the server's safety net ("error: ...")


def test_a_send_with_numbers_at_their_limits_is_stored(broker):
    resp = broker.answer(broker.send_processor, send_request(
        "T", b"x", flag="2147483647", bornTimestamp="9223372036854775807", reconsumeTimes="2147483647"))
    assert resp.code == ResponseCode.SUCCESS


def test_a_pull_with_a_queue_offset_past_a_long_is_refused(broker):
    cmd = pull_request("T", 0, 0)
    cmd.ext_fields["queueOffset"] = str(2**64)
    resp = broker.answer(broker.pull_processor, cmd)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "out of range" in resp.remark


@pytest.mark.parametrize("text", [" 1", "1 ", "1_000", "0x10", "1e3", "", "+", "9" * 5000])
def test_header_numbers_follow_java_parse_long(text):
    with pytest.raises(BadRequest):
        int_of({"queueOffset": text}, "queueOffset")


@pytest.mark.parametrize("text,number", [("+5", 5), ("-0", 0), ("\u0663", 3), ("-2147483648", -(2**31))])
def test_header_numbers_java_accepts(text, number):
    assert int_of({"queueId": text}, "queueId") == number


# ---- a topic the broker could not load again (fuzz seed 1: the restart after SIGTERM failed) ---------------
def _create_topic(**extra):
    fields = {"topic": "Created", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
              "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false", **extra}
    return create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)


@pytest.mark.parametrize("extra", [{"topicFilterType": "a\x00b"}, {"topicFilterType": ""},
                                   {"topicSysFlag": str(2**63)}])
def test_update_topic_refuses_what_topics_json_could_not_load(broker, tmp_path, extra):
    resp = broker.answer(broker.admin_processor, _create_topic(**extra))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "Created" not in broker.topic_config_manager.topic_config_table
    broker.topic_config_manager.persist()
    assert TopicConfigManager(tmp_path).load()  # the next start can read the table back


def test_update_topic_with_a_valid_filter_type_is_stored(broker):
    resp = broker.answer(broker.admin_processor, _create_topic(topicFilterType="MULTI_TAG"))
    assert resp.code == ResponseCode.SUCCESS
    assert broker.topic_config_manager.topic_config_table["Created"].topic_filter_type == "MULTI_TAG"


# ---- VIEW_MESSAGE_BY_ID at an offset that is not a record's start (fuzz seed 2, cases 4666 and 4741) -------
def test_view_by_id_inside_a_record_is_not_found(broker):
    marker = b"\x00\x00\x01\x00"  # read as a TOTALSIZE: 256 bytes, a plausible record
    first = broker.answer(broker.send_processor, send_request("T", marker * 8))
    for _ in range(3):
        broker.answer(broker.send_processor, send_request("T", b"filler" * 50))
    phy = broker.store.look_message_by_msg_id(first.ext_fields["msgId"]).commit_log_offset
    inside = phy + broker.store.select_one_message_by_offset(phy).index(marker)
    view = create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(inside)})
    resp = broker.answer(broker.admin_processor, view)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "can not find message" in resp.remark
    ok = broker.answer(broker.admin_processor, create_request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}))
    assert ok.code == ResponseCode.SUCCESS and decode_messages(ok.body)[0].body == marker * 8


# ---- a subscription group whose retry queues overflow an int (fuzz seed 11: a delay level failed forever) ----
def _update_group(**values):
    obj = {"groupName": "G", "consumeEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
           **values}
    return create_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps(obj).encode())


@pytest.mark.parametrize("values", [{"retryQueueNums": 2**31}, {"retryMaxTimes": -(2**31) - 1},
                                    {"brokerId": 2**63}])
def test_update_group_refuses_numbers_past_their_java_type(broker, values):
    resp = broker.answer(broker.admin_processor, _update_group(**values))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "out of range" in resp.remark
    assert "G" not in broker.subscription_group_manager.subscription_group_table


def test_update_group_at_the_limits_is_stored(broker):
    resp = broker.answer(broker.admin_processor, _update_group(retryQueueNums=2**31 - 1, brokerId=2**63 - 1))
    assert resp.code == ResponseCode.SUCCESS
    assert broker.subscription_group_manager.subscription_group_table["G"].retry_queue_nums == 2**31 - 1


def test_a_stored_group_table_with_such_a_number_still_loads(tmp_path):
    # written by a broker from before the range check: the next start must not fail on it
    from reference_broker.broker.subscription_group import SubscriptionGroupManager

    sgm = SubscriptionGroupManager(tmp_path)
    path = sgm.config_file_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"subscriptionGroupTable": {"G": {"groupName": "G", "retryQueueNums": 2**63}},
                                "dataVersion": {"timestamp": 0, "counter": 0}}))
    assert sgm.load()


# ---- a flood of GET_ALL_TOPIC_CONFIG (fuzz seed 484344026, case 54326: 471 of them stalled the probe 5 s) ----
def test_a_whole_table_is_encoded_once_per_data_version(broker, monkeypatch):
    tcm = broker.topic_config_manager
    encodes = []
    real = tcm.encode
    monkeypatch.setattr(tcm, "encode", lambda *a, **k: encodes.append(1) or real(*a, **k))
    get_all = lambda: broker.answer(broker.admin_processor, create_request(RequestCode.GET_ALL_TOPIC_CONFIG, {}))  # noqa: E731
    bodies = [get_all().body for _ in range(50)]
    assert len(encodes) == 1 and len(set(bodies)) == 1
    r = broker.answer(broker.admin_processor, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "FloodNew", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}))
    assert r.code == ResponseCode.SUCCESS
    after = get_all().body
    assert "FloodNew" in json.loads(after)["topicConfigTable"] and "FloodNew" not in json.loads(bodies[0])[
        "topicConfigTable"]
    groups = lambda: broker.answer(broker.admin_processor,  # noqa: E731
                                   create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})).body
    before_groups = groups()
    broker.subscription_group_manager.find_subscription_group_config("FloodGroup")  # auto-created
    assert b"FloodGroup" in groups() and b"FloodGroup" not in before_groups
