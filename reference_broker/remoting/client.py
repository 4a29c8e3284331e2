"""This module owns the blocking remoting client: one TCP connection shared by many threads.

Built on ``socket`` and ``threading`` only, so gevent's monkey-patching turns it cooperative. Requests are
multiplexed by opaque, as NettyRemotingAbstract.responseTable does: callers register a waiter, write the
frame, and a reader thread hands each response to the waiter with its opaque. When the connection drops, every
pending waiter fails at once with ``RemotingConnectError``; the next ``invoke`` connects again (as
NettyRemotingClient.getAndCreateChannel does).
"""

from __future__ import annotations

import logging
import socket
import threading

from reference_broker.remoting.codec import FrameDecoder, ProtocolError
from reference_broker.remoting.codes import FLAG_ONEWAY
from reference_broker.remoting.command import RemotingCommand, encode
from reference_broker.remoting.errors import (
    RemotingConnectError,
    RemotingError,
    RemotingSendError,
    RemotingTimeoutError,
)

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024


class _Waiter:
    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None


class _Channel:
    """One connected socket with its reader thread and pending waiters; dead once closed, never reused."""

    def __init__(self, sock: socket.socket, addr: str) -> None:
        self.sock = sock
        self.addr = addr
        self.alive = True
        self.pending: dict[int, _Waiter] = {}
        self.lock = threading.Lock()  # guards alive and pending
        self.send_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read_loop, name=f"remoting-client-{addr}", daemon=True)

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        reason = "connection closed by peer"
        try:
            while True:
                data = self.sock.recv(RECV_BYTES)
                if not data:
                    break
                decoder.feed(data)
                while (cmd := decoder.next_frame()) is not None:
                    self._dispatch(cmd)
        except ProtocolError as exc:
            reason = f"protocol error from peer: {exc}"
            log.warning("closing connection to %s: %s", self.addr, exc)
        except OSError as exc:
            reason = f"connection error: {exc}"
        self.fail(reason)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if not cmd.is_response:
            log.debug("ignoring request (code %d) from %s", cmd.code, self.addr)
            return
        with self.lock:
            waiter = self.pending.pop(cmd.opaque, None)
        if waiter is None:
            log.debug("response with opaque %d from %s has no waiter (timed out?)", cmd.opaque, self.addr)
            return
        waiter.response = cmd
        waiter.event.set()

    def fail(self, reason: str) -> None:
        """Mark dead, close the socket and fail every pending waiter. Idempotent."""
        with self.lock:
            was_alive, self.alive = self.alive, False
            waiters = list(self.pending.values())
            self.pending.clear()
        if was_alive:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread's recv
            except OSError:
                pass
            self.sock.close()
        for waiter in waiters:
            waiter.error = RemotingConnectError(reason, self.addr)
            waiter.event.set()


class RemotingClient:
    def __init__(self, host: str, port: int, timeout_s: float = 3.0) -> None:
        self.host = host
        self.port = port
        self.addr = f"{host}:{port}"
        self.timeout_s = timeout_s
        self._channel: _Channel | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _get_channel(self) -> _Channel:
        with self._lock:
            if self._closed:
                raise RemotingConnectError("client is closed", self.addr)
            channel = self._channel
            if channel is not None and channel.alive:
                return channel
            try:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
            except OSError as exc:
                raise RemotingConnectError(f"connect failed: {exc}", self.addr) from exc
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            channel = _Channel(sock, self.addr)
            channel.reader.start()
            self._channel = channel
            return channel

    def _send(self, channel: _Channel, frame: bytes) -> None:
        try:
            with channel.send_lock:
                channel.sock.sendall(frame)
        except OSError as exc:
            channel.fail(f"send failed: {exc}")
            raise RemotingSendError(f"send failed: {exc}", self.addr) from exc

    def invoke(self, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        """Send a request and block for its response (matched by ``cmd.opaque``)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        frame = encode(cmd)  # ValueError for a bad command, before anything is registered
        channel = self._get_channel()
        waiter = _Waiter()
        with channel.lock:
            if not channel.alive:
                raise RemotingConnectError("connection closed", self.addr)
            if cmd.opaque in channel.pending:
                raise ValueError(f"opaque {cmd.opaque} already has a pending request on this connection")
            channel.pending[cmd.opaque] = waiter
        try:
            self._send(channel, frame)
        except RemotingSendError:
            with channel.lock:
                channel.pending.pop(cmd.opaque, None)
            raise
        if not waiter.event.wait(timeout):
            with channel.lock:
                channel.pending.pop(cmd.opaque, None)
            if waiter.response is None and waiter.error is None:  # not answered in the race just lost
                raise RemotingTimeoutError(f"no response to opaque {cmd.opaque} in {timeout} s", self.addr)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.response is not None
        return waiter.response

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that expects no response; marks it oneway, as invokeOneway's markOnewayRPC does."""
        cmd.flag |= FLAG_ONEWAY
        frame = encode(cmd)
        self._send(self._get_channel(), frame)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.fail("client closed")
            if channel.reader is not threading.current_thread():
                channel.reader.join(self.timeout_s)

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
