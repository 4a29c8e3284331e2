"""This module owns the blocking remoting client: one TCP connection shared by many threads.

Built on ``socket`` and ``threading`` only, so gevent's monkey-patching turns it cooperative. Requests are
multiplexed by opaque, as NettyRemotingAbstract.responseTable does: callers register a waiter, write the
frame, and a reader thread hands each response to the waiter with its opaque. When the connection drops, every
pending waiter fails at once with ``RemotingConnectError``; the next ``invoke`` connects again (as
NettyRemotingClient.getAndCreateChannel does).

``invoke_async`` pipelines: many requests in flight on one connection, each completed by a callback (run on
the reader thread, so it must be quick and must never block on this client) with the response or the error.
Once registered, a request's callback runs exactly once: whoever removes it from the pending table (the
reader, the timeout sweeper, a connection failure) calls it. A sweeper thread per client fails expired
async requests with ``RemotingTimeoutError`` (NettyRemotingAbstract.scanResponseTable runs every second;
ours every ``SWEEP_INTERVAL_S``).

Requests the server initiates (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, ...) go to the
``request_handler`` on the reader thread; its response, if any, is written back unless the request was
oneway. Without a handler a two-way request is answered REQUEST_CODE_NOT_SUPPORTED, as
NettyRemotingAbstract.processRequestCommand does for a code with no processor.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from reference_broker.remoting.codec import FrameDecoder, ProtocolError
from reference_broker.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response, encode
from reference_broker.remoting.errors import (
    RemotingConnectError,
    RemotingError,
    RemotingSendError,
    RemotingTimeoutError,
)

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024
SWEEP_INTERVAL_S: Final = 0.1


class RemotingConnectionLostError(RemotingConnectError):
    """The connection dropped while this request was pending: it was written, so the peer may have acted on
    it (unlike a failed connect or write, after which it certainly did not)."""

ResponseCallback = Callable[[RemotingCommand | None, RemotingError | None], None]
RequestHandler = Callable[[RemotingCommand], RemotingCommand | None]


def _run_callback(callback: ResponseCallback, response: RemotingCommand | None, error: RemotingError | None) -> None:
    try:
        callback(response, error)
    except Exception:  # a user callback must not kill the reader or the sweeper
        log.exception("invoke_async callback failed")


class _AsyncWaiter:
    __slots__ = ("callback",)

    def __init__(self, callback: ResponseCallback) -> None:
        self.callback = callback


class _Waiter:
    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None


class _Channel:
    """One connected socket with its reader thread and pending waiters; dead once closed, never reused."""

    def __init__(self, sock: socket.socket, addr: str, request_handler: RequestHandler | None = None) -> None:
        self.sock = sock
        self.addr = addr
        self.alive = True
        self.request_handler = request_handler
        self.pending: dict[int, _Waiter | _AsyncWaiter] = {}
        self.lock = threading.Lock()  # guards alive and pending
        self.send_lock = threading.Lock()
        # invoke_async's write coalescing: frames queued while another thread is writing go out with its next
        # sendall instead of one syscall each.
        self.out: list[bytes] = []
        self.out_lock = threading.Lock()
        self.flushing = False
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
            self._handle_request(cmd)
            return
        with self.lock:
            waiter = self.pending.pop(cmd.opaque, None)
        if waiter is None:
            log.debug("response with opaque %d from %s has no waiter (timed out?)", cmd.opaque, self.addr)
            return
        if type(waiter) is _AsyncWaiter:
            _run_callback(waiter.callback, cmd, None)
            return
        assert isinstance(waiter, _Waiter)
        waiter.response = cmd
        waiter.event.set()

    def _handle_request(self, cmd: RemotingCommand) -> None:
        handler = self.request_handler
        response: RemotingCommand | None
        if handler is None:
            log.debug("no handler for request (code %d) from %s", cmd.code, self.addr)
            response = create_response(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                       f" request type {cmd.code} not supported")
        else:
            try:
                response = handler(cmd)
            except Exception as exc:
                log.exception("request handler failed on code %d from %s", cmd.code, self.addr)
                response = create_response(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is None or cmd.is_oneway:
            return
        response.opaque = cmd.opaque
        response.flag |= FLAG_RESPONSE
        try:
            frame = encode(response)
            with self.send_lock:
                self.sock.sendall(frame)
        except ValueError:
            log.exception("cannot encode the response to code %d from %s", cmd.code, self.addr)
        except OSError as exc:
            self.fail(f"send failed: {exc}")

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
            error = RemotingConnectionLostError(reason, self.addr)
            if type(waiter) is _AsyncWaiter:
                _run_callback(waiter.callback, None, error)
            else:
                assert isinstance(waiter, _Waiter)
                waiter.error = error
                waiter.event.set()

    def take(self, opaque: int, waiter: _Waiter | _AsyncWaiter) -> bool:
        """Remove ``waiter`` if it is still pending under ``opaque``; True if the caller now owns it."""
        with self.lock:
            if self.pending.get(opaque) is waiter:
                del self.pending[opaque]
                return True
        return False


class RemotingClient:
    def __init__(self, host: str, port: int, timeout_s: float = 3.0,
                 request_handler: RequestHandler | None = None) -> None:
        self.host = host
        self.port = port
        self.addr = f"{host}:{port}"
        self.timeout_s = timeout_s
        self.request_handler = request_handler
        self._channel: _Channel | None = None
        self._lock = threading.Lock()
        self._closed = False
        # Per timeout value, the async requests in send order: deadlines within one deque only grow, so the
        # sweeper looks at each deque's head only. Entries answered in time stay until their deadline passes.
        self._deadlines: dict[float, deque[tuple[float, _Channel, int, _AsyncWaiter]]] = {}
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._sweep_lock = threading.Lock()

    def set_request_handler(self, handler: RequestHandler | None) -> None:
        """Handle server-initiated requests (on the reader thread) from now on, on this and later connections."""
        self.request_handler = handler
        channel = self._channel
        if channel is not None:
            channel.request_handler = handler

    @classmethod
    def from_addr(cls, addr: str, timeout_s: float = 3.0,
                  request_handler: RequestHandler | None = None) -> RemotingClient:
        """A client for ``"host:port"``."""
        host, sep, port = addr.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"address must be host:port, got {addr!r}")
        return cls(host.strip("[]"), int(port), timeout_s, request_handler)

    def _get_channel(self) -> _Channel:
        channel = self._channel  # fast path, no lock: a dead or replaced channel falls through to the locked one
        if channel is not None and channel.alive and not self._closed:
            return channel
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
            channel = _Channel(sock, self.addr, self.request_handler)
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

    def invoke_async(self, cmd: RemotingCommand, callback: ResponseCallback, timeout_s: float | None = None) -> None:
        """Send a request without waiting; ``callback(response, None)`` or ``callback(None, error)`` runs once.

        Raises (and never calls back) only when nothing was sent: ValueError for a bad command,
        RemotingConnectError when no connection can be made. A failed write calls back with the error,
        possibly on the calling thread before this returns.
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        frame = encode(cmd)
        channel = self._get_channel()
        waiter = _AsyncWaiter(callback)
        opaque = cmd.opaque
        with channel.lock:
            if not channel.alive:
                raise RemotingConnectError("connection closed", self.addr)
            if opaque in channel.pending:
                raise ValueError(f"opaque {opaque} already has a pending request on this connection")
            channel.pending[opaque] = waiter
        queue = self._deadlines.get(timeout)
        if queue is None:
            with self._lock:
                queue = self._deadlines.setdefault(timeout, deque())
        queue.append((time.monotonic() + timeout, channel, opaque, waiter))
        if self._sweeper is None:
            self._start_sweeper()
        with channel.out_lock:
            channel.out.append(frame)
            if channel.flushing:
                return  # the thread writing now takes this frame too
            channel.flushing = True
        try:
            while True:
                with channel.out_lock:
                    out = channel.out
                    if not out:
                        channel.flushing = False
                        return
                    data = out[0] if len(out) == 1 else b"".join(out)
                    channel.out = []
                with channel.send_lock:
                    channel.sock.sendall(data)
        except OSError as exc:
            with channel.out_lock:
                channel.flushing = False
                channel.out = []
            owned = channel.take(opaque, waiter)
            channel.fail(f"send failed: {exc}")  # calls back every other pending request, queued ones included
            if owned:
                _run_callback(callback, None, RemotingSendError(f"send failed: {exc}", self.addr))

    def _start_sweeper(self) -> None:
        with self._lock:
            if self._sweeper is not None or self._closed:
                return
            self._sweeper = threading.Thread(target=self._sweep_loop, name=f"remoting-sweeper-{self.addr}",
                                             daemon=True)
            self._sweeper.start()

    def _sweep_loop(self) -> None:
        while not self._sweeper_stop.wait(SWEEP_INTERVAL_S):
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> int:
        """Fail every async request whose deadline is at or before ``now``; how many were failed."""
        expired: list[tuple[float, _Channel, int, _AsyncWaiter]] = []
        with self._sweep_lock:  # appends need no lock (deque.append is atomic); two sweepers would race
            for queue in list(self._deadlines.values()):
                while queue and queue[0][0] <= now:
                    expired.append(queue.popleft())
        failed = 0
        for _deadline, channel, opaque, waiter in expired:
            if channel.take(opaque, waiter):
                failed += 1
                _run_callback(waiter.callback, None,
                              RemotingTimeoutError(f"no response to opaque {opaque} in time", self.addr))
        return failed

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that expects no response; marks it oneway, as invokeOneway's markOnewayRPC does."""
        cmd.flag |= FLAG_ONEWAY
        frame = encode(cmd)
        self._send(self._get_channel(), frame)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
            sweeper = self._sweeper
        self._sweeper_stop.set()
        if sweeper is not None and sweeper is not threading.current_thread():
            sweeper.join(self.timeout_s)
        if channel is not None:
            channel.fail("client closed")
            if channel.reader is not threading.current_thread():
                channel.reader.join(self.timeout_s)

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
