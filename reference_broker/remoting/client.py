"""This module owns the blocking remoting client: one TCP connection shared by many threads.

Built on ``socket`` and ``threading`` only, so gevent's monkey-patching turns it cooperative. Requests are
multiplexed by opaque, as NettyRemotingAbstract.responseTable does: callers register a waiter, write the
frame, and a reader thread hands each response to the waiter with its opaque. When the connection drops, every
pending waiter fails at once with ``RemotingConnectionLostError`` (a ``RemotingConnectError`` whose request was
written, so its outcome is unknown); the next ``invoke`` connects again (as NettyRemotingClient.getAndCreateChannel
does).

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

Async writes: a loopback TCP send costs ~10-20 us, more than the rest of a request, so frames are coalesced.
With real threads the sending thread writes at once, and frames queued meanwhile by other threads go out
with its next write (no added latency). Under gevent's monkey-patching (``queued_writes`` left at None
detects it) a writer greenlet per connection sends whatever the senders queued since it last ran, so a
burst of sends between two yields costs one syscall.
"""

from __future__ import annotations

import logging
import math
import socket
import sys
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


def _gevent_patched() -> bool:
    """Whether gevent has monkey-patched ``socket`` (locust does); looked up without importing gevent."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("socket"))


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
    """A blocked ``invoke``: a lock taken at creation and released once by whoever completes the waiter (the
    reader thread with the response, or ``fail``), so ``wait`` is one C-level acquire. A threading.Event's
    Python-level condition variable cost the round trip tens of microseconds. Exactly one completer is
    guaranteed: each takes the waiter out of ``pending`` under the channel lock first."""

    __slots__ = ("_done", "error", "response")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None

    def complete(self) -> None:
        self._done.release()

    def wait(self, timeout_s: float) -> bool:
        return self._done.acquire(timeout=max(timeout_s, 0.0))


class _Channel:
    """One connected socket with its reader thread and pending waiters; dead once closed, never reused."""

    def __init__(self, sock: socket.socket, addr: str, request_handler: RequestHandler | None = None,
                 queued_writes: bool = False) -> None:
        self.sock = sock
        self.addr = addr
        self.alive = True
        self.request_handler = request_handler
        self.pending: dict[int, _Waiter | _AsyncWaiter] = {}
        self.lock = threading.Lock()  # guards alive and pending
        self.send_lock = threading.Lock()
        # invoke_async's write coalescing (see the module docstring). Direct mode: frames queued while another
        # thread writes go out with its next sendall. Queued mode: the writer thread sends everything queued.
        self.out: list[bytes] = []
        self.out_lock = threading.Lock()
        self.flushing = False
        self.queued_writes = queued_writes
        self.out_queue: deque[bytes] = deque()
        self.wake = threading.Event()
        self.writer: threading.Thread | None = None
        if queued_writes:
            self.writer = threading.Thread(target=self._write_loop, name=f"remoting-writer-{addr}", daemon=True)
        self.reader = threading.Thread(target=self._read_loop, name=f"remoting-client-{addr}", daemon=True)
        self.bytes_received = 0  # everything read from the socket (frames and their headers)

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        reason = "connection closed by peer"
        try:
            while True:
                data = self.sock.recv(RECV_BYTES)
                if not data:
                    break
                self.bytes_received += len(data)
                decoder.feed(data)
                while (cmd := decoder.next_frame()) is not None:
                    self._dispatch(cmd)
        except ProtocolError as exc:
            reason = f"protocol error from peer: {exc}"
            log.warning("closing connection to %s: %s", self.addr, exc)
        except OSError as exc:
            reason = f"connection error: {exc}"
        self.fail(reason)

    def write_async(self, frame: bytes) -> None:
        """Send ``frame`` now or with the next coalesced write; OSError only in direct mode (the caller fails
        the channel); in queued mode the writer fails it."""
        if self.queued_writes:
            self.out_queue.append(frame)
            if not self.wake.is_set():
                self.wake.set()
            return
        with self.out_lock:
            self.out.append(frame)
            if self.flushing:
                return  # the thread writing now takes this frame too
            self.flushing = True
        try:
            while True:
                with self.out_lock:
                    out = self.out
                    if not out:
                        self.flushing = False
                        return
                    data = out[0] if len(out) == 1 else b"".join(out)
                    self.out = []
                with self.send_lock:
                    self.sock.sendall(data)
        except OSError:
            with self.out_lock:
                self.flushing = False
                self.out = []
            raise

    def _write_loop(self) -> None:
        queue = self.out_queue
        while True:
            self.wake.wait()
            self.wake.clear()  # before draining: a frame queued from now on sets it again
            if not self.alive:
                return
            frames: list[bytes] = []
            while queue:  # only this thread pops
                frames.append(queue.popleft())
            if not frames:
                continue
            try:
                with self.send_lock:
                    self.sock.sendall(frames[0] if len(frames) == 1 else b"".join(frames))
            except OSError as exc:
                self.fail(f"send failed: {exc}")
                return

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
        waiter.complete()

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
            except Exception as exc:  # a request handler's boundary: the peer still gets an answer
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
        self.wake.set()  # lets a queued-mode writer see that the channel is dead
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
                waiter.complete()

    def take(self, opaque: int, waiter: _Waiter | _AsyncWaiter) -> bool:
        """Remove ``waiter`` if it is still pending under ``opaque``; True if the caller now owns it."""
        with self.lock:
            if self.pending.get(opaque) is waiter:
                del self.pending[opaque]
                return True
        return False


class RemotingClient:
    def __init__(self, host: str, port: int, timeout_s: float = 3.0,
                 request_handler: RequestHandler | None = None, queued_writes: bool | None = None) -> None:
        self.host = host
        self.port = port
        self.addr = f"{host}:{port}"
        self.timeout_s = timeout_s
        self.request_handler = request_handler
        self.queued_writes = _gevent_patched() if queued_writes is None else queued_writes
        self._channel: _Channel | None = None
        self._lock = threading.Lock()
        self._closed = False
        # Per timeout (in 100 ms buckets), (deadline, opaque) of the async requests in send order: deadlines
        # within one deque (almost) only grow, so the sweeper looks at each deque's head only. Entries answered
        # in time stay until their deadline passes, which is why they hold no reference to the request (a
        # tuple of a float and an int is untracked by the garbage collector, so thousands cost it nothing).
        self._deadlines: dict[float, deque[tuple[float, int]]] = {}
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()
        self._sweep_lock = threading.Lock()
        self._bytes_of_closed = 0  # bytes_received of the connections this client replaced

    @property
    def bytes_received(self) -> int:
        """Bytes read from the peer over this client's connections so far (the harness's "bytes on the wire")."""
        channel = self._channel
        return self._bytes_of_closed + (channel.bytes_received if channel is not None else 0)

    def set_request_handler(self, handler: RequestHandler | None) -> None:
        """Handle server-initiated requests (on the reader thread) from now on, on this and later connections."""
        self.request_handler = handler
        channel = self._channel
        if channel is not None:
            channel.request_handler = handler

    @classmethod
    def from_addr(cls, addr: str, timeout_s: float = 3.0, request_handler: RequestHandler | None = None,
                  queued_writes: bool | None = None) -> RemotingClient:
        """A client for ``"host:port"``."""
        host, sep, port = addr.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"address must be host:port, got {addr!r}")
        return cls(host.strip("[]"), int(port), timeout_s, request_handler, queued_writes)

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
            if self._channel is not None:
                self._bytes_of_closed += self._channel.bytes_received
            channel = _Channel(sock, self.addr, self.request_handler, self.queued_writes)
            channel.reader.start()
            if channel.writer is not None:
                channel.writer.start()
            self._channel = channel
            return channel

    def _send(self, channel: _Channel, frame: bytes) -> None:
        # Every write goes through the one coalescing path, so frames leave in the order they were handed in
        # (a sync or oneway request never overtakes an async one queued just before it).
        try:
            channel.write_async(frame)
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
        if not waiter.wait(timeout):
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
        # One deque per 100 ms of timeout: a caller passing what is left of a budget (3 s minus the time
        # spent so far) must not make a deque per request. Within a bucket a deadline can precede the head's
        # by less than the bucket width, so it may fire up to 100 ms late.
        bucket = math.ceil(timeout * 10) / 10
        queue = self._deadlines.get(bucket)
        if queue is None:
            with self._lock:
                queue = self._deadlines.setdefault(bucket, deque())
        queue.append((time.monotonic() + timeout, opaque))
        if self._sweeper is None:
            self._start_sweeper()
        try:
            channel.write_async(frame)
        except OSError as exc:
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
        expired: list[int] = []
        with self._sweep_lock:  # appends need no lock (deque.append is atomic); two sweepers would race
            for queue in list(self._deadlines.values()):
                while queue and queue[0][0] <= now:
                    expired.append(queue.popleft()[1])
        # Only the current connection can still hold them: a connection that died failed all of its requests.
        channel = self._channel
        if channel is None or not expired:
            return 0
        failed = 0
        for opaque in expired:
            waiter = channel.pending.get(opaque)
            if type(waiter) is _AsyncWaiter and channel.take(opaque, waiter):
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
