"""RocketMQ remoting protocol: command model, codes and a sans-IO frame codec (no sockets here)."""

from reference_broker.remoting.codec import MAX_FRAME_LENGTH, FrameDecoder, ProtocolError
from reference_broker.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from reference_broker.remoting.command import RemotingCommand, create_request, create_response, encode

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME_LENGTH",
    "FrameDecoder",
    "LanguageCode",
    "ProtocolError",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "create_request",
    "create_response",
    "encode",
]
