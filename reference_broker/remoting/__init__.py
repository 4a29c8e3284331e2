"""RocketMQ remoting protocol: command model, codes, a sans-IO frame codec, and thin transports over it."""

from reference_broker.remoting.client import RemotingClient
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
from reference_broker.remoting.errors import (
    RemotingConnectError,
    RemotingError,
    RemotingSendError,
    RemotingTimeoutError,
)
from reference_broker.remoting.server import ConnectionContext, Handler, RemotingServer, ServerThread

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MAX_FRAME_LENGTH",
    "ConnectionContext",
    "FrameDecoder",
    "Handler",
    "LanguageCode",
    "ProtocolError",
    "RemotingClient",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "ServerThread",
    "create_request",
    "create_response",
    "encode",
]
