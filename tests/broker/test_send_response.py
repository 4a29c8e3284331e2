"""A successful send's answer is encoded from fixed parts (send_ok_frame): it must be byte for byte the frame the
generic path writes for the same response (create_response, then the server's opaque and flag, then encode)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference_broker.broker.send_processor import put_result_reply, put_result_response, send_ok_frame
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


def generic_frame(opaque: int, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=opaque)
    response = create_response(request, ResponseCode.SUCCESS, None,
                               {"msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset)})
    response.opaque = request.opaque  # what the server's _respond does before encoding
    response.flag |= FLAG_RESPONSE
    return encode(response, SerializeType.JSON)


@given(INT32, MSG_ID, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
def test_send_ok_frame_is_the_generic_encoding(opaque: int, msg_id: str, queue_id: int, queue_offset: int) -> None:
    assert send_ok_frame(opaque, msg_id, queue_id, queue_offset) == generic_frame(opaque, msg_id, queue_id,
                                                                                  queue_offset)


def _result(status: PutMessageStatus) -> PutMessageResult:
    prefix = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"  # 127.0.0.1:10911
    append = AppendMessageResult(AppendMessageStatus.PUT_OK, 4096, 1100, "", 0, 7, 1, prefix)
    return PutMessageResult(status, append if status.is_stored else None)


def test_only_a_plain_success_to_a_json_request_takes_the_encoded_path() -> None:
    request = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=42)
    ok = put_result_reply(request, _result(PutMessageStatus.PUT_OK), 3)
    assert ok == generic_frame(42, _result(PutMessageStatus.PUT_OK).append.msg_id, 3, 7)  # type: ignore[union-attr]
    for status in PutMessageStatus:
        if status is not PutMessageStatus.PUT_OK:  # stored-with-a-warning codes keep their code and remark
            reply = put_result_reply(request, _result(status), 3)
            assert isinstance(reply, RemotingCommand)
            assert reply == put_result_response(request, _result(status), 3)
    binary = RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=42, serialize_type=SerializeType.ROCKETMQ)
    assert isinstance(put_result_reply(binary, _result(PutMessageStatus.PUT_OK), 3), RemotingCommand)
