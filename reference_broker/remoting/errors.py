"""This module owns the client-side transport errors, keyed by code (aiokafka style).

Codes are RocketMQ's ``ClientErrorCode`` (client/.../common/ClientErrorCode.java, 4.9.8), which is what
``MQClientException.getResponseCode()`` carries when the remoting layer, not the broker, failed:
CONNECT_BROKER_EXCEPTION 10001, ACCESS_BROKER_EXCEPTION 10002, REQUEST_TIMEOUT_EXCEPTION 10006.
All three are retriable: the request may be resent (to the same or another broker).
"""

from __future__ import annotations

from typing import ClassVar


class RemotingError(Exception):
    code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, addr: str = "") -> None:
        super().__init__(f"{message} ({addr})" if addr else message)
        self.addr = addr


class RemotingConnectError(RemotingError):
    """Could not connect, or the connection dropped while the request was pending (RemotingConnectException)."""

    code = 10001
    retriable = True


class RemotingSendError(RemotingError):
    """Writing the request to the socket failed (RemotingSendRequestException)."""

    code = 10002
    retriable = True


class RemotingTimeoutError(RemotingError):
    """No response within the timeout (RemotingTimeoutException)."""

    code = 10006
    retriable = True
