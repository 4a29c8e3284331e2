"""This module owns the server side of the remoting transport: a thin asyncio shell over ``FrameDecoder``.

Per connection, bytes go into a ``FrameDecoder``; each request frame goes to its handler, and the response carries
the request's opaque. A handler that can answer at once returns the response (no task: the hot path of a send); one
that must wait returns an awaitable, which finishes in its own task so a slow request never blocks the connection
(NettyRemotingAbstract.processRequestCommand runs processors on executors); an ``asyncio.Future`` is answered from
its done callback, with no task at all. The one peer error, ``ProtocolError``, closes that connection only
(NettyDecoder closes the channel); nothing a peer sends can stop the server.

Responses written in one event-loop pass go out in one ``writelines`` call; while the transport's buffer is above
the high-water mark the connection is not read from.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from types import CoroutineType
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from reference_broker.remoting.codec import FrameDecoder, ProtocolError
from reference_broker.remoting.codes import FLAG_RESPONSE, ResponseCode
from reference_broker.remoting.command import RemotingCommand, create_response, encode
from reference_broker.remoting.later_reply import LaterReply

log = logging.getLogger(__name__)

# Above the high mark a handler waits before finishing, so a peer that stops reading cannot make us buffer
# unboundedly; our own choice, not a RocketMQ default.
WRITE_HIGH_WATER_BYTES: Final = 4 * 1024 * 1024
WRITE_LOW_WATER_BYTES: Final = 1024 * 1024
# One connection's pipelined frames are handled for at most this long per pass of the event loop (checked every
# BURST_CHECK_EVERY frames); the rest wait in its decoder, its reading paused, while the loop serves the other
# connections. Without it a flood of a few hundred admin requests on one connection held every other client
# for over a second (found by the fuzzer). RocketMQ gets the same from its processor thread pools.
BURST_BUDGET_S: Final = 0.02
BURST_CHECK_EVERY: Final = 16

# A handler answers with a response (or None: no answer), either directly or through an awaitable. A response
# may also be a whole frame the handler encoded itself (bytes, with the request's opaque): written as it is.
Handler = Callable[["ConnectionContext", RemotingCommand],
                   "RemotingCommand | bytes | Awaitable[RemotingCommand | bytes | None] | None"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed, else asyncio's."""
    try:
        uvloop: Any = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class ConnectionContext:
    """What a handler sees of its connection: the peer's address and a way to write to it."""

    def __init__(self, conn: _Connection, peer: str) -> None:
        self._conn = conn
        self.peer = peer
        self.attributes: dict[str, Any] = {}  # per-connection state for handlers (e.g. client id)
        # The clock ``RemotingCommand.received_at`` is read on, for a handler's "how long did it wait": kept
        # here because asyncio.get_running_loop() makes a getpid() system call on every call.
        self.loop_time: Callable[[], float] = conn.loop_time

    @property
    def closed(self) -> bool:
        return self._conn.closed

    async def send(self, cmd: RemotingCommand) -> None:
        """Write a frame (e.g. a server-initiated request such as NOTIFY_CONSUMER_IDS_CHANGED); fire and forget."""
        self._conn.write(encode(cmd))
        await self._conn.drain()

    def close(self) -> None:
        self._conn.close()


class _Connection(asyncio.Protocol):
    def __init__(self, server: RemotingServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self.loop_time = self._loop.time
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._paused = False
        self._backlogged = False  # frames left in the decoder for a later pass (BURST_BUDGET_S); reading paused
        self._drain_waiters: list[asyncio.Future[None]] = []
        # Requests being answered later: a handler's task (with the handler's coroutine, closed if the task is
        # cancelled before it ran), or a handler's own future; LaterReplies are only counted (``later``).
        self.tasks: dict[asyncio.Future[Any], Coroutine[Any, Any, Any] | None] = {}
        self.later = 0  # LaterReplies bound and not yet settled (a SYNC_FLUSH send's answer)
        self.closed = False
        self.ctx = ConnectionContext(self, "?")

    # -- asyncio.Protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements asyncio.Transport's methods without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES, low=WRITE_LOW_WATER_BYTES)
        peer = transport.get_extra_info("peername")
        self.ctx.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._decoder.feed(data)
        if not self._backlogged:  # else a pass is already scheduled and will get to these bytes
            self._handle_frames()

    def _handle_frames(self) -> None:
        decoder = self._decoder
        loop = self._loop
        now = loop.time()
        deadline = now + BURST_BUDGET_S
        n = 0
        while True:
            try:
                cmd = decoder.next_frame()
            except ProtocolError as exc:
                log.warning("closing connection from %s: %s", self.ctx.peer, exc)
                # Answers already due for the well-formed frames before it go out first (the transport
                # writes them before it closes); close() alone would discard them.
                self._flush()
                self.close()
                return
            if cmd is None:
                if self._backlogged:
                    self._backlogged = False
                    if not self._paused and self._transport is not None and not self.closed:
                        self._transport.resume_reading()
                return
            cmd.received_at = now
            if cmd.is_response:
                log.debug("ignoring response (code %d, opaque %d) from %s", cmd.code, cmd.opaque, self.ctx.peer)
                continue
            self._dispatch(cmd)
            n += 1
            if n % BURST_CHECK_EVERY == 0 and loop.time() > deadline and not self.closed:
                if not self._backlogged:
                    self._backlogged = True
                    if self._transport is not None:
                        self._transport.pause_reading()
                loop.call_soon(self._continue_frames)
                return

    def _continue_frames(self) -> None:
        if not self.closed:
            self._handle_frames()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._out.clear()
        self._server._connections.discard(self)
        self._wake_drainers()
        for hook in self._server.close_hooks:  # ChannelEventListener.onChannelClose
            try:
                hook(self.ctx)
            except Exception:  # a hook's bug must not stop the other hooks or the close
                log.exception("connection-close hook failed for %s", self.ctx.peer)

    def pause_writing(self) -> None:
        # A peer that does not read its responses stops being read from: no unbounded buffering.
        self._paused = True
        if self._transport is not None and not self.closed:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._transport is not None and not self.closed and not self._backlogged:
            self._transport.resume_reading()
        self._wake_drainers()

    # -- writing
    def write(self, frame: bytes) -> None:
        if self.closed:
            return
        if not self._out:
            self._loop.call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and not self.closed and self._transport is not None:
            self._transport.writelines(out)

    async def drain(self) -> None:
        if self._paused and not self.closed:
            waiter = self._loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def _wake_drainers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._out.clear()
        if self._transport is not None:
            self._transport.close()

    # -- dispatch
    def _dispatch(self, cmd: RemotingCommand) -> None:
        """Run the handler; a plain (non-coroutine) result is answered at once, without a task — the hot
        path of a send under ASYNC_FLUSH — and an awaitable one finishes in its own task."""
        handler = self._server._handlers.get(cmd.code)
        if handler is None:
            # NettyRemotingAbstract.processRequestCommand's remark, leading space included.
            log.warning("%s: request type %d not supported", self.ctx.peer, cmd.code)
            self._respond(cmd, create_response(
                cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"))
            return
        try:
            result = handler(self.ctx, cmd)
        except Exception as exc:  # a handler's boundary: the peer gets SYSTEM_ERROR
            log.exception("handler for code %d failed on a request from %s", cmd.code, self.ctx.peer)
            self._respond(cmd, create_response(cmd, ResponseCode.SYSTEM_ERROR, _exception_desc(exc)))
            return
        if result is None or isinstance(result, (RemotingCommand, bytes)):
            self._respond(cmd, result)
            return
        if type(result) is LaterReply:
            # A SYNC_FLUSH send's answer, completed on the group-commit thread and settled on the loop by the
            # hand-off's drain (later_reply.py): answered from there, with no future, Handle or task per send.
            self.later += 1
            result.bind(partial(self._later_done, cmd))
            return
        if isinstance(result, asyncio.Future):
            # A handler's own future (one completed from another thread or by a later event): answered from
            # its done callback, with no task and no coroutine per request.
            self.tasks[result] = None
            result.add_done_callback(partial(self._future_done, cmd))
            return
        task = self._loop.create_task(self._finish(cmd, result))
        self.tasks[task] = result if type(result) is CoroutineType else None
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        coro = self.tasks.pop(task, None)
        if coro is not None and task.cancelled():
            # A task cancelled before its first step (``stop``) never awaits the handler's coroutine: closed
            # here, it does not warn "never awaited" whenever the collector gets to it (a later test's error).
            coro.close()

    def _future_done(self, cmd: RemotingCommand, fut: asyncio.Future[Any]) -> None:
        self.tasks.pop(fut, None)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:  # a handler's boundary: the peer gets SYSTEM_ERROR
            log.error("handler for code %d failed on a request from %s", cmd.code, self.ctx.peer, exc_info=exc)
            self._respond(cmd, create_response(cmd, ResponseCode.SYSTEM_ERROR, _exception_desc(exc)))
            return
        self._respond(cmd, fut.result())

    def _later_done(self, cmd: RemotingCommand, ok: bool, value: Any) -> None:
        self.later -= 1
        if not ok:  # a handler's boundary: the peer gets SYSTEM_ERROR
            log.error("handler for code %d failed on a request from %s", cmd.code, self.ctx.peer, exc_info=value)
            self._respond(cmd, create_response(cmd, ResponseCode.SYSTEM_ERROR, _exception_desc(value)))
            return
        self._respond(cmd, value)

    async def _finish(self, cmd: RemotingCommand, pending: Awaitable[RemotingCommand | bytes | None]) -> None:
        try:
            response = await pending
        except Exception as exc:  # a handler's boundary: the peer gets SYSTEM_ERROR
            log.exception("handler for code %d failed on a request from %s", cmd.code, self.ctx.peer)
            response = create_response(cmd, ResponseCode.SYSTEM_ERROR, _exception_desc(exc))
        self._respond(cmd, response)

    def _respond(self, cmd: RemotingCommand, response: RemotingCommand | bytes | None) -> None:
        if response is None or cmd.is_oneway:
            return
        if type(response) is bytes:  # already a frame (e.g. a successful send's answer)
            self.write(response)
            return
        assert isinstance(response, RemotingCommand)
        response.opaque = cmd.opaque
        response.flag |= FLAG_RESPONSE
        try:
            frame = encode(response, cmd.serialize_type)
        except ValueError as exc:  # the handler built an unencodable response: our bug, not the peer's
            log.exception("cannot encode the response to code %d from %s", cmd.code, self.ctx.peer)
            frame = encode(create_response(cmd, ResponseCode.SYSTEM_ERROR, _exception_desc(exc)))
        self.write(frame)


def _exception_desc(exc: BaseException) -> str:
    # RemotingHelper.exceptionSimpleDesc: the exception's toString (plus a stack frame we leave out).
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RemotingServer:
    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self._connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        # Called on the event loop when a connection closes (the broker drops that client's registrations).
        self.close_hooks: list[Callable[[ConnectionContext], None]] = []

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    @property
    def codes(self) -> frozenset[int]:
        """The request codes a handler is registered for."""
        return frozenset(self._handlers)

    def pending_requests(self) -> int:
        """Requests decoded and not yet answered, over all connections."""
        return sum(len(conn.tasks) + conn.later for conn in self._connections)

    def protocol_factory(self) -> asyncio.Protocol:
        """One connection's protocol object, as the listener makes for each accepted socket; tests drive it
        over a fake transport (tests/remoting/test_server_protocol.py). Call on the server's event loop."""
        return _Connection(self)

    @property
    def connections(self) -> list[ConnectionContext]:
        return [conn.ctx for conn in self._connections if not conn.closed]

    async def start(self, host: str = "0.0.0.0", port: int = 0) -> None:
        if self._server is not None:
            raise RuntimeError("server already started")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.protocol_factory, host, port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop_listening(self) -> None:
        """Close the listening sockets now; open connections stay until ``stop`` (a broker's shutdown answers
        its held requests on them first)."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Close the listener and every connection, cancel running handlers and wait for them."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        conns = list(self._connections)
        tasks = [task for conn in conns for task in conn.tasks]
        for conn in conns:
            conn.close()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run

    def start_in_thread(self, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 10.0) -> ServerThread:
        """Run this server on its own event loop in a daemon thread (for tests and the CLI)."""
        st = ServerThread(self, lambda: self.start(host, port), self.stop, f"remoting-server-{port}")
        st.start(timeout_s)
        return st


class _HasPort(Protocol):
    @property
    def port(self) -> int: ...


S = TypeVar("S", bound=_HasPort)


class LoopThread(Generic[S]):
    """Runs an async service on a fresh event loop in a daemon thread (tests, tools); ``start``
    returns once it listens, ``stop`` stops the service, then the loop."""

    def __init__(self, server: S, start: Callable[[], Coroutine[Any, Any, None]],
                 stop: Callable[[], Coroutine[Any, Any, None]],
                 name: str) -> None:
        self.server = server
        self._start = start
        self._stop = stop
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def port(self) -> int:
        return self.server.port

    def start(self, timeout_s: float) -> None:
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise TimeoutError(f"{self._thread.name} did not start in time")
        if self._error is not None:
            self._thread.join(timeout_s)
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as exc:  # noqa: BLE001 - the loop thread's top: surfaced by start()
            self._error = exc
            self._started.set()
            self.loop.close()
            return
        self._started.set()
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._stop(), self.loop)
        try:
            future.result(timeout_s)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout_s)


ServerThread = LoopThread[RemotingServer]
