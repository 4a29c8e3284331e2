"""A successful send's answer is encoded from fixed parts (OkFrame): it must be byte for byte the frame the generic
path writes for the same response (create_response, then the server's opaque and flag, then encode), with the
broker's MSG_REGION and TRACE_ON that every send answer carries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference_broker.broker.broker_config import BrokerConfig
from reference_broker.broker.send_processor import OkFrame, put_result_reply, put_result_response, send_fields
from reference_broker.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode, SerializeType
from reference_broker.remoting.command import RemotingCommand, create_response, encode
from reference_broker.store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
HEX_ID = st.text("0123456789ABCDEF", min_size=32, max_size=32) | st.text("0123456789ABCDEF", min_size=56, max_size=56)
MSG_ID = st.lists(HEX_ID, min_size=1, max_size=4).map(",".join)  # a batch's ids are comma-joined


FIELDS = send_fields(BrokerConfig())
OK = OkFrame(FIELDS)


def generic_frame(opaque: int, msg_id: str, queue_id: int, queue_offset: int,
                  fields: dict[str, str] = FIELDS) -> bytes:
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=opaque)
    response = create_response(request, ResponseCode.SUCCESS, None,
                               {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset),
                                **fields})
    response.opaque = request.opaque  # what the server's _respond does before encoding
    response.flag |= FLAG_RESPONSE
    return encode(response, SerializeType.JSON)


@given(INT32, MSG_ID, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.text(min_size=1), st.booleans())
def test_the_ok_frame_is_the_generic_encoding(opaque: int, msg_id: str, queue_id: int, queue_offset: int,
                                              region: str, trace_on: bool) -> None:
    fields = send_fields(BrokerConfig(region_id=region, trace_on=trace_on))
    assert fields == {"MSG_REGION": region, "TRACE_ON": "true" if trace_on else "false"}
    assert OkFrame(fields).frame(opaque, msg_id, queue_id, queue_offset) == generic_frame(
        opaque, msg_id, queue_id, queue_offset, fields)


def _result(status: PutMessageStatus) -> PutMessageResult:
    prefix = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"  # 127.0.0.1:10911
    append = AppendMessageResult(AppendMessageStatus.PUT_OK, 4096, 1100, "", 0, 7, 1, prefix)
    return PutMessageResult(status, append if status.is_stored else None)


def test_only_a_plain_success_to_a_json_request_takes_the_encoded_path() -> None:
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=42)
    ok = put_result_reply(request, _result(PutMessageStatus.PUT_OK), 3, OK, FIELDS)
    assert ok == generic_frame(42, _result(PutMessageStatus.PUT_OK).append.msg_id, 3, 7)  # type: ignore[union-attr]
    for status in PutMessageStatus:
        if status is not PutMessageStatus.PUT_OK:  # stored-with-a-warning codes keep their code and remark
            reply = put_result_reply(request, _result(status), 3, OK, FIELDS)
            assert isinstance(reply, RemotingCommand)
            expected = put_result_response(request, _result(status), 3)
            expected.ext_fields.update(FIELDS)
            assert reply == expected
    binary = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=42, serialize_type=SerializeType.ROCKETMQ)
    reply = put_result_reply(binary, _result(PutMessageStatus.PUT_OK), 3, OK, FIELDS)
    assert isinstance(reply, RemotingCommand) and reply.ext_fields["MSG_REGION"] == "DefaultRegion"
