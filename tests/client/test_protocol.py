"""What the client puts on the wire and how it reads answers (sans-IO: commands in, results out)."""

from __future__ import annotations

import pytest

from reference_broker.client import protocol
from reference_broker.client.errors import MQBrokerError
from reference_broker.client.message import MessageQueue, PullStatus, SendStatus
from reference_broker.client.subscription import build_subscription_data
from reference_broker.common import message as mc
from reference_broker.common.java_hash import string_hash_code
from reference_broker.common.record import (
    decode_messages,
    host_bytes,
    prepare_record,
    record_length,
    write_record,
)
from reference_broker.remoting.codec import FrameDecoder
from reference_broker.remoting.codes import RequestCode, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response, encode, json_loads
from reference_broker.remoting.headers import SEND_V2_KEYS, build_pull_sys_flag, send_v2_to_v1

MQ = MessageQueue("T", "broker-a", 3)


def wire_round_trip(cmd: RemotingCommand) -> RemotingCommand:
    decoder = FrameDecoder()
    decoder.feed(encode(cmd))
    out = decoder.next_frame()
    assert out is not None
    return out


def records(*items: tuple[int, bytes, dict[str, str]], topic: str = "T", queue_id: int = 3) -> bytes:
    """Commit-log records as a PULL response body carries them: (queue offset, body, properties) each."""
    out = bytearray()
    phys = 1000
    for queue_offset, body, props in items:
        topic_b, props_b = topic.encode(), mc.properties_to_bytes(props)
        total = record_length(len(body), len(topic_b), len(props_b))
        start = len(out)
        out += bytes(total)
        r = prepare_record(topic_b, body, props_b, queue_id, 0, 0, 1, host_bytes("127.0.0.1"), 5,
                           host_bytes("127.0.0.1"), 10911)
        write_record(out, start, r, queue_offset, phys, 2, False)
        phys += total
    return bytes(out)


def test_send_request_uses_v2_single_letter_keys_and_java_values() -> None:
    cmd = protocol.send_request("PG", "T", 3, b"body", "a\x01b", 7, born_timestamp=123)
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.version == protocol.CLIENT_VERSION == 409
    assert cmd.language == "PYTHON"
    assert set(cmd.ext_fields) <= set(SEND_V2_KEYS)
    assert send_v2_to_v1(cmd.ext_fields) == {
        "producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "3", "sysFlag": "0", "bornTimestamp": "123", "flag": "7", "properties": "a\x01b",
        "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }
    assert "l" not in cmd.ext_fields  # maxReconsumeTimes only for retry topics
    assert wire_round_trip(cmd).body == b"body"


def test_batch_request_is_send_batch_message_with_batch_true() -> None:
    cmd = protocol.send_request("PG", "T", 0, b"x", "", batch=True, born_timestamp=1, max_reconsume_times=3)
    assert cmd.code == RequestCode.SEND_BATCH_MESSAGE
    assert cmd.ext_fields["m"] == "true" and cmd.ext_fields["l"] == "3"


def test_properties_are_encoded_without_trailing_separator() -> None:
    assert protocol.encode_properties({"A": "1", "B": "2"}) == "A\x011\x02B\x012"
    assert mc.bytes_to_properties(protocol.encode_properties({"K": "v w"}).encode()) == {"K": "v w"}


@pytest.mark.parametrize(("code", "status"), [
    (ResponseCode.SUCCESS, SendStatus.SEND_OK),
    (ResponseCode.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
    (ResponseCode.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
    (ResponseCode.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE),
])
def test_stored_codes_give_a_send_result(code: int, status: SendStatus) -> None:
    req = protocol.send_request("PG", "T", 1, b"x", "", born_timestamp=1)
    resp = wire_round_trip(create_response(req, code, ext_fields={
        "msgId": "7F0000010000271F0000000000000000", "queueId": "1", "queueOffset": "42"}))
    result = protocol.process_send_response(resp, "T", "broker-a", "UNIQ")
    assert result.send_status is status
    assert result.msg_id == "UNIQ"
    assert result.offset_msg_id == "7F0000010000271F0000000000000000"
    assert result.message_queue == MessageQueue("T", "broker-a", 1)
    assert result.queue_offset == 42


@pytest.mark.parametrize(("code", "retriable"), [
    (ResponseCode.SYSTEM_ERROR, True),
    (ResponseCode.SERVICE_NOT_AVAILABLE, True),
    (ResponseCode.SYSTEM_BUSY, True),
    (ResponseCode.TOPIC_NOT_EXIST, True),
    (ResponseCode.NO_PERMISSION, True),
    (ResponseCode.MESSAGE_ILLEGAL, False),
])
def test_other_send_codes_raise_broker_errors_keyed_by_code(code: int, retriable: bool) -> None:
    req = protocol.send_request("PG", "T", 1, b"x", "", born_timestamp=1)
    resp = create_response(req, code, remark="nope")
    with pytest.raises(MQBrokerError) as info:
        protocol.process_send_response(resp, "T", "b", "U", "1.2.3.4:5")
    assert info.value.code == code
    assert info.value.remark == "nope"
    assert info.value.retriable is retriable
    assert info.value.addr == "1.2.3.4:5"


def test_pull_request_header_fields() -> None:
    flag = build_pull_sys_flag(commit_offset=True, suspend=True, subscription=False)
    cmd = protocol.pull_request("CG", MQ, None, "TAG", 99, 10, 32, flag, 7, 15000)
    assert cmd.code == RequestCode.PULL_MESSAGE
    assert cmd.ext_fields == {
        "consumerGroup": "CG", "topic": "T", "queueId": "3", "queueOffset": "10", "maxMsgNums": "32",
        "sysFlag": str(1 | 2), "commitOffset": "7", "suspendTimeoutMillis": "15000", "subVersion": "99",
        "expressionType": "TAG",
    }
    with_sub = protocol.pull_request("CG", MQ, "A || B", "TAG", 1, 0, 32, 6, 0, 20000)
    assert with_sub.ext_fields["subscription"] == "A || B"


@pytest.mark.parametrize(("code", "status"), [
    (ResponseCode.SUCCESS, PullStatus.FOUND),
    (ResponseCode.PULL_NOT_FOUND, PullStatus.NO_NEW_MSG),
    (ResponseCode.PULL_RETRY_IMMEDIATELY, PullStatus.NO_MATCHED_MSG),
    (ResponseCode.PULL_OFFSET_MOVED, PullStatus.OFFSET_ILLEGAL),
])
def test_pull_codes_map_to_pull_status(code: int, status: PullStatus) -> None:
    req = protocol.pull_request("CG", MQ, "*", "TAG", 1, 0, 32, 6, 0, 0)
    resp = create_response(req, code, ext_fields={"nextBeginOffset": "5", "minOffset": "0", "maxOffset": "9",
                                                  "suggestWhichBrokerId": "1"})
    result, _body = protocol.process_pull_response(wire_round_trip(resp))
    assert (result.pull_status, result.next_begin_offset, result.min_offset, result.max_offset,
            result.suggest_which_broker_id) == (status, 5, 0, 9, 1)


def test_pull_error_code_raises() -> None:
    req = protocol.pull_request("CG", MQ, "*", "TAG", 1, 0, 32, 6, 0, 0)
    with pytest.raises(MQBrokerError) as info:
        protocol.process_pull_response(create_response(req, ResponseCode.SUBSCRIPTION_NOT_EXIST, "no sub"))
    assert info.value.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


def test_found_body_is_decoded_tag_rechecked_and_stamped() -> None:
    body = records((5, b"a", {"TAGS": "A"}), (6, b"b", {"TAGS": "B"}), (7, b"c", {}), (8, b"d", {"TAGS": "A"}))
    req = protocol.pull_request("CG", MQ, "A", "TAG", 1, 5, 32, 6, 0, 0)
    resp = create_response(req, ResponseCode.SUCCESS, ext_fields={"nextBeginOffset": "9", "minOffset": "0",
                                                                  "maxOffset": "12"}, body=body)
    result, raw = protocol.process_pull_response(wire_round_trip(resp))
    result = protocol.finish_pull_result(result, raw, MQ, build_subscription_data("T", "A"))
    assert [(m.queue_offset, m.body) for m in result.msg_found_list] == [(5, b"a"), (8, b"d")]
    assert all(m.properties[mc.PROPERTY_MIN_OFFSET] == "0" for m in result.msg_found_list)
    assert all(m.properties[mc.PROPERTY_MAX_OFFSET] == "12" for m in result.msg_found_list)
    everything = protocol.finish_pull_result(protocol.process_pull_response(resp)[0], raw, MQ,
                                             build_subscription_data("T", "*"))
    assert [m.body for m in everything.msg_found_list] == [b"a", b"b", b"c", b"d"]


def test_offset_requests_and_answers() -> None:
    q = protocol.query_consumer_offset_request("CG", MQ)
    assert (q.code, q.ext_fields) == (RequestCode.QUERY_CONSUMER_OFFSET,
                                      {"topic": "T", "queueId": "3", "consumerGroup": "CG"})
    u = protocol.update_consumer_offset_request("CG", MQ, 77)
    assert (u.code, u.ext_fields["commitOffset"]) == (RequestCode.UPDATE_CONSUMER_OFFSET, "77")
    assert protocol.max_offset_request(MQ).ext_fields == {"topic": "T", "queueId": "3"}
    assert protocol.min_offset_request(MQ).code == RequestCode.GET_MIN_OFFSET
    assert protocol.search_offset_request(MQ, 5).ext_fields["timestamp"] == "5"
    assert protocol.offset_from_response(create_response(q, ResponseCode.SUCCESS, ext_fields={"offset": "12"})) == 12
    with pytest.raises(MQBrokerError) as info:
        protocol.offset_from_response(create_response(q, ResponseCode.QUERY_NOT_FOUND, "not found"))
    assert info.value.code == ResponseCode.QUERY_NOT_FOUND


def test_heartbeat_body_is_heartbeat_data_json() -> None:
    sub = build_subscription_data("T", "A || B")
    data = protocol.consumer_data("CG", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", [sub])
    body = json_loads(protocol.heartbeat_body("1.2.3.4@1", ["PG"], [data]))
    assert body["clientID"] == "1.2.3.4@1"
    assert body["producerDataSet"] == [{"groupName": "PG"}]
    (consumer,) = body["consumerDataSet"]
    assert consumer["groupName"] == "CG" and consumer["consumeType"] == "CONSUME_PASSIVELY"
    assert consumer["messageModel"] == "CLUSTERING" and consumer["unitMode"] is False
    (s,) = consumer["subscriptionDataSet"]
    assert s["topic"] == "T" and s["subString"] == "A || B" and s["expressionType"] == "TAG"
    assert s["tagsSet"] == ["A", "B"]
    assert sorted(s["codeSet"]) == sorted([string_hash_code("A"), string_hash_code("B")])
    assert s["classFilterMode"] is False and isinstance(s["subVersion"], int)


def test_lock_bodies_and_lock_answer() -> None:
    req = protocol.lock_batch_request("CG", "cid", [MQ])
    assert req.code == RequestCode.LOCK_BATCH_MQ
    assert json_loads(req.body) == {"clientId": "cid", "consumerGroup": "CG",
                                    "mqSet": [{"brokerName": "broker-a", "queueId": 3, "topic": "T"}]}
    assert protocol.unlock_batch_request("CG", "cid", [MQ]).code == RequestCode.UNLOCK_BATCH_MQ
    answer = create_response(req, ResponseCode.SUCCESS,
                             body=b'{"lockOKMQSet":[{"topic":"T","brokerName":"broker-a","queueId":3}]}')
    assert protocol.locked_from_response(answer) == {MQ}
    assert protocol.locked_from_response(create_response(req, ResponseCode.SUCCESS, body=b"{}")) == set()
    assert protocol.locked_from_response(create_response(req, ResponseCode.SUCCESS)) == set()


def test_consumer_list_answer() -> None:
    req = protocol.consumer_list_request("CG")
    assert req.ext_fields == {"consumerGroup": "CG"}
    answer = create_response(req, ResponseCode.SUCCESS, body=b'{"consumerIdList":["b@1","a@2"]}')
    assert protocol.consumer_list_from_response(answer) == ["b@1", "a@2"]
    with pytest.raises(MQBrokerError):
        protocol.consumer_list_from_response(create_response(req, ResponseCode.SYSTEM_ERROR, "x"))


def test_send_back_header() -> None:
    (msg,) = decode_messages(records((4, b"x", {"UNIQ_KEY": "ABC"}), topic="T"))
    cmd = protocol.send_back_request(msg, "CG", 0, 16)
    assert cmd.code == RequestCode.CONSUMER_SEND_MSG_BACK
    assert cmd.ext_fields == {"offset": "1000", "group": "CG", "delayLevel": "0", "originMsgId": "ABC",
                              "originTopic": "T", "unitMode": "false", "maxReconsumeTimes": "16"}


def test_unregister_and_route_requests() -> None:
    assert protocol.unregister_client_request("cid", "PG", None).ext_fields == {"clientID": "cid",
                                                                               "producerGroup": "PG"}
    assert protocol.route_request("T").ext_fields == {"topic": "T"}
    q = protocol.query_message_request("T", "k", 32, 1, 2)
    assert q.ext_fields == {"topic": "T", "key": "k", "maxNum": "32", "beginTimestamp": "1", "endTimestamp": "2"}
    assert protocol.view_message_request(99).ext_fields == {"offset": "99"}
