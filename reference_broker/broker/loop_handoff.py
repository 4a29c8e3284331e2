"""Answers that cross from a store thread to the event loop, in batches.

A put that waits (SYNC_FLUSH's group commit, SYNC_MASTER's replication) is completed on another thread — the
group commit's, or the HA reader's that brought the slave's acknowledgement — and one completion releases
many puts at once. ``asyncio``'s ``call_soon_threadsafe`` wakes the loop through its self-pipe on every call: a
write syscall on the completing thread, a read and a loop turn on the loop's, once per put. ``LoopHandoff``
queues the completed answers and wakes the loop once per batch: the first answer of a batch schedules the
drain, the others join the queue until the loop has drained it. An answer completed on the loop's own thread
(the master reads its slaves' acknowledgements there) is set at once.

An answer goes either to an ``asyncio.Future`` or to a ``LaterReply`` (a send's answer to the server): the
drain settles a LaterReply directly, where a future's ``set_result`` would schedule each of its callbacks
through the loop once more.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any

from reference_broker.remoting.later_reply import LaterReply


class LoopHandoff:
    """Resolve futures of one event loop from any thread, one loop wake-up per batch."""

    __slots__ = ("_items", "_lock", "_loop", "_owner", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Made on the loop's thread (from a coroutine or callback of ``loop``)."""
        self._loop = loop
        self._owner = threading.get_ident()
        self._lock = threading.Lock()
        self._items: deque[tuple[asyncio.Future[Any] | LaterReply, bool, Any]] = deque()
        self._scheduled = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def resolve(self, fut: asyncio.Future[Any], result: Any) -> None:
        self._put(fut, True, result)

    def fail(self, fut: asyncio.Future[Any], exc: BaseException) -> None:
        self._put(fut, False, exc)

    def answer(self, reply: LaterReply, ok: bool, value: Any) -> None:
        """Settle ``reply`` on the loop: with the response (``ok``) or the exception the handler failed with."""
        self._put(reply, ok, value)

    def _put(self, target: asyncio.Future[Any] | LaterReply, ok: bool, value: Any) -> None:
        if threading.get_ident() == self._owner:  # completed on the loop itself (the HA reader): no wake-up
            _settle(target, ok, value)
            return
        with self._lock:
            self._items.append((target, ok, value))
            if self._scheduled:
                return  # the drain is on its way and takes this one too
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed (shutdown): nobody waits for the answer any more
            with self._lock:
                self._items.clear()
                self._scheduled = False

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for target, ok, value in items:
            _settle(target, ok, value)


def _settle(target: asyncio.Future[Any] | LaterReply, ok: bool, value: Any) -> None:
    if type(target) is LaterReply:
        target.settle(ok, value)
        return
    assert isinstance(target, asyncio.Future)
    if target.done():
        return  # cancelled: the connection went away
    if ok:
        target.set_result(value)
    else:
        target.set_exception(value)
