"""This module owns the errors the client library raises to its users, keyed by code (aiokafka style).

- ``MQBrokerError``: the broker (or name server) answered with a non-success response code; carries that
  ``ResponseCode``, the remark and the address (MQBrokerException).
- ``MQClientError``: anything on the client's side (MQClientException): a transport failure (the remoting
  error's ClientErrorCode: 10001 connect, 10002 send, 10006 timeout, with the RemotingError as ``__cause__``),
  no route, an invalid message (code MESSAGE_ILLEGAL 13, as Validators does), a client not started.

``retriable`` says whether resending may succeed. For broker codes it is DefaultMQProducer's
retryResponseCodes (4.9.8): TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION,
NO_BUYER_ID, NOT_IN_CURRENT_UNIT; plus SYSTEM_BUSY (our addition: flow control rejects a request before it
is stored, so resending it is safe).
"""

from __future__ import annotations

from typing import Final

from reference_broker.remoting.client import RemotingConnectionLostError
from reference_broker.remoting.codes import ResponseCode
from reference_broker.remoting.errors import RemotingError, RemotingTimeoutError


class ClientErrorCode:
    """ClientErrorCode (client/.../common/ClientErrorCode.java, 4.9.8)."""

    CONNECT_BROKER_EXCEPTION: Final = 10001
    ACCESS_BROKER_EXCEPTION: Final = 10002
    BROKER_NOT_EXIST_EXCEPTION: Final = 10003
    NO_NAME_SERVER_EXCEPTION: Final = 10004
    NOT_FOUND_TOPIC_EXCEPTION: Final = 10005
    REQUEST_TIMEOUT_EXCEPTION: Final = 10006
    # Not in RocketMQ (which uses -1 for these): our code for "not started / already shut down".
    CLIENT_STATE_EXCEPTION: Final = 10100


RETRIABLE_BROKER_CODES: Final = frozenset({
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.NO_PERMISSION,
    ResponseCode.NO_BUYER_ID,
    ResponseCode.NOT_IN_CURRENT_UNIT,
})

_RETRIABLE_CLIENT_CODES: Final = frozenset({
    ClientErrorCode.CONNECT_BROKER_EXCEPTION,
    ClientErrorCode.ACCESS_BROKER_EXCEPTION,
    ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION,
    ClientErrorCode.NO_NAME_SERVER_EXCEPTION,
    ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION,
    ClientErrorCode.REQUEST_TIMEOUT_EXCEPTION,
})


class MQClientError(Exception):
    """``unknown_outcome``: the request was written but no answer came (timeout, connection lost while
    pending), so the broker may have acted on it; a checker counts such a send as "unknown", not "failed"."""

    def __init__(self, code: int, remark: str, retriable: bool | None = None, unknown_outcome: bool = False) -> None:
        super().__init__(f"CODE: {code} DESC: {remark}")
        self.code = code
        self.remark = remark
        self.retriable = code in _RETRIABLE_CLIENT_CODES if retriable is None else retriable
        self.unknown_outcome = unknown_outcome

    @classmethod
    def from_remoting(cls, exc: RemotingError) -> MQClientError:
        unknown = isinstance(exc, RemotingTimeoutError | RemotingConnectionLostError)
        err = cls(exc.code, str(exc), exc.retriable, unknown)
        err.__cause__ = exc
        return err


class MQBrokerError(MQClientError):
    def __init__(self, code: int, remark: str | None, addr: str = "") -> None:
        text = remark or ""
        super().__init__(code, f"{text} BROKER: {addr}" if addr else text, code in RETRIABLE_BROKER_CODES)
        self.remark = text
        self.addr = addr
